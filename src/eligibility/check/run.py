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
import time
from collections.abc import Callable
from dataclasses import InitVar, asdict, dataclass, field, fields, replace
from typing import Any, Literal

import numpy as np

from eligibility.check import isolate, user
from eligibility.check.audit import SUMMARY_KEY, Audit, judge
from eligibility.check.diagnosis import Diagnosis
from eligibility.check.family import FAMILIES, Family, fit_problems
from eligibility.check.family import get as get_family
from eligibility.check.fixes import attach_fixes
from eligibility.check.step import name_clipping
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


@dataclass(frozen=True)
class CheckConfig:
    """What ``eligibility check`` runs, and how it reports."""

    problem: str = field(
        default="all",
        metadata={
            "help": "exact problems, comma-separated, or all (episodic: bandit, chain, "
            "gridworld, short-corridor; --sequence: length, difficulty, kl, and clip, which all "
            "holds under --form step only; --off-policy: ratio-one, near, far)"
        },
    )
    family: str = field(
        default=next(iter(FAMILIES)),
        metadata={
            "help": f"the problems and contract: {', '.join(FAMILIES)} (--sequence: the "
            "language-model form, fn(logps, batch) or fn(model, batch); --off-policy: an "
            "off-policy sequence loss, the batch carrying old_logps and sampler_logps)",
            "shorthand": {"--sequence": "sequence", "--off-policy": "off-policy"},
        },
    )
    kl: Literal["reverse", "none"] = field(
        default="reverse",
        metadata={
            "help": "the objective you mean to optimise: reverse (J = E[R] − β·KL(π_θ ‖ π_ref), "
            "the sequence-level reverse KL at the problem's β, the default) or none (J = E[R]: "
            "a loss without a KL term; the problems with β > 0 are left out)"
        },
    )
    micro_batches: int = field(
        default=1,
        metadata={
            "help": "M: a batch is split into M micro-batches of whole groups, your function is "
            "called on each and the gradients summed, as gradient accumulation does "
            "(--sequence; M divides the problem's groups)",
            "min": 1,
        },
    )
    temperature: float = field(
        default=1.0,
        metadata={
            "help": "τ: completions are drawn from softmax(logits / τ), the policy checked; "
            "batch.temperature holds it (--sequence; the model form scores the logits itself)"
        },
    )
    beta: float | None = field(
        default=None,
        metadata={
            "help": "β of the declared objective J = E[R] − β·KL(π_θ ‖ π_ref) on every problem "
            "(--sequence; default: each problem's own, 0 on length and difficulty, 0.1 on kl); "
            "a loss whose KL weight is another reads kl-weight"
        },
    )
    loss_beta: float | None = field(
        default=None,
        metadata={
            "help": "the KL weight your loss uses, where it may differ from the objective's β: "
            "the named mistakes are also tried at that weight, so kl-weight is named beside "
            "the rest (--sequence; --framework reads it from the configuration)"
        },
    )
    top_k: int | None = field(
        default=None,
        metadata={
            "help": "--off-policy: the sampler keeps the k most probable tokens at each step "
            "(renormalised, as engines cut; 0: all, as finetune's --top-k); the report says "
            "whether your loss estimates the policy's ∇J or the truncated sampler's",
            "min": 0,
        },
    )
    top_p: float | None = field(
        default=None,
        metadata={
            "help": "--off-policy: the sampler keeps the smallest set of tokens whose "
            "probability reaches p at each step (nucleus, renormalised; 1: all)"
        },
    )
    min_p: float | None = field(
        default=None,
        metadata={
            "help": "--off-policy: the sampler keeps the tokens at least p_min times as "
            "probable as the most probable one at each step (renormalised; 0: all)"
        },
    )
    advantages: str | None = field(
        default=None,
        metadata={
            "help": "FILE.py:FUNCTION computing the advantages, advantages(batch) -> [N]: called "
            "on each whole batch, its result handed to your loss as batch.advantages (and a "
            "micro-batch may then split a group) (--sequence)",
            "metavar": "FILE.py:FUNCTION",
        },
    )
    world_size: int = field(
        default=1,
        metadata={
            "help": "R: each batch is shared among R ranks (whole groups), your function is "
            "called on each share and the gradients averaged, as DDP does (--sequence)",
            "min": 1,
        },
    )
    form: Literal["loss", "update", "logps", "model", "step"] | None = field(
        default=None,
        metadata={
            "help": "episodic: loss (fn(policy, episodes, gamma), the default) or update "
            "(fn(policy, env, gamma)); --sequence: logps (fn(logps, batch), the default), "
            "model (fn(model, batch), a Hugging Face causal LM) or step (fn(model, optimizer, "
            "batch): it calls backward() and optimizer.step() itself, the check reads the update)"
        },
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
            "help": "E, episodes handed to each call (episodic)",
            "flag": "--episodes-per-call",
            "metavar": "E",
            "deprecated": {"--episodes": ...},
        },
    )
    seed: int = field(default=0, metadata={"help": "seeds the batches (and torch, update form)"})
    policy: Literal["logits", "probs"] = field(
        default="logits",
        metadata={
            "help": "episodic: policy(obs) gives logits, or probabilities (rows summing to 1)"
        },
    )
    objective: bool = field(
        default=False, metadata={"help": "the function returns an objective to maximise"}
    )
    alpha: float = field(
        default=1e-3,
        metadata={"help": "false-alarm rate per problem of the z-test (Bonferroni)"},
    )
    allow_scale: bool = field(
        default=False,
        metadata={
            "help": "a constant scale (verdict scaled: a step size, not a bias) passes: exit 0"
        },
    )
    timeout: float = field(
        default=60.0, metadata={"help": "seconds one call of your function may take"}
    )
    memory: int = field(
        default=4096,
        metadata={"help": "MiB your function may allocate (in the worker process running it)"},
    )
    format: Literal["text", "json"] = field(
        default="text", metadata={"help": "a table for a person, or JSON for scripts"}
    )
    sequence: InitVar[bool] = False
    """The same as ``family="sequence"`` (the Python spelling of ``--sequence``)."""
    off_policy: InitVar[bool] = False
    """The same as ``family="off-policy"`` (the Python spelling of ``--off-policy``)."""

    def __post_init__(self, sequence: bool, off_policy: bool) -> None:
        for name, off in (("top_k", 0), ("top_p", 1.0), ("min_p", 0.0)):
            if getattr(self, name) == off:  # finetune's spelling of "no cut": the same here
                object.__setattr__(self, name, None)
        if off_policy or sequence:
            object.__setattr__(self, "family", "off-policy" if off_policy else "sequence")
        family = get_family(self.family)
        if self.form is None:
            object.__setattr__(self, "form", family.forms[0])
        elif self.form not in family.forms:
            raise ValueError(
                f"--form {self.form} is not a form of the {family.name} check; it takes "
                f"{' or '.join(family.forms)}"
            )
        for name in (
            "micro_batches",
            "temperature",
            "beta",
            "loss_beta",
            "advantages",
            "world_size",
            "top_k",
            "top_p",
            "min_p",
        ):
            if getattr(self, name) != _DEFAULTS[name] and name not in family.options:
                flag = "--" + name.replace("_", "-")
                hint = (
                    "; a cut sampler is the off-policy check's (--off-policy: the batch "
                    "carries its sampler_logps, ratio-one is θ = θ_old)"
                    if name in ("top_k", "top_p", "min_p")
                    else ""
                )
                raise ValueError(f"{flag} is not taken by the {family.name} check{hint}")
        if self.micro_batches < 1:
            raise ValueError(f"--micro-batches must be at least 1, got {self.micro_batches}")
        if self.top_p is not None and not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.min_p is not None and not (0.0 <= self.min_p < 1.0):
            raise ValueError(
                f"--min-p must be in [0, 1) (0: no cut), got {self.min_p}; 1 keeps the most "
                "probable token only, a greedy sampler that no importance weight corrects"
            )
        if self.top_k is not None and self.top_k < 0:
            raise ValueError(f"--top-k must be at least 0 (0: no cut), got {self.top_k}")
        if self.top_k == 1:
            raise ValueError(
                "--top-k must be 0 (no cut) or at least 2, got 1; 1 keeps the most probable "
                "token only, a greedy sampler that no importance weight corrects"
            )
        if self.world_size < 1:
            raise ValueError(f"--world-size must be at least 1, got {self.world_size}")
        if not (0.05 <= self.temperature <= 20.0):
            raise ValueError(f"--temperature must be in [0.05, 20], got {self.temperature}")
        if self.kl not in ("reverse", "none"):
            raise ValueError(f"--kl must be reverse or none, got {self.kl!r}")
        for name in ("beta", "loss_beta"):
            value = getattr(self, name)
            if value is not None and not (0.0 <= value <= 10.0):
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{flag} must be in [0, 10], got {value}")
        if self.beta is not None and self.kl == "none":
            raise ValueError(
                "--beta weighs the objective's KL and --kl none declares one without it; "
                "drop one of them"
            )
        if not isinstance(self.problem, str):  # a list of names, from Python
            object.__setattr__(self, "problem", ",".join(self.problem))
        self.problems  # noqa: B018  (validates the names)
        if self.samples is not None and self.samples < 30:
            raise ValueError(f"--samples must be at least 30 for the z-test, got {self.samples}")
        if self.episodes < 1:
            raise ValueError(f"--episodes-per-call must be at least 1, got {self.episodes}")
        if not (0.0 < self.alpha < 0.5):
            raise ValueError(f"--alpha must be in (0, 0.5), got {self.alpha}")
        if self.seed < 0:
            raise ValueError(f"--seed must be >= 0, got {self.seed}")
        if not (self.timeout > 0):
            raise ValueError(f"--timeout must be a positive number of seconds, got {self.timeout}")
        if self.memory < 64:
            raise ValueError(f"--memory must be at least 64 (MiB), got {self.memory}")

    @property
    def problems(self) -> tuple[str, ...]:
        """The problems checked: ``problem``'s names, or all of them.

        ``all`` leaves out the problems holding a KL where the objective has none
        (``kl="none"``), and those built for a training step's mechanisms outside
        ``form="step"``.

        Raises:
            ValueError: an unknown name, or a problem whose objective holds a KL with
                ``kl="none"``.
        """
        family = get_family(self.family)
        names = tuple(family.problems)
        kept = tuple(n for n in names if self.kl == "reverse" or n not in family.kl_problems)
        if self.beta is not None:  # the declared β is every problem's: none is left out
            kept = names
        if self.problem == "all":  # a step's own mechanisms are exercised in --form step
            return tuple(n for n in kept if self.form == "step" or n not in family.step_problems)
        asked = tuple(dict.fromkeys(n.strip() for n in self.problem.split(",")))
        for name in asked:
            if name not in names:
                raise ValueError(
                    f"unknown problem {name!r} for the {family.name} check; choose among "
                    f"{', '.join(names)} (comma-separated) or all"
                )
            if name not in kept:
                raise ValueError(
                    f"problem {name} holds a KL to the reference (β > 0) and --kl none "
                    f"declares an objective without one; choose among {', '.join(kept)}, "
                    "or drop --kl none"
                )
        return asked


