"""`eligibility check --sequence --off-policy`: off-policy losses held against the exact ∇J(θ).

Truth: the lab's exact off-policy problems (tests/test_lab_sequence_offpolicy.py holds them to
finite differences and Monte Carlo), torch autograd through the problem's model at θ for the
variants' per-batch estimates, and :mod:`eligibility.torch.offpolicy`'s losses (written
separately) for the tables' choices.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eligibility.check import check  # noqa: E402
from eligibility.check import offpolicy as off  # noqa: E402
from eligibility.check.run import CheckConfig, choose_samples, max_abs_z  # noqa: E402
from eligibility.cli import main  # noqa: E402
from eligibility.lab.estimate import z_threshold  # noqa: E402
from eligibility.torch.offpolicy import off_policy_loss  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "check" / "offpolicy"
LOSSES = f"{EXAMPLES / 'losses.py'}"
JSON = ["--format", "json"]


@pytest.fixture(scope="module")
def far():
    return off._problem("far")


def _user_gradient(problem, fn, batch):
    model = problem.model
    loss = fn(problem.logps(batch), batch)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return -torch.cat([g.reshape(-1) for g in grads]).double().numpy()


def _load(name):
    from eligibility.check.user import load_function

    return load_function(f"{LOSSES}:{name}")


def _lib(**kw):
    def loss(logps, batch):
        r = batch.rewards.view(-1, batch.group_size)
        if kw.pop("_std", False):
            a = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)
        else:
            G = batch.group_size
            a = (G * r - r.sum(1, keepdim=True)) / (G - 1)
        return off_policy_loss(
            logps,
            batch.old_logps,
            a.reshape(-1),
            batch.completion_mask > 0,
            sampler_logps=batch.sampler_logps,
            **kw,
        )

    return loss


EXAMPLE_VARIANTS = [
    ("product", off.REFERENCE),
    ("product_ratio_form", off.REFERENCE),
    ("per_token_ratio", off.Variant(ratio="token")),
    ("stale_old_logps", off.Variant(ratio="one")),
    ("uncorrected_sampler", off.Variant(sampler="none")),
    ("truncated", off.Variant(sampler="tis-1.5")),
    ("geometric_mean", off.Variant(ratio="geometric-mean")),
    ("undetached", off.Variant(ratio="undetached")),
    ("swapped", off.Variant(ratio="swapped")),
    ("ppo_clip", off.Variant(ratio="token", clip="ppo")),
    ("cispo_trl_default", off.Variant(ratio="token", cap="cispo-absolute")),
    ("cispo_relative", off.Variant(ratio="token", cap="cispo-relative")),
    ("truncated_half", off.Variant(sampler="tis-0.5")),
    ("truncated_whole_half", off.Variant(sampler="tis-whole-0.5")),
    ("truncated_without_ratio", off.Variant(ratio="one", sampler="tis-0.5")),
    ("masked_whole", off.Variant(sampler="mis-whole-1.5")),
]


def test_the_variants_are_autograd_of_the_example_losses(far):
    """Each example loss, differentiated through the model at θ, is its variant batch by batch."""
    rng = np.random.default_rng(5)
    draws = [far.draw_groups(2, rng, far.group_size) for _ in range(2)]
    rows = np.stack([d.rows for d in draws])
    chosen = [v for _, v in EXAMPLE_VARIANTS]
    got = off.estimates(far, rows, chosen)
    for k, d in enumerate(draws):
        batch = far.batch(d)
        for j, (name, _) in enumerate(EXAMPLE_VARIANTS):
            want = _user_gradient(far, _load(name), batch)
            np.testing.assert_allclose(got[j, k], want, rtol=2e-4, atol=2e-6, err_msg=name)


LIBRARY_VARIANTS = [
    ({}, off.REFERENCE),
    ({"ratio": "token", "surrogate": "ppo-clip"}, off.Variant(ratio="token", clip="ppo")),
    (
        {
            "ratio": "token",
            "surrogate": "ppo-clip",
            "eps_high": 0.28,
            "correction": "mis",
            "cap": 3.0,
            "aggregation": "token-mean",
            "_std": True,
        },
        off.Variant("token", "clip-higher", "mis-3", "token-mean", "group-std"),
    ),
    (
        {"ratio": "geometric-mean", "aggregation": "sequence-mean", "surrogate": "ppo-clip"},
        off.Variant("geometric-mean", "ppo", "exact", "sequence-mean"),
    ),
    (
        {"correction": "tis", "cap": 2.0, "correction_level": "token"},
        off.Variant(sampler="tis-token-2"),
    ),
    ({"surrogate": "dual-clip", "ratio": "token"}, off.Variant(ratio="token", clip="dual")),
    ({"surrogate": "cispo", "cispo_cap": "relative"}, off.Variant(cap="cispo-relative")),
    (
        {"surrogate": "cispo", "cispo_cap": "absolute", "ratio": "token"},
        off.Variant(ratio="token", cap="cispo-absolute"),
    ),
    ({"correction": "tis", "cap": 0.5}, off.Variant(sampler="tis-0.5")),
]


@pytest.mark.parametrize("kw,variant", LIBRARY_VARIANTS)
def test_the_library_losses_are_the_check_variants(far, kw, variant):
    rng = np.random.default_rng(6)
    d = far.draw_groups(2, rng, far.group_size)
    got = off.estimates(far, d.rows[None], [variant])[0, 0]
    want = _user_gradient(far, _lib(**dict(kw)), far.batch(d))
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-6)


def test_decomposition_parts_and_residual_add_up_to_the_bias():
    rng = np.random.default_rng(0)
    exact = rng.normal(size=6)
    v = off.Variant("token", "ppo", "mis-3", "token-mean", "group-std")
    path = [
        off.REFERENCE,
        off.Variant(advantage="group-std"),
        off.Variant(aggregation="token-mean", advantage="group-std"),
        off.Variant("token", aggregation="token-mean", advantage="group-std"),
        off.Variant("token", "ppo", aggregation="token-mean", advantage="group-std"),
        v,
    ]
    means = {p: exact + rng.normal(size=6) * (k + 1) for k, p in enumerate(path)}
    user = means[v] + 0.1 * rng.normal(size=6)
    split = off.decompose(user, exact, means, v)
    names = [p["part"] for p in split["parts"]]
    assert names == [
        "sampling noise",
        "advantage scaling: group-std",
        "aggregation: token-mean",
        "ratio: token",
        "clipping: ppo (ε 0.2, 0.2)",
        "sampler weight: mis-3",
        "residual",
    ]
    assert sum(p["share"] for p in split["parts"]) == pytest.approx(1.0)
    assert split["bias_norm"] == pytest.approx(np.linalg.norm(user - exact))
    assert split["parts"][-1]["norm"] == pytest.approx(np.linalg.norm(user - means[v]))


@pytest.mark.usefixtures("check_calls_in_process")  # the same gradients, no worker round trips
def test_the_product_loss_exits_0_and_the_report_says_how_far(capsys):
    """At N = 30, the least the check takes: an unbiased verdict's false alarm is 1e-3 at any N
    (largest |z| 2.5-3.4 on seeds 0-3, t* 5.15), and how far the problem is (its KL from π_old,
    its clipped share) is the problem's own, not estimated."""
    argv = ["--sequence", "--off-policy", "--problem", "far", "--samples", "30", *JSON]
    rc = main(["check", f"{LOSSES}:product", *argv])
    out = json.loads(capsys.readouterr().out)
    (p,) = out["problems"]
    assert rc == 0 and p["verdict"] == "unbiased" and out["family"] == "off-policy"
    assert p["details"]["kl_old"] > 0.5 and 0 < p["details"]["clipped_share"] < 1
    assert p["variance_ratio"] == pytest.approx(1)


