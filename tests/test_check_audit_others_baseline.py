"""A baseline from the group's other rewards that is not their mean reads as exact credit.

The median of a reply's group-mates' rewards never depends on the reply, so the credit
Rᵢ − median₋ᵢ R is exact in the mean (E[ĝ] = ∇J). With binary rewards it is 0 for every reply
whose reward is the others' majority and ±1 elsewhere: the zeros are no drop at random, the
±1 no sign of the advantage. Replies whose others' rewards are the same multiset share the
baseline, so within each such cell the weights are (1/N) R + a constant: that is what is read.
Each expected reading is derived from the loss's code; the batches are the exact ``length``
problem's.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_check_audit import _rloo, _seq_audit, _summed  # noqa: E402


def _median_of_others(lp, b):
    G = b.group_size
    r = b.rewards.view(-1, G)
    base = torch.stack(
        [torch.cat([r[:, :i], r[:, i + 1 :]], 1).median(1).values for i in range(G)], 1
    )
    return _summed(lp, b, (r - base).reshape(-1))


def _median_of_all(lp, b):
    """The median of the whole group, the reply's own reward in it: not a baseline of others."""
    r = b.rewards.view(-1, b.group_size)
    return _summed(lp, b, (r - r.median(1, keepdim=True).values).reshape(-1))


def _median_first_token_dropped(lp, b):
    """The median of the others, and every reply's first token left out (a rule: named)."""
    mask = b.completion_mask.clone()
    mask[:, 0] = 0
    G = b.group_size
    r = b.rewards.view(-1, G)
    base = torch.stack(
        [torch.cat([r[:, :i], r[:, i + 1 :]], 1).median(1).values for i in range(G)], 1
    )
    return -(lp * (r - base).reshape(-1)[:, None] * mask).sum() / len(lp)


def test_a_median_of_the_others_reads_exact():
    found = _seq_audit(_median_of_others, batches=8)
    assert found.findings == [], found
    assert "a baseline from its group's other rewards" in found.relation


def test_the_leave_one_out_mean_reads_as_before():
    found = _seq_audit(lambda lp, b: _summed(lp, b, _rloo(b)), batches=8)
    assert found.findings == [] and "other rewards alone" not in found.relation, found


@pytest.mark.parametrize(
    "loss", [_median_of_all, pytest.param(_median_first_token_dropped, marks=pytest.mark.slow)]
)
def test_a_baseline_with_the_reply_in_it_or_a_token_dropped_is_still_read(loss):
    """The group's median with the reply in it differs from any baseline of the others only in
    the cells of four other successes (a group of 4 and one of 5, lower medians 0 and 1): the
    24 batches the check audits hold both."""
    found = _seq_audit(loss, batches=24)
    assert found.findings != [], found
