"""The command line imports torch only for what uses it, and matplotlib only when it draws.

Truth: ``sys.modules`` of a fresh interpreter after the command (a behaviour, not a timing):
``eligibility --help`` and the NumPy backend's ``train`` path load neither; ``explain`` loads
torch only for its autograd cross-check of the rule it derives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

HEAVY = ("torch", "matplotlib", "transformers")


def _loaded_after(code: str) -> list[str]:
    """The heavy modules a fresh interpreter holds after running ``code``."""
    probe = (
        f"import json, sys\n{code}\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_help_imports_neither_torch_nor_matplotlib():
    code = (
        "from eligibility.cli import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        main(['--help'])\n    except SystemExit:\n        pass"
    )
    assert _loaded_after(code) == []


def test_explain_imports_no_matplotlib_and_torch_only_for_its_autograd_cross_check():
    code = (
        "from eligibility.cli import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['explain', 'categorical', '--probs', '0.7', '0.3', '--action', '0']) == 0"
    )
    assert _loaded_after(code) == ["torch"]  # the cross-check of the rule against autograd


def test_the_numpy_train_path_imports_no_torch():
    """``train ENV`` parses, then loads the trainer and the NumPy agent: no torch on the way
    (matplotlib is loaded only where the curve is drawn, at the end of a run)."""
    code = (
        "from eligibility.cli import build_parser, _command_of\n"
        "argv = ['train', 'CartPole-v1', '--backend', 'numpy']\n"
        "args = build_parser([_command_of(argv)]).parse_args(argv)\n"
        "from eligibility.reinforce import train\n"
        "from eligibility.backends import make_agent\n"
        "from eligibility.runs import RunDir"
    )
    assert _loaded_after(code) == []


def test_importing_the_package_leaves_the_check_engine_for_its_first_use():
    """``import eligibility`` (every command's first import) does not load ``check``'s engine;
    the package's names and its call still reach it."""
    probe = (
        "import json, sys\nimport eligibility\n"
        "before = 'eligibility.check.run' in sys.modules\n"
        "from eligibility.check import CheckConfig, Episode, check, render_text\n"
        "import eligibility.check.frameworks.trl\n"
        "print(json.dumps([before, callable(eligibility.check), check.__module__, "
        "CheckConfig.__module__, Episode.__module__, render_text.__module__]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    run, report, user = (f"eligibility.check.{m}" for m in ("run", "report", "user"))
    assert got == [False, True, run, run, user, report]


def test_the_train_command_reads_the_table_of_trainers_without_torch():
    """The one table names both trainers; reading ``train``'s row (its config made as the
    command line makes it, with ``--resume``'s identity) imports nothing of ``finetune``'s."""
    code = (
        "from eligibility.trainers import lookup, made_by\n"
        "row = lookup('train')\n"
        "row.make('CartPole-v1', backend='numpy'); row.load('identity'); row.load('infinite')\n"
        "assert made_by('.') is None and lookup('finetune').subject == 'task'"
    )
    assert _loaded_after(code) == []
