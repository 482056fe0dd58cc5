r"""The sampler: the process that draws the batches while the learner steps (``--max-staleness``).

It holds a copy of the policy at one version and the run's two random streams, and loops:

    for u = first, first + 1, …, max_updates:
        v(u) = max(start, u − 1 − k)     (``--stale-batches wait``: the version batch u is drawn at)
        v(u) = the newest it holds        (``drop``: the learner drops what is older than k)
        load version v(u) (waiting for it, bounded), draw batch u with the task's rollout
        (completions, or episodes with their tools and worlds), send it tagged (u, v(u))

The rollout is the one the alternating loop calls (``lm.rollout``), on a run of its own
(:class:`_SamplerRun`: the config, the task, the policy, the update counter the prompts' epochs
read); so at k = 0 the sampler draws exactly the alternating loop's batches, and at any k in
``wait`` a batch's draws depend on nothing but u and the weights of version v(u). A sampling
engine can take its place: it need only speak the channel (``lm.channel``).

Weights arrive on a thread of their own (:class:`_Versions`: a receive always posted, so the
learner's send never waits on the sampler's draw); in ``wait`` the versions a later batch needs
are kept (at most k + 1), in ``drop`` the newest only. SIGINT is the learner's to answer (the
terminal sends it to both): the sampler ignores it and is stopped by the learner.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from eligibility.lm.build import rollout_for, task_and_policy
from eligibility.lm.channel import STOP, Channel, Failed, Sampled, SyncLost, join_store
from eligibility.lm.config import FinetuneConfig
from eligibility.lm.phases import Phases
from eligibility.lm.policy import Policy
from eligibility.lm.rollout import Rollout
from eligibility.lm.rows import Rows
from eligibility.lm.tasks import Task


@dataclass(frozen=True)
class Plan:
    """What the learner tells its sampler at the start.

    Attributes:
        port: the learner's store.
        config: the run's config, resolved.
        user: TRL's objects from Python (``reward_funcs``, datasets, ``tools``,
            ``environment_factory``) and ``peft_config``, as ``finetune`` took them.
        rngs: the run's two streams' states (the prompts', the samples').
        start: the learner's version at the start (its updates so far).
        first: the first update to draw for (``start`` + 1 + the batches the learner holds).
        counters: the run's ``completions`` and ``tokens`` before batch ``first`` (what TRL's
            ``trainer_state`` shows an episode's reward functions, as in the alternating loop).
    """

    port: int
    config: FinetuneConfig
    user: dict[str, Any]
    rngs: list[dict[str, Any]]
    start: int
    first: int
    counters: dict[str, int]


@dataclass
class _Holder:
    """What a rollout reads of ``run.learner``: the policy it samples."""

    policy: Policy


@dataclass
class _SamplerRun:
    """The run as the sampler's rollout reads it (``lm.rollout.Run``)."""

    config: FinetuneConfig
    task: Task
    rollout: Rollout[Any]
    learner: _Holder
    rows: Rows
    t_max: int
    phase: Phases
    ref: None = None
    progress: None = None
    counters: dict[str, int] = field(default_factory=dict)


