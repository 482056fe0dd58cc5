"""``eligibility check``: the user's own REINFORCE held against the exact policy gradient.

In Python, ``check("examples/check/correct.py:loss", problem="chain")`` returns a
:class:`CheckReport` whose ``problems[0].verdict`` is ``"unbiased"``.

``eligibility.check`` is this package, and calling it calls :func:`check`: the package's
submodules stay importable by their dotted names (``import eligibility.check.frameworks.trl``)
while ``eligibility.check(fn)`` keeps working.

The contract, the verdicts and the false-alarm rate: docs/check.md.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from eligibility._lazy import names_on_first_use

if TYPE_CHECKING:
    from eligibility.check.report import render_text
    from eligibility.check.run import CheckConfig, CheckReport, ProblemReport, check
    from eligibility.check.user import Episode

_WHERE = {
    "CheckConfig": "run",
    "CheckReport": "run",
    "ProblemReport": "run",
    "check": "run",
    "render_text": "report",
    "Episode": "user",
}
"""Where each public name lives: imported on first use, so that ``import eligibility`` (every
command line's first import) does not import the check's engine (0.08 s of its 0.24 s here)."""


__getattr__ = names_on_first_use(__name__, _WHERE)


class _CallablePackage(types.ModuleType):
    """The package, callable as :func:`check` (``eligibility.check(fn, sequence=True)``)."""

    def __call__(self, *args: Any, **kwargs: Any) -> CheckReport:
        return self.check(*args, **kwargs)  # the package's name: imported on first use


sys.modules[__name__].__class__ = _CallablePackage

__all__ = ["CheckConfig", "CheckReport", "Episode", "ProblemReport", "check", "render_text"]
