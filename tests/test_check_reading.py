"""The audit's reading: each token's weight held against its exact credit, the tokens without
weight described by a rule (or none), and the map from credit to weight found by a search
(src/eligibility/check/audit/tokens.py, maps.py).

Each loss below is written here with one mistake, and the reading it must get is derived from
its code before any run: which tokens it drops and by what rule, which function of the
advantage it weights a reply by. The vectorised readings are held against plain loops.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

import test_check_audit as audit_tests
from eligibility.check.audit.maps import AFFINE_B_MAX, fit, fit_affine, fit_loop, fit_shifted
from eligibility.check.audit.names import Finding
from eligibility.check.audit.tokens import (
    describe,
    describe_loop,
    unit_credit,
    unit_credit_loop,
)
from test_check_audit import _example, _offpolicy_audit, _recorded, _rloo, _seq_audit, _summed

near, two_turn = audit_tests.near, audit_tests.two_turn  # the audit tests' fixtures, shared

# -- the vectorised readings against plain loops --


def test_the_per_reply_credit_is_its_plain_loop(two_turn):
    recorder = _recorded(two_turn, audit_tests.EPISODE_LOSSES["correct"], 2, 2)
    for s in recorder.seen:
        c, _ = unit_credit(s)
        np.testing.assert_allclose(c, unit_credit_loop(s), atol=1e-12)
        assert np.any(c)


@pytest.mark.parametrize("seed", range(4))
def test_the_rule_search_is_its_plain_loop(seed):
    """Planted rules (one atom, two, three) and a random set: the same rule, the same φ."""
    rng = np.random.default_rng(seed)
    a = rng.random((9, 300)) < rng.uniform(0.2, 0.8, (9, 1))
    a[8] = True  # an atom that holds every token (a three-atom rule's third)
    planted = [a[3], a[1] & a[5], a[0] & a[2] & a[8], rng.random(300) < 0.3]
    for flag in planted:
        got, want = describe(flag, a), describe_loop(flag, a)
        assert (got.atoms, got.hit, got.picked, got.size) == (
            want.atoms,
            want.hit,
            want.picked,
            want.size,
        )
        assert got.phi == pytest.approx(want.phi, abs=1e-12)
    assert describe(planted[1], a).exact and describe(planted[1], a).atoms == (1, 5)


@pytest.mark.parametrize("scale", ["one", "batch"])
def test_the_map_fit_is_its_plain_loop(scale):
    rng = np.random.default_rng(3)
    y, s = rng.normal(size=40), rng.normal(size=40)
    batch, live = rng.integers(0, 4, 40), rng.random(40) < 0.8
    got, want = fit(y, s, batch, scale, live), fit_loop(y, s, batch, scale, live)
    assert got[0] == pytest.approx(want[0], abs=1e-12)
    np.testing.assert_allclose(got[1], want[1], atol=1e-12)


def _fitted_b_reference(y, s, L, batch, scale, live, shifted):
    """fit_affine/fit_shifted as their docstrings state them, each design's rank taken by
    numpy's matrix_rank before its least squares (their reference)."""
    keys = sorted(set(batch[live].tolist())) if scale == "batch" else [None]
    if shifted:
        cols = [s * (batch == k) if k is not None else s for k in keys]
        design = np.stack([*cols, -y], 1)[live]
        if live.sum() < len(cols) + 2 or np.linalg.matrix_rank(design) < design.shape[1]:
            return None
        b = float(np.linalg.lstsq(design, (y * L)[live], rcond=None)[0][-1])
        if not np.isfinite(b) or abs(b) < 1e-3 or np.any(L + b <= 0):
            return None
        return (*fit_loop(y * (L + b), s, batch, scale, live), b)
    bs = []
    for k in keys:
        on = live & (batch == k) if k is not None else live
        design = np.stack([s[on], s[on] / L[on]], 1)
        if on.sum() >= 3 and np.linalg.matrix_rank(design) == 2:
            p, q = np.linalg.lstsq(design, y[on], rcond=None)[0]
            if p != 0:
                bs.append(q / p)
    b = float(np.median(bs)) if bs else np.nan
    if not (np.isfinite(b) and 0 < b <= AFFINE_B_MAX):
        return None
    return (*fit_loop(y, s * (1 + b / L), batch, scale, live), b)


@pytest.mark.parametrize("shifted", [False, True])
@pytest.mark.parametrize("scale", ["one", "batch"])
def test_the_fitted_b_maps_are_their_reference_where_a_design_is_singular_too(scale, shifted):
    """Planted b (1 + b/L, or ÷ (L + b)) with noise, and batches whose lengths are one value
    (s/L a multiple of s: a design of rank 1, no b to read): the same None, b, κ, residual."""
    rng = np.random.default_rng(7)
    told = {True: 0, False: 0}
    for case in range(60):
        n = int(rng.integers(4, 40))
        batch = rng.integers(0, 3, n)
        L = rng.integers(1, 9, n).astype(np.float64)
        if case % 3 == 0:
            L = np.full(n, float(rng.integers(1, 9)))  # one length: singular everywhere
        elif case % 3 == 1:
            L[batch == 0] = 4.0  # one batch singular
        s = rng.normal(size=n)
        b = rng.uniform(0.3, 3.0)
        y = 0.7 * s * (1 + b / L) if not shifted else 0.7 * s / (L + b)
        y = y + rng.normal(scale=0.01 * case / 60, size=n)
        live = rng.random(n) < 0.9
        got = (fit_shifted if shifted else fit_affine)(y, s, L, batch, scale, live)
        want = _fitted_b_reference(y, s, L, batch, scale, live, shifted)
        assert (got is None) == (want is None), (case, got, want)
        told[got is None] += 1
        if got is not None:
            assert got[2] == pytest.approx(want[2], rel=1e-9, abs=1e-12)
            assert got[0] == pytest.approx(want[0], rel=1e-9, abs=1e-12)
            np.testing.assert_allclose(got[1], want[1], rtol=1e-9, atol=1e-12)
    assert told[True] and told[False]  # both sides of the rank test were met


def test_a_finding_carries_only_a_name_the_registry_says_the_audit_gives():
    with pytest.raises(ValueError, match="no mistake is named"):
        Finding("not-a-name", "anywhere")
    with pytest.raises(ValueError, match="not one the credit audit gives"):
        Finding("data-reuse", "anywhere")  # the episodic family's, never the audit's
    assert Finding("epsilon-divisor", "anywhere").name == "epsilon-divisor"


# -- tokens without weight: by a rule of the sample, or at random --


