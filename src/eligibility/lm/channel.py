r"""The one channel between a run's sampler and its learner: batches one way, weights the other.

With ``--max-staleness`` a run is two processes: the learner (the process ``finetune`` runs
in) and the sampler (``lm.sampler``). They meet in a process group of their own (gloo, over
the loopback; a :class:`torch.distributed.TCPStore` the learner holds), apart from any group
a launcher made, and speak through two paths only:

- **batches**, sampler → learner: each a :class:`Sampled` (the update it is for, the version
  of the policy that drew it, the batch, the sampler's random streams after it), or a
  :class:`Failed` naming what stopped the sampler;
- **weights**, learner → sampler: a version v (the learner's updates so far), then the trained
  tensors in the policy's order (the adapters alone under LoRA), each as its bytes; v = −1
  asks the sampler to stop.

A version is the number of updates behind the weights: a batch drawn at version v and learned
at update u (the learner holding version u − 1) is u − 1 − v updates stale.

**Every wait is bounded** by ``--weight-sync-timeout`` T (the group's own timeout): a peer
that died ends the wait at once (its socket closed), one that hangs ends it at T; either is a
:class:`SyncLost` naming the wait, T and the cause. Gloo's send waits for the matching receive,
so the sampler keeps a receive for weights always posted (a thread of its own) and the learner
receives a batch only when it is about to learn it: the sampler is at most one batch ahead of
the learner's wait, and no two sends wait on each other.
"""

from __future__ import annotations

import datetime
import io
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

BATCHES, WEIGHTS = 1, 2
"""The two paths' tags."""

STOP = -1
"""The version that asks the sampler to stop."""

TIMEOUT_FLAG = "--weight-sync-timeout"


class SyncLost(ValueError):
    """A wait between the sampler and the learner ended without what it waited for.

    Attributes:
        what: what was waited for (``a batch``, ``the weights``, ``the sampler's start``).
    """

    def __init__(self, text: str, *, what: str) -> None:
        super().__init__(text)
        self.what = what


@dataclass
class Sampled:
    """A batch as the sampler sends it.

    Attributes:
        update: the update it is for (1-based: the learner's update number).
        version: the policy version that drew it (the learner's updates behind those weights).
        drawn: the rollout's ``Drawn`` (prompts, batch, rewards, scorable), on the CPU.
        rngs: the sampler's random streams' states after drawing it (the run's ``rngs``).
    """

    update: int
    version: int
    drawn: Any
    rngs: list[dict[str, Any]]


@dataclass
class Failed:
    """What stopped the sampler, said in one line (``ValueError``: the user's input or code)."""

    message: str
    bad_input: bool


def open_store(timeout_s: float) -> dist.TCPStore:
    """The learner's store on the loopback, on a free port (``store.port``)."""
    return dist.TCPStore("127.0.0.1", 0, 2, True, timeout=_delta(timeout_s), wait_for_workers=False)


def join_store(port: int, timeout_s: float) -> dist.TCPStore:
    """The sampler's client of the learner's store."""
    return dist.TCPStore("127.0.0.1", port, 2, False, timeout=_delta(timeout_s))


