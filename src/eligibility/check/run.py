r"""Hold a user's REINFORCE estimator against the exact policy gradient, and name the bug.

For each problem, at a fixed θ, the user's function is called N times; each call gives one
estimate ĝₙ = −∇θ loss. With ḡ their mean and SEᵢ = sᵢ/√N per component,

    zᵢ = (ḡᵢ − ∇Jᵢ) / SEᵢ,   unbiased  ⇔  maxᵢ |zᵢ| ≤ t*,

t* the two-sided Student-t quantile at α / (2p) (Bonferroni over the p components): an
unbiased estimator is flagged with probability ≤ α per problem. When it is flagged, the scale
c = ⟨ḡ, ∇J⟩ / ‖∇J‖² is fitted and the residual ḡ − c ∇J tested the same way: a residual
within noise means E[ĝ] = c ∇J (``scaled`` for c > 0, the diagnosis ``sign`` for c < 0);
otherwise ḡ is held against the exact expectation of each known mistake (``MISTAKES``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from eligibility.check import user
from eligibility.check.problems import PROBLEMS, CheckProblem, reference_estimates
from eligibility.lab.estimate import strict_json, z_scores, z_threshold

POWER = 0.99
"""The power with which N is chosen to detect a sign error or a factor-2 scale."""

MIN_SAMPLES, MAX_SAMPLES = 200, 8000
"""The range N is chosen in when ``samples`` is not given."""


@dataclass(frozen=True)
class CheckConfig:
    """What ``eligibility check`` runs, and how it reports."""

    problem: str = field(
        default="all", metadata={"help": f"an exact problem ({', '.join(PROBLEMS)}) or all"}
    )
    samples: int | None = field(
        default=None,
        metadata={
            "help": "N, calls of your function per problem (default: chosen per problem so "
            "that a sign error or a 2× scale is caught with 99%% power)"
        },
    )
    episodes: int = field(
        default=8,
        metadata={
            "help": "E, episodes handed to each call",
            "flag": "--episodes-per-call",
            "metavar": "E",
            "deprecated": {"--episodes": ...},
        },
    )
    seed: int = field(default=0, metadata={"help": "seeds the episodes (and torch, update form)"})
    policy: Literal["logits", "probs"] = field(
        default="logits",
        metadata={"help": "policy(obs) gives logits, or probabilities (rows summing to 1)"},
    )
    form: Literal["loss", "update"] = field(
        default="loss",
        metadata={"help": "loss: fn(policy, episodes, gamma); update: fn(policy, env, gamma)"},
    )
    objective: bool = field(
        default=False, metadata={"help": "the function returns an objective to maximise"}
    )
    alpha: float = field(
        default=1e-3,
        metadata={"help": "false-alarm rate per problem of the z-test (Bonferroni)"},
    )
    format: Literal["text", "json"] = field(
        default="text", metadata={"help": "a table for a person, or JSON for scripts"}
    )

    def __post_init__(self) -> None:
        if self.problem != "all" and self.problem not in PROBLEMS:
            raise ValueError(
                f"unknown problem {self.problem!r}; choose one of {', '.join(PROBLEMS)} or all"
            )
        if self.samples is not None and self.samples < 30:
            raise ValueError(f"--samples must be at least 30 for the z-test, got {self.samples}")
        if self.episodes < 1:
            raise ValueError(f"--episodes-per-call must be at least 1, got {self.episodes}")
        if not (0.0 < self.alpha < 0.5):
            raise ValueError(f"--alpha must be in (0, 0.5), got {self.alpha}")
        if self.seed < 0:
            raise ValueError(f"--seed must be >= 0, got {self.seed}")


@dataclass
class ProblemReport:
    """The finding on one problem (the JSON object of one problem)."""

    problem: str
    verdict: Literal["unbiased", "scaled", "biased", "no gradient", "error"]
    diagnosis: str | None
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


@dataclass
class CheckReport:
    """Every problem's finding, and the settings that produced them."""

    problems: list[ProblemReport]
    alpha: float
    samples: int | None
    episodes: int
    form: str
    policy: str
    objective: bool
    seed: int

    @property
    def unbiased(self) -> bool:
        """True when every problem's verdict is ``unbiased``."""
        return all(p.verdict == "unbiased" for p in self.problems)

    def to_json(self) -> dict[str, Any]:
        """Strict-JSON-ready dict (non-finite numbers become None)."""
        d = asdict(self)
        d["unbiased"] = self.unbiased
        return strict_json(d)


