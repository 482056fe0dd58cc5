r"""The full policy trained on the sampler's completions: the importance-sampling weight.

By default ``finetune`` trains the distribution it samples (``lm.truncation``). With
``--importance-sampling MODE`` it trains the full policy π = π_τ (the scorer's log-probs before
any truncation or penalty) on completions drawn from the sampler q (truncated, penalised, or
in another precision), each token's term of the loss weighted by a detached w̃, as TRL's
``vllm_importance_sampling_mode`` weights its per-token loss:

    wₜ = π(oₜ)/q(oₜ) = exp(ℓₜ − ℓₜ^q)        (token level),
    w  = Πₜ wₜ = π(o)/q(o)                  (sequence level: every token of o gets w),
    truncate: w̃ = min(w, C),   mask: w̃ = w · 1[w ≤ C].

The levels and constraints are the option table's ``correction`` rows (``tis``/``mis`` at the
token or sequence level, :mod:`eligibility.torch.options`); their formulas are
:func:`~eligibility.torch.formulas.sampler_log_weight`,
:func:`~eligibility.torch.formulas.truncate_weight` and
:func:`~eligibility.torch.formulas.mask_weight`.

**What each mode estimates** (a group baseline b, q(o) > 0 wherever it samples):

    E_q[w̃ (R − b) ∇ln π(o)] = Σ_{o: q(o) > 0} q(o) w̃(o) (R(o) − b) ∇ln π(o)

``sequence-truncate`` with C = inf is the exact weight π(o)/q(o): the full policy's gradient
restricted to q's support. A finite C, a mask, or a token-level weight (which drops the other
tokens' factors) changes it where it bites. No weight recovers what q never samples: a
cut sampler (top-k, top-p, min-p) draws nothing outside its kept sets Kₜ (on them, in one
precision and with no penalty, wₜ = π(Kₜ) ≤ 1, the mass kept), so the full policy's gradient
over the completions it cuts is lost (``eligibility check`` calls it ``sampler-support``). The
correction is for a sampler that computes the same distribution in another precision or
kernel (or with a repetition penalty).

**The default, ``auto``** (:func:`resolved`): ``sequence-mask`` at C = 3 where the run computes
in ``bfloat16`` and samples the plain π_τ, else ``none``. In bf16 the sampler (one token at a
time, a cache) and the scoring pass (the whole sequence at once) round apart: on
SmolLM2-135M-Instruct a few per cent of the sampled tokens' π_score/π_sample lie outside
[0.9, 1.1] (``lm.mismatch``). Weighted, the update's expectation is the scored policy's gradient
over the completions with π(o) ≤ C q(o):

    E_q[w 1[w ≤ C] (R − b) ∇ln π(o)] = Σ_{o: π(o) ≤ C q(o)} π(o) (R(o) − b) ∇ln π(o),

TRL's default for its fast sampler (``vllm_importance_sampling_correction`` true,
``vllm_importance_sampling_mode`` ``sequence_mask``, ``vllm_importance_sampling_clip_max`` 3,
TRL 1.16). In float32 the two passes agree to rounding and the weight is 1 to within it: no
correction is asked for. A cut or penalised sampler (``--top-k`` …) keeps ``none``: there the
distribution sampled is the one trained (``lm.truncation``), which a weight would change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a weight is computed: the flags parse without it
    import torch

MODES: dict[str, tuple[str, str, str | None] | None] = {
    "none": None,
    "token-truncate": ("tis", "token", "token_truncate"),
    "token-mask": ("mis", "token", "token_mask"),
    "sequence-truncate": ("tis", "sequence", "sequence_truncate"),
    "sequence-mask": ("mis", "sequence", "sequence_mask"),
    "exact": ("tis", "sequence", None),
    "token-icepop": ("band", "token", None),
    "geometric-mask": ("band", "geometric", None),
}
"""``--importance-sampling`` → (the ``correction`` row, its level, TRL's
``vllm_importance_sampling_mode``, None where TRL has none); ``none``: the distribution sampled
is the policy trained. ``exact``: the sequence weight w = π(o)/q(o) with no bound (C
ignored): the one unbiased mode, the one for a stale sampler (``--max-staleness``);
``token-icepop``: each token's wₜ kept where 1/C ≤ wₜ ≤ C, else 0 (IcePop's band, [0.5, 2] at
C = 2); ``geometric-mask``: the sequence's w kept where the geometric mean of its wₜ lies in
[1/C, C] (verl's geometric rejection, its lower bound 1/C)."""

AUTO = "auto"
"""``--importance-sampling auto`` (the default): a mode of :data:`MODES` by :func:`resolved`."""

CORRECTION = "sequence-mask"
"""The mode ``auto`` takes where a correction is asked for (TRL's default mode)."""

TRL_CAP = 3.0
"""TRL's ``vllm_importance_sampling_clip_max`` default, C (``--importance-sampling-cap``)."""


def resolved(mode: str, dtype: str, sampled_as_scored: bool, stale: bool = False) -> str:
    """``--importance-sampling`` as the run uses it: ``auto`` → a mode of :data:`MODES`.

        auto → exact           if the sampler may be stale and draws the plain π_τ
        auto → sequence-mask   else if dtype = bfloat16 and the sampler draws the plain π_τ
        auto → none            otherwise (float32: the passes agree; a cut sampler: as cut)

    Args:
        mode: ``auto`` or a :data:`MODES` name (returned as given).
        dtype: the run's resolved ``--dtype`` (``float32`` or ``bfloat16``).
        sampled_as_scored: whether the sampler draws π_τ itself (no top-k, top-p, min-p or
            repetition penalty).
        stale: whether a batch may be drawn by an older policy (``--max-staleness`` k ≥ 1):
            the exact weight Πₜ π_θ/μ is then the one unbiased correction.

    >>> resolved("auto", "bfloat16", True), resolved("auto", "float32", True)
    ('sequence-mask', 'none')
    >>> resolved("auto", "bfloat16", False), resolved("token-mask", "float32", True)
    ('none', 'token-mask')
    >>> resolved("auto", "float32", True, stale=True), resolved("auto", "float32", False, True)
    ('exact', 'none')
    """
    if mode != AUTO:
        return mode
    if stale and sampled_as_scored:
        return "exact"
    return CORRECTION if dtype == "bfloat16" and sampled_as_scored else "none"


def importance_weight(
    logps: torch.Tensor,
    sampler_logps: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    cap: float,
) -> torch.Tensor:
    r"""w̃ [N, T]: the weight of each token's term, min(w, C) or w · 1[w ≤ C] (detached).

        wᵢ,ₜ = exp(ℓᵢ,ₜ − ℓᵢ,ₜ^q)                    (``token-*``)
        wᵢ,ₜ = exp Σₜ′ mᵢ,ₜ′ (ℓᵢ,ₜ′ − ℓᵢ,ₜ′^q)         (``sequence-*``, ``exact``: one w per row)
        w̃ = min(w, C) (``*-truncate``),  w̃ = w · 1[w ≤ C] (``*-mask``),  w̃ = w (``exact``)
        w̃ = wₜ · 1[1/C ≤ wₜ ≤ C]                       (``token-icepop``)
        w̃ = w · 1[1/C ≤ w^(1/Lᵢ) ≤ C],  Lᵢ = Σₜ mᵢ,ₜ     (``geometric-mask``)

    1 on padding before the constraint (its term is 0 in every loss).

    Args:
        logps: [N, T] ℓ = ln π(oₜ), the full policy's (the scorer's), any graph ignored.
        sampler_logps: [N, T] ℓ^q, the log-probs the sampler drew each token with.
        mask: [N, T] 1 on the completions' tokens.
        mode: a :data:`MODES` name other than ``none``.
        cap: C > 0 (``inf``: no bound).

    Raises:
        ValueError: an unknown mode or ``none``, or C ≤ 0 (C < 1 for a band, [1/C, C]).
    """
    import torch

    from eligibility.torch.formulas import mask_weight, sampler_log_weight, truncate_weight

    if MODES.get(mode) is None:
        modes = tuple(m for m in MODES if m != "none")
        raise ValueError(f"importance_sampling must be one of {modes}; got {mode!r}")
    if not float(cap) > 0:
        raise ValueError(f"importance_sampling_cap must be > 0 (inf: no bound); got {cap!r}")
    row, level, _ = MODES[mode]  # type: ignore[misc]
    if row == "band" and float(cap) < 1:
        raise ValueError(
            f"importance_sampling_cap must be >= 1 for {mode} (it keeps w in [1/C, C]); got {cap!r}"
        )
    m = mask.bool()
    lq = sampler_logps.detach().to(logps.dtype)
    log_w = sampler_log_weight(logps.detach(), lq, m, "token" if level == "token" else "sequence")
    w, c = log_w.exp(), float("inf") if mode == "exact" else float(cap)
    if row == "band":  # the gate's statistic: wₜ itself, or the sequence's geometric mean
        gate = w if level == "token" else (log_w / m.sum(-1, keepdim=True).clamp(min=1)).exp()
        w = torch.where((gate >= 1.0 / c) & (gate <= c), w, torch.zeros_like(w))
    else:
        w = (truncate_weight if row == "tis" else mask_weight)(w, c)
    return w.expand(logps.shape)


__all__ = ["AUTO", "CORRECTION", "MODES", "TRL_CAP", "importance_weight", "resolved"]
