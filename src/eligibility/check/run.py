r"""Hold a user's REINFORCE estimator against the exact policy gradient, and name the bug.

For each problem, at a fixed θ, the user's function is called N times; each call gives one
estimate ĝₙ = −∇θ loss. With ḡ their mean and SEᵢ = sᵢ/√N per component,

    zᵢ = (ḡᵢ − ∇Jᵢ) / SEᵢ,   unbiased  ⇔  maxᵢ |zᵢ| ≤ t*,

t* the two-sided Student-t quantile at α / (2p) (Bonferroni over the p components): an
unbiased estimator is flagged with probability ≤ α per problem. When it is flagged, the scale
c = ⟨ḡ, ∇J⟩ / ‖∇J‖² is fitted and the residual ḡ − c ∇J tested the same way: a residual
within noise means E[ĝ] = c ∇J (``scaled`` for c > 0, the diagnosis ``sign`` for c < 0);
otherwise ḡ is held against each named mistake of the problem's family: its exact
expectation, or its own estimates on the same batches (common random numbers).

One engine serves both families (:mod:`eligibility.check.family`): the episodic MDPs of
:mod:`eligibility.check.problems` and the sequence problems of :mod:`eligibility.check.sequence`.
The user's function runs in a worker process (:mod:`eligibility.check.isolate`).
"""

from __future__ import annotations

import contextlib
import functools
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from eligibility.check import isolate, user
from eligibility.check.config import CheckConfig
from eligibility.check.family import FAMILIES, Family
from eligibility.check.family import get as get_family
from eligibility.check.verdict import (  # noqa: F401  (re-exported: the check's statistics)
    EXACT_TOL,
    MAX_SAMPLES,
    MIN_SAMPLES,
    PAIRED_TOL,
    POWER,
    ProblemReport,
    Verdict,
    _hold_scales_together,
    _passes,
    _report,
    _verdict,
    choose_samples,
    max_abs_z,
    same_estimates,
    told_from_a_rescaling,
)
from eligibility.lab.estimate import strict_json


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
    family: str = next(iter(FAMILIES))
    kl: str = "reverse"
    micro_batches: int = 1
    temperature: float = 1.0
    beta: float | None = None
    world_size: int = 1
    advantages: str | None = None
    allow_scale: bool = False
    reference: str = ""
    skipped: list[str] = field(default_factory=list)
    """The problems of ``all`` the settings cannot check, each with why (left out)."""
    subject: str | None = None
    """What was checked, where it is not the user's function: the framework, its trainer, its
    version and the configuration file (the report's first line)."""

    @property
    def unbiased(self) -> bool:
        """True when every problem's verdict is ``unbiased``."""
        return all(p.verdict == "unbiased" for p in self.problems)

    @property
    def passed(self) -> bool:
        """Unbiased, or (``allow_scale``) unbiased up to a constant step size."""
        ok = ("unbiased", "scaled") if self.allow_scale else ("unbiased",)
        return all(p.verdict in ok for p in self.problems)

    @property
    def exit_status(self) -> int:
        """0 passed; 2 the function could not be checked (``error``); 1 a finding."""
        if any(p.verdict == "error" for p in self.problems):
            return 2
        return 0 if self.passed else 1

    def to_json(self) -> dict[str, Any]:
        """Strict-JSON-ready dict (non-finite numbers become None)."""
        d = asdict(self)
        d["unbiased"] = self.unbiased
        d["passed"] = self.passed
        return strict_json(d)