_DEFAULTS = {f.name: f.default for f in fields(CheckConfig)}


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
    framework: str | None = None
    """The framework whose configuration was checked (its fixes are its keys), or None."""
    declared_objective: str | None = None
    """The objective the configuration declares (β and its KL's estimator), where it does."""

    @property
    def unbiased(self) -> bool:
        """True when every problem's verdict is ``unbiased``."""
        return all(p.verdict == "unbiased" for p in self.problems)

    @property
    def passed(self) -> bool:
        """Unbiased, or (``allow_scale``) unbiased up to a constant step size."""
        ok = ("unbiased", "scaled") if self.allow_scale else ("unbiased",)
        return all(p.verdict in ok and not p.misweighted for p in self.problems)

    @property
    def exit_status(self) -> int:
        """0 passed; 2 the function could not be checked (``error``); 1 a finding."""
        if any(p.verdict == "error" for p in self.problems):
            return 2
        return 0 if self.passed else 1

    def to_json(self) -> dict[str, Any]:
        """Strict-JSON-ready dict (non-finite numbers become None), each finding rendered too."""
        d = asdict(self)
        for p, out in zip(self.problems, d["problems"], strict=True):
            out["diagnosis"] = p.diagnosis
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
        return attach_fixes(_check_framework(framework, config, progress, options))
    return attach_fixes(_checked(fn, config, progress, options))