def _first_of_longer_reply_one(lp, b):
    """A step mask aligned to the wrong end: reply 1's first token gets weight 0 whenever
    reply 1 is longer than reply 2 (the rest the leave-one-out REINFORCE)."""
    m = b.completion_mask.clone()
    L = m.sum(1)
    first = torch.arange(len(L)) % b.group_size == 0
    m[:, 0] = m[:, 0] * ~(first & (L > torch.roll(L, -1)))
    return -(lp * _rloo(b)[:, None] * m).sum() / len(L)


def test_a_token_dropped_by_the_lengths_drawn_is_located_and_fails():
    """Derived: the tokens dropped are exactly those that are the first of their reply, in
    reply 1 of the group, and in a reply longer than the next (reply 2): three atoms, a rule
    of the sample (a place and the lengths drawn), so the check fails on it as on a leak; the
    rest is the exact credit (no other finding)."""
    found = _seq_audit(_first_of_longer_reply_one)
    assert [f.name for f in found.findings] == ["model-tokens-dropped"], found
    (f,) = found.findings
    assert f.leak and 0 < f.share < 0.2
    assert (
        "the first token of its reply in a reply longer than the next reply of its group "
        "and in reply 1 of its group (exactly" in f.where
    )
    assert "E[ĝ] misses their terms" in f.where


def _kept(lp, b, keep):
    return -(lp * _rloo(b)[:, None] * b.completion_mask * keep).sum() / len(lp)


def _places(b):
    """(t, L − 1 − t) of every entry: its place from its reply's start and from its end."""
    t = torch.arange(b.completion_mask.shape[1])[None, :]
    return t, b.completion_mask.sum(1, keepdim=True) - 1 - t


DROPS_BY_PLACE = {
    # only the last three tokens of each reply kept
    "last-three-kept": (
        lambda lp, b: _kept(lp, b, (_places(b)[1] < 3).float()),
        "the tokens 3 or more places before the last of its reply (exactly",
    ),
    # a reply above its baseline keeps its first token only
    "first-only-when-positive": (
        lambda lp, b: _kept(lp, b, 1.0 - ((_places(b)[0] >= 1) & (_rloo(b)[:, None] > 0)).float()),
        "every token of its reply but the first in a reply whose advantage is positive (exactly",
    ),
}
"""Masks by a threshold on the token's place, read off the tokens dropped: the phrase."""


@pytest.mark.parametrize("name", DROPS_BY_PLACE)
def test_a_drop_by_a_threshold_on_the_place_is_a_rule_not_chance(name):
    """Derived: the tokens left without weight are those past a place (from the reply's start
    or its end), a rule of the sample, so the check fails as on a leak (without the places'
    thresholds among the atoms the last three kept read as dropped at random)."""
    fn, phrase = DROPS_BY_PLACE[name]
    found = _seq_audit(fn)
    assert [f.name for f in found.findings] == ["model-tokens-dropped"], found
    assert found.findings[0].leak and phrase in found.findings[0].where, found.findings[0].where


def _confident_tokens_only(lp, b):
    """Only the tokens the policy drew with probability above e^(−1.5) ≈ 0.223 keep their
    term: the mask is computed from the log-probs read detached (a set, not a value)."""
    keep = lp.detach() > -1.5
    return -(torch.where(keep, lp, 0.0) * _rloo(b)[:, None] * b.completion_mask).sum() / len(lp)


def test_a_drop_by_the_tokens_own_probability_is_a_rule_not_a_detached_log_prob():
    """Derived: the tokens dropped are exactly those whose own probability is at most e^(−1.5)
    (the largest such on the batches a little below it), a rule of the sample, so the check
    fails as on a leak. The mask reads the log-probs detached, but only to pick which tokens:
    no term's value is read without its gradient, so ``logps-detached`` (whose fix, not
    detaching, changes nothing here) is not said, nor a drop at random."""
    found = _seq_audit(_confident_tokens_only)
    assert [f.name for f in found.findings][:1] == ["model-tokens-dropped"], found
    (f,) = [f for f in found.findings if f.name == "model-tokens-dropped"]
    bound = re.search(r"whose own probability π_θ is at most ([0-9.]+) \(exactly", f.where)
    assert f.leak and bound, f.where
    assert 0.1 < float(bound.group(1)) <= np.exp(-1.5)
    assert not {"logps-detached", "dropped-at-random"} & {g.name for g in found.findings}


def test_a_log_prob_of_zero_is_no_probability_threshold():
    """ℓ = 0 is where a call scored no log-prob (a row a framework's step left out), not a
    token of probability 1: a drop of exactly those tokens is no rule over π_θ (TRL's step on
    half its generation read "whose own probability π_θ is at least 1")."""
    import types

    from eligibility.check.audit.tokens import probability_atoms

    ell = np.array([0.0, 0.0, -0.5, -2.0, -3.0])
    unscored = types.SimpleNamespace(ell=ell)
    assert probability_atoms(unscored, ell == 0) == []
    words = [w for w, _, _ in probability_atoms(unscored, ell <= -2.0)]
    assert words == [
        "whose own probability π_θ is at most 0.135",
        "whose own probability π_θ is at least 0.0498",
    ]


def test_a_discount_from_the_replys_end_is_read_from_its_end():
    """Derived: token t weighted 0.9^(L − 1 − t): γ = 0.9 from the reply's last token, and the
    rest the exact credit. The same weights read from the start are γ = 1/0.9 times a factor
    0.9^(L − 1) of the reply's length, which the plainer reading does without."""

    def discounted(lp, b):
        return _kept(lp, b, 0.9 ** _places(b)[1].clamp(min=0).to(lp.dtype))

    found = _seq_audit(discounted)
    assert [f.name for f in found.findings] == ["position-weighted"], found
    assert "γ = 0.9, γ^(L − 1 − t), from the reply's last token" in found.findings[0].where


def test_a_focal_weight_on_each_token_is_read_with_its_power():
    """Derived: token t weighted (1 − πₜ)², πₜ its own probability (detached), times the
    leave-one-out credit: a per-token factor (1 − π)ᵏ with k = 2, the rest the exact credit."""

    def focal(lp, b):
        return _kept(lp, b, (1 - lp.detach().exp()) ** 2)

    found = _seq_audit(focal)
    assert [f.name for f in found.findings] == ["per-token-weight"], found
    assert "varies as (1 − π, one less the token's own probability)^2," in found.findings[0].where