@pytest.mark.usefixtures("check_calls_in_process")  # the same gradients, no worker round trips
def test_stale_old_logps_are_named():
    """At N = 30, the least the check takes: named on seeds 0-3, its largest |z| against ∇J
    7.8 to 10.1 there (t* 5.15; 9.2 to 13.9 at N = 60), the decomposition's parts the same."""
    report = check(
        f"{LOSSES}:stale_old_logps", sequence=True, off_policy=True, problem="far", samples=30
    )
    (p,) = report.problems
    assert (p.verdict, p.diagnosis) == ("biased", "stale-old-logps")
    split = p.details["decomposition"]
    assert split["closest"] == "stale-old-logps"
    assert [q["part"] for q in split["parts"]] == ["sampling noise", "ratio: one", "residual"]


@pytest.mark.usefixtures("check_calls_in_process")  # the same gradients, no worker round trips
def test_assert_unbiased_takes_off_policy():
    from eligibility.testing import assert_unbiased

    kw = dict(sequence=True, off_policy=True, problem="far", samples=30)  # the least N: wiring
    assert_unbiased(f"{LOSSES}:product", **kw)  # the batch has sampler_logps: the family ran


def test_off_policy_is_a_family_of_its_own(capsys):
    """--off-policy is --family off-policy (it used to need --sequence beside it); the sequence
    family's settings are refused there in one line."""
    rc = main(["check", f"{LOSSES}:product", "--off-policy", "--micro-batches", "2"])
    err = capsys.readouterr().err
    assert rc == 2 and "--micro-batches is not taken by the off-policy check" in err
    assert len(err.strip().splitlines()) == 1


