"""``eligibility check``: the user's own REINFORCE held against the exact policy gradient.

In Python, ``check("examples/check/correct.py:loss", problem="chain")`` returns a
:class:`CheckReport` whose ``problems[0].verdict`` is ``"unbiased"``.

The contract, the verdicts and the false-alarm rate: docs/check.md.
"""

from eligibility.check.report import render_text
from eligibility.check.run import CheckConfig, CheckReport, ProblemReport, check
from eligibility.check.user import Episode

__all__ = ["CheckConfig", "CheckReport", "Episode", "ProblemReport", "check", "render_text"]
