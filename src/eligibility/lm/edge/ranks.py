r"""The ranks of one run: ``torch.distributed`` as the launcher set it up, or one process.

A run launched by ``torchrun`` (or ``accelerate launch``, which starts its ranks with the
same environment: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``)
is ONE run across its W ranks, data-parallel: every rank holds the whole model, samples its
share of the batch's N rows, and the update is the one a single process makes,

    ∇_θ L = Σ_r Σ_{i ∈ rows(r)} (∂L/∂ℓᵢ)ᵀ ∇_θ ℓᵢ,

each rank's share of the gradient summed by one all-reduce (the engine's: gloo on the CPU,
NCCL on CUDA), with L the whole batch's loss (its advantages and normalisers the batch's; the
rows' completions, log-probs and rewards gathered to every rank). Without the launcher's
environment a :class:`Ranks` of one process does nothing. Every collective here has a deadline
(``ELIGIBILITY_RANK_TIMEOUT`` seconds, 300 by default): a rank that died or hangs ends the
others' wait with a :class:`RankLost` naming the cause, not a silent hang.
"""

from __future__ import annotations

import datetime
import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch


class RankLost(ValueError):
    """Another rank of the run stopped answering (killed, crashed or hung)."""


class Ranks:
    """This process's place among the run's ranks, and the collectives the run needs.

    Attributes:
        rank: this process's rank (0 writes the run directory, the logs and the checkpoints).
        world: W, the number of ranks.
        local: the rank on this machine (its CUDA device, where there are several).
    """

    def __init__(self, rank: int = 0, world: int = 1, local: int = 0) -> None:
        self.rank, self.world, self.local = rank, world, local
        self.owned = False  # whether this run formed the process group (and so leaves it)
        self.timeout = _seconds(os.environ.get("ELIGIBILITY_RANK_TIMEOUT", "300"))

    @classmethod
    def from_env(cls, device: str) -> Ranks:
        """The launcher's ranks (joining its process group), or one process without one.

        Args:
            device: ``--device`` as resolved: ``cuda`` joins with NCCL, anything else gloo.

        Raises:
            ValueError: the launcher's environment is incomplete or the group cannot form.
        """
        world = launched_world()
        if world <= 1:
            return cls()
        import torch.distributed as dist

        try:
            rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        except (KeyError, ValueError):
            raise ValueError(
                f"WORLD_SIZE={world} without a whole RANK (and LOCAL_RANK): start the ranks with "
                "torchrun or accelerate launch, which set them"
            ) from None
        ranks = cls(rank, world, local)
        if not dist.is_initialized():
            backend = "nccl" if device == "cuda" else "gloo"
            if backend == "nccl":
                torch.cuda.set_device(local)
            try:
                dist.init_process_group(backend, timeout=datetime.timedelta(seconds=ranks.timeout))
            except Exception as err:
                raise ValueError(
                    f"rank {rank} of {world} could not join the run's process group "
                    f"({type(err).__name__}: {str(err).splitlines()[0][:160]}); launch with "
                    "torchrun (or accelerate launch) on reachable hosts"
                ) from None
        return ranks

    @property
    def main(self) -> bool:
        """Whether this is rank 0, the one that writes."""
        return self.rank == 0

    def share(self, n: int) -> slice:
        """This rank's rows of ``n``: contiguous blocks, in rank order, sizes within one."""
        return _shares(n, self.world)[self.rank]

    @contextmanager
    def _guarded(self, what: str) -> Iterator[None]:
        try:
            yield
        except RuntimeError as err:  # gloo/NCCL: a peer closed, or the deadline passed
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
            raise RankLost(
                f"rank {self.rank} of {self.world}: another rank stopped answering during "
                f"{what} ({first}); it was killed, crashed or hung past "
                f"ELIGIBILITY_RANK_TIMEOUT={self.timeout:g} s"
            ) from None

    def rows(self, x: torch.Tensor, n: int, *, pad: float | int = 0, left: bool = False) -> Any:
        """Every rank's rows of ``x`` ([n_r, ...], this rank's share of ``n``) in rank order.

        Rows of different widths (dim 1) are padded with ``pad`` to the widest, on the left
        where ``left``: the batch's prompts are left-padded, its completions right-padded.
        """
        if self.world == 1:
            return x
        import torch.distributed as dist

        sizes = [s.stop - s.start for s in _shares(n, self.world)]
        with self._guarded("the gathering of the batch's rows"):
            width = x.shape[1] if x.dim() > 1 else 0
            widest = torch.tensor([width], device=x.device)
            dist.all_reduce(widest, op=dist.ReduceOp.MAX)
            if x.dim() > 1 and width < int(widest):
                fill = torch.full((x.shape[0], int(widest) - width, *x.shape[2:]), pad)
                fill = fill.to(dtype=x.dtype, device=x.device)
                x = torch.cat([fill, x] if left else [x, fill], dim=1)
            room = max(sizes)
            padded = torch.zeros((room, *x.shape[1:]), dtype=x.dtype, device=x.device)
            padded[: x.shape[0]] = x
            parts = [torch.empty_like(padded) for _ in range(self.world)]
            dist.all_gather(parts, padded.contiguous())
        return torch.cat([p[:k] for p, k in zip(parts, sizes, strict=True)])

    def objects(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (any picklable object), in rank order."""
        if self.world == 1:
            return [value]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        with self._guarded("the gathering of the rewards"):
            dist.all_gather_object(out, value)
        return out

    def sum_gradients(self, params: Sequence[torch.Tensor]) -> None:
        """Σ_r of every parameter's ``.grad`` over the ranks, in place (one flat all-reduce)."""
        if self.world == 1:
            return
        import torch.distributed as dist

        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        with self._guarded("the gradient's all-reduce"):
            dist.all_reduce(flat)
        at = 0
        for p, g in zip(params, grads, strict=True):  # views of the one reduced buffer
            p.grad = flat[at : at + g.numel()].view_as(g)
            at += g.numel()

    def largest(self, value: int) -> int:
        """max_r of an integer over the ranks."""
        if self.world == 1:
            return value
        import torch.distributed as dist

        t = torch.tensor([int(value)], dtype=torch.long)
        with self._guarded("an agreement between ranks"):
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t)

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (a picklable object)."""
        if self.world == 1:
            return value
        import torch.distributed as dist

        box = [value if self.main else None]
        with self._guarded("rank 0's broadcast"):
            dist.broadcast_object_list(box, src=0)
        return box[0]

    def broadcast_tensors(self, tensors: Sequence[torch.Tensor]) -> None:
        """Rank 0's values of ``tensors`` copied into every rank's, in place."""
        if self.world == 1:
            return
        import torch.distributed as dist

        with self._guarded("rank 0's broadcast"), torch.no_grad():
            for t in tensors:
                dist.broadcast(t.data, src=0)

    def close(self) -> None:
        """Leave the process group this run formed (one formed by its caller stays)."""
        if self.world > 1 and self.owned:
            import torch.distributed as dist

            if dist.is_initialized():
                try:  # leave together: a rank gone first can abort a peer still sending
                    dist.barrier()
                except RuntimeError:
                    pass  # a peer is gone already: nothing left to wait for
                dist.destroy_process_group()
            self.owned = False


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
    :meth:`Ranks.sum_gradients` does without sharding.
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


def clip_sharded(params: Sequence[torch.Tensor], max_norm: float) -> float:
    """‖g‖ over every rank's shards, and g scaled by min(1, c / (‖g‖ + 10⁻⁶)) as torch clips.

    Each rank holds disjoint shards of each gradient: the squares of its shards summed, one
    all-reduce, a square root: the whole gradient's norm, every rank alike.
    """
    import torch.distributed as dist

    local = torch.zeros((), dtype=torch.float64)
    grads = [p.grad for p in params if p.grad is not None]
    for g in grads:
        shard_ = g.to_local() if hasattr(g, "to_local") else g
        local += shard_.detach().double().pow(2).sum().cpu()
    dist.all_reduce(local)
    total = float(local.sqrt())
    coef = min(1.0, max_norm / (total + 1e-6))
    with torch.no_grad():
        for g in grads:
            g.mul_(coef)
    return total


def launched_world() -> int:
    """W, the ranks the launcher started (``WORLD_SIZE``; 1 without a launcher).

    Raises:
        ValueError: ``WORLD_SIZE`` is not a whole number ≥ 1.
    """
    text = os.environ.get("WORLD_SIZE", "1")
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"WORLD_SIZE={text!r}: the launcher sets a whole number of ranks >= 1")
    return int(text)


def _seconds(text: str) -> float:
    """``ELIGIBILITY_RANK_TIMEOUT`` as seconds > 0, or a ValueError that names it."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(
            f"ELIGIBILITY_RANK_TIMEOUT={text!r}: give the seconds a rank waits for the others, > 0"
        )
    return value


def _shares(n: int, world: int) -> list[slice]:
    """``n`` rows in ``world`` contiguous blocks, the first ``n mod world`` one row larger."""
    q, extra = divmod(n, world)
    starts = [r * q + min(r, extra) for r in range(world + 1)]
    return [slice(starts[r], starts[r + 1]) for r in range(world)]


__all__ = [
    "RankLost",
    "Ranks",
    "clip_sharded",
    "launched_world",
    "shard",
]