def _dropout(p, restore, seed=0):
    """Token dropout: each token kept with probability p (a generator of its own), the kept
    weighted 1/p where ``restore``."""
    gen = torch.Generator().manual_seed(seed)

    def fn(lp, b):
        keep = (torch.rand(lp.shape, generator=gen) < p).to(lp.dtype)
        w = keep / p if restore else keep
        return -(lp * _rloo(b)[:, None] * w * b.completion_mask).sum() / len(lp)

    return fn


def test_tokens_dropped_at_random_with_their_weight_restored_are_unbiased():
    """Derived: no rule picks the dropped tokens (drawn at random); the kept weighted 2 carry
    the weight back: no constant, no leak."""
    found = _seq_audit(_dropout(0.5, restore=True))
    assert [f.name for f in found.findings] == ["dropped-at-random"], found
    assert not found.leak and "at random" in found.findings[0].where
    assert "unbiased within noise (the weight restored)" in found.findings[0].where


def test_tokens_dropped_at_random_not_restored_read_as_the_share_kept():
    """Derived: kept with p = 0.5, weighted 1: every weight is c ≈ 0.5 times the credit's."""
    found = _seq_audit(_dropout(0.5, restore=False))
    assert [f.name for f in found.findings] == ["dropped-at-random", "scale"], found
    c = float(found.findings[1].where.split("c = ")[1].split()[0])
    assert c == pytest.approx(0.5, abs=0.08) and not found.leak


def test_exchangeable_halves_doubled_are_unbiased():
    """Derived: replies 5 to 8 of each group left out, replies 1 to 4 doubled: a rule of the
    replies' index alone (exchangeable draws), the weight restored: unbiased, no constant
    (where the fit of the kept replies alone says c = 2)."""

    def halves(lp, b):
        j = torch.arange(len(lp)) % b.group_size
        keep = (j < b.group_size // 2).to(lp.dtype) * 2
        return -(lp * (_rloo(b) * keep)[:, None] * b.completion_mask).sum() / len(lp)

    found = _seq_audit(halves)
    assert [f.name for f in found.findings] == ["dropped-at-random"], found
    assert "in replies 5 to 8 of its group" in found.findings[0].where and not found.leak


# -- the map from credit to weight --


def _group_mean_advantage(b):
    r = b.rewards.view(-1, b.group_size)
    return (r - r.mean(1, keepdim=True)).reshape(-1)


MAPS = {
    # the square of the leave-one-out advantage: the sign lost
    "squared": (lambda lp, b: _summed(lp, b, _rloo(b) ** 2), ["advantage-transformed"], "A²"),
    # only the replies above the baseline pushed up; the others left alone
    "positive-part": (
        lambda lp, b: _summed(lp, b, _rloo(b).clamp(min=0)),
        ["advantage-transformed"],
        "positive part",
    ),
    # an asymmetric clip of the leave-one-out advantage at [-0.3, 0.5]
    "clipped": (
        lambda lp, b: _summed(lp, b, _rloo(b).clamp(-0.3, 0.5)),
        ["advantage-transformed"],
        "clipped to [-0.3, 0.5]",
    ),
    # each reply ÷ √L
    "sqrt-length": (
        lambda lp, b: _summed(lp, b, _rloo(b) / b.completion_mask.sum(1).sqrt()),
        ["length-normalised"],
        "√L",
    ),
    # the group-mean advantage relative to the group's mean reward
    "relative": (
        lambda lp, b: _summed(
            lp,
            b,
            _group_mean_advantage(b)
            / b.rewards.view(-1, b.group_size)
            .mean(1, keepdim=True)
            .clamp_min(1e-8)
            .expand(-1, b.group_size)
            .reshape(-1),
        ),
        ["mean-normalised"],
        "over the group's mean return",
    ),
    # A·|A|: a power of the advantage that keeps its sign
    "signed-square": (
        lambda lp, b: _summed(lp, b, _rloo(b) * _rloo(b).abs()),
        ["advantage-transformed"],
        "sign(A)·|A|ᵖ with p = 2,",
    ),
    # each reply ÷ (L + 1): a count off by one
    "length-plus-one": (
        lambda lp, b: _summed(lp, b, _rloo(b) / (b.completion_mask.sum(1) + 1)),
        ["length-normalised"],
        "÷ (L + b), the reply's token count L off by a constant with b = 1",
    ),
    # a line of another slope below the baseline: SAPO's gate σ(τ(r − 1)) at r = 1 is τ/4 on
    # each side, τ 1 above 0 and 1.05 below (ms-swift before a7986dca1); the 1/4 is a constant
    "two-slopes": (
        lambda lp, b: _summed(lp, b, torch.where(_rloo(b) > 0, 1.0, 1.05) / 4 * _rloo(b)),
        ["advantage-transformed"],
        "A above 0 and s·A below it with s = 1.05",
    ),
    # the leave-one-out advantage whitened over the batch (its batch mean is 0), then clipped
    "clipped-after-batch-whitening": (
        lambda lp, b: _summed(lp, b, (_rloo(b) / (_rloo(b).std() + 1e-12)).clamp(-0.5, 0.5)),
        ["batch-whitened", "advantage-transformed"],
        "clipped to [-0.5, 0.5]",
    ),
}
"""Losses whose weights are a map of the credit outside relate()'s forms: the names, a phrase."""


def _fast(names, fast):
    """``names`` as parameters, all but ``fast`` marked slow (``make ci`` runs them)."""
    return [pytest.param(n, marks=() if n in fast else pytest.mark.slow) for n in names]


@pytest.mark.parametrize("name", _fast(MAPS, ("squared", "length-plus-one", "two-slopes")))
def test_each_map_is_read_in_true_words(name):
    fn, names, phrase = MAPS[name]
    found = _seq_audit(fn)
    assert [f.name for f in found.findings] == names, found
    assert phrase in found.relation, found.relation
    assert not found.leak


def test_a_group_sigma_then_a_batch_whitening_says_the_scale_differs_by_prompt():
    """Derived: zᵢ = (Rᵢ − R̄_g)/σ_g (σ ÷ G − 1), then (z − z̄)/σ(z) over the batch: z̄ = 0,
    so each group's σ then one factor a batch."""

    def twice_whitened(lp, b):
        r = b.rewards.view(-1, b.group_size)
        z = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)).reshape(-1)
        return _summed(lp, b, (z - z.mean()) / (z.std() + 1e-6))

    found = _seq_audit(twice_whitened, problem_name="difficulty")
    names = [f.name for f in found.findings]
    assert names == ["std-normalised", "batch-dependent-normaliser"], found
    assert "differs from prompt to prompt" in found.findings[0].where


