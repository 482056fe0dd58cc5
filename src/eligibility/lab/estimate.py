r"""Hold the trainer's REINFORCE estimator against the exact gradient.

For one problem, the lab plays N independent batches of E episodes with the trainer's own
collector (:func:`eligibility.reinforce.estimator.collect_episodes`) and policy (the NumPy
``MLPPolicy`` with ``hidden=()``, θ set exactly), and turns every batch into one estimate ĝₙ
per baseline with the trainer's own :func:`~eligibility.reinforce.estimator.policy_gradient`
(its reward-to-go, its baselines, its eligibilities). Every baseline sees the same batches
(common random numbers), so their variances are compared on the same episodes. Then, per
component i of θ:

    ḡᵢ = (1/N) Σₙ ĝₙᵢ,   SEᵢ = sᵢ / √N,   zᵢ = (ḡᵢ − ∇ᵢJ) / SEᵢ

and, over the whole vector, the total variance tr Cov(ĝ) = Σᵢ sᵢ² and its ratio to ``none``.

The test of unbiasedness: H₀ "E[ĝ] = ∇J" is rejected when max_i |zᵢ| > t*, with t* the
two-sided Student-t quantile at level α/p for p components (Bonferroni), so that one case
raises a false alarm with probability at most α (family-wise; α = 10⁻³ by default). The
estimates ĝₙ are independent, except that ``moving-average`` carries b̄ from batch to batch;
each ĝₙ − ∇J is then a martingale difference (b̄ is fixed before batch n is drawn), which
keeps the sample variance, and hence the z-score, sound.

Discount: with γ < 1 the estimates use ``discount_weighting=True`` (the γᵗ factor), which is
unbiased for J = E[Σ_t γᵗ r_t]; the common practice without it (w_t = 1) is run as an extra,
biased case and reported with its measured bias. ``batch-mean`` (the mean includes the episode
itself) is biased by construction and reported as such.

The ``value`` baseline is the exact V^π of the problem, seen through the features (an oracle:
:func:`eligibility.lab.problems.observation_values`). It is a function of the observation
only, so it is unbiased; it shows the variance a perfectly fitted value baseline would buy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from eligibility.backends import Array, Gradient, Mask
from eligibility.distributions import categorical
from eligibility.lab.problems import Problem

BIASED = {"batch-mean": "the batch mean includes the episode itself"}
"""Baselines biased by construction, and why."""

NO_DISCOUNT_WEIGHTING = "none (w_t = 1)"
"""The extra case run when γ < 1: baseline ``none`` without the γᵗ factor (biased)."""


def t_quantile(p: float, df: int) -> float:
    """The Student-t quantile t_p(ν) by the Cornish–Fisher expansion around the normal's.

    t ≈ z + (z³ + z)/(4ν) + (5z⁵ + 16z³ + 3z)/(96ν²) + (3z⁷ + 19z⁵ + 17z³ − 15z)/(384ν³),
    z = Φ⁻¹(p) (Abramowitz & Stegun 26.7.5); within 10⁻³ of the exact quantile for ν ≥ 30
    at the tail levels the lab uses.
    """
    z = NormalDist().inv_cdf(p)
    v = float(df)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
    )


def z_threshold(alpha: float, n_components: int, n_samples: int) -> float:
    """t* with P(max_i |zᵢ| > t*) ≤ α under H₀: two-sided, Bonferroni over the components."""
    return t_quantile(1.0 - alpha / (2.0 * n_components), n_samples - 1)


def z_scores(G: np.ndarray, exact: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ḡ = mean of the rows of G (N, p), SE = s/√N (s with N − 1), z = (ḡ − exact) / SE.

    A component that never varies (say, the weights of a state no episode visits) is exactly
    right or exactly wrong; its z-score is 0 or ∞ accordingly.
    """
    n = G.shape[0]
    mean = G.mean(axis=0)
    stderr = G.std(axis=0, ddof=1) / math.sqrt(n)
    diff = mean - exact
    tol = 1e-9 * max(1.0, float(np.abs(exact).max()))
    z = np.where(stderr > 0, diff / np.where(stderr > 0, stderr, 1.0), 0.0)
    z = np.where((stderr == 0) & (np.abs(diff) > tol), np.inf, z)
    return mean, stderr, z


