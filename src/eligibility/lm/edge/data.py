"""The user's prompt data: JSONL, JSON, CSV, Parquet or a ``datasets`` ``save_to_disk`` directory.

Read through Hugging Face ``datasets`` (the ``lm`` extra) into plain records once; a ``.txt``
file is one prompt a line. Every record has a ``prompt``, standard (text) or conversational (a
list of ``{"role", "content"}`` messages); its other columns reach the reward functions by name,
one list per column, as TRL passes them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from eligibility._isolate import UserCodeError, Worker
from eligibility.lm.edge.hf import hugging_face, is_conversational

_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}

MAX_BYTES = 2_000_000_000
"""The most bytes of prompt data read (2 GB: every record is held in memory, as a list)."""


def data_files(path: str, option: str = "--prompts") -> list[Path]:
    """The regular files a data path names: itself, or every file under a directory, in order.

    Checked before a byte is read: a named pipe, a device (``/dev/zero``) or a socket would
    block or never end, and data over :data:`MAX_BYTES` would fill the memory, so each is
    refused by its kind or size, naming the option and the path.

    Raises:
        ValueError: no such path, a path (or an entry under a directory) that is neither a
            regular file nor a directory, or files over :data:`MAX_BYTES` in all.
    """
    p = Path(path)
    entries = sorted(p.rglob("*")) if p.is_dir() else [p]
    files, total = [], 0
    for f in entries:
        named = str(f) if f is p else f"{path}: {f.relative_to(p)}"
        try:
            info = os.stat(f)  # a link is what it points to
        except FileNotFoundError:
            raise ValueError(f"{option} {named}: no such file or directory") from None
        except OSError as err:
            raise ValueError(f"{option} {named}: {err.strerror or 'cannot be read'}") from None
        if stat.S_ISDIR(info.st_mode):
            continue  # under a directory: its files come in the walk
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(
                f"{option} {named} is {_KINDS.get(stat.S_IFMT(info.st_mode), 'not a file')}: "
                "give a data file (JSONL, JSON, CSV, Parquet, one prompt a line) or a "
                "save_to_disk directory of them"
            )
        files.append(f)
        total += info.st_size
    if total > MAX_BYTES:
        raise ValueError(
            f"{option} {path} is {total / 1e9:.1f} GB, over the {MAX_BYTES / 1e9:g} GB of prompt "
            "data a run reads (every record is held in memory): give a sample of it, as large "
            "as the run's updates × prompts per batch need"
        )
    return files


_KINDS = {
    stat.S_IFIFO: "a named pipe (it would wait for a writer)",
    stat.S_IFCHR: "a character device (it may never end)",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def fingerprint(path: str, option: str = "--prompts") -> str:
    """SHA-256 of a data file's bytes, or of every file under a directory (names included).

    Raises:
        ValueError: a path that is not data (see :func:`data_files`).
    """
    p = Path(path)
    h = hashlib.sha256()
    for f in data_files(path, option):
        h.update(str(f.relative_to(p) if p.is_dir() else f.name).encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _datasets(option: str, path: str) -> Any:
    datasets = hugging_face("datasets", f"{option} {path}", "reading it needs the datasets library")
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    return datasets


def _read(path: str, option: str) -> list[dict[str, Any]]:
    p = Path(path)
    if p.suffix.lower() == ".txt":
        text = p.read_text(encoding="utf-8")
        return [{"prompt": line} for line in text.splitlines() if line.strip()]
    if not p.is_dir():
        if p.stat().st_size == 0:
            raise ValueError(f"{option} {path} is empty: it holds no prompts")
        if p.suffix.lower() == ".jsonl":
            records = _check_json_lines(p, option)
            if _plain(records):  # what datasets would give: the objects as parsed
                return records
    datasets = _datasets(option, path)
    if p.is_dir():
        ds = datasets.load_from_disk(str(p), keep_in_memory=True)
        if isinstance(ds, datasets.DatasetDict):
            if "train" not in ds:
                raise ValueError(
                    f"{option} {path}: a DatasetDict without a 'train' split "
                    f"(it has {', '.join(ds)}); save the split you mean"
                )
            ds = ds["train"]
        return list(ds)
    builder = _BUILDERS.get(p.suffix.lower())
    if builder is None:
        raise ValueError(
            f"{option} {path}: unknown format {p.suffix or '(no suffix)'}; give .jsonl, .json, "
            ".csv, .parquet, .txt (one prompt a line) or a save_to_disk directory"
        )
    import tempfile

    with tempfile.TemporaryDirectory(prefix="eligibility-data-") as cache:
        ds = datasets.load_dataset(
            builder, data_files=str(p), split="train", cache_dir=cache, keep_in_memory=True
        )
        return list(ds)


def _check_json_lines(p: Path, option: str) -> list[dict[str, Any]]:
    """The objects of a JSONL file, each non-blank line one; else the file, line and column."""
    records = []
    with open(p, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(
                    f"{option} {p}, line {n}, column {err.colno}: does not parse as JSON "
                    f"({err.msg}); a JSONL file holds one JSON object a line"
                ) from None
            if not isinstance(value, dict):
                raise ValueError(
                    f"{option} {p}, line {n}: a JSON {type(value).__name__}, not an object "
                    '({"prompt": ...})'
                )
            records.append(value)
    return records


_INT64 = range(-(2**63), 2**63)
_DATED = re.compile(r"\s*[+-]?\d+[-:]\d")
"""A string Arrow's JSON reader may take for a timestamp (ISO 8601 dates and times start so)."""


