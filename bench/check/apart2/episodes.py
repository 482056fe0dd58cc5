"""Multi-turn losses over episodes (a reply, the world's answer, a second reply), one mistake each.

Each is ``loss(model, batch)`` for ``eligibility check --family episodes``: ``batch`` holds every
token after the prompt (``completion_ids``), ``completion_mask`` 1 on the model's tokens,
``turn`` each token's turn (−1 on padding), ``turn_rewards`` [N, K], ``turns`` [N],
``ref_logps`` of every token and ``beta``. Written apart from the check; the expected verdicts
and places are in ``expected.py``, derived before any run.
"""

from __future__ import annotations

import torch


def _logps(model, batch):
    """ln π of every token after the prompt: the logits at P − 1 + t predict token t."""
    ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)
    P = batch.prompt_ids.shape[1]
    z = torch.log_softmax(model(input_ids=ids).logits[:, P - 1 : -1], dim=-1)
    return z.gather(-1, batch.completion_ids[..., None])[..., 0]


def _loo(x, group_size):
    """xᵢ − the mean of the other members of i's group, column by column ([N] or [N, K])."""
    r = x.reshape(-1, group_size, *x.shape[1:])
    return (r - (r.sum(1, keepdim=True) - r) / (group_size - 1)).reshape(x.shape)


def _per_token(per_turn, batch):
    """Each token the value of its turn's column, [N, T]."""
    return per_turn.gather(1, batch.turn.clamp(min=0)).float()


def _to_go(batch):
    """Gₖ = Σ_{j ≥ k} rⱼ, [N, K]."""
    return batch.turn_rewards.flip(1).cumsum(1).flip(1)


def _loss(model, batch, per_turn_advantage, mask=None):
    m = batch.completion_mask if mask is None else mask
    a = _per_token(per_turn_advantage, batch)
    return -(_logps(model, batch) * a * m).sum() / len(m)


def returns_accumulated_forward(model, batch):
    """The per-turn returns accumulated with a forward cumsum (Gₖ = Σ_{j ≤ k} rⱼ).

    "Each turn's return is what the episode has earned up to and including it."
    """
    g = batch.turn_rewards.cumsum(1)
    return _loss(model, batch, _loo(g, batch.group_size))


def whole_return_baseline(model, batch):
    """Correct, unusual: turn k's reward-to-go less the mean of the other episodes' whole returns.

    "One baseline per episode is enough: the others' total reward, subtracted from every turn's
    reward-to-go" (a baseline that is not the turn's own column, but never this episode's).
    """
    G = batch.group_size
    whole = batch.turn_rewards.sum(1)
    others = (whole.view(-1, G).sum(1, keepdim=True) - whole.view(-1, G)) / (G - 1)
    advantage = _to_go(batch) - others.reshape(-1, 1)
    return _loss(model, batch, advantage)


def divided_by_turns(model, batch):
    """Each turn's advantage divided by its episode's number of turns.

    "Long dialogues should not dominate the batch, so an episode's credit is shared out over
    its turns."
    """
    advantage = _loo(_to_go(batch), batch.group_size) / batch.turns.float()[:, None]
    return _loss(model, batch, advantage)


def kl_over_every_token(model, batch):
    """The KL penalty taken over every token after the prompt, the world's answer's included.

    The episode's reward less β Σₜ (ln π − ln π_ref) summed over all of its tokens (the mask of
    real tokens, turn ≥ 0, not the model's); each model token weighted by the group-centred
    penalised return.
    """
    lp = _logps(model, batch)
    every = (batch.turn >= 0).float()
    kl = ((lp.detach() - batch.ref_logps) * every).sum(1)
    shaped = batch.turn_rewards.sum(1) - batch.beta * kl
    advantage = _loo(shaped, batch.group_size).float()
    return -(lp * advantage[:, None] * batch.completion_mask).sum() / len(lp)
