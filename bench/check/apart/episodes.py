"""Fresh multi-turn mistakes, written apart from the audit."""

import torch


def _logps(model, batch):
    ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)
    P = batch.prompt_ids.shape[1]
    z = torch.log_softmax(model(input_ids=ids).logits[:, P - 1 : -1], dim=-1)
    return z.gather(-1, batch.completion_ids[..., None])[..., 0]


def _loo(g, G):
    r = g.view(-1, G, g.shape[1])
    return (r - (r.sum(1, keepdim=True) - r) / (G - 1)).reshape(g.shape)


def _loss(model, batch, per_turn, mask):
    a = _loo(per_turn, batch.group_size)
    a_t = a.gather(1, batch.turn.clamp(min=0)).float()
    return -(_logps(model, batch) * a_t * mask).sum() / len(mask)


def discounted_half(model, batch):
    r = batch.turn_rewards
    K = r.shape[1]
    g = torch.zeros_like(r)
    run = torch.zeros_like(r[:, 0])
    for k in reversed(range(K)):
        run = r[:, k] + 0.5 * run
        g[:, k] = run
    return _loss(model, batch, g, batch.completion_mask)


def next_turns_reward(model, batch):
    r = batch.turn_rewards
    g = torch.cat([r[:, 1:], torch.zeros_like(r[:, :1])], 1)
    g = g.flip(1).cumsum(1).flip(1)
    return _loss(model, batch, g, batch.completion_mask)


def last_token_of_each_turn_dropped(model, batch):
    g = batch.turn_rewards.flip(1).cumsum(1).flip(1)
    m = batch.completion_mask.clone()
    nxt = torch.cat([m[:, 1:], torch.zeros_like(m[:, :1])], 1)
    m = m * nxt  # a model token followed by a non-model token loses its weight
    return _loss(model, batch, g, m)
