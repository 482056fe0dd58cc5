r"""Run a user's REINFORCE on the exact problems and judge its gradient.

For each problem: set a ``torch.nn.Linear(obs_dim, n_actions)`` policy (plus a softmax for
``policy="probs"``) to the problem's θ = (W, b); call the user's function N times, each on E
fresh episodes of that policy (loss form) or on the problem's env (update form); take
ĝ = −∇θ loss (or +∇θ objective) each time; judge the mean against the exact ∇J
(:func:`eligibility.checker.stats.judge`). In the loss form the same episodes feed plain
REINFORCE and REINFORCE with the exact value baseline (the lab's estimator), so the user's
variance is compared on identical episodes.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from eligibility.checker import stats
from eligibility.checker.problems import CheckProblem, get_check_problems

FORMS = ("loss", "update")
POLICIES = ("logits", "probs")

ZERO_GRADIENT = 1e-4
"""|ĝ| below this times ‖∇J‖ + ‖sd of plain REINFORCE‖ on every call counts as no gradient.

A float32 loss whose gradient is 0 in exact arithmetic leaves round-off of about 10⁻⁶ of its
terms; any real estimator moves far more than 10⁻⁴ of plain REINFORCE's spread.
"""

PILOT_BATCHES = 200
"""Batches of plain REINFORCE played to measure its spread before choosing N."""


@dataclass(frozen=True)
class Episode:
    """One complete episode, as the user's loss function receives it.

    Attributes:
        obs: s_t, float32 [T, obs_dim].
        actions: a_t, int64 [T].
        rewards: r_t, the reward that followed a_t, float32 [T].
        terminated: True: the episode ended in a terminal state (always, on these problems).
    """

    obs: Any
    actions: Any
    rewards: Any
    terminated: bool


@dataclass
class ProblemReport:
    """The finding on one problem (see ``docs/check.md`` for every field)."""

    problem: str
    verdict: str
    diagnosis: str | None
    samples: int
    scale: float | None = None
    scale_stderr: float | None = None
    residual_max_abs_z: float | None = None
    max_abs_z: float | None = None
    threshold: float | None = None
    bias_norm: float | None = None
    noise: float | None = None
    cosine: float | None = None
    variance_ratio: float | None = None
    variance_ratio_best: float | None = None
    detectable_bias: float | None = None
    power: dict[str, float] = field(default_factory=dict)
    exact: list[float] = field(default_factory=list)
    mean: list[float] = field(default_factory=list)
    cannot_see: list[str] = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types; non-finite floats become null."""
        out = dict(self.__dict__)
        return {k: _finite(v) for k, v in out.items()}


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, list):
        return [_finite(v) for v in x]
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    return x