def check(
    fn: Callable[..., Any] | str, config: CheckConfig | None = None, **options: Any
) -> CheckReport:
    """Hold ``fn``, the user's REINFORCE, against the exact policy gradient on each problem.

    Args:
        fn: the function (or ``"path/file.py:name"``); see :mod:`eligibility.check.user` for
            the contract.
        config: the settings; or give them as keyword ``options`` (the fields of
            :class:`CheckConfig`).
        **options: fields of :class:`CheckConfig`.

    Returns:
        The :class:`CheckReport`.

    Raises:
        ValueError: bad settings, a function that cannot be loaded or has the wrong signature,
            or one that returns something other than a finite scalar tensor.
    """
    import torch

    if config is None:
        config = CheckConfig(**options)
    elif options:
        raise ValueError("give either config= or keyword options, not both")
    if isinstance(fn, str):
        fn = user.load_function(fn)
    user.check_signature(fn, config.form)
    names = list(PROBLEMS) if config.problem == "all" else [config.problem]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads only add overhead
    try:
        reports = [
            _check_problem(fn, PROBLEMS[name](), config, seed=config.seed + i)
            for i, name in enumerate(names)
        ]
    finally:
        torch.set_num_threads(threads)
    _hold_scales_together(reports, config.alpha)
    return CheckReport(
        problems=reports,
        alpha=config.alpha,
        samples=config.samples,
        episodes=config.episodes,
        form=config.form,
        policy=config.policy,
        objective=config.objective,
        seed=config.seed,
    )


def _hold_scales_together(reports: list[ProblemReport], alpha: float) -> None:
    """A step-size error scales every problem's gradient by the same c; a bias does not.

    Among the problems whose E[ĝ] fits c ∇J (``unbiased`` or ``scaled``), two fitted scales
    that differ by more than t* of their combined standard error (Bonferroni over the pairs)
    mean the factor depends on the problem: those ``scaled`` become ``biased``, diagnosis
    ``problem-dependent-scale`` (a per-step mean, say, which weighs episodes by 1/T).
    """
    fitted = [r for r in reports if r.verdict in ("unbiased", "scaled") and r.scale_stderr]
    pairs = [(a, b) for i, a in enumerate(fitted) for b in fitted[i + 1 :]]
    if not pairs or not any(r.verdict == "scaled" for r in fitted):
        return
    t = NormalDist().inv_cdf(1 - alpha / (2 * len(pairs)))
    for a, b in pairs:
        gap = abs(a.scale - b.scale) / math.hypot(a.scale_stderr, b.scale_stderr)  # type: ignore[operator]
        if gap > t:
            for r in fitted:
                if r.verdict == "scaled":
                    r.verdict, r.diagnosis = "biased", "problem-dependent-scale"
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
) -> int:
    """The N at which a factor-2 scale error is detected with probability ≥ ``POWER``.

    A 2× estimator has mean 2∇J and standard deviation 2σ, so component i has
    δᵢ = |∇Jᵢ| √N / (2σᵢ) standard errors between its mean and ∇Jᵢ; it is detected (power
    ≥ POWER) once δᵢ ≥ t* + z_POWER for some i. A sign error (δᵢ = 2|∇Jᵢ|√N/σᵢ) is then caught
    too. For each named mistake of ``mistakes`` (its exact E[ĝ]), N is also large enough to
    tell it from a rescaling with the same power (:func:`told_from_a_rescaling`). Clamped to
    [MIN_SAMPLES, MAX_SAMPLES].
    """
    p = len(exact)
    ok = sigma > 0
    if not ok.any():
        return MIN_SAMPLES
    shifts = [(exact, 2 * sigma)]
    shifts += [told_from_a_rescaling(sigma, exact, m) for m in (mistakes or {}).values()]
    reach = [
        float(np.max(np.abs(d[ok]) / spread[ok])) if np.all(spread[ok] > 0) else 0.0
        for d, spread in shifts
    ]
    best = min(reach)
    if best == 0:
        return MAX_SAMPLES
    n = MIN_SAMPLES
    for _ in range(3):  # t* depends (weakly) on N
        t = z_threshold(alpha, p, n) + NormalDist().inv_cdf(POWER)
        n = math.ceil((t / best) ** 2)
        n = min(max(n, MIN_SAMPLES), MAX_SAMPLES)
    return n


