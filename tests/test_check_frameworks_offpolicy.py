"""OpenRLHF's sampler corrections, run by its own ``PolicyLoss``, on the off-policy problems.

``check --framework openrlhf --off-policy``: the batch's sampler log-probs reach OpenRLHF's
``PolicyLoss`` as its vLLM rollout's (``rollout_log_probs``), and its correction runs as
``algo.advantage.is_correction_*`` configure it. The verdicts below were derived beforehand
from OpenRLHF 0.11.2's ``models/loss.py`` (``PolicyLoss.forward``), not read off the check:

* the loss is PPO's on each token's own ratio rₜ = exp(ℓ − ℓ_old), clipped at ε = 0.2, so
  away from θ_old (``near``, ``far``) it is ``per-token-ratio, clipping-bias``;
* ``actor.loss_agg_mode`` is ``token-mean`` (its default; the other is a sequence mean, and it
  has no sum), so every problem reads ``batch-dependent-normaliser``;
* the correction multiplies each token's loss by a weight of that token's own
  wₜ = exp(ℓ_old − ℓ_μ) (never the sequence's Πₜ wₜ): ``off`` has none
  (``uncorrected-sampler`` where μ ≠ π_old); ``token``/``clip`` (TIS) clamps wₜ into
  [0.5, 5] (``truncation-bias``); ``token``/``mask`` (icepop) zeroes wₜ outside it, and
  ``seq``/``mask`` (seq-mask-tis) zeroes a sequence whose geometric mean of wₜ is outside it,
  the others keeping their wₜ (``masking-bias``). On ``ratio-one`` μ = π_old and θ = θ_old:
  every weight and ratio is 1, only the aggregation is left.

No setting of OpenRLHF 0.11.2 is unbiased off-policy (a token ratio, a token mean), so no row
here passes; the check's own variants are held against ``PolicyLoss`` batch by batch first.
Slow (a check each); skipped where OpenRLHF is not importable (``make peers``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eligibility import check  # noqa: E402
from eligibility.check import offpolicy as off  # noqa: E402
from eligibility.check.frameworks import adapt, row  # noqa: E402

pytestmark = pytest.mark.slow

BASE = {"algo.advantage.estimator": "rloo", "algo.kl.init_coef": 0}
CORRECTIONS = {  # name → (OpenRLHF's keys, the check's variant of its PolicyLoss)
    "off": ({}, "none"),
    "tis": ({"algo.advantage.is_correction_level": "token",
             "algo.advantage.is_correction_mode": "clip"}, "tis-token-0.5-5"),
    "icepop": ({"algo.advantage.is_correction_level": "token",
                "algo.advantage.is_correction_mode": "mask"}, "mis-token-0.5-5"),
    "seq-mask-tis": ({"algo.advantage.is_correction_level": "seq",
                      "algo.advantage.is_correction_mode": "mask"}, "mis-seq-0.5-5"),
}  # fmt: skip
NAMED = {"off": "uncorrected-sampler", "tis": "truncation-bias", "icepop": "masking-bias",
         "seq-mask-tis": "masking-bias"}  # fmt: skip
BDN = "batch-dependent-normaliser"


def _derived(correction: str, problem: str) -> tuple[str, str]:
    """The verdict derived from ``PolicyLoss`` (see the module docstring)."""
    if problem == "ratio-one":
        return "biased", BDN
    return "biased", f"per-token-ratio, clipping-bias, {NAMED[correction]}, {BDN}"


def _importable(framework: str) -> None:
    """Skip where ``framework`` is not importable (``make peers`` installs verl and OpenRLHF)."""
    try:
        row(framework)
    except ValueError as err:
        pytest.skip(f"{framework} is not importable here: {err}")


def _held_batch_by_batch(framework: str, config: dict, variant: Any, seed: int) -> None:
    """Autograd through the framework's loss on ``near``'s batches equals ``variant``'s
    estimate on each (the check's variants are written apart from the frameworks' code)."""
    loss, form = adapt(framework, config)
    problem = off._problem("near")
    rng = np.random.default_rng(seed)
    params = list(problem.model.parameters())
    for _ in range(2):
        d = problem.draw_groups(len(problem.base.prompts), rng, problem.group_size)
        batch = problem.batch(d)
        policy = problem.model if form == "model" else problem.logps(batch)
        grads = torch.autograd.grad(loss(policy, batch), params)
        got = -torch.cat([g.reshape(-1) for g in grads]).double().numpy()
        want = off.estimates(problem, d.rows[None], [variant])[0, 0]
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-6)


@pytest.mark.parametrize("correction", list(CORRECTIONS))
def test_the_check_variant_is_openrlhfs_policy_loss_batch_by_batch(correction):
    """OpenRLHF's ``PolicyLoss`` with its correction is the variant the check names it by."""
    _importable("openrlhf")
    keys, sampler = CORRECTIONS[correction]
    variant = off.Variant("token", "ppo", sampler, "token-mean", "rloo")
    _held_batch_by_batch("openrlhf", {**BASE, **keys}, variant, seed=3)


