r"""A loss under a sampler cut to its nucleus (``--top-p 0.8``): the log-probs it scores.

Ours, from REINFORCE on a sampler that keeps, at each step, the smallest set of the most
probable tokens whose probability reaches p and renormalises over it (as engines do):

    μ_θ(oₜ | ·) = π_θ(oₜ | ·) / Sₜ on the nucleus,   Sₜ = Σ_{v ∈ nucleus} π_θ(v | ·).

``nucleus_logps`` scores each token with the renormalised log-probability ln μ_θ (as an engine
reports it) instead of the policy's ln π_θ: its expected gradient is the cut sampler's own
∇J_μ, not the policy's ∇J (``sampler-logps``).

    eligibility check truncated_sampler.py:nucleus_logps --off-policy --form model \
        --problem ratio-one --top-p 0.8
"""

from __future__ import annotations

import torch

TOP_P = 0.8
"""p, the nucleus the sampler keeps (the check's ``--top-p``)."""


def _nucleus(logits):
    """ln μ: the logits cut to the top-p nucleus at each position, renormalised."""
    with torch.no_grad():  # which tokens: a set
        p = torch.softmax(logits, dim=-1)
        ordered, order = p.sort(dim=-1, descending=True, stable=True)
        keep = torch.zeros_like(p, dtype=torch.bool)
        keep.scatter_(-1, order, ordered.cumsum(-1) - ordered < TOP_P)
    return torch.log_softmax(torch.where(keep, logits, -torch.inf), dim=-1)


def nucleus_logps(model, batch):
    """RLOO on the renormalised nucleus log-probs of the completion (model form)."""
    K = batch.completion_ids.shape[1]
    ids = batch.input_ids
    logits = model(input_ids=ids, logits_to_keep=K + 1).logits[:, :-1, :-1]  # no pad column
    m = batch.completion_mask > 0
    target = torch.where(m, ids[:, -K:], 0)
    lp = _nucleus(logits).gather(-1, target[..., None]).squeeze(-1)
    lp = torch.where(m, lp, 0.0)
    r = batch.rewards.view(-1, batch.group_size)
    G = batch.group_size
    a = ((G * r - r.sum(1, keepdim=True)) / (G - 1)).reshape(-1)
    return -(a * lp.sum(1)).mean()
