"""Losses over episodes of several turns, for ``eligibility check --family episodes``.

Each is ``loss(model, batch)``: ``batch.completion_ids`` holds every token after the prompt
(the model's replies and the world's answers), ``batch.completion_mask`` is 1 on the model's
tokens only, ``batch.turn`` gives each token's turn (−1 on padding) and ``batch.turn_rewards``
[N, K] what each turn earned. They take J = E[Σₖ rₖ] (no KL: run them with ``--kl none``).

``reward_to_go`` is correct: REINFORCE with per-turn rewards weights turn k's tokens by the
rewards from turn k on, less the mean of the group's others. The rest are the mistakes the
check names: the three of the masks and the weighting, then the world-token mistake without a
baseline and divided per episode, and the right mask divided per episode
(``length-normalised``): each named whatever form it is written in.
"""

from __future__ import annotations

import torch


def _logps(model, batch):
    """ln π of every token after the prompt (the logits at P − 1 + t predict token t)."""
    ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)
    P = batch.prompt_ids.shape[1]
    z = torch.log_softmax(model(input_ids=ids).logits[:, P - 1 : -1], dim=-1)
    return z.gather(-1, batch.completion_ids[..., None])[..., 0]


def _leave_one_out(g, group_size):
    """gᵢ − the mean of the other members of i's group, column by column: [N, K]."""
    r = g.view(-1, group_size, g.shape[1])
    return (r - (r.sum(1, keepdim=True) - r) / (group_size - 1)).reshape(g.shape)


def _loss(model, batch, per_turn, mask):
    a = _leave_one_out(per_turn, batch.group_size)
    a_t = a.gather(1, batch.turn.clamp(min=0)).float()  # each token its turn's advantage
    return -(_logps(model, batch) * a_t * mask).sum() / len(mask)


def reward_to_go(model, batch):
    """Correct: turn k's tokens weighted by Gₖ = Σ_{j ≥ k} rⱼ, the model's tokens alone."""
    g = batch.turn_rewards.flip(1).cumsum(1).flip(1)
    return _loss(model, batch, g, batch.completion_mask)


def whole_return(model, batch):
    """Mistake: every turn weighted by the whole return Σⱼ rⱼ (its mean right, more noise)."""
    g = batch.turn_rewards.sum(1, keepdim=True).expand_as(batch.turn_rewards)
    return _loss(model, batch, g, batch.completion_mask)


def world_tokens_trained(model, batch):
    """Mistake: every token after the prompt scored, the world's answers too."""
    g = batch.turn_rewards.flip(1).cumsum(1).flip(1)
    return _loss(model, batch, g, (batch.turn >= 0).long())


def first_reply_only(model, batch):
    """Mistake: the model's tokens after the world's first answer dropped."""
    g = batch.turn_rewards.flip(1).cumsum(1).flip(1)
    return _loss(model, batch, g, batch.completion_mask * (batch.turn == 0))


def world_tokens_no_baseline(model, batch):
    """Mistake: the world's tokens scored, turn k's tokens weighted by Gₖ with no baseline."""
    g = batch.turn_rewards.flip(1).cumsum(1).flip(1)
    g_t = g.gather(1, batch.turn.clamp(min=0)).float()
    mask = (batch.turn >= 0).long()
    return -(_logps(model, batch) * g_t * mask).sum() / len(mask)


def world_tokens_per_episode(model, batch):
    """Mistakes: the world's tokens scored, and each episode's terms divided by its count."""
    g = batch.turn_rewards.flip(1).cumsum(1).flip(1)
    a_t = _leave_one_out(g, batch.group_size).gather(1, batch.turn.clamp(min=0)).float()
    mask = (batch.turn >= 0).long()
    per_episode = (_logps(model, batch) * a_t * mask).sum(1) / mask.sum(1)
    return -per_episode.mean()


def per_episode_mean(model, batch):
    """Mistake: the model's tokens alone, but each episode's terms divided by its count."""
    g = batch.turn_rewards.flip(1).cumsum(1).flip(1)
    a_t = _leave_one_out(g, batch.group_size).gather(1, batch.turn.clamp(min=0)).float()
    mask = batch.completion_mask
    per_episode = (_logps(model, batch) * a_t * mask).sum(1) / mask.sum(1)
    return -per_episode.mean()
