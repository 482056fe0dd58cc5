"""``check`` on fixed bugs of public RL trainers (tests/field/).

Each case of ``field/cases.py`` is a fixing commit of TRL, verl, OpenRLHF, SkyRL, prime-rl,
NeMo-RL, AReaL, slime, PipelineRL, ms-swift or ROLL, its code at the parent and at the commit
ported into the check's ``loss(logps, batch)`` form (``field/ports.py``), with the verdict, the
names and the place derived before any run (``CASES``, and ``FRESH``: the held-out set, ported
after the check's reading was set). The slow tests hold the check's reading of every side,
problem by problem, to that derivation: where the check reads otherwise today the test is an
expected failure (strict) whose reason says what it reads, so that it flips when the reading
improves.
The fast tests hold the derivations themselves against autograd on the check's own batches.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from eligibility import check
from field import ports
from field.cases import CASES, FRESH, Case, Side

# What the check read (bench/check/field_cases.py, bench/results/check_field.json) where it
# differs from the derivation: each an expected failure until the reading improves.
VERDICT_MISREAD: dict[tuple[str, str], str] = {
    ("areal-seq-advantage", "areal_seq_advantage_buggy"): (
        "reads scaled on length: E[ĝ]'s departure from c ∇J is 4.25 SE at N = 800 "
        "(bench/check/field_areal_mc.py), under t* = 4.33: beyond the z-test's reach at N"
    ),
}
NAMES_MISREAD: dict[tuple[str, str], str] = {
    ("areal-seq-advantage", "areal_seq_advantage_buggy"): (
        "reads reply-factor (each reply × (1 + b/L), b = 1, the return itself: no baseline) "
        "and batch-dependent-normaliser, true by autograd (the fixes-move-the-weights test); the "
        "derivation, written before reply-factor was declared, names the latter alone"
    ),
}

SIDES = [(case, side) for case in CASES + FRESH for side in (case.buggy, case.fixed)]


def _names(diagnosis_names) -> set[str]:
    """The catalogue's names in a diagnosis (``a, b``; ``V × c`` gives V's)."""
    return {part.split(" × ")[0].strip() for name in diagnosis_names for part in name.split(", ")}


def _param(case: Case, side: Side, misread: dict[tuple[str, str], str]):
    reason = misread.get((case.key, side.function))
    marks = [pytest.mark.slow]
    if reason:
        marks.append(pytest.mark.xfail(strict=True, reason=reason))
    return pytest.param(case, side, marks=marks, id=f"{case.key}:{side.function}")


def _report(case: Case, side: Side):
    return check(
        getattr(ports, side.function),
        family=case.family,
        problem=",".join(case.problems),
        **case.settings,
    )


_READ: dict[str, object] = {}


def _read(case: Case, side: Side):
    """The check's report on one side, at the family's default N (once per session)."""
    if side.function not in _READ:
        _READ[side.function] = _report(case, side)
    return _READ[side.function]


@pytest.mark.parametrize(("case", "side"), [_param(c, s, VERDICT_MISREAD) for c, s in SIDES])
def test_each_side_has_its_derived_verdict(case, side):
    report = _read(case, side)
    got = {p.problem: p.verdict for p in report.problems}
    assert got == side.verdicts, report.problems


@pytest.mark.parametrize(("case", "side"), [_param(c, s, NAMES_MISREAD) for c, s in SIDES])
def test_each_side_is_named_as_derived(case, side):
    """The names given are the required ones and at most the true ones beside them; where no
    catalogue name fits, only ``other`` or ``credit-unexplained``."""
    report = _read(case, side)
    wrong = {}
    for p in report.problems:
        names, also = side.named(p.problem)
        got = _names(p.finding.names) if p.finding else set()
        allowed = set(names) | set(also) | ({"other", "credit-unexplained"} if not names else set())
        if not set(names) <= got <= allowed:
            wrong[p.problem] = (sorted(got), sorted(names), sorted(also))
    assert not wrong, wrong


# ── the derivations against autograd, on the check's own batches ──────────────────────────────

_DRAWN: dict[tuple[str, str], list] = {}


def _drawn(family: str, problem: str, **settings) -> list:
    """(logps, batch) of 30 of the check's calls on ``problem`` (the calls made in process)."""
    key = (family, problem)
    if key not in _DRAWN:
        seen = []

        def probe(logps, batch):
            seen.append((logps.detach().clone(), copy.deepcopy(batch)))
            return -(logps * batch.completion_mask).sum()

        check(probe, family=family, problem=problem, samples=30, **settings)
        _DRAWN[key] = seen
    return _DRAWN[key]