# -- a constant's cause, only where the structure shows it --


def test_a_division_by_an_epsilon_is_said_as_one():
    """Derived: σ over a dimension of one value is 0, so the advantage is ÷ 1e-4: c = 10⁴."""

    def over_one(lp, b):
        a = _rloo(b)
        return _summed(lp, b, a / (a.view(-1, 1).std(1, unbiased=False) + 1e-4))

    found = _seq_audit(over_one)
    assert [f.name for f in found.findings] == ["epsilon-divisor"], found
    assert "1/ε with ε = 0.0001" in found.findings[0].where


def test_one_replys_reward_as_the_groups_baseline_over_an_epsilon_is_said_as_such():
    """Derived (PipelineRL before f90d0ef: the group's mean and std taken over its first reply
    alone, the std of one value read as 0): Aᵢ = (Rᵢ − R_(g,1))/(0 + 1e-4). Every reply but the
    first has a baseline independent of it, another reply's reward: unbiased; the first is its
    own baseline and gets no weight, one reply in G left out by its place in the group
    (exchangeable draws: at random); the constant 10⁴ is a division by ε. No function of the
    leave-one-out advantage: on the replies whose reward differs from the first's, κ·sign(A)
    fits too, but not on those that share it."""

    def first_as_baseline(lp, b):
        r = b.rewards.view(-1, b.group_size)
        return _summed(lp, b, ((r - r[:, :1]) / 1e-4).reshape(-1))

    found = _seq_audit(first_as_baseline)
    assert [f.name for f in found.findings] == ["dropped-at-random", "epsilon-divisor"], found
    assert "its group's first reply" in found.relation, found.relation
    assert "1/ε with ε = 0.0001" in found.findings[1].where and not found.leak


def test_a_constant_of_a_loss_that_takes_no_group_mean_is_not_a_self_including_mean():
    """Derived: no baseline, × (G − 1)/G = 0.875: a step size, not a group mean's."""
    found = _seq_audit(lambda lp, b: _summed(lp, b, b.rewards * 7 / 8))
    assert [f.name for f in found.findings] == ["scale"], found
    assert "c = 0.875" in found.findings[0].where
    grpo_mean = _seq_audit(lambda lp, b: _summed(lp, b, _group_mean_advantage(b)))
    assert [f.name for f in grpo_mean.findings] == ["self-including-mean"], grpo_mean


def test_a_gradient_counted_twice_is_said_as_two():
    found = _seq_audit(lambda lp, b: 2 * _summed(lp, b, _rloo(b)))
    assert [f.name for f in found.findings] == ["scale"], found
    assert "c = 2 " in found.findings[0].where and "counted 2 times" in found.findings[0].where


@pytest.mark.slow
def test_the_check_fails_a_drop_by_a_rule_where_the_z_test_cannot_see_it():
    """The whole check on ``length`` at N = 400: the z-test's verdict stays its own, and the
    drop by a rule of the sample fails the check either way (1.2 % of the credit's weight)."""
    from eligibility.check import check

    report = check(_first_of_longer_reply_one, sequence=True, problem="length", samples=400)
    (p,) = report.problems
    names = [f["name"] for f in p.details["audit"]["findings"]]
    assert names == ["model-tokens-dropped"] and not report.passed
    assert p.verdict != "unbiased" or p.misweighted


# -- off-policy: a clamp on each token's ratio, its bounds read off --


def _capped(lo, hi):
    """CISPO's form, −sg(clip(rₜ, lo, hi)) A ℓₜ per token, times the reply's sampler weight,
    with the leave-one-out advantage."""

    def fn(logps, batch):
        m = batch.completion_mask > 0
        lp = torch.where(m, logps, 0.0)
        r = torch.exp(torch.where(m, lp - batch.old_logps, 0.0))
        sampler = torch.exp(torch.where(m, batch.old_logps - batch.sampler_logps, 0.0).sum(1))
        per = (r.clamp(lo, hi).detach() * lp).sum(1)
        return -(sampler * _rloo(batch) * per).mean()

    return fn


@pytest.mark.parametrize(
    ("lo", "hi"), [(0.8, 1.28), pytest.param(0.9, 1.05, marks=pytest.mark.slow)]
)
def test_an_asymmetric_cap_on_each_tokens_ratio_is_read_with_its_bounds(near, lo, hi):
    """Derived: every token weighted by clip(rₜ, lo, hi) where the reply's product is owed:
    ``cispo-relative-cap``, its bounds read off the weights (CISPO's at (0.8, 1.28))."""
    found = _offpolicy_audit(near, _capped(lo, hi))
    assert [f.name for f in found.findings] == ["cispo-relative-cap"], found
    assert f"clamped to [{lo:.3g}, {hi:.3g}]" in found.findings[0].where


def test_a_sign_flipped_on_the_eos_token_is_located():
    """Derived: the EOS token's term enters with the opposite sign (ℓ·(1 − 2·eos)): every
    weighted token that is flipped is the EOS (the last of a reply that ends with one), a rule
    of the sample: the check fails on it."""

    def eos_flipped(lp, b):
        eos = (b.completion_ids == b.eos_token_id) & (b.completion_mask > 0)
        flip = 1.0 - 2.0 * eos.to(lp.dtype)
        return -(lp * flip * _rloo(b)[:, None] * b.completion_mask).sum() / len(lp)

    found = _seq_audit(eos_flipped)
    names = [f.name for f in found.findings]
    assert names[0] == "sign-flipped" and found.findings[0].leak, found
    assert "the EOS token (exactly)" in found.findings[0].where


def test_a_discount_by_the_tokens_place_is_read_and_the_rest_too():
    """Derived: token t of each reply weighted γᵗ = 0.9ᵗ times the leave-one-out credit: the
    place read with γ, and once it is divided out the rest is the exact credit (no more)."""

    def discounted(lp, b):
        t = torch.arange(lp.shape[1], dtype=lp.dtype)
        return -(lp * 0.9**t * _rloo(b)[:, None] * b.completion_mask).sum() / len(lp)

    found = _seq_audit(discounted)
    assert [f.name for f in found.findings] == ["position-weighted"], found
    assert "γ = 0.9, γᵗ" in found.findings[0].where


