r"""The ranks of one run: ``torch.distributed`` as the launcher set it up, or one process.

A run launched by ``torchrun`` (or ``accelerate launch``, which starts its ranks with the
same environment: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``)
is ONE run across its W ranks, data-parallel: every rank holds the whole model, samples its
share of the batch's N rows, and the update is the one a single process makes,

    ∇_θ L = Σ_r Σ_{i ∈ rows(r)} (∂L/∂ℓᵢ)ᵀ ∇_θ ℓᵢ,

each rank's share of the gradient summed by one all-reduce (the engine's: gloo on the CPU,
NCCL on CUDA), with L the whole batch's loss (its advantages and normalisers the batch's; the
rows' completions, log-probs and rewards gathered to every rank). Without the launcher's
environment a :class:`Ranks` of one process does nothing. The environment is read and checked
in one place (:func:`launch`). Every collective goes through one method, which puts its
tensors on the group's device, and has a deadline (``ELIGIBILITY_RANK_TIMEOUT`` seconds, 300
by default): a rank that died or hangs ends the others' wait with a :class:`RankLost` naming
the cause, not a silent hang; a backend that refuses a collective is a :class:`BackendError`.
"""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import os
import re
import signal
import socket
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


class RankLost(ValueError):
    """Another rank of the run stopped answering (killed, crashed or hung).

    Attributes:
        what: the collective it did not answer (None: not known).
        said: the first line of the process group's own error.
    """

    def __init__(self, text: str, *, what: str | None = None, said: str = "") -> None:
        super().__init__(text)
        self.what, self.said = what, said


class BackendError(ValueError):
    """The process group's backend refused a collective (not a lost rank)."""


@dataclass(frozen=True)
class Launch:
    """The launcher's environment, read and checked once (:func:`launch`).

    Attributes:
        rank: ``RANK``, in [0, ``world``).
        world: ``WORLD_SIZE``, W ≥ 1 (1: no launcher).
        local: ``LOCAL_RANK``, the rank on this machine (its CUDA device), in [0, ``world``).
    """

    rank: int = 0
    world: int = 1
    local: int = 0


def launch() -> Launch:
    """The ranks ``torchrun`` (or ``accelerate launch``) started, from the environment.

    ``WORLD_SIZE`` (1 without a launcher), ``RANK`` and ``LOCAL_RANK`` in [0, W), and where
    W > 1 ``MASTER_ADDR`` and ``MASTER_PORT`` (a port in [1, 65535]): every one checked here,
    before any rank waits for another, so a bad launch is refused at once by every rank.

    Raises:
        ValueError: a variable missing, not a whole number, or out of its range.
    """
    env = os.environ
    world = _whole("WORLD_SIZE", env.get("WORLD_SIZE", "1"), 1, None)
    if world == 1:
        for name in ("RANK", "LOCAL_RANK"):  # a lone process is rank 0: another value is a slip
            if name in env and _whole(name, env[name], 0, None) != 0:
                raise ValueError(
                    f"{name}={env[name]} without WORLD_SIZE > 1: a process alone is rank 0; "
                    f"start the ranks with torchrun or accelerate launch, or unset {name}"
                )
        return Launch()
    if "RANK" not in env:
        raise ValueError(
            f"WORLD_SIZE={world} without a whole RANK (and LOCAL_RANK): start the ranks with "
            "torchrun or accelerate launch, which set them"
        )
    rank = _whole("RANK", env["RANK"], 0, world - 1)
    local = _whole("LOCAL_RANK", env.get("LOCAL_RANK", "0"), 0, world - 1)
    if not env.get("MASTER_ADDR", "").strip():
        raise ValueError(
            f"WORLD_SIZE={world} without MASTER_ADDR: the ranks meet at rank 0's host; start "
            "them with torchrun or accelerate launch, which set it"
        )
    port = _whole("MASTER_PORT", env.get("MASTER_PORT", ""), 1, 65535)
    try:  # a name no resolver knows is certain at once: no rank waits out the timeout for it
        socket.getaddrinfo(env["MASTER_ADDR"].strip(), port)
    except socket.gaierror as err:
        raise ValueError(
            f"MASTER_ADDR={env['MASTER_ADDR'].strip()!r} names no host ({err.strerror}): give "
            "rank 0's host name or address (torchrun --master-addr, accelerate --main_process_ip)"
        ) from None
    return Launch(rank, world, local)


