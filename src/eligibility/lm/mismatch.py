r"""The sampler–trainer mismatch: how far the scoring pass's policy is from the sampler's.

The sampler records ln π_τ of each token it drew; the scoring pass recomputes it with
gradients, in another batch shape and, under ``--dtype bfloat16``, other kernels. Per token and
per sequence,

    ρᵢ,ₜ = exp(ℓᵢ,ₜ^score − ℓᵢ,ₜ^sample),   ρᵢ = Πₜ ρᵢ,ₜ = exp Σₜ (ℓᵢ,ₜ^score − ℓᵢ,ₜ^sample),

both of π_τ before any truncation or penalty (the two passes compute the same function there).
A mean ρ near 1 hides tokens far from it: the fractions outside [0.9, 1.1] and [0.5, 2] show
them. Uncorrected, the update weights the scored policy's ∇ln π by samples of the sampler's,
neither policy's gradient; past :data:`WARN_OUTSIDE` of the tokens outside [0.9, 1.1] such a
run says so once (``lm.watches``), naming the correction and ``--dtype``. A run whose update an
importance-sampling mode weights (``lm.importance``: ``auto``'s in bfloat16) is not warned.
"""

from __future__ import annotations

import torch

from eligibility.lm.metrics import MISMATCH_COLUMNS

WARN_OUTSIDE = 0.02
"""The fraction of tokens whose ρ is outside [0.9, 1.1] past which a run warns (once)."""


def mismatch(
    scored: torch.Tensor | None,
    sampled: torch.Tensor,
    mask: torch.Tensor,
    outside_kept: torch.Tensor | None = None,
) -> dict[str, float | None]:
    """The ``sampling/*`` columns (:data:`~eligibility.lm.metrics.MISMATCH_COLUMNS`) of a batch.

    Args:
        scored: [N, T] ℓ^score, the scoring pass's ln π_τ (None: no scoring pass ran, every
            column None).
        sampled: [N, T] ℓ^sample, the sampler's.
        mask: [N, T] 1 on the completions' tokens.
        outside_kept: [N, T] bool, a sampled token outside the scorer's kept set (None: no
            truncation, the column 0).

    Returns:
        The per-token ρ's mean, min, max and the fractions outside [0.9, 1.1] and [0.5, 2];
        the sequence ρ's mean, min, max, standard deviation and effective sample size
        (:func:`effective_sample_size`); the fraction of tokens outside the kept set.
    """
    if scored is None:
        return dict.fromkeys(MISMATCH_COLUMNS)
    m = mask.bool()
    diff = (scored.detach().double() - sampled.detach().double()) * m
    rho = diff[m].exp()
    seq = diff.sum(1).exp()
    out = 0.0 if outside_kept is None else float(outside_kept[m].float().mean())
    n = seq.numel()
    values = (
        rho.mean(),
        rho.min(),
        rho.max(),
        ((rho < 0.9) | (rho > 1.1)).double().mean(),
        ((rho < 0.5) | (rho > 2.0)).double().mean(),
        seq.mean(),
        seq.min(),
        seq.max(),
        seq.std() if n > 1 else torch.zeros((), dtype=seq.dtype),
        effective_sample_size(seq),
    )
    return dict(zip(MISMATCH_COLUMNS, [float(v) for v in values] + [out], strict=True))


def effective_sample_size(w: torch.Tensor) -> torch.Tensor:
    r"""Kish's effective sample size of N importance weights, as a fraction of N.

        ESS/N = (Σᵢ wᵢ)² / (N Σᵢ wᵢ²)  ∈ (0, 1]

    1 where every wᵢ is equal (on-policy: all 1); 1/N where one weight holds all the mass.
    Kish (1965), *Survey Sampling*.

    >>> float(effective_sample_size(torch.tensor([1.0, 1.0, 1.0])))
    1.0
    >>> float(effective_sample_size(torch.tensor([1.0, 0.0, 0.0, 0.0])))
    0.25
    """
    return w.sum() ** 2 / (w.numel() * (w * w).sum())


__all__ = ["WARN_OUTSIDE", "effective_sample_size", "mismatch"]
