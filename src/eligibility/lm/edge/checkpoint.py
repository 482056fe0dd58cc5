r"""The state's forms on disk, as ``torch.distributed.checkpoint`` and safetensors give them.

A sharded model (FSDP2, ``--fsdp``) keeps its weights and Adam's moments as shards, one per
rank. Its state leaves the ranks in one of two forms:

- **whole**: gathered to rank 0 (:func:`full_state`), the checkpoint's form without sharding,
  so that a run resumes on any number of ranks, sharded or not (:func:`load_full_state`);
- **shards**: each rank writes its own into one directory (:func:`save_shards`, read back
  resharded by :func:`load_shards`), ``torch.distributed.checkpoint``'s own format: nothing is
  gathered, which is what makes a model larger than one rank's memory checkpointable.

This module knows the frameworks (``torch.distributed.checkpoint``, safetensors); the
:class:`~eligibility.lm.checkpointer.Checkpointer` says which form a run writes, where, and by
which rank.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch


def full_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, names: Sequence[str]
) -> tuple[dict[str, torch.Tensor], dict[int, dict[str, torch.Tensor]]]:
    """A sharded model's and optimiser's whole state on rank 0 (empty elsewhere), on the CPU.

    ``torch.distributed.checkpoint``'s state-dict API gathers the shards; the optimiser's state
    comes back keyed by each trainable parameter's index in ``names`` (the checkpoint's form
    without sharding, so a run resumes on any number of ranks, sharded or not).
    """
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    weights = get_model_state_dict(model, options=options)
    optim = get_optimizer_state_dict(model, optimizer, options=options)
    index = {name: i for i, name in enumerate(names)}
    return weights, {index[k]: v for k, v in optim.get("state", {}).items()}


def full_weights(model: torch.nn.Module, adapters: bool) -> dict[str, torch.Tensor]:
    """A sharded model's whole weights on rank 0 (the LoRA adapters alone where ``adapters``).

    What ``save_pretrained`` is given to write one model (peft saves the adapters of the state
    it is given). Every rank calls it: the shards are gathered.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    return {k: v for k, v in state.items() if "lora_" in k} if adapters else state


def load_full_state(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    weights: dict[str, torch.Tensor],
    optim: dict[int, dict[str, torch.Tensor]] | None,
    names: Sequence[str],
) -> None:
    """Shard a whole state (every rank given it) into a sharded model and its optimiser."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, strict=False)
    set_model_state_dict(model, weights, options=options)
    if optimizer is not None and optim is not None:
        groups = [{**g, "params": list(names)} for g in optimizer.state_dict()["param_groups"]]
        state = {"state": {names[i]: v for i, v in optim.items()}, "param_groups": groups}
        set_optimizer_state_dict(model, optimizer, state, options=options)


def _trained(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, names: Sequence[str]
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The trained weights (``names``: every weight, or the adapters) and Adam's whole state.

    As ``torch.distributed.checkpoint``'s state-dict API gives them: each rank its shards (a
    sharded model), or the tensors themselves; the optimiser's state and groups keyed by name.
    """
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    keep = set(names)
    weights = {k: v for k, v in get_model_state_dict(model).items() if k in keep}
    optim = None if optimizer is None else get_optimizer_state_dict(model, optimizer)
    return weights, optim


def tmp_of(path: Path) -> Path:
    """The directory :func:`save_shards` writes before it is renamed ``path``."""
    return path.with_name(f".{path.name}.tmp")


