"""Every example of README.md and docs/ is collected here and run, or parsed where it cannot run.

- Every ``eligibility`` command is parsed by the command's own parser (a renamed option or a
  value its choices refuse fails here), and every ``explain`` command runs.
- Every ``python SCRIPT``, ``pytest FILE`` and ``make TARGET`` names something that exists.
- Every Python block compiles and its imports import; a block of ``>>>`` lines runs as a doctest;
  a whole program (every name it uses defined in it) runs, the cheap ones here and the ones that
  train in ``test_docs_examples_slow.py``.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import re
import sys
import types
from pathlib import Path

import pytest

from _doc_examples import ROOT, Block, Command, blocks, commands, imports_of, python_names

BLOCKS = blocks()
COMMANDS = [c for b in BLOCKS for c in commands(b)]
PYTHON = [b for b in BLOCKS if b.lang == "python"]
HEAVY = re.compile(r"\b(train|finetune|sweep|check|assert_unbiased)\(")
"""A program that calls one of these trains or checks: it runs among the slow tests."""


def _ids(items: list[Command] | list[Block]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for item in items:
        seen[item.where] = seen.get(item.where, 0) + 1
        out.append(item.where + (f"#{seen[item.where]}" if seen[item.where] > 1 else ""))
    return out


def of(program: str) -> list[Command]:
    return [c for c in COMMANDS if c.argv[0] == program]


@pytest.fixture(scope="module")
def parser():
    from eligibility.cli import build_parser

    return build_parser()


def test_the_collector_finds_the_examples() -> None:
    assert len(of("eligibility")) >= 100 and len(PYTHON) >= 20
    names = {c.argv[1] for c in of("eligibility")}
    assert {"explain", "train", "finetune", "check", "evaluate", "sweep", "export"} <= names


def test_every_command_parses(parser) -> None:
    """Each of the 150-odd commands, in turn (a test each cost more in pytest's bookkeeping
    than the parse): every one that fails is named, with its page and line."""
    failed = []
    for command in of("eligibility"):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                _, unknown = parser.parse_known_args(list(command.argv[1:]))
        except SystemExit:
            failed.append(f"{command.where}: `{command}` does not parse: {err.getvalue().strip()}")
            continue
        if unknown:
            failed.append(f"{command.where}: `{command}`: unknown arguments {unknown}")
    assert not failed, "\n".join(failed)


EXPLAIN = [c for c in of("eligibility") if c.argv[1] == "explain"]


@pytest.mark.parametrize("command", EXPLAIN, ids=_ids(EXPLAIN))
def test_every_explain_command_runs(command: Command, tmp_path, monkeypatch, capsys) -> None:
    from eligibility.cli import main

    monkeypatch.chdir(tmp_path)
    for name in {Path(a).parent for a in command.argv if a.endswith((".png", ".html"))}:
        (tmp_path / name).mkdir(parents=True, exist_ok=True)
    assert main(list(command.argv[1:])) == 0, capsys.readouterr().err


SCRIPTS = [c for c in of("python") if c.argv[1] != "-c"]


def test_every_script_named_exists() -> None:
    """Each ``python SCRIPT`` and ``python -m pytest FILE`` in turn; every one missing is named."""
    missing = []
    for command in SCRIPTS:
        argv = command.argv[1:]
        if argv[:2] == ("-m", "pytest"):
            files = [a.split("::")[0] for a in argv[2:] if a.startswith("tests/")]
            if not files or not all((ROOT / f).is_file() for f in files):
                missing.append(f"{command.where}: `{command}` names no test file here")
        elif not (ROOT / argv[0]).is_file():
            missing.append(f"{command.where}: no script {argv[0]}")
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("command", of("make"), ids=_ids(of("make")))
def test_every_make_target_named_exists(command: Command) -> None:
    makefile = (ROOT / "Makefile").read_text()
    for target in command.argv[1:]:
        if "=" not in target:
            assert re.search(rf"(?m)^{re.escape(target)}:", makefile), f"{command.where}: {target}"


INLINE = [c for c in of("python") if c.argv[1] == "-c"]


@pytest.mark.parametrize("command", INLINE, ids=_ids(INLINE))
def test_every_inline_program_compiles(command: Command) -> None:
    compile(command.argv[2], command.where, "exec")


@pytest.mark.parametrize("block", PYTHON, ids=_ids(PYTHON))
def test_every_python_block_compiles_and_its_imports_import(block: Block) -> None:
    if block.text.lstrip().startswith(">>>"):
        return  # a doctest: run below
    compile(block.text, block.where, "exec")
    exec(compile(imports_of(block.text), block.where, "exec"), {})


DOCTESTS = [b for b in PYTHON if b.text.lstrip().startswith(">>>")]


@pytest.mark.parametrize("block", DOCTESTS, ids=_ids(DOCTESTS))
def test_every_doctest_block_prints_what_it_says(block: Block) -> None:
    test = doctest.DocTestParser().get_doctest(block.text, {}, block.where, str(block.page), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out = io.StringIO()
    runner.run(test, out=out.write)
    assert runner.failures == 0, out.getvalue()


def whole_programs(heavy: bool) -> list[Block]:
    """The Python blocks that define every name they use: cheap ones, or those that train."""
    out = []
    for b in PYTHON:
        if b.text.lstrip().startswith(">>>") or python_names(b.text)[0]:
            continue
        if bool(HEAVY.search(b.text)) == heavy:
            out.append(b)
    return out


def run_program(block: Block, cwd: Path) -> None:
    """Run a whole program in ``cwd``, then the ``test_*`` functions it defines."""
    module = types.ModuleType("doc_example")  # a module of its own: dataclasses look it up
    sys.modules[module.__name__] = module
    try:
        exec(compile(block.text, block.where, "exec"), module.__dict__)
        for name, value in list(vars(module).items()):
            if name.startswith("test_") and callable(value):
                value()
    finally:
        del sys.modules[module.__name__]


CHEAP = whole_programs(heavy=False)


@pytest.mark.parametrize("block", CHEAP, ids=_ids(CHEAP))
def test_every_cheap_whole_program_runs(block: Block, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with contextlib.redirect_stdout(io.StringIO()):
        run_program(block, tmp_path)


FRAGMENTS = {
    ("check.md", frozenset({"my_loss", "my_grpo_loss"})): "the reader's own loss",
    (
        "check.md",
        frozenset({"assert_unbiased", "eligibility", "my_grpo_loss", "my_rloo_without_kl"}),
    ): ("the reader's own losses, continuing the page's first example"),
    ("check.md", frozenset({"assert_unbiased", "eligibility", "my_loss"})): "the reader's own loss",
    ("lab.md", frozenset({"A", "P", "R", "d", "gamma", "goal", "phi", "rho0"})): (
        "the reader's own MDP, its arrays described in the text above"
    ),
    ("training.md", frozenset({"obs", "batch_of_obs", "masks"})): "the reader's observations",
}
"""The Python blocks that use names the reader brings, and why: compiled and imported above,
not run. A new one fails the test below until it is declared here (or made whole)."""


def test_only_the_declared_fragments_are_not_run() -> None:
    found = {
        (b.page.name, frozenset(python_names(b.text)[0]))
        for b in PYTHON
        if not b.text.lstrip().startswith(">>>") and python_names(b.text)[0]
    }
    assert found == set(FRAGMENTS), (
        f"undeclared: {found - set(FRAGMENTS)}; gone: {set(FRAGMENTS) - found}"
    )


OPENING = re.findall(r"`(eligibility [^`]+)`", (ROOT / "README.md").read_text().split("\n## ")[0])


@pytest.mark.parametrize("line", OPENING)
def test_the_readmes_first_commands_parse(line: str, parser) -> None:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            _, unknown = parser.parse_known_args(line.split()[1:])
    except SystemExit:
        pytest.fail(f"README's opening: `{line}` does not parse: {err.getvalue().strip()}")
    assert not unknown and len(OPENING) >= 4
