"""The sampler as it was before its decode step took fixed shapes: the reference of its numbers.

One host read a token (how many rows are left), the inverse CDF in NumPy's float64, the
prompts' cache grown by appending. ``drop_every``: finished rows leave the batch once they are
an eighth of it, looked at every ``drop_every`` steps (1: every step, as it did where the
cache's rows can be indexed); None: every row is computed to the end (the fixed-shape step's
batch). Otherwise kept as it was, so that the sampler's tokens and log-probs are held against
it exactly.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from eligibility.lm import truncation
from eligibility.lm.policy import device_of, forward_of
from eligibility.lm.sample import distinct, left_pad
from eligibility.lm.tasks import EOS


def _cdf_draw(logp, u):
    if u is None:
        return logp.argmax(-1)
    cdf = np.cumsum(logp.detach().double().exp().cpu().numpy(), axis=1)
    tok = np.minimum((cdf < (u * cdf[:, -1])[:, None]).sum(1), logp.shape[1] - 1)
    return torch.from_numpy(tok)


def _prefix(forward, ids, mask, masked, groups):
    if not forward.shares:
        return forward(ids, mask if masked else None, use_cache=True, last=True)
    firsts, index = (g.to(ids.device) for g in groups)
    rows = mask.index_select(0, firsts) if masked else None
    out, cache = forward(ids.index_select(0, firsts), rows, use_cache=True, last=True)
    return out.index_select(0, index), forward.expand(cache, index)


@torch.no_grad()
def reference_sample(model, prompts, *, vocab_size, max_new_tokens, temperature=1.0, rng=None,
                     eos_id=EOS, share=None, sampling=None, drop_every=1):  # fmt: skip
    """(tokens, completion mask, logps, ended, raw logps, kept sizes) as the old sampler gave."""
    device, forward = device_of(model), forward_of(model)
    mine, total, width = share or (slice(0, len(prompts)), len(prompts), 0)
    ids, prompt_mask = (x.to(device) for x in left_pad(prompts, eos_id, width))
    n, p = ids.shape
    masked = not (forward.hf and bool(prompt_mask.all()))
    mask = torch.zeros((n, p + max_new_tokens), dtype=torch.long, device=device)
    mask[:, :p] = prompt_mask
    groups = distinct(prompts) if forward.shares else None
    out, cache = _prefix(forward, ids, prompt_mask, masked, groups)
    z = forward.logits(out[:, -1], vocab_size)
    tokens = torch.full((n, max_new_tokens), eos_id, dtype=torch.long, device=device)
    logps = torch.zeros((n, max_new_tokens), device=device)
    alive = torch.ones(n, dtype=torch.bool, device=device)
    seen = sizes = raw = None
    if sampling is not None:
        if sampling.repetition_penalty != 1.0:
            seen = truncation.seen_tokens(ids, prompt_mask, vocab_size)
        sizes, raw = torch.zeros_like(tokens), torch.zeros_like(logps)
    rows = np.arange(n)
    at = torch.from_numpy(rows).to(device)
    t = 0
    for t in range(max_new_tokens):
        logp = F.log_softmax(z.to(torch.promote_types(z.dtype, torch.float32)) / temperature, -1)
        full = logp
        if sampling is not None:
            logp, sizes[at, t] = truncation.step(
                z, None if seen is None else seen[at], temperature, sampling
            )
        u = None if rng is None else rng.random(total)[mine]
        live = alive[at]
        tok = torch.where(live, _cdf_draw(logp, None if u is None else u[rows]).to(device), eos_id)
        tokens[at, t] = tok
        logps[at, t] = torch.where(live, logp.gather(1, tok[:, None])[:, 0], 0.0)
        if sampling is not None:
            raw[at, t] = torch.where(live, full.gather(1, tok[:, None])[:, 0], 0.0)
            if seen is not None:
                seen[at[live], tok[live]] = True
        mask[at, p + t] = live.long()
        live &= tok != eos_id
        alive[at] = live
        left = int(live.sum())
        if t == max_new_tokens - 1 or not left:
            break
        dropping = drop_every is not None and (t + 1) % drop_every == 0
        if dropping and forward.shares and 8 * (len(rows) - left) >= len(rows):
            keep = live.nonzero()[:, 0]
            rows, at, tok = rows[keep.cpu().numpy()], at[keep], tok[keep]
            cache = forward.expand(cache, keep)
        step = mask[at, : p + t + 1] if masked else None
        out, cache = forward(tok[:, None], step, cache, use_cache=True, last=True)
        z = forward.logits(out[:, -1], vocab_size)
    s = t + 1
    cut = lambda x: None if x is None else x[:, :s]  # noqa: E731
    return tokens[:, :s], mask[:, p : p + s], logps[:, :s], ~alive, cut(raw), cut(sizes)
