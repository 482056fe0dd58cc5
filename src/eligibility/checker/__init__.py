r"""``eligibility check``: hold a user's own PyTorch REINFORCE against the exact gradient.

The user's function (the contract: ``docs/check.md``) is called many times on episodes of
exactly solvable problems; the mean of its gradients is compared with ∇J(θ) from the lab, and
a wrong one is named: a sign error, a dropped γᵗ, a rescaling, or another bias with its size.

    >>> from eligibility.checker import check                    # doctest: +SKIP
    >>> report = check(my_loss, problem="all")                 # doctest: +SKIP
    >>> report.passed, [p.verdict for p in report.problems]    # doctest: +SKIP
"""

from eligibility.checker.core import CheckReport, Episode, ProblemReport, check
from eligibility.checker.problems import CHECK_PROBLEMS

__all__ = ["CHECK_PROBLEMS", "CheckReport", "Episode", "ProblemReport", "check"]