CASES = [(c, p) for c in CORRECTIONS for p in off.PROBLEM_NAMES]
N = 400
"""TRL's and verl's checks at N = 400 (each GRPO step is seconds of TRL's code): the named
variant is the framework's estimator batch by batch, which N = 400 tells from every other."""


@pytest.mark.parametrize("correction, problem", CASES, ids=[f"{c}-{p}" for c, p in CASES])
def test_each_openrlhf_correction_is_named_at_every_distance(correction, problem):
    _importable("openrlhf")
    keys, _ = CORRECTIONS[correction]
    report = check(framework="openrlhf", config={**BASE, **keys}, off_policy=True, problem=problem)
    (p,) = report.problems
    assert (p.verdict, p.diagnosis) == _derived(correction, problem), p.details
    assert report.family == "off-policy" and p.fix


# -- TRL's GRPOTrainer, its vLLM importance-sampling correction ----------------------------------

TRL_BASE = {"bf16": False, "num_iterations": 2}  # θ ≠ θ_old: TRL's reason to keep old log-probs
TRL_MODES = {  # name → (GRPOConfig's keys, the check's variant of its correction)
    "none": ({"vllm_importance_sampling_correction": False}, "none"),
    "sequence_mask": ({}, "mis-3"),  # the default with vLLM: C = 3
    "sequence_truncate": ({"vllm_importance_sampling_mode": "sequence_truncate"}, "tis-3"),
    "token_mask": ({"vllm_importance_sampling_mode": "token_mask"}, "mis-token-3"),
    "token_truncate": ({"vllm_importance_sampling_mode": "token_truncate"}, "tis-token-3"),
    "exact": ({"vllm_importance_sampling_clip_max": None}, "exact"),  # a mask without a bound
}
# the token modes at C = 3 never bind here (every token's π_old/μ is below 2.1 on these
# problems; a sequence's reaches 4.3): each is the token's own weight, uncapped
TRL_NAMED = {"none": "uncorrected-sampler", "sequence_mask": "masking-bias",
             "sequence_truncate": "truncation-bias", "token_mask": "per-token-sampler-weight",
             "token_truncate": "per-token-sampler-weight", "exact": None}  # fmt: skip


def _trl_derived(mode: str, problem: str) -> tuple[str, str]:
    """GRPOTrainer's defaults (``loss_type: dapo``, a token mean over the batch; ``scale_rewards:
    group``, the group mean and 1/σ; the token ratio exp(ℓ − ℓ_old) clipped at ε = 0.2), and the
    correction's weight of π_old/μ (``_generate_and_score_completions``): on ``ratio-one`` every
    weight and ratio is 1; away from it each part shows."""
    tail = ["batch-dependent-normaliser", "std-normalised"]
    if problem == "ratio-one":
        return "biased", ", ".join(tail)
    named = [n for n in ("per-token-ratio", "clipping-bias", TRL_NAMED[mode]) if n]
    return "biased", ", ".join(named + tail)