def _credit(function: str, logps: torch.Tensor, batch) -> torch.Tensor:
    """−∂loss/∂ℓₜ: the weight the ported loss gives each token, 0 off the completion mask."""
    lp = logps.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(getattr(ports, function)(lp, batch), lp)
    return -g * batch.completion_mask


UNCHANGED = [
    pytest.param(c.key, marks=[] if c.problems[0] == "length" else [pytest.mark.slow])
    for c in CASES
    if c.fixed.place == "the same weights on every batch"
]
"""The fast suite keeps those drawn on ``length`` (one draw shared with the test below)."""


@pytest.mark.usefixtures("check_calls_in_process")
@pytest.mark.parametrize("key", UNCHANGED)
def test_the_fixes_that_change_nothing_here_give_the_same_weights(key):
    case = next(c for c in CASES if c.key == key)
    settings = {k: v for k, v in case.settings.items() if k == "kl"}
    for logps, batch in _drawn(case.family, case.problems[0], **settings):
        np.testing.assert_allclose(
            _credit(case.buggy.function, logps, batch),
            _credit(case.fixed.function, logps, batch),
            rtol=1e-5,
            atol=1e-7,
        )


def _per_reply(weights: torch.Tensor, batch) -> torch.Tensor:
    """Each reply's weight where its tokens share one (the first token's)."""
    return weights[:, 0]


