"""explain --plot: the numbers drawn, read back from the figure's artists (not its pixels)."""

from __future__ import annotations

import shlex
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from eligibility.cli import main
from eligibility.distributions import REGISTRY
from eligibility.explain import explain
from eligibility.explain.plot import figure, score_curve

EXAMPLE = ["categorical", "--probs", "0.69", "0.1", "0.2", "0.01", "--action", "0"]


def bars(fig) -> dict[str, list[float]]:
    """Bar heights by label, over every panel."""
    return {
        c.get_label(): [p.get_height() for p in c.patches] for ax in fig.axes for c in ax.containers
    }


def lines(fig) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Line data by label, over every panel."""
    return {
        ln.get_label(): (np.asarray(ln.get_xdata()), np.asarray(ln.get_ydata()))
        for ax in fig.axes
        for ln in ax.get_lines()
        if not ln.get_label().startswith("_")
    }


def test_categorical_figure_draws_the_question_numbers():
    """π, ∂ ln πₐ/∂w, ∂πₐ/∂w (probs.grad: 0.31, −0.69 …) and the logits' gradients."""
    x = explain("categorical", 0, probs=[0.69, 0.1, 0.2, 0.01])
    drawn = bars(figure(x))
    assert drawn["π = w / Σⱼ wⱼ (green: sampled a)"] == pytest.approx([0.69, 0.1, 0.2, 0.01])
    log_w = drawn["∂ ln πₐ/∂w  (log_prob.backward())"]
    exp_w = drawn["∂πₐ/∂w  (prob.backward())"]
    assert log_w == x.score["probs"].tolist()
    assert exp_w == x.prob_gradient["probs"].tolist()
    assert exp_w == pytest.approx([0.31, -0.69, -0.69, -0.69], abs=1e-12)  # the question's
    assert drawn["∂ ln πₐ/∂z  (log_prob.backward())"] == x.other_view["score"]["logits"].tolist()
    assert drawn["∂πₐ/∂z  (prob.backward())"] == pytest.approx(
        (0.69 * x.other_view["score"]["logits"]).tolist(), rel=1e-15
    )


def test_categorical_figure_marks_the_action_and_the_sum_to_one_part():
    x = explain("categorical", 2, logits=[0.3, -1.0, 2.0, -np.inf])
    fig = figure(x)
    ax_pi, ax_w, ax_z = fig.axes
    for ax in (ax_pi, ax_w, ax_z):
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2 (a)", "3"]
    for c in ax_w.containers:
        widths = [p.get_linewidth() for p in c.patches]
        assert widths.index(max(widths)) == 2 and widths.count(max(widths)) == 1
    # the dashed lines: each weights gradient's component along (1, …, 1)
    e_w = x.other_view["score"]["probs"]
    dashed = {ln.get_label(): ln.get_ydata()[0] for ln in ax_w.get_lines() if ln.get_ls() == "--"}
    assert sorted(dashed.values()) == pytest.approx(
        sorted([np.mean(e_w), float(x.prob) * np.mean(e_w)]), rel=1e-12
    )
    assert "sum-to-one direction" in ax_w.get_xlabel()
    assert bars(fig)["∂ ln πₐ/∂z  (log_prob.backward())"] == x.score["logits"].tolist()


def test_weights_times_100_scale_only_the_weights_gradient():
    small = bars(figure(explain("categorical", 0, probs=[0.69, 0.1, 0.2, 0.01])))
    big = bars(figure(explain("categorical", 0, probs=[69.0, 10.0, 20.0, 1.0])))
    for label, ys in small.items():
        factor = 100.0 if "/∂w" in label else 1.0
        assert np.allclose(np.array(big[label]) * factor, ys, rtol=1e-12, atol=1e-15), label


def test_through_log_draws_only_the_log_prob_gradient():
    x = explain("categorical", 1, probs=[0.2, 0.8], through="log")
    assert not [k for k in bars(figure(x)) if "(prob.backward())" in k]