def _checked(
    fn: Callable[..., Any] | str | None,
    config: CheckConfig | dict[str, Any] | str | None,
    progress: bool,
    options: dict[str, Any],
) -> CheckReport:
    """The user's function checked on each problem: the report before its fixes are said."""
    if fn is None:
        raise ValueError("give the function to check (or framework= and its config=)")
    if not isinstance(config, CheckConfig | None):
        raise ValueError("config= is a CheckConfig (a framework's configuration needs framework=)")
    if config is None:
        config = CheckConfig(**options)
    elif options:
        raise ValueError("give either config= or keyword options, not both")
    family = get_family(config.family)
    ref: Any = fn  # what a spawned worker loads the function from: its FILE.py:FUNCTION
    if isinstance(fn, str):
        fn = user.load_function(fn)
    user.check_signature(fn, family.arguments[config.form], config.form)  # type: ignore[index]
    names, skipped = fit_problems(family, config)
    bar = isolate.Progress(progress)
    with isolate.caller_state_kept(), contextlib.ExitStack() as workers:
        ahead = _started_ahead(workers, ref, names, config)
        reports = [
            _check_problem(
                fn, family, name, config, seed=_seed(config, name), progress=bar, worker=worker
            )
            for name, worker in zip(names, ahead, strict=True)
        ]
    bar.finish()
    _hold_scales_together(reports, config.alpha)
    name_clipping(reports)
    # the settings that produced the findings: the report's fields that are the config's
    echoed = {f.name: getattr(config, f.name) for f in fields(CheckReport) if f.name in _DEFAULTS}
    return CheckReport(problems=reports, reference=family.reference, skipped=skipped, **echoed)


