"""``eligibility check``: the user's own REINFORCE held against the exact policy gradient.

    >>> from eligibility.check import check                                # doctest: +SKIP
    >>> report = check("examples/check/correct.py:loss", problem="chain")  # doctest: +SKIP
    >>> report.problems[0].verdict                                         # doctest: +SKIP
    'unbiased'

The contract, the verdicts and the false-alarm rate: docs/check.md.
"""

import sys
import types

from eligibility.check.report import render_text
from eligibility.check.run import CheckConfig, CheckReport, ProblemReport, check
from eligibility.check.user import Episode


class _CallableModule(types.ModuleType):
    """This package, callable as :func:`check`.

    Importing ``eligibility.check`` (as ``eligibility.check(...)`` does on first use, or
    ``eligibility.testing``) binds the package's attribute ``check`` to this module, replacing
    the function of that name; calling the module keeps ``eligibility.check(fn)`` working.
    """

    def __call__(self, fn, config=None, **options):
        """:func:`check`."""
        return check(fn, config, **options)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["CheckConfig", "CheckReport", "Episode", "ProblemReport", "check", "render_text"]
