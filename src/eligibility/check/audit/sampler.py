r"""The audit off-policy: the weights of a batch drawn by μ for π_old, scored at θ.

The exact credit of token t of reply o (drawn by μ, the loss at θ) is the whole reply's
importance weight times its advantage, the same on every token of the reply:

    cₜ = (1/N) Aₒ Πₛ qₛ Πₛ sₛ,     qₛ = π_θ(oₛ)/π_old(oₛ),   sₛ = π_old(oₛ)/μ(oₛ),

(Πₛ over the reply's tokens). A loss's weight wₜ is split into

1. a **per-token factor** fₜ, the one among 1, qₜ, qₜsₜ, sₜ, a clamp of qₜ or of sₜ (bounds
   read off the weights, asymmetric included: :func:`read_clamp`) that makes wₜ/fₜ one value
   across each reply (a per-token ratio where the reply's product is owed: ``per-token-ratio``,
   ``per-token-sampler-weight``, ``cispo-relative-cap``, a sampler weight clamped:
   ``truncation-bias``);
2. the **tokens with no weight** inside replies that have weight, told by where they sit: a
   ratio qₜ outside [1 − ε, 1 + ε] on the side of the advantage's sign (a PPO clip, its ε read
   off: ``clipping-bias``), or a sampler ratio sₜ above C (a token mask, ``masking-bias``);
3. a **reply factor** hᵤ, the one among Πq·Πs (exact), Πs, min(Πs, C), Πs·1{Πs ≤ C}, Πq, 1
   that leaves w̄ᵤ/hᵤ a relation of the on-policy audit (:func:`relations.relate`): the
   sampler's weight truncated (``truncation-bias``, C read off), masked (``masking-bias``),
   missing (``uncorrected-sampler``), the policy's ratio missing (``stale-old-logps``); or
   the reply factor's own derivative left in, h + h'·ln π_θ(o), a weight that is not detached
   (``ratio-1-broken``);
4. the **replies with no weight** whose credit is not 0 and whose factor is not 0, told by an
   interval of one of their ratios (:data:`REJECTION_FEATURES`) that keeps exactly the others,
   its bounds read off (a sequence rejection mask: ``masking-bias``).

What is left is the on-policy audit's: the advantage and the aggregation.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from eligibility.check.audit.names import Finding
from eligibility.check.audit.relations import (
    FIT_TOL,
    ZERO_TOL,
    Relation,
    Units,
    _credit,
    relate,
    units,
)
from eligibility.check.audit.seen import MODEL, Seen
from eligibility.check.mistakes import named

# the mistakes this module names, each declared in eligibility.check.mistakes
CISPO_RELATIVE_CAP = named("cispo-relative-cap")
CLIPPING_BIAS = named("clipping-bias")
GEOMETRIC_MEAN = named("geometric-mean")
MASKING_BIAS = named("masking-bias")
MODEL_TOKENS_DROPPED = named("model-tokens-dropped")
PER_TOKEN_RATIO = named("per-token-ratio")
PER_TOKEN_SAMPLER_WEIGHT = named("per-token-sampler-weight")
RATIO_1_BROKEN = named("ratio-1-broken")
RATIO_FLOOR = named("ratio-floor")
STALE_OLD_LOGPS = named("stale-old-logps")
TRUNCATION_BIAS = named("truncation-bias")
UNCORRECTED_SAMPLER = named("uncorrected-sampler")

CONSTANT = 1e-3
"""wₜ/fₜ is one value across a reply where it spreads by less than this (relative)."""

EPSILONS = (0.2, 0.28, 0.1, 0.3, 0.4, 0.5)
"""The clip ε said where it lies between the ratios kept and those cut (the frameworks'
defaults first; else the interval is said)."""

CUTS = (0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
"""The sampler-weight bounds C tried for a truncation or a mask (the frameworks' defaults and
the values their users set), before the bound read off the weights."""


@dataclass(frozen=True)
class Split:
    """A loss's weights split as the module's docstring says, and what each part is named."""

    token: str
    reply: str
    cut: float | None
    relation: Relation
    findings: list[Finding]
    attached: bool = False
    """The reply factor is left attached: each reply's weight is A·(h + h'·ln π_θ(o))."""


TOKEN_FACTORS = ("none", "q", "qs", "s", "q-clamped-0.8-1.2", "q-clamped-0.72-1.28")
"""wₜ's per-token factor: none, its ratio qₜ, qₜsₜ, sₜ, or qₜ clamped to [lo, hi] (CISPO's
relative cap; its bounds are also read off the weights, :func:`read_clamp`)."""
BOUNDED = ("q-clamped", "q-floored", "q-s-clamped")
"""The token factors whose bounds are read off the weights, written ``q-clamped-lo-hi``,
``q-floored-f``, ``q-s-clamped-lo-hi`` (qₜ clip(sₜ, lo, hi): a clamped sampler weight)."""
POLICY = ("q", "q-geometric", "none")
"""The reply's policy factor: Πq (owed), (Πq)^{1/L} (GSPO's geometric mean), none."""
SAMPLER = ("s", "s-truncated", "s-masked", "none")
"""The reply's sampler factor: Πs (owed), min(Πs, C), Πs·1{Πs ≤ C}, none."""
WHOLE = ("whole-truncated", "whole-masked")
"""The reply's whole weight ΠqΠs truncated at C or masked above it (one weight, detached)."""
REPLY_FACTORS = (*(f"{a}|{b}" for a in POLICY for b in SAMPLER), *WHOLE)


