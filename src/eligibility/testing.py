"""Helpers for users' own test suites.

def test_my_reinforce_is_unbiased():
    from eligibility.testing import assert_unbiased
    assert_unbiased(my_loss)                     # every problem, default N
    assert_unbiased(my_update, form="update", problem="gridworld")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def assert_unbiased(fn: Callable[..., Any], **options: Any) -> Any:
    """Fail (``AssertionError`` carrying the report) unless every problem is ``unbiased``.

    A correct estimator fails with probability ≤ α per problem (``alpha``, default 10⁻³).

    Args:
        fn: the user's loss (or, with ``form="update"``, update) function.
        **options: the keywords of :func:`eligibility.check` (``problem``, ``samples``,
            ``episodes``, ``seed``, ``policy``, ``form``, ``objective``, ``alpha``).

    Returns:
        The :class:`~eligibility.checker.core.CheckReport`, when it passed.
    """
    from eligibility.checker import check

    report = check(fn, **options)
    if not report.passed:
        raise AssertionError(f"the gradient estimate is not unbiased:\n{report}")
    return report


__all__ = ["assert_unbiased"]
