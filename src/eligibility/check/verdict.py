r"""The statistics of ``eligibility check``: from N estimates to a verdict and a diagnosis.

With ḡ the mean of the N estimates and SEᵢ = sᵢ/√N per component, zᵢ = (ḡᵢ − ∇Jᵢ)/SEᵢ;
``unbiased`` ⇔ maxᵢ |zᵢ| ≤ t* (Bonferroni over the p components), unless a component that
every correct estimator leaves at exactly 0 on every batch of the problem moved on some batch
(``excess variance``: the mean is right, the terms of a mistake of mean zero are there,
:func:`moved_from_zero`). Otherwise the scale
c = ⟨ḡ, ∇J⟩/‖∇J‖² is fitted and the named mistakes of the family are held against ḡ
(:func:`_diagnose`); N itself is chosen so that a factor-2 scale, and each mistake a problem is
built to show, are detected with the stated power (:func:`choose_samples`). The run around it
is :mod:`eligibility.check.run`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from eligibility.check.diagnosis import Diagnosis
from eligibility.check.family import Draw, Trial
from eligibility.lab.estimate import z_threshold

PAIRED_TOL = 1e-3
"""Per-batch differences between the user's ĝ and a variant's below this fraction of the
variant's largest value are implementation details (float rounding, a different ε), not
another estimator."""

TIE_Z = 1e-6
"""Fits whose max |z| differ by less than this are equal (the same estimates up to float noise):
the one naming the fewest mistakes is the diagnosis."""

POWER = 0.99
"""The power with which N is chosen to detect a sign error or a factor-2 scale."""

MIN_SAMPLES, MAX_SAMPLES = 200, 8000
"""The range N is chosen in when ``samples`` is not given."""

EXACT_TOL = 1e-6
"""The float resolution of a gradient component, relative to the target's largest component
(at least 1): a standard error below it is taken as this (float32 arithmetic in the user's
code leaves noise of about 1e-8 where the truth is exactly 0). One tolerance for the verdict
and for ``max_abs_z`` alike."""


Verdict = Literal["unbiased", "excess variance", "scaled", "biased", "no gradient", "error"]


@dataclass
class ProblemReport:
    """The finding on one problem (the JSON object of one problem, ``diagnosis`` rendered)."""

    problem: str
    verdict: Verdict
    finding: Diagnosis | None
    """What was found, as values (:class:`~eligibility.check.diagnosis.Diagnosis`)."""
    scale: float | None
    scale_stderr: float | None
    max_abs_z: float | None
    threshold: float | None
    bias_norm: float | None
    noise: float | None
    cosine: float | None
    variance_ratio: float | None
    variance_ratio_value_baseline: float | None
    min_detectable_bias: float | None
    power_scale2: float | None
    samples: int
    episodes: int
    seconds: float
    blind_to: list[str]
    error: str | None = None
    J: float | None = None
    details: dict[str, Any] | None = None
    fix: list[str] | None = None
    """What to change: each named mistake's fix for the form checked (``name: change``)."""
    constant: str | None = None
    """A fitted constant said as its likely cause, with the formula (None: none known)."""

    @property
    def diagnosis(self) -> str | None:
        """The finding as the report says it (``a (note), b × c``), or None."""
        return None if self.finding is None else self.finding.text

    @property
    def misweighted(self) -> bool:
        """The credit audit found terms no correct estimator has (tokens it must not weight)."""
        found = (self.details or {}).get("audit") or {}
        return any(f.get("leak") for f in found.get("findings", []))

    @property
    def names(self) -> tuple[str, ...]:
        """The finding's names (none where nothing was found)."""
        return () if self.finding is None else self.finding.names