def _token_factor(s: Seen, name: str) -> np.ndarray:
    q = np.exp(s.ell - s.old)  # type: ignore[operator]
    r = np.exp(s.old - s.sampler)  # type: ignore[operator]
    if name.startswith("q-s-clamped"):
        lo, hi = clamp_bounds(name)
        return q * np.clip(r, lo, hi)
    if name.startswith("q-clamped"):
        lo, hi = clamp_bounds(name)
        return np.clip(q, lo, hi)
    if name.startswith("q-floored"):
        return np.maximum(q, float(name.rsplit("-", 1)[1]))
    return {"none": np.ones_like(q), "q": q, "qs": q * r, "s": r}[name]


def clamp_bounds(name: str) -> tuple[float, float]:
    """(lo, hi) of a ``q-clamped-lo-hi`` or ``q-s-clamped-lo-hi`` token factor."""
    lo, hi = name.rsplit("-", 2)[1:]
    return float(lo), float(hi)


def clamp_words(lo: float, hi: float) -> str:
    """A clamp [lo, hi] read off the weights, in words (a side that binds on no token: none)."""
    if np.isfinite(hi) and lo > 0:
        return f"clamped to [{lo:.3g}, {hi:.3g}]"
    if np.isfinite(hi):
        return f"capped at {hi:.3g} (no floor binds on these batches)"
    return f"floored at {lo:.3g} (no cap above binds on these batches)"


