"""A counter to bring to a target, in TRL's ``environment_factory`` convention (the agent race's).

The tutorial's ``Counter`` (``docs/tutorials/agent.md``) with the target in the row: the model
reads "Reach T" and where the counter starts, and must call ``increment`` with T − start. One
instance an episode, ``reset(**row)`` with the row's columns, ``increment`` the one tool.
Standalone, nothing of ``eligibility`` imported: ``eligibility finetune --env
bench/lm/counter.py:Counter`` and ``GRPOTrainer(environment_factory=Counter)`` are given the same
class, and :func:`reached` is the reward of both.
"""

from __future__ import annotations


class Counter:
    """A counter that starts at the row's ``start``; the episode succeeds at the ``target``."""

    def reset(self, start: int = 0, target: int = 10, **row) -> str:
        """A new episode; its text is appended to the user's message."""
        self.n, self.target = int(start), int(target)
        return f" The counter starts at {start}."

    def increment(self, a: int) -> int:
        """Add to the counter.

        Args:
            a: The value to add.
        """
        self.n += int(a)
        return self.n


def reached(completions, environments, **kwargs) -> list[float]:
    """1.0 for an episode whose counter ended at its target, else 0.0 (TRL's reward signature)."""
    return [float(env.n == env.target) for env in environments]