def _hold_scales_together(reports: list[ProblemReport], alpha: float) -> None:
    """A step-size error scales every problem's gradient by the same c; a bias does not.

    Among the problems whose E[ĝ] fits c ∇J (``unbiased`` or ``scaled`` by an unnamed
    constant), two fitted scales that differ by more than t* of their combined standard error
    (Bonferroni over the pairs) mean the factor depends on the problem: those ``scaled``
    become ``biased``, diagnosis ``problem-dependent-scale`` (a per-step mean, say, which
    weighs episodes by 1/T). A scale the problem names (a group mean's (G − 1)/G, say) is a
    known constant of that problem and is left as it is, as is one the problem names by
    ``scale`` itself (a sum over its batch's N replies, said with a note).
    """
    unnamed = Diagnosis(("scale",))
    fitted = [
        r
        for r in reports
        if (r.verdict == "unbiased" or (r.verdict, r.finding) == ("scaled", unnamed))
        and r.scale_stderr
    ]
    pairs = [(a, b) for i, a in enumerate(fitted) for b in fitted[i + 1 :]]
    if not pairs or not any(r.verdict == "scaled" for r in fitted):
        return
    t = NormalDist().inv_cdf(1 - alpha / (2 * len(pairs)))
    for a, b in pairs:
        gap = abs(a.scale - b.scale) / math.hypot(a.scale_stderr, b.scale_stderr)  # type: ignore[operator]
        if gap > t:
            for r in fitted:
                if r.verdict == "scaled":
                    r.verdict, r.finding = "biased", Diagnosis(("problem-dependent-scale",))
            return


