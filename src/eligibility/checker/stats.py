r"""The statistics of ``eligibility check``: the z-test, the scale fit, power, the verdict.

N estimates ĝₙ (rows of G, shape (N, p)) of a vector whose exact value g = ∇J is known. The
z-test is the lab's (:func:`eligibility.lab.estimate.z_scores`, Bonferroni over p components):
H₀ "E[ĝ] = g" is rejected when maxᵢ |zᵢ| > t*, a false alarm with probability ≤ α.

**Scale fit.** E[ĝ] = c g is tested by projecting every estimate on one direction,

    cₙ = ⟨ĝₙ, w⟩,   w = (g / SE²) / Σᵢ gᵢ² / SEᵢ²     (weighted least squares, per estimate)
    ĉ = mean cₙ,    SE_c = sd(cₙ) / √N,   residuals Rₙ = ĝₙ − cₙ g

so ĉ and the residuals are means of independent rows, and the lab's z-test applies to each.
A failed z-test whose residuals pass it makes "E[ĝ] ∥ ∇J" a finding, not a coincidence.

**Power.** Against a mean shifted by δᵢ standard errors in component i, the test rejects with
probability ≈ Φ(|δᵢ| − t*). A sign error shifts component i by 2|gᵢ|√N/s (same spread s); a
factor-2 scale error by |gᵢ|√N/(2s) (twice the spread), the harder of the two. N is chosen so
that maxᵢ |gᵢ|√N/(2sᵢ) ≥ t* + z₀.₉₉ with the spread sᵢ of plain REINFORCE on the same problem,
and, where γ < 1, so that a dropped γᵗ is told from a rescaling with the same power
(:func:`mistakes`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from eligibility.lab.estimate import z_scores, z_threshold

Z = NormalDist()

MIN_SAMPLES = 100
"""The fewest estimates per problem (the z-test's Student-t needs a few tens; 100 is safe)."""

RESIDUAL_FLOOR = 1e-3
"""The floor of a residual's SE, relative to the component's own SE (see :func:`fit_scale`)."""

MAX_SAMPLES = 6000
"""The most estimates per problem chosen automatically (bounds the run time)."""


def power(shift: float, threshold: float) -> float:
    """P(|Z + δ| > t*) for Z ~ N(0, 1): the chance a component shifted by δ SEs is caught."""
    return Z.cdf(abs(shift) - threshold) + Z.cdf(-abs(shift) - threshold)


def mistakes(
    exact: np.ndarray, spread: np.ndarray, without_discount_weighting: np.ndarray | None = None
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The mistakes N is sized for: name → (shift of the mean, spread of the estimates).

    ``sign``: mean −g, shift 2g, spread s. ``scale-2``: mean 2g, shift g, spread 2s.
    ``discount-vs-scale`` (γ < 1 only): the γᵗ-less mean g₁ minus its best fit c g (weights
    1/s²), spread |c| s: the part of a dropped γᵗ that no rescaling explains, so the two
    diagnoses can be told apart.
    """
    out = {"sign": (2.0 * exact, spread), "scale-2": (exact, 2.0 * spread)}
    if without_discount_weighting is not None:
        w = np.where(spread > 0, 1.0 / np.where(spread > 0, spread, 1.0) ** 2, 0.0)
        c = float((w * exact) @ without_discount_weighting / ((w * exact) @ exact))
        out["discount-vs-scale"] = (without_discount_weighting - c * exact, abs(c) * spread)
    return out


def _reach(shift: np.ndarray, spread: np.ndarray) -> float:
    """maxᵢ |δᵢ| / σᵢ: the largest shift in units of one estimate's spread."""
    ok = spread > 0
    return float(np.max(np.abs(shift[ok]) / spread[ok])) if ok.any() else 0.0


def samples_for_power(
    cases: dict[str, tuple[np.ndarray, np.ndarray]], *, alpha: float, target: float = 0.99
) -> int:
    """The N at which every mistake of ``cases`` is caught w.p. ≥ ``target``.

    For one mistake, N = ⌈((t* + z_target) / maxᵢ |δᵢ|/σᵢ)²⌉; the largest over the mistakes,
    iterated because t* depends on N, clipped to [``MIN_SAMPLES``, ``MAX_SAMPLES``].
    """
    reach = [_reach(shift, spread) for shift, spread in cases.values()]
    if not reach or min(reach) <= 0:
        return MIN_SAMPLES
    p = next(iter(cases.values()))[0].size
    n = MIN_SAMPLES
    for _ in range(5):
        t = z_threshold(alpha, p, n) + Z.inv_cdf(target)
        n = min(max(math.ceil((t / min(reach)) ** 2), MIN_SAMPLES), MAX_SAMPLES)
    return n


def mistake_power(
    cases: dict[str, tuple[np.ndarray, np.ndarray]], n: int, alpha: float
) -> dict[str, float]:
    """The chance the z-test catches each mistake of ``cases`` at N = ``n``."""
    out = {}
    for name, (shift, spread) in cases.items():
        out[name] = power(_reach(shift, spread) * math.sqrt(n), z_threshold(alpha, shift.size, n))
    return out


def detectable_bias(stderr: np.ndarray, threshold: float, level: float = 0.9) -> float:
    """(t* + z_level) · maxᵢ SEᵢ: a bias this large in any one component is caught w.p. ≥ level."""
    return float((threshold + Z.inv_cdf(level)) * np.max(stderr))


@dataclass(frozen=True)
class ZTest:
    """One z-test of the mean of G against a vector."""

    mean: np.ndarray
    stderr: np.ndarray
    z: np.ndarray
    threshold: float

    @property
    def max_abs_z(self) -> float:
        """maxᵢ |zᵢ|."""
        return float(np.abs(self.z).max())

    @property
    def passed(self) -> bool:
        """maxᵢ |zᵢ| ≤ t*: the data are consistent with the hypothesis."""
        return self.max_abs_z <= self.threshold


def z_test(G: np.ndarray, target: np.ndarray, alpha: float) -> ZTest:
    """The lab's z-test of E[ĝ] = target (Bonferroni over the components)."""
    mean, stderr, z = z_scores(G, target)
    return ZTest(mean, stderr, z, z_threshold(alpha, G.shape[1], G.shape[0]))


@dataclass(frozen=True)
class ScaleFit:
    """E[ĝ] ≈ c ∇J fitted per estimate; the residual's z-test."""

    c: float
    stderr: float
    residual: ZTest


def fit_scale(G: np.ndarray, exact: np.ndarray, alpha: float) -> ScaleFit | None:
    """ĉ, SE_c and the residual test (module docstring); None when ∇J or the spread is 0."""
    n = G.shape[0]
    se = G.std(axis=0, ddof=1) / math.sqrt(n)
    keep = se > 0
    weight = np.where(keep, exact / np.where(keep, se, 1.0) ** 2, 0.0)
    norm = float(weight @ exact)
    if norm <= 0:
        return None
    c_n = G @ (weight / norm)
    R = G - c_n[:, None] * exact[None, :]
    mean = R.mean(axis=0)
    # A component that moves only with cₙ (say W and b of a bandit, whose φ = 1) has a residual
    # of float32 round-off alone; its SE is floored at RESIDUAL_FLOOR · SEᵢ so it reads as 0.
    stderr = np.maximum(R.std(axis=0, ddof=1) / math.sqrt(n), RESIDUAL_FLOOR * se)
    z = np.where(stderr > 0, mean / np.where(stderr > 0, stderr, 1.0), 0.0)
    residual = ZTest(mean, stderr, z, z_threshold(alpha, G.shape[1], n))
    return ScaleFit(float(c_n.mean()), float(c_n.std(ddof=1) / math.sqrt(n)), residual)


def cosine(x: np.ndarray, y: np.ndarray) -> float:
    """⟨x, y⟩ / (‖x‖ ‖y‖), NaN when either is 0."""
    nx, ny = float(np.linalg.norm(x)), float(np.linalg.norm(y))
    return float(x @ y / (nx * ny)) if nx > 0 and ny > 0 else float("nan")


def judge(
    G: np.ndarray,
    exact: np.ndarray,
    *,
    alpha: float,
    without_discount_weighting: np.ndarray | None,
) -> tuple[str, str | None, ZTest, ScaleFit | None]:
    """The verdict and diagnosis of estimates G against ∇J = ``exact``.

    In order: ``unbiased`` (the z-test accepts ∇J); ``biased``/``sign`` (it accepts −∇J);
    ``biased``/``missing-discount-weighting`` (it accepts the γᵗ-less expectation, given only
    when γ < 1, and fits better than the scale fit where both fit); then the scale fit, when
    its residual passes: ``scaled``/``scale`` for ĉ > 0 by more than t* SE_c,
    ``biased``/``sign`` for ĉ < 0 by as much; otherwise ``biased``/``other``.

    Returns:
        (verdict, diagnosis, the z-test against ∇J, the scale fit or None).
    """
    test = z_test(G, exact, alpha)
    fit = fit_scale(G, exact, alpha)
    if test.passed:
        return "unbiased", None, test, fit
    if z_test(G, -exact, alpha).passed:
        return "biased", "sign", test, fit
    scaled = fit is not None and fit.residual.passed and fit.stderr > 0
    if without_discount_weighting is not None:
        nodisc = z_test(G, without_discount_weighting, alpha)
        # Both fit only when N cannot tell them apart: take the closer one.
        if nodisc.passed and not (scaled and fit.residual.max_abs_z < nodisc.max_abs_z):
            return "biased", "missing-discount-weighting", test, fit
    if scaled:
        t1 = z_threshold(alpha, 1, G.shape[0])
        if fit.c / fit.stderr > t1:
            return "scaled", "scale", test, fit
        if fit.c / fit.stderr < -t1:
            return "biased", "sign", test, fit
    return "biased", "other", test, fit


__all__ = [
    "MAX_SAMPLES",
    "MIN_SAMPLES",
    "ScaleFit",
    "ZTest",
    "cosine",
    "detectable_bias",
    "fit_scale",
    "judge",
    "mistake_power",
    "mistakes",
    "power",
    "samples_for_power",
    "z_test",
]
