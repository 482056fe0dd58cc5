r"""The run's state on disk: in which form, where, by which rank, and back.

As torchtitan's ``CheckpointManager``: one object, built beside the
:class:`~eligibility.lm.policy.Policy`, that the loop asks to save, to resume and to export;
the loop never asks whether the policy is sharded or which rank it runs on. The state has
four forms:

- **whole**: the learner's ``state_dict`` (``policy.*``, ``optim.*``), the tensors themselves,
  which rank 0 writes as the run layer's ``checkpoint.safetensors`` (data-parallel, every rank
  holds this same state);
- **shards** (``--fsdp``): each rank writes its own shards (``torch.distributed.checkpoint``)
  into one of two directories, ``checkpoint.shards-0`` or ``-1`` (the slot the checkpoint on
  disk does not name, cleared first); rank 0 then writes ``checkpoint.safetensors``, its only
  tensor ``shards`` naming that slot, atomically and last: a run killed while writing keeps
  the previous checkpoint whole. After each checkpoint rank 0 removes the slot it no longer
  names (and a sharded run's slots, once a run resumed without ``--fsdp`` writes whole);
- **gathered**: a sharded policy's state gathered whole to rank 0, for a sharded policy
  without a run directory;
- **a model directory beside** (a whole Hugging Face model, not LoRA, not sharded): rank 0 writes
  the weights as ``save_pretrained`` does into one of two directories, ``checkpoint.model-0`` or
  ``-1`` (the slot the checkpoint on disk does not name, cleared first), then
  ``checkpoint.safetensors`` with Adam's state alone, naming that file, its size and fingerprint,
  atomically and last: a run killed at any point keeps the previous pair whole. At the end the run's
  ``model/`` holds a clone of the named file (copy-on-write where the file system has it, else a
  copy: never a hard link, so that no write to ``model/`` reaches the checkpoint); a slot lost or
  damaged is read back from ``model/`` where that holds the very file the checkpoint names (its size
  and fingerprint). A LoRA run keeps its adapters (a few MB) in the checkpoint, and a sharded run
  its shards (no rank holds the whole weights to write them as one file); a model whose saved names
  are not its own (an architecture ``transformers`` renames on saving) keeps them in the checkpoint
  too, and the end exports them apart.

The run's own state (counters, RNGs, history, the update on disk) is a
:class:`~eligibility.runs.TrainState` the checkpointer is handed, as torchtitan's is handed its
``Stateful`` objects: it asks the state for a snapshot and loads a saved one into it, and
never writes a field of the run. A resume: rank 0 reads the checkpoint into its state (the run
layer checks it against the config and the history), sends that state and the tensors to every
rank, and every rank loads them (a shards slot read resharded, on any number of ranks, sharded
or not). Nothing is written before the run's first row (:class:`~eligibility.runs.RunDir`): a
resume that fails leaves the run as it was. A failure mid-run checkpoints the last completed
update where the ranks left can (rank 0's whole state, not a lost rank's shards), and a lost
rank ends the run with the ranks' one line (:meth:`~eligibility.lm.edge.ranks.Ranks.lost`)
naming the update the checkpoint on disk holds and the command that resumes it.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from eligibility.lm.edge import checkpoint as disk
from eligibility.lm.edge import hf
from eligibility.lm.edge.ranks import peer_lost
from eligibility.lm.learner import Learner, optim_state
from eligibility.lm.tokenizer import Tokenizer
from eligibility.runs import CHECKPOINT, RunDir, TrainState

SHARDS = "shards"
"""The name, in a sharded run's checkpoint, of the tensor that says which of the two shard
directories (``checkpoint.shards-0`` or ``-1``) holds its weights and Adam's state."""


