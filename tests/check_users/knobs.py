"""One GRPO/RLOO loss with a knob for each line a user gets wrong (``--sequence``, logps form).

``loss(logps, batch, **knobs)``; the defaults are the unbiased RLOO, the KL as k1 in the reward.
Each knob is the line the check's fix names:

* ``advantage``: ``"rloo"``; ``"mean"`` (the group mean, the sample in it); ``"std"`` (÷ the
  group's std); ``"whiten"`` (the batch's mean and std);
* ``aggregation``: ``"sum"`` (each completion summed, ÷ N); ``"length"`` (÷ its length);
  ``"token"`` (÷ the batch's token count); ``"constant"`` (÷ N · T_max);
* ``mask``: ``"completion"``; ``"eos"`` (``ids != eos_token_id``); ``"truncated"`` (the
  completions without EOS dropped); ``"truncated-counted"`` (dropped from the numerator only);
* ``kl``: ``"reward"`` (k1 in the reward); ``"none"``; ``"k1"``, ``"k2"``, ``"k3"`` (per token,
  in the loss); ``beta``: the KL's weight (None: ``batch.beta``);
* ``sign``: −1 returns the objective; ``divide``: the loss ÷ this (micro-batches).
"""

from __future__ import annotations

import functools

import torch


def _advantage(r, G, how):
    r = r.view(-1, G)
    if how == "rloo":
        return (r - (r.sum(dim=1, keepdim=True) - r) / (G - 1)).reshape(-1)
    if how == "mean":
        return (r - r.mean(dim=1, keepdim=True)).reshape(-1)
    if how == "std":
        return ((r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, keepdim=True) + 1e-4)).reshape(-1)
    flat = r.reshape(-1)
    return (flat - flat.mean()) / (flat.std() + 1e-4)


def loss(logps, batch, advantage="rloo", aggregation="sum", mask="completion", kl="reward",
         beta=None, sign=1.0, divide=1.0):  # fmt: skip
    beta = batch.beta if beta is None else beta
    m = batch.completion_mask
    ids = batch.completion_ids
    has_eos = ((ids == batch.eos_token_id) & (m > 0)).any(dim=1).to(logps.dtype)[:, None]
    kept = {"completion": m, "eos": m * (ids != batch.eos_token_id),
            "truncated": m * has_eos, "truncated-counted": m * has_eos}[mask]  # fmt: skip
    counted = m if mask == "truncated-counted" else kept
    r = batch.rewards
    if kl == "reward":
        r = r - beta * ((batch.old_logps - batch.ref_logps) * m).sum(1)
    a = _advantage(r, batch.group_size, advantage)[:, None]
    per_token = -a * logps * kept
    if aggregation == "sum":
        pg = per_token.sum() / len(m)
    elif aggregation == "length":
        pg = (per_token.sum(1) / counted.sum(1).clamp(min=1.0)).mean()
    elif aggregation == "token":
        pg = per_token.sum() / counted.sum()
    else:
        pg = per_token.sum() / (len(m) * batch.max_completion_length)
    d = batch.ref_logps - logps
    k = {"k1": -d, "k2": 0.5 * d**2, "k3": torch.exp(d) - d - 1}.get(kl)
    penalty = 0.0 if k is None else beta * (k * m).sum() / len(m)
    return sign * (pg + penalty) / divide


def make(**knobs):
    """The loss with these knobs, as a function of (logps, batch)."""
    return functools.partial(loss, **knobs)