def save_shards(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    names: Sequence[str],
    path: Path,
    main: bool,
) -> None:
    """Each rank's shards of the trained weights and of Adam's state, in the directory ``path``.

    ``torch.distributed.checkpoint.save`` (every rank calls it: each writes its own file, rank
    0 the index) into :func:`tmp_of` ``path``, which rank 0 then renames ``path``: a directory
    appears whole or not at all. ``path`` and its temporary sibling must be absent (rank 0
    clears them before the ranks meet to write).

    Raises:
        OSError: a rank could not write its file (the disk full, no rights), naming why.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    weights, optim = _trained(model, optimizer, names)
    state = {"model": weights, "optim": optim["state"] if optim else {}}
    try:
        dcp.save(state, checkpoint_id=tmp_of(path))
    except CheckpointException as err:  # a BaseException: a rank's write failed (disk, rights)
        raise OSError(
            f"{tmp_of(path)}: the ranks' shards could not be written ({_cause(err)}); the "
            "checkpoint on disk is intact"
        ) from None
    if main:  # the index is written last, by rank 0, once every rank's file is
        os.replace(tmp_of(path), path)


def load_shards(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    names: Sequence[str],
    path: Path,
    sharded: bool,
) -> None:
    """Read :func:`save_shards`'s directory into a model (and its optimiser), on any ranks.

    ``torch.distributed.checkpoint.load`` reshards: a sharded model takes its own shards on
    any number of ranks (every rank calls it), an unsharded one reads every tensor whole (each
    process alone). The optimiser's groups (its rate) stay the run's own.

    Raises:
        ValueError: the directory is missing, damaged (an index or a rank's file cut short
            or gone) or holds other names or shapes.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    if not (path / ".metadata").is_file():
        what = "its index .metadata is missing" if path.is_dir() else "the directory is missing"
        raise ValueError(_unreadable(path, what))
    try:  # the index read here first: DCP logs its own failure to read it as tracebacks
        dcp.FileSystemReader(path).read_metadata()
    except Exception as err:
        raise ValueError(_unreadable(path, f".metadata: {_cause(err)}")) from None
    weights, optim = _trained(model, optimizer, names)
    state: dict[str, Any] = {"model": weights}
    if optim is not None:
        state["optim"] = optim["state"]
    try:
        with warnings.catch_warnings():  # unsharded, one process reads alone (as it says)
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(state, checkpoint_id=path, no_dist=not sharded)
    except (Exception, CheckpointException) as err:  # the latter is a BaseException
        raise ValueError(_unreadable(path, _cause(err))) from None
    set_model_state_dict(model, state["model"], options=StateDictOptions(strict=False))
    if optim is not None and optimizer is not None:
        whole = {"state": state["optim"], "param_groups": optim["param_groups"]}
        set_optimizer_state_dict(model, optimizer, whole)


def _unreadable(path: Path, what: str) -> str:
    return (
        f"{path} is not a readable sharded checkpoint of this model ({what}); the run cannot "
        "be resumed from it: restore the directory from a copy, or start a new run"
    )


def _cause(err: BaseException) -> str:
    """The first line of what went wrong: a rank's own error inside DCP's, where it has one."""
    failures = getattr(err, "failures", None)
    if failures:  # CheckpointException: {rank: (the rank's exception, its traceback)}
        err = next(iter(failures.values()))[0]
    first = (str(err).strip().splitlines() or [""])[0].split(". ")[0]
    if len(first) > 160:
        first = first[:160].rsplit(" ", 1)[0] + " …"
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def clear(path: Path) -> None:
    """Remove ``path`` and its temporary sibling (:func:`tmp_of`), where they are."""
    for p in (path, tmp_of(path)):
        shutil.rmtree(p, ignore_errors=True)


def named_slot(path: Path, key: str) -> int | None:
    """The integer a checkpoint file holds under ``key`` (None: none, no file, or unreadable).

    Read from the safetensors header and that one tensor; an unreadable file is the run
    layer's to name (``runs.read_checkpoint``).
    """
    if not path.is_file():
        return None
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return int(f.get_tensor(key)[0]) if key in f.keys() else None
    except Exception:  # unreadable: read_checkpoint says so, naming the file
        return None


def saved_updates(path: Path) -> int | None:
    """The update a checkpoint file holds, from its metadata (None: no file, or unreadable).

    What a rank that does not write says is kept after its peer is lost: the file's word, not
    its own books.
    """
    if not path.is_file():
        return None
    import json

    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            updates = json.loads((f.metadata() or {})["counters"])["updates"]
    except Exception:  # unreadable: the lost line falls back on the rank's books
        return None
    return updates if isinstance(updates, int) and updates >= 0 else None


__all__ = [
    "clear",
    "full_state",
    "full_weights",
    "load_full_state",
    "load_shards",
    "named_slot",
    "save_shards",
    "saved_updates",
    "tmp_of",
]
