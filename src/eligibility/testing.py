"""Helpers for your own test suite.

    def test_my_reinforce_is_unbiased():
        from eligibility.testing import assert_unbiased
        assert_unbiased(my_loss)                      # every problem, the defaults

    def test_my_grpo_is_unbiased():
        assert_unbiased(my_grpo_loss, sequence=True)  # fn(logps, batch), the sequence problems

    def test_my_rloo_without_a_kl_is_unbiased():
        assert_unbiased(my_rloo_loss, sequence=True, kl="none", problem="length,difficulty")

``assert_unbiased`` fails with the check's whole report when any problem's verdict is not
``unbiased``; it is :func:`eligibility.check.check` with an assertion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def assert_unbiased(fn: Callable[..., Any] | str, **options: Any) -> Any:
    """Assert that ``fn`` estimates the exact policy gradient on every problem checked.

    Args:
        fn: your loss (or, with ``form="update"``, update) function, or ``"file.py:name"``;
            with ``sequence=True``, ``fn(logps, batch)`` (or ``fn(model, batch)`` with
            ``form="model"``).
        **options: fields of :class:`eligibility.check.CheckConfig` (``problem``, one name,
            comma-separated names or a list; ``family`` or ``sequence``/``off_policy``;
            ``kl`` (``"none"``: an objective without a KL); ``micro_batches``,
            ``temperature``, ``samples``, ``episodes``, ``seed``, ``policy``, ``form``,
            ``objective``, ``alpha``, ``allow_scale``, ``timeout``, ``memory``).

    Returns:
        The :class:`eligibility.check.CheckReport`, when it passes.

    Raises:
        AssertionError: some verdict is not ``unbiased`` (nor ``scaled`` with
            ``allow_scale=True``); the message is the report.
    """
    from eligibility.check import check
    from eligibility.check.report import report_text

    report = check(fn, **options)
    if not report.passed:
        raise AssertionError("the estimator is not unbiased:\n" + report_text(report))
    return report


__all__ = ["assert_unbiased"]