def told_from_a_rescaling(
    sigma: np.ndarray, exact: np.ndarray, expectation: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The part of a mistake's E[ĝ] that no rescaling of ∇J explains, and its spread.

    r = m − c ∇J with c = Σᵢ mᵢ∇ᵢJ/σᵢ² / Σᵢ ∇ᵢJ²/σᵢ² (least squares, weights 1/σ²); the
    mistake's estimates spread about |c| σ. Unless N resolves r, a mistake nearly parallel to
    ∇J (a dropped γᵗ on the gridworld: 1.9 ∇J, cosine 0.996) fits the scale test as well as
    its own expectation and reads as ``scaled``.
    """
    w = np.where(sigma > 0, 1.0 / np.where(sigma > 0, sigma, 1.0) ** 2, 0.0)
    c = float((w * exact) @ expectation / ((w * exact) @ exact))
    return expectation - c * exact, abs(c) * sigma


def choose_samples(
    sigma: np.ndarray,
    exact: np.ndarray,
    alpha: float,
    mistakes: dict[str, np.ndarray] | None = None,
    *,
    minimum: int = MIN_SAMPLES,
) -> int:
    """The N at which a factor-2 scale error is detected with probability ≥ ``POWER``.

    A 2× estimator has mean 2∇J and standard deviation 2σ, so component i has
    δᵢ = |∇Jᵢ| √N / (2σᵢ) standard errors between its mean and ∇Jᵢ; it is detected (power
    ≥ POWER) once δᵢ ≥ t* + z_POWER for some i. A sign error (δᵢ = 2|∇Jᵢ|√N/σᵢ) is then caught
    too. For each named mistake of ``mistakes`` (its exact E[ĝ]), N is also large enough to
    tell it from a rescaling with the same power (:func:`told_from_a_rescaling`). Clamped to
    [``minimum``, MAX_SAMPLES].
    """
    p = len(exact)
    ok = sigma > 0
    if not ok.any():
        return minimum
    shifts = [(exact, 2 * sigma)]
    shifts += [told_from_a_rescaling(sigma, exact, m) for m in (mistakes or {}).values()]
    reach = [
        float(np.max(np.abs(d[ok]) / spread[ok])) if np.all(spread[ok] > 0) else 0.0
        for d, spread in shifts
    ]
    best = min(reach)
    if best == 0:
        return MAX_SAMPLES
    n = minimum
    for _ in range(3):  # t* depends (weakly) on N
        t = z_threshold(alpha, p, n) + NormalDist().inv_cdf(POWER)
        n = math.ceil((t / best) ** 2)
        n = min(max(n, minimum), MAX_SAMPLES)
    return n


def _power_scale2(sigma: np.ndarray, exact: np.ndarray, n: int, t: float) -> float:
    """P(detect) of a factor-2 scale at N = n: maxᵢ Φ(δᵢ − t*) (the best component alone)."""
    ok = sigma > 0
    if not ok.any():
        return float("nan")
    delta = np.abs(exact[ok]) * math.sqrt(n) / (2 * sigma[ok])
    return float(NormalDist().cdf(float(delta.max()) - t))


def _report(
    trial: Trial,
    verdict: Verdict,
    config: Any,
    n: int,
    t0: float,
    *,
    finding: Diagnosis | None = None,
    error: str | None = None,
) -> ProblemReport:
    return ProblemReport(
        problem=trial.name,
        verdict=verdict,
        finding=finding,
        scale=None,
        scale_stderr=None,
        max_abs_z=None,
        threshold=None,
        bias_norm=None,
        noise=None,
        cosine=None,
        variance_ratio=None,
        variance_ratio_value_baseline=None,
        min_detectable_bias=None,
        power_scale2=None,
        samples=n,
        episodes=config.episodes,
        seconds=time.perf_counter() - t0,
        blind_to=list(trial.blind_to),
        error=error,
        J=trial.J,
    )


def max_abs_z(mean: np.ndarray, stderr: np.ndarray, target: np.ndarray) -> float:
    """maxᵢ |ḡᵢ − targetᵢ| / SEᵢ, the statistic of the verdict and of ``max_abs_z`` alike.

    SEᵢ is floored at ``EXACT_TOL`` (relative): a component with no spread (or float noise
    only) must match within that resolution.
    """
    floor = EXACT_TOL * max(1.0, float(np.abs(target).max()))
    return float(np.max(np.abs(mean - target) / np.maximum(stderr, floor)))


def _passes(mean: np.ndarray, stderr: np.ndarray, target: np.ndarray, t: float) -> bool:
    """max |z| ≤ t* against ``target`` (a component with zero spread must match exactly)."""
    return max_abs_z(mean, stderr, target) <= t


def _verdict(
    trial: Trial, G: np.ndarray, draw: Draw, config: Any, n: int, t0: float
) -> ProblemReport:
    exact = trial.exact
    p = exact.size
    mean = G.mean(axis=0)
    stderr = G.std(axis=0, ddof=1) / math.sqrt(n)
    t = z_threshold(config.alpha, p, n)
    norm2 = float(exact @ exact)
    c_n = G @ exact / norm2  # each estimate's scale: the components' correlations included
    c = float(c_n.mean())
    c_se = float(c_n.std(ddof=1)) / math.sqrt(n)
    finding: Diagnosis | None = None
    if not np.any(G):
        verdict, finding = "no gradient", Diagnosis(("no-gradient",))
    elif _passes(mean, stderr, exact, t):
        verdict, moved = "unbiased", moved_from_zero(trial, G)
        if moved:
            verdict, finding = "excess variance", Diagnosis.of(moved)
    else:
        verdict, finding = _diagnose(trial, G, draw, mean, stderr, c, c_se, t)
    var = float(np.sum(stderr**2) * n)
    ratios = {key: var / float(np.sum(R.var(axis=0, ddof=1))) for key, R in draw.references.items()}
    cos = float(mean @ exact) / (float(np.linalg.norm(mean)) * math.sqrt(norm2) or float("nan"))
    details = {**trial.details, **(draw.explain(mean, stderr, t) if draw.explain else {})}
    if finding and "constant-normaliser" in finding.names and "max_completion_length" in details:
        details["c_times_T"] = c * details["max_completion_length"]  # free of the problem's T
    return ProblemReport(
        problem=trial.name,
        verdict=verdict,  # type: ignore[arg-type]
        finding=finding,
        scale=c,
        scale_stderr=c_se,
        max_abs_z=max_abs_z(mean, stderr, exact),
        threshold=t,
        bias_norm=float(np.linalg.norm(mean - exact)),
        noise=float(np.linalg.norm(stderr)),
        cosine=cos,
        variance_ratio=ratios.get("variance_ratio"),
        variance_ratio_value_baseline=ratios.get("variance_ratio_value_baseline"),
        min_detectable_bias=float((t + NormalDist().inv_cdf(0.9)) * stderr.max()),
        power_scale2=_power_scale2(trial.sigma, exact, n, t),
        samples=n,
        episodes=config.episodes,
        seconds=time.perf_counter() - t0,
        blind_to=list(trial.blind_to),
        J=trial.J,
        details=details or None,
    )


def moved_from_zero(trial: Trial, G: np.ndarray) -> str | None:
    """The mistake whose terms moved a component every correct estimator holds at 0, or None.

    ``trial.held_at_zero`` names, per mistake, components whose every batch's ĝₖ,ᵢ is 0 for a
    correct estimator in exact arithmetic; moved means |ĝₖ,ᵢ| > ``EXACT_TOL`` × max(1, ‖ĝₖ‖∞)
    on some batch k (float noise of the batch's own size passes). Mistakes listed first win.
    """
    floor = EXACT_TOL * np.maximum(1.0, np.abs(G).max(axis=1))
    for name, index in trial.held_at_zero.items():
        if np.any(np.abs(G[:, index]) > floor[:, None]):
            return name
    return None


def same_estimates(G: np.ndarray, V: np.ndarray) -> bool:
    """Are G and V (N, p) the same estimator, batch by batch?

    Every difference within ``PAIRED_TOL`` of V's largest value in its component (float
    rounding, an ε of 10⁻⁶ instead of 10⁻⁴ under a std) counts as none, and so does float
    noise, ``EXACT_TOL`` of V's largest value, in a component that is 0 in exact arithmetic.
    """
    tol = PAIRED_TOL * np.abs(V).max(axis=0) + EXACT_TOL * float(np.abs(V).max()) + 1e-12
    return bool(np.all(np.abs(G - V) <= tol))


BATCH_REL = 0.05
"""How far (relative RMS over all N batches) the user's ĝ may sit from a variant's and still be
that estimator computed in other numerics: bf16 autocast and fused kernels move a batch's
estimate by about 1 %, a different estimator by tens of per cent."""


def _frobenius(x: np.ndarray) -> float:
    """``np.linalg.norm(x)``, √(x·x) of x raveled, without its checks.

    A diagnosis takes it twice for each of up to a thousand variants.
    """
    if x.dtype != np.float64:
        return float(np.linalg.norm(x))
    flat = x.ravel(order="K")
    return math.sqrt(float(flat.dot(flat)))


def relative_residual(G: np.ndarray, V: np.ndarray) -> float:
    """‖G − V‖_F / ‖V‖_F over all N batches and p components (G's distance from V)."""
    return _frobenius(G - V) / max(_frobenius(V), 1e-300)


def _names_over_a_scale(G: np.ndarray, V: np.ndarray, references: list[np.ndarray]) -> bool:
    """Where a rescaling of ∇J fits the user's mean too, does the variant V still name it?

    From the evidence of all N batches, not from one batch's rounding: V names it when the
    user's estimates sit within ``BATCH_REL`` of V's (relative RMS, :func:`relative_residual`)
    and V itself is not a rescaled unbiased reference estimator (c·R, the least-squares c),
    whichever of the family's references, to within four times that distance and
    ``BATCH_REL`` (a padded-width normaliser on a problem where nearly every batch has the full
    width is a constant there). Exact agreement (:func:`same_estimates`) with a V that is no
    exact rescaling of a reference always names it.
    """
    r_user = relative_residual(G, V)
    if r_user > BATCH_REL:
        return False
    for reference in references:
        c = float(np.sum(V * reference) / max(float(np.sum(reference**2)), 1e-300))  # l. sq.
        if same_estimates(G, V) and not same_estimates(V, c * reference):
            continue
        if relative_residual(c * reference, V) <= max(BATCH_REL, 4.0 * r_user):
            return False
    return True


CONSTANT_TOL = 0.01
"""A fitted constant within this of 1 is no constant: the variant itself (or not it at all)."""


def batchwise_constant(G: np.ndarray, V: np.ndarray, references: list[np.ndarray]) -> float | None:
    """c where the user's estimates are c times the variant V's, batch by batch; else None.

    c = ⟨G, V⟩ / ⟨V, V⟩ over all N batches and p components (least squares); it names the
    user's estimator when c > 0, c is told from 1 (:data:`CONSTANT_TOL`) and c·V names it over
    a rescaling of ∇J (:func:`_names_over_a_scale`: within ``BATCH_REL`` of G batch by batch,
    and not itself a rescaled reference). A population standard deviation where V divides by
    the sample one is c = √(G/(G − 1)) on every batch; another ε under the std is a constant
    up to a part in 10⁴.
    """
    denom = float(np.sum(V * V))
    if denom <= 0:
        return None
    c = float(np.sum(G * V)) / denom
    if c <= 0 or abs(c - 1.0) <= CONSTANT_TOL:
        return None
    return c if _names_over_a_scale(G, c * V, references) else None


def _a_known_constant(
    name: str, V: np.ndarray, scales: list[tuple[str, float]], references: list[np.ndarray]
) -> bool:
    """Is the variant ``name`` a constant the problem names times a reference, batch by batch?

    The constants are ``scales``'s, the references unbiased. A group mean that includes the
    sample is (G − 1)/G × RLOO where the reward is all there is; with a KL term left out of
    the reward it scales the reward's part only, and is then a mistake of its own.
    """
    return any(
        same_estimates(V, c * reference)
        for named, c in scales
        if named == name
        for reference in references
    )


def _diagnose(
    trial: Trial,
    G: np.ndarray,
    draw: Draw,
    mean: np.ndarray,
    stderr: np.ndarray,
    c: float,
    c_se: float,
    t: float,
) -> tuple[Verdict, Diagnosis]:
    """The closest fit among the named mistakes and a rescaling, or ``other``.

    A named mistake is held against by its exact E[ĝ] or, for a variant of the family, by its
    mean on the very batches the user's function saw (common random numbers), in the user's
    standard errors either way, so every fit's max |z| is on one scale. A variant is computed
    on those batches, so it names the finding only if it is the user's estimator batch by
    batch (within ``BATCH_REL``, or a constant times it, :func:`batchwise_constant`): another
    estimator whose mean is within noise of a variant's at this N is not that variant, and
    where none is the user's, the finding is ``other`` (no row of the table), never the
    nearest by its mean. Where a rescaling fits
    too, a variant names the finding only if it is the user's estimator batch by batch and
    not itself a rescaled reference batch by batch (:func:`same_estimates`): a mistake whose
    mean is nearly a rescaling at this N (a token mean on short batches) is still named by
    its batches, and one that is a constant on this problem is not.
    A named mistake's exact E[ĝ] and a rescaling may both fit where N cannot tell them apart
    (N is chosen so that it can, see :func:`choose_samples`); the closer fit (the smaller
    max |z|) names it; of fits equal up to float noise (``TIE_Z``), the one with the fewest
    mistakes. A rescaling whose c matches a constant the problem knows (within t* standard
    errors) is named after it. A variant that is batch by batch a constant the problem names
    times a reference (:func:`_a_known_constant`) is that step size. Where no variant is the
    user's estimator batch by batch, or nothing fits, the family's closer variants join them
    once and the diagnosis is made again (:func:`widened`).
    """
    fits: dict[Diagnosis, float] = {
        Diagnosis.of(name): max_abs_z(mean, stderr, m) for name, m in trial.expectations.items()
    }
    scale_fits = False
    SCALE = Diagnosis(("scale",))
    if abs(c) > t * c_se:
        fits[SCALE] = max_abs_z(mean, stderr, c * trial.exact)
        scale_fits = fits[SCALE] <= t
    as_is = any(relative_residual(G, V) <= BATCH_REL for _, V in draw.variants)
    _hold_variants(fits, trial, G, draw, mean, stderr, t, scale_fits, as_is)
    best = _fewest_mistakes(fits)
    wider = widened(draw, G, as_is and best is not None and fits[best] <= t)
    if wider is not None:
        return _diagnose(trial, G, wider, mean, stderr, c, c_se, t)
    if best is None or fits[best] > t:
        return "biased", scaled_variant(draw, G, stderr, t) or Diagnosis(("other",))
    if best != SCALE:
        return "biased", _with_cause(best, trial.scales)
    if c < 0:
        return "biased", Diagnosis(("sign",))
    gaps = [(abs(c - v) / c_se, k, v) for k, v in trial.scales if c_se > 0]
    # equal constants (the off-policy family's ε = 0.2 and its problem's 1/T): the first listed
    gap, named, value = min(gaps, key=lambda g: g[0], default=(math.inf, "scale", c))
    if gap > t:
        return "scaled", SCALE
    if named == "scale":  # a constant of this problem's own (its batch's N): not held across
        return "scaled", Diagnosis(
            SCALE.names, notes=(("scale", f"a constant of this problem: {value:.4g}"),)
        )
    return "scaled", Diagnosis.of(named)


def _hold_variants(
    fits: dict[Diagnosis, float],
    trial: Trial,
    G: np.ndarray,
    draw: Draw,
    mean: np.ndarray,
    stderr: np.ndarray,
    t: float,
    scale_fits: bool,
    as_is: bool,
) -> None:
    """Add to ``fits`` each variant that is the user's estimator batch by batch, by its max |z|.

    A variant within ``BATCH_REL`` of G is held by its mean, unless a step size explains it as
    well (``scale_fits``, and it is a constant the problem names times a reference or names
    nothing over a rescaling). Where no variant is the user's as it is (``as_is`` false), each
    one times its fitted constant (:func:`batchwise_constant`) is held too, one constant a
    name: the smallest that fits.
    """
    references = list(draw.references.values())  # every one unbiased
    constants: dict[str, list[tuple[float, float]]] = {}  # name → [(c, max |z|)]
    for name, V in draw.variants:
        if not as_is:  # no variant is the user's as it is: one times a constant?
            k = batchwise_constant(G, V, references)
            if k is not None:
                constants.setdefault(name, []).append((k, max_abs_z(mean, stderr, k * V.mean(0))))
        if relative_residual(G, V) > BATCH_REL:
            continue  # not the user's estimator batch by batch: its mean alone names nothing
        z = max_abs_z(mean, stderr, V.mean(axis=0))
        if (
            z <= t
            and scale_fits
            and (
                _a_known_constant(name, V, trial.scales, references)
                or not _names_over_a_scale(G, V, references)
            )
        ):
            continue  # a step size explains it as well
        named = Diagnosis.of(name)
        fits[named] = min(fits.get(named, math.inf), z)
    for name, found in constants.items():  # one constant a name
        named, z = _constant_for(name, found, trial.scales, t)
        fits[named] = z


def _constant_for(
    name: str, found: list[tuple[float, float]], scales: list[tuple[str, float]], t: float
) -> tuple[Diagnosis, float]:
    """Variant ``name`` times one constant k: (``V × k``, its max |z|).

    Variants of one name may differ from each other by a constant of their own, so the
    user's estimates can be k·V for several k (TRL's undivided accumulation of GRPO's loss is
    2 × one variant of ``std-normalised, length-normalised`` and 1.75 × another). Of those
    that fit (max |z| ≤ t*; all where none does), a k the problem names (``scales``: M
    micro-batches' undivided 2) with the fewest names, then the smallest |ln k|.
    """
    fit = [kz for kz in found if kz[1] <= t] or found

    def key(kz: tuple[float, float]) -> tuple[bool, int, float]:
        cause = _cause_of(kz[0], scales)
        return cause is None, len(cause or ()), abs(math.log(kz[0]))

    k, z = min(fit, key=key)
    return Diagnosis.of(name, times=k), z


def _cause_of(k: float, scales: list[tuple[str, float]]) -> tuple[str, ...] | None:
    """The names of the constant of ``scales`` that k is, or None where it is none of them.

    Within ``PAIRED_TOL`` (a batch-by-batch constant is exact); of equal constants, the one
    with the fewest names.
    """
    causes = [tuple(label.split(", ")) for label, v in scales if abs(k / v - 1.0) <= PAIRED_TOL]
    return min(causes, key=len, default=None)


def _with_cause(found: Diagnosis, scales: list[tuple[str, float]]) -> Diagnosis:
    """``V × k`` with the names of the constant k is joined to V's (``accumulation-scaled``).

    The names joined are a cause read from k's value alone (``by_value``): the credit audit,
    which reads the weights' structure, keeps them where it shows them
    (:func:`~eligibility.check.audit.judge.judge`).
    """
    cause = None if found.times is None else _cause_of(found.times, scales)
    if cause is None:
        return found
    joined = tuple(n for n in dict.fromkeys(cause) if n not in found.names)
    return dataclasses.replace(found, names=(*found.names, *joined), by_value=joined)


def _fewest_mistakes(fits: dict[Diagnosis, float]) -> Diagnosis | None:
    """The best fit: of fits equal up to ``TIE_Z`` to the lowest max |z|, the fewest mistakes.

    Equal fits (a prompt term that cancels batch by batch, say): the fewest mistakes name it,
    then no fitted constant, then the lower max |z|; None where there is no fit at all.
    """
    low = min(fits.values(), default=math.inf)
    return min(
        (k for k in fits if fits[k] <= low + TIE_Z),
        key=lambda k: (len(k.names), k.times is not None, fits[k]),
        default=None,
    )


def widened(draw: Draw, G: np.ndarray, settled: bool) -> Draw | None:
    """The draw with the family's closer variants beside its own, or None: the one widening.

    ``draw.closer(G)`` is asked once, where the diagnosis is not ``settled`` (a variant is
    the user's estimator batch by batch, within ``BATCH_REL``, and something fits within
    t*): a family too wide to compute whole computes the variants nearest the user's
    estimates, one whose choices take constants sweeps them around the closest variant.
    None where there is no ``closer``, the diagnosis is settled or it adds nothing; the
    widened draw has no ``closer`` (it is not asked again).
    """
    if draw.closer is None or settled:
        return None
    more = draw.closer(G)
    if not more:
        return None
    return dataclasses.replace(draw, variants=[*draw.variants, *more], closer=None)


def scaled_variant(draw: Draw, G: np.ndarray, stderr: np.ndarray, t: float) -> Diagnosis | None:
    """A named variant times a constant, c·V, that is the user's estimator (``V × c``), or None.

    Tried only where nothing fits as it is (a named mistake or a rescaling of ∇J would have
    been named): c = ⟨ḡ, v̄⟩/⟨v̄, v̄⟩ weighted by the user's standard errors, and the variant
    whose c·v̄ fits the user's mean ḡ within t* (the closest) names the finding with its
    constant (TRL's ``cispo`` with ``epsilon_high = 0.2`` is 0.2 × ``dapo``) — only where c·V
    is also the user's estimates G batch by batch (within ``BATCH_REL``): a mean within noise
    of c·v̄ alone is another estimator's as well.
    """
    mean = G.mean(axis=0)
    spread = stderr > 0  # a component without spread weighs nothing here; max |z| holds it
    w = np.where(spread, 1.0 / np.where(spread, stderr, 1.0) ** 2, 0.0)
    found: tuple[float, Diagnosis] | None = None
    for name, V in draw.variants:
        v = V.mean(axis=0)
        denom = float(np.sum(w * v * v))
        if denom <= 0:
            continue
        c = float(np.sum(w * mean * v)) / denom
        z = max_abs_z(mean, stderr, c * v)
        if z > t or c <= 0 or relative_residual(G, c * V) > BATCH_REL:
            continue
        if found is None or z < found[0]:
            found = (z, Diagnosis.of(name, times=c))
    return None if found is None else found[1]


__all__ = [
    "BATCH_REL",
    "EXACT_TOL",
    "MAX_SAMPLES",
    "MIN_SAMPLES",
    "PAIRED_TOL",
    "POWER",
    "ProblemReport",
    "Verdict",
    "batchwise_constant",
    "choose_samples",
    "max_abs_z",
    "moved_from_zero",
    "relative_residual",
    "same_estimates",
    "scaled_variant",
    "told_from_a_rescaling",
    "widened",
]
