r"""Where the learner's batches come from: the rollout in turn, or a sampler beside it.

The loop (``lm.trainer.finetune``) asks its feed for the batch of update u, and tells it each
update made; it never asks which feed it has:

- :class:`Alternating` (no ``--max-staleness``): the rollout draws batch u with the policy the
  learner holds (version u − 1), then the learner steps: the loop alternates;
- :class:`Overlapped` (``--max-staleness k``): a sampler process (``lm.sampler``) draws while
  the learner steps, every batch tagged with the version v that drew it; after each update the
  learner sends its weights (``lm.channel``). Batch u is learned at staleness
  s = (u − 1) − v ≤ k: in ``--stale-batches wait`` the sampler draws batch u at exactly
  v = max(start, u − 1 − k), so s = min(k, u − 1 − start) and the run is deterministic; in
  ``drop`` a batch with s > k is dropped (counted) and the next one taken.

Each update's ``async/staleness`` and ``async/dropped`` are the feed's (metrics.csv); the
ratio π_θ/μ that staleness makes, its spread and effective sample size, the update's own
(``lm.mismatch``), and its correction ``--importance-sampling`` (``exact``: unbiased).

**Exact resumes.** At a checkpoint after update u the learner holds the batches drawn for
u + 1 … u + k (at versions ≤ u − 1, gone from memory once it steps): it takes them from the
sampler, writes them beside the checkpoint (``async-pending-U.pt``) and saves the sampler's
streams as they stand after them. A resume hands them back to the learner, and the sampler
draws on from u + k + 1 at version u: the run's rows are the uninterrupted run's. A failure
keeps the checkpoint on disk (the batches in flight cannot be read back from a sampler that
died); ``drop`` resumes from its checkpoint, not row for row (its versions were timing's).
"""

from __future__ import annotations

import collections
import contextlib
import os
import pickle
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from eligibility._io import atomic_write_with
from eligibility.lm.channel import STOP, Channel, Failed, Sampled, SyncLost, open_store, wait_ready
from eligibility.lm.config import FinetuneConfig
from eligibility.lm.policy import Policy
from eligibility.lm.rollout import Drawn, Rollout, Run
from eligibility.lm.sampler import Plan

COLUMNS = ("async/staleness", "async/dropped")
"""The feed's columns of metrics.csv: the staleness of the batch learned (updates between the
policy that drew it and the one it trains), and the batches dropped before it (``drop``)."""

PENDING = "async-pending-{}.pt"
"""The batches in flight beside the checkpoint of update U (``--max-staleness``)."""

ASKED_S = 2.0
"""How long the learner waits for its sampler to end once sent the stop (an idle sampler ends
at once; one blocked sending a batch no one will take does not)."""

JOIN_S = 5.0
"""How long the learner then waits after SIGTERM, and after SIGKILL."""


class Alternating:
    """The rollout draws, then the learner steps: one process, version u − 1 for batch u."""

    def __init__(self, rollout: Rollout[Any]) -> None:
        self.rollout = rollout

    def draw(
        self, run: Run, prompt_rng: np.random.Generator, sample_rng: np.random.Generator
    ) -> Drawn[Any]:
        """The rollout's batch of the next update, drawn now."""
        return self.rollout.draw(run, prompt_rng, sample_rng)

    def columns(self) -> dict[str, int]:
        """Staleness 0, nothing dropped."""
        return dict.fromkeys(COLUMNS, 0)

    def updated(self, run: Run) -> None:
        """Nothing to send: the rollout samples the policy itself."""

    def save(self, home: Path | None, snapshot: dict[str, Any]) -> dict[str, Any]:
        """The snapshot as it is."""
        return snapshot

    def saved(self, home: Path | None, update: int) -> None:
        """Nothing beside the checkpoint."""

    failure_keeps_disk = False


