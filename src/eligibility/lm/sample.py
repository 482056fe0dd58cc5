r"""Group sampling with a KV cache, and the log-probs a trainer recomputes.

The policy is π_τ(· | context) = softmax(z_{:V} / τ): the first V logits of the model (the
task's vocabulary) at temperature τ. Completions are sampled token by token from π_τ until EOS
(which is kept, and counted) or T_max tokens; the log-probs recorded are log π_τ of the tokens
drawn, so they are those of the distribution actually sampled. A completion cut at T_max has
no EOS: its probability is the product over the tokens it has (stopping at T_max is part of the
environment, as a time limit is).

The draws come from a NumPy generator (inverse CDF in float64 of the float32 probabilities; one
uniform a row and step, a finished row's unused), so a run's randomness is a few
``np.random.Generator`` states that a checkpoint restores exactly. A sampling's uniforms are
drawn up front, T_max rows of them, and the generator is then set where drawing one row a
step would have left it: the tokens and a resumed run's draws are those of a step-by-step draw.

The decode step reads nothing on the host: whether any row is still going is read at a few
steps only (a finished row draws EOS padding until then, cut afterwards; the tokens and the
steps counted do not depend on when). With fixed shapes (the static step, captured on CUDA)
it is read at :data:`CHECKS` evenly spaced steps, whatever T_max: the decode loop's host reads
are at most ``CHECKS + 1`` (the last, the steps taken), and an ended batch runs at most
⌈T_max/4⌉ steps more, its rows drawing EOS padding. Otherwise it is read every
:data:`CHECK_EVERY` steps, and where the model's rows can be indexed the ended rows leave it at
those reads once they are an eighth of those computed (on a CPU a step costs its rows). The
model's side (the cache, the shapes, a captured step on CUDA) is the forward's
(``Forward.decoding``).

:func:`decode` is the one decode loop: :func:`sample` runs it on fresh prompts, and the
episodes' turns on the cache kept from the turns before (``lm.episodes.turns``), so every
sampling option and the draws' rules hold for both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from eligibility.lm import truncation
from eligibility.lm.batch import Completions
from eligibility.lm.contracts import Decoding
from eligibility.lm.policy import Forward, Policy, device_of, forward_of, largest_in_lockstep
from eligibility.lm.tasks import EOS
from eligibility.lm.truncation import Sampling, Scored

CHECK_EVERY = 4
"""Decode steps between the sampler's host reads (any row still going? rows to drop?), where
the decoding's rows can leave it (shapes not fixed)."""

CHECKS = 3
"""With fixed shapes: the host reads of whether any row is going, a sampling, at evenly spaced
steps (so the reads do not grow with T_max; an ended batch runs at most ⌈T_max/4⌉ steps more)."""