@dataclass
class CheckReport:
    """Every problem's finding, and the settings they were found with."""

    problems: list[ProblemReport]
    alpha: float
    episodes: int
    form: str
    policy: str
    objective: bool
    seed: int
    function: str
    wall_s: float

    @property
    def passed(self) -> bool:
        """Whether every problem's verdict is ``unbiased``."""
        return all(p.verdict == "unbiased" for p in self.problems)

    @property
    def exit_code(self) -> int:
        """0 when every problem is ``unbiased``, else 1."""
        return 0 if self.passed else 1

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON types."""
        return {
            "function": self.function,
            "form": self.form,
            "policy": self.policy,
            "objective": self.objective,
            "alpha": self.alpha,
            "episodes": self.episodes,
            "samples": {p.problem: p.samples for p in self.problems},
            "seed": self.seed,
            "passed": self.passed,
            "problems": [p.to_json() for p in self.problems],
            "wall_s": self.wall_s,
        }

    def __str__(self) -> str:
        from eligibility.checker.report import render_text

        return render_text(self)


# sampling: the one place that couples check to a rollout ---------------------------------------


def sample_batches(problem: CheckProblem, n_batches: int, episodes: int, rng: np.random.Generator):
    """``n_batches`` batches of E complete episodes of the problem's policy at θ.

    The lab's bulk NumPy sampler (:func:`eligibility.lab.sampling.sample_episodes`), one call
    for all the episodes, then split into batches (each a ``reinforce.rollout.Batch``).
    """
    from eligibility.lab.sampling import sample_episodes

    th = problem.problem.theta
    big = sample_episodes(
        problem.mdp, th["W"], th["b"], n_batches * episodes, rng, reward_std=problem.reward_std
    )
    return big, [
        type(big)(*(x[i * episodes : (i + 1) * episodes] for x in big)) for i in range(n_batches)
    ]


def reference_estimates(problem: CheckProblem, batches: list[Any], baseline: str) -> np.ndarray:
    """The lab's REINFORCE (trainer's ``policy_gradient``) on each batch, rows of (N, p)."""
    from eligibility.lab.estimate import estimates

    return estimates(
        problem.problem, batches, baseline, discount_weighting=problem.problem.gamma < 1.0
    )


# the user's function ----------------------------------------------------------------------------


def check_signature(fn: Callable[..., Any], form: str) -> None:
    """Raise ValueError unless ``fn`` can be called as fn(policy, episodes|env, gamma)."""
    second = "episodes" if form == "loss" else "env"
    want = f"def {getattr(fn, '__name__', 'fn')}(policy, {second}, gamma)"
    if not callable(fn):
        raise ValueError(f"{fn!r} is not a function; the contract is {want}")
    try:
        inspect.signature(fn).bind(None, None, None)
    except TypeError as err:
        raise ValueError(
            f"{getattr(fn, '__name__', fn)} cannot be called with three arguments ({err}); "
            f"the contract is {want}"
        ) from None
    except ValueError:  # builtins without a signature: let the call decide
        pass


def make_policy(problem: CheckProblem, policy: str):
    """``torch.nn.Linear(obs_dim, n_actions)`` (weight W, bias b at θ), + softmax for probs."""
    import torch

    th = problem.problem.theta
    A, d = th["W"].shape
    linear = torch.nn.Linear(d, A)
    module = linear if policy == "logits" else torch.nn.Sequential(linear, torch.nn.Softmax(-1))
    return module, linear


def _set_theta(linear: Any, problem: CheckProblem) -> None:
    import torch

    th = problem.problem.theta
    with torch.no_grad():
        linear.weight.copy_(torch.tensor(np.array(th["W"]), dtype=torch.float32))
        linear.bias.copy_(torch.tensor(np.array(th["b"]), dtype=torch.float32))
    linear.weight.grad = None
    linear.bias.grad = None


def _episodes_of(big: Any, episodes: int) -> list[list[Episode]]:
    """The big batch as float32/int64 tensors, one list of E :class:`Episode` per batch."""
    import torch

    obs = torch.from_numpy(big.obs.astype(np.float32))
    act = torch.from_numpy(big.actions.astype(np.int64))
    rew = torch.from_numpy(big.rewards.astype(np.float32))
    lengths = big.mask.sum(axis=1).tolist()
    eps = [
        Episode(obs[e, :L], act[e, :L], rew[e, :L], bool(big.terminated[e]))
        for e, L in enumerate(lengths)
    ]
    return [eps[i : i + episodes] for i in range(0, len(eps), episodes)]


class _NoGradient(Exception):
    """The returned value does not depend on the policy's parameters."""


class BadReturn(ValueError):
    """The user's function returned something that is not a finite scalar tensor."""


