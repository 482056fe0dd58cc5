"""What a family of exact problems hands the check's one engine.

The engine (:mod:`eligibility.check.run`) owns the z-test, the choice of N, the scale fit, the
diagnosis matching and the report. A family (the episodic MDPs of
:mod:`eligibility.check.problems`, the sequence problems of :mod:`eligibility.check.sequence`)
contributes, per problem, a :class:`Trial`: the exact gradient ∇J, a pilot spread, the exact
expectation of the mistakes it can compute, known constant factors, and a way to draw N
batches (:class:`Draw`): one call of the user's function per batch, and, on the same batches
(common random numbers), reference estimators and named mistakes written by us.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class ExactProblem(Protocol):
    """What a problem of ``eligibility check`` is: one objective J at a fixed θ, ∇J known.

    Each family's problems are of one class (:class:`~eligibility.check.problems.CheckProblem`,
    :class:`~eligibility.lab.sequence.problem.SequenceProblem`,
    :class:`~eligibility.lab.sequence.offpolicy.OffPolicyProblem`); what the engine and every
    family rely on is this: the key of ``--problem`` and the exact gradient, in the layout of
    the estimates the user's function gives (θ's parameters flattened in order). The rest (how
    batches are drawn, the named mistakes) the family's ``trial`` turns into a :class:`Trial`.
    """

    @property
    def name(self) -> str:
        """The key of ``--problem``."""
        ...

    @property
    def exact(self) -> np.ndarray:
        """∇J(θ), flattened in the order of θ's parameters, (p,)."""
        ...


@dataclass
class Draw:
    """N batches drawn at θ, and what the engine does with them.

    Attributes:
        step: ``step(k)`` calls the user's function on batch k and returns its ĝₖ (None: no
            gradient); it runs in the worker process.
        setup: run once in the worker before the calls.
        references: named unbiased estimators of ∇J on the same batches, (N, p) each (a
            variant that is one of them rescaled batch by batch reads as a scale), for the
            variance ratios (the key is the report's field).
        variants: (the diagnosis, its estimates on the same batches, (N, p)) for each
            estimator that holds a named mistake (several may share a diagnosis): the user's
            mean is held against each one's mean (a diagnosis from common random numbers).
        explain: ``explain(mean, stderr, t)`` → more of the report from the user's mean ĝ,
            its standard errors and the z-test's t* (the
            off-policy family's decomposition of the bias), or None.
        drawn: what the family drew, for a caller that computes ĝₖ itself (sequence: the
            enumeration rows of each batch, [n, N]).
        summary: run in the worker after the calls; what it returns (picklable) joins the
            problem's details (the step form's record of what ``clip_grad_norm_`` did).
        closer: ``closer(G)`` → more (diagnosis, estimates) pairs chosen from the user's
            estimates G (N, p), held with ``variants`` where the user's estimator is biased
            and none of them is it batch by batch, or none of them fits (a family with too
            many combinations to compute on every batch for every check computes the ones
            closest to G; one whose choices take constants, a truncation C say, sweeps them
            around the variant closest to G's mean); None: none. The one way the engine
            widens the variants (:func:`~eligibility.check.verdict.widened`).
    """

    step: Callable[[int], np.ndarray | None]
    setup: Callable[[], None] = lambda: None
    references: dict[str, np.ndarray] = field(default_factory=dict)
    variants: list[tuple[str, np.ndarray]] = field(default_factory=list)
    explain: Callable[[np.ndarray, np.ndarray, float], dict[str, Any]] | None = None
    drawn: Any = None
    summary: Callable[[], dict[str, Any]] | None = None
    closer: Callable[[np.ndarray], list[tuple[str, np.ndarray]]] | None = None


