"""Episode losses with the mistakes agent trainers shipped, each beside its fix, for the audit.

Each is ``loss(model, batch)`` for ``eligibility check --family episodes --kl none``. The batch
holds every token after the prompt (``completion_ids``), the model's tokens marked by
``completion_mask``, each token's turn (``turn``, −1 on padding) and what each turn earned
(``turn_rewards`` [N, K]). The fixed loss is the same in every pair: turn k's tokens weighted by
its reward-to-go less the group's leave-one-out mean, the model's tokens alone, summed and
divided by the batch's episodes (``fixed``). The credit audit locates each mistake.
"""

from __future__ import annotations

import torch


def _logps(model, batch):
    ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)
    P = batch.prompt_ids.shape[1]
    z = torch.log_softmax(model(input_ids=ids).logits[:, P - 1 : -1], dim=-1)
    return z.gather(-1, batch.completion_ids[..., None])[..., 0]


def _reward_to_go(batch):
    return batch.turn_rewards.flip(1).cumsum(1).flip(1)


def _leave_one_out(g, group_size):
    r = g.view(-1, group_size, g.shape[1])
    return (r - (r.sum(1, keepdim=True) - r) / (group_size - 1)).reshape(g.shape)


def _loss(model, batch, advantage, mask, normaliser=None):
    a_t = advantage.gather(1, batch.turn.clamp(min=0)).float()
    terms = _logps(model, batch) * a_t * mask
    return -terms.sum() / (len(mask) if normaliser is None else normaliser)


def fixed(model, batch):
    """Correct: the model's tokens, turn k by Gₖ less the group's leave-one-out mean."""
    a = _leave_one_out(_reward_to_go(batch), batch.group_size)
    return _loss(model, batch, a, batch.completion_mask)


def role_header_scored(model, batch):
    """The role header before each world answer left in the loss mask (one token an answer)."""
    world = (batch.turn >= 0) & (batch.completion_mask == 0)
    first = world & ~torch.cat([torch.zeros_like(world[:, :1]), world[:, :-1]], 1)
    a = _leave_one_out(_reward_to_go(batch), batch.group_size)
    return _loss(model, batch, a, (batch.completion_mask.bool() | first).long())


def return_zeroed_before_answer(model, batch):
    """The return of the turns before the world's first answer zeroed (a reset at the answer)."""
    g = _reward_to_go(batch).clone()
    g[:, 0] = 0.0
    return _loss(model, batch, _leave_one_out(g, batch.group_size), batch.completion_mask)


def first_reply_left_out(model, batch):
    """The first reply left out of the loss mask (only the replies after a world answer)."""
    a = _leave_one_out(_reward_to_go(batch), batch.group_size)
    return _loss(model, batch, a, batch.completion_mask * (batch.turn > 0))


def own_turn_reward(model, batch):
    """Each turn credited with its own reward only (no reward-to-go)."""
    a = _leave_one_out(batch.turn_rewards, batch.group_size)
    return _loss(model, batch, a, batch.completion_mask)


def whitened_across_groups(model, batch):
    """REINFORCE++-style: the returns whitened over the whole batch, not within each group."""
    g = _reward_to_go(batch)
    return _loss(model, batch, (g - g.mean(0)) / (g.std(0) + 1e-6), batch.completion_mask)


def token_mean_over_batch(model, batch):
    """DAPO-style: the token terms divided by the batch's count of the model's tokens."""
    a = _leave_one_out(_reward_to_go(batch), batch.group_size)
    m = batch.completion_mask
    return _loss(model, batch, a, m, normaliser=m.sum())


def accumulated_twice(model, batch):
    """The episode losses of two accumulation steps summed without dividing by the steps."""
    return 2 * fixed(model, batch)