def _kind(value: Any) -> Any:
    """What a JSON value is to Arrow's schema: its type, or a list of messages' keys.

    None: anything else (null, a nested object, a mixed list, an int beyond 64 bits).
    """
    if isinstance(value, str):
        return None if _DATED.match(value) else str
    if isinstance(value, bool) or (type(value) is int and value in _INT64):
        return type(value)
    if type(value) is float:
        return float if value == value and abs(value) != float("inf") else None
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        keys = {tuple(m) for m in value}
        texts = all(_kind(x) is str for m in value for x in m.values())
        return ("messages", keys.pop()) if len(keys) == 1 and texts else None
    return None


def _plain(records: list[dict[str, Any]]) -> bool:
    """Whether ``datasets`` would give back ``records`` as they are.

    It does where every record has the same columns in the same order and each column one
    kind throughout (strings, 64-bit integers, finite floats, booleans, or lists of messages
    with the same keys, all strings): Arrow's schema then holds each value unchanged. Anything
    else (a missing column filled with nulls, integers widened to floats, structs merged) is
    left to ``datasets``.
    """
    if not records:
        return False
    columns = tuple(records[0])
    kinds = [_kind(records[0][c]) for c in columns]
    if None in kinds:
        return False
    return all(
        tuple(r) == columns and all(_kind(r[c]) == k for c, k in zip(columns, kinds, strict=True))
        for r in records
    )


def load_records(path: str, option: str = "--prompts") -> list[dict[str, Any]]:
    """The records of a data file or directory, checked (see the module docstring).

    Raises:
        ValueError: a missing or unreadable file, no ``prompt`` column, a prompt that is
            neither text nor messages, a column named as one of the reward call's arguments,
            or no records at all, each naming the file (and the record).
    """
    data_files(path, option)  # a pipe, a device or too much: refused before a byte is read
    try:
        records = _read(path, option)
    except UnicodeDecodeError:  # a ValueError: caught before the pass-through below
        raise ValueError(f"{option} {path} is not UTF-8 text") from None
    except ValueError:
        raise
    except Exception as err:  # datasets/pyarrow parse errors come in many types
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise ValueError(
            f"{option} {path} does not parse ({type(err).__name__}: {first})"
        ) from None
    return check_records(records, f"{option} {path}")


def _read_here(path: str) -> bool:
    """Whether :func:`_read` reads ``path`` with the standard library alone.

    So it does a ``.txt`` file, and a ``.jsonl`` file whose objects are plain (:func:`_plain`).
    Anything else, or a path that does not read, is the worker's (which says what is wrong).
    """
    suffix = Path(path).suffix.lower()
    if suffix not in (".txt", ".jsonl"):
        return False
    try:
        files = data_files(path)  # a pipe, a device or too much: the worker's refusal
        if files != [Path(path)] or suffix == ".txt":
            return files == [Path(path)]
        return Path(path).stat().st_size > 0 and _plain(_check_json_lines(Path(path), ""))
    except (ValueError, OSError):
        return False


def read_files(
    prompts: str, eval_prompts: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The training and held-out records of ``--prompts`` and ``--eval-prompts``, each checked.

    Read in a protected worker: a file that crashes the reader cannot take the run down. Files
    the standard library alone reads (:func:`_read_here`: text, and JSONL that ``datasets``
    would give back as parsed) are read here: nothing in that reader could end the process, and
    the worker's fork would cost every run on them (the records are the same either way).

    Raises:
        ValueError: a file that does not read (one line naming it), or a reader that crashed.
    """

    def read() -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        train = load_records(prompts, "--prompts")
        held = None if eval_prompts is None else load_records(eval_prompts, "--eval-prompts")
        return train, held

    if all(f is None or _read_here(f) for f in (prompts, eval_prompts)):
        return read()
    worker = Worker(lambda _: None, setup=read)
    try:
        return worker.start(timeout=3600)
    except UserCodeError as err:
        files = f"--prompts {prompts}" + (
            "" if eval_prompts is None else f" and --eval-prompts {eval_prompts}"
        )
        raise ValueError(f"reading {files}: the reader {err.text}") from None
    finally:
        worker.close()


def check_records(records: Iterable[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """Records with a standard or conversational ``prompt`` (``lm.reserved`` their columns).

    Raises:
        ValueError: as :func:`load_records`, naming ``where``.
    """
    out = list(records)
    if not out:
        raise ValueError(f"{where} holds no prompts")
    columns = set(out[0])
    if "prompt" not in columns:
        raise ValueError(
            f"{where}: no 'prompt' column (it has {', '.join(sorted(columns)) or 'none'}); "
            "name the prompts' column prompt"
        )
    for n, rec in enumerate(out, 1):
        prompt = rec.get("prompt")
        if not (isinstance(prompt, str) and prompt) and not is_conversational(prompt):
            raise ValueError(
                f"{where}, record {n}: the prompt must be text or a list of "
                f'{{"role", "content"}} messages, got {json.dumps(prompt, default=str)[:80]}'
            )
    return out


__all__ = ["check_records", "fingerprint", "load_records", "read_files"]
