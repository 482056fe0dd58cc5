"""The KL taken as a whole reply's sum in the reward: read at the replies, not within them.

A KL penalty put in the reward as the sequence's Σₜ (ℓₜ − ℓ^ref_t) (TRL's RLOOTrainer, verl's
``use_kl_in_reward``) gives every token of a reply one weight: nothing varies within the
reply, so the within-reply reading of the KL's part sees none. Its mean is the exact one (the
terms before token t are of mean zero), so it must not be read as no KL gradient. Read at the
replies instead: two replies of one group with the same reward differ in weight only by their
KL parts, whatever the reward's baseline, which gives the KL's weight and its estimator.
Each expected reading is derived from the loss's code (its weights by autograd on the batch);
the batches are the exact ``kl`` problem's (β = 0.1).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_check_audit import _rloo, _seq_audit, _summed  # noqa: E402


def _loo(x, G):
    r = x.view(-1, G)
    return (r - (r.sum(1, keepdim=True) - r) / (G - 1)).reshape(-1)


def _kl(b, per_token):
    return (per_token * b.completion_mask).sum(1)


def _in_reward(lp, b):
    """RLOO of R − β Σₜ (ℓ^old − ℓ^ref)ₜ: the KL in the reward before the baseline (exact)."""
    shaped = b.rewards - b.beta * _kl(b, b.old_logps - b.ref_logps)
    return _summed(lp, b, _loo(shaped, b.group_size))


def _after_baseline(lp, b):
    """RLOO of R, less β × each reply's own KL afterwards (no baseline for it: exact too)."""
    return _summed(lp, b, _rloo(b) - b.beta * _kl(b, b.old_logps - b.ref_logps))


def _backwards(lp, b):
    """The log-ratio written ℓ^ref − ℓ^old: the KL rewarded, a weight −β."""
    shaped = b.rewards - b.beta * _kl(b, b.ref_logps - b.old_logps)
    return _summed(lp, b, _loo(shaped, b.group_size))


def _k3(lp, b):
    """k3 = e^(−d) + d − 1 of d = ℓ^old − ℓ^ref summed in the reward: not the KL's gradient."""
    d = b.old_logps - b.ref_logps
    shaped = b.rewards - b.beta * _kl(b, torch.exp(-d) + d - 1.0)
    return _summed(lp, b, _loo(shaped, b.group_size))


def _doubled(lp, b):
    """The KL in the reward at 2β."""
    shaped = b.rewards - 2 * b.beta * _kl(b, b.old_logps - b.ref_logps)
    return _summed(lp, b, _loo(shaped, b.group_size))


@pytest.mark.parametrize("loss", [_in_reward, _after_baseline])
def test_the_sequence_kl_in_the_reward_reads_exact(loss):
    found = _seq_audit(loss, "kl", batches=4, kl=True)
    assert found.findings == [], found


@pytest.mark.parametrize(
    ("loss", "name", "words"),
    [
        (_backwards, "kl-weight", "-1 times"),
        (_doubled, "kl-weight", "2 times"),
        (_k3, "kl-reward-estimate", "k3"),
    ],
)
def test_a_sequence_kl_of_another_weight_or_estimator_is_named(loss, name, words):
    found = _seq_audit(loss, "kl", batches=4, kl=True)
    assert [f.name for f in found.findings] == [name], found
    assert words in found.findings[0].where, found.findings[0].where
    assert "kl-no-gradient" not in [f.name for f in found.findings]
