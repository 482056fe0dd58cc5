"""explain's rough edges: -inf on the command line, LaTeX (compiled), torch's docstring cited."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from eligibility.cli import main
from eligibility.distributions import REGISTRY
from eligibility.explain import explain
from eligibility.explain.categorical import TORCH_PROBS_NOTE, TORCH_PROBS_SOURCE

DOCS = Path(__file__).parents[1] / "docs" / "categorical-eligibility.md"
EXAMPLE = ["categorical", "--probs", "0.69", "0.1", "0.2", "0.01", "--action", "0"]


def run_cli(capsys, argv):
    code = main(["explain", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# -inf and tiny numbers are numbers, not options ---------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (["0", "1", "-inf"], [0.0, 1.0, -np.inf]),
        (["-inf", "0", "2"], [-np.inf, 0.0, 2.0]),
        (["−∞", "0", "2"], [-np.inf, 0.0, 2.0]),
        (["-1e-30", "-2.5", "-.5"], [-1e-30, -2.5, -0.5]),
    ],
)
def test_negative_infinity_and_exponents_parse_as_logits(capsys, tokens, expected):
    code, out, err = run_cli(capsys, ["categorical", "--logits", *tokens, "--action", "1"])
    assert (code, err) == (0, "")
    code, out, _ = run_cli(
        capsys, ["categorical", "--logits", *tokens, "--action", "1", "--format", "json"]
    )
    j = json.loads(out)
    got = [float(v) for v in j["parameters"]["logits"]]
    assert got == expected
    x = explain("categorical", 1, logits=expected)
    assert j["score"]["logits"] == pytest.approx(x.score["logits"].tolist(), abs=0)


def test_an_unknown_option_that_starts_with_minus_is_still_an_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["explain", *EXAMPLE, "-bogus"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == "" and "unrecognized arguments: -bogus" in err


# LaTeX ---------------------------------------------------------------------------------------


def test_latex_indexed_symbol_in_prose_is_one_piece_of_maths(capsys):
    """Σᵢ e_z,ᵢ was e\\_z,$_{i}$ (an escaped underscore, then a lone subscript)."""
    code, out, _ = run_cli(capsys, [*EXAMPLE, "--format", "latex"])
    assert code == 0
    assert r"e\_z" not in out
    assert r"$\sum_{i}$ $e_{z,i}$ = $0.0000$" in out
    assert r"log\_prob" in out  # code identifiers stay text
    assert r"``The \texttt{probs} argument must be" in out  # quotes and a code span
    assert "for every c $>$ 0" in out  # a bare > in text prints as ¿ (OT1)


def test_latex_greek_index_in_prose_is_maths(capsys):
    code, out, _ = run_cli(
        capsys, ["normal", "--loc", "0.5", "--scale", "2", "--value", "1.3", "--format", "latex"]
    )
    assert code == 0 and r"$e_{\mu}$ pushes" in out and r"e\_" not in out


def _latex_cases() -> list[list[str]]:
    cases = [
        [name, *shlex.split(line.split("#")[0])]
        for name, spec in REGISTRY.items()
        for line in spec.examples
    ]
    return [
        *cases,
        [*EXAMPLE, "--features", "1", "-2"],
        ["categorical", "--probs", "0.69 0.1 0.2 0.01", "0.5 0.5 0 0", "--action", "0", "1"],
        ["categorical", "--logits", "0", "1.5", "-inf", "--action", "1"],
    ]


@pytest.mark.skipif(
    shutil.which("pdflatex") is None,
    reason="no LaTeX engine (pdflatex) on this machine; `make latex` installs one",
)
def test_latex_output_compiles_with_pdflatex(capsys, tmp_path):
    """Every example's LaTeX, in one amsmath document, through a real engine, halting on errors."""
    bodies = []
    for argv in _latex_cases():
        code, out, _ = run_cli(capsys, [*argv, "--format", "latex"])
        assert code == 0, argv
        bodies.append(out)
    preamble = [r"\documentclass{article}", r"\usepackage{amsmath}", r"\begin{document}"]
    doc = "\n".join([*preamble, *bodies, r"\end{document}", ""])
    (tmp_path / "explain.tex").write_text(doc, encoding="ascii")
    proc = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "explain.tex"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = (tmp_path / "explain.log").read_text(errors="replace")
    assert proc.returncode == 0, log[-3000:]
    assert (tmp_path / "explain.pdf").stat().st_size > 10_000
    assert not re.search(r"^! ", log, re.M), log
    assert "Missing character" not in log


# torch's own words -----------------------------------------------------------------------------


def _squash(s: str) -> str:
    return " ".join(s.split())


def test_torch_docstring_quote_is_word_for_word():
    """The sentence explain quotes is in the installed torch's Categorical docstring."""
    torch = pytest.importorskip("torch")
    assert _squash(TORCH_PROBS_NOTE) in _squash(torch.distributions.Categorical.__doc__)
    source = Path(torch.distributions.categorical.__file__)
    assert source.as_posix().endswith(TORCH_PROBS_SOURCE.split(",")[0])
    assert TORCH_PROBS_SOURCE.endswith(f"torch {torch.__version__.split('+')[0]}")


def test_torch_docstring_cited_in_text_and_docs(capsys):
    _, out, _ = run_cli(capsys, EXAMPLE)
    assert _squash(f"({TORCH_PROBS_SOURCE}): “{TORCH_PROBS_NOTE}”") in _squash(out)
    doc = DOCS.read_text("utf-8")
    quoted = " ".join(line[2:] for line in doc.splitlines() if line.startswith("> "))
    assert _squash(TORCH_PROBS_NOTE) in _squash(quoted)
    assert "`torch/distributions/categorical.py`, torch 2.13.0" in doc


def test_text_rendering_inside_a_notebook(monkeypatch):
    """In Jupyter, rich displays HTML instead of writing to its file: to_text() came back empty."""
    import rich.console

    monkeypatch.setattr(rich.console, "_is_jupyter", lambda: True)
    text = explain("categorical", 0, probs=[0.69, 0.1, 0.2, 0.01]).to_text()
    assert "5. The same unit in logits" in text and "[0.3100, -0.6900, -0.6900, -0.6900]" in text


def test_logits_whose_weights_view_underflows_say_so(capsys):
    """[1000, 0] with a = 1 is a valid unit (ln π₁ = −1000) whose weight exp(−1000) is 0."""
    code, out, err = run_cli(capsys, ["categorical", "--logits", "1000", "0", "--action", "1"])
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "underflows to 0" in err and "weight 0" not in err
    with pytest.raises(ValueError, match="weight 0"):  # given as weights, the old message
        explain("categorical", 1, probs=[1.0, 0.0])