@dataclass
class Trial:
    """One problem at θ, as the engine sees it.

    Attributes:
        name: the key of ``--problem``.
        exact: ∇J(θ), flattened, (p,).
        sigma: per-component standard deviation of a correct estimator (a pilot), (p,).
        expectations: the exact E[ĝ] of each named mistake this problem can tell from ∇J.
        scales: known constant factors c, (name, c): a ``scaled`` verdict whose c matches
            one is named after it.
        blind_to: what this problem cannot show, and which problem can.
        sizing: the mistakes N must tell from a rescaling (their E[ĝ]); ``expectations``
            when empty.
        draw: ``draw(n)`` → the :class:`Draw` of n batches.
        J: the exact objective J(θ), where the family reports it.
        details: more facts about the problem for the report (the off-policy family's
            distance from θ_old).
        held_at_zero: mistake → the components of ĝ (indices) that every correct estimator
            leaves at exactly 0 on every batch of this problem, and that the mistake moves
            with terms of mean zero: where E[ĝ] = ∇J passes, an estimate that moves them on
            any batch reads ``excess variance`` with the mistake as its diagnosis (the
            z-test cannot see a mistake that changes no mean; its terms are still there,
            batch by batch).
    """

    name: str
    exact: np.ndarray
    sigma: np.ndarray
    draw: Callable[[int], Draw]
    expectations: dict[str, np.ndarray] = field(default_factory=dict)
    scales: list[tuple[str, float]] = field(default_factory=list)
    blind_to: tuple[str, ...] = ()
    sizing: dict[str, np.ndarray] = field(default_factory=dict)
    J: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    held_at_zero: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class Family:
    """A family of exact problems: its problems, forms, contract adapter and mistakes.

    Attributes:
        name: its key in :data:`FAMILIES`.
        problems: ``--problem`` name → a builder of the problem.
        forms: the ``--form`` values it takes; the first is the default.
        arguments: per form, the names of the user's function's arguments.
        trial: ``trial(problem, fn, config, seed)`` → the :class:`Trial`.
        diagnoses: what each of the mistakes it names means: a view of the registry,
            :func:`eligibility.check.mistakes.meanings` (a new family's mistakes are declared
            there, and the report reads them from there).
        reference: what its variance ratio is taken against (for the report).
        min_samples: the least N it is checked with by default (where its estimates are
            skewed enough that the z-test needs more calls to keep its false-alarm rate).
        kl_problems: the problems whose objective holds a KL to a reference (β > 0): left
            out when the user declares an objective without one (``--kl none``).
        step_problems: the problems built for a training step's own mechanisms (a clip that
            binds): ``all`` holds them under ``--form step`` only; ``--problem`` names them
            under any form.
        batch: what one call of the user's function is handed (the report's note), from the
            report (its ``policy`` and ``episodes``).
        options: the settings of :class:`~eligibility.check.run.CheckConfig` beyond the
            common ones that its trial reads (``micro_batches``, ``temperature``); another
            family refuses them.
        unfit: ``unfit(problem, config)`` → why that problem cannot be checked with these
            settings (None: it can); the engine asks before any work, and refuses a problem
            named by ``--problem`` or leaves one of ``all`` out with that line. None (the
            default): every problem can, and none is built to be asked.
    """

    name: str
    problems: dict[str, Callable[[], ExactProblem]]
    forms: tuple[str, ...]
    arguments: dict[str, tuple[str, ...]]
    trial: Callable[[ExactProblem, Callable[..., Any], Any, int], Trial]
    diagnoses: dict[str, str]
    reference: str
    min_samples: int = 200
    kl_problems: tuple[str, ...] = ()
    step_problems: tuple[str, ...] = ()
    batch: Callable[[Any], str] = lambda report: "one batch per call"
    options: tuple[str, ...] = ()
    unfit: Callable[[ExactProblem, Any], str | None] | None = None


FAMILIES: dict[str, str] = {
    "episodic": "eligibility.check.problems",
    "sequence": "eligibility.check.sequence",
    "off-policy": "eligibility.check.offpolicy",
    "episodes": "eligibility.check.episodes",
}
"""``--family`` → the module whose ``FAMILY`` it is (imported on first use; the first is the
default). Adding a family is adding its module and one line here: the engine reads only this."""


def get(name: str) -> Family:
    """The family ``name`` of :data:`FAMILIES`.

    Raises:
        ValueError: an unknown name (naming the known ones).
    """
    if name not in FAMILIES:
        raise ValueError(f"unknown check family {name!r}; choose one of {', '.join(FAMILIES)}")
    return importlib.import_module(FAMILIES[name]).FAMILY  # type: ignore[no-any-return]


def fit_problems(family: Family, config: Any) -> tuple[list[str], list[str]]:
    """(the problems to check, a line for each of ``all`` left out), before any work.

    Raises:
        ValueError: a problem named by ``--problem`` (or every one) that the settings cannot
            check (:attr:`Family.unfit`), with why.
    """
    names = list(config.problems)
    if family.unfit is None:
        return names, []
    why = {n: family.unfit(family.problems[n](), config) for n in names}
    unfit = {n: w for n, w in why.items() if w}
    if unfit and (config.problem != "all" or len(unfit) == len(names)):
        said = "; ".join(dict.fromkeys(unfit.values()))  # one reason said once
        raise ValueError(f"{said}; choose other settings or other problems")
    return [n for n in names if n not in unfit], [f"{n}: {w}" for n, w in unfit.items()]


__all__ = ["FAMILIES", "Draw", "ExactProblem", "Family", "Trial", "fit_problems", "get"]
