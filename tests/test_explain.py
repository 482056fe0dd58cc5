"""eligibility explain: the derivation object, its renderings, the JSON contract, the CLI."""

from __future__ import annotations

import builtins
import json
import os
from pathlib import Path

import numpy as np
import pytest

import eligibility
from eligibility.cli import main
from eligibility.explain import explain

torch = pytest.importorskip("torch")

GOLDEN = Path(__file__).parent / "test_explain_golden"
EXAMPLE = ["categorical", "--probs", "0.69", "0.1", "0.2", "0.01", "--action", "0"]


def run_cli(capsys, argv):
    code = main(["explain", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def golden(name: str, text: str) -> None:
    """Compare with tests/test_explain_golden/NAME (ELIGIBILITY_UPDATE_GOLDEN=1 rewrites it)."""
    path = GOLDEN / name
    if os.environ.get("ELIGIBILITY_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def without_autograd(text: str) -> str:
    """The output up to the autograd section (whose figures depend on torch's build)."""
    return text.split("Autograd cross-check")[0]


def in_order(text: str, needles: list[str]) -> None:
    pos = 0
    for s in needles:
        found = text.find(s, pos)
        assert found >= 0, f"{s!r} missing after position {pos}"
        pos = found + len(s)


# the example of the question -----------------------------------------------------------------

EXAMPLE_NUMBERS = [
    "-0.3711",  # log π_a
    "0.6900",  # π_a
    "[0.4493, -1.0000, -1.0000, -1.0000]",  # e
    "0.6900",  # log_prob.grad
    "[0.3100, -0.6900, -0.6900, -0.6900]",  # π_a e = probs.grad
]


def test_example_text_golden(capsys):
    code, out, err = run_cli(capsys, [*EXAMPLE, "--autograd"])
    assert code == 0 and err == ""
    assert "\x1b[" not in out  # piped: plain text
    golden("categorical_probs.txt", without_autograd(out))
    in_order(out, ["Forward pass", *EXAMPLE_NUMBERS[:3], "Chain rule through exp"])
    in_order(
        out,
        [
            "Chain rule",
            "prob.grad",
            "1.0000",
            "log_prob.grad",
            "0.6900",
            EXAMPLE_NUMBERS[4],
            "not zero",
            "[1.4493, 0.0000, 0.0000, 0.0000]",
            "[0.0045, -0.0100, -0.0100, -0.0100]",
            "[0.0031, -0.0069, -0.0069, -0.0069]",
            "onehot(a) − softmax(z)",
            "Autograd cross-check",
            "Largest absolute",
        ],
    )


@pytest.mark.parametrize("fmt", ["text", "markdown", "latex"])
def test_example_numbers_in_every_format(capsys, fmt):
    code, out, _ = run_cli(capsys, [*EXAMPLE, "--format", fmt])
    assert code == 0
    if fmt == "latex":
        out = out.replace(r",\ ", ", ").replace(r"\bigl", "").replace(r"\bigr", "")
        assert out.isascii()
    in_order(out, EXAMPLE_NUMBERS)


def test_example_json_contract(capsys):
    code, out, _ = run_cli(capsys, [*EXAMPLE, "--format", "json", "--autograd"])
    assert code == 0
    j = json.loads(out)
    assert j["distribution"] == "categorical"
    assert j["parameters"] == {"probs": [0.69, 0.1, 0.2, 0.01]}
    assert j["value"] == 0
    assert round(j["log_prob"], 4) == -0.3711 and round(j["prob"], 4) == 0.69
    assert [round(v, 4) for v in j["score"]["probs"]] == [0.4493, -1, -1, -1]
    assert [round(v, 4) for v in j["prob_gradient"]["probs"]] == [0.31, -0.69, -0.69, -0.69]
    assert j["upstream"] == {"log_prob.grad": pytest.approx(0.69), "prob.grad": 1.0}
    assert j["autograd"]["available"] is True
    assert 0.0 <= j["autograd"]["max_abs_diff"] < 1e-12


def test_example_json_matches_the_snippet_autograd(capsys):
    """The question's own snippet, run in torch, against the JSON (float64)."""
    _, out, _ = run_cli(capsys, [*EXAMPLE, "--format", "json"])
    j = json.loads(out)
    probs = torch.tensor([[0.69, 0.1, 0.2, 0.01]], dtype=torch.float64, requires_grad=True)
    log_prob = torch.distributions.Categorical(probs=probs).log_prob(torch.tensor([0]))
    log_prob.retain_grad()
    prob = torch.exp(log_prob)
    prob.retain_grad()
    prob.backward()
    np.testing.assert_allclose(j["log_prob"], log_prob.item(), rtol=1e-12)
    np.testing.assert_allclose(j["prob"], prob.item(), rtol=1e-12)
    np.testing.assert_allclose(j["prob_gradient"]["probs"], probs.grad[0].numpy(), atol=1e-12)
    np.testing.assert_allclose(j["upstream"]["log_prob.grad"], log_prob.grad.item(), rtol=1e-12)
    assert j["upstream"]["prob.grad"] == prob.grad.item()


def test_times_100_same_values_gradients_100x_smaller(capsys):
    _, out1, _ = run_cli(capsys, [*EXAMPLE, "--format", "json"])
    _, out100, _ = run_cli(
        capsys,
        ["categorical", "--probs", "69", "10", "20", "1", "--action", "0", "--format", "json"],
    )
    j1, j100 = json.loads(out1), json.loads(out100)
    assert j100["log_prob"] == pytest.approx(j1["log_prob"], abs=1e-14)
    assert j100["prob"] == pytest.approx(j1["prob"], abs=1e-14)
    for key in ("score", "prob_gradient"):
        np.testing.assert_allclose(
            np.array(j100[key]["probs"]) * 100, j1[key]["probs"], rtol=1e-12, atol=1e-14
        )
    _, text100, _ = run_cli(
        capsys, ["categorical", "--probs", "69", "10", "20", "1", "--action", "0"]
    )
    golden("categorical_probs_x100.txt", without_autograd(text100))
    in_order(
        text100,
        [
            "-0.3711",
            "0.6900",
            "[0.0045, -0.0100, -0.0100, -0.0100]",
            "[0.0031, -0.0069, -0.0069, -0.0069]",
        ],
    )


# the other distributions ---------------------------------------------------------------------

OTHERS = {
    "categorical_logits.txt": [
        "categorical",
        "--logits",
        "1.2",
        "-0.3",
        "0.5",
        "--action",
        "2",
        "--features",
        "1",
        "-2",
    ],
    "multinomial_probs.txt": [
        "multinomial",
        "--total-count",
        "3",
        "--probs",
        "0.5",
        "0.3",
        "0.2",
        "--value",
        "2",
        "0",
        "1",
    ],
    "bernoulli_probs.txt": ["bernoulli", "--probs", "0.3", "--value", "1"],
    "bernoulli_logits.txt": ["bernoulli", "--logits", "0.4", "-1", "--value", "1", "0"],
    "normal.txt": ["normal", "--loc", "0.5", "--scale", "2", "--value", "1.2"],
    "beta.txt": ["beta", "--concentration1", "2", "--concentration0", "3", "--value", "0.3"],
}


@pytest.mark.parametrize("name", sorted(OTHERS))
def test_other_distributions_golden(capsys, name):
    code, out, err = run_cli(capsys, OTHERS[name])
    assert code == 0 and err == ""
    golden(name, without_autograd(out))


def test_bernoulli_is_williams_rule(capsys):
    _, out, _ = run_cli(capsys, [*OTHERS["bernoulli_probs.txt"], "--format", "json"])
    j = json.loads(out)
    # (y − p) / (p (1 − p)) with y = 1, p = 0.3, worked by hand: 0.7 / 0.21
    assert j["score"]["probs"] == [pytest.approx(0.7 / 0.21, rel=1e-12)]
    assert j["other_view"]["score"]["logits"] == [pytest.approx(0.7, rel=1e-12)]


def test_multinomial_and_normal_by_hand(capsys):
    _, out, _ = run_cli(capsys, [*OTHERS["multinomial_probs.txt"], "--format", "json"])
    j = json.loads(out)
    # x_i / w_i − n / Σw = (2/0.5 − 3, 0 − 3, 1/0.2 − 3)
    np.testing.assert_allclose(j["score"]["probs"], [1.0, -3.0, 2.0], rtol=1e-12)
    np.testing.assert_allclose(j["other_view"]["score"]["logits"], [0.5, -0.9, 0.4], atol=1e-12)
    _, out, _ = run_cli(capsys, [*OTHERS["normal.txt"], "--format", "json"])
    j = json.loads(out)
    np.testing.assert_allclose(j["score"]["loc"], [0.7 / 4], rtol=1e-12)
    np.testing.assert_allclose(j["score"]["scale"], [(0.49 - 4) / 8], rtol=1e-12)


# JSON against torch autograd, computed here independently of the module's own check ---------

AUTOGRAD_CASES = [
    ("categorical", {"probs": [[0.69, 0.1, 0.2, 0.01], [0.5, 0.5, 0.0, 0.0]]}, [0, 1]),
    ("categorical", {"logits": [[1.2, -0.3, 0.5], [0.0, 2.0, -np.inf]]}, [2, 0]),
    ("multinomial", {"total_count": 4, "probs": [0.2, 0.5, 0.3]}, [1, 3, 0]),
    ("multinomial", {"total_count": 2, "logits": [[0.1, -1.0], [2.0, 0.5]]}, [[2, 0], [1, 1]]),
    ("bernoulli", {"probs": [0.3, 0.8, 0.5]}, [1, 0, 0]),
    ("bernoulli", {"logits": [[0.4], [-2.0]]}, [[1], [1]]),
    ("normal", {"loc": [0.5, -1.0], "scale": [2.0, 0.3]}, [1.2, -1.1]),
    (
        "beta",
        {"concentration1": [[2.0, 0.5], [1.0, 9.0]], "concentration0": [[3.0, 0.7], [1.0, 0.2]]},
        [[0.3, 0.9], [0.01, 0.999]],
    ),
]


def torch_reference(dist, params, value, through):
    names = {
        "bernoulli": "Bernoulli",
        "categorical": "Categorical",
        "multinomial": "Multinomial",
        "normal": "Normal",
        "beta": "Beta",
    }
    leaves = {
        k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
        for k, v in params.items()
        if k != "total_count"
    }
    kwargs = dict(leaves)
    if "total_count" in params:
        kwargs["total_count"] = params["total_count"]
    d = getattr(torch.distributions, names[dist])(**kwargs, validate_args=False)
    vt = torch.tensor(value, dtype=torch.int64 if dist == "categorical" else torch.float64)
    lp = d.log_prob(vt)
    (lp.exp() if through == "exp" else lp).sum().backward()
    return lp.detach().numpy(), {k: t.grad.numpy() for k, t in leaves.items()}


@pytest.mark.parametrize(("dist", "params", "value"), AUTOGRAD_CASES)
def test_json_against_torch_autograd(dist, params, value):
    j = json.loads(explain(dist, value, autograd=True, **params).to_json())
    lp, g_log = torch_reference(dist, params, value, "log")
    _, g_exp = torch_reference(dist, params, value, "exp")
    np.testing.assert_allclose(j["log_prob"], lp, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(j["prob"], np.exp(lp), rtol=1e-12, atol=1e-12)
    for k in g_log:
        np.testing.assert_allclose(j["score"][k], g_log[k], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(j["prob_gradient"][k], g_exp[k], rtol=1e-9, atol=1e-12)
    assert j["autograd"]["available"] and j["autograd"]["max_abs_diff"] < 1e-12


def test_linear_unit_matches_plain_loop_and_autograd():
    x = explain("categorical", 1, logits=[0.3, -0.2, 1.0], features=[2.0, -1.0, 0.5], autograd=True)
    e_z = x.score["logits"]
    for i in range(3):
        for j, xj in enumerate([2.0, -1.0, 0.5]):
            assert x.linear["W"][i, j] == pytest.approx(e_z[i] * xj, abs=1e-15)
    np.testing.assert_array_equal(x.linear["b"], e_z)
    # autograd of a real linear unit with random W: the rule depends on z only
    rng = np.random.default_rng(0)
    w = torch.tensor(rng.normal(size=(3, 3)), requires_grad=True)
    h = torch.tensor([2.0, -1.0, 0.5], dtype=torch.float64)
    b = torch.tensor([0.3, -0.2, 1.0], dtype=torch.float64) - (w @ h).detach()
    torch.distributions.Categorical(logits=w @ h + b).log_prob(torch.tensor(1)).backward()
    np.testing.assert_allclose(x.linear["W"], w.grad.numpy(), atol=1e-12)
    assert x.autograd.differences["linear.W"] < 1e-12


def test_linear_unit_only_with_features():
    """No features: no linear unit and no linear cross-check; p ∈ {0, 1}: no logit to feed one."""
    assert explain("bernoulli", 1, probs=0.3).linear is None
    x = explain("normal", 1.2, loc=0.5, scale=2.0, features=[1.0, -2.0], autograd=True)
    np.testing.assert_array_equal(x.linear["b"], x.score["loc"])
    assert x.autograd.differences["linear.W"] < 1e-12
    with pytest.raises(ValueError, match="features need finite logits"):
        explain("bernoulli", 1, probs=1.0, features=[1.0])


def test_substituted_terms_add_up_to_the_core():
    """The table's δᵢₐ/wₐ and −1/Σw columns, summed, give the kernel's eᵢ."""
    from eligibility.explain.doc import Table

    w = np.array([0.4, 1.3, 0.0, 2.2])
    x = explain("categorical", 3, probs=w)
    np.testing.assert_allclose(np.eye(4)[3] / w[3] - 1 / w.sum(), x.score["probs"], rtol=1e-15)
    np.testing.assert_allclose(np.sum(w * x.score["probs"]), 0.0, atol=1e-15)
    # the substituted columns as shown, read from the derivation itself
    [table] = [
        b
        for sec in x.parts[0].sections
        for b in sec.blocks
        if isinstance(b, Table) and [getattr(h, "text", h) for h in b.header][2:3] == ["δᵢₐ / wₐ"]
    ]
    cols = np.array([[c.x for c in row[2:]] for row in table.rows])
    np.testing.assert_allclose(cols[:, 0] + cols[:, 1], x.score["probs"], rtol=1e-15)
    np.testing.assert_allclose(cols[:, 2], x.score["probs"], rtol=1e-15)


# batches, options, API -----------------------------------------------------------------------


def test_batched_rows_explained_row_by_row(capsys):
    code, out, _ = run_cli(
        capsys, ["categorical", "--probs", "0.69 0.1 0.2 0.01", "0.5 0.5 0 0", "--action", "0", "1"]
    )
    assert code == 0
    in_order(
        out,
        [
            "2 rows",
            "row 0",
            "[0.4493, -1.0000, -1.0000, -1.0000]",
            "row 1",
            "[-1.0000, 1.0000, -1.0000, -1.0000]",
            "Autograd",
        ],
    )
    _code2, out2, _ = run_cli(
        capsys, ["categorical", "--probs", "0.69 0.1 0.2 0.01; 0.5 0.5 0 0", "--action", "0", "1"]
    )
    assert out2 == out


def test_through_log_and_exp(capsys):
    _, both, _ = run_cli(capsys, EXAMPLE)
    _, log, _ = run_cli(capsys, [*EXAMPLE, "--through", "log"])
    _, exp, _ = run_cli(capsys, [*EXAMPLE, "--through", "exp"])
    assert "Chain rule through exp" in both and "Chain rule through exp" in exp
    assert "Chain rule through exp" not in log and "-0.6900" not in log
    assert "score.probs" not in exp.split("Autograd")[1]
    assert "prob_gradient.probs" not in log.split("Autograd")[1]


def test_precision(capsys):
    _, out, _ = run_cli(capsys, [*EXAMPLE, "--precision", "2"])
    in_order(out, ["-0.37", "[0.45, -1.00, -1.00, -1.00]", "[0.31, -0.69, -0.69, -0.69]"])
    assert "0.4493" not in out


def test_python_api_and_formats():
    x = eligibility.explain("categorical", 0, probs=[0.69, 0.1, 0.2, 0.01])
    assert "0.4493" in x.to_text() and "0.4493" in x.to_markdown()
    assert "0.4493" in x.to_latex() and json.loads(x.to_json())["value"] == 0
    assert "\x1b[" in x.to_text(color=True) and "\x1b[" not in x.to_text()


def test_torch_tensor_inputs():
    p = torch.tensor([0.69, 0.1, 0.2, 0.01], dtype=torch.float32)
    x = explain("categorical", torch.tensor(0), probs=p)
    assert [round(v, 4) for v in x.score["probs"].tolist()] == [0.4493, -1.0, -1.0, -1.0]


def test_masked_logit_is_strict_json():
    x = explain("categorical", 0, logits=[0.0, 1.0, -np.inf])
    j = json.loads(x.to_json())  # allow_nan=False would have raised on -inf
    assert j["parameters"]["logits"][2] == "-inf" and j["score"]["logits"][2] == 0.0


# bad input: one line on stderr, exit 2, no traceback ----------------------------------------

BAD = {
    "missing action": ["categorical", "--probs", "0.5", "0.5"],
    "unknown distribution": ["poisson", "--probs", "1", "--action", "0"],
    "unparsable number": ["categorical", "--probs", "0.5", "abc", "--action", "0"],
    "negative weight": ["categorical", "--probs", "0.5", "-0.1", "--action", "0"],
    "zero sum": ["categorical", "--probs", "0", "0", "--action", "0"],
    "action out of range": ["categorical", "--probs", "0.5", "0.5", "--action", "2"],
    "non-integer action": ["categorical", "--probs", "0.5", "0.5", "--action", "0.5"],
    "zero-probability action": ["categorical", "--probs", "0.5", "0", "--action", "1"],
    "both probs and logits": ["categorical", "--probs", "1", "--logits", "1", "--action", "0"],
    "neither probs nor logits": ["categorical", "--action", "0"],
    "wrong number of actions": ["categorical", "--probs", "1", "2", "--action", "0", "1"],
    "ragged rows": ["categorical", "--probs", "1 2", "1 2 3", "--action", "0"],
    "foreign flag": ["categorical", "--probs", "1", "2", "--loc", "0", "--action", "0"],
    "missing total count": ["multinomial", "--probs", "1", "1", "--value", "1", "0"],
    "counts off total": [
        "multinomial",
        "--total-count",
        "2",
        "--probs",
        "1",
        "1",
        "--value",
        "1",
        "0",
    ],
    "bernoulli out of [0, 1]": ["bernoulli", "--probs", "1.5", "--value", "1"],
    "bernoulli value 2": ["bernoulli", "--probs", "0.5", "--value", "2"],
    "missing scale": ["normal", "--loc", "0", "--value", "1"],
    "scale not positive": ["normal", "--loc", "0", "--scale", "0", "--value", "1"],
    "loc and scale mismatch": [
        "normal",
        "--loc",
        "0",
        "1",
        "--scale",
        "1",
        "2",
        "3",
        "--value",
        "1",
    ],
    "bad precision": [*EXAMPLE, "--precision", "-1"],
    "bad format": [*EXAMPLE, "--format", "xml"],
    "bad through": [*EXAMPLE, "--through", "sideways"],
    "features wrong rows": [
        "categorical",
        "--probs",
        "1 2",
        "3 4",
        "--action",
        "0",
        "1",
        "--features",
        "1 2",
        "3 4",
        "5 6",
    ],
    "no numbers": ["categorical", "--probs", ";", "--action", "0"],
}


def test_bad_input_one_line_exit_2(capsys):
    """Each of :data:`BAD` in turn (one test: a test a case cost more than its parse); every
    case answered otherwise than by one line on stderr and exit 2 is named."""
    wrong = {}
    for name in sorted(BAD):
        try:
            code = main(["explain", *BAD[name]])
        except SystemExit as exc:  # argparse errors exit from inside parse_args
            code = exc.code
        out, err = capsys.readouterr()
        one_line = err.count("\n") == 1 and "error:" in err and "Traceback" not in err
        if code != 2 or out != "" or not one_line:
            wrong[name] = (code, out, err)
    assert not wrong, wrong


def test_bad_input_python_api():
    with pytest.raises(ValueError, match="through"):
        explain("categorical", 0, probs=[1, 1], through="sideways")
    with pytest.raises(ValueError, match="probs"):
        explain("categorical", 0, probs=[-1, 1])


# without torch --------------------------------------------------------------------------------


def test_without_torch(monkeypatch, capsys):
    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):  # `import torch` raises; modules that hold it keep it
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    code, out, err = run_cli(capsys, [*EXAMPLE, "--autograd"])
    assert code == 0 and err == ""
    assert "torch is not importable" in out
    in_order(out, EXAMPLE_NUMBERS)
    _, out, _ = run_cli(capsys, [*EXAMPLE, "--format", "json", "--autograd"])
    j = json.loads(out)
    assert j["autograd"]["available"] is False and j["autograd"]["differences"] == {}
    assert j["autograd"]["reason"].startswith("torch is not importable here")
    assert [round(v, 4) for v in j["score"]["probs"]] == [0.4493, -1, -1, -1]


def test_docs_page_shows_the_real_output(capsys):
    """docs/categorical-eligibility.md pastes the command's output; it must still be current."""
    doc = (Path(__file__).parents[1] / "docs" / "categorical-eligibility.md").read_text("utf-8")
    pasted = doc.split("Output, as printed")[1].split("```text\n", 1)[1].split("```", 1)[0]
    _, out, _ = run_cli(capsys, EXAMPLE)
    assert without_autograd(pasted) == without_autograd(out)
    pasted_json = doc.split("```json\n", 1)[1].split("```", 1)[0]
    _, out, _ = run_cli(capsys, [*EXAMPLE, "--format", "json"])
    fresh, old = json.loads(out), json.loads(pasted_json)
    fresh.pop("autograd"), old.pop("autograd")
    assert fresh == old


# Beta: the digamma rule, in every format, against mpmath -------------------------------------

BETA = ["beta", "--concentration1", "2", "--concentration0", "3", "--value", "0.3"]


@pytest.mark.parametrize("fmt", ["text", "markdown", "latex", "json"])
def test_beta_every_format(capsys, fmt):
    code, out, err = run_cli(capsys, [*BETA, "--format", fmt, "--autograd"])
    assert code == 0 and err == ""
    if fmt == "json":
        j = json.loads(out)
        assert j["distribution"] == "beta" and j["value"] == [0.3]
        assert j["autograd"]["available"] and j["autograd"]["max_abs_diff"] < 1e-12
        assert set(j["score"]) == {"concentration1", "concentration0"}
    else:
        # e_α = ln 0.3 − ψ(2) + ψ(5) and e_β = ln 0.7 − ψ(3) + ψ(5), shown to 4 decimals
        in_order(out, ["-0.1206", "0.2267", "Autograd cross-check"])
    if fmt == "latex":
        assert out.isascii() and "?" not in out


def test_beta_rule_against_mpmath():
    """The eligibilities and the mean E[ln y] shown, against mpmath at 30 digits."""
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(30):  # not mp.dps =: other modules set their own precision
        a, b, y = 2.5, 0.7, 0.93
        x = explain("beta", y, concentration1=a, concentration0=b)

        def log_density(aa, bb, yy):
            return (
                (aa - 1) * mpmath.log(yy)
                + (bb - 1) * mpmath.log(1 - yy)
                - mpmath.log(mpmath.beta(aa, bb))
            )

        e_a = mpmath.diff(lambda t: log_density(t, b, y), a)
        e_b = mpmath.diff(lambda t: log_density(a, t, y), b)
        assert float(x.log_prob) == pytest.approx(float(log_density(a, b, y)), rel=1e-13)
        assert float(x.score["concentration1"]) == pytest.approx(float(e_a), rel=1e-12)
        assert float(x.score["concentration0"]) == pytest.approx(float(e_b), rel=1e-12)
        # "Reading the rule" shows E[ln y] = ψ(α) − ψ(α + β): check it by quadrature
        mean_log_y = mpmath.quad(
            lambda t: mpmath.log(t) * mpmath.exp(log_density(a, b, t)), [0, 0.5, 1]
        )
        reading = next(s for s in x.parts[0].sections if s.title == "Reading the rule")
        shown = reading.blocks[0].pieces[1]
        assert shown.xs[0] == pytest.approx(float(mean_log_y), rel=1e-10)


def test_beta_bad_input_one_line(capsys):
    for argv in (
        ["beta", "--concentration1", "2", "--value", "0.3"],
        ["beta", "--concentration1", "2", "--concentration0", "-1", "--value", "0.3"],
        ["beta", "--concentration1", "2", "--concentration0", "3", "--value", "1.5"],
        [*BETA, "--features", "1", "2"],
    ):
        code, out, err = run_cli(capsys, argv)
        assert code == 2 and out == "" and err.count("\n") == 1 and "error:" in err


def test_every_distribution_has_a_derivation():
    """The explain table covers the core's registry: a new distribution must add its module."""
    from eligibility.api import DISTRIBUTIONS
    from eligibility.explain import DERIVATIONS

    assert set(DERIVATIONS) == set(DISTRIBUTIONS)


@pytest.mark.parametrize("name", sorted(OTHERS))
def test_latex_spells_every_formula(capsys, name):
    """Each formula is written once in Unicode; its LaTeX must be ASCII, no placeholder left."""
    code, out, _ = run_cli(capsys, [*OTHERS[name], "--format", "latex"])
    assert code == 0 and out.isascii()
    assert "?" not in out  # render's placeholder for an unknown character


def test_to_tex_by_hand():
    from eligibility.explain.notation import to_tex

    assert to_tex("∂ ln πₐ/∂W = e_z xᵀ") == r"\partial \ln \pi_{a}/\partial W = e_{z} x^{\top}"
    assert to_tex("ln N(y; μ, σ)") == r"\ln \mathcal{N}(y; \mu, \sigma)"
    assert to_tex("n softmax(z)") == r"n \mathrm{softmax}(z)"


def test_the_cross_check_runs_when_asked_and_says_how_to_ask_when_not(capsys):
    code, out, err = run_cli(capsys, EXAMPLE)
    assert code == 0 and err == ""
    in_order(out, [*EXAMPLE_NUMBERS, "Autograd cross-check", "Not run", "--autograd"])
    assert "Largest absolute" not in out
    _, out, _ = run_cli(capsys, [*EXAMPLE, "--format", "json"])
    j = json.loads(out)["autograd"]
    assert j["available"] is False and j["differences"] == {} and "--autograd" in j["reason"]
    asked = explain("categorical", 0, probs=[0.69, 0.1, 0.2, 0.01], autograd=True)
    assert asked.autograd.available and asked.autograd.max_abs_diff < 1e-12
    assert not explain("categorical", 0, probs=[0.69, 0.1, 0.2, 0.01]).autograd.available
