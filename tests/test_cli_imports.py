"""The command line imports torch only for what uses it, and matplotlib only when it draws.

Truth: ``sys.modules`` of a fresh interpreter after the command (a behaviour, not a timing;
the light commands share one, which names the first that loads a module):
``eligibility --help`` and the NumPy backend's ``train`` path load neither; ``explain`` loads
torch only when asked for its autograd cross-check of the rule it derives (``--autograd``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

HEAVY = ("torch", "matplotlib", "transformers")


def _printed(probe: str) -> Any:
    """The JSON that a fresh interpreter running ``probe`` prints last."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _loaded_after(code: str) -> list[str]:
    """The heavy modules a fresh interpreter holds after running ``code``."""
    return _printed(
        f"import json, sys\n{code}\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )


_QUIET = "import contextlib, io\nfrom eligibility.cli import main\n"
_ANSWER = (  # a command run as the command line runs it, its output and exit swallowed
    "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
    "    try:\n        code = main({argv!r})\n    except SystemExit as stop:\n"
    "        code = stop.code\n"
    "assert code in {codes!r}, ({argv!r}, code)\n"
)
FINETUNE_ARGVS = [
    ["finetune", "--help"],
    ["finetune", "repeat", "--lr", "abc"],  # argparse's error: before any import of torch
    ["finetune", "repeat", "--loss_type", "ppo"],  # a TRL name's value it has no row for
]
LIGHT = {
    "eligibility --help": _QUIET + _ANSWER.format(argv=["--help"], codes=(0,)),
    # its torch cross-check runs when asked (--autograd: tests/test_explain.py)
    "explain categorical": _QUIET
    + _ANSWER.format(
        argv=["explain", "categorical", "--probs", "0.7", "0.3", "--action", "0"], codes=(0,)
    ),
    # train ENV parses, then loads the trainer and the NumPy agent (nor matplotlib: the run's
    # painter process draws the curve, tests/test_painter.py)
    "train CartPole-v1 --backend numpy": (
        "from eligibility.cli import build_parser, _command_of\n"
        "argv = ['train', 'CartPole-v1', '--backend', 'numpy']\n"
        "args = build_parser([_command_of(argv)]).parse_args(argv)\n"
        "from eligibility.reinforce import train\n"
        "from eligibility.backends import make_agent\n"
        "from eligibility.runs import RunDir\n"
    ),
    # the one table names both trainers; train's row (its config made as the command line
    # makes it, with --resume's identity) imports nothing of finetune's
    "the table's train row": (
        "from eligibility.trainers import lookup, made_by\n"
        "row = lookup('train')\n"
        "row.make('CartPole-v1', backend='numpy'); row.load('identity'); row.load('infinite')\n"
        "assert made_by('.') is None and lookup('finetune').subject == 'task'\n"
    ),
    # finetune's parser (its choices are the option table's names): help and a bad flag answer
    # before torch is imported (it was 1-9 s of import before them)
    **{" ".join(argv): _QUIET + _ANSWER.format(argv=argv, codes=(0, 2)) for argv in FINETUNE_ARGVS},
}
"""What answers without torch, matplotlib or transformers: the name of each, and its code."""


def test_help_explain_train_and_finetunes_parser_import_no_heavy_module():
    """``eligibility --help``, ``explain``, the NumPy backend's ``train`` path, the table of
    trainers' ``train`` row and ``finetune``'s parser (its help and its bad flags) each leave
    torch, matplotlib and transformers unimported.

    One interpreter runs them in turn, saying after each what it holds: a module once loaded
    stays, so the first probe that loads one is the one named (as an interpreter each would
    name it), and the rest then name it too."""
    script = ["import json, sys", "held = {}"]
    for i, (name, code) in enumerate(LIGHT.items()):
        script.append(f"def probe_{i}():\n" + textwrap.indent(code, "    "))
        script.append(f"probe_{i}()")
        script.append(f"held[{name!r}] = [m for m in {HEAVY!r} if m in sys.modules]")
    script.append("print(json.dumps(held))")
    assert _printed("\n".join(script)) == {name: [] for name in LIGHT}


def test_importing_the_package_leaves_its_names_for_their_first_use():
    """``import eligibility`` (every command's first import) loads neither NumPy nor the API,
    the explainer, the trainer, the sweep or ``check``'s engine; each name still reaches its
    function, and ``explain`` and ``sweep`` stay the functions once their subpackages are
    imported (which binds a parent's name to the package)."""
    got = _printed(
        "import json, sys\nimport eligibility\n"
        "held = [m for m in ('numpy', 'eligibility.api', 'eligibility.explain', "
        "'eligibility.reinforce', 'eligibility.sweep', 'eligibility.check.run') "
        "if m in sys.modules]\n"
        "from eligibility.check import CheckConfig, Episode, check, render_text\n"
        "import eligibility.check.frameworks.trl, eligibility.explain.render\n"
        "import eligibility.sweep.grid\n"
        "from eligibility import sweep\n"
        "print(json.dumps([held, callable(eligibility.check), check.__module__, "
        "CheckConfig.__module__, Episode.__module__, render_text.__module__, "
        "eligibility.explain.__module__, eligibility.sweep.__module__, sweep.__module__, "
        "eligibility.load.__module__, eligibility.Normal.__module__, "
        "float(eligibility.score('bernoulli', 1, probs=0.8)['probs'])]))"
    )
    run, report, user = (f"eligibility.check.{m}" for m in ("run", "report", "user"))
    assert got[:6] == [[], True, run, run, user, report]
    sweep = "eligibility.sweep.run"
    assert got[6:9] == ["eligibility.explain.derivation", sweep, sweep]
    assert got[9:11] == ["eligibility.reinforce.runs", "eligibility.objects"]
    assert got[11] == 1.25  # ∂ ln p / ∂p at a = 1: 1/p


@pytest.mark.slow  # `make test` collects doctests only from the modules that have them
def test_every_module_of_the_package_imports():
    """What ``--doctest-modules src/eligibility`` did on every run: import each module once."""
    probe = (
        "import importlib, pkgutil, eligibility\n"
        "for m in pkgutil.walk_packages(eligibility.__path__, 'eligibility.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        importlib.import_module(m.name)\n"
        "print(len(sys.modules))"
    )
    _loaded_after(probe)  # raises (check=True) with the failing import's traceback
