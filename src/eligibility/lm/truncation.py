r"""Sampling as engines sample: the repetition penalty, top-k, top-p and min-p, and their policy.

The sampler draws each token from the processed distribution, in the order of ``transformers``'
``generate`` (and TRL's ``GRPOConfig`` names and defaults):

    z′ᵥ = zᵥ/θ if zᵥ > 0 else zᵥ·θ   for v seen in the prompt or the completion so far (θ ≠ 1)
    z̃ = z′/τ,   K = min-p(top-p(top-k(z̃)))   (each rule on what the one before it kept)
    π̃(v) = exp z̃ᵥ / Σ_{u∈K} exp z̃ᵤ  for v ∈ K, 0 elsewhere

The policy trained is π̃, the distribution actually sampled: its log-probabilities are recomputed
by the scoring pass and differentiated as such (the kept set K is a constant of θ almost
everywhere, so ∇ E_π̃[R] = E_π̃[R ∇ ln π̃] and REINFORCE's gradient is unbiased for π̃).

**The kept set, reproduced.** Every rule keeps the tokens above a threshold of z̃ (top-k: its
k-th value; top-p: the smallest tokens whose mass is 1 − p are cut; min-p: the probability
min_p · max π), so K is the m largest of z̃ with m = |K|. The sampler records m per token; the
scorer keeps the m largest of its own z̃. Where the two passes compute z̃ alike the sets are
equal; where they differ (another dtype, batch shape or kernel) only a token at the boundary can
change sides, and the cut does not move with a cumulative sum's rounding as a recomputed top-p
would. A sampled token the scorer ranks below its top m is added to the scorer's set (its
log-probability stays finite) and counted: ``sampling/outside_kept``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch.nn import functional as F

if TYPE_CHECKING:
    from eligibility.lm.batch import Completions
    from eligibility.lm.config import FinetuneConfig


@dataclass(frozen=True)
class Sampling:
    """The sampler's processing beyond the temperature (TRL's ``GRPOConfig`` names, defaults).

    Attributes:
        top_k: keep the k largest logits (0: off).
        top_p: keep the smallest set of largest tokens holding mass ≥ p (1: off).
        min_p: keep the tokens of probability ≥ min_p · max π (None: off).
        repetition_penalty: θ, the logits of tokens already seen divided (z > 0) or multiplied
            (z ≤ 0) by θ (1: off).
    """

    top_k: int = 0
    top_p: float = 1.0
    min_p: float | None = None
    repetition_penalty: float = 1.0

    @classmethod
    def of(cls, config: FinetuneConfig) -> Sampling | None:
        """The processing a config asks for, or None where it asks for none (plain τ)."""
        s = cls(config.top_k, config.top_p, config.min_p, config.repetition_penalty)
        return None if s == cls() else s


def penalised(z: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """z′ᵥ = zᵥ/θ if zᵥ > 0 else zᵥ·θ where ``seen`` (``transformers``' repetition penalty).

    Args:
        z: [..., V] logits.
        seen: [..., V] bool, the tokens in the prompt or the completion so far.
        penalty: θ > 0.
    """
    if penalty == 1.0:
        return z
    return torch.where(seen, torch.where(z > 0, z / penalty, z * penalty), z)


def kept_set(
    z: torch.Tensor, *, top_k: int = 0, top_p: float = 1.0, min_p: float | None = None
) -> torch.Tensor:
    """The kept set K of temperature-scaled logits ``z`` [..., V]: top-k, then top-p, then min-p.

    top-k: zᵥ ≥ the k-th largest; top-p: with the survivors sorted ascending and their softmax
    summed from the smallest, cut those whose running sum is ≤ 1 − p (the largest always
    stays); min-p: πᵥ ≥ min_p · maxᵤ πᵤ on the survivors' softmax. The rules and their order are
    ``transformers``' ``TopKLogitsWarper``, ``TopPLogitsWarper`` and ``MinPLogitsWarper``.

    Returns:
        [..., V] bool.
    """
    keep = torch.ones_like(z, dtype=torch.bool)
    if top_k > 0:
        k = min(top_k, z.shape[-1])
        keep &= z >= torch.topk(z, k, dim=-1).values[..., -1:]
    if top_p < 1.0:
        s, order = torch.sort(z.masked_fill(~keep, -math.inf), dim=-1)
        cut = s.softmax(-1).cumsum(-1) <= 1 - top_p
        cut[..., -1] = False
        keep &= ~cut.scatter(-1, order, cut)
    if min_p is not None:
        p = z.masked_fill(~keep, -math.inf).softmax(-1)
        keep &= p >= min_p * p.amax(-1, keepdim=True)
    return keep


def seen_tokens(ids: torch.Tensor, mask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[N, V] bool: the tokens among the first V that occur in each row's real (mask 1) ids."""
    seen = torch.zeros((ids.shape[0], vocab_size), dtype=torch.bool, device=ids.device)
    real = mask.bool() & (ids < vocab_size)
    rows = torch.arange(ids.shape[0], device=ids.device)[:, None].expand_as(ids)
    seen[rows[real], ids[real]] = True
    return seen


def step(
    z: torch.Tensor, seen: torch.Tensor | None, temperature: float, sampling: Sampling
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampler's step: ln π̃ [n, V] (−inf outside K) and m = |K| [n] (see the module).

    Args:
        z: [n, V] the model's logits of the next token.
        seen: [n, V] bool, the tokens each row has seen (the penalty's; None without one).
        temperature: τ.
        sampling: the processing.
    """
    z = z.to(torch.promote_types(z.dtype, torch.float32))
    zt = (z if seen is None else penalised(z, seen, sampling.repetition_penalty)) / temperature
    keep = kept_set(zt, top_k=sampling.top_k, top_p=sampling.top_p, min_p=sampling.min_p)
    return F.log_softmax(zt.masked_fill(~keep, -math.inf), -1), keep.sum(-1)


def seen_before(
    prompt_seen: torch.Tensor, completion_ids: torch.Tensor, vocab_size: int
) -> torch.Tensor:
    """[N, T, V] bool: the tokens seen before completion position t (the prompt's and o_<t).

    A token past the first V (a world's token of an episode, beyond the task's vocabulary) is
    no logit's: it marks none, as :func:`seen_tokens` skips it.
    """
    n, t = completion_ids.shape
    hit = torch.zeros((n, t, vocab_size + 1), dtype=torch.bool, device=completion_ids.device)
    if t > 1:  # column V collects the tokens past the vocabulary, dropped below
        hit[:, 1:].scatter_(-1, completion_ids[:, :-1, None].clamp_max(vocab_size), True)
    return (hit[..., :vocab_size].to(torch.uint8).cummax(1).values.bool()) | prompt_seen[:, None]


def truncated_logps(
    z: torch.Tensor,
    tokens: torch.Tensor,
    kept_size: torch.Tensor,
    temperature: float,
    sampling: Sampling,
    seen: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The scorer's ln π̃(oₜ) on the sampler's kept sets, reproduced (differentiable in ``z``).

        ln π̃(oₜ) = z̃ₜ[oₜ] − ln Σ_{v ∈ Kₜ} exp z̃ₜ[v],   Kₜ = top-mₜ(z̃ₜ) ∪ {oₜ}

    Args:
        z: [N, T, V] logits at the completion positions.
        tokens: [N, T] the sampled oₜ.
        kept_size: [N, T] mₜ, the sampler's |K| (0 on padding).
        temperature: τ.
        sampling: the processing.
        seen: [N, T, V] the tokens seen before each position (:func:`seen_before`); needed
            with a repetition penalty.

    Returns:
        ln π̃(oₜ) [N, T], ln π_τ(oₜ) before any processing [N, T] (detached: the mismatch's),
        and [N, T] bool: oₜ was outside the scorer's top mₜ (added to its set).
    """
    z = z.to(torch.promote_types(z.dtype, torch.float32))
    zt = penalised(z, seen, sampling.repetition_penalty) if seen is not None else z
    zt = zt / temperature
    with torch.no_grad():
        raw = (z / temperature).log_softmax(-1).gather(-1, tokens[..., None])[..., 0]
        m = kept_size.clamp(min=1)
        ranked = torch.topk(zt, int(m.max()), dim=-1).values
        bar = ranked.gather(-1, (m - 1)[..., None])  # the m-th largest: K = {v : z̃ᵥ ≥ bar}
        chosen = zt.gather(-1, tokens[..., None])
        outside = (chosen < bar)[..., 0]
        keep = (zt >= bar).scatter(-1, tokens[..., None], True)
    lp = zt.gather(-1, tokens[..., None])[..., 0] - zt.masked_fill(~keep, -math.inf).logsumexp(-1)
    return lp, raw, outside


class Scored(NamedTuple):
    """The scoring pass's log-probs under truncation, [N, T] each.

    Attributes:
        logps: ln π̃(oₜ) on the sampler's kept sets, reproduced (differentiable); 0 on
            padding.
        untruncated: ln π_τ(oₜ) before any processing (detached: the mismatch's,
            ``lm.mismatch``).
        outside: oₜ was outside the scorer's top mₜ (added to its set).
    """

    logps: torch.Tensor
    untruncated: torch.Tensor
    outside: torch.Tensor


def scored(z: torch.Tensor, batch: Completions, temperature: float, sampling: Sampling) -> Scored:
    """The scoring pass's ln π̃ of a batch of ``Completions`` (``lm.sample``), and ln π_τ.

    Args:
        z: [N, T, V] the logits at the completion positions.
        batch: the completions, with the sampler's ``kept_sizes``.
        temperature: τ.
        sampling: the processing the sampler applied.
    """
    if batch.kept_sizes is None:
        raise ValueError("the batch was sampled without truncation: it has no kept sets")
    seen = None
    if sampling.repetition_penalty != 1.0:
        first = seen_tokens(batch.prompt_ids, batch.prompt_mask, z.shape[-1])
        seen = seen_before(first, batch.completion_ids, z.shape[-1])
    lp, untruncated, outside = truncated_logps(
        z, batch.completion_ids, batch.kept_sizes, temperature, sampling, seen
    )
    return Scored(lp * batch.completion_mask, untruncated, outside)


__all__ = [
    "Sampling",
    "Scored",
    "kept_set",
    "penalised",
    "scored",
    "seen_before",
    "seen_tokens",
    "step",
    "truncated_logps",
]
