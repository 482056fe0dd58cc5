r"""With β > 0: the KL's part of each weight read apart, and the rest read as at β = 0.

The objective J = E[R] − β KL(π_θ ‖ π_ref) gives token t of a reply the exact weight

    wₜ = (1/N) (Aᵢ − β Σ_{s ≥ t} dₛ),     dₛ = ℓₛ − ℓ^ref_s,

the reward's credit, one value a reply, less β times the log-ratio summed to go. A loss that
places the KL otherwise puts another function of the log-ratios on each token (an estimator's
gradient, :data:`ESTIMATORS`). Within a reply the reward's part is one value, so

    wₜ − w̄ = κ (gₜ − ḡ)

holds for the estimator g the loss uses, κ its weight (−β/N where it is the objective's β);
the rest, w − κ g, is one value a reply and is read as the β = 0 audit reads a loss. Where no
estimator fits, how the part that varies within a reply depends on dₜ is said
(:func:`describe`): ``kl-estimator-unknown``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from eligibility.check.audit.names import Finding
from eligibility.check.audit.seen import MODEL, Seen
from eligibility.check.mistakes import named

# the mistakes this module names, each declared in eligibility.check.mistakes
KL_ESTIMATOR_UNKNOWN = named("kl-estimator-unknown")
KL_FORWARD = named("kl-forward")
KL_NO_GRADIENT = named("kl-no-gradient")
KL_TOKEN_LOCAL = named("kl-token-local")
KL_WEIGHT = named("kl-weight")

FIT_TOL = 1e-3
"""An estimator fits where ‖(w − w̄) − κ(g − ḡ)‖ ≤ this × ‖w − w̄‖ over the replies."""


def to_go(d: np.ndarray, model: np.ndarray) -> np.ndarray:
    """Σ_{s ≥ t} dₛ over the model's tokens of each row (0 elsewhere)."""
    x = np.where(model, d, 0.0)
    return np.where(model, np.flip(np.cumsum(np.flip(x, -1), -1), -1), 0.0)


ESTIMATORS: dict[str, tuple[str, Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    "reward-to-go": ("Σ_{s ≥ t} dₛ, the sequence KL's own gradient (exact)", to_go),
    "token-local": (
        "dₜ alone, each token's own log-ratio (k2 in the loss, or k1 as a per-token reward "
        "without the reward-to-go): the later tokens' KL left out",
        lambda d, m: d,
    ),
    "forward": (
        "(1 − e^(−dₜ)) (k3 in the loss): the gradient of the forward KL(π_ref ‖ π), not the "
        "objective's reverse one",
        lambda d, m: 1.0 - np.exp(-d),
    ),
}
"""Each estimator's per-token g(d): what it is, and the function (d, the model's mask)."""

NAMES = {"token-local": KL_TOKEN_LOCAL, "forward": KL_FORWARD}
"""The finding each estimator other than the exact one gives."""


@dataclass(frozen=True)
class KLPart:
    """The KL's part of the weights, read: the estimator, κ, the residual, the rest."""

    estimator: str
    kappa: float
    residual: float
    rest: list[Seen]


ZERO_TOL = 1e-6
"""|w| at or below this fraction of the largest is no weight (a token dropped: left out of the
fit, and kept at 0 in the rest, for the token reading to say)."""


def _weighted(s: Seen) -> np.ndarray:
    top = float(np.abs(s.w[s.kind == MODEL]).max(initial=0.0))
    return (s.kind == MODEL) & (np.abs(s.w) > ZERO_TOL * top)


def _centred(seen: list[Seen], g_of: Callable[[Seen], np.ndarray]) -> tuple[np.ndarray, ...]:
    """(w − w̄, g − ḡ) over the weighted tokens of every reply with two or more, flat."""
    ys, xs = [], []
    for s in seen:
        g = g_of(s)
        live = _weighted(s)
        for i in range(len(s.w)):
            at = live[i]
            if at.sum() < 2:
                continue
            ys.append(s.w[i][at] - s.w[i][at].mean())
            xs.append(g[i][at] - g[i][at].mean())
    if not ys:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(ys), np.concatenate(xs)


def _log_ratio(s: Seen) -> np.ndarray:
    return np.where(s.kind == MODEL, s.ell - s.ref, 0.0)  # type: ignore[operator]


def separate(seen: list[Seen], tol: float = FIT_TOL) -> KLPart | None:
    """The first of :data:`ESTIMATORS` whose κ g leaves one value a reply (or None)."""
    for name, (_, g) in ESTIMATORS.items():

        def g_of(s: Seen, g: Callable[..., np.ndarray] = g) -> np.ndarray:
            return g(_log_ratio(s), s.kind == MODEL)

        y, x = _centred(seen, g_of)
        if not len(y) or float(x @ x) == 0:
            continue
        kappa = float(x @ y) / float(x @ x)
        residual = float(np.linalg.norm(y - kappa * x)) / (float(np.linalg.norm(y)) or 1.0)
        if residual <= tol:
            rest = [
                replace(s, w=np.where(_weighted(s), s.w - kappa * g_of(s), s.w), beta=0.0)
                for s in seen
            ]
            return KLPart(name, kappa, residual, rest)
    return None


SHAPES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "dₜ": lambda d: d,
    "dₜ²": lambda d: d * d,
    "e^(−dₜ)": lambda d: np.exp(-d),
    "e^(dₜ)": np.exp,
    "|dₜ|": np.abs,
    "sign(dₜ)": np.sign,
}
"""The shapes tried where no estimator fits, to say how the weights follow dₜ."""