def home(where: torch.device) -> torch.device:
    """The device this process runs a run on ``where`` on: a local rank's own on CUDA.

    Under a launcher of W > 1 ranks a CUDA run's rank takes ``cuda:LOCAL_RANK`` (:func:`launch`)
    from the start, made CUDA's current device here, so that what torch makes without naming a
    device (a stream, a graph's capture, a context) is there too; anything else is ``where`` as
    it is. The set-up's device (``lm.edge.device.resolve``) and :meth:`Ranks.from_env` both
    take it from here: every rank loads, measures and trains its model on its own device.

    Raises:
        ValueError: the launcher's environment is bad (:func:`launch`), or ``LOCAL_RANK``
            names a CUDA device torch does not see here.
    """
    if where.type != "cuda":
        return where
    at = launch()
    if at.world == 1:
        return where
    if at.local >= (seen := torch.cuda.device_count()):
        raise ValueError(
            f"LOCAL_RANK={at.local}: torch sees {seen} CUDA device{'s' * (seen != 1)} here; "
            f"start at most {seen} ranks a machine (torchrun --nproc-per-node {seen})"
        )
    torch.cuda.set_device(at.local)
    return torch.device("cuda", at.local)


def _whole(name: str, text: str, low: int, high: int | None) -> int:
    """``name``'s ``text`` as a whole number in [low, high], or a ValueError that names it."""
    value = int(text) if text.strip().lstrip("-").isdigit() else None
    if value is None or value < low or (high is not None and value > high):
        within = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(
            f"{name}={text!r}: the launcher sets a whole number {within} (start the ranks "
            "with torchrun or accelerate launch)"
        )
    return value


def backend(device: str) -> str:
    """The process group's backends for a run on ``device`` (``--device`` as resolved).

    CUDA's collectives on NCCL and the CPU's on gloo: a CUDA run's group carries both
    (``cpu:gloo,cuda:nccl``), so a CPU tensor's collective has a backend too.
    """
    return "cpu:gloo,cuda:nccl" if device == "cuda" else "gloo"


