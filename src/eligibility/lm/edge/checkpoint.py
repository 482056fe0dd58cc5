r"""The state's forms on disk, as ``torch.distributed.checkpoint`` and safetensors give them.

A sharded model (FSDP2, ``--fsdp``) keeps its weights and Adam's moments as shards, one per
rank. Its state leaves the ranks in one of two forms:

- **whole**: gathered to rank 0 (:func:`full_state`), the checkpoint's form without sharding,
  so that a run resumes on any number of ranks, sharded or not (:func:`load_full_state`);
- **shards**: each rank writes its own into one directory (:func:`save_shards`, read back
  resharded by :func:`load_shards`), ``torch.distributed.checkpoint``'s own format: nothing is
  gathered, which is what makes a model larger than one rank's memory checkpointable;
- **a model directory** (a whole Hugging Face model): the weights as ``save_pretrained``
  writes them, their names and file the exported model's (:func:`save_model`), so that the
  run's ``model/`` holds a clone of the file at the end (``_io.clone_file``); the checkpoint
  names the file, its size and a fingerprint (:func:`fingerprint`), and a resume reads it
  back under the checkpoint's names (:func:`read_model`), from ``model/`` where the slot's
  file is lost or damaged and ``model/`` holds the very file.

This module knows the frameworks (``torch.distributed.checkpoint``, safetensors); the
:class:`~eligibility.lm.checkpointer.Checkpointer` says which form a run writes, where, and by
which rank.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from eligibility._io import os_errors
from eligibility._output import note, speaker


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


WEIGHTS = "model.safetensors"
"""The file ``save_pretrained`` writes a model's weights into (unsharded, safetensors)."""

RECORD = "weights"
"""The key, in a checkpoint's metadata, of :func:`save_model`'s record of its weights file."""