def read_clamp(
    seen: list[Seen], top: float, tol: float = CONSTANT, of: str = "q"
) -> tuple[float, float] | None:
    """The bounds [lo, hi] of a clamp on each token's ratio, wₜ ∝ clip(xₜ, lo, hi), read off.

    ``of``: ``"q"``, the policy's ratio xₜ = qₜ (CISPO's cap); ``"s"``, the sampler's
    xₜ = sₜ = π_old/μ on top of the policy's qₜ, wₜ ∝ qₜ clip(sₜ, lo, hi) (a clamped
    per-token sampler weight). In each reply, κ is the wₜ/xₜ that at least two of its tokens
    share (inside the clamp); a token whose wₜ/κ falls short of xₜ is capped above, at
    hi = wₜ/κ, one that exceeds it capped below, at lo. One lo and one hi for all (either may
    be absent: ±∞; for qₜ a cap above is required, a floor alone being :func:`read_floor`'s),
    every capped ratio beyond its bound and every other inside, is the clamp (asymmetric ones
    included).
    """
    his, los, above, below, inside = [], [], [], [], []
    for s in seen:
        q = np.exp(s.ell - s.old)  # type: ignore[operator]
        held = q if of == "q" else np.exp(s.old - s.sampler)  # type: ignore[operator]
        co = np.ones_like(q) if of == "q" else q
        live = (np.abs(s.w) > ZERO_TOL * top) & (s.kind == MODEL)
        for i in range(len(s.w)):
            w, qi = s.w[i][live[i]] / co[i][live[i]], held[i][live[i]]
            ratio = w / qi
            same = np.abs(ratio[:, None] / ratio[None, :] - 1) <= tol
            shared = same.sum(1) >= 2
            if not shared.any():
                continue  # no two tokens inside the cap: this reply does not tell κ
            v = w / ratio[int(np.argmax(same.sum(1)))]
            short, over = v < qi * (1 - tol), v > qi * (1 + tol)
            his += list(v[short])
            above += list(qi[short])
            los += list(v[over])
            below += list(qi[over])
            inside += list(qi[~short & ~over])
    if not his and (of == "q" or not los):
        return None  # nothing capped (for qₜ, nothing capped above: a floor is read_floor's)
    lo = float(np.median(los)) if los else 0.0
    hi = float(np.median(his)) if his else np.inf
    agree = all(np.ptp(x) <= tol * 10 * max(np.abs(x).max(), 1e-300) for x in (his, los) if x)
    ok = (
        (not his or min(above) > hi)
        and (not los or max(below) < lo)
        and lo <= min(inside, default=lo)
        and max(inside, default=hi) <= hi
    )
    return (lo, hi) if agree and ok and lo < hi else None


def read_floor(seen: list[Seen], top: float, tol: float = CONSTANT) -> float | None:
    """The floor f under each token's ratio, wₜ ∝ max(qₜ, f), read off the weights (or None).

    In each reply its largest ratio is taken as above the floor (κ = w/q there); a token whose
    weight exceeds κqₜ is floored, at wₜ/κ. One f for every floored token, above every floored
    ratio and below every other, is the floor.
    """
    floors, kept, under = [], [], []
    for s in seen:
        q = np.exp(s.ell - s.old)  # type: ignore[operator]
        live = (np.abs(s.w) > ZERO_TOL * top) & (s.kind == MODEL)
        for i in range(len(s.w)):
            if live[i].sum() < 2:
                continue
            w, qi = np.abs(s.w[i][live[i]]), q[i][live[i]]
            kappa = w[qi.argmax()] / qi.max()
            floored = w > kappa * qi * (1 + tol)
            floors += list(w[floored] / kappa)
            under += list(qi[floored])
            kept += list(qi[~floored])
    if not floors:
        return None
    f = float(np.median(floors))
    agree = np.ptp(floors) <= tol * f * 10
    return f if agree and max(under) < f <= min(kept, default=np.inf) else None


def _replies(
    seen: list[Seen], token: str, top: float, tol: float = CONSTANT
) -> tuple[list[Seen], bool]:
    """Each batch with wₜ/fₜ in place of wₜ (0 kept 0), and whether it is one value a reply."""
    out, constant = [], True
    for s in seen:
        f = _token_factor(s, token)
        w = np.where(s.kind == MODEL, s.w / np.where(f > 0, f, 1.0), s.w)
        live = (np.abs(s.w) > ZERO_TOL * top) & (s.kind == MODEL)
        for i in range(len(w)):
            v = w[i][live[i]]
            if len(v) > 1 and np.ptp(v) > tol * np.abs(v).max():
                constant = False
        out.append(replace(s, w=w))
    return out, constant


