"""Every registered distribution explains, renders and checks against autograd from its spec.

Nothing here names a distribution: the cases are the examples each spec carries, so a
distribution added in its four files (kernel-and-spec module, registry line, explain module,
head) is covered without a line written here. The shared modules of ``explain``, its command
line and the action-space map are also held to naming none (docs/eligibilities.md, "Adding a
distribution").
"""

from __future__ import annotations

import ast
import json
import shlex
from pathlib import Path

import pytest

import _source
from eligibility.cli import main
from eligibility.distributions import REGISTRY

torch = pytest.importorskip("torch")

SRC = Path(__file__).parents[1] / "src" / "eligibility"
FORMATS = ("text", "markdown", "latex", "json")
CASES = [
    pytest.param(name, line, FORMATS if i == 0 else ("json",), id=f"{name}-{i}")
    for name, spec in REGISTRY.items()
    for i, line in enumerate(spec.examples)
]
"""Every example of every spec; the first of each in every format, the others in JSON."""


def _explain(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main(["explain", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_every_distribution_has_an_example_a_torch_class_and_flags() -> None:
    for name, spec in REGISTRY.items():
        assert spec.examples, f"{name}: no example for explain"
        assert hasattr(torch.distributions, spec.torch_name), f"{name}: {spec.torch_name!r}"
        assert set(spec.flags) == set(spec.parameters), f"{name}: a parameter without a flag"
        for form in spec.forms.values():
            assert form.view, f"{name}: a form without a view"


@pytest.mark.parametrize(("name", "line", "formats"), CASES)
def test_explains_in_every_format_and_agrees_with_autograd(
    capsys, name: str, line: str, formats: tuple[str, ...]
) -> None:
    argv = [name, *shlex.split(line, comments=True)]
    outputs = {}
    for fmt in formats:
        code, out, err = _explain(capsys, [*argv, "--format", fmt, "--autograd"])
        assert (code, err) == (0, ""), (fmt, err)
        outputs[fmt] = out
    j = json.loads(outputs["json"])
    assert j["distribution"] == name
    assert set(j["score"]) <= set(REGISTRY[name].parameters)
    assert j["autograd"]["available"]
    assert j["autograd"]["max_abs_diff"] < 1e-9, j["autograd"]["differences"]
    assert {"log_prob", "prob"} <= set(j["autograd"]["differences"])
    assert any(k.startswith("score.") for k in j["autograd"]["differences"])
    if formats == ("json",):
        return
    for fmt in ("text", "markdown", "latex"):
        assert name in outputs[fmt].splitlines()[0 if fmt != "latex" else 1], fmt
        assert "Autograd cross-check" in outputs[fmt], fmt
    assert outputs["latex"].isascii() and "?" not in outputs["latex"]  # every symbol spelt
    assert "\x1b[" not in outputs["text"]  # piped: no colour


def _names_in(path: Path, compared_only: bool = False) -> list[tuple[int, str]]:
    """(line, name) of every string constant that is a distribution's name or torch class.

    ``compared_only``: only those compared with ``==``/``!=``/``in`` or used as dict keys (a
    switch or a table on the name), not a default argument.
    """
    names = set(REGISTRY) | {spec.torch_name for spec in REGISTRY.values()}
    tree = _source.parsed(path)
    nodes: list[ast.AST] = []
    for node in ast.walk(tree):
        if not compared_only:
            nodes.append(node)
        elif isinstance(node, ast.Compare):
            nodes += [node.left, *node.comparators]
            nodes += [e for c in node.comparators if isinstance(c, ast.Tuple) for e in c.elts]
        elif isinstance(node, ast.Dict):
            nodes += [k for k in node.keys if k is not None]
    return sorted(
        (n.lineno, n.value)
        for n in nodes
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names
    )


SHARED = [
    "explain/__init__.py",
    "explain/autograd.py",
    "explain/derivation.py",
    "explain/doc.py",
    "explain/explanation.py",
    "explain/notation.py",
    "explain/outline.py",
    "explain/render.py",
    "cli/explain.py",
    "api.py",
]


@pytest.mark.parametrize("module", SHARED)
def test_shared_modules_name_no_distribution(module: str) -> None:
    assert _names_in(SRC / module) == []


def test_the_action_space_map_switches_on_no_distribution_name() -> None:
    """Heads are chosen by space type and, for a Box, from the heads' own table."""
    assert _names_in(SRC / "reinforce" / "spaces.py", compared_only=True) == []


def test_the_plot_switches_on_no_distribution_name() -> None:
    """Which picture ``--plot`` draws is the spec's ``picture`` (tests/test_explain_plot.py)."""
    assert _names_in(SRC / "explain" / "plot.py", compared_only=True) == []


def test_the_switch_finder_finds_a_switch(tmp_path: Path) -> None:
    """The AST search above is not vacuous: it sees a switch and a table on a name."""
    name = next(iter(REGISTRY))
    f = tmp_path / "switch.py"
    f.write_text(f'x = 1 if d == "{name}" else 2\ny = d in ("{name}",)\nz = {{"{name}": 1}}\n')
    assert [line for line, _ in _names_in(f, compared_only=True)] == [1, 2, 3]


def test_one_tex_table_spells_prose_and_formulas_alike() -> None:
    """Σ is a sum in every derivation: \\sum in a formula and in prose (it was \\Sigma there)."""
    from eligibility.explain import render
    from eligibility.explain.doc import Document, Part, Section, paragraph
    from eligibility.explain.notation import SYMBOLS, to_tex

    assert to_tex("Σⱼ wⱼ") == r"\sum_{j} w_{j}"
    doc = Document(
        "t", (Part(None, (Section("s", (paragraph("with Σᵢ xᵢ = n"),)),)),), Section("c", ())
    )
    assert r"$\sum_{i}$" in render.latex(doc) and r"\Sigma" not in render.latex(doc)
    # every symbol prose can carry is spelt by the formulas' table, in maths mode
    for ch, tex in SYMBOLS.items():
        if ch not in "{}…":  # escaped as text in prose
            assert render._tex_prose(ch) == f"${tex}$", ch


def test_a_spec_adds_its_own_tex() -> None:
    from eligibility.explain.notation import FUNCTIONS, SYMBOLS

    for spec in REGISTRY.values():
        for symbol, tex in spec.tex.items():
            assert (FUNCTIONS | SYMBOLS)[symbol] == tex