@pytest.mark.parametrize("name", [n for n in REGISTRY if n != "categorical"])
def test_score_against_the_parameter_matches_autograd(name):
    """The marked point is the text's eligibility; points of the curve are torch's autograd."""
    torch = pytest.importorskip("torch")
    from eligibility.cli.explain import params_from_args

    argv = shlex.split(REGISTRY[name].examples[0].split("#")[0])
    dist, params, value, _ = params_from_args(_parse([name, *argv]))
    x = explain(dist, value, **params)
    panels = []
    for ax in figure(x).axes:
        (curve, point) = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
        panels.append((ax.get_xlabel(), curve, point))
    assert len(panels) == sum(max(1, np.size(v)) for v in x.parameters.values())
    for sym, curve, point in panels:
        pname, _, rest = sym.partition("[")
        i = int(rest[:-1]) if rest else None
        assert curve.get_label() == f"∂ ln P/∂{sym}"
        assert point.get_ydata()[0] == py_at(x, pname, i)  # the number the text shows
        grid, ys = np.asarray(curve.get_xdata()), np.asarray(curve.get_ydata())
        assert grid.min() < point.get_xdata()[0] < grid.max()
        for j in (3, len(grid) // 2, len(grid) - 4):
            want = autograd(torch, x, pname, i, grid[j])
            assert ys[j] == pytest.approx(want, rel=1e-9, abs=1e-12), (sym, grid[j])


def py_at(x, pname, i):
    s = np.asarray(x.score[pname])
    return float(s if i is None else s[i])


def autograd(torch, x, pname, i, t):
    """∂ ln P/∂θ at θ[i] = t by torch.distributions' own log_prob."""
    spec = REGISTRY[x.dist]
    params = {k: torch.tensor(np.asarray(v, dtype=np.float64)) for k, v in x.parameters.items()}
    moved = params[pname].clone()
    if i is None:
        moved = torch.tensor(float(t), dtype=torch.float64)
    else:
        moved[i] = float(t)
    moved.requires_grad_(True)
    params[pname] = moved
    if x.total_count is not None:
        params[spec.count_param] = x.total_count
    d = getattr(torch.distributions, spec.torch_name)(**params, validate_args=False)
    value = torch.tensor(np.asarray(x.value, dtype=np.float64))
    d.log_prob(value).sum().backward()
    g = moved.grad.numpy()
    return float(g if i is None else g[i])


def _parse(argv):
    from eligibility.cli import build_parser

    args, _ = build_parser().parse_known_args(["explain", *argv])
    return args


def test_score_curve_leaves_out_points_outside_the_domain():
    x = explain("bernoulli", 1, probs=0.9)
    grid, ys, theta, e = score_curve(x, "probs", None)
    assert grid.max() <= 1.0 and theta == 0.9 and e == pytest.approx(1 / 0.9)
    assert np.allclose(ys, 1 / grid)


def _score_a_point_at_a_time(x, name, i, t):
    """The score at θ = t (component ``i`` of parameter ``name`` moved): one call of the core."""
    from eligibility import api

    params = {k: np.asarray(v, dtype=np.float64) for k, v in x.parameters.items()}
    count = {REGISTRY[x.dist].count_param: x.total_count} if x.total_count is not None else {}
    moved = params[name].copy()
    moved[() if i is None else i] = t
    e = api.score(x.dist, x.value, **{**params, name: moved}, **count)[name]
    return float(np.asarray(e, dtype=np.float64)[() if i is None else i])


def test_score_curve_is_the_core_called_at_each_point():
    """The curve is one batched call of the core: the numbers of a call a point, bit for bit
    (every 8th point of the 161 and the last; the points outside a domain: the test above)."""
    cases = [
        ("bernoulli", 1, {"probs": 0.3}),
        ("bernoulli", 0, {"logits": [-1.5, 0.0, 2.0]}),
        ("multinomial", [2, 0, 3], {"total_count": 5, "probs": [0.2, 0.3, 0.5]}),
        ("multinomial", [1, 3], {"total_count": 4, "logits": [0.4, -1.0]}),
        ("normal", -0.4, {"loc": 0.2, "scale": 1.3}),
        ("beta", 0.35, {"concentration1": 2.0, "concentration0": 3.0}),
    ]
    for dist, value, params in cases:
        x = explain(dist, value, **params)
        for name, v in x.parameters.items():
            for i in [None] if np.ndim(v) == 0 else range(np.shape(v)[0]):
                grid, ys, _, _ = score_curve(x, name, i)
                assert len(grid) == len(ys) == 161, (dist, name, i)
                for j in [*range(0, 161, 8), 160]:
                    want = _score_a_point_at_a_time(x, name, i, grid[j])
                    assert ys[j] == want, (dist, params, name, i, grid[j])


def test_cli_writes_png_and_svg(capsys, tmp_path):
    """The suffix names the format (a one-panel figure: rendering is the slow part)."""
    svg, png = tmp_path / "bern.svg", tmp_path / "bern.png"
    bern = ["bernoulli", "--probs", "0.3", "--value", "1"]
    assert main(["explain", *bern, "--plot", str(svg)]) == 0
    out, err = capsys.readouterr()
    assert "3.3333" in out and f"plot written to {svg}" in err  # e = 1/p
    assert ET.parse(svg).getroot().tag.endswith("svg")
    assert main(["explain", *bern, "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "argv",
    [
        [*EXAMPLE, "--plot", "seed.gif"],
        ["categorical", "--probs", "0.5 0.5", "0.2 0.8", "--action", "0", "1", "--plot", "b.png"],
    ],
)
def test_cli_bad_plot_is_one_line(capsys, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    code = main(["explain", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "--plot" in err
    assert list(tmp_path.iterdir()) == []


def test_the_registry_says_which_picture_a_distribution_draws(monkeypatch):
    """The spec's ``picture`` chooses, not the distribution's name: every spec names a picture
    ``--plot`` draws, and a categorical whose spec asked for score curves would get them."""
    import dataclasses

    from eligibility.explain.plot import PICTURES

    assert {s.picture for s in REGISTRY.values()} <= set(PICTURES)
    assert REGISTRY["categorical"].picture == "categories"
    x = explain("categorical", 0, probs=[0.6, 0.4])
    fig = figure(x)  # one figure read by both assertions (each drawing is matplotlib's layout)
    assert len(fig.axes) == 3 and not lines(fig).keys() & {"∂ ln P/∂probs[0]"}
    spec = dataclasses.replace(REGISTRY["categorical"], picture="score-curves")
    monkeypatch.setitem(REGISTRY, "categorical", spec)
    fig = figure(x)
    assert {"∂ ln P/∂probs[0]", "∂ ln P/∂probs[1]"} <= lines(fig).keys()
    assert not bars(fig)
