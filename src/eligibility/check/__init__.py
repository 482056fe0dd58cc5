"""``eligibility check``: the user's own REINFORCE held against the exact policy gradient.

In Python, ``check("examples/check/correct.py:loss", problem="chain")`` returns a
:class:`CheckReport` whose ``problems[0].verdict`` is ``"unbiased"``.

``eligibility.check`` is this package, and calling it calls :func:`check`: the package's
submodules stay importable by their dotted names (``import eligibility.check.frameworks.trl``)
while ``eligibility.check(fn)`` keeps working.

The contract, the verdicts and the false-alarm rate: docs/check.md.
"""

import sys
import types
from typing import Any

from eligibility.check.report import render_text
from eligibility.check.run import CheckConfig, CheckReport, ProblemReport, check
from eligibility.check.user import Episode


class _CallablePackage(types.ModuleType):
    """The package, callable as :func:`check` (``eligibility.check(fn, sequence=True)``)."""

    def __call__(self, *args: Any, **kwargs: Any) -> CheckReport:
        return check(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage

__all__ = ["CheckConfig", "CheckReport", "Episode", "ProblemReport", "check", "render_text"]
