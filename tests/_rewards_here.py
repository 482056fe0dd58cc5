"""A run's reward functions called in the test's process, not in their forked worker.

``lm.rewards.Rewards`` imports and calls the user's functions in a forked worker
(``eligibility._isolate.Worker``): in a test worker that has loaded torch and transformers the
fork and its teardown cost about 0.05 CPU-s, about what a tiny run's whole training costs. What
a test of resuming, checkpoints, ties or the loss asserts is a function of the rewards, and
these are the same numbers either way: the same functions, on the same prompts and
completions, called once a batch. ``tests/test_lm.py``'s
``test_a_runs_rewards_called_here_are_the_rewards_of_its_worker`` holds a run made here
against the worker's. The worker itself (a reward that raises, exits, hangs, returns the wrong
thing, or does not import) is tested by the tests that do not take this: ``tests/test_lm_user.py``,
``tests/test_lm.py``'s failing rewards. Only ``Rewards``' worker is replaced: environments,
data readers and model factories keep theirs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def rewards_here() -> Iterator[None]:
    """Inside, every ``Rewards`` made calls its functions here (the worker's unforked path)."""
    from eligibility._isolate import Worker
    from eligibility.lm import rewards

    class Here(Worker):
        @property
        def isolated(self) -> bool:
            return False

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rewards, "Worker", Here)
        yield