def _power_scale2(sigma: np.ndarray, exact: np.ndarray, n: int, t: float) -> float:
    """P(detect) of a factor-2 scale at N = n: maxᵢ Φ(δᵢ − t*) (the best component alone)."""
    ok = sigma > 0
    if not ok.any():
        return float("nan")
    delta = np.abs(exact[ok]) * math.sqrt(n) / (2 * sigma[ok])
    return float(NormalDist().cdf(float(delta.max()) - t))


def _check_problem(
    fn: Callable[..., Any], problem: CheckProblem, config: CheckConfig, *, seed: int
) -> ProblemReport:
    import torch

    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    E = config.episodes
    pilot = reference_estimates(problem, problem.sample(400 * E, rng), E)
    sigma = pilot.std(axis=0, ddof=1)
    n = config.samples or choose_samples(sigma, problem.exact, config.alpha, problem.mistakes)
    sign = 1.0 if config.objective else -1.0
    policy, params = user.make_policy(problem.W, problem.b, config.policy)
    torch.manual_seed(seed)
    rows: list[np.ndarray | None] = []
    G_ref = G_value = None
    try:
        if config.form == "loss":
            eps = problem.sample(n * E, rng)
            G_ref = reference_estimates(problem, eps, E)
            G_value = reference_estimates(problem, eps, E, baseline=True)
            episodes = _as_episodes(problem, eps)
            for k in range(n):
                user.reset_policy(params, problem.W, problem.b)
                batch = episodes[k * E : (k + 1) * E]
                rows.append(user.call(fn, (policy, batch, problem.gamma), params, sign))
        else:
            env = problem.make_env()
            env.reset(seed=seed)
            try:
                for _ in range(n):
                    user.reset_policy(params, problem.W, problem.b)
                    rows.append(user.call(fn, (policy, env, problem.gamma), params, sign))
            finally:
                env.close()
    except user.UserError as err:
        return _report(problem, "error", config, n, t0, error=err.text)
    if any(r is None for r in rows):
        return _report(problem, "no gradient", config, n, t0, diagnosis="no-gradient")
    G = np.stack(rows)
    return _verdict(problem, G, G_ref, G_value, sigma, config, n, t0)


def _as_episodes(problem: CheckProblem, eps: Any) -> list[user.Episode]:
    phi = problem.mdp.phi
    out = []
    for m, length in enumerate(eps.lengths):
        s = eps.states[m, :length]
        out.append(user.to_tensors(phi[s], eps.actions[m, :length], eps.rewards[m, :length]))
    return out


def _report(
    problem: CheckProblem,
    verdict: Any,
    config: CheckConfig,
    n: int,
    t0: float,
    *,
    diagnosis: str | None = None,
    error: str | None = None,
) -> ProblemReport:
    return ProblemReport(
        problem=problem.name,
        verdict=verdict,
        diagnosis=diagnosis,
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
        blind_to=list(problem.blind_to),
        error=error,
    )


