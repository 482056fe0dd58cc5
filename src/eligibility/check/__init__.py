"""``eligibility check``: the user's own REINFORCE held against the exact policy gradient.

    >>> from eligibility.check import check                                # doctest: +SKIP
    >>> report = check("examples/check/correct.py:loss", problem="chain")  # doctest: +SKIP
    >>> report.problems[0].verdict                                         # doctest: +SKIP
    'unbiased'

The contract, the verdicts and the false-alarm rate: docs/check.md.
"""

from eligibility.check.report import render_text
from eligibility.check.run import CheckConfig, CheckReport, ProblemReport, check
from eligibility.check.user import Episode

__all__ = ["CheckConfig", "CheckReport", "Episode", "ProblemReport", "check", "render_text"]