def findings(part: KLPart, seen: list[Seen]) -> list[Finding]:
    """The names the KL's part gives: its estimator's, and its weight's where not β/N."""
    out = []
    words = ESTIMATORS[part.estimator][0]
    if part.estimator in NAMES:
        out.append(
            Finding(NAMES[part.estimator], f"the KL's part of each token's weight is κ·{words}")
        )
    n = len(seen[0].w)
    factor = part.kappa * n / -seen[0].beta
    if abs(factor) <= 1e-3:  # any estimator fits a part that is 0: no KL gradient at all
        return [
            Finding(
                KL_NO_GRADIENT,
                f"the KL's part of each weight is 0 where the objective's β = {seen[0].beta:g}:"
                " the loss's KL term, if any, moves nothing at θ (k1 in the loss, or no KL)",
            )
        ]
    if abs(factor - 1.0) > 1e-3:
        out.append(
            Finding(
                KL_WEIGHT,
                f"the KL's part of each weight is {factor:.4g} times the objective's β = "
                f"{seen[0].beta:g} (÷ N = {n}): another KL weight, or another normaliser",
            )
        )
    return out


def describe(seen: list[Seen]) -> Finding:
    """How the part of each weight that varies within a reply follows dₜ (no estimator fits)."""
    best: tuple[float, str, float] | None = None
    for said, h in SHAPES.items():
        y, x = _centred(seen, lambda s, h=h: h(_log_ratio(s)))
        if not len(y) or float(x @ x) == 0:
            continue
        k = float(x @ y) / float(x @ x)
        left = float(np.linalg.norm(y - k * x)) / (float(np.linalg.norm(y)) or 1.0)
        if best is None or left < best[0]:
            best = (left, said, k)
    if best is None:
        return Finding(
            KL_ESTIMATOR_UNKNOWN,
            "no reply of two tokens or more: the KL's part of the weights is not read",
        )
    left, said, k = best
    return Finding(
        KL_ESTIMATOR_UNKNOWN,
        "the weights vary within a reply as none of the KL estimators' gradients: closest, "
        f"{k:.3g}·{said} (dₜ = ℓₜ − ℓ^ref_t), off by {left:.1%}",
    )


__all__ = ["ESTIMATORS", "NAMES", "SHAPES", "KLPart", "describe", "findings", "separate", "to_go"]
