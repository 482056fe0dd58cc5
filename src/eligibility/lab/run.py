"""One lab run: every chosen problem × every baseline, as one config and one result.

:class:`LabConfig` is the single config dataclass of ``eligibility lab``: its fields are the
command's options (their help text is the ``--help``), and it is written into the JSON output.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from eligibility._dataclass_args import path_option
from eligibility.lab.estimate import Case, run_problem
from eligibility.lab.problems import PROBLEMS, Problem, get_problem

SEQUENCE_PROBLEMS = ("length", "difficulty", "kl")
"""The sequence problems of :mod:`eligibility.lab.sequence` (named here so that choosing an
episodic problem never imports torch; a test holds this tuple to that module's table)."""


@dataclass(frozen=True)
class LabConfig:
    """What ``eligibility lab`` runs, and how it reports."""

    problem: str = field(
        default="all",
        metadata={
            "help": f"a built-in problem ({', '.join(PROBLEMS)}) or all; or a sequence problem "
            f"({', '.join(SEQUENCE_PROBLEMS)}) or sequence for the three"
        },
    )
    samples: int = field(
        default=200,
        metadata={"help": "N, independent estimates per problem × baseline (at least 30)"},
    )
    episodes: int = field(
        default=16,
        metadata={
            "help": "E, episodes in each estimate's batch (the trainer's episodes per batch)",
            "flag": "--episodes-per-batch",
            "metavar": "E",
            "deprecated": {"--episodes": ...},
        },
    )
    num_envs: int = field(default=8, metadata={"help": "sub-environments of the vector env"})
    seed: int = field(default=0, metadata={"help": "seeds the environments and the policy"})
    alpha: float = field(
        default=1e-3,
        metadata={"help": "family-wise false-alarm rate of each case's z-test (Bonferroni)"},
    )
    format: Literal["text", "json"] = field(
        default="text", metadata={"help": "a table for a person, or JSON for scripts"}
    )
    plot: str | None = path_option(
        "write a plot (variance per baseline; running mean vs exact) to this file "
        "(.png, .svg or .pdf)",
    )

    def __post_init__(self) -> None:
        known = {*PROBLEMS, "all", *SEQUENCE_PROBLEMS, "sequence"}
        if self.problem not in known:
            raise ValueError(
                f"unknown problem {self.problem!r}; choose one of {', '.join(PROBLEMS)} or all, "
                f"or a sequence problem ({', '.join(SEQUENCE_PROBLEMS)}) or sequence"
            )
        if self.samples < 30:
            raise ValueError(f"samples must be at least 30 for the z-test, got {self.samples}")
        if self.episodes < 2:
            raise ValueError(
                "episodes (--episodes-per-batch) must be at least 2 (rloo leaves one out), "
                f"got {self.episodes}"
            )
        if self.num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {self.num_envs}")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must lie in (0, 1), got {self.alpha}")


@dataclass
class LabResult:
    """The problems run, one :class:`~eligibility.lab.estimate.Case` per problem × baseline."""

    config: LabConfig
    problems: list[Problem]
    cases: list[Case]
    wall_s: float

    @property
    def all_unbiased_passed(self) -> bool:
        """Whether every estimator that is unbiased by construction passed its z-test."""
        return all(c.passed for c in self.cases if not c.biased)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types: the config, each problem's exact quantities, each case."""
        return {
            "config": dataclasses.asdict(self.config),
            "problems": [
                {
                    "problem": p.name,
                    "description": p.description,
                    "gamma": p.gamma,
                    "J": p.J,
                    "expected_length": p.expected_length,
                    "aliased": p.aliased,
                    "labels": p.labels(),
                    "exact": p.flatten(p.exact).tolist(),
                }
                for p in self.problems
            ],
            "cases": [c.to_json() for c in self.cases],
            "all_unbiased_passed": self.all_unbiased_passed,
            "wall_s": self.wall_s,
        }


def run_lab(config: LabConfig) -> LabResult:
    """Run every chosen problem through every baseline.

    See :func:`~eligibility.lab.estimate.run_problem`. Each problem is seeded with
    ``config.seed``, so a problem's numbers do not depend on which others ran.
    """
    start = time.perf_counter()
    if config.problem in ("sequence", *SEQUENCE_PROBLEMS):
        return _run_sequence(config, start)
    names = list(PROBLEMS) if config.problem == "all" else [config.problem]
    problems = [get_problem(n) for n in names]
    cases: list[Case] = []
    for p in problems:
        cases += run_problem(
            p,
            samples=config.samples,
            episodes=config.episodes,
            num_envs=config.num_envs,
            seed=config.seed,
            alpha=config.alpha,
        )
    return LabResult(config, problems, cases, time.perf_counter() - start)


def _run_sequence(config: LabConfig, start: float) -> LabResult:
    """The sequence problems: group baselines on batches of 2Q prompts × G completions."""
    from eligibility.lab.sequence import get_problem as get_sequence_problem
    from eligibility.lab.sequence.estimate import run_sequence_problem

    names = SEQUENCE_PROBLEMS if config.problem == "sequence" else (config.problem,)
    problems = [get_sequence_problem(n) for n in names]
    cases: list[Case] = []
    for p in problems:
        cases += run_sequence_problem(
            p, samples=config.samples, seed=config.seed, alpha=config.alpha
        )
    return LabResult(config, problems, cases, time.perf_counter() - start)  # type: ignore[arg-type]


__all__ = ["SEQUENCE_PROBLEMS", "LabConfig", "LabResult", "run_lab"]
