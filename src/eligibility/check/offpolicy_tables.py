r"""The off-policy check's tables of choices, and every combination's estimates on a batch.

Every estimator the off-policy family names is a choice in each of six tables: the ratio
(:data:`RATIOS`), a clip (:data:`CLIPS`), a cap (:data:`CAPS`), the sampler correction
(:data:`SAMPLERS`), the aggregation (:data:`AGGREGATIONS`) and the advantage
(:data:`ADVANTAGES`). A :class:`Variant` is one choice of each; :func:`estimates` computes
ĝ_v = Σᵢ,ₜ aggᵢ,ₜ Aᵢ κᵢ,ₜ 1{not clipped} w̃ᵢ,ₜ ∇ℓᵢ,ₜ(θ) for each on the very batches the user's
function sees. The formulas are written from the definitions and share nothing with
:mod:`eligibility.torch.offpolicy` (the aggregations and advantages are the option table's rows).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from eligibility.check.mistakes import named

if TYPE_CHECKING:
    from eligibility.lab.sequence.offpolicy import OffPolicyProblem

CHUNK = 128
"""Batches per chunk when the variants are computed."""


@dataclass(frozen=True)
class Rows:
    """Per row and token of a chunk of c batches of N completions (torch, float64).

    Attributes:
        mask: 1 on real tokens, [c, N, T].
        log_r: ln rₜ = ℓₜ − ℓ^oldₜ, [c, N, T]. log_s: ln s = Σₜ ln rₜ, [c, N, 1].
        log_w: ln w = Σₜ (ℓ^old − ℓ^μ), [c, N, 1]. log_wt: per token, [c, N, T].
        logp: ln π_θ(o), [c, N, 1]. length: L, [c, N, 1]. rewards: R, [c, N].
        group_size: G.
    """

    mask: Any
    log_r: Any
    log_s: Any
    log_w: Any
    log_wt: Any
    logp: Any
    length: Any
    rewards: Any
    group_size: int


def _product(b: Rows) -> tuple[Any, Any]:
    return (s := b.log_s.exp().expand_as(b.mask)), s


def _token(b: Rows) -> tuple[Any, Any]:
    return (r := b.log_r.exp()), r


def _geometric(b: Rows) -> tuple[Any, Any]:
    return (g := (b.log_s / b.length).exp().expand_as(b.mask)), g


def _one(b: Rows) -> tuple[Any, Any]:
    return (one := b.mask.new_ones(b.mask.shape)), one


def _swapped(b: Rows) -> tuple[Any, Any]:
    inv = (-b.log_s).exp().expand_as(b.mask)
    return inv, -inv  # f = −(1/s) A: ∂f/∂ℓₜ = A/s, so ĝ = −A/s ∇ℓₜ


def _undetached(b: Rows) -> tuple[Any, Any]:
    s = b.log_s.exp()
    return s.expand_as(b.mask), (s * (1.0 + b.logp)).expand_as(b.mask)


RATIOS: dict[str, tuple[str | None, Callable[[Rows], tuple[Any, Any]]]] = {
    "product": (None, _product),
    "token": (named("per-token-ratio"), _token),
    "geometric-mean": (named("geometric-mean"), _geometric),
    "one": (named("stale-old-logps"), _one),
    "swapped": ("ratio-1-broken", _swapped),
    "undetached": ("ratio-1-broken", _undetached),
}
"""Ratio → (the mistake, or None; (ρ, κ): the value a clip sees and ĝ's coefficient on ∇ℓₜ).

``product``: s = π_θ(o)/π_old(o) (κ = s); ``token``: rₜ; ``geometric-mean``: s^{1/L};
``one``: old log-probs taken at θ (ratio ≡ 1); ``swapped``: π_old/π_θ (κ = −1/s);
``undetached``: −s A Σₜ ℓₜ with s not detached (κ = s (1 + ln π_θ(o)))."""

CLIPS: dict[str, tuple[str | None, tuple[float, float, float] | None]] = {
    "none": (None, None),
    "ppo": (named("clipping-bias"), (0.2, 0.2, float("inf"))),
    "clip-higher": (named("clipping-bias"), (0.2, 0.28, float("inf"))),
    "dual": (named("clipping-bias"), (0.2, 0.2, 3.0)),
    "gspo": (named("clipping-bias"), (3e-4, 4e-4, float("inf"))),
}
"""Clip → (the mistake, or None; (ε_low, ε_high, dual-clip c)): a token is cut where A > 0 and
ρ > 1 + ε_high, or A < 0 and ρ < 1 − ε_low, or A < 0 and ρ > c. ``gspo``: the GSPO paper's
ε_low = 3·10⁻⁴, ε_high = 4·10⁻⁴, cutting whole sequences where the ratio is the geometric
mean."""


CAPS: dict[str, tuple[str | None, tuple[str, float, float] | None]] = {
    "none": (None, None),
    "cispo-relative": (named("cispo-relative-cap"), ("relative", 0.2, 0.2)),
    "cispo-relative-0.28": (named("cispo-relative-cap"), ("relative", 0.2, 0.28)),
    "cispo-absolute": (named("cispo-absolute-cap"), ("absolute", 0.0, 0.2)),
}
"""Cap → (the mistake, or None; (kind, ε_low, ε_high)): CISPO's detached weight, the ratio's
gradient coefficient κ capped and no token cut. ``relative``: κ̂ = clip(κ, 1 − ε_low,
1 + ε_high) (the paper's, verl's ``cispo``); ``absolute``: κ̂ = min(κ, ε_high) (TRL's
``clamp(coef_1, max=epsilon_high)``, ε_high unset is ε = 0.2: every on-policy weight 0.2)."""


def _capped(kappa: Any, cap: str) -> Any:
    bounds = CAPS[cap][1]
    if bounds is None:
        return kappa
    kind, lo, hi = bounds
    return kappa.clamp(max=hi) if kind == "absolute" else kappa.clamp(1.0 - lo, 1.0 + hi)


CUTS = (0.5, 1.0, 1.5, 2.0, 3.0, 5.0)
"""The sequence-level truncations and masks C tried (TRL's default is 3)."""


def _sampler(level: str, cap: float | None, mask_it: bool) -> Callable[[Rows], Any]:
    """w̃ at ``level``, truncated at C or masked above it.

    ``sequence``: w = π_old/μ; ``token``: each token's wₜ; ``whole``: w with the cap held
    against the whole weight s·w = π_θ/μ (with the product ratio κ = s, κ w̃ is min(s w, C) or
    1{s w ≤ C} s w: the whole importance weight truncated or masked).
    """

    def factor(b: Rows) -> Any:
        w = (b.log_wt if level == "token" else b.log_w).exp()
        if cap is None:
            return w
        if level == "whole":
            s = b.log_s.exp()
            return (s * w <= cap) * w if mask_it else w.minimum(cap / s)
        return (w <= cap) * w if mask_it else w.clamp(max=cap)

    return factor


def _band(level: str, low: float, high: float, mask_it: bool) -> Callable[[Rows], Any]:
    """Each token's own weight wₜ held to [low, high]: clamped into it, or 0 outside it.

    The gate is each token's wₜ (``token``) or the geometric mean of the sequence's (``seq``).
    """

    def factor(b: Rows) -> Any:
        wt = b.log_wt.exp()
        if not mask_it:
            return wt.clamp(low, high)
        stat = (b.log_w / b.length).exp() if level == "seq" else wt
        return ((stat >= low) & (stat <= high)) * wt

    return factor


def _geometric_whole(cap: float) -> Callable[[Rows], Any]:
    """The whole weight π_θ/μ = s·w kept where its per-token geometric mean lies in [1/C, C].

    The gate (s w)^{1/L} is held against [1/C, C]; the weight kept is the whole one (κ = s
    times this factor w), dropped whole outside the band.
    """

    def factor(b: Rows) -> Any:
        geo = ((b.log_s + b.log_w) / b.length).exp()
        return ((geo >= 1.0 / cap) & (geo <= cap)) * b.log_w.exp()

    return factor


SAMPLERS: dict[str, tuple[str | None, Callable[[Rows], Any]]] = {
    "exact": (None, _sampler("sequence", None, False)),
    "none": (named("uncorrected-sampler"), lambda b: b.mask.new_ones(())),
    "token": (named("per-token-sampler-weight"), _sampler("token", None, False)),
    **{
        f"{kind}-{c:g}": (f"{name}-bias", _sampler("sequence", c, kind == "mis"))
        for kind, name in (("tis", "truncation"), ("mis", "masking"))
        for c in CUTS
    },
    **{
        f"{kind}-whole-{c:g}": (f"{name}-bias", _sampler("whole", c, kind == "mis"))
        for kind, name in (("tis", "truncation"), ("mis", "masking"))
        for c in CUTS
    },
    "tis-token-2": (named("truncation-bias"), _sampler("token", 2.0, False)),
    "mis-token-2": (named("masking-bias"), _sampler("token", 2.0, True)),
    "tis-token-3": (named("truncation-bias"), _sampler("token", 3.0, False)),
    "mis-token-3": (named("masking-bias"), _sampler("token", 3.0, True)),
    "tis-token-0.5-5": (named("truncation-bias"), _band("token", 0.5, 5.0, False)),
    "mis-token-0.5-5": (named("masking-bias"), _band("token", 0.5, 5.0, True)),
    "mis-seq-0.5-5": (named("masking-bias"), _band("seq", 0.5, 5.0, True)),
    **{f"mis-geo-whole-{c:g}": (named("masking-bias"), _geometric_whole(c)) for c in (2.0, 3.0)},
}
"""Sampler correction → (the mistake, or None; w̃, [c, N, 1] or [c, N, T]).

``exact``: w = π_old(o)/μ(o); ``none``: no weight; ``token``: each token's own wₜ, uncapped
(a cap C above every wₜ is this one: TRL's ``token_*`` modes at C = 3 here); ``tis-C`` /
``mis-C``: w truncated at C or masked above C (TRL ``sequence_truncate`` / ``sequence_mask``;
C = 3 is TRL's default; C from 0.5 to 5); ``tis-whole-C`` / ``mis-whole-C``: the whole weight
π_θ(o)/μ(o), detached, truncated at C or masked above C, times the score (a user's one
sequence-level weight, which is w at ratio 1); ``*-token-2``, ``*-token-3``: per-token weights,
C = 2 or 3 (TRL's ``token_truncate``/``token_mask`` at its default C = 3); ``*-0.5-5``:
OpenRLHF's corrections at its default ``is_correction_threshold`` [0.5, 5], each token keeping
its own weight wₜ (its ``PolicyLoss``): ``tis-token`` wₜ clamped into the band
(``is_correction_mode: clip``), ``mis-token`` wₜ dropped outside it (icepop), ``mis-seq``
the sequence dropped where the geometric mean of its wₜ is outside it (seq-mask-tis); none is
the whole weight w, so each is biased away from π_old even where the band never binds;
``mis-geo-whole-C``: the whole weight π_θ/μ, dropped where its geometric mean per token lies
outside [1/C, C] (``finetune --importance-sampling geometric-mask``)."""


@functools.cache
def _row(kind: str, name: str) -> Any:
    """A row of the option table (imported with torch on first use): the one formula."""
    from eligibility.torch import options

    return options.row(kind, name)


def _table_weights(name: str) -> Callable[[Rows], Any]:
    """The option table's aggregation ``name``: its weights on a chunk's mask."""
    return lambda b: _row("aggregation", name).fn(b.mask, None, None, None)


def _group_std(r: Any, G: int) -> Any:
    """The table's group-mean baseline with its group-std scale (GRPO's advantage)."""
    return _row("scale", "group-std").fn(_row("baseline", "mean").fn(r, G), r, G)


AGGREGATIONS: dict[str, tuple[str | None, Callable[[Rows], Any]]] = {
    "sequence-sum": (None, _table_weights("sequence-sum")),
    "sequence-mean": (named("length-normalised"), _table_weights("sequence-mean")),
    "token-mean": (named("batch-dependent-normaliser"), _table_weights("token-mean")),
}
"""Aggregation → (the mistake, or None; the per-token multiplier): the option table's rows
(their functions, read on first use so that importing the check needs no torch; a test holds
these mistake names to the rows')."""

ADVANTAGES: dict[str, tuple[str | None, Callable[[Any, int], Any]]] = {
    "rloo": (None, lambda r, G: _row("baseline", "rloo").fn(r, G)),
    "group-std": (named("std-normalised"), _group_std),
}
"""Advantage → (the mistake, or None; A from the rewards [..., N] and G)."""


@dataclass(frozen=True)
class Variant:
    """One combination of a ratio, a clip, a sampler correction, an aggregation, an advantage."""

    ratio: str = "product"
    clip: str = "none"
    sampler: str = "exact"
    aggregation: str = "sequence-sum"
    advantage: str = "rloo"
    cap: str = "none"

    @property
    def mistakes(self) -> tuple[str, ...]:
        """The mistakes it holds, in the tables' order, without repeats."""
        names = [
            RATIOS[self.ratio][0],
            CLIPS[self.clip][0],
            SAMPLERS[self.sampler][0],
            AGGREGATIONS[self.aggregation][0],
            ADVANTAGES[self.advantage][0],
            CAPS[self.cap][0],
        ]
        return tuple(dict.fromkeys(n for n in names if n))

    @property
    def name(self) -> str:
        """The diagnosis it gives: its mistakes, joined."""
        return ", ".join(self.mistakes)


REFERENCE = Variant()
"""The product weight π_θ/μ, RLOO, summed over each sequence: unbiased."""


def variants() -> list[Variant]:
    """The full product of the common choices, and each rarer choice on its own."""
    # first: each token's own weight, uncapped, under the frameworks' token ratio and clip. A cap
    # that never binds is this estimator, and of fits equal batch by batch the first named wins
    uncapped = [
        Variant("token", "ppo", "token", a, adv)
        for a, adv in itertools.product(tuple(AGGREGATIONS), tuple(ADVANTAGES))
    ]
    common = itertools.product(
        ("product", "token", "geometric-mean", "one"),
        ("none", "ppo", "clip-higher"),
        ("exact", "none", "tis-3", "mis-3"),
        tuple(AGGREGATIONS),
        tuple(ADVANTAGES),
    )
    out = [*uncapped, *(Variant(*c) for c in common)]
    out += [Variant(ratio=r) for r in ("swapped", "undetached")]
    out += [Variant(clip="dual"), Variant(ratio="token", clip="dual")]
    out += [  # GSPO: its sequence ratio and its own clip
        Variant("geometric-mean", "gspo", s, a, adv)
        for s, a, adv in itertools.product(("exact", "none"), AGGREGATIONS, ADVANTAGES)
    ]
    rare = [s for s in SAMPLERS if s not in ("exact", "none", "tis-3", "mis-3")]
    out += [Variant(sampler=s) for s in rare]
    # a cut weight without the ratio π_θ/π_old: the ratio's mistake and the cut's, both named
    out += [Variant(ratio="one", sampler=s) for s in rare]
    out += [  # verl's vanilla loss: the token ratio, its dual clip, its rollout corrections
        Variant("token", "dual", s, a, adv)
        for s, a, adv in itertools.product(
            ("none", "tis-token-2", "tis-2", "mis-token-0.5-5"),
            ("token-mean", "sequence-mean", "sequence-sum"),
            tuple(ADVANTAGES),
        )
    ]
    out += [  # TRL's and OpenRLHF's losses: the token ratio, a PPO clip, per-token corrections
        Variant("token", "ppo", s, a, adv)
        for s, a, adv in itertools.product(
            ("none", *(k for k in SAMPLERS if k.endswith(("-0.5-5", "-token-3")))),
            ("token-mean", "sequence-mean"),
            tuple(ADVANTAGES),
        )
    ]
    out += [
        Variant(ratio=r, sampler=s, aggregation=a, advantage=adv, cap=c)
        for r, c, s, a, adv in itertools.product(
            ("product", "token", "geometric-mean"),
            tuple(k for k in CAPS if k != "none"),
            ("exact", "none"),
            tuple(AGGREGATIONS),
            tuple(ADVANTAGES),
        )
    ]
    return [v for v in out if v.mistakes]


def _weights(b: Rows, v: Variant) -> Any:
    """wᵢ,ₜ = aggᵢ,ₜ Aᵢ κ̂ᵢ,ₜ 1{not clipped} w̃ᵢ,ₜ: ĝ = Σᵢ,ₜ wᵢ,ₜ ∇ℓᵢ,ₜ (κ̂: κ, capped)."""
    A = ADVANTAGES[v.advantage][1](b.rewards, b.group_size)[..., None]
    rho, kappa = RATIOS[v.ratio][1](b)
    kappa = _capped(kappa, v.cap)
    bounds = CLIPS[v.clip][1]
    keep = 1.0
    if bounds is not None:
        lo, hi, c = bounds
        cut = ((A > 0) & (rho > 1 + hi)) | ((A < 0) & ((rho < 1 - lo) | (rho > c)))
        keep = (~cut).to(rho.dtype)
    return AGGREGATIONS[v.aggregation][1](b) * A * kappa * keep * SAMPLERS[v.sampler][1](b)


def estimates(problem: OffPolicyProblem, rows: np.ndarray, chosen: list[Variant]) -> np.ndarray:
    """Each variant's ĝ on each batch, [len(chosen), n, p], in chunks of :data:`CHUNK`.

    Args:
        problem: the :class:`~eligibility.lab.sequence.offpolicy.OffPolicyProblem`.
        rows: the enumeration rows of each batch, [n, N] (group-major).
        chosen: the estimators.
    """
    import torch

    t = problem.base.table
    mask = torch.as_tensor(t.mask)
    log_r = torch.as_tensor((problem.token_logp - problem.old_token_logp) * t.mask)
    d = np.where(t.mask > 0, problem.old_token_logp - problem.sampler_token_logp, 0.0)
    log_wt = torch.as_tensor(np.where(problem.covered[:, None], d, 0.0))
    logp = torch.as_tensor(problem.token_logp.sum(1))
    scores = torch.as_tensor(problem.token_scores)
    reward = torch.as_tensor(t.reward)
    n, p = rows.shape[0], problem.base.n_params
    out = np.empty((len(chosen), n, p))
    for start in range(0, n, CHUNK):
        r = torch.as_tensor(rows[start : start + CHUNK])
        m = mask[r]
        b = Rows(
            mask=m,
            log_r=log_r[r],
            log_s=log_r[r].sum(-1, keepdim=True),
            log_w=log_wt[r].sum(-1, keepdim=True),
            log_wt=log_wt[r],
            logp=logp[r][..., None],
            length=m.sum(-1, keepdim=True),
            rewards=reward[r],
            group_size=problem.group_size,
        )
        w = torch.stack([_weights(b, v) for v in chosen], dim=1)  # [c, v, N, T]
        s = scores[r].reshape(len(r), -1, p)
        g = torch.bmm(w.reshape(len(r), len(chosen), -1), s)
        out[:, start : start + len(r)] = g.permute(1, 0, 2).numpy()
    return out


__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "CAPS",
    "CHUNK",
    "CLIPS",
    "CUTS",
    "RATIOS",
    "REFERENCE",
    "SAMPLERS",
    "Rows",
    "Variant",
    "estimates",
    "variants",
]