def test_a_per_token_factor_on_top_of_the_ratio_split_is_read(near):
    """Derived: the exact off-policy weight sg(Πq·Πs)·A on every token, times 0.8^(L − 1 − t)
    (a discount from the reply's end): the place read with γ = 0.8, the rest exact."""

    def discounted_from_end(logps, batch):
        m = batch.completion_mask > 0
        lp = torch.where(m, logps, 0.0)
        log_w = torch.where(m, lp - batch.sampler_logps, 0.0).sum(1)
        L = m.sum(1, keepdim=True)
        to_end = (L - 1 - torch.arange(lp.shape[1])).clamp(min=0).to(lp.dtype)
        per = (0.8**to_end * lp).sum(1)
        return -(torch.exp(log_w).detach() * _rloo(batch) * per).mean()

    found = _offpolicy_audit(near, discounted_from_end)
    assert [f.name for f in found.findings] == ["position-weighted"], found
    assert "γ = 0.8, γ^(L − 1 − t)" in found.findings[0].where


def test_a_turn_mask_short_by_one_in_episodes_is_located(two_turn):
    """Derived: the mask keeps a model token only where the next one is the model's too, so
    the last token of every reply (each turn's) gets no weight: a rule of the place, exact,
    a leak; the rest is each turn's reward-to-go with its baseline (no other finding)."""

    def last_dropped(model, batch):
        cm = batch.completion_mask.bool()
        nxt = torch.cat([cm[:, 1:], torch.zeros_like(cm[:, :1])], 1)
        return audit_tests._per_turn(model, batch, audit_tests._rtg(batch), (cm & nxt).long())

    found = audit_tests._episodes_audit(two_turn, last_dropped)
    assert [f.name for f in found.findings] == ["model-tokens-dropped"], found
    assert "the last token of its reply (exactly" in found.findings[0].where
    assert found.leak


# -- β > 0: the KL's part of each weight read apart --


def _with_kl(penalty):
    """The leave-one-out REINFORCE plus β times ``penalty(d, batch)`` per token in the
    objective's weights: the loss −(1/N) Σ (A − β·penalty) ℓ."""

    def fn(lp, b):
        d = (lp - b.ref_logps).detach() * b.completion_mask
        a = _rloo(b)[:, None] - b.beta * penalty(d, b)
        return -(lp * a * b.completion_mask).sum() / len(lp)

    return fn


def _in_reward(h, after=False):
    """REINFORCE on each reply's reward less β Σₜ h(dₜ), the sum taken off before its
    leave-one-out baseline (or ``after`` it): every token of a reply weighted alike."""

    def fn(lp, b):
        s = (h((lp - b.ref_logps).detach()) * b.completion_mask).sum(1)
        if after:
            a = _rloo(b) - b.beta * s
        else:
            r = (b.rewards - b.beta * s).view(-1, b.group_size)
            a = ((b.group_size * r - r.sum(1, keepdim=True)) / (b.group_size - 1)).reshape(-1)
        return -(lp * a[:, None] * b.completion_mask).sum() / len(lp)

    return fn


def _summed_to_go(d, b):
    return d.flip(1).cumsum(1).flip(1)


KL_READINGS = {
    # the log-ratio summed to go: the sequence KL's own gradient, exact
    "to-go": (_with_kl(_summed_to_go), []),
    # each token's own log-ratio alone
    "own": (_with_kl(lambda d, b: d), ["kl-token-local"]),
    # k3 in the loss: β(e^(−d) − 1 + d) per token, weight −β(1 − e^(−d))
    "k3-loss": (
        lambda lp, b: (
            -(lp * _rloo(b)[:, None] * b.completion_mask).sum() / len(lp)
            + b.beta
            * ((torch.exp(-(lp - b.ref_logps)) - 1 + lp - b.ref_logps) * b.completion_mask).sum()
            / len(lp)
        ),
        ["kl-forward"],
    ),
    # the exact placement with twice the objective's β
    "twice-beta": (_with_kl(lambda d, b: 2 * _summed_to_go(d, b)), ["kl-weight"]),
    # a penalty of |d| per token: sign(d), no estimator's gradient
    "abs": (_with_kl(lambda d, b: torch.sign(d)), ["kl-estimator-unknown"]),
    # k1 summed over the reply, taken off its reward before the leave-one-out baseline: the
    # whole sum weighs every token of the reply alike, exact in mean (E[dₛ ∇ℓₜ] = 0, s < t)
    "k1-in-reward": (_in_reward(lambda d: d), []),
    # the same sum taken off after the baseline (no baseline of its own): exact in mean too
    "k1-after-baseline": (_in_reward(lambda d: d, after=True), []),
    # the log-ratio written ln π_ref − ln π: the KL added to the reward, weight −β
    "k1-backwards": (_in_reward(lambda d: -d), ["kl-weight"]),
    # k3 summed in the reward: its own gradient, not 0 in mean, left out
    "k3-in-reward": (_in_reward(lambda d: torch.exp(-d) - 1 + d), ["kl-reward-estimate"]),
}
"""Losses on ``kl`` (β = 0.1) and the audit's names (derived from each penalty's weight)."""


@pytest.mark.parametrize(
    "name", _fast(KL_READINGS, ("to-go", "own", "k3-loss", "twice-beta", "abs", "k1-in-reward"))
)
def test_the_kls_part_of_each_weight_is_read_apart(name):
    fn, names = KL_READINGS[name]
    found = _seq_audit(fn, problem_name="kl", kl=True)
    assert [f.name for f in found.findings] == names, found
    if name == "twice-beta":
        assert "2 times the objective's β" in found.findings[0].where
    if name == "abs":  # said by how it follows the log-ratio: found, not the closest
        where = found.findings[0].where
        assert "·sign(dₜ) (dₜ = ℓₜ − ℓ^ref_t) (residual 0.0%)" in where, where
        assert "closest" not in where, where


def test_a_whitened_loss_summed_over_micro_batches_reads_its_two():
    """Derived: GRPO's weights (the group-whitened reward ÷ L, each micro-batch's own mean)
    summed over 2 micro-batches, never divided: the relation and c = 2, the micro-batches."""

    def grpo(lp, b):
        r = b.rewards.view(-1, b.group_size)
        a = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).reshape(-1)
        per = (lp * b.completion_mask).sum(1) / b.completion_mask.sum(1)
        return -(per * a).mean()

    found = _seq_audit(grpo, M=2)
    names = [f.name for f in found.findings]
    assert names == ["length-normalised", "std-normalised", "accumulation-scaled"], found
    assert "c = 2 " in found.findings[-1].where