def _products(seen: list[Seen]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Πq, Πs and the token count of every unit, in the order of :func:`relations.units`."""
    pq, ps, n = [], [], []
    for s in seen:
        for i in range(len(s.w)):
            for k in sorted({int(t) for t in s.turn[i] if t >= 0}):
                at = (s.kind[i] == MODEL) & (s.turn[i] == k)
                pq.append(float(np.exp((s.ell[i][at] - s.old[i][at]).sum())))  # type: ignore[index]
                ps.append(float(np.exp((s.old[i][at] - s.sampler[i][at]).sum())))  # type: ignore[index]
                n.append(int(at.sum()))
    return np.asarray(pq), np.asarray(ps), np.asarray(n)


def reply_ratios(seen: list[Seen]) -> dict[str, np.ndarray]:
    """Each unit's own ratios, keyed as :data:`~eligibility.check.audit.maps.REPLY_FEATURES`.

    Πₜ π_θ/μ, Πₜ π_old/μ and the mean over its tokens of π_old/μ (a plain loop).
    """
    pq, ps, _ = _products(seen)
    mean = []
    for s in seen:
        for i in range(len(s.w)):
            for k in sorted({int(t) for t in s.turn[i] if t >= 0}):
                at = (s.kind[i] == MODEL) & (s.turn[i] == k)
                mean.append(float(np.exp(s.old[i][at] - s.sampler[i][at]).mean()))  # type: ignore[index]
    return {"whole_ratio": pq * ps, "sampler_ratio": ps, "sampler_mean": np.asarray(mean)}


def _reply_factor(
    name: str, pq: np.ndarray, ps: np.ndarray, n: np.ndarray, cut: float | None
) -> np.ndarray:
    """hᵤ of one of :data:`REPLY_FACTORS` (C = ``cut`` where it bounds one)."""
    bound = np.inf if cut is None else cut
    if name in WHOLE:
        whole = pq * ps
        return np.minimum(whole, bound) if name == "whole-truncated" else whole * (whole <= bound)
    policy, sampler = name.split("|")
    p = {"q": pq, "q-geometric": pq ** (1.0 / np.maximum(n, 1)), "none": np.ones_like(pq)}
    s = {
        "s": ps,
        "s-truncated": np.minimum(ps, bound),
        "s-masked": ps * (ps <= bound),
        "none": np.ones_like(ps),
    }
    return p[policy] * s[sampler]


def _cuts(name: str, pq: np.ndarray, ps: np.ndarray) -> list[float | None]:
    """The bounds C to try for a factor that has one: :data:`CUTS`, then the values seen."""
    if not name.endswith(("truncated", "masked")):
        return [None]
    seen = pq * ps if name in WHOLE else ps
    read = np.quantile(seen[seen > 0], np.linspace(0.1, 0.9, 9)) if np.any(seen > 0) else []
    tried = [*CUTS, *(float(c) for c in read)]
    # a bound that binds on no reply, or on every one, is another factor's (none, a constant)
    return [c for c in tried if 0 < np.mean(seen > c) < 1]


def _clipped(
    seen: list[Seen], token: str, u: Units, top: float
) -> tuple[list[Finding], float, float]:
    """The tokens given no weight inside replies that have weight, told by where they sit.

    Returns the findings and the rule read: (ε of a PPO clip, C of a token mask; ∞ for none).
    """
    zero_q: list[float] = []
    live_q: list[float] = []
    zero_s: list[float] = []
    live_s: list[float] = []
    j = 0
    for s in seen:
        q = np.exp(s.ell - s.old)  # type: ignore[operator]
        r = np.exp(s.old - s.sampler)  # type: ignore[operator]
        for i in range(len(s.w)):
            at = s.kind[i] == MODEL
            if not at.any():
                continue
            sign = np.sign(u.w[j]) if j < len(u.w) else 0.0
            j += 1
            live = np.abs(s.w[i]) > ZERO_TOL * top
            if not (live & at).any() or sign == 0:
                continue
            zero_q += list(sign * (q[i][at & ~live] - 1))
            live_q += list(sign * (q[i][at & live] - 1))
            zero_s += list(r[i][at & ~live])
            live_s += list(r[i][at & live])
    if not zero_q:
        return [], np.inf, np.inf
    zq, lq, zs, ls = (np.asarray(x) for x in (zero_q, live_q, zero_s, live_s))
    n = len(zq) + len(lq)
    for eps, cut in (
        [(e, np.inf) for e in EPSILONS]
        + [(np.inf, c) for c in CUTS]
        + [(e, c) for e in EPSILONS for c in CUTS]
    ):
        clipped, masked = zq > eps, zs > cut
        if (clipped | masked).all() and not ((lq > eps) | (ls > cut)).any():
            return _cut_findings(clipped.sum() / n, eps, masked.sum() / n, cut), eps, cut
    return (
        [
            Finding(
                MODEL_TOKENS_DROPPED,
                f"{len(zq) / n:.0%} of the model's tokens get no "
                "weight, by no bound of their ratios the audit tries",
            )
        ],
        np.inf,
        np.inf,
    )


def _cut_units(seen: list[Seen], eps: float, cut: float, sign: np.ndarray) -> np.ndarray:
    """The units every token of which the token rule (ε, C) of :func:`_clipped` cuts.

    ``sign``: each unit's credit sign (a PPO clip cuts on the advantage's side), in the order
    of :func:`relations.units`. A reply so cut has no weight by the token rule, not its own.
    """
    out = []
    for s in seen:
        q = np.exp(s.ell - s.old)  # type: ignore[operator]
        r = np.exp(s.old - s.sampler)  # type: ignore[operator]
        for i in range(len(s.w)):
            for k in sorted({int(t) for t in s.turn[i] if t >= 0}):
                at = (s.kind[i] == MODEL) & (s.turn[i] == k)
                a = sign[len(out)]
                out.append(bool(np.all((a * (q[i][at] - 1) > eps) | (r[i][at] > cut))))
    return np.asarray(out, bool)


def _cut_findings(clip_share: float, eps: float, mask_share: float, cut: float) -> list[Finding]:
    """The clip and the token mask that leave the tokens they leave without weight."""
    out = []
    if np.isfinite(eps):
        out.append(
            Finding(
                CLIPPING_BIAS,
                f"{clip_share:.0%} of the model's tokens get no "
                f"weight: those whose ratio π_θ/π_old leaves 1 by more than ε = "
                f"{eps:g} on the side of the advantage's sign (a PPO clip)",
            )
        )
    if np.isfinite(cut):
        out.append(
            Finding(
                MASKING_BIAS,
                f"{mask_share:.0%} of the model's tokens get no "
                f"weight: those whose own sampler ratio π_old/μ exceeds C = {cut:g} "
                "(a token mask)",
            )
        )
    return out


def _slope(
    name: str, pq: np.ndarray, ps: np.ndarray, n: np.ndarray, cut: float | None
) -> np.ndarray:
    """h'ᵤ = ∂hᵤ/∂ln π_θ(oᵤ) of one of :data:`REPLY_FACTORS`: what a factor left attached adds.

    A loss −A·h·Σₜ ℓₜ with h not detached weights each token A·(h + h'·Σₜ ℓₜ): Πq moves with
    every ℓₜ (h' = h), the geometric mean by 1/L of it, min(w, C) only below C, Πs not at all.
    """
    h = _reply_factor(name, pq, ps, n, cut)
    if name == "whole-truncated":
        return pq * ps * (pq * ps < (np.inf if cut is None else cut))
    if name == "whole-masked":
        return h
    policy = name.split("|")[0]
    return {"q": h, "q-geometric": h / np.maximum(n, 1), "none": np.zeros_like(h)}[policy]


REJECTION_FEATURES = {
    "whole": "ratio π_θ/μ over the whole reply",
    "sampler": "sampler ratio π_old/μ over the whole reply",
    "policy": "policy ratio π_θ/π_old over the whole reply",
    "sampler-geometric": "geometric mean (π_old/μ)^{1/L} of its tokens' sampler ratios",
    "whole-geometric": "geometric mean (π_θ/μ)^{1/L} of its tokens' ratios",
}
"""The ratios of a reply an interval of which may decide its rejection, in the order tried."""

ROUND_BOUNDS = (*CUTS, *(1.0 / c for c in CUTS), 0.8, 1.2, 1.25, 1.28, 0.2, 0.1)
"""The bounds a rejection interval is said with where one lies where the weights put it."""


def _rejection_features(pq: np.ndarray, ps: np.ndarray, n: np.ndarray) -> dict[str, np.ndarray]:
    root = 1.0 / np.maximum(n, 1)
    return {
        "whole": pq * ps,
        "sampler": ps,
        "policy": pq,
        "sampler-geometric": ps**root,
        "whole-geometric": (pq * ps) ** root,
    }


def _bound(lo: float, hi: float) -> tuple[float, str]:
    """A bound in the interval (lo, hi] the weights leave it, and its words.

    The roundest of :data:`ROUND_BOUNDS` that lies there (the fewest digits), else the interval.
    """
    inside = [c for c in ROUND_BOUNDS if lo < c <= hi]
    if inside:
        c = min(inside, key=lambda c: len(f"{c:.3g}"))
        return c, f"{c:.3g}"
    mid = 0.5 * (lo + hi) if np.isfinite(hi) else lo
    return mid, f"{lo:.3g}–{hi:.3g}"


def read_rejection(
    x: np.ndarray, drop: np.ndarray, kept: np.ndarray
) -> tuple[float | None, float | None, str] | None:
    """The interval of x that keeps exactly the ``kept`` units and none of the ``drop`` ones.

    Every dropped x lies below the least kept one or above the greatest: the bounds are read
    off the gaps (lo in (max dropped below, min kept], hi in [max kept, min dropped above)),
    said with a round number where the gap holds one, else as the gap (``0.62–0.71``). Returns
    (lo, hi, words) (None for a side that rejects nothing), or None where no interval does it.
    """
    if not drop.any() or kept.sum() < 2:
        return None
    k_lo, k_hi = float(x[kept].min()), float(x[kept].max())
    below, above = drop & (x < k_lo), drop & (x > k_hi)
    if not np.array_equal(below | above, drop):
        return None
    lo = hi = None
    said_lo = said_hi = ""
    if below.any():
        lo, said_lo = _bound(float(x[below].max()), k_lo)
    if above.any():
        # hi in [k_hi, first dropped above): read as the gap (k_hi − 0, first above − 0]
        hi, said_hi = _bound(k_hi, float(x[above].min()) * (1 - 1e-12))
    if lo is not None and hi is not None:
        words = f"outside [{said_lo}, {said_hi}]"
    elif lo is not None:
        words = f"below {said_lo}"
    else:
        words = f"above {said_hi}"
    return lo, hi, words


def _rejected(
    u0: Units, h: np.ndarray, products: tuple[np.ndarray, ...], cut: np.ndarray
) -> list[Finding]:
    """The replies owed weight that have none, told by an interval of one of their ratios.

    ``u0``: the units as the loss weights them (the relation that fits them left these
    replies out); ``h``: the reply factor (its zeros are its own); ``products``: Πq, Πs and
    the token count of every unit; ``cut``: the units the token rule cuts whole.
    """
    pq, ps, n = products
    credit = _credit(u0)
    drop = u0.zero & (h != 0) & (np.abs(credit) > 0) & ~cut
    kept = ~u0.zero & (h != 0)
    if not drop.any():
        return []
    reads = [
        f"whose {REJECTION_FEATURES[key]} lies {read[2]}"
        for key, x in _rejection_features(pq, ps, n).items()
        if (read := read_rejection(x, drop, kept)) is not None
    ]
    if reads:
        share = float(np.abs(credit[drop]).sum() / max(np.abs(credit).sum(), 1e-300))
        alike = (
            f" (or equally those {'; or those '.join(reads[1:])}: these batches do not tell "
            "them apart)"
            if len(reads) > 1
            else ""
        )
        return [
            Finding(
                MASKING_BIAS,
                f"{int(drop.sum())} of the {int((drop | kept).sum())} replies whose credit is "
                f"not 0 get no weight: those {reads[0]}{alike}, a sequence rejection mask, its "
                f"bounds read off the weights ({share:.1%} of the exact credit's weight)",
                share,
            )
        ]
    return [
        Finding(
            MODEL_TOKENS_DROPPED,
            f"{int(drop.sum())} of the {int((drop | kept).sum())} replies whose credit is not "
            "0 get no weight, by no interval of their ratios the audit tries",
        )
    ]


def _reply_factors(
    token: str, pq: np.ndarray, ps: np.ndarray, n: np.ndarray, logp: np.ndarray
) -> Iterator[tuple[str, float | None, bool, np.ndarray]]:
    """(reply factor, C, attached, hᵤ) in the order tried: each as it is, then left attached."""
    for attached in (False, True):
        for reply in REPLY_FACTORS:
            if token != "none" and not reply.startswith("none|"):
                continue  # the policy's ratio already applied token by token
            for cut in _cuts(reply, pq, ps):
                h = _reply_factor(reply, pq, ps, n, cut)
                if attached:
                    slope = _slope(reply, pq, ps, n, cut)
                    if not np.any(slope):
                        continue  # nothing of it moves with θ
                    h = h + slope * logp
                yield reply, cut, attached, h


def split(seen: list[Seen], tol: float = FIT_TOL) -> Split | None:
    """The first (token factor, reply factor, C) that leaves a relation of the on-policy audit.

    ``tol``: the relative spread a reply's weights and the relative residual a relation may
    leave (:data:`~eligibility.check.audit.relations.COARSE_TOL` for a loss in bf16).
    """
    top = max(float(np.abs(s.w[s.kind == MODEL]).max(initial=0.0)) for s in seen)
    pq, ps, n = _products(seen)
    floor = read_floor(seen, top, tol)
    clamp = read_clamp(seen, top, tol)
    sampler_clamp = read_clamp(seen, top, tol, of="s")
    tokens = [
        *TOKEN_FACTORS,
        *([] if clamp is None else [f"q-clamped-{clamp[0]:.6g}-{clamp[1]:.6g}"]),
        *([] if floor is None else [f"q-floored-{floor:.6g}"]),
        *(
            []
            if sampler_clamp is None
            else [f"q-s-clamped-{sampler_clamp[0]:.6g}-{sampler_clamp[1]:.6g}"]
        ),
    ]
    for token in tokens:
        replies, constant = _replies(seen, token, top, tol)
        if not constant:
            continue
        u0 = units(replies)
        shapes: dict[tuple[str, str], np.ndarray] = {}
        for reply, cut, attached, h in _reply_factors(token, pq, ps, n, u0.logp):
            w = np.where(h != 0, u0.w / np.where(h != 0, h, 1.0), 0.0)
            if np.any((h == 0) & ~u0.zero):
                continue  # a unit the factor gives none still has weight
            u = replace(u0, w=w, zero=u0.zero | (h == 0))
            rel, every = relate(u, True, shapes, tol), True
            if rel is None and u.zero.any():  # the units without weight left out
                rel, every = relate(u, False, shapes, tol), False
            if rel is not None:
                clips, eps, bound = _clipped(seen, token, u, top)
                found = _names(token, reply, cut, ps, attached) + clips
                if not every:
                    whole = _cut_units(seen, eps, bound, np.sign(_credit(u0)))
                    found += _rejected(u0, h, (pq, ps, n), whole)
                return Split(token, reply, cut, rel, found, attached)
    return None


def _names(
    token: str, reply: str, cut: float | None, ps: np.ndarray, attached: bool = False
) -> list[Finding]:
    """The names a split gives (none where it is the exact credit's: Πq·Πs a reply)."""
    owed = "where the reply's product is owed"
    said: list[tuple[str, str]] = []
    bound = token.rsplit("-", 1)[-1]
    if attached:
        said.append(
            (
                RATIO_1_BROKEN,
                "each reply's importance weight h is not detached: its tokens weighted "
                "A·(h + h'·ln π_θ(o)), h' its derivative in the reply's own log-prob (1 + "
                "ln π_θ(o) times the weight where it is the ratio itself), not A·h",
            )
        )
    if token in ("q", "qs") or token.startswith("q-s-clamped"):
        said.append((PER_TOKEN_RATIO, f"each token weighted by its own ratio π_θ/π_old {owed}"))
    if token.startswith("q-s-clamped"):
        lo, hi = clamp_bounds(token)
        said.append((PER_TOKEN_SAMPLER_WEIGHT, f"each token weighted by its own π_old/μ {owed}"))
        said.append(
            (
                TRUNCATION_BIAS,
                f"each token's own sampler weight π_old/μ {clamp_words(lo, hi)} (bounds read "
                "off the weights)",
            )
        )
    if token.startswith("q-clamped"):
        lo, hi = clamp_bounds(token)
        said.append(
            (
                CISPO_RELATIVE_CAP,
                f"each token weighted by its own ratio π_θ/π_old clamped to [{lo:.3g}, {hi:.3g}] "
                f"{owed}",
            )
        )
    if token.startswith("q-floored"):
        said.append(
            (
                RATIO_FLOOR,
                f"each token weighted by its own ratio π_θ/π_old floored "
                f"at {bound} (max(ratio, floor)) {owed}",
            )
        )
    if token in ("qs", "s"):
        said.append((PER_TOKEN_SAMPLER_WEIGHT, f"each token weighted by its own π_old/μ {owed}"))
    if reply in WHOLE:
        name, what = {
            "whole-truncated": (TRUNCATION_BIAS, "truncated at"),
            "whole-masked": (MASKING_BIAS, "dropped above"),
        }[reply]
        said.append((name, f"each reply's whole weight π_θ/μ {what} C = {cut:.3g}"))
        return [Finding(*pair) for pair in said]
    policy, sampler = reply.split("|")
    if policy == "q-geometric":
        said.append(
            (
                GEOMETRIC_MEAN,
                "each reply weighted by the geometric mean "
                "(Πₜ π_θ/π_old)^{1/L} of its ratios, not their product",
            )
        )
    if policy == "none" and token in ("none", "s"):
        said.append((STALE_OLD_LOGPS, "no π_θ/π_old ratio in the weights although θ ≠ θ_old"))
    if sampler in ("s-truncated", "s-masked"):
        share = float(np.mean(ps > cut))  # type: ignore[operator]
        said.append(
            (
                TRUNCATION_BIAS,
                f"each reply's sampler weight π_old/μ truncated at C = "
                f"{cut:.3g} (binds on {share:.0%} of the replies)",
            )
            if sampler == "s-truncated"
            else (
                MASKING_BIAS,
                f"each reply whose sampler weight π_old/μ exceeds C = "
                f"{cut:.3g} dropped ({share:.0%} of the replies)",
            )
        )
    corrected = token in ("qs", "s") or token.startswith("q-s-clamped")
    if sampler == "none" and not corrected and np.any(np.abs(ps - 1) > 1e-6):
        said.append(
            (UNCORRECTED_SAMPLER, "no π_old/μ weight although the sampler differs from π_old")
        )
    return [Finding(*pair) for pair in said]


__all__ = [
    "BOUNDED",
    "CUTS",
    "POLICY",
    "REJECTION_FEATURES",
    "REPLY_FACTORS",
    "ROUND_BOUNDS",
    "SAMPLER",
    "TOKEN_FACTORS",
    "WHOLE",
    "Split",
    "clamp_bounds",
    "clamp_words",
    "read_clamp",
    "read_floor",
    "read_rejection",
    "split",
]
