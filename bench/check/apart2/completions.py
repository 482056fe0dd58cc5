"""GRPO-family losses over single completions, each with one mistake of its own (or none).

Each is ``loss(logps, batch)`` for ``eligibility check --sequence``: ``logps`` [N, W] the
per-token ln π_θ of the sampled tokens, ``batch`` the check's (rewards, group_size,
completion_mask, old_logps, ref_logps, beta). Written apart from the check, as a trainer's
maintainer writes them; the verdict and the place each is expected to read are in
``expected.py``, derived before any run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _loo(x, group_size):
    """xᵢ − the mean of the other members of i's group, [N]."""
    r = x.view(-1, group_size)
    return (r - (r.sum(1, keepdim=True) - r) / (group_size - 1)).reshape(-1)


def _summed(logps, batch, mask=None):
    """Σₜ mₜ ℓₜ per completion, [N]."""
    m = batch.completion_mask if mask is None else mask
    return (logps * m).sum(1)


def median_of_others(logps, batch):
    """Correct, unusual: the baseline is the median reward of the other completions of the group.

    "The mean gets dragged around by one lucky sample, so I use the median of the others; it
    never looks at the completion it is the baseline for."
    """
    G = batch.group_size
    r = batch.rewards.view(-1, G)
    base = torch.stack(
        [torch.cat([r[:, :i], r[:, i + 1 :]], 1).median(1).values for i in range(G)], 1
    )
    advantage = (r - base).reshape(-1)
    return -(advantage * _summed(logps, batch)).mean()


_RUNNING = {"mean": 0.0}


def running_mean_baseline(logps, batch):
    """Correct, unusual: a baseline kept across steps (an exponential moving average of rewards).

    "No groups needed: I subtract a running mean of the rewards of earlier batches, and fold
    this batch in only after its loss is built."
    """
    advantage = batch.rewards - _RUNNING["mean"]
    out = -(advantage * _summed(logps, batch)).mean()
    _RUNNING["mean"] = 0.9 * _RUNNING["mean"] + 0.1 * float(batch.rewards.mean())
    return out


def mask_shifted_for_labels(logps, batch):
    """The completion mask shifted one place right, "to line it up with the shifted labels".

    The log-probs are already per sampled token, so the shift drops each completion's first
    token and puts its weight on the position just past its end.
    """
    mask = F.pad(batch.completion_mask[:, :-1], (1, 0))
    advantage = _loo(batch.rewards, batch.group_size)
    return -(advantage * _summed(logps, batch, mask)).mean()


def reward_per_token(logps, batch):
    """The reward divided by the completion's length before the group baseline.

    "Long completions were collecting the same reward as short ones, so each completion's
    reward is made per token first."
    """
    lengths = batch.completion_mask.sum(1)
    advantage = _loo(batch.rewards / lengths, batch.group_size)
    return -(advantage * _summed(logps, batch)).mean()


def mean_over_informative_groups(logps, batch):
    """Groups whose rewards are all equal are filtered out, and the mean is over what is left.

    "Groups where every completion scored the same teach nothing (their advantages are 0), so
    I drop them, as dynamic sampling does, and average over the completions kept."
    """
    G = batch.group_size
    r = batch.rewards.view(-1, G)
    keep = (r.max(1).values > r.min(1).values).repeat_interleave(G).float()
    advantage = _loo(batch.rewards, G)
    return -(keep * advantage * _summed(logps, batch)).sum() / keep.sum().clamp(min=1.0)


def advantage_on_final_token(logps, batch):
    """The advantage placed on each completion's last token only.

    "The reward is given when the completion ends, so it goes on the final token", as a per-token
    reward with no return computed back over the earlier tokens.
    """
    last = batch.completion_mask.sum(1).long() - 1
    final = logps.gather(1, last[:, None])[:, 0]
    advantage = _loo(batch.rewards, batch.group_size)
    return -(advantage * final).mean()


def confidence_weighted(logps, batch):
    """Each completion's term weighted by one minus its mean token probability (detached).

    "Spend the gradient on what the model is unsure of: a completion it already writes with
    confidence gets a smaller weight."
    """
    m = batch.completion_mask
    summed = _summed(logps, batch)
    confidence = torch.exp(summed / m.sum(1)).detach()
    advantage = _loo(batch.rewards, batch.group_size)
    return -(advantage * (1.0 - confidence) * summed).mean()


def rank_advantage(logps, batch):
    """The advantage is each completion's rank in its group, centred ("robust to reward scale").

    Ranks from a stable double argsort, so tied rewards get distinct ranks in their order in
    the group; centred by the mean rank (G − 1)/2.
    """
    G = batch.group_size
    r = batch.rewards.view(-1, G)
    ranks = torch.argsort(torch.argsort(r, dim=1, stable=True), dim=1, stable=True).float()
    advantage = (ranks - (G - 1) / 2).reshape(-1)
    return -(advantage * _summed(logps, batch)).mean()


def _shaped(batch, per_token_kl):
    """The reward less β times each completion's summed per-token KL estimate."""
    return batch.rewards - batch.beta * (per_token_kl * batch.completion_mask).sum(1)


def kl_after_baseline(logps, batch):
    """Correct, unusual: the sequence KL penalty subtracted after the group baseline, not before.

    "The baseline is the others' mean reward; each completion's own KL (k1, summed) is then
    taken off its advantage", so the KL part has no baseline of its own.
    """
    kl = ((batch.old_logps - batch.ref_logps) * batch.completion_mask).sum(1)
    advantage = _loo(batch.rewards, batch.group_size) - batch.beta * kl
    return -(advantage * _summed(logps, batch)).mean()


def kl_written_backwards(logps, batch):
    """The KL in the reward, its log-ratio written ln π_ref − ln π_old (the sign turned over)."""
    shaped = _shaped(batch, batch.ref_logps - batch.old_logps)
    advantage = _loo(shaped, batch.group_size)
    return -(advantage * _summed(logps, batch)).mean()


def k3_in_reward(logps, batch):
    """The KL in the reward estimated by k3 (e^(−d) + d − 1, d = ln π_old − ln π_ref).

    "k3 is the low-variance, never-negative KL estimate, so it is what I take off the reward."
    """
    d = batch.old_logps - batch.ref_logps
    shaped = _shaped(batch, torch.exp(-d) + d - 1.0)
    advantage = _loo(shaped, batch.group_size)
    return -(advantage * _summed(logps, batch)).mean()