def _max_abs_z(mean: np.ndarray, stderr: np.ndarray, target: np.ndarray) -> float:
    """maxᵢ |ḡᵢ − targetᵢ| / SEᵢ (a component with zero spread must match exactly)."""
    diff = mean - target
    tol = 1e-6 * max(1.0, float(np.abs(target).max()))
    z = np.where(stderr > 0, diff / np.where(stderr > 0, stderr, 1.0), 0.0)
    z = np.where((stderr == 0) & (np.abs(diff) > tol), np.inf, z)
    return float(np.max(np.abs(z)))


def _passes(mean: np.ndarray, stderr: np.ndarray, target: np.ndarray, t: float) -> bool:
    """max |z| ≤ t* against ``target`` (a component with zero spread must match exactly)."""
    return _max_abs_z(mean, stderr, target) <= t


def _verdict(
    problem: CheckProblem,
    G: np.ndarray,
    G_ref: np.ndarray | None,
    G_value: np.ndarray | None,
    sigma_ref: np.ndarray,
    config: CheckConfig,
    n: int,
    t0: float,
) -> ProblemReport:
    exact = problem.exact
    p = exact.size
    mean, stderr, z = z_scores(G, exact)
    t = z_threshold(config.alpha, p, n)
    norm2 = float(exact @ exact)
    c_n = G @ exact / norm2  # each estimate's scale: the components' correlations included
    c = float(c_n.mean())
    c_se = float(c_n.std(ddof=1)) / math.sqrt(n)
    diagnosis: str | None = None
    if not np.any(G):
        verdict, diagnosis = "no gradient", "no-gradient"
    elif _passes(mean, stderr, exact, t):
        verdict = "unbiased"
    else:
        # A named mistake's exact E[ĝ] and a rescaling may both fit where N cannot tell them
        # apart (N is chosen so that it can, see choose_samples); the closer fit names it.
        fits = {name: _max_abs_z(mean, stderr, m) for name, m in problem.mistakes.items()}
        if abs(c) > t * c_se:
            fits["scale"] = _max_abs_z(mean, stderr, c * exact)
        best = min(fits, key=fits.__getitem__, default=None)
        if best is None or fits[best] > t:
            verdict, diagnosis = "biased", "other"
        elif best != "scale":
            verdict, diagnosis = "biased", best
        else:
            verdict, diagnosis = ("scaled", "scale") if c > 0 else ("biased", "sign")
    var = float(np.sum(stderr**2) * n)
    ratio = ratio_value = None
    if G_ref is not None and G_value is not None:
        ratio = var / float(np.sum(G_ref.var(axis=0, ddof=1)))
        ratio_value = var / float(np.sum(G_value.var(axis=0, ddof=1)))
    cos = float(mean @ exact) / (float(np.linalg.norm(mean)) * math.sqrt(norm2) or float("nan"))
    return ProblemReport(
        problem=problem.name,
        verdict=verdict,  # type: ignore[arg-type]
        diagnosis=diagnosis,
        scale=c,
        scale_stderr=c_se,
        max_abs_z=float(np.max(np.abs(z))),
        threshold=t,
        bias_norm=float(np.linalg.norm(mean - exact)),
        noise=float(np.linalg.norm(stderr)),
        cosine=cos,
        variance_ratio=ratio,
        variance_ratio_value_baseline=ratio_value,
        min_detectable_bias=float((t + NormalDist().inv_cdf(0.9)) * stderr.max()),
        power_scale2=_power_scale2(sigma_ref, exact, n, t),
        samples=n,
        episodes=config.episodes,
        seconds=time.perf_counter() - t0,
        blind_to=list(problem.blind_to),
    )


__all__ = [
    "CheckConfig",
    "CheckReport",
    "ProblemReport",
    "check",
    "choose_samples",
    "told_from_a_rescaling",
]