def test_a_weight_left_attached_reads_as_a_factor_of_the_replys_own_log_prob():
    """Derived: a reply weight meant to be detached, w = exp(Σ ℓ − sg(Σ ℓ)) (1 at θ, its
    gradient not 0), times the sequence's summed log-prob: the loss A·w·Σℓ has weight
    A·(1 + Σℓ) on each token, the credit times a line in the reply's own log-prob (a = b = 1):
    an importance weight left attached (``ratio-1-broken``), as off the on-policy point."""

    def attached(lp, b):
        s = (lp * b.completion_mask).sum(1)
        w = torch.exp(s - s.detach())
        return -(_rloo(b) * w * s).sum() / len(lp)

    found = _seq_audit(attached)
    assert [f.name for f in found.findings] == ["ratio-1-broken"], found
    assert "× (1 + 1·x), x = ln π(reply)" in found.findings[0].where
    assert "not detached" in found.findings[0].where


# -- replies without weight that the map explains are not drops --


def _no_baseline_times(factor):
    """Each reply weighted by its reward itself (no baseline) × ``factor(L)``, ÷ the batch's
    tokens: a reply whose reward is 0 gets weight 0 by the map, whatever its length."""

    def fn(lp, b):
        L = b.completion_mask.sum(1)
        a = b.rewards * factor(L)
        return -(lp * a[:, None] * b.completion_mask).sum() / b.completion_mask.sum()

    return fn


@pytest.mark.parametrize("problem", _fast(["length", "difficulty"], ("length",)))
def test_no_baseline_with_a_factor_one_plus_one_over_l_is_read_as_the_map(problem):
    """Derived (AReaL's 2D sequence advantage before its fix, Rᵢ(1 + 1/Lᵢ) ÷ the batch's
    tokens): the map is the return itself (no baseline) × (1 + b/L) with b = 1, one factor a
    batch; the replies with reward 0 get no weight by that map, so nothing is dropped. The
    factor is a reply factor, not ``length-normalised``: that name's fix (drop the ÷ L) leaves
    the weight Rᵢ(Lᵢ + 1), still a factor of the length."""
    found = _seq_audit(_no_baseline_times(lambda L: 1 + 1 / L), problem_name=problem)
    names = [f.name for f in found.findings]
    assert names == ["reply-factor", "batch-dependent-normaliser"], found
    assert "× (1 + b/L)" in found.relation and "with b = 1," in found.relation
    assert "the return itself (no baseline)" in found.relation and not found.leak


def test_replies_with_no_return_are_no_drop_where_the_map_is_not_found():
    """Derived: Rᵢ·exp(−(Lᵢ − 3)²/7), a factor of the length outside the search: the map is
    not found, yet the replies with reward 0 are weighted 0 by it (every weight has its
    return's sign): ``credit-unexplained``, never a drop by a rule of the sample."""
    fn = _no_baseline_times(lambda L: torch.exp(-((L - 3.0) ** 2) / 7))
    found = _seq_audit(fn)
    assert [f.name for f in found.findings] == ["credit-unexplained"], found
    assert not found.leak


def test_tokens_left_out_past_a_clamp_on_their_kl_are_a_rule_not_chance():
    """Derived: on ``kl`` (β = 0.1) the exact weights (the leave-one-out credit less β times
    the log-ratio summed to go), but each token whose k3 = e^(−d) − 1 + d passes 0.5 left out
    of the loss (a clamp's zero gradient): the tokens dropped are exactly those with k3 ≥ their
    least k3, a rule of the sample (the token drawn), so the check fails on it; never a drop
    at random with its weight restored."""

    def kl_filtered(lp, b):
        d = (lp - b.ref_logps).detach()
        keep = ((torch.expm1(-d) + d) <= 0.5) & (b.completion_mask > 0)
        a = _rloo(b)[:, None] - b.beta * d.flip(1).cumsum(1).flip(1) * b.completion_mask
        return -(lp * a * keep).sum() / len(lp)

    found = _seq_audit(kl_filtered, problem_name="kl", kl=True)
    assert [f.name for f in found.findings] == ["model-tokens-dropped"], found
    (f,) = found.findings
    assert f.leak and "the tokens with a KL value k3 = e^(−d) − 1 + d ≥ 0.5" in f.where
    assert "(exactly;" in f.where


def test_the_recorder_keeps_the_kls_reference_where_beta_is_positive():
    """The check's own recorder holds ln π_ref on the completion grid where β > 0 (the token
    reading's log-ratio atoms read it), and none where β = 0."""
    from eligibility.check import user
    from eligibility.check.audit import Recorder
    from eligibility.check.audit.tap import Tap
    from eligibility.check.sequence import batch_of
    from eligibility.lab.sequence.builtin import PROBLEMS

    problem = PROBLEMS["kl"]()
    rows = problem.draw(len(problem.prompts), np.random.default_rng(0)).rows
    params = list(problem.model.parameters())
    theta = [p.detach().clone() for p in params]
    for beta in (problem.beta, 0.0):
        user.reset_policy(params, theta)
        logps, batch = problem.on_policy(batch_of(problem, rows, 1.0))
        tap, recorder = Tap(logps=logps), Recorder(limit=1)
        user.call(
            lambda lp, b: _summed(lp, b, _rloo(b)), (logps, batch), params, -1.0, theta, tap=tap
        )
        recorder.completions([(batch, tap, 1.0)], 0, beta=beta)
        (s,) = recorder.seen
        if beta:
            want = np.where(batch.completion_mask > 0, batch.ref_logps.double(), 0.0)
            np.testing.assert_allclose(s.ref, want, atol=1e-12)
            assert np.any(s.ref)
        else:
            assert s.ref is None
    user.reset_policy(params, theta)


# -- off the on-policy point: a rejection, a clamped sampler weight, a weight left attached --


def _exact_offpolicy(logps, batch, keep=None, weight=None):
    """−(1/N) Σᵢ hᵢ Aᵢ Σₜ ℓᵢₜ: hᵢ = sg(Πq·Πs) the exact weight (``weight`` in its place where
    given), ``keep`` [N] the replies kept (all where None); Aᵢ the leave-one-out advantage."""
    m = batch.completion_mask > 0
    lp = torch.where(m, logps, 0.0)
    log_w = torch.where(m, lp - batch.sampler_logps, 0.0).sum(1)
    h = torch.exp(log_w).detach() if weight is None else weight(log_w)
    if keep is not None:
        h = h * keep(torch.exp(log_w).detach())
    return -(h * _rloo(batch) * lp.sum(1)).mean()