SCORED_BYTES = 2**28
"""The truncated scoring pass's float32 logits a chunk holds at most (256 MiB)."""


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

    One uniform a row from ``rng`` (:func:`inverse_cdf`).
    """
    u = None if rng is None else torch.from_numpy(rng.random(logp.shape[0])).to(logp.device)
    return inverse_cdf(logp, u)


def inverse_cdf(logp: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
    """One token per row: the mode (``u`` None) or the first k with CDF(k) ≥ uᵢ · CDF(V − 1).

    The CDF is the float64 running sum of exp(logp), on the model's device (no [N, V] copy to
    the host per token: that copy and a host-side scan cost more than the model's step on a
    GPU); the uniforms come from the host wherever the model is (the same draws, so a run
    resumes on another device).
    """
    if u is None:
        return logp.argmax(-1)
    cdf = logp.detach().double().exp().cumsum(1)
    return (cdf < (u * cdf[:, -1])[:, None]).sum(1).clamp_max(logp.shape[1] - 1)


class _Uniforms:
    """A sampling's uniforms, drawn up front: row t is step t's, the share's columns.

    ``rewind(steps)`` sets the generator where ``steps`` draws of ``total`` (one a step, as the
    sampler drew them before) leave it, so the draws that follow are the same.
    """

    def __init__(
        self, rng: np.random.Generator, steps: int, total: int, mine: slice, device: torch.device
    ) -> None:
        self.rng, self.total, self.state = rng, total, rng.bit_generator.state
        u = np.ascontiguousarray(rng.random((steps, total))[:, mine])
        self.u = torch.from_numpy(u).to(device)

    def rewind(self, steps: int) -> None:
        self.rng.bit_generator.state = self.state
        self.rng.random(steps * self.total)


@dataclass
class Record:
    """What the sampler writes a step: [N, T_max] tokens, mask, log-probs, and per row.

    ``alive``: [N] not ended yet. With a ``sampling`` processing: ``raw`` ln π_τ before it,
    ``sizes`` mₜ = |Kₜ|, ``seen`` [N, V] the tokens seen (the repetition penalty's, or None).
    """

    tokens: torch.Tensor
    mask: torch.Tensor
    logps: torch.Tensor
    alive: torch.Tensor
    raw: torch.Tensor | None = None
    sizes: torch.Tensor | None = None
    seen: torch.Tensor | None = None

    @classmethod
    def empty(
        cls,
        ids: torch.Tensor,
        prompt_mask: torch.Tensor | None,
        t_max: int,
        vocab_size: int,
        eos_id: int,
        sampling: Sampling | None,
    ) -> Record:
        """A record of ``len(ids)`` rows, nothing drawn yet.

        The prompts ``ids`` and their mask are read only by a repetition penalty (the tokens
        seen).
        """
        n, device = ids.shape[0], ids.device
        tokens = torch.full((n, t_max), eos_id, dtype=torch.long, device=device)
        logps = torch.zeros((n, t_max), device=device)
        alive = torch.ones(n, dtype=torch.bool, device=device)
        record = cls(tokens, torch.zeros_like(tokens), logps, alive)
        if sampling is not None:
            record.raw, record.sizes = torch.zeros_like(logps), torch.zeros_like(tokens)
            if sampling.repetition_penalty != 1.0:  # the tokens seen are read by it alone
                record.seen = truncation.seen_tokens(ids, prompt_mask, vocab_size)
        return record

    def completions(
        self,
        ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        steps: int,
        prefix: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> Completions:
        """The rows' completions of the ``steps`` drawn, after the prompts ``ids``."""
        cut = lambda x: None if x is None else x[:, :steps]  # noqa: E731
        return Completions(
            prompt_ids=ids,
            prompt_mask=prompt_mask,
            completion_ids=cut(self.tokens),
            completion_mask=cut(self.mask),
            logps=cut(self.logps),
            ended=~self.alive,
            prefix=prefix,
            raw_logps=cut(self.raw),
            kept_sizes=cut(self.sizes),
        )


def draw_step(
    record: Record,
    t: int | torch.Tensor,
    z: torch.Tensor,
    rows: torch.Tensor,
    u: torch.Tensor | None,
    temperature: float,
    sampling: Sampling | None,
    eos_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``t``: a token drawn for each of ``rows`` from its logits ``z``, and recorded.

    ``t`` an int or a [1] tensor holding it (a captured step's). Returns the tokens and which
    rows were going. A finished row draws EOS, log-prob 0, mask 0. No host read.
    """
    logp = F.log_softmax(z.to(torch.promote_types(z.dtype, torch.float32)) / temperature, -1)
    full = logp
    if sampling is not None:  # drawn from the kept set, renormalised (lm.truncation)
        seen = None if record.seen is None else record.seen[rows]
        logp, record.sizes[rows, t] = truncation.step(z, seen, temperature, sampling)
    live = record.alive[rows]
    tok = torch.where(live, inverse_cdf(logp, u), eos_id)
    record.tokens[rows, t] = tok
    chosen = torch.where(live, logp.gather(1, tok[:, None])[:, 0], 0.0)
    record.logps[rows, t] = chosen.to(record.logps.dtype)
    if record.raw is not None:
        before = torch.where(live, full.gather(1, tok[:, None])[:, 0], 0.0)
        record.raw[rows, t] = before.to(record.raw.dtype)
    if record.seen is not None:  # a finished row's EOS leaves its set as it was
        record.seen[rows, tok] |= live
    record.mask[rows, t] = live.long()
    record.alive[rows] = live & (tok != eos_id)
    return tok, live


def _decode(
    decoding: Decoding,
    record: Record,
    uniforms: _Uniforms | None,
    temperature: float,
    sampling: Sampling | None,
    eos_id: int,
    largest: Callable[[int], int],
) -> int:
    """Steps until every row has ended (read at the steps of :func:`_checks`) or T_max.

    ``largest``: n ↦ its largest over the ranks that sample in lockstep (a sharded model's
    ranks run every forward together, so they stop together). Returns the steps taken: those
    at which a row (of any rank in lockstep) was going.
    """
    t_max = record.tokens.shape[1]
    checks = _checks(t_max, decoding.fixed)

    def draw(
        t: int | torch.Tensor, rows: torch.Tensor, u: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return draw_step(record, t, decoding.z, rows, u, temperature, sampling, eos_id)

    both = _captured(decoding, record, uniforms, draw)
    for t in range(t_max):
        if both is not None and t < t_max - 1:
            both()  # step t's draw and the model's step on its tokens, replayed
        else:
            rows = decoding.rows
            u = None if uniforms is None else uniforms.u[t].index_select(0, rows)
            draw(t, rows, u)
            if t == t_max - 1:
                break
        if t in checks:  # the host reads, at a few steps
            if not largest(int(record.alive.any())):
                break
            decoding.shrink(record.alive)
        if both is None:  # the model's step after the draw (and the rows that left)
            decoding.advance(t, record.tokens[:, t], record.mask[:, t])
    return largest(int(record.mask.any(0).sum()))


def _captured(
    decoding: Decoding,
    record: Record,
    uniforms: _Uniforms | None,
    draw: Callable[..., tuple[torch.Tensor, torch.Tensor]],
) -> Callable[[], None] | None:
    """With fixed shapes, one step (the draw, then the model's step on its tokens) captured.

    The step's index is a device tensor it advances, so the same graph serves every step
    (the decoding's ``captured``); its draw (``draw(t, rows, u)``, :func:`draw_step` with the
    decode's rule) reads step t's uniforms from the device. None where the shapes are not
    fixed (the model's step then follows the draw eagerly).
    """
    if not decoding.fixed or record.tokens.shape[1] < 2:  # one step: nothing to replay
        return None
    t = torch.zeros(1, dtype=torch.long, device=record.tokens.device)
    rows = decoding.rows  # every row, with fixed shapes
    state = [t, record.tokens, record.mask, record.logps, record.alive]
    state += [x for x in (record.raw, record.sizes, record.seen) if x is not None]

    def both() -> None:
        u = None if uniforms is None else uniforms.u.index_select(0, t)[0]
        tok, live = draw(t, rows, u)
        decoding.step_at(t, tok, live)
        t.add_(1)

    return decoding.captured(both, state)


def _checks(t_max: int, fixed: bool) -> set[int]:
    """The steps t < T_max − 1 after which the sampler reads whether a row is going.

    Fixed shapes: t + 1 = ⌈k·T_max / (CHECKS + 1)⌉ for k = 1 … :data:`CHECKS` (no row leaves,
    the reads only stop an ended batch early). Else every :data:`CHECK_EVERY` steps.
    """
    if not fixed:
        return set(range(CHECK_EVERY - 1, t_max - 1, CHECK_EVERY))
    every = [-(-k * t_max // (CHECKS + 1)) - 1 for k in range(1, CHECKS + 1)]
    return {t for t in every if t < t_max - 1}


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
    prefix: bool = False,
    idle: bool = False,
) -> Completions:
    """Complete each prompt once (repeat a prompt G times in ``prompts`` for a group of G).

    Args:
        model: the :class:`~eligibility.lm.policy.Policy`, or a bare causal LM with the Hugging
            Face call convention (see ``lm.edge.model``).
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
        prefix: the tokens every prompt starts with computed once (``Forward.prefix``).
        idle: the prompts computed only to keep a sharded model's ranks in lockstep (nothing
            drawn, :func:`decode`).
    """
    device, forward = device_of(model), forward_of(model)
    if prefix:
        forward = dataclasses.replace(forward, prefix=True)
    mine, total, width = share or (slice(0, len(prompts)), len(prompts), 0)
    ids, prompt_mask = (x.to(device) for x in left_pad(prompts, eos_id, width))
    groups = distinct(prompts)
    decoding = forward.decoding(ids, prompt_mask, groups, max_new_tokens, vocab_size)
    return decode(
        decoding,
        ids,
        prompt_mask,
        max_new_tokens=max_new_tokens,
        vocab_size=vocab_size,
        temperature=temperature,
        rng=rng,
        eos_id=eos_id,
        share=(mine, total),
        sampling=sampling,
        largest=largest_in_lockstep(model),
        prefix=groups,
        idle=idle,
    )


def decode(
    decoding: Decoding,
    ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    vocab_size: int,
    temperature: float,
    rng: np.random.Generator | None,
    eos_id: int,
    share: tuple[slice, int],
    sampling: Sampling | None,
    largest: Callable[[int], int] = int,
    prefix: tuple[torch.Tensor, torch.Tensor] | None = None,
    idle: bool = False,
) -> Completions:
    """The decode loop: a completion of each row of ``decoding``, drawn a token a step.

    The one loop every sampling runs (:func:`sample` on fresh prompts, the episodes' turns on
    the cache kept from the turns before, ``lm.episodes.turns``): the uniforms drawn up front
    and the generator then set where one draw a row and step, for the steps taken, leaves it;
    the host read at the steps of :func:`_checks`; each token drawn and recorded by
    :func:`draw_step` (``sampling``'s kept sets and ln π_τ before them with it).

    Args:
        decoding: the model's side: ``rows``, ``z``, ``fixed``, ``advance``, ``shrink`` (and,
            with fixed shapes, ``step_at``, ``captured``), as ``lm.edge.decoding.Decoding``.
        ids: [N, P] the rows' contexts, left-padded (read by a repetition penalty only).
        prompt_mask: [N, P] 1 on a context token.
        max_new_tokens: T_max.
        vocab_size: V.
        temperature: τ.
        rng: the draws' generator; None: the mode at every step.
        eos_id: EOS (and the pad).
        share: ``(columns, total)``: the rows are those columns of a batch of ``total`` rows
            (each step draws ``total`` uniforms and uses its columns', :func:`sample`).
        sampling: the truncation (``lm.truncation``), or None.
        largest: n ↦ its largest over the ranks in lockstep (:func:`_decode`).
        prefix: the batch's distinct prompts, kept in the completions (or None).
        idle: the rows are computed only to keep the ranks of a sharded model in lockstep: none
            is drawn (each ended from the start), ``rng`` is not read.
    """
    mine, total = share
    uniforms = None
    if rng is not None and not idle:
        uniforms = _Uniforms(rng, max_new_tokens, total, mine, ids.device)
    record = Record.empty(ids, prompt_mask, max_new_tokens, vocab_size, eos_id, sampling)
    if idle:
        record.alive.zero_()
    steps = _decode(decoding, record, uniforms, temperature, sampling, eos_id, largest)
    if uniforms is not None:
        uniforms.rewind(steps)
    return record.completions(ids, prompt_mask, steps, prefix)


def _outputs(forward: Forward, batch: Completions) -> torch.Tensor:
    """The outputs [N, T, ·] at the positions that predict the completion tokens."""
    groups = batch.prefix
    if groups is None:
        groups = distinct(torch.cat([batch.prompt_ids, batch.prompt_mask], dim=1).tolist())
    return forward.continued(
        batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask, groups
    )


def token_logps(
    model: nn.Module | Policy,
    batch: Completions,
    *,
    vocab_size: int,
    temperature: float = 1.0,
    sampling: Sampling | None = None,
) -> torch.Tensor:
    """log π_τ of every completion token, recomputed in one forward pass (differentiable).

    ln π_τ(oₜ) = zₜ[oₜ]/τ − logsumexp(zₜ/τ) over the first V logits. Each distinct prompt is
    computed once where the model's cache allows it (every ``transformers`` model's does), and
    with a linear head the log-probs come from the last hidden states through
    ``fused_linear_logprobs``: no [N, T, V] logits are held (``lm.edge.forward``).

    With ``sampling`` (and the batch's ``kept_sizes``), ln π̃ of the distribution sampled
    (:func:`truncated_token_logps`).

    Returns:
        [N, T] log-probs, 0 where ``completion_mask`` is 0.
    """
    if sampling is not None:
        return truncated_token_logps(
            model, batch, vocab_size=vocab_size, temperature=temperature, sampling=sampling
        ).logps
    forward = forward_of(model)
    lp = forward.logps(_outputs(forward, batch), batch.completion_ids, vocab_size, temperature)
    return lp * batch.completion_mask


def truncated_token_logps(
    model: nn.Module | Policy,
    batch: Completions,
    *,
    vocab_size: int,
    temperature: float,
    sampling: Sampling,
) -> Scored:
    """ln π̃ of every completion token under the sampler's kept sets, and the mismatch's terms.

    :func:`~eligibility.lm.truncation.scored` of the logits at the completion positions: ln π̃
    (differentiable), ln π_τ before the processing, and the tokens outside the kept sets. The
    [n, T, V] logits (and the repetition penalty's sets) are made a chunk of rows at a time,
    at most :data:`SCORED_BYTES` of float32 logits, and made again in the backward pass
    (``torch.utils.checkpoint``): no [N, T, V] tensor is held for the gradient.
    """
    forward = forward_of(model)
    out = _outputs(forward, batch)
    n, t = batch.completion_ids.shape

    def part(o: torch.Tensor, rows: slice) -> Scored:
        z = forward.logits(o, vocab_size)
        return truncation.scored(z, batch.select(rows), temperature, sampling)

    size = max(1, SCORED_BYTES // (4 * max(t, 1) * vocab_size))
    if size >= n:
        return part(out, slice(None))
    chunks = [slice(i, min(i + size, n)) for i in range(0, n, size)]
    parts = [checkpoint(part, out[c], c, use_reentrant=False) for c in chunks]
    return Scored(*(torch.cat(x) for x in zip(*parts, strict=True)))
