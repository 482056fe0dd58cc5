"""A calculator environment in TRL's ``environment_factory`` convention (the tool race's).

Written as a TRL user writes one for ``GRPOTrainer(environment_factory=Calculator)``: one
instance an episode, ``reset(**row)`` with the row's columns, every public method a tool the
model may call, described to it by its signature and Google-style docstring. No
``get_reward``: the task's reward scores the final reply. Standalone, nothing of
``eligibility`` imported, so ``eligibility finetune --env bench/lm/calculator.py:Calculator``
and ``GRPOTrainer`` are given the same class, unchanged. ``CALCULATOR_DELAY_S`` (seconds,
default 0): each call takes that long, a slow tool's latency (``lm_async.py --tool-delay``).
"""

from __future__ import annotations

import os
import time


class Calculator:
    """Multiplies two integers for the model; counts the calls of its episode."""

    def reset(self, **row) -> None:
        """A new episode (the row's columns are not needed: nothing is appended to the prompt)."""
        self.calls = 0

    def multiply(self, a: int, b: int) -> int:
        """Multiply two integers.

        Args:
            a: The first factor.
            b: The second factor.
        """
        self.calls += 1
        time.sleep(float(os.environ.get("CALCULATOR_DELAY_S", "0")))
        return int(a) * int(b)  # a model may write "347" for 347