@pytest.mark.parametrize("mode", list(TRL_MODES))
def test_the_check_variant_is_trls_grpo_loss_batch_by_batch(mode):
    """GRPOTrainer's ``_compute_loss``, its correction computed by its own
    ``_generate_and_score_completions`` from the sampler's log-probs, is the variant."""
    _importable("trl")
    keys, sampler = TRL_MODES[mode]
    variant = off.Variant("token", "ppo", sampler, "token-mean", "group-std")
    _held_batch_by_batch("trl", {**TRL_BASE, **keys}, variant, seed=4)


TRL_CASES = [(m, p) for m in TRL_MODES for p in off.PROBLEM_NAMES]


@pytest.mark.parametrize("mode, problem", TRL_CASES, ids=[f"{m}-{p}" for m, p in TRL_CASES])
def test_each_trl_correction_is_named_at_every_distance(mode, problem):
    _importable("trl")
    keys, _ = TRL_MODES[mode]
    config = {**TRL_BASE, **keys}
    report = check(framework="trl", config=config, off_policy=True, problem=problem, samples=N)
    (p,) = report.problems
    assert (p.verdict, p.diagnosis) == _trl_derived(mode, problem), p.details


# -- verl: algorithm.rollout_correction through its rollout_corr_helper and ppo_loss --------------


def _verl_config(correction: dict | None) -> dict:
    algorithm = {"adv_estimator": "rloo", **({"rollout_correction": correction} if correction
                                              else {})}  # fmt: skip
    return {"algorithm": algorithm, "actor": {"loss_agg_mode": "seq-mean-token-sum"}}


VERL_MODES = {  # name → (algorithm.rollout_correction, the check's variant of it)
    "none": (None, "none"),
    "token-tis": ({"rollout_is": "token", "rollout_is_threshold": 2.0}, "tis-token-2"),
    "sequence-tis": ({"rollout_is": "sequence", "rollout_is_threshold": 2.0}, "tis-2"),
    "token-icepop": ({"rollout_is": "token", "rollout_is_threshold": "0.5_5.0"},
                     "mis-token-0.5-5"),
}  # fmt: skip
VERL_NAMED = {"none": "uncorrected-sampler", "token-tis": "truncation-bias",
              "sequence-tis": "truncation-bias", "token-icepop": "masking-bias"}  # fmt: skip


def _verl_derived(mode: str, problem: str) -> tuple[str, str]:
    """verl's ``vanilla`` policy loss (the token ratio, clipped at 0.2, with its dual clip
    c = 3), summed over each sequence (``seq-mean-token-sum``), the RLOO advantage; the
    rollout correction multiplies each token's loss by ``rollout_is_weights``
    (``rollout_corr_helper``: the token's or the sequence's π_old/μ, truncated at the
    threshold, or zeroed outside a ``lower_upper`` band). On ``ratio-one`` all weights are 1."""
    if problem == "ratio-one":
        return "unbiased", None
    return "biased", f"per-token-ratio, clipping-bias, {VERL_NAMED[mode]}"


@pytest.mark.parametrize("mode", list(VERL_MODES))
def test_the_check_variant_is_verls_ppo_loss_batch_by_batch(mode):
    """verl's ``ppo_loss`` with the weights its ``rollout_corr_helper`` computed from the
    sampler's log-probs is the variant the check names it by."""
    _importable("verl")
    correction, sampler = VERL_MODES[mode]
    variant = off.Variant("token", "dual", sampler, "sequence-sum", "rloo")
    _held_batch_by_batch("verl", _verl_config(correction), variant, seed=5)


VERL_CASES = [(m, p) for m in VERL_MODES for p in off.PROBLEM_NAMES]


@pytest.mark.parametrize("mode, problem", VERL_CASES, ids=[f"{m}-{p}" for m, p in VERL_CASES])
def test_each_verl_correction_is_named_at_every_distance(mode, problem):
    _importable("verl")
    correction, _ = VERL_MODES[mode]
    config = _verl_config(correction)
    report = check(framework="verl", config=config, off_policy=True, problem=problem, samples=N)
    (p,) = report.problems
    assert (p.verdict, p.diagnosis) == _verl_derived(mode, problem), p.details
