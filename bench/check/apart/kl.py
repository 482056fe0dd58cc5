"""Fresh KL mistakes, written apart from the audit."""


def _loo(r, g):
    r = r.view(-1, g)
    return (r - (r.sum(1, keepdim=True) - r) / (g - 1)).reshape(-1)


def _pg(logps, batch):
    a = _loo(batch.rewards, batch.group_size)
    return -(a[:, None] * logps * batch.completion_mask).sum() / a.numel()


def k2_penalty(logps, batch):
    d = logps - batch.ref_logps
    kl = (0.5 * d * d * batch.completion_mask).sum() / batch.rewards.numel()
    return _pg(logps, batch) + batch.beta * kl


def abs_penalty(logps, batch):
    d = logps - batch.ref_logps
    kl = (d.abs() * batch.completion_mask).sum() / batch.rewards.numel()
    return _pg(logps, batch) + batch.beta * kl


def k3_token_mean(logps, batch):
    d = batch.ref_logps - logps
    k3 = d.exp() - 1 - d
    m = batch.completion_mask
    kl = ((k3 * m).sum(1) / m.sum(1)).mean()
    return _pg(logps, batch) + batch.beta * kl