class Ranks:
    """This process's place among the run's ranks, and the collectives the run needs.

    Every collective goes through one place (:meth:`_call`), which puts its tensors on the
    group's device (:attr:`device`) and reads a failure as a lost rank or a backend's refusal.

    Attributes:
        rank: this process's rank (0 writes the run directory, the logs and the checkpoints).
        world: W, the number of ranks.
        local: the rank on this machine (its CUDA device, where there are several).
        device: where a collective's tensors go: ``cuda:local`` on a CUDA run, else the CPU.
    """

    def __init__(
        self, rank: int = 0, world: int = 1, local: int = 0, device: torch.device | None = None
    ) -> None:
        self.rank, self.world, self.local = rank, world, local
        self.device = device if device is not None else torch.device("cpu")
        self.owned = False  # whether this run formed the process group (and so leaves it)
        self.timeout = _seconds(os.environ.get("ELIGIBILITY_RANK_TIMEOUT", "300"))
        self.gone = False  # a peer was lost: the run is ending (see :meth:`ending`)

    @classmethod
    def from_env(cls, device: str) -> Ranks:
        """The launcher's ranks (joining its process group), or one process without one.

        Args:
            device: ``--device`` as resolved: ``cuda`` joins NCCL for the CUDA tensors and
                gloo for the CPU's (:func:`backend`), on the rank's own device (:func:`home`),
                anything else gloo.

        Raises:
            ValueError: the launcher's environment is bad (:func:`launch`) or the group
                cannot form.
        """
        at = launch()
        if at.world <= 1:
            return cls()
        where = home(torch.device("cuda")) if device == "cuda" else torch.device("cpu")
        ranks = cls(at.rank, at.world, at.local, where)
        if not dist.is_initialized():
            try:
                timeout = datetime.timedelta(seconds=ranks.timeout)
                with _c10d_aside():  # its retries' logs and stack frames: our one line instead
                    dist.init_process_group(backend(device), timeout=timeout)
            except Exception as err:
                raise ValueError(
                    f"rank {at.rank} of {at.world} could not join the run's process group "
                    f"({type(err).__name__}: {_first(err)}); launch with torchrun (or "
                    "accelerate launch) on reachable hosts"
                ) from None
            ranks.owned = True  # left at the run's end (:meth:`close`)
        return ranks

    @property
    def main(self) -> bool:
        """Whether this is rank 0, the one that writes."""
        return self.rank == 0

    def for_rank(self, config: T) -> T:
        """``config`` as this rank runs it: only rank 0 writes the run directory and shows progress.

        Another rank's config has no ``out`` and no progress (the checkpointer keeps the run's
        directory, which every rank is given).
        """
        if self.main:
            return config
        return dataclasses.replace(config, out=None, progress=False)

    def lost(
        self,
        err: BaseException,
        what: str | None = None,
        *,
        kept: int | None = None,
        home: Path | None = None,
    ) -> RankLost:
        """The one line of a lost peer: which rank saw it go, during what, how, what stays.

        Args:
            err: the collective's error (a :class:`RankLost` keeps what it was and how).
            what: the collective it did not answer.
            kept: at the run's end, the update the checkpoint on disk holds (0: none), said
                with the command that resumes it; None: mid-run, nothing said of it.
            home: the run directory (None: nothing was written).
        """
        self.gone = True
        if isinstance(err, RankLost):
            what, said = what or err.what, err.said
        else:
            said = _first(err)
        how = (
            f"for ELIGIBILITY_RANK_TIMEOUT={self.timeout:g} s: it hangs"
            if "timed out" in said.lower()
            else "its connection closed: it was killed or crashed"
        )
        during = f" during {what}" if what else ""
        text = (
            f"rank {self.rank} of {self.world}: another rank stopped answering{during} ({how}; "
            f"the process group said: {said})"
        )
        if kept is not None:
            text += (
                "; nothing was written (no --out)"
                if home is None
                else f"; no update was checkpointed in {home}: start the run again"
                if kept == 0
                else f"; update {kept} is kept; resume with: eligibility finetune --resume {home}"
            )
        return RankLost(text, what=what, said=said)

    def ending(self) -> None:
        """After a lost peer, SIGTERM ignored once the stop flag's handlers are restored.

        So that the run's one line is said before it exits: the launcher sends SIGTERM to the
        ranks left as soon as one is gone, which would otherwise end this one silently while
        it closes its files. The launcher's SIGKILL, after its grace, still ends a rank that
        does not exit.
        """
        if self.gone and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def _call(self, what: str, collective: str, *args: object, **kw: object) -> list[Any]:
        """``torch.distributed.<collective>(*args)``, each tensor of it on the group's device.

        Returns the arguments as sent (a collective's results are in place in them). A
        failure is said by :meth:`_judged`.
        """
        sent = [_placed(a, self.device) for a in args]
        try:
            getattr(dist, collective)(*sent, **kw)
        except RuntimeError as err:
            raise self._judged(err, what) from None
        return sent

    @contextmanager
    def guarded(self, what: str) -> Iterator[None]:
        """Collectives run by torch's machinery inside (DDP's, in a backward) said as ours.

        A lost peer or the backend's error is a :class:`RankLost` or a :class:`BackendError`;
        any other error (the model's own) passes as it is.
        """
        try:
            yield
        except RuntimeError as err:
            if not (isinstance(err, dist.DistError) or peer_lost(err)):
                raise
            raise self._judged(err, what) from None

    def _judged(self, err: RuntimeError, what: str) -> ValueError:
        """A collective's failure as what it is: a lost rank, or the backend's refusal.

        A :class:`RankLost` where the connection to a peer went (:func:`peer_lost`), else a
        :class:`BackendError` naming what the backend said.
        """
        first = _first(err)
        if peer_lost(err):
            return self.lost(err, what)
        return BackendError(
            f"rank {self.rank} of {self.world}: the process group's backend refused {what} "
            f"on {self.device} ({type(err).__name__}: {first}); the ranks are all there: "
            "check --device and the torch build (a CUDA run joins NCCL and gloo)"
        )

    def rows(
        self, x: torch.Tensor, sizes: Sequence[int], *, pad: float | int = 0, left: bool = False
    ) -> torch.Tensor:
        """Every rank's rows of ``x`` ([sizes[rank], ...]) in rank order, where ``x`` was.

        Rows of different widths (dim 1) are padded with ``pad`` to the widest, on the left
        where ``left``: the batch's prompts are left-padded, its completions right-padded.
        """
        if self.world == 1:
            return x
        what = "the gathering of the batch's rows"
        width = x.shape[1] if x.dim() > 1 else 0
        (widest,) = self._call(what, "all_reduce", torch.tensor([width]), op=dist.ReduceOp.MAX)
        widest = int(widest)
        if x.dim() > 1 and width < widest:
            fill = torch.full((x.shape[0], widest - width, *x.shape[2:]), pad)
            fill = fill.to(dtype=x.dtype, device=x.device)
            x = torch.cat([fill, x] if left else [x, fill], dim=1)
        padded = x.new_zeros((max(sizes), *x.shape[1:]))
        padded[: x.shape[0]] = x
        parts = [torch.empty_like(padded, device=self.device) for _ in range(self.world)]
        parts, _ = self._call(what, "all_gather", parts, padded)
        whole = torch.cat([p[:k] for p, k in zip(parts, sizes, strict=True)])
        return whole.to(x.device)

    def objects(self, value: T) -> list[T]:
        """Every rank's ``value`` (any picklable object), in rank order."""
        if self.world == 1:
            return [value]
        out: list[Any] = [None] * self.world
        self._call("the gathering of the rewards", "all_gather_object", out, value)
        return out

    def largest(self, value: int) -> int:
        """max_r of an integer over the ranks."""
        if self.world == 1:
            return value
        t = torch.tensor([int(value)], dtype=torch.long)
        (t,) = self._call("an agreement between ranks", "all_reduce", t, op=dist.ReduceOp.MAX)
        return int(t)

    def broadcast(self, value: T) -> T:
        """Rank 0's ``value`` on every rank (a picklable object)."""
        if self.world == 1:
            return value
        box = [value if self.main else None]
        self._call("rank 0's broadcast", "broadcast_object_list", box, src=0)
        return box[0]

    def broadcast_tensors(self, tensors: Sequence[torch.Tensor]) -> None:
        """Rank 0's values of ``tensors`` copied into every rank's, in place."""
        if self.world == 1:
            return
        with torch.no_grad():
            for t in tensors:
                (sent,) = self._call("rank 0's broadcast", "broadcast", t.data, src=0)
                if sent is not t.data:
                    t.data.copy_(sent)

    def close(self, together: bool = True) -> None:
        """Leave the process group this run formed (one formed by its caller stays).

        ``together``: first wait for every rank at a barrier (a rank gone first can abort a
        peer still sending); a run that failed leaves at once (its peers may be in another
        collective, which a barrier would meet). A group never destroyed ends its process
        with gloo's threads still running: ``terminate called without an active exception``
        at the interpreter's exit, an exit status a scheduler reads as a failure.
        """
        if self.world > 1 and self.owned:
            if dist.is_initialized():
                if together:
                    try:
                        dist.barrier()
                    except RuntimeError:
                        pass  # a peer is gone already: nothing left to wait for
                dist.destroy_process_group()
            self.owned = False