def _one_estimate(fn: Callable[..., Any], args: tuple, linear: Any, sign: float) -> np.ndarray:
    """ĝ = sign · ∇θ fn(*args), W then b; ValueError for a bad return value."""
    import torch

    out = fn(*args)
    name = getattr(fn, "__name__", "the function")
    if not isinstance(out, torch.Tensor):
        raise BadReturn(f"{name} returned {type(out).__name__}; it must return a scalar tensor")
    if out.numel() != 1:
        raise BadReturn(
            f"{name} returned a tensor of shape {tuple(out.shape)}; it must return a scalar "
            "(reduce it, e.g. with .sum() or .mean())"
        )
    if not torch.isfinite(out).all():
        raise BadReturn(f"{name} returned {out.item()}; the loss must be finite")
    if not out.requires_grad:
        raise _NoGradient
    params = [linear.weight, linear.bias]
    grads = torch.autograd.grad(out.reshape(()), params, allow_unused=True)
    if all(g is None for g in grads):
        raise _NoGradient
    flat = [
        (torch.zeros_like(p) if g is None else g).detach().reshape(-1).double()
        for g, p in zip(grads, params, strict=True)
    ]
    return sign * torch.cat(flat).numpy()


def _user_traceback(err: BaseException, filename: str | None) -> str:
    """The traceback of ``err`` cut down to the frames in the user's file, and the error."""
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if filename is not None and f.filename == filename] or frames[-1:]
    lines = ["Traceback (the user's frames):\n"]
    lines += traceback.format_list(mine)
    lines += traceback.format_exception_only(type(err), err)
    return "".join(lines).rstrip()


def float32_env(env: Any) -> Any:
    """The env with float32 vector observations (the problem's obs cast; spaces to match)."""
    import gymnasium
    from gymnasium import spaces

    space = env.observation_space
    box = spaces.Box(-np.inf, np.inf, space.shape, dtype=np.float32)
    return gymnasium.wrappers.TransformObservation(env, lambda o: np.asarray(o, np.float32), box)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Torch on one thread while the user's code runs, then as it was.

    The tensors are tiny ([T, d] with d ≤ 8); spreading each op over threads only adds
    synchronisation (a 3× slower check on 2 cores, measured).
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _run_problem(
    fn: Callable[..., Any],
    problem: CheckProblem,
    *,
    samples: int | None,
    episodes: int,
    seed: int,
    policy: str,
    form: str,
    objective: bool,
    alpha: float,
) -> ProblemReport:
    import torch

    rng = np.random.default_rng(seed)
    exact = problem.exact
    gamma = problem.problem.gamma
    _, pilot = sample_batches(problem, PILOT_BATCHES, episodes, rng)
    spread = reference_estimates(problem, pilot, "none").std(axis=0, ddof=1)
    nodisc = problem.exact_without_discount_weighting() if gamma < 1.0 else None
    mistakes = stats.mistakes(exact, spread, nodisc)
    n = samples if samples is not None else stats.samples_for_power(mistakes, alpha=alpha)
    report = ProblemReport(
        problem=problem.name,
        verdict="",
        diagnosis=None,
        samples=n,
        power=stats.mistake_power(mistakes, n, alpha),
        exact=exact.tolist(),
        cannot_see=list(problem.cannot_see),
    )
    with torch.random.fork_rng():  # Linear's own initialisation draws from torch's RNG
        module, linear = make_policy(problem, policy)
    sign = 1.0 if objective else -1.0
    filename = getattr(getattr(fn, "__code__", None), "co_filename", None)
    if form == "loss":
        big, batches = sample_batches(problem, n, episodes, rng)
        calls = [(module, eps, gamma) for eps in _episodes_of(big, episodes)]
    else:
        batches = None
        env = float32_env(problem.make_env())
        env.reset(seed=seed)
        calls = [(module, env, gamma)] * n
    rows = []
    with torch.random.fork_rng(), _one_thread():
        torch.manual_seed(seed)
        for args in calls:
            _set_theta(linear, problem)
            try:
                rows.append(_one_estimate(fn, args, linear, sign))
            except _NoGradient:
                report.verdict = "no gradient"
                return report
            except BadReturn:
                raise
            except Exception as err:  # the user's code raised: a finding, not a crash
                report.verdict, report.error = "error", _user_traceback(err, filename)
                return report
    G = np.stack(rows)
    if np.abs(G).max() <= ZERO_GRADIENT * float(np.linalg.norm(exact) + np.linalg.norm(spread)):
        report.verdict = "no gradient"  # it reaches θ, but is (numerically) 0 on every call
        return report
    verdict, diagnosis, test, fit = stats.judge(
        G, exact, alpha=alpha, without_discount_weighting=nodisc
    )
    report.verdict, report.diagnosis = verdict, diagnosis
    report.max_abs_z, report.threshold = test.max_abs_z, test.threshold
    report.bias_norm = float(np.linalg.norm(test.mean - exact))
    report.noise = float(np.sqrt(np.sum(test.stderr**2)))
    report.cosine = stats.cosine(test.mean, exact)
    report.detectable_bias = stats.detectable_bias(test.stderr, test.threshold)
    report.mean = test.mean.tolist()
    if fit is not None:
        report.scale, report.scale_stderr = fit.c, fit.stderr
        report.residual_max_abs_z = fit.residual.max_abs_z
    if batches is not None:
        variance = float(G.var(axis=0, ddof=1).sum())
        for attr, baseline in (("variance_ratio", "none"), ("variance_ratio_best", "value")):
            ref = float(reference_estimates(problem, batches, baseline).var(axis=0, ddof=1).sum())
            setattr(report, attr, variance / ref if ref > 0 else float("nan"))
    return report