def _started_ahead(
    workers: contextlib.ExitStack, ref: Any, names: list[str], config: CheckConfig
) -> list[Any]:
    """Each problem's worker, started now where torch is a CUDA/ROCm build, else None for each.

    Started before this process's first backward pass, spawned or forked as
    :func:`~eligibility.check.isolate.start_method` decides, each entered on ``workers``.
    """
    plans = [
        functools.partial(_drawn, ref, config.family, n, config, _seed(config, n)) for n in names
    ]
    method = isolate.start_method(plans[0]) if plans else None
    if method is None:
        return [None] * len(names)
    return [
        workers.enter_context(isolate.forked_ahead(plan, config.memory, method)) for plan in plans
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
    frameworks.family_keys(framework, setup, settings["family"])
    fn, form = frameworks.adapt(framework, setup, settings["family"])
    settings = frameworks.settings_from(framework, setup, settings)
    result = _checked(fn, CheckConfig(**settings, form=form), progress, {})
    result.subject = frameworks.subject(framework, setup, config)
    result.framework = framework
    result.declared_objective = frameworks.objective_line(framework, setup, settings)
    return frameworks.name_kl_weight(result, *frameworks.kl_weight(framework, setup, settings))


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


def _drawn(ref: Any, family: str, name: str, config: CheckConfig, seed: int) -> Any:
    """The problem's Draw of its N batches (what a worker started ahead computes for itself).

    ``ref`` is the user's function or its ``FILE.py:FUNCTION`` (loaded here: in a spawned
    worker, from the file), ``family`` the family's name: both pickle.
    """
    fn = user.load_function(ref) if isinstance(ref, str) else ref
    trial, n = _plan(fn, get_family(family), name, config, seed)
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
            summary=draw.summary,
            on_summary=trial.details.update,
        )
    except user.UserError as err:
        return _report(trial, "error", config, n, t0, error=err.text)
    except ValueError as err:
        raise ValueError(f"{err} on problem {trial.name}") from None
    if any(r is None for r in rows):
        report = _report(trial, "no gradient", config, n, t0, finding=Diagnosis(("no-gradient",)))
        found = trial.details.pop(SUMMARY_KEY, None)
        if found is not None and found.findings:  # what the audit saw cut off (a detach)
            judge(report, found)
        return report
    report = _verdict(trial, np.stack(rows), draw, config, n, t0)  # type: ignore[arg-type]
    found = (report.details or {}).pop(SUMMARY_KEY, None)
    if found is not None:
        judge(report, one_constant(found, report))
    return report


def one_constant(found: Audit, report: ProblemReport) -> Audit:
    """The audit without a constant that the table's scale c contradicts.

    The table's c is E[ĝ]'s, fitted on every batch; the audit's is fitted to the replies it
    weighs on its first batches (replies given no weight leave its fit: a dropout whose kept
    replies are doubled reads c = 2 there and c ≈ 1 in the table). Where the two differ by
    more than t* standard errors of c (and 3 %), the table's alone is said: the report never
    gives one problem two constants. Where the table names a variant times a constant
    (``V × c``), that c is its constant (held within 3 %); where it names a bias with no
    constant, c is only the projection of a biased mean on ∇J, not a constant of the
    estimator, and the audit's constant (read against the relation it fitted: the undivided
    accumulation's 2 on a whitened, length-normalised loss) is left as it is.
    """
    c, se, t = report.scale, report.scale_stderr or 0.0, report.threshold or 0.0
    times = report.finding.times if report.finding is not None else None
    if times is not None:
        c, se = times, 0.0
    elif report.verdict == "biased":
        return found
    if c is None:
        return found

    def agrees(a: float | None) -> bool:
        return a is None or abs(a - c) <= max(t * se, 0.03 * abs(c))

    kept = [f for f in found.findings if agrees(f.constant)]
    return found if len(kept) == len(found.findings) else replace(found, findings=kept)


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