def fingerprint(path: Path, blocks: int = 256, size: int = 4096) -> str:
    """SHA-256 of a file's size, its safetensors header and ``blocks`` evenly spaced blocks.

    Not every byte: hashing a 0.5 GB file costs about a second of the run's end, which this
    layout is there to save. It tells another file (another run's weights, an earlier
    checkpoint's, a file cut short or emptied) from the one written; a bit flipped inside goes
    unseen, as it does in any safetensors file (the format has no checksum).
    """
    import hashlib

    n = path.stat().st_size
    digest = hashlib.sha256(str(n).encode())
    with open(path, "rb") as f:
        head = f.read(8)
        header = int.from_bytes(head, "little") if len(head) == 8 else 0
        digest.update(head + f.read(min(header, n)))
        for i in range(blocks):
            f.seek(i * max(n - size, 0) // max(blocks - 1, 1))
            digest.update(f.read(size))
    return digest.hexdigest()


def aliases(model: torch.nn.Module) -> dict[str, str]:
    """Each name of the model's ``state_dict`` → the name its storage is saved under.

    A tied weight (an embedding and the LM head) has several names and one storage: the first
    name in the ``state_dict``'s order is the checkpoint's (``Learner.state_dict``'s rule).
    """
    first: dict[tuple[int, tuple[int, ...], torch.dtype], str] = {}
    out = {}
    for k, v in model.state_dict().items():
        key = (v.data_ptr(), tuple(v.shape), v.dtype)
        out[k] = first.setdefault(key, k) if v.numel() else k
    return out


def save_model(model: Any, path: Path) -> dict[str, Any] | None:
    """The model's weights in the directory ``path``, as ``save_pretrained`` writes them.

    ``transformers``' own ``save_pretrained`` (its names, its tied weights left out, its
    config files) into :func:`tmp_of` ``path``; the weights file flushed to disk, then the
    directory renamed ``path``: it appears whole or not at all. ``path`` and its temporary
    sibling must be absent.

    Returns:
        What the checkpoint names: the file (relative to the run directory), its size and its
        :func:`fingerprint`. None where the file's names are not the model's own (an
        architecture ``transformers`` renames on saving, or a file split in shards): nothing
        is left in ``path``, and the run keeps its weights in the checkpoint itself.
    """
    from safetensors import safe_open

    from eligibility.lm.edge.hf import quiet

    quiet()  # no progress bar of transformers' on stderr
    tmp = tmp_of(path)
    try:
        with os_errors(tmp):
            model.save_pretrained(tmp, safe_serialization=True)
    except BaseException:  # a disk full mid-file: its part written is not left to fill it
        clear(path)
        raise
    file = tmp / WEIGHTS
    names = aliases(model)
    try:
        with safe_open(str(file), framework="pt") as f:
            saved = [names.get(k) for k in f.keys()]
    except Exception:  # no single file (a sharded save): the weights stay in the checkpoint
        saved = [None]
    if None in saved or sorted(saved) != sorted(set(names.values())):
        clear(path)
        return None
    with open(file, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    file = path / WEIGHTS
    return {
        "file": f"{path.name}/{WEIGHTS}",
        "bytes": file.stat().st_size,
        "fingerprint": fingerprint(file),
    }


def read_model(home: Path, record: Any, model: torch.nn.Module) -> Mapping[str, Any]:
    """The weights of :func:`save_model`'s file named by ``record``, as ``policy.NAME`` tensors.

    Read from the file as they are asked for (a model's weights are not held twice). The file
    must be the one written: its size and :func:`fingerprint` the record's, its names and
    shapes the model's.

    Raises:
        ValueError: the record, the file or its names do not fit, naming the file and how.
    """
    from safetensors import safe_open

    ok = isinstance(record, dict) and isinstance(record.get("file"), str)
    path = home / str(record.get("file")) if ok else home / "?"
    if not ok or path.parent.parent != home:
        why = "the checkpoint names no weights file of this run"
    else:
        why = _differs(path, record)
    spare = home / "model" / WEIGHTS  # the run's export: the same file, when it is
    recovered = bool(why) and ok and spare.is_file() and not _differs(spare, record)
    if recovered:
        note(
            speaker("finetune"),
            f"{path} {why.replace('it holds', 'holds')}: the weights are read from {spare}, "
            "the very file the checkpoint names (its size and fingerprint)",
        )
        path, why = spare, ""
    if why:
        raise ValueError(_unpaired(path, why))
    names = aliases(model)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    try:
        handle = safe_open(str(path), framework="pt")
        keys = {names.get(k, ""): k for k in handle.keys()}
        problems = [f"{k} missing" for k in sorted(set(names.values()) - set(keys))]
        problems += [f"unexpected {k}" for k in handle.keys() if k not in names]
        stored = {k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}
        problems += [
            f"{k} has shape {stored[k]} where the model has {shapes[k]}"
            for k in stored
            if k in shapes and stored[k] != shapes[k]
        ]
    except Exception as err:  # safetensors' own errors: a header that does not parse
        raise ValueError(_unpaired(path, f"{type(err).__name__}: {err}")) from None
    if problems:
        raise ValueError(_unpaired(path, "; ".join(problems[:4])))
    return _Named(handle, {f"policy.{c}": k for c, k in keys.items()}, recovered)


def _differs(path: Path, record: dict[str, Any]) -> str:
    """How ``path`` is not the file ``record`` names ("" where it is: size and fingerprint)."""
    if not path.is_file():
        return f"{path.name} {'is not a regular file' if path.exists() else 'is missing'}"
    if path.stat().st_size != record.get("bytes"):
        return f"it holds {path.stat().st_size} bytes where the checkpoint names {record['bytes']}"
    if fingerprint(path) != record.get("fingerprint"):
        return "its fingerprint is not the one the checkpoint names: another file"
    return ""


class _Named(Mapping[str, Any]):
    """A safetensors file's tensors under other names, each read when asked for.

    ``recovered``: read from the run's ``model/``, the checkpoint's own file lost or damaged.
    """

    def __init__(self, handle: Any, names: dict[str, str], recovered: bool = False) -> None:
        self._file, self._names, self.recovered = handle, names, recovered

    def __getitem__(self, key: str) -> Any:
        return self._file.get_tensor(self._names[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def shape(self, key: str) -> tuple[int, ...]:
        """The stored tensor's shape (from the file's header)."""
        return tuple(self._file.get_slice(self._names[key]).get_shape())


def _unpaired(path: Path, why: str) -> str:
    return (
        f"{path} is not the weights file its checkpoint names ({why}); the run cannot be "
        "resumed from it: restore the run directory from a copy, or start a new run"
    )


def named_weights(path: Path) -> dict[str, Any] | None:
    """The weights file a checkpoint names (:func:`save_model`'s record; None: none or no file).

    Read from the safetensors header alone; an unreadable file is the run layer's to name.
    """
    if not path.is_file():
        return None
    import json

    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            raw = (f.metadata() or {}).get(RECORD)
        return None if raw is None else json.loads(raw)
    except Exception:  # unreadable: read_checkpoint says so, naming the file
        return None


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
    updates = saved_counters(path).get("updates")
    return updates if isinstance(updates, int) and updates >= 0 else None


def saved_counters(path: Path) -> dict[str, Any]:
    """A checkpoint file's counters (``updates``, ``tokens``, …), from its metadata ({}: none).

    Read from the safetensors header alone: no file, an unreadable one, or counters that are
    not a JSON object give {} (the run layer names a bad file where it reads it whole).
    """
    if not path.is_file():
        return {}
    import json

    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            counters = json.loads((f.metadata() or {})["counters"])
    except Exception:  # unreadable: the lost line falls back on the rank's books
        return {}
    return counters if isinstance(counters, dict) else {}


__all__ = [
    "RECORD",
    "WEIGHTS",
    "aliases",
    "clear",
    "fingerprint",
    "full_state",
    "full_weights",
    "load_full_state",
    "load_shards",
    "named_slot",
    "named_weights",
    "read_model",
    "save_model",
    "save_shards",
    "saved_counters",
    "saved_updates",
    "tmp_of",
]