class Overlapped:
    """A sampler process draws while the learner steps (see the module).

    Built by :meth:`start`; closed by the run's exit stack (the sampler stopped, bounded).
    """

    failure_keeps_disk = True

    def __init__(
        self,
        channel: Channel,
        process: Any,
        policy: Policy,
        config: FinetuneConfig,
        rngs: Sequence[np.random.Generator],
        held: list[Sampled],
    ) -> None:
        self.channel, self.process, self.policy = channel, process, policy
        self.k, self.wait = config.max_staleness or 0, config.stale_batches == "wait"
        self.rngs, self.held = list(rngs), collections.deque(held)
        self.last = held[-1].update if held else None  # the newest batch taken from the sampler
        self.learned = (0, 0)  # the last batch's (staleness, batches dropped before it)
        self.max_updates = config.max_updates
        self.store: Any = None  # the learner's store, kept open with the channel

    @classmethod
    def start(
        cls,
        config: FinetuneConfig,
        policy: Policy,
        user: dict[str, Any],
        rngs: Sequence[np.random.Generator],
        counters_now: dict[str, int],
        home: Path | None,
    ) -> Overlapped:
        """Start the sampler for a run at ``counters_now`` (the batches in flight held).

        Raises:
            ValueError: a run of several ranks, objects from Python that cannot go to another
                process, a batch in flight missing beside the checkpoint, or the sampler's own
                refusal (its build: bad input).
            SyncLost: the sampler died or did not start within ``--weight-sync-timeout``.
        """
        updates = counters_now["updates"]
        if policy.ranks.world > 1:
            raise ValueError(
                "max_staleness (--max-staleness) runs on one process (its sampler beside it); "
                "launched on several ranks, leave it out"
            )
        held = _read_pending(home, updates, config) if updates else []
        counters = {  # the learner's, and the held batches' to be counted
            "completions": counters_now["completions"] + sum(len(s.drawn.prompts) for s in held),
            "tokens": counters_now["tokens"] + sum(int(s.drawn.batch.lengths.sum()) for s in held),
        }
        timeout = config.weight_sync_timeout
        store = open_store(timeout)
        plan = Plan(
            port=store.port,
            config=config,
            user=user,
            rngs=[r.bit_generator.state for r in rngs],
            start=updates,
            first=updates + 1 + len(held),
            counters=counters,
        )
        try:
            payload = pickle.dumps(plan)
        except Exception as err:
            raise ValueError(
                "max_staleness (--max-staleness) starts its sampler in a process of its own, "
                f"and what was given from Python cannot go there ({type(err).__name__}: {err}); "
                "give module-level functions and classes"
            ) from None
        # a fresh interpreter (no main module run again), this one's import path, its own
        # session (the terminal's Ctrl-C is the learner's to answer)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        process = subprocess.Popen(
            [sys.executable, "-m", "eligibility.lm.sampler"],
            stdin=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        try:
            assert process.stdin is not None
            process.stdin.write(payload)
            process.stdin.close()
            wait_ready(store, lambda: _gone(process), timeout)
            channel = Channel(store, 0, timeout)
            feed = cls(channel, process, policy, config, rngs, held)
            feed.channel.send_weights(updates, policy.trained_state())  # version `updates`
        except BaseException:
            _stop(process)
            raise
        feed.store = store  # kept alive with the channel
        return feed

    def draw(
        self, run: Run, prompt_rng: np.random.Generator, sample_rng: np.random.Generator
    ) -> Drawn[Any]:
        """Batch u = updates + 1, as the sampler drew it (the wait is the ``sample`` phase).

        Raises:
            ValueError: the sampler's failure (a reward that raised, its one line).
            SyncLost: the sampler died, or sent nothing within ``--weight-sync-timeout``.
        """
        u, dropped = run.counters["updates"] + 1, 0
        with run.phase("sample"):
            while True:
                sampled = self.held.popleft() if self.held else self._receive()
                staleness = u - 1 - sampled.version
                if self.wait or staleness <= self.k:
                    break
                dropped += 1
        self.learned = (staleness, dropped)
        device = self.policy.device
        d = sampled.drawn
        return d._replace(batch=d.batch.to(device), rewards=d.rewards.to(device))

    def _receive(self) -> Sampled:
        sampled = self.channel.receive_object("a batch")
        if isinstance(sampled, Failed):
            if sampled.bad_input:
                raise ValueError(sampled.message)
            raise SyncLost(f"the sampler failed: {sampled.message}", what="a batch")
        for rng, state in zip(self.rngs, sampled.rngs, strict=True):
            rng.bit_generator.state = state  # the run's streams: the sampler's, after it
        self.last = sampled.update
        return sampled

    def columns(self) -> dict[str, int]:
        """The batch just learned: its staleness and the batches dropped before it."""
        return dict(zip(COLUMNS, self.learned, strict=True))

    def updated(self, run: Run) -> None:
        """Send the weights of the update just made (version = the updates so far)."""
        if run.counters["updates"] < run.config.max_updates:  # none is drawn past the last
            self.channel.send_weights(run.counters["updates"], self.policy.trained_state())

    def save(self, home: Path | None, snapshot: dict[str, Any]) -> dict[str, Any]:
        """Before a checkpoint of update U: take the batches drawn for U + 1 … U + k, write them.

        Returns the snapshot with the sampler's streams as they stand after those batches.
        """
        update = snapshot["counters"]["updates"]
        if not self.wait or home is None:
            return snapshot
        want = min(update + self.k, self.max_updates)
        while (self.last or update) < want:
            self.held.append(self._receive())
        held = [s for s in self.held if s.update > update]
        atomic_write_with(home / PENDING.format(update), lambda f: torch.save(held, f))
        return {**snapshot, "rngs": [r.bit_generator.state for r in self.rngs]}

    def saved(self, home: Path | None, update: int) -> None:
        """The checkpoint of ``update`` is on disk: the batches of older ones go."""
        if home is None:
            return
        for path in home.glob(PENDING.format("*")):
            with contextlib.suppress(ValueError, OSError):
                if int(path.name.split("-")[-1].split(".")[0]) < update:
                    path.unlink()

    def close(self) -> None:
        """Ask the sampler to stop (bounded), then end its process."""
        asked = False
        with contextlib.suppress(SyncLost, RuntimeError):
            if self.process.poll() is None:
                self.channel.send_weights(STOP, {})
                asked = True
        _stop(self.process, asked)