def check(
    fn: Callable[..., Any] | str | None = None,
    config: CheckConfig | dict[str, Any] | str | None = None,
    *,
    framework: str | None = None,
    progress: bool = False,
    **options: Any,
) -> CheckReport:
    """Hold ``fn``, the user's REINFORCE, against the exact policy gradient on each problem.

    The function runs in a worker process (:mod:`eligibility.check.isolate`); the caller's
    random number generators (torch, NumPy, ``random``) and torch's thread count are left as
    they were.

    Args:
        fn: the function (or ``"path/file.py:name"``); see :mod:`eligibility.check.user` and
            :mod:`eligibility.check.sequence` for the contracts.
        config: the settings; or give them as keyword ``options`` (the fields of
            :class:`CheckConfig`). With ``framework``: the framework's configuration instead
            (a mapping in its own keys, or a JSON/YAML file).
        framework: ``trl``, ``verl`` or ``openrlhf``: check that framework's own advantage and
            loss code as ``config`` sets it up, instead of ``fn``
            (:mod:`eligibility.check.frameworks`).
        progress: a progress line on stderr.
        **options: fields of :class:`CheckConfig`.

    Returns:
        The :class:`CheckReport`.

    Raises:
        ValueError: bad settings, a function that cannot be loaded or has the wrong signature,
            or one that returns something other than a finite scalar tensor.
    """
    if framework is not None:
        if fn is not None:
            raise ValueError("give either a function or framework=, not both")
        return _check_framework(framework, config, progress, options)
    if fn is None:
        raise ValueError("give the function to check (or framework= and its config=)")
    if not isinstance(config, CheckConfig | None):
        raise ValueError("config= is a CheckConfig (a framework's configuration needs framework=)")
    if config is None:
        config = CheckConfig(**options)
    elif options:
        raise ValueError("give either config= or keyword options, not both")
    family = get_family(config.family)
    if isinstance(fn, str):
        fn = user.load_function(fn)
    user.check_signature(fn, family.arguments[config.form], config.form)  # type: ignore[index]
    names, skipped = _fit_problems(family, config)
    bar = isolate.Progress(progress)
    with _caller_state_kept(), contextlib.ExitStack() as workers:
        ahead = _forked_ahead(workers, fn, family, names, config)
        reports = [
            _check_problem(
                fn, family, name, config, seed=_seed(config, name), progress=bar, worker=worker
            )
            for name, worker in zip(names, ahead, strict=True)
        ]
    bar.finish()
    _hold_scales_together(reports, config.alpha)
    return CheckReport(
        problems=reports,
        alpha=config.alpha,
        samples=config.samples,
        episodes=config.episodes,
        form=config.form,  # type: ignore[arg-type]
        policy=config.policy,
        objective=config.objective,
        seed=config.seed,
        family=config.family,
        kl=config.kl,
        micro_batches=config.micro_batches,
        temperature=config.temperature,
        beta=config.beta,
        world_size=config.world_size,
        advantages=config.advantages,
        allow_scale=config.allow_scale,
        reference=family.reference,
        skipped=skipped,
    )


def _fit_problems(family: Family, config: CheckConfig) -> tuple[list[str], list[str]]:
    """(the problems to check, a line for each of ``all`` left out), before any work.

    Raises:
        ValueError: a problem named by ``--problem`` (or every one) that the settings cannot
            check (:attr:`Family.unfit`), with why.
    """
    names = list(config.problems)
    why = {n: family.unfit(family.problems[n](), config) for n in names}
    unfit = {n: w for n, w in why.items() if w}
    if unfit and (config.problem != "all" or len(unfit) == len(names)):
        raise ValueError("; ".join(unfit.values()) + "; choose a divisor or other problems")
    return [n for n in names if n not in unfit], [f"{n}: {w}" for n, w in unfit.items()]


def _forked_ahead(
    workers: contextlib.ExitStack, fn: Any, family: Any, names: list[str], config: CheckConfig
) -> list[Any]:
    """Each problem's worker, forked now where torch is a CUDA/ROCm build, else None for each.

    Forked before this process's first backward pass (:func:`_fork_first`), each entered on
    ``workers``.
    """
    if not _fork_first():
        return [None] * len(names)
    return [
        workers.enter_context(
            isolate.forked_ahead(
                functools.partial(_drawn, fn, family, name, config, _seed(config, name)),
                config.memory,
            )
        )
        for name in names
    ]