class ProbsPolicy:
    """A categorical policy in the probs parametrisation: π = w / Σw, the same in every state.

    The trainer's policies output logits; this one lets the trainer's ``policy_gradient``
    (returns, baselines, ψ weights) run on the probs parametrisation. It has the one method
    the estimator calls, ``grad_log_prob``, whose eligibility is the core's
    ``categorical.score_probs``: eᵢ = δᵢₐ / w_a − 1 / Σw.
    """

    def __init__(self, probs: np.ndarray) -> None:
        self.params = {"probs": np.array(probs, dtype=np.float64)}

    def act(self, s: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Draw a ~ π, one per row of s (inverse CDF)."""
        cdf = np.cumsum(categorical.normalise(self.params["probs"]))
        u = rng.random(s.shape[0]) * cdf[-1]
        return np.minimum(np.searchsorted(cdf, u, side="right"), cdf.shape[0] - 1)

    def grad_log_prob(
        self, s: Array, a: Array, psi: Array, *, entropy_coef: float = 0.0, mask: Mask = None
    ) -> Gradient:
        """Σᵢ ψᵢ e(aᵢ), e the probs eligibility (no entropy bonus: the lab never asks for one)."""
        if entropy_coef:
            raise ValueError("ProbsPolicy has no entropy bonus")
        w = self.params["probs"]
        e = categorical.score_probs(w[None, :], np.asarray(a, dtype=np.int64))
        return {"probs": psi @ e}, {}


def make_policy(problem: Problem, rng: np.random.Generator) -> Any:
    """The trainer's policy for the problem's env with θ set exactly (or a :class:`ProbsPolicy`)."""
    from eligibility.backends.numpy import MLPPolicy
    from eligibility.reinforce.spaces import head_for_space, obs_dim_for_space

    params = problem.to_policy(problem.theta)
    if problem.policy == "probs":
        return ProbsPolicy(params["probs"])
    env = problem.make_env()
    policy = MLPPolicy(
        obs_dim_for_space(env.observation_space),
        head_for_space(env.action_space),
        hidden=(),
        rng=rng,
    )
    env.close()
    policy.params = params  # the trainer's setter checks the names and shapes
    return policy


def collect_batches(
    problem: Problem, n_batches: int, episodes: int, *, num_envs: int, seed: int
) -> list[Any]:
    """N batches of E complete episodes each, by the trainer's collector, with θ fixed."""
    from gymnasium.vector import SyncVectorEnv

    from eligibility.reinforce.estimator import collect_episodes

    rng = np.random.default_rng(seed)
    policy = make_policy(problem, rng)
    envs = SyncVectorEnv([problem.make_env for _ in range(min(num_envs, episodes))])
    to_env = getattr(getattr(policy, "head", None), "to_env", None)

    def act(s: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        return policy.act(s, rng)

    try:
        return [
            collect_episodes(envs, act, episodes, seed=seed if n == 0 else None, to_env=to_env)
            for n in range(n_batches)
        ]
    finally:
        envs.close()


def estimates(
    problem: Problem,
    batches: list[Any],
    baseline: str,
    *,
    discount_weighting: bool,
    policy: Any = None,
) -> np.ndarray:
    """ĝₙ for every batch, through the trainer's ``policy_gradient``, as rows of (N, p)."""
    from eligibility.reinforce.estimator import policy_gradient

    if policy is None:
        policy = make_policy(problem, np.random.default_rng(0))
    state: dict[str, np.ndarray] | None = None
    rows = []
    for batch in batches:
        values = None
        if baseline == "value":
            E, T, d = batch.obs.shape
            values = problem.value(batch.obs.reshape(E * T, d)).reshape(E, T)
        grads, info = policy_gradient(
            policy,
            batch,
            gamma=problem.gamma,
            baseline=baseline,
            baseline_state=state,
            values=values,
            discount_weighting=discount_weighting,
        )
        state = info["baseline_state"]
        rows.append(problem.flatten(problem.from_policy(grads)))
    return np.stack(rows)


@dataclass
class Case:
    """One problem × baseline: the estimates' summary against the exact gradient.

    ``biased`` says whether the estimator is biased *by construction* (then a failed z-test is
    the expected outcome, and ``bias`` = ‖ḡ − ∇J‖ is its measured size, to be read against
    ``bias_noise`` = √(Σᵢ SEᵢ²), the size that noise alone gives it); ``passed`` whether the
    z-test of H₀ "E[ĝ] = ∇J" accepts at the family-wise level α (``threshold`` t*).
    """

    problem: str
    baseline: str
    discount_weighting: bool
    biased: bool
    why_biased: str
    labels: list[str]
    exact: np.ndarray
    mean: np.ndarray
    stderr: np.ndarray
    z: np.ndarray
    threshold: float
    variance_ratio: float
    n_samples: int
    episodes: int
    samples: np.ndarray = field(repr=False)

    @property
    def max_abs_z(self) -> float:
        """maxᵢ |zᵢ|, the statistic of the z-test."""
        return float(np.abs(self.z).max())

    @property
    def passed(self) -> bool:
        """Whether the z-test accepts E[ĝ] = ∇J: maxᵢ |zᵢ| ≤ t*."""
        return bool(self.max_abs_z <= self.threshold)

    @property
    def variance(self) -> float:
        """tr Cov(ĝ) = Σᵢ sᵢ² = N Σᵢ SEᵢ²."""
        return float(np.sum(self.stderr**2) * self.n_samples)

    @property
    def bias(self) -> float:
        """‖ḡ − ∇J‖, the measured bias."""
        return float(np.linalg.norm(self.mean - self.exact))

    @property
    def bias_noise(self) -> float:
        """√(Σᵢ SEᵢ²), the size of ‖ḡ − ∇J‖ that noise alone gives."""
        return float(np.sqrt(np.sum(self.stderr**2)))

    @property
    def relative_bias(self) -> float:
        """‖ḡ − ∇J‖ / ‖∇J‖ (NaN when ∇J = 0)."""
        norm = float(np.linalg.norm(self.exact))
        return self.bias / norm if norm > 0 else float("nan")

    def to_json(self) -> dict[str, Any]:
        """The case as plain JSON types (the estimates left out; ±∞ and NaN become null)."""
        return strict_json(
            {
                "problem": self.problem,
                "baseline": self.baseline,
                "discount_weighting": self.discount_weighting,
                "biased": self.biased,
                "why_biased": self.why_biased,
                "labels": self.labels,
                "exact": self.exact.tolist(),
                "mean": self.mean.tolist(),
                "stderr": self.stderr.tolist(),
                "z": self.z.tolist(),
                "max_abs_z": self.max_abs_z,
                "z_threshold": self.threshold,
                "passed": self.passed,
                "variance": self.variance,
                "variance_ratio": self.variance_ratio,
                "bias": self.bias,
                "bias_noise": self.bias_noise,
                "relative_bias": self.relative_bias,
                "samples": self.n_samples,
                "episodes": self.episodes,
            }
        )


def strict_json(x: Any) -> Any:
    """``x`` with every non-finite float replaced by None (strict JSON has no NaN or ∞)."""
    if isinstance(x, dict):
        return {k: strict_json(v) for k, v in x.items()}
    if isinstance(x, list):
        return [strict_json(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def summarise(
    problem: Problem,
    baseline: str,
    G: np.ndarray,
    *,
    discount_weighting: bool,
    biased: bool,
    why_biased: str = "",
    alpha: float = 1e-3,
    variance_none: float | None = None,
    episodes: int = 0,
) -> Case:
    """Mean, z-scores, total variance and bias of the estimates G (N, p) against ∇J."""
    n, p = G.shape
    if n < 30:
        raise ValueError(f"samples must be at least 30 for the z-test, got {n}")
    exact = problem.flatten(problem.exact)
    mean, stderr, z = z_scores(G, exact)
    variance = float(np.sum(stderr**2) * n)
    return Case(
        problem=problem.name,
        baseline=baseline,
        discount_weighting=discount_weighting,
        biased=biased,
        why_biased=why_biased,
        labels=problem.labels(),
        exact=exact,
        mean=mean,
        stderr=stderr,
        z=z,
        threshold=z_threshold(alpha, p, n),
        variance_ratio=variance / variance_none if variance_none else float("nan"),
        n_samples=n,
        episodes=episodes,
        samples=G,
    )


def summarise_all(
    problem: Problem,
    runs: Iterable[tuple[str, np.ndarray, bool, str]],
    *,
    alpha: float,
    episodes: int,
) -> list[Case]:
    """:func:`summarise` each (label, G, discount_weighting, why_biased), ``none`` first.

    The ``none`` case's total variance is the denominator of every later case's variance ratio
    (its own is 1); ``why_biased`` empty means the case is unbiased.
    """
    cases: list[Case] = []
    variance_none: float | None = None
    for label, G, dw, why in runs:
        case = summarise(
            problem,
            label,
            G,
            discount_weighting=dw,
            biased=bool(why),
            why_biased=why,
            alpha=alpha,
            variance_none=variance_none,
            episodes=episodes,
        )
        if label == "none":
            variance_none = case.variance
            case.variance_ratio = 1.0
        cases.append(case)
    return cases


def run_problem(
    problem: Problem,
    *,
    samples: int = 200,
    episodes: int = 16,
    num_envs: int = 8,
    seed: int = 0,
    alpha: float = 1e-3,
    baselines: tuple[str, ...] | None = None,
) -> list[Case]:
    """Every baseline of the trainer (and, for γ < 1, the unweighted variant) on one problem.

    Args:
        problem: the exact problem.
        samples: N, the number of independent estimates.
        episodes: E, the episodes in each estimate's batch (the trainer's episodes_per_batch).
        num_envs: sub-environments of the vector env.
        seed: seeds the environments and the policy's sampling.
        alpha: the family-wise false-alarm rate of each case's z-test.
        baselines: which of the trainer's ``BASELINES`` to run (all by default).

    Returns:
        One :class:`Case` per baseline, ``none`` first.

    Raises:
        ValueError: fewer than 30 samples, fewer than 2 episodes, or an unknown baseline.
    """
    from eligibility.reinforce.estimator import BASELINES

    if samples < 30:
        raise ValueError(f"samples must be at least 30 for the z-test, got {samples}")
    if episodes < 2:
        raise ValueError(f"episodes must be at least 2 (rloo leaves one out), got {episodes}")
    chosen = tuple(BASELINES) if baselines is None else tuple(baselines)
    unknown = [b for b in chosen if b not in BASELINES]
    if unknown:
        raise ValueError(f"unknown baseline(s) {unknown}; choose from {', '.join(BASELINES)}")
    if "none" in chosen:
        chosen = ("none", *(b for b in chosen if b != "none"))
    weighted = problem.gamma < 1.0
    batches = collect_batches(problem, samples, episodes, num_envs=num_envs, seed=seed)
    policy = make_policy(problem, np.random.default_rng(seed))
    runs: list[tuple[str, str, bool, str]] = [(b, b, weighted, BIASED.get(b, "")) for b in chosen]
    if weighted and "none" in chosen:
        runs.append(
            (NO_DISCOUNT_WEIGHTING, "none", False, "without γᵗ it estimates a different vector")
        )
    return summarise_all(
        problem,
        (
            (label, estimates(problem, batches, b, discount_weighting=dw, policy=policy), dw, why)
            for label, b, dw, why in runs
        ),
        alpha=alpha,
        episodes=episodes,
    )


__all__ = [
    "BIASED",
    "NO_DISCOUNT_WEIGHTING",
    "Case",
    "ProbsPolicy",
    "collect_batches",
    "estimates",
    "make_policy",
    "run_problem",
    "strict_json",
    "summarise",
    "summarise_all",
    "t_quantile",
    "z_scores",
    "z_threshold",
]