def test_a_sequence_rejection_is_read_with_its_asymmetric_bounds(near):
    """Derived: the exact weights, but each reply whose whole π_θ/μ lies outside [0.7, 2] given
    none (a rejection on the whole sequence's ratio): ``masking-bias``, its bounds read off the
    gaps the weights leave between the replies kept and those rejected (2 the roundest number
    in its gap; the gap around 0.7 said as it is, and it holds 0.7)."""

    def keep(w):
        return ((w >= 0.7) & (w <= 2)).float()

    found = _offpolicy_audit(near, lambda lp, b: _exact_offpolicy(lp, b, keep=keep))
    assert [f.name for f in found.findings] == ["masking-bias"], found
    where = found.findings[0].where
    said = re.search(r"whole reply lies outside \[([0-9.]+)–([0-9.]+), 2\]", where)
    assert said and float(said[1]) < 0.7 <= float(said[2]), where


def test_a_rejection_interval_is_read_off_the_gaps():
    """The interval that keeps exactly the kept: every dropped value below the least kept or
    above the greatest; a value dropped between two kept ones is no interval's."""
    from eligibility.check.audit.sampler import read_rejection

    x = np.array([0.3, 0.45, 0.6, 1.0, 1.9, 2.4, 7.0])
    drop = np.array([1, 1, 0, 0, 0, 1, 1], bool)
    lo, hi, words = read_rejection(x, drop, ~drop)
    assert 0.45 < lo <= 0.6 and 1.9 <= hi < 2.4 and words == "outside [0.5, 2]"
    assert read_rejection(x, drop & (x < 1), ~drop)[2] == "below 0.5"  # the rest kept above
    drop[3] = True  # 1.0 lies between kept 0.6 and 1.9
    assert read_rejection(x, drop, ~drop) is None


def test_a_clamped_per_token_sampler_weight_is_read_with_its_bounds(near):
    """Derived: each token weighted by sg(qₜ · clip(sₜ, 0.6, 1.5)) Aᵢ (its own π_θ/π_old and its
    own π_old/μ, the latter clamped on both sides) where the reply's product is owed:
    ``per-token-ratio``, ``per-token-sampler-weight`` and ``truncation-bias`` with [0.6, 1.5]."""

    def fn(logps, batch):
        m = batch.completion_mask > 0
        lp = torch.where(m, logps, 0.0)
        q = torch.exp(torch.where(m, lp - batch.old_logps, 0.0))
        s = torch.exp(torch.where(m, batch.old_logps - batch.sampler_logps, 0.0))
        per = ((q * s.clamp(0.6, 1.5)).detach() * lp).sum(1)
        return -(_rloo(batch) * per).mean()

    found = _offpolicy_audit(near, fn)
    names = [f.name for f in found.findings]
    assert names == ["per-token-ratio", "per-token-sampler-weight", "truncation-bias"], found
    assert "clamped to [0.6, 1.5]" in found.findings[2].where


def _attached(cap):
    """The whole π_θ/μ, capped at ``cap`` (None: not capped), left attached."""

    def weight(log_w):
        w = torch.exp(log_w)
        return w if cap is None else w.clamp(max=cap)

    return weight


@pytest.mark.parametrize("cap", [None, 2.0])
def test_an_importance_weight_left_attached_is_read_off_policy(near, cap):
    """Derived: h = min(π_θ/μ, C) not detached: ∂/∂ℓₜ of −A h Σℓ/N is −A (h + h'·Σℓ)/N with
    h' = π_θ/μ below C, 0 above (held against autograd below), so the reply factor is read
    left attached: ``ratio-1-broken``, with ``truncation-bias`` where C binds."""
    problem, draws, _ = near
    batch = problem.batch(draws[0])
    logps = problem.logps(batch).detach().requires_grad_(True)
    (g,) = torch.autograd.grad(_exact_offpolicy(logps, batch, weight=_attached(cap)), logps)
    m = batch.completion_mask > 0
    log_w = torch.where(m, logps - batch.sampler_logps, 0.0).sum(1).detach()
    w = torch.exp(log_w)
    h = w if cap is None else w.clamp(max=cap)
    slope = w if cap is None else w * (w < cap)
    log_p = torch.where(m, logps, 0.0).sum(1).detach()
    want = -(_rloo(batch) * (h + slope * log_p))[:, None] / len(w)
    torch.testing.assert_close(g[m], want.expand_as(g)[m], rtol=1e-5, atol=1e-7)
    found = _offpolicy_audit(near, lambda lp, b: _exact_offpolicy(lp, b, weight=_attached(cap)))
    names = [f.name for f in found.findings]
    assert names == ["ratio-1-broken"] + (["truncation-bias"] if cap else []), found
    assert "left attached" in found.relation


# -- β > 0: the KL averaged over each reply, its value clamped --


def _k3_scored(clamp_after):
    """The leave-one-out REINFORCE plus β (1/Lᵢ) Σₜ k3ₜ·e^(ℓₜ − sg ℓₜ) per reply, ÷ N, its k3
    clamped at 10 before the weight e^(ℓ − sg ℓ) (its value then keeps its score part) or after
    (its gradient 0 past the clamp)."""

    def fn(lp, b):
        m = b.completion_mask
        d = torch.where(m > 0, lp - b.ref_logps, 0.0)
        k3 = torch.exp(-d) - 1 + d
        score = torch.exp(lp - lp.detach())
        kl = (score * k3).clamp(max=10) if clamp_after else score * k3.clamp(max=10)
        per_reply = (kl * m).sum(1) / m.sum(1)
        return _summed(lp, b, _rloo(b)) + b.beta * per_reply.mean()

    return fn


@pytest.mark.parametrize(("clamp_after", "past"), [(True, "get no KL weight"), (False, "get κ·10")])
def test_a_per_sequence_k3_score_is_token_local_and_its_clamp_a_rule(clamp_after, past):
    """Derived: ∂/∂ℓₜ of k3ₜ·e^(ℓₜ − sg ℓₜ) is (1 − e^(−dₜ)) + k3ₜ = dₜ (held against autograd
    below): each token's own log-ratio, ÷ its reply's L (``kl-token-local``, ``kl-normalised``);
    past the clamp at 10 the tokens' KL part is 0 (clamped after the weight) or 10 times the
    score (before), said as a rule of their k3, the rest exact."""
    d = torch.tensor([-1.5, -0.2, 0.4, 2.0], dtype=torch.float64)
    lp = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    k3 = torch.exp(-(lp - (lp.detach() - d))) - 1 + (lp - (lp.detach() - d))
    (g,) = torch.autograd.grad((torch.exp(lp - lp.detach()) * k3).sum(), lp)
    torch.testing.assert_close(g, d)
    # sixteen batches: tokens past the clamp are seldom drawn (on four this reading fails)
    found = _seq_audit(_k3_scored(clamp_after), problem_name="kl", batches=16, kl=True)
    assert [f.name for f in found.findings] == ["kl-token-local", "kl-normalised"], found
    assert "whose KL value k3 = e^(−dₜ) − 1 + dₜ passes a clamp" in found.findings[0].where
    assert past in found.findings[0].where