def check(
    fn: Callable[..., Any],
    *,
    problem: str = "all",
    samples: int | None = None,
    episodes: int = 16,
    seed: int = 0,
    policy: Literal["logits", "probs"] = "logits",
    form: Literal["loss", "update"] = "loss",
    objective: bool = False,
    alpha: float = 1e-3,
) -> CheckReport:
    """Hold the user's REINFORCE ``fn`` against the exact policy gradient.

    Args:
        fn: loss form ``fn(policy, episodes, gamma) -> scalar tensor`` to minimise; update form
            ``fn(policy, env, gamma)``: the user's own rollout on ``env`` and their loss.
        problem: a name of :data:`~eligibility.checker.problems.CHECK_PROBLEMS` or ``"all"``.
        samples: N, gradient estimates per problem; None chooses N per problem so a sign or
            factor-2 scale error of plain REINFORCE is caught with ≥ 99% power.
        episodes: E, episodes per call in the loss form (and in the power calculation).
        seed: seeds the episodes, the env and torch's sampling (forked: the caller's torch
            RNG is left as it was).
        policy: ``"logits"`` (``policy(obs)`` gives logits) or ``"probs"`` (probabilities).
        form: ``"loss"`` or ``"update"``.
        objective: ``fn`` returns an objective to maximise (ĝ = +∇θ) instead of a loss.
        alpha: the false-alarm rate of the verdict ``unbiased`` per problem.

    Returns:
        A :class:`CheckReport`; ``report.passed`` when every problem is ``unbiased``.

    Raises:
        ValueError: bad settings, a function that cannot take three arguments, or one that
            returns a non-scalar, a non-tensor or a non-finite value.
    """
    if form not in FORMS:
        raise ValueError(f"form must be one of {', '.join(FORMS)}, got {form!r}")
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if samples is not None and samples < 30:
        raise ValueError(f"samples must be at least 30 for the z-test, got {samples}")
    if episodes < 1:
        raise ValueError(f"episodes must be at least 1, got {episodes}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    check_signature(fn, form)
    start = time.perf_counter()
    found = [
        _run_problem(
            fn,
            p,
            samples=samples,
            episodes=episodes,
            seed=seed,
            policy=policy,
            form=form,
            objective=objective,
            alpha=alpha,
        )
        for p in get_check_problems(problem)
    ]
    return CheckReport(
        problems=found,
        alpha=alpha,
        episodes=episodes,
        form=form,
        policy=policy,
        objective=objective,
        seed=seed,
        function=getattr(fn, "__qualname__", repr(fn)),
        wall_s=time.perf_counter() - start,
    )


__all__ = ["FORMS", "POLICIES", "BadReturn", "CheckReport", "Episode", "ProblemReport", "check"]