_LOST = re.compile(
    r"closed|reset by peer|broken pipe|timed? ?out|abort|connection|EOF|unreachable|"
    r"remote process exited",
    re.I,
)
"""What gloo, NCCL and the store say when a peer is gone (else: the backend refused)."""


def peer_lost(err: BaseException) -> bool:
    """Whether ``err`` is a collective that failed because another rank is gone.

    A :class:`RankLost` (ours), the process group's network error, or a ``RuntimeError`` whose
    first line says a peer's connection went (:data:`_LOST`): gloo's, as an FSDP all-gather
    raises it when a rank was killed, NCCL's and the store's.
    """
    return isinstance(err, RankLost | dist.DistNetworkError) or (
        isinstance(err, RuntimeError) and bool(_LOST.search(_first(err)))
    )


def _placed(a: object, device: torch.device) -> object:
    """A tensor (or each of a list's) on ``device``; anything else as it is."""
    if isinstance(a, torch.Tensor):
        return a.to(device)
    if isinstance(a, list) and a and all(isinstance(t, torch.Tensor) for t in a):
        return [t.to(device) for t in a]
    return a


@contextmanager
def _c10d_aside() -> Iterator[None]:
    """The process's stderr (file descriptor 2) held aside while the process group forms.

    c10d's C++ side logs each failed try to reach rank 0's store, with the error's stack
    frames (40–50 lines for an unreachable ``MASTER_ADDR`` or a rank 0 never started), on the
    descriptor itself, past Python's ``sys.stderr``; ``TORCH_CPP_LOG_LEVEL`` is read once,
    when torch is imported. What it wrote is passed on when the group forms and dropped when
    it does not: the caller's one line says why.
    """
    import sys
    import tempfile

    try:
        if sys.stderr is not None:
            sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no descriptor 2 to hold (a closed or odd stderr)
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        formed = False
        try:
            yield
            formed = True
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if formed:
                held.seek(0)
                os.write(2, held.read())