# -- each diagnosis, at the N the check chooses (slow) --------------------------------------------

U = ("unbiased", None)
EVERY_DISTANCE = {  # loss → its verdict on ratio-one, near, far: each from the loss's definition
    "product": (U, U, U),
    "product_ratio_form": (U, U, U),
    "per_token_ratio": (U, ("biased", "per-token-ratio"), ("biased", "per-token-ratio")),
    "stale_old_logps": (U, ("biased", "stale-old-logps"), ("biased", "stale-old-logps")),
    "uncorrected_sampler": (U, ("biased", "uncorrected-sampler"),
                            ("biased", "uncorrected-sampler")),
    "truncated": (U, ("biased", "truncation-bias"), ("biased", "truncation-bias")),
    "geometric_mean": (U, ("biased", "geometric-mean"), ("biased", "geometric-mean")),
    "undetached": (("biased", "ratio-1-broken"),) * 3,
    # π_old/π_θ is 1 at ratio 1, its gradient coefficient −1: −REINFORCE there, a sign
    "swapped": (("biased", "sign"), ("biased", "ratio-1-broken"), ("biased", "ratio-1-broken")),
    # min(ρ, 0.2) is 0.2 for every ratio near θ_old, token or product alike (one estimator,
    # the fewer names); far from it some ratios fall below 0.2 and the token ratio shows
    "cispo_trl_default": (("scaled", "ratio-1-broken"), ("biased", "cispo-absolute-cap"),
                          ("biased", "per-token-ratio, cispo-absolute-cap")),
    "ppo_clip": (U, ("biased", "per-token-ratio, clipping-bias"),
                 ("biased", "per-token-ratio, clipping-bias")),
    "cispo_relative": (U, ("biased", "per-token-ratio, cispo-relative-cap"),
                       ("biased", "per-token-ratio, cispo-relative-cap")),
    # a cap below 1 is C × REINFORCE at ratio 1 (every weight is 1 there): a step size named
    "truncated_half": (("scaled", "truncation-bias"), ("biased", "truncation-bias"),
                       ("biased", "truncation-bias")),
    "truncated_whole_half": (("scaled", "truncation-bias"), ("biased", "truncation-bias"),
                             ("biased", "truncation-bias")),
    "truncated_without_ratio": (("scaled", "truncation-bias"),
                                ("biased", "stale-old-logps, truncation-bias"),
                                ("biased", "stale-old-logps, truncation-bias")),
    "masked_whole": (U, ("biased", "masking-bias"), ("biased", "masking-bias")),
}  # fmt: skip
NAMED = [(name, problem, want) for name, wants in EVERY_DISTANCE.items()
         for problem, want in zip(off.PROBLEM_NAMES, wants, strict=True)]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name,problem,want", NAMED, ids=[f"{n}-{p}" for n, p, _ in NAMED])
def test_each_loss_gets_its_diagnosis_at_every_distance(name, problem, want):
    """Every example (each off-policy row as a user writes it) is named on every problem, the
    rows' names the same at every distance where the row biases the gradient (a sequence
    weight truncated at C = 0.5 read ``other`` on near and far; it reads ``truncation-bias``)."""
    report = check(f"{LOSSES}:{name}", sequence=True, off_policy=True, problem=problem)
    (p,) = report.problems
    assert (p.verdict, p.diagnosis) == want


@pytest.mark.usefixtures("check_calls_in_process")  # the same gradients, no worker round trips
def test_a_whole_weight_truncated_below_one_is_named_away_from_ratio_one():
    """The one sequence-level weight π_θ/μ truncated at C = 0.5 (detached, times the score):
    it read ``other`` on ``near``; its variant is the user's estimator batch by batch, so a
    small N names it: at N = 30 its largest |z| against ∇J is 33–36 (seeds 0–3; 46–49 at
    N = 60), t* = 5.15."""
    report = check(f"{LOSSES}:truncated_whole_half", off_policy=True, problem="near", samples=30)
    (p,) = report.problems
    assert (p.verdict, p.diagnosis) == ("biased", "truncation-bias")
    assert p.fix and p.fix[0].startswith("truncation-bias: raise the truncation C")