def _delta(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


class Channel:
    """One end of the pair: rank 0 the learner, rank 1 the sampler (see the module).

    Args:
        store: the learner's store (:func:`open_store`, :func:`join_store`).
        rank: 0 (learner) or 1 (sampler).
        timeout_s: T, every wait's bound.
    """

    def __init__(self, store: dist.Store, rank: int, timeout_s: float) -> None:
        options = dist.ProcessGroupGloo._Options()
        options._timeout = _delta(timeout_s)
        options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        self.group = dist.ProcessGroupGloo(dist.PrefixStore("channel", store), rank, 2, options)
        self.rank, self.peer, self.timeout_s = rank, 1 - rank, timeout_s
        self.names = ("learner", "sampler")

    # -- the batches -----------------------------------------------------------------------
    def send_object(self, value: Any, what: str) -> None:
        """``value`` pickled (``torch.save``), on the batches' path."""
        buffer = io.BytesIO()
        torch.save(value, buffer)
        payload = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
        with self.guarded(what, "send"):
            self.group.send([torch.tensor([payload.numel()])], self.peer, BATCHES).wait(self.bound)
            self.group.send([payload], self.peer, BATCHES).wait(self.bound)

    def receive_object(self, what: str) -> Any:
        """The next value on the batches' path (bounded: :class:`SyncLost`)."""
        size = torch.zeros(1, dtype=torch.int64)
        with self.guarded(what, "receive"):
            self.group.recv([size], self.peer, BATCHES).wait(self.bound)
            payload = torch.empty(int(size), dtype=torch.uint8)
            self.group.recv([payload], self.peer, BATCHES).wait(self.bound)
        return torch.load(io.BytesIO(payload.numpy().tobytes()), weights_only=False)

    # -- the weights -----------------------------------------------------------------------
    def send_weights(self, version: int, tensors: Mapping[str, torch.Tensor]) -> None:
        """Version ``version`` of the trained tensors (``STOP``: none follow)."""
        with self.guarded("the weights", "send"):
            self.group.send([torch.tensor([version])], self.peer, WEIGHTS).wait(self.bound)
            for t in tensors.values():
                data = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
                self.group.send([data], self.peer, WEIGHTS).wait(self.bound)

    def receive_weights(self, like: Mapping[str, torch.Tensor]) -> tuple[int, dict[str, Any]]:
        """(version, tensors shaped as ``like``'s, on the CPU); (``STOP``, {}) to stop."""
        header = torch.zeros(1, dtype=torch.int64)
        with self.guarded("the weights", "receive"):
            self.group.recv([header], self.peer, WEIGHTS).wait(self.bound)
            version = int(header)
            if version == STOP:
                return STOP, {}
            out = {}
            for name, t in like.items():
                data = torch.empty(t.numel() * t.element_size(), dtype=torch.uint8)
                self.group.recv([data], self.peer, WEIGHTS).wait(self.bound)
                out[name] = data.view(t.dtype).reshape(t.shape)
        return version, out

    @property
    def bound(self) -> datetime.timedelta:
        """T, as each wait is given it."""
        return _delta(self.timeout_s)

    def guarded(self, what: str, verb: str) -> _Guard:
        """Gloo's error of a wait on ``what`` as one :class:`SyncLost` line."""
        return _Guard(self, what, verb)


class _Guard:
    def __init__(self, channel: Channel, what: str, verb: str) -> None:
        self.channel, self.what, self.verb = channel, what, verb

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, err: BaseException | None, _: Any) -> None:
        if not isinstance(err, RuntimeError):
            return
        me, peer = (self.channel.names[r] for r in (self.channel.rank, self.channel.peer))
        bound = f"{TIMEOUT_FLAG} {self.channel.timeout_s:g} s"
        said = str(err)
        if "Timed out" in said or "timed out" in said:
            cause = f"the {peer} did not answer within {bound}"
        else:
            cause = f"the {peer} stopped (its connection closed)"
        raise SyncLost(
            f"the {me} could not {self.verb} {self.what}: {cause}", what=self.what
        ) from None


START_S = 300.0
"""The least bound of the sampler's start (its interpreter, torch, the task and the model built):
``max(--weight-sync-timeout, START_S)``."""


def wait_ready(store: dist.Store, alive: Callable[[], str | None], timeout_s: float) -> None:
    """Wait, bounded by max(T, :data:`START_S`), until the sampler says it is built or why not.

    ``alive()`` says why the sampler's process is gone (None while it runs): a sampler that
    died before it could say so ends the wait at once.

    Raises:
        ValueError: the sampler's own reason (its ``failed`` key): bad input, said as it was.
        SyncLost: it died, or said nothing within T.
    """
    bound = max(timeout_s, START_S)
    deadline = time.monotonic() + bound
    while True:
        if store.check(["failed"]):
            raise ValueError(store.get("failed").decode())
        if store.check(["ready"]):
            return
        if (gone := alive()) is not None:
            raise SyncLost(f"the sampler could not start: {gone}", what="the sampler's start")
        if time.monotonic() > deadline:
            raise SyncLost(
                f"the sampler did not start within {bound:g} s (max({TIMEOUT_FLAG}, {START_S:g}))",
                what="the sampler's start",
            )
        time.sleep(0.05)


__all__ = [
    "BATCHES",
    "START_S",
    "STOP",
    "WEIGHTS",
    "Channel",
    "Failed",
    "Sampled",
    "SyncLost",
    "join_store",
    "open_store",
    "wait_ready",
]