def _token_mean_with_kl(estimator):
    """A token mean over the batch of the leave-one-out REINFORCE plus β × the token mean of a
    KL estimator on dₜ = ℓₜ − ℓ^ref_t, the estimator's log-ratio clamped at −10 and its value
    clamped to [−10, 10] (OpenRLHF 0.11.2's ``compute_approx_kl`` with ``aggregate_loss``'s
    default token mean: its ``--algo.kl.use_loss`` route)."""

    def fn(lp, b):
        m = b.completion_mask
        d = lp - b.ref_logps
        if estimator == "k2":
            kl = d**2 / 2
        else:
            e = d.clamp(min=-10)
            kl = torch.exp(-e) - 1 + e
        kl = kl.clamp(min=-10, max=10)
        tokens = m.sum()
        return -(lp * _rloo(b)[:, None] * m).sum() / tokens + b.beta * (kl * m).sum() / tokens

    return fn


@pytest.mark.parametrize(("estimator", "name"), [("k2", "kl-token-local"), ("k3", "kl-forward")])
def test_a_kl_in_a_token_mean_over_the_batch_is_read_with_one_factor_a_batch(estimator, name):
    """Derived (held against autograd below): each token's weight is
    −∂L/∂ℓₜ = (Aᵢ − β g(dₜ))/T_b, T_b the batch's count of the model's tokens, g = dₜ (k2) or
    1 − e^(−dₜ) (k3), g = 0 where k3 passes its clamp at 10: the KL's part is one estimator's
    times −β/T_b, a factor that changes from batch to batch, its tokens past the clamp said as
    a rule; the reward's part has the same factor a batch, so the whole loss is one token mean
    over the batch (``batch-dependent-normaliser``, said once, as the family's table names it)."""
    from eligibility.check.sequence import batch_of
    from eligibility.lab.sequence.builtin import PROBLEMS

    fn = _token_mean_with_kl(estimator)
    p = PROBLEMS["kl"]()
    logps, batch = p.on_policy(
        batch_of(p, p.draw(len(p.prompts), np.random.default_rng(0)).rows, 1.0)
    )
    lp = logps.detach().double().requires_grad_(True)
    (g,) = torch.autograd.grad(fn(lp, batch), lp)
    m = batch.completion_mask > 0
    d = (lp - batch.ref_logps).detach()
    k3 = torch.exp(-d) - 1 + d
    part = d if estimator == "k2" else (1 - torch.exp(-d)) * (k3 < 10)
    want = (_rloo(batch).double()[:, None] - batch.beta * part) / m.sum()
    torch.testing.assert_close(-g[m], want[m], rtol=1e-9, atol=1e-12)
    found = _seq_audit(fn, problem_name="kl", batches=16, kl=True)  # as above: the clamp
    assert [f.name for f in found.findings] == [name, "batch-dependent-normaliser"], found
    assert "factor per batch" in found.relation, found
    if estimator == "k3":  # some tokens pass the clamp on these batches, in replies of one token
        assert (
            "tokens whose KL value k3 = e^(−dₜ) − 1 + dₜ passes a clamp" in found.findings[0].where
        )
        assert "get no KL weight" in found.findings[0].where


def _sampler_mean(logps, batch):
    """The exact weight's sampler part Πₜ π_old/μ replaced by the mean of its tokens' ratios."""
    m = batch.completion_mask > 0
    lp = torch.where(m, logps, 0.0)
    q = torch.where(m, lp - batch.old_logps, 0.0).sum(1)
    s = torch.where(m, torch.exp(batch.old_logps - batch.sampler_logps), 0.0).sum(1) / m.sum(1)
    return -((torch.exp(q) * s).detach() * _rloo(batch) * lp.sum(1)).mean()


OFF_POLICY_REPLY_FACTORS = {
    # the exact weight twice: sg(Πq·Πs)² A
    "squared": (
        lambda lp, b: _exact_offpolicy(lp, b, weight=lambda log_w: torch.exp(2 * log_w).detach()),
        "with each reply's Πₜ π_θ/μ divided out, each reply's weight is its exact credit × 1·x, "
        "x = the reply's importance weight Πₜ π_θ/μ;",
    ),
    "sampler-mean": (
        _sampler_mean,
        "with each reply's Πₜ π_θ/π_old divided out, each reply's weight is its exact credit × "
        "1·x, x = the mean over the reply's tokens of π_old/μ;",
    ),
}
"""Reply weights off the off-policy splits' grammar: the words the reading must say."""


@pytest.mark.parametrize("name", _fast(OFF_POLICY_REPLY_FACTORS, ("squared",)))
def test_a_reply_weight_outside_the_splits_is_read_with_the_owed_weight_divided_out(near, name):
    """Derived: the exact weight squared (each reply × its Πq·Πs once more), and the sampler's
    product replaced by the mean of its per-token ratios (each reply × mean π_old/μ where Πₜ
    π_old/μ is owed): both a reply factor in one of the reply's own ratios, read with the owed
    part divided out; both read credit-unexplained with no description before."""
    fn, phrase = OFF_POLICY_REPLY_FACTORS[name]
    found = _offpolicy_audit(near, fn)
    assert [f.name for f in found.findings] == ["reply-factor"], found
    assert phrase in found.findings[0].where, found.findings[0].where


def test_a_ppo_clip_on_the_ratio_to_the_sampler_is_read_with_its_epsilon(near):
    """Derived: each token weighted by its own π_θ/μ (a ratio taken against the sampler where
    π_old is meant), PPO-clipped at ε = 0.2 on the advantage's side: the tokens whose π_θ/μ
    leaves 1 by more than 0.2 get none, a clip the audit names with its ε (the tokens were
    said dropped by no bound before). The loss is bench/check/apart/offpolicy.py's."""
    fn = _example(
        str(Path(__file__).parents[1] / "bench/check/apart/offpolicy.py")
    ).ratio_against_sampler
    found = _offpolicy_audit(near, fn)
    clip = [f for f in found.findings if f.name == "clipping-bias"]
    assert clip and "π_θ/μ leaves 1 by more than ε = 0.2" in clip[0].where, found