@pytest.mark.slow
@pytest.mark.parametrize("name", off.PROBLEM_NAMES)
def test_the_false_alarm_rate_is_at_most_alpha(name):
    """The product-weight reference's own estimates, 200 times at the N the check chooses,
    α = 0.1: the rejection rate stays within 4 standard errors of a rate of at most α."""
    problem = off._problem(name)
    trial = off.trial(problem, None, CheckConfig(sequence=True, off_policy=True), 0)
    n = choose_samples(trial.sigma, trial.exact, 1e-3, trial.sizing, minimum=off.MIN_SAMPLES)
    rng = np.random.default_rng(1)
    reps, alpha = 200, 0.1
    rows = np.stack([d.rows for d in off._draws(problem, n * reps, rng)])
    G = off.estimates(problem, rows, [off.REFERENCE])[0].reshape(reps, n, -1)
    t = z_threshold(alpha, problem.n_params, n)
    rate = np.mean(
        [max_abs_z(g.mean(0), g.std(0, ddof=1) / math.sqrt(n), problem.exact) > t for g in G]
    )
    assert rate <= alpha + 4 * math.sqrt(alpha * (1 - alpha) / reps), (rate, n)


def test_the_off_policy_tables_read_the_option_table():
    """Their aggregations and advantages are the option table's rows, mistakes included."""
    import torch

    from eligibility.check import offpolicy
    from eligibility.torch import formulas, options

    for name, (mistake, _) in offpolicy.AGGREGATIONS.items():
        assert mistake == options.row("aggregation", name).mistake
    named = {m for table in (offpolicy.RATIOS, offpolicy.CLIPS, offpolicy.CAPS, offpolicy.SAMPLERS)
             for m, _ in table.values()}  # fmt: skip
    for o in options.OFF_POLICY_ROWS:  # every off-policy row's mistake is one the check names
        assert o.mistake is None or o.mistake in named, o.name
        for _, d in o.verdicts.values():  # the check's names, a fitted constant aside
            assert d is None or set(d.split(" × ")[0].split(", ")) <= named | {"other"}, o.name
    assert offpolicy.ADVANTAGES["group-std"][0] == options.row("scale", "group-std").mistake
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    assert torch.equal(offpolicy.ADVANTAGES["rloo"][1](r, 3), formulas.baseline_rloo(r, 3))


def test_a_cut_sampler_is_the_off_policy_checks_and_its_targets_are_both_gradients():
    from eligibility.check.offpolicy_sampler import build_problem, targets
    from eligibility.check.run import CheckConfig

    with pytest.raises(ValueError, match="--top-p is not taken by the sequence check; a cut"):
        CheckConfig(sequence=True, top_p=0.9)
    with pytest.raises(ValueError, match=r"--top-p must be in \(0, 1\]"):
        CheckConfig(off_policy=True, top_p=1.5)
    p = build_problem("ratio-one", (None, 0.8, None))
    assert p.sampler.top_p == 0.8 and not p.covered.all()
    se = np.full(p.n_params, 1e-3)
    got = targets(p.exact, se, 4.0, p)
    assert got["estimates"] == "policy" and got["bias_policy"] == 0.0
    assert targets(p.sampler_exact, se, 4.0, p)["estimates"] == "sampler"
    assert 0 < got["uncovered"] < 1


@pytest.mark.slow
def test_the_samplers_renormalised_log_probs_estimate_its_own_gradient():
    """Scoring the nucleus's renormalised log-probs (as an engine reports them) as the
    policy's ascends the cut sampler's objective: the report says so, and names it."""
    (p,) = check(
        f"{EXAMPLES}/truncated_sampler.py:nucleus_logps",
        off_policy=True,
        form="model",
        problem="ratio-one",
        top_p=0.8,
    ).problems
    assert (p.verdict, p.diagnosis) == ("biased", "sampler-logps")
    assert p.details["truncated_sampler"]["estimates"] == "sampler"


def test_the_sampling_options_mean_what_finetunes_do():
    """finetune's top_k 0, top_p 1 and min_p 0 mean no cut: the check's options read alike."""
    config = CheckConfig(off_policy=True, top_k=0, top_p=1.0, min_p=0.0)
    assert (config.top_k, config.top_p, config.min_p) == (None, None, None)
    assert CheckConfig(sequence=True, top_k=0).top_k is None  # no cut: nothing to refuse
    with pytest.raises(ValueError, match="--top-k must be at least 0"):
        CheckConfig(off_policy=True, top_k=-1)
    with pytest.raises(ValueError, match=r"--min-p must be in \[0, 1\) \(0: no cut\)"):
        CheckConfig(off_policy=True, min_p=1.0)