def _seed(config: CheckConfig, name: str) -> int:
    """The seed of problem ``name``: ``seed`` + its place among the problems asked for."""
    return config.seed + config.problems.index(name)


def _check_framework(
    framework: str, config: Any, progress: bool, options: dict[str, Any]
) -> CheckReport:
    """The framework's own loss for ``config`` (its keys, or a file), checked and named."""
    from eligibility.check import frameworks

    settings = frameworks.check_settings(framework, options)
    setup = frameworks.load_config(config if config is not None else {})
    fn, form = frameworks.adapt(framework, setup)
    settings = frameworks.settings_from(framework, setup, settings)
    result = check(fn, CheckConfig(**settings, form=form), progress=progress)
    result.subject = frameworks.subject(framework, setup, config)
    return frameworks.name_kl_weight(result, frameworks.kl_coefficient(framework, setup))


@contextlib.contextmanager
def _caller_state_kept() -> Iterator[None]:
    """Leave the caller's RNG states and torch's thread count as they were.

    The states of torch's, NumPy's global and ``random``'s generators are put back whatever
    runs inside; torch runs one thread meanwhile (tiny tensors).
    """
    import torch

    states = (torch.get_rng_state(), np.random.get_state(), random.getstate())  # noqa: NPY002
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.set_rng_state(states[0])
        np.random.set_state(states[1])  # noqa: NPY002
        random.setstate(states[2])


def _fork_first() -> bool:
    """Whether the check must fork its workers before it runs autograd.

    Where torch sees an accelerator, a backward pass starts autograd's device threads, and a
    process forked after that cannot run one (``_isolate.Worker.fork``). Told from the build,
    not by asking for the devices: asking CUDA how many it has is enough for a forked worker
    to be refused CUDA.
    """
    import torch

    return bool(torch.version.cuda or torch.version.hip)


def _plan(
    fn: Callable[..., Any], family: Family, name: str, config: CheckConfig, seed: int
) -> tuple[Any, int]:
    """The problem's trial (its exact values) and N, the calls it needs."""
    trial = family.trial(family.problems[name](), fn, config, seed)
    n = config.samples or choose_samples(
        trial.sigma,
        trial.exact,
        config.alpha,
        trial.sizing or trial.expectations,
        minimum=family.min_samples,
    )
    return trial, n


def _drawn(
    fn: Callable[..., Any], family: Family, name: str, config: CheckConfig, seed: int
) -> Any:
    """The problem's Draw of its N batches (what a worker forked ahead computes for itself)."""
    trial, n = _plan(fn, family, name, config, seed)
    return trial.draw(n)


def _check_problem(
    fn: Callable[..., Any],
    family: Family,
    name: str,
    config: CheckConfig,
    *,
    seed: int,
    progress: isolate.Progress,
    worker: Any = None,
) -> ProblemReport:
    t0 = time.perf_counter()
    trial, n = _plan(fn, family, name, config, seed)
    draw = trial.draw(n)
    progress.start(trial.name, n)
    try:
        rows = isolate.run_calls(
            draw.step,
            n,
            setup=draw.setup,
            timeout=config.timeout,
            memory=config.memory,
            progress=progress,
            worker=worker,
        )
    except user.UserError as err:
        return _report(trial, "error", config, n, t0, error=err.text)
    except ValueError as err:
        raise ValueError(f"{err} on problem {trial.name}") from None
    if any(r is None for r in rows):
        return _report(trial, "no gradient", config, n, t0, diagnosis="no-gradient")
    return _verdict(trial, np.stack(rows), draw, config, n, t0)  # type: ignore[arg-type]


__all__ = [
    "EXACT_TOL",
    "CheckConfig",
    "CheckReport",
    "ProblemReport",
    "check",
    "choose_samples",
    "max_abs_z",
    "same_estimates",
    "told_from_a_rescaling",
]