class Checkpointer:
    """The learner's state in the run directory ``home`` (every rank's path to it; None: none).

    Args:
        learner: the policy and its optimiser.
        home: the run directory (every rank is given it; rank 0 writes the run layer's files).
    """

    def __init__(self, learner: Learner, home: str | Path | None) -> None:
        self.learner, self.policy = learner, learner.policy
        self.ranks = self.policy.ranks
        self.home = None if home is None else Path(home)
        self.shards, self.models = _Slots(self.home, SHARDS), _Slots(self.home, "model")
        # the weights as the exported model's file (the whole of a Hugging Face model)
        self.beside = not self.policy.sharded and not self.policy.adapters
        self.beside = self.beside and self.policy.exportable
        self._current: tuple[dict[str, Any], int] | None = None  # the file of the weights now

    # -- the forms ---------------------------------------------------------------------------

    def state(self) -> dict[str, torch.Tensor]:
        """The tensors of the checkpoint file (every rank of a sharded run calls it).

        Whole: the learner's own. Sharded with a run directory: each rank's shards written into
        the free slot, and the tensor naming it; without one: the whole state on rank 0.
        """
        if not self.policy.sharded:
            return self.learner.state_dict()
        names, model, optimizer = self._parts()
        if self.home is None:
            weights, optim = disk.full_state(model, optimizer, names)
            out = {f"policy.{k}": v for k, v in weights.items()}
            for i, s in optim.items():
                out.update({f"optim.{i}.{k}": torch.as_tensor(v) for k, v in s.items()})
            return out
        slot = self.ranks.broadcast(self.shards.free() if self.ranks.main else None)
        disk.save_shards(model, optimizer, names, self.shards.dir(slot), self.ranks.main)
        return {SHARDS: torch.tensor([slot])}

    def load(self, tensors: Mapping[str, torch.Tensor], optimizer: bool = True) -> None:
        """Load a checkpoint's tensors, of any form, into this policy (sharded or not).

        Raises:
            ValueError: a shards slot missing or damaged, or of another model; under LoRA, an
                adapter missing.
        """
        names, model, optim = self._parts()
        optim = optim if optimizer else None
        if SHARDS in tensors:  # a sharded run's checkpoint: its slot, resharded for this one
            slot = self.shards.dir(int(tensors[SHARDS][0]))
            disk.load_shards(model, optim, names, slot, self.policy.sharded)
        elif self.policy.sharded:  # a whole state, sharded as it is loaded
            weights = {k[len("policy.") :]: v for k, v in tensors.items() if k[:7] == "policy."}
            disk.load_full_state(model, optim, weights, optim_state(tensors), names)
        else:
            self.learner.load_state_dict(tensors, optimizer)

    def expected(self) -> Mapping[str, Any]:
        """The names and shapes the checkpoint in ``home`` must hold (``runs.read_checkpoint``).

        Nothing for a shards slot (its directory is checked as it is read); else the whole
        form, whose shapes a sharded policy gives without gathering a tensor.
        """
        if self.shards.named() is not None or self.models.named() is not None:
            return {}  # the weights' names and shapes are checked as their file is read
        if not self.policy.sharded:
            return self.learner.state_dict()
        seen: set[int] = set()
        out: dict[str, Any] = {}
        trained = self.policy.trainable_names()
        for k, v in self.policy.model.state_dict(keep_vars=True).items():
            if id(v) in seen or (self.policy.adapters and k not in trained):
                continue  # a tied weight once (as the whole form); the adapters alone
            seen.add(id(v))
            out[f"policy.{k}"] = np.broadcast_to(np.zeros((), np.float32), tuple(v.shape))
        return out

    # -- the run's checkpoints ---------------------------------------------------------------

    def save(self, files: RunDir | None, snapshot: Mapping[str, Any]) -> bool:
        """Checkpoint the state now with ``snapshot``'s counters and RNGs (every rank calls it).

        Rank 0 writes (``files``, the run layer's); under sharding every rank writes its
        shards first. Then rank 0 removes the shard slots the new checkpoint does not name.

        Returns:
            Whether the run wrote a checkpoint (every rank alike: it has a directory).
        """
        if self.home is None:
            return False
        if files is not None and self.beside and (record := self._save_model()) is not None:
            optim = {k: v for k, v in self.learner.state_dict().items() if k[:7] != "policy."}
            files.checkpoint(optim, snapshot, {disk.RECORD: record})
            self._current = record, self.learner.steps
            self._drop_stale()
        elif self.ranks.main or self.policy.sharded:
            state = self.state()
            if files is not None:
                files.checkpoint(state, snapshot)
                self._drop_stale()
        return True

    def _save_model(self) -> dict[str, Any] | None:
        """Rank 0: the weights written into the free model slot (None: not in that form)."""
        slot = self.models.free()
        record = disk.save_model(self.policy.model, self.models.dir(slot))
        self.beside = record is not None  # a model saved under other names: in the checkpoint
        return record

    def read(self, tensors: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
        """A checkpoint's tensors with its weights, where they are in a file beside it.

        Raises:
            ValueError: that file missing, damaged, another one, or of another model.
        """
        record = None if self.home is None else disk.named_weights(self.home / CHECKPOINT)
        if record is None:
            return tensors
        weights = disk.read_model(self.home or Path("."), record, self.policy.model)
        # read from model/ where the slot was lost: the export saves them again, not the slot
        self._current = (record, self.learner.steps) if not weights.recovered else None
        return ChainMap(weights, tensors)  # type: ignore[arg-type]

    def resume(self, state: TrainState, files: RunDir | None) -> None:
        """Rank 0 reads the last checkpoint into ``state``; every rank takes it and the tensors.

        Raises:
            ValueError: the checkpoint is missing, damaged, of another run or out of step with
                the history (every rank says so: rank 0's reason is sent to them).
        """
        tensors, refused = None, None
        if files is not None:
            try:
                tensors = files.restore(self.expected(), state, framework="pt")
                tensors = None if tensors is None else self.read(tensors)
            except ValueError as err:
                refused = str(err)
        if self.ranks.world > 1:
            if tensors is not None:  # read lazily from the file: the values, to send
                tensors = {k: tensors[k].clone() for k in list(tensors.keys())}
            sent = (refused, tensors, state.state_dict())
            refused, tensors, saved = self.ranks.broadcast(sent)
            if refused is None and not self.ranks.main:
                state.load_state_dict(saved)
        if refused is not None:
            raise ValueError(refused)
        if tensors is not None:
            self.load(tensors)

    def export(self, tokenizer: Tokenizer | None, *, checkpointed: bool = True) -> None:
        """The policy as the kind of directory it came from, in ``home/model`` (rank 0 writes).

        Every rank calls it: a sharded policy's weights are gathered first. Nothing for a run
        without a directory or a model without a Hugging Face format. ``checkpointed``: the
        weights now may be the checkpoint's file (False: others loaded since, as a run the
        guard stopped loads its last sound ones: written, never the checkpoint's cloned).
        """
        if self.home is None or not self.policy.exportable:
            return
        if checkpointed and self._current is not None and self._current[1] == self.learner.steps:
            if self.ranks.main:  # the weights now are the checkpoint's file: cloned, not saved
                file = self.home / self._current[0]["file"]
                hf.save_cloned(file.parent, tokenizer, self.home / "model")
            return
        sharded, adapters = self.policy.sharded, self.policy.adapters
        state = disk.full_weights(self.policy.model, adapters) if sharded else None
        if self.ranks.main:
            self.policy.save(self.home / "model", tokenizer, state)

    def failed(
        self, err: Exception, state: TrainState, files: RunDir | None, current: bool
    ) -> Exception:
        """After a failure mid-run: the last completed update checkpointed where it can be.

        ``current``: the weights are still the last completed update's (no step since). A
        lost rank took its shards with it: a sharded run keeps the checkpoint on disk, a
        data-parallel one has the whole state on rank 0, which writes it.

        Returns:
            The error to end the run with: ``err``, or for a lost rank the ranks' one line
            (:meth:`~eligibility.lm.edge.ranks.Ranks.lost`) naming the update the checkpoint
            on disk holds and the command that resumes it.
        """
        lost = self.ranks.world > 1 and peer_lost(err)  # one process has no peer to lose
        sharded = self.policy.sharded
        last = state.last
        if (
            last is not None
            and current
            and last["counters"]["updates"] > state.checkpointed
            and not (lost and sharded)
        ):
            try:
                if self.save(files, last):
                    state.saved(last)
            except Exception:
                if not sharded:
                    raise
                # a rank that failed apart from the others: the last checkpoint stays, whole
        if not lost:
            return err
        return self.ranks.lost(err, home=self.home, kept=self._kept(state))

    def _kept(self, state: TrainState) -> int:
        """The update the checkpoint on disk holds (0: none), read from it where it can be.

        Only rank 0 writes a data-parallel run's checkpoint: another rank cannot know from its
        own books whether rank 0 wrote before it was lost, so the file says (where this rank
        sees it; else its own books).
        """
        if self.home is None:
            return 0
        on_disk = disk.saved_updates(self.home / CHECKPOINT)
        return state.checkpointed if on_disk is None else on_disk

    # -- the slots -----------------------------------------------------------------------------

    def _parts(self) -> tuple[list[str], torch.nn.Module, torch.optim.Optimizer]:
        return self.policy.trainable_names(), self.policy.model, self.learner.optimizer

    def _drop_stale(self) -> None:
        """Rank 0, after a checkpoint: the slots it does not name (and their temporaries)."""
        self.shards.drop_stale()
        self.models.drop_stale()


class _Slots:
    """Two directories beside the run's checkpoint, ``checkpoint.KIND-0`` and ``-1``.

    The checkpoint names one of them (or neither); the other is the free slot a new checkpoint
    writes into before it names it, so that a run killed mid-write keeps the pair it had. The
    shards of a sharded run (the tensor ``shards`` names the slot) and a whole model's weights
    beside Adam's state (the weights' record names its file) are the two families.

    Args:
        home: the run directory (None: none; the slots are then read and written nowhere).
        kind: ``shards`` or ``model``.
    """

    def __init__(self, home: Path | None, kind: str) -> None:
        self.home, self.kind = home, kind

    def dir(self, slot: int) -> Path:
        """The directory of ``slot``."""
        return Path(self.home or ".") / f"checkpoint.{self.kind}-{slot}"

    def named(self) -> int | None:
        """The slot the checkpoint in ``home`` names (None: none, or another form)."""
        if self.home is None:
            return None
        if self.kind == SHARDS:
            return disk.named_slot(self.home / CHECKPOINT, SHARDS)
        record = disk.named_weights(self.home / CHECKPOINT)
        file = record.get("file") if isinstance(record, dict) else None
        return next((k for k in (0, 1) if file == f"{self.dir(k).name}/{disk.WEIGHTS}"), None)

    def free(self) -> int:
        """Rank 0: the slot the checkpoint on disk does not name, cleared."""
        current = self.named()
        slot = 0 if current is None else 1 - current
        disk.clear(self.dir(slot))
        return slot

    def drop_stale(self) -> None:
        """Rank 0: the slot the checkpoint does not name, removed (its temporaries too)."""
        named = self.named()
        for slot in (0, 1):
            if slot != named:
                disk.clear(self.dir(slot))


__all__ = ["SHARDS", "Checkpointer"]