def _gone(process: subprocess.Popen[bytes]) -> str | None:
    if process.poll() is None:
        return None
    return f"its process ended (exit status {process.returncode})"


def _stop(process: subprocess.Popen[bytes], asked: bool = False) -> None:
    """End the sampler's process, each wait bounded by ``JOIN_S``.

    ``asked``: it was sent the stop (it ends by itself where it is not mid-send); else, or
    where it does not, SIGTERM, then SIGKILL.
    """
    steps = [(None, ASKED_S)] if asked else []
    for end, bound in (*steps, (process.terminate, JOIN_S), (process.kill, JOIN_S)):
        if end is not None:
            end()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(bound)
        if process.poll() is not None:
            return


def _read_pending(home: Path | None, updates: int, config: FinetuneConfig) -> list[Sampled]:
    """The batches in flight beside the checkpoint of ``updates`` (``wait``: a resume's).

    Raises:
        ValueError: they are missing (the run directory lost them).
    """
    if config.stale_batches != "wait" or home is None or not config.max_staleness:
        return []
    path = home / PENDING.format(updates)
    if not path.is_file():
        raise ValueError(
            f"{path} is missing: the batches in flight at the checkpoint of update {updates} "
            "(--max-staleness); without them the run cannot go on as it would have"
        )
    held = torch.load(path, weights_only=False)
    return [s for s in held if s.update <= config.max_updates]


__all__ = ["COLUMNS", "PENDING", "Alternating", "Overlapped"]