def serve(plan: Plan) -> None:
    """The sampler process's entry: build, say ``ready`` (or why not), then sample until stopped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the learner answers a stop, and stops this
    config, timeout = plan.config, plan.config.weight_sync_timeout
    store = join_store(plan.port, timeout)
    user = dict(plan.user)
    peft_config = user.pop("peft_config", None)
    try:
        config, task, policy, t_max = task_and_policy(
            config, measure=False, peft_config=peft_config, **user
        )
    except Exception as err:  # said to the learner, which ends the run with it
        store.set("failed", str(err) if isinstance(err, ValueError) else _line(err))
        return
    with contextlib.ExitStack() as stack:
        stack.callback(task.close)
        stack.enter_context(policy)
        stack.enter_context(policy.precision())
        store.set("ready", "1")
        channel = Channel(store, 1, timeout)
        with contextlib.suppress(SyncLost):  # the learner gone: nothing to send to
            _loop(plan, channel, config, task, policy, t_max)


def _line(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".splitlines()[0]


def _loop(
    plan: Plan, channel: Channel, config: FinetuneConfig, task: Task, policy: Policy, t_max: int
) -> None:
    """Draw batch after batch (see the module); a failure is sent as one line."""
    k, wait = config.max_staleness or 0, config.stale_batches == "wait"
    run = _SamplerRun(
        config=config,
        task=task,
        rollout=rollout_for(task),
        learner=_Holder(policy),
        rows=Rows(policy.ranks, lockstep=policy.sharded),
        t_max=t_max,
        phase=Phases(policy.synchronize),
        counters={"updates": 0, **plan.counters},
    )
    rngs = [np.random.default_rng() for _ in plan.rngs]
    for rng, state in zip(rngs, plan.rngs, strict=True):
        rng.bit_generator.state = state
    versions = _Versions(channel, policy.trained_state(), keep_all=wait)
    held = None
    # wait: one batch an update to the last; drop: on until stopped (some are dropped)
    last = config.max_updates if wait else None
    for u in itertools.takewhile(lambda u: last is None or u <= last, itertools.count(plan.first)):
        if versions.stopped.is_set():
            break
        version, tensors = versions.take(max(plan.start, u - 1 - k) if wait else None)
        if version != held:
            policy.load_trained_state(tensors)
            held = version
        run.counters["updates"] = min(u, config.max_updates) - 1  # the prompts' epoch
        try:
            drawn = run.rollout.draw(run, *rngs)
        except Exception as err:
            bad = isinstance(err, ValueError)
            channel.send_object(Failed(str(err) if bad else _line(err), bad), "a batch")
            return
        run.counters["completions"] += len(drawn.prompts)  # as the learner will count it
        run.counters["tokens"] += int(drawn.batch.lengths.sum())
        cpu = torch.device("cpu")
        drawn = drawn._replace(batch=drawn.batch.to(cpu), rewards=drawn.rewards.to(cpu))
        states = [r.bit_generator.state for r in rngs]
        channel.send_object(Sampled(u, version, drawn, states), "a batch")
    versions.stopped.wait()  # the learner stops this process (bounded on its side)


class _Versions:
    """The weights the learner sends, received on a thread of its own (see the module).

    Args:
        channel: the sampler's end.
        like: the policy's trained tensors (their names, shapes and dtypes).
        keep_all: keep every version not yet taken past (``wait``), else the newest only.
    """

    def __init__(self, channel: Channel, like: Mapping[str, torch.Tensor], keep_all: bool) -> None:
        self.channel, self.like, self.keep_all = channel, dict(like), keep_all
        self.held: dict[int, dict[str, torch.Tensor]] = {}
        self.changed = threading.Condition()
        self.stopped = threading.Event()
        self.error: SyncLost | None = None
        self.thread = threading.Thread(target=self._receive, name="weights", daemon=True)
        self.thread.start()

    def _receive(self) -> None:
        try:
            while True:
                version, tensors = self.channel.receive_weights(self.like)
                if version == STOP:
                    break
                with self.changed:
                    if not self.keep_all:
                        self.held.clear()
                    self.held[version] = tensors
                    self.changed.notify_all()
        except SyncLost as err:
            self.error = err
        finally:
            self.stopped.set()
            with self.changed:
                self.changed.notify_all()

    def take(self, version: int | None) -> tuple[int, dict[str, torch.Tensor]]:
        """Version ``version`` (None: the newest held), waiting for it (bounded by T).

        Raises:
            SyncLost: the learner stopped, or sent no such version within T.
        """
        deadline = time.monotonic() + self.channel.timeout_s
        with self.changed:
            while True:
                ready = [v for v in self.held if version is None or v == version]
                if ready:
                    v = max(ready)
                    for old in [w for w in self.held if w < v]:
                        del self.held[old]  # no later batch is drawn at an older version
                    return v, self.held[v]
                left = deadline - time.monotonic()
                if self.stopped.is_set() or left <= 0:
                    raise self.error or SyncLost(
                        f"the sampler waited {self.channel.timeout_s:g} s for version {version} "
                        "of the weights",
                        what="the weights",
                    )
                self.changed.wait(min(left, 1.0))


__all__ = ["Plan", "serve"]

if __name__ == "__main__":  # the learner starts this process (lm.feed): its plan on stdin
    import pickle
    import sys

    serve(pickle.load(sys.stdin.buffer))
