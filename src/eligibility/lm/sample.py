r"""Group sampling with a KV cache, and the log-probs a trainer recomputes.

The policy is π_τ(· | context) = softmax(z_{:V} / τ): the first V logits of the model (the
task's vocabulary) at temperature τ. Completions are sampled token by token from π_τ until EOS
(which is kept, and counted) or T_max tokens; the log-probs recorded are log π_τ of the tokens
drawn, so they are those of the distribution actually sampled. A completion cut at T_max has
no EOS: its probability is the product over the tokens it has (stopping at T_max is part of the
environment, as a time limit is).

The draws come from a NumPy generator (inverse CDF in float64 of the float32 probabilities; one
uniform a row and step, a finished row's unused), so a run's randomness is a few
``np.random.Generator`` states that a checkpoint restores exactly. A row that has ended is no
longer computed once the ended rows are an eighth of those computed (where the cache's rows
can be indexed): the model's step costs the live rows only, and each row's tokens are the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from eligibility.lm import truncation
from eligibility.lm.policy import Forward, Policy, device_of, forward_of
from eligibility.lm.tasks import EOS
from eligibility.lm.truncation import Sampling


@dataclass
class Completions:
    """A batch of prompts and their sampled completions.

    Attributes:
        prompt_ids: [N, P] prompts, left-padded (pads are EOS with ``prompt_mask`` 0).
        prompt_mask: [N, P] 1 for a prompt token.
        completion_ids: [N, T] completions, right-padded with EOS.
        completion_mask: [N, T] 1 for a token of the completion (its EOS included).
        logps: [N, T] log π_τ of each completion token at sampling time (0 on padding).
        ended: [N] the completion stopped at EOS (not at T_max).
        prefix: ([U] the first row of each distinct prompt, [N] each row's distinct prompt),
            or None (then found from ``prompt_ids`` where needed).
        raw_logps: [N, T] with a ``sampling`` processing, ln π_τ of each token before it (the
            mismatch's, ``lm.mismatch``); None: ``logps`` are those.
        kept: [N, T] with a ``sampling`` processing, mₜ = |Kₜ| the tokens it kept at each step
            (``lm.truncation``: the scorer's set is its own m largest); None: all.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    logps: torch.Tensor
    ended: torch.Tensor
    prefix: tuple[torch.Tensor, torch.Tensor] | None = None
    raw_logps: torch.Tensor | None = None
    kept: torch.Tensor | None = None

    @property
    def lengths(self) -> torch.Tensor:
        """L_i, the tokens of each completion (EOS included)."""
        return self.completion_mask.sum(1)

    def completions(self) -> list[list[int]]:
        """Every completion's tokens without its EOS: row i's first Lᵢ − [ended i] tokens."""
        n = (self.lengths - self.ended.long()).tolist()
        return [row[:k] for row, k in zip(self.completion_ids.tolist(), n, strict=True)]


def left_pad(
    prompts: Sequence[Sequence[int]], pad_id: int = EOS, width: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts as a left-padded [N, P] id tensor and its mask (P: the longest, or ``width``)."""
    width = max(width, *(len(p) for p in prompts))
    rows = [[pad_id] * (width - len(p)) + list(p) for p in prompts]
    ids = torch.tensor(rows, dtype=torch.long)
    lengths = torch.tensor([len(p) for p in prompts])
    mask = (torch.arange(width) >= width - lengths[:, None]).long()
    return ids, mask


def distinct(prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """([U] the first row of each distinct prompt, [N] the distinct prompt of each row)."""
    first: dict[tuple[int, ...], int] = {}  # each distinct prompt → its first row, in order
    for i, p in enumerate(prompts):
        first.setdefault(tuple(p), i)
    number = {key: u for u, key in enumerate(first)}
    return torch.tensor(list(first.values())), torch.tensor([number[tuple(p)] for p in prompts])


def _draw(logp: torch.Tensor, rng: np.random.Generator | None) -> torch.Tensor:
    """One token per row: the mode (``rng`` None) or an inverse-CDF draw from exp(logp).

    One uniform a row from ``rng`` (:func:`_inverse_cdf`).
    """
    return _inverse_cdf(logp, None if rng is None else rng.random(logp.shape[0]))


def _inverse_cdf(logp: torch.Tensor, u: np.ndarray | None) -> torch.Tensor:
    """One token per row: the mode (``u`` None) or the first k with CDF(k) ≥ uᵢ · CDF(V − 1).

    The uniforms come from the host wherever the model is (the same draws, so a run resumes on
    another device); on the CPU the CDF is NumPy's float64 running sum, on an accelerator
    torch's on the device (no [N, V] copy to the host per token: that copy and a host-side
    scan cost more than the model's step on a GPU).
    """
    if u is None:
        return logp.argmax(-1)
    if logp.device.type == "cpu":
        cdf = np.cumsum(logp.detach().double().exp().numpy(), axis=1)
        tok = np.minimum((cdf < (u * cdf[:, -1])[:, None]).sum(1), logp.shape[1] - 1)
        return torch.from_numpy(tok)
    cdf = logp.detach().double().exp().cumsum(1)
    at = torch.from_numpy(u).to(logp.device) * cdf[:, -1]
    return (cdf < at[:, None]).sum(1).clamp_max(logp.shape[1] - 1)


def _masked(forward: Forward, mask: torch.Tensor) -> bool:
    """Whether the forward must be given the mask.

    It must when the batch has a pad, or when the model is not a ``transformers`` one (the
    built-in model and a factory's take the mask as an argument). A ``transformers`` model on a
    batch with no pad takes its positions from the cache and attends causally, with no mask to
    build (the same logits; the pads' mask and positions cost a mask per layer and step).
    """
    return not (forward.hf and bool(mask.all()))


def _prefix(
    forward: Forward,
    ids: torch.Tensor,
    mask: torch.Tensor,
    masked: bool,
    groups: tuple[torch.Tensor, torch.Tensor] | None,
) -> tuple[torch.Tensor, object]:
    """Outputs at the last prompt position [N, 1, ·] and the prompts' cache.

    Each distinct prompt is computed once where the cache's rows can be indexed (``groups``:
    see ``Completions.prefix``): its keys and values are repeated to its rows, the same
    numbers, and the gradient sums over the copies as it would over separate computations.
    """
    if not forward.shares:
        return forward(ids, mask if masked else None, use_cache=True, last=True)
    if groups is None:
        groups = distinct(torch.cat([ids, mask], dim=1).tolist())
    firsts, index = (g.to(ids.device) for g in groups)
    rows = mask.index_select(0, firsts) if masked else None
    out, cache = forward(ids.index_select(0, firsts), rows, use_cache=True, last=True)
    return out.index_select(0, index), forward.expand(cache, index)


@torch.no_grad()
def sample(
    model: nn.Module | Policy,
    prompts: Sequence[Sequence[int]],
    *,
    vocab_size: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    rng: np.random.Generator | None = None,
    eos_id: int = EOS,
    share: tuple[slice, int, int] | None = None,
    sampling: Sampling | None = None,
) -> Completions:
    """Complete each prompt once (repeat a prompt G times in ``prompts`` for a group of G).

    Args:
        model: the :class:`~eligibility.lm.policy.Policy`, or a bare causal LM with the Hugging
            Face call convention (see ``lm.model``).
        prompts: token-id sequences.
        vocab_size: V; tokens are drawn among the first V logits.
        max_new_tokens: T_max.
        temperature: τ > 0.
        rng: the generator of the draws; None: greedy (the mode at every step).
        eos_id: the token that ends a completion (and pads).
        share: ``(rows, n, width)``: these prompts are the rows ``rows`` of a batch of ``n``
            whose longest prompt has ``width`` tokens (a rank's share of a run's batch). Each
            step draws the whole batch's n uniforms and uses its rows' (so a row's tokens do
            not depend on which rank samples it), and the prompts are padded to ``width``
            (the batch's shapes). None: the prompts are the whole batch.
        sampling: top-k, top-p, min-p and the repetition penalty (``lm.truncation``): each
            token drawn from what they keep, renormalised (None: from π_τ).
    """
    device = device_of(model)
    mine, total, width = share or (slice(0, len(prompts)), len(prompts), 0)
    ids, prompt_mask = (x.to(device) for x in left_pad(prompts, eos_id, width))
    n, p = ids.shape
    forward = forward_of(model)
    lockstep = model.lockstep if isinstance(model, Policy) else None
    masked = _masked(forward, prompt_mask)
    # the mask of every position, filled as tokens come: a finished row's later tokens are
    # masked out (they are EOS padding, never scored)
    mask = torch.zeros((n, p + max_new_tokens), dtype=torch.long, device=device)
    mask[:, :p] = prompt_mask
    groups = distinct(prompts) if forward.shares else None
    out, cache = _prefix(forward, ids, prompt_mask, masked, groups)
    z = forward.logits(out[:, -1], vocab_size)
    tokens = torch.full((n, max_new_tokens), eos_id, dtype=torch.long, device=device)
    logps = torch.zeros((n, max_new_tokens), device=device)
    alive = torch.ones(n, dtype=torch.bool, device=device)
    if sampling is not None:  # the processing's state: tokens seen, sizes kept, ln π_τ before
        penalty = sampling.repetition_penalty != 1.0  # the tokens seen are read by it alone
        seen = truncation.seen_tokens(ids, prompt_mask, vocab_size) if penalty else None
        kept, raw = torch.zeros_like(tokens), torch.zeros_like(logps)
    # the rows the model still computes (``z``'s and the cache's rows): all at first; where the
    # cache's rows can be indexed, the finished ones are dropped once they are an eighth of them
    rows = np.arange(n)
    at = torch.from_numpy(rows).to(device)
    t = 0
    for t in range(max_new_tokens):
        logp = F.log_softmax(z.to(torch.promote_types(z.dtype, torch.float32)) / temperature, -1)
        if sampling is not None:  # drawn from the kept set, renormalised (lm.truncation)
            full, (logp, kept[at, t]) = (
                logp,
                truncation.step(z, None if seen is None else seen[at], temperature, sampling),
            )
        # one a row of the whole batch and step, a finished row's unused
        u = None if rng is None else rng.random(total)[mine]
        live = alive[at]
        drawn = _inverse_cdf(logp, None if u is None else u[rows]).to(device)
        tok = torch.where(live, drawn, eos_id)
        tokens[at, t] = tok
        lp = torch.where(live, logp.gather(1, tok[:, None])[:, 0], 0.0)
        logps[at, t] = lp.to(logps.dtype)
        if sampling is not None:
            raw[at, t] = torch.where(live, full.gather(1, tok[:, None])[:, 0], 0.0).to(raw.dtype)
            if seen is not None:
                seen[at[live], tok[live]] = True
        mask[at, p + t] = live.long()
        live &= tok != eos_id
        alive[at] = live
        left = int(live.sum())
        going = left > 0 if lockstep is None else lockstep(left > 0)  # (a sharded model's
        if t == max_new_tokens - 1 or not going:  # ranks step together: each step gathers)
            break
        if forward.shares and left and 8 * (len(rows) - left) >= len(rows):
            keep = live.nonzero()[:, 0]
            rows, at, tok = rows[keep.cpu().numpy()], at[keep], tok[keep]
            cache = forward.expand(cache, keep)
        step = mask[at, : p + t + 1] if masked else None
        out, cache = forward(tok[:, None], step, cache, use_cache=True, last=True)
        z = forward.logits(out[:, -1], vocab_size)
    return Completions(
        prompt_ids=ids,
        prompt_mask=prompt_mask,
        completion_ids=tokens[:, : t + 1],
        completion_mask=mask[:, p : p + t + 1].clone(),
        logps=logps[:, : t + 1],
        ended=~alive,
        prefix=groups,
        raw_logps=None if sampling is None else raw[:, : t + 1],
        kept=None if sampling is None else kept[:, : t + 1],
    )


def token_logps(
    model: nn.Module | Policy,
    batch: Completions,
    *,
    vocab_size: int,
    temperature: float = 1.0,
    sampling: Sampling | None = None,
    raw: list[torch.Tensor] | None = None,
) -> torch.Tensor:
    """log π_τ of every completion token, recomputed in one forward pass (differentiable).

    ln π_τ(oₜ) = zₜ[oₜ]/τ − logsumexp(zₜ/τ) over the first V logits. Each distinct prompt is
    computed once where the model's cache allows it (every ``transformers`` model's does), and
    with a linear head the log-probs come from the last hidden states through
    ``fused_linear_logprobs``: no [N, T, V] logits are held (``lm.edge.forward``).

    With ``sampling`` (and the batch's ``kept`` sizes), ln π̃ of the distribution sampled
    (:func:`~eligibility.lm.truncation.truncated_logps`, from [N, T, V] logits); ``raw`` then
    gets ln π_τ before it, and the tokens outside the kept set (the mismatch's).

    Returns:
        [N, T] log-probs, 0 where ``completion_mask`` is 0.
    """
    p, t = batch.prompt_ids.shape[1], batch.completion_ids.shape[1]
    forward = forward_of(model)
    # a pad after a completion's EOS is seen by no scored position: only the prompts' pads count
    masked = _masked(forward, batch.prompt_mask)
    if forward.shares:  # each distinct prompt once, then the completions on its cache
        out, cache = _prefix(forward, batch.prompt_ids, batch.prompt_mask, masked, batch.prefix)
        if t > 1:
            full = torch.cat([batch.prompt_mask, torch.ones_like(batch.completion_ids)], dim=1)
            step = full[:, :-1] if masked else None
            rest, _ = forward(batch.completion_ids[:, :-1], step, cache)
            out = torch.cat([out, rest], dim=1)
    else:
        ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)
        # every position after the prompt is read (an episode's world tokens are context, not
        # scored); a pad after a completion's EOS is seen by no scored position
        mask = torch.cat([batch.prompt_mask, torch.ones_like(batch.completion_mask)], dim=1)
        out = forward(ids, mask if masked else None)[0][:, p - 1 : p + t - 1]
    if sampling is not None:  # the policy sampled: its kept sets reproduced (lm.truncation)
        return truncation.scored(forward.logits(out, vocab_size), batch, temperature, sampling, raw)
    lp = forward.logps(out, batch.completion_ids, vocab_size, temperature)
    return lp * batch.completion_mask