@pytest.mark.usefixtures("check_calls_in_process")
def test_the_sequence_fixes_move_the_weights_as_derived():
    """trl-scale-rewards-none: ÷ (s_g + 1e-4); trl-accumulation: × 2 (each micro-batch's call);
    prime-rl-loss-scale: × the batch's tokens; areal-seq-advantage: × (Lᵢ + 1)/Lᵢ."""
    for logps, batch in _drawn("sequence", "length", kl="none"):
        lengths = batch.completion_mask.sum(1)
        s_g = batch.rewards.view(-1, batch.group_size).std(1).repeat_interleave(batch.group_size)
        fixed = _per_reply(_credit("trl_scale_none_fixed", logps, batch), batch)
        buggy = _per_reply(_credit("trl_scale_none_buggy", logps, batch), batch)
        np.testing.assert_allclose(buggy * (s_g + 1e-4), fixed, rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose(
            _credit("trl_accumulation_buggy", logps, batch),
            2 * _credit("trl_accumulation_fixed", logps, batch),
            rtol=1e-6,
        )
        np.testing.assert_allclose(
            _credit("prime_loss_scale_buggy", logps, batch),
            _credit("prime_loss_scale_fixed", logps, batch) * lengths.sum(),
            rtol=1e-5,
            atol=1e-6,
        )
        np.testing.assert_allclose(
            _credit("areal_seq_advantage_buggy", logps, batch),
            _credit("areal_seq_advantage_fixed", logps, batch) * ((lengths + 1) / lengths)[:, None],
            rtol=1e-5,
            atol=1e-7,
        )


@pytest.mark.slow
@pytest.mark.usefixtures("check_calls_in_process")
def test_the_kl_fixes_move_the_kl_weights_as_derived():
    """nemo-rl-kl-score: the fix adds −β min(k3ₜ, 10)/(Lᵢ N) to each token's weight (the score
    part of ∇(wₜ k3ₜ), k3 clamped at 10); nemo-rl-kl-clamp: it takes 10β/(Lᵢ N) back where
    k3ₜ > 10; skyrl-kl-no-grad: the fix adds −β ∂k3ₜ/∂ℓₜ /(Lᵢ N) = −β (1 − π_ref/π)/(Lᵢ N),
    0 where its clamp at 10 binds."""
    for logps, batch in _drawn("sequence", "kl"):
        m = batch.completion_mask
        lengths = m.sum(1, keepdim=True)
        log_r = torch.where(m > 0, batch.ref_logps - logps, 0.0)
        k3 = (log_r.exp() - 1 - log_r) * m
        np.testing.assert_allclose(
            _credit("nemo_kl_score_fixed", logps, batch)
            - _credit("nemo_kl_score_buggy", logps, batch),
            -batch.beta * k3.clamp(max=10) / lengths / len(m),
            rtol=1e-4,
            atol=1e-7,
        )
        clamped = (k3 > 10).float()  # nemo-rl-kl-clamp: the parent keeps 10's score part
        np.testing.assert_allclose(
            _credit("nemo_kl_clamp_fixed", logps, batch)
            - _credit("nemo_kl_clamp_buggy", logps, batch),
            10 * batch.beta * clamped / lengths / len(m),
            rtol=1e-4,
            atol=1e-7,
        )
        np.testing.assert_allclose(
            _credit("skyrl_kl_grad_fixed", logps, batch)
            - _credit("skyrl_kl_grad_buggy", logps, batch),
            -batch.beta * (1 - log_r.exp()) * m * (1 - clamped) / lengths / len(m),
            rtol=1e-4,
            atol=1e-7,
        )


@pytest.mark.slow
@pytest.mark.usefixtures("check_calls_in_process")
def test_the_undetached_weight_multiplies_each_reply_by_one_plus_its_log_prob():
    """verl-is-detach at θ = θ_old = μ: w = 1 < 2, so the parent's weight is the fix's times
    1 + ln π_θ(oᵢ)."""
    for logps, batch in _drawn("off-policy", "ratio-one"):
        m = batch.completion_mask
        log_p = torch.where(m > 0, logps, 0.0).sum(1, keepdim=True)
        np.testing.assert_allclose(
            _credit("verl_is_detach_buggy", logps, batch),
            _credit("verl_is_detach_fixed", logps, batch) * (1 + log_p),
            rtol=1e-4,
            atol=1e-6,
        )


def test_the_parents_gspo_ratio_cannot_be_built():
    """prime-rl-gspo-ratio's parent: torch.full_like refuses a fill value with a gradient."""
    logps = torch.zeros(2, 3, requires_grad=True)
    with pytest.raises(TypeError, match="fill_value"):
        torch.full_like(logps, (logps * 2).sum())


# ── the held-out cases (FRESH): each derivation's weights against autograd ──────────────────


def _fresh_features(batch):
    """What the derivations are written in, from the batch alone: Lᵢ, Σ L, N, the group's mean
    R̄_g and sample std s_g, the RLOO advantage, each group's first reward, truncation."""
    m = batch.completion_mask
    G = batch.group_size
    r = batch.rewards.double()
    groups = r.view(-1, G)
    lengths = m.sum(1).double()
    last = batch.completion_ids.gather(1, (lengths.long() - 1).unsqueeze(1)).squeeze(1)
    return {
        "m": m.double(),
        "L": lengths[:, None],
        "tokens": lengths.sum(),
        "N": len(r),
        "centred": (r - groups.mean(1).repeat_interleave(G))[:, None],
        "s_g": groups.std(1).repeat_interleave(G)[:, None],
        "rloo": (r - (groups.sum(1, keepdim=True) - groups).div(G - 1).view(-1))[:, None],
        "first": groups[:, :1].expand(-1, G).reshape(-1)[:, None],
        "is_first": (torch.arange(len(r)) % G == 0)[:, None],
        "kept": (last == batch.eos_token_id).double()[:, None],
    }


def _fresh_derived(batch) -> dict[str, torch.Tensor]:
    """Each fresh side's token weights as its derivation states them (tests/field/cases.py)."""
    f = _fresh_features(batch)
    m, L, N, A, s_g = f["m"], f["L"], f["N"], f["centred"], f["s_g"]
    tau = torch.where(f["rloo"] > 0, 1.0, 1.05)
    kept_tokens = (f["kept"] * L).sum()
    per_token = {
        "pipelinerl_group_stats_fixed": A / (s_g + 1e-4) / N,
        "msswift_sapo_gate_buggy": tau / 4 * f["rloo"] / (L * N),
        "msswift_sapo_gate_fixed": f["rloo"] / (L * N),
        "msswift_gspo_broadcast_fixed": A / (L * N),
        "openrlhf_gspo_loss_buggy": f["rloo"] / f["tokens"],
        "openrlhf_gspo_loss_fixed": f["rloo"] / (L * N),
        "trl_loss_normalisation_buggy": A / (s_g + 1e-4) / (L * N),
        "trl_loss_normalisation_fixed": A / (s_g + 1e-4) / f["tokens"],
        "trl_truncated_normaliser_buggy": f["kept"] * A / f["tokens"],
        "trl_truncated_normaliser_fixed": f["kept"] * A / kept_tokens.clamp(min=1),
        "roll_agg_token_mean_buggy": A / (L**2 * N),
        "roll_agg_token_mean_fixed": A / (L * N),
        "roll_agg_token_sum_buggy": A / (L * N),
        "roll_agg_token_sum_fixed": A / N,
    }
    # PipelineRL's parent: (Rᵢ − R_{g,1}) ÷ (0 + 1e-4) ÷ N, the group's first reply weighted 0
    reward = batch.rewards.double()[:, None]
    per_token["pipelinerl_group_stats_buggy"] = torch.where(
        f["is_first"], 0.0, (reward - f["first"]) / 1e-4 / N
    )
    return {name: w * m for name, w in per_token.items()}


@pytest.mark.usefixtures("check_calls_in_process")
def test_the_fresh_derivations_give_the_ported_weights():
    """Every fresh side on ``length``, as derived before the check ran on it: the ported loss's
    −∂loss/∂ℓₜ (autograd) is the weight its derivation states, token by token; ms-swift's
    parent cannot be evaluated at all (an [N, N] log-weight against the [N, T] mask)."""
    for logps, batch in _drawn("sequence", "length", kl="none"):
        for name, derived in _fresh_derived(batch).items():
            np.testing.assert_allclose(
                _credit(name, logps, batch).double(), derived, rtol=2e-4, atol=1e-6, err_msg=name
            )
        with pytest.raises(RuntimeError, match="must match the size"):
            _credit("msswift_gspo_broadcast_buggy", logps, batch)


@pytest.mark.slow
@pytest.mark.usefixtures("check_calls_in_process")
def test_the_verl_kl_sign_reverses_the_kl_part_alone():
    """verl-kl-loss-sign on ``kl``: both sides give each token (Rᵢ − R̄_g)/(s_g + 1e-6) ÷ Σ L
    from the policy term; the parent's KL part is the fix's with its sign reversed,
    ∓β(1 − π_ref/π) ÷ Σ L, 0 where k3 passes its clamp at 10."""
    for logps, batch in _drawn("sequence", "kl"):
        f = _fresh_features(batch)
        m = f["m"]
        d = (batch.ref_logps.double() - logps.double()) * m
        k3 = d.exp() - d - 1
        kl_part = -batch.beta * (1 - d.exp()) * (k3 <= 10) * m / f["tokens"]
        policy = f["centred"] / (f["s_g"] + 1e-6) * m / f["tokens"]
        fixed = _credit("verl_kl_sign_fixed", logps, batch).double()
        buggy = _credit("verl_kl_sign_buggy", logps, batch).double()
        np.testing.assert_allclose(fixed, policy + kl_part, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(buggy, policy - kl_part, rtol=1e-4, atol=1e-6)
