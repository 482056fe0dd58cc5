"""A run's user code (its reward functions, its tools' environments) called in the test's
process, not in its forked worker.

``lm.rewards.Rewards`` and ``lm.episodes.worker.Worlds`` run the user's code in a forked worker
(``eligibility._isolate.Worker``): in a test worker that has loaded torch and transformers the
fork and its teardown cost about 0.05 CPU-s, about what a tiny run's whole training costs. What
a test of resuming, checkpoints, ties, the loss or an episode's tokens asserts is a function of
the rewards and of the environments' answers, and these are the same either way: the same
code, on the same requests, in the same order (the worker's unforked path, ``isolated``
False, which serves each request in turn). ``tests/test_lm.py``'s
``test_a_runs_rewards_called_here_are_the_rewards_of_its_worker`` and
``tests/test_episodes_chat.py``'s ``test_episodes_played_here_are_the_episodes_of_the_worker``
hold the two against their workers. The workers themselves (user code that raises, exits,
hangs, returns the wrong thing or does not import; a stop while it runs) are tested by the
tests that do not take these: ``tests/test_lm_user.py``, ``tests/test_episodes_tools.py``,
``tests/test_episodes_gym.py``, ``tests/test_episodes_worlds.py``. Nothing else is replaced:
data readers and model factories keep their workers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest


def _here() -> type:
    from eligibility._isolate import Worker

    class Here(Worker):
        """A worker whose setup and calls run in this process, in turn."""

        @property
        def isolated(self) -> bool:
            return False

    return Here


@contextlib.contextmanager
def rewards_here() -> Iterator[None]:
    """Inside, every ``Rewards`` made calls its functions here (the worker's unforked path)."""
    from eligibility.lm import rewards

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rewards, "Worker", _here())
        yield


@contextlib.contextmanager
def worlds_here() -> Iterator[None]:
    """Inside, every ``Worlds`` made (a toolbox's environments, a task's) serves them here."""
    from eligibility.lm.episodes import worker

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(worker, "Worker", _here())
        yield