def _first(err: BaseException) -> str:
    """The first line of an error's text (its type's name where it has none), whole."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:240]


class _Pass(torch.nn.Module):
    """A gradient pass over ``model``'s parameters, as a module DDP can wrap.

    The scoring pass need not be ``model``'s own call (a direct forward, a decoder and a head):
    whatever :attr:`run` computes from the parameters is the module's output, so DDP's hooks
    see every pass, whichever forward it takes.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.run: Callable[..., Any] | None = None

    def forward(self, *args: object) -> Any:
        return self.run(*args)


def replicate(model: torch.nn.Module) -> torch.nn.parallel.DistributedDataParallel:
    """Data-parallel over the process group: DDP, its gradient summed over the ranks.

    Each rank backpropagates its rows; DDP all-reduces the gradient bucket by bucket while
    the backward runs (the buckets' sums overlap the layers still to go). Its comm hook sums
    (DDP's own averages): the gradient is Σ_r of the ranks' shares (the module docstring).
    The weights are rank 0's already (``Policy`` broadcasts them), so DDP does not send them.
    """
    from torch.nn.parallel import DistributedDataParallel

    # no buffer is sent before each forward (rank 0's are every rank's): the keyword is
    # forward_sync_buffers from torch 2.13 on, broadcast_buffers before it
    quiet = "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
    buffers = {"forward_sync_buffers" if quiet else "broadcast_buffers": False}
    ddp = DistributedDataParallel(_Pass(model), init_sync=False, **buffers)
    ddp.register_comm_hook(None, _summed)
    return ddp


def _summed(state, bucket):  # type: ignore[no-untyped-def]  # (DDP reads the annotations)
    """DDP's comm hook: the bucket's Σ over the ranks (gloo, NCCL: one all-reduce each)."""
    work = dist.all_reduce(bucket.buffer(), async_op=True)
    assert work is not None
    return work.get_future().then(lambda fut: fut.value()[0])


def shard(model: torch.nn.Module, world: int) -> torch.nn.Module:
    """FSDP2 over the ranks: each block of every layer list, then the whole model, sharded.

    ``fully_shard`` on each item of the model's ``nn.ModuleList``s (the transformer blocks:
    one all-gather per block in a forward, its weights resharded after) and on the root (the
    embeddings and the head, tied or not). The root too is resharded after each forward
    (FSDP2 keeps a root gathered by default, for the backward that usually follows): a run
    calls forwards without gradient (a probe, the sampling, the scoring) before it builds its
    optimiser and between steps, and a root left gathered would hand ``parameters()`` its
    gathered copies, which the optimiser would step and the next gather overwrite. The
    reduce-scatter of the gradient sums the ranks' shares (divide factor 1), as
    DDP does without sharding (:func:`replicate`).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    # a block that returns a view of its input is told of in-place ops on it; none is made on
    # a block's output here (the sharded runs equal the unsharded ones: tests/test_lm_ranks.py)
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    kind = next((p.device.type for p in model.parameters()), "cpu")
    mesh = init_device_mesh(kind, (world,))
    for lists in [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]:
        for block in lists:
            if any(p.requires_grad or p.numel() for p in block.parameters()):
                fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh, reshard_after_forward=True)
    for m in model.modules():
        if hasattr(m, "set_gradient_divide_factor"):
            m.set_gradient_divide_factor(1.0)  # a sum, and as a plain SUM (gloo has no other)
            m.set_force_sum_reduction_for_comms(True)
    return model


def _seconds(text: str) -> float:
    """``ELIGIBILITY_RANK_TIMEOUT`` as seconds > 0, or a ValueError that names it."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= MAX_RANK_TIMEOUT_S:  # inf: the process group's timedelta overflowed
        raise ValueError(
            f"ELIGIBILITY_RANK_TIMEOUT={text!r}: give the seconds a rank waits for the others, > 0 "
            f"and at most {MAX_RANK_TIMEOUT_S:.0e}"
        )
    return value


MAX_RANK_TIMEOUT_S = 1e7
"""The longest ``ELIGIBILITY_RANK_TIMEOUT`` taken (some four months): ``inf`` or ``1e309`` could
not be the process group's ``timedelta``, and a rank that waits longer has been lost anyway."""


__all__ = [
    "BackendError",
    "Launch",
    "RankLost",
    "Ranks",
    "backend",
    "home",
    "launch",
    "peer_lost",
    "replicate",
    "shard",
]
