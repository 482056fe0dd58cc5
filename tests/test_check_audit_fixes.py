"""Each mistake the credit audit names, before and after the registry's fix.

For every name the audit gives whose fix no other test applies, a loss with that one mistake
is read with that name, and the same loss with the fix the registry prints
(:data:`eligibility.check.mistakes.MISTAKES`, its ``fix``) applied reads without it: the exact
credit where the fix leaves nothing else, else without the name. Each reading is derived from
the loss's code before any run (which tokens, which function of the credit); the batches are
the exact problems' (``length`` and ``kl`` single completions, ``two-turn`` episodes).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import test_check_audit as audit_tests  # noqa: E402
import test_check_reading as reading  # noqa: E402
from eligibility.check.mistakes import MISTAKES  # noqa: E402
from test_check_audit import _episodes_audit, _rloo, _rtg, _seq_audit, _summed  # noqa: E402

two_turn = audit_tests.two_turn  # the audit tests' fixture, shared


def _exact(lp, b):
    """The leave-one-out credit on every model token: what each fix below comes back to."""
    return _summed(lp, b, _rloo(b))


def _batch_mean(lp, b):
    """A baseline over the whole batch: Rᵢ − mean over all N (its own and other prompts')."""
    return _summed(lp, b, b.rewards - b.rewards.mean())


def _sign_flipped(lp, b):
    """The EOS token's term with the opposite sign (reading: a rule of the sample)."""
    eos = (b.completion_ids == b.eos_token_id) & (b.completion_mask > 0)
    return -(
        lp * (1.0 - 2.0 * eos.to(lp.dtype)) * _rloo(b)[:, None] * b.completion_mask
    ).sum() / len(lp)


def _discounted(lp, b):
    """Token t of each reply weighted 0.9ᵗ (a discount within a reply rewarded as a whole)."""
    t = torch.arange(lp.shape[1], dtype=lp.dtype)
    return -(lp * 0.9**t * _rloo(b)[:, None] * b.completion_mask).sum() / len(lp)


def _over_epsilon(lp, b):
    """÷ (σ over one value + 1e-4): σ is 0, so every weight is 10⁴ times the credit."""
    a = _rloo(b)
    return _summed(lp, b, a / (a.view(-1, 1).std(1, unbiased=False) + 1e-4))


def _length_factor(lp, b):
    """Each reply's leave-one-out credit × (1 + 1/L), a factor of its own length."""
    return _summed(lp, b, _rloo(b) * (1 + 1 / b.completion_mask.sum(1)))


def _relative(lp, b):
    """Each group's mean-centred return ÷ the group's mean return."""
    r = b.rewards.view(-1, b.group_size)
    return _summed(lp, b, ((r - r.mean(1, True)) / r.mean(1, True).clamp_min(1e-8)).reshape(-1))


def _group_mean(lp, b):
    """The fix: R − the group's mean, not ÷ it (a self-including mean: (G − 1)/G, said so)."""
    r = b.rewards.view(-1, b.group_size)
    return _summed(lp, b, (r - r.mean(1, True)).reshape(-1))


SEQUENCE = {
    # name: (the loss with it, the loss with the registry's fix, what the fix reads)
    "batch-mean-baseline": (_batch_mean, _exact, []),
    "sign-flipped": (_sign_flipped, _exact, []),
    "position-weighted": (_discounted, _exact, []),
    "epsilon-divisor": (_over_epsilon, _exact, []),
    "reply-factor": (_length_factor, _exact, []),
    "advantage-transformed": (reading.MAPS["squared"][0], _exact, []),
    "mean-normalised": (_relative, _group_mean, ["self-including-mean"]),
    "model-tokens-dropped": (reading._first_of_longer_reply_one, _exact, []),
}
"""Single completions on ``length``."""


FAST = {"model-tokens-dropped", "model-tokens-after-answer-dropped"}
"""One case of each group in the fast suite; the rest are marked slow (a second each)."""


def _cases(names):
    return [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in names]


@pytest.mark.parametrize("name", _cases(SEQUENCE))
def test_each_mistake_is_read_before_its_fix_and_gone_after(name):
    with_it, fixed, after = SEQUENCE[name]
    before = [f.name for f in _seq_audit(with_it, batches=8).findings]
    assert name in before, before
    assert [f.name for f in _seq_audit(fixed, batches=8).findings] == after


@pytest.mark.slow
def test_a_drop_at_random_not_restored_reads_a_constant_and_its_fix_none():
    """``"dropped-at-random"`` changes no mean where the kept are weighted 1/p (its fix where
    they are not): before, kept with p = 1/2 and weighted 1, the constant c ≈ 1/2 is said
    beside it; after, ÷ p, the weight restored: unbiased, no constant."""
    before = _seq_audit(reading._dropout(0.5, restore=False), batches=8)
    assert [f.name for f in before.findings] == ["dropped-at-random", "scale"], before
    after = _seq_audit(reading._dropout(0.5, restore=True), batches=8)
    assert [f.name for f in after.findings] == ["dropped-at-random"], after
    assert "unbiased within noise (the weight restored)" in after.findings[0].where
    assert not MISTAKES["dropped-at-random"].moves_mean


@pytest.mark.slow
def test_an_unknown_kl_estimator_is_read_before_its_fix_and_gone_after():
    """``"kl-estimator-unknown"`` on ``kl`` (β = 0.1): a penalty sign(dₜ) per token is no
    estimator's gradient; the fix, the log-ratio summed to go, is the sequence KL's own."""
    with_it, _ = reading.KL_READINGS["abs"]
    fixed, _ = reading.KL_READINGS["to-go"]
    before = [f.name for f in _seq_audit(with_it, "kl", batches=8, kl=True).findings]
    assert before == ["kl-estimator-unknown"]
    assert _seq_audit(fixed, "kl", batches=8, kl=True).findings == []


@pytest.mark.slow
def test_a_kl_estimate_summed_in_the_reward_is_read_before_its_fix_and_gone_after():
    """``"kl-reward-estimate"`` on ``kl`` (β = 0.1): k3 summed over each reply and taken off its
    reward; the fix, k1 summed and taken off the reward, is the KL's own gradient in mean."""
    with_it, _ = reading.KL_READINGS["k3-in-reward"]
    fixed, _ = reading.KL_READINGS["k1-in-reward"]
    before = [f.name for f in _seq_audit(with_it, "kl", batches=8, kl=True).findings]
    assert before == ["kl-reward-estimate"]
    assert _seq_audit(fixed, "kl", batches=8, kl=True).findings == []


# -- episodes: the model form, each turn credited with its reward-to-go --


def _scored(model, b):
    """(the log-softmax at each completion position, the sampled token's log-prob)."""
    ids = torch.cat([b.prompt_ids, b.completion_ids], 1)
    P = b.prompt_ids.shape[1]
    z = torch.log_softmax(model(input_ids=ids).logits[:, P - 1 : -1], -1)
    return z, z.gather(-1, b.completion_ids[..., None])[..., 0]


def _to_go(b, lp, mask, g=None):
    """−(1/N) Σ A_{i,k(t)} ℓᵢₜ mask, A each turn's reward-to-go (or ``g``, one a turn) less its
    leave-one-out mean."""
    g = _rtg(b) if g is None else g
    r = g.view(-1, b.group_size, g.shape[1])
    a = (r - (r.sum(1, keepdim=True) - r) / (b.group_size - 1)).reshape(g.shape)
    return -(lp * a.gather(1, b.turn.clamp(min=0)).float() * mask).sum() / len(mask)


def _other_entry(model, b):
    """The log-prob of the next id in the vocabulary, not the sampled one."""
    z, _ = _scored(model, b)
    other = (b.completion_ids + 1) % z.shape[-1]
    return _to_go(b, z.gather(-1, other[..., None])[..., 0], b.completion_mask)


def _with_entropy(model, b):
    """The exact loss less 0.01 × the entropy of every model position (a bonus)."""
    z, lp = _scored(model, b)
    entropy = -(z.exp() * z).sum(-1)
    return _to_go(b, lp, b.completion_mask) - 0.01 * (entropy * b.completion_mask).sum() / len(lp)


def _first_reply_only(model, b):
    """The mask cut after the world's first answer: only turn 0's tokens kept."""
    return _to_go(b, _scored(model, b)[1], b.completion_mask * (b.turn == 0))


def _fixed_episode(model, b):
    """Every fix below: the sampled token's log-prob, no bonus, batch.completion_mask."""
    return _to_go(b, _scored(model, b)[1], b.completion_mask)


def _a_turn_late(model, b):
    """Each turn credited with the later turns' rewards only (its own reward left out)."""
    return _to_go(b, _scored(model, b)[1], b.completion_mask, _rtg(b) - b.turn_rewards)


def _discounted_by_half(model, b):
    """Each turn credited with its rewards to go discounted by γ = 0.5 a turn."""
    return _to_go(b, _scored(model, b)[1], b.completion_mask, audit_tests._discounted(b, 0.5))


EPISODES = {
    "wrong-entry": _other_entry,
    "reads-whole-distribution": _with_entropy,
    "model-tokens-after-answer-dropped": _first_reply_only,
    "own-reward-withheld": _a_turn_late,
    "turns-discounted": _discounted_by_half,
}
"""Losses on ``two-turn`` with one mistake; each one's fix is :func:`_fixed_episode`."""


@pytest.mark.parametrize("name", _cases(EPISODES))
def test_each_episode_mistake_is_read_before_its_fix_and_gone_after(two_turn, name):
    before = [f.name for f in _episodes_audit(two_turn, EPISODES[name], batches=6).findings]
    assert name in before, before
    assert _episodes_audit(two_turn, _fixed_episode, batches=6).findings == []


def test_a_loss_without_its_kl_reads_no_kl_gradient_and_its_fix_none():
    """``"kl-no-gradient"`` on ``kl`` (β = 0.1): the leave-one-out REINFORCE with no KL term
    leaves the KL's part of every weight 0 (any estimator fits it with κ = 0: said as no KL
    gradient, not as a KL weight 0 times β); the fix, the log-ratio summed to go, reads none."""
    before = _seq_audit(_exact, "kl", batches=8, kl=True).findings
    assert [f.name for f in before] == ["kl-no-gradient"], before
    fixed, _ = reading.KL_READINGS["to-go"]
    assert _seq_audit(fixed, "kl", batches=8, kl=True).findings == []
