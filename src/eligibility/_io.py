"""Atomic file writing: the one helper every writer of this project uses.

A file is written to a temporary sibling in the same directory, flushed to disk, then renamed
over its destination with ``os.replace`` (atomic on POSIX and Windows), so a reader, or a run
killed at any moment (``kill -9``, disk full), sees either the old file whole or the new one
whole, never a mix; a failed write removes its temporary file. The file gets the mode a plain
``open()`` would give it (0644 under umask 022), not ``mkstemp``'s 0600.

Every JSON file of the project (``config.json``, ``sweep.json``, ``results.json``, a sweep's
job lines) goes through one encoder and one decoder, :func:`json_dumps` and :func:`json_loads`:
strict JSON has no ∞, so a float ±∞ (``--target-return inf``: no target) is written as the
string ``"inf"`` or ``"-inf"`` and read back as the float; NaN is refused (a flag never
accepts it, so one in a file is a bug).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO


def current_umask() -> int:
    """The process's umask (read by setting it and setting it back: no other way in Python)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary sibling of ``path`` to write by name, moved over ``path`` on success.

    The sibling has the mode a plain ``open()`` would give (not ``mkstemp``'s 0600); it is
    flushed to disk before the move and removed after an error, leaving ``path`` as it was.
    For writers that stream from memory to a file name (safetensors' ``save_file`` writes each
    tensor from its own buffer: no serialised copy of the whole state in memory).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        mode = 0o666 & ~current_umask()
        os.close(fd)
        yield Path(tmp)
        os.chmod(tmp, mode)  # a writer may replace the file it is named (safetensors: 0600)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError) and err.errno and not err.filename:  # a write() that failed
            raise OSError(err.errno, err.strerror, os.fspath(path)) from err
        raise


_RUST_ERRNO = re.compile(r"\(os error (\d+)\)")


@contextlib.contextmanager
def os_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """A failed write of a writer in Rust (safetensors, tokenizers) raised as its ``OSError``.

    Those libraries raise an exception of their own for an I/O error, its message ending in
    Rust's spelling of the errno: ``"… No space left on device (os error 28)"``. What catches a
    failed write here (the command line's one line, a writer's clean-up) reads ``OSError``;
    ``path`` is the file or directory being written, for the message. Any other error passes
    as it is.
    """
    try:
        yield
    except Exception as err:
        if isinstance(err, OSError) or (m := _RUST_ERRNO.search(str(err))) is None:
            raise
        code = int(m[1])
        raise OSError(code, os.strerror(code), os.fspath(path)) from err


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Open a temporary sibling of ``path`` for binary writing; rename it over ``path`` on success.

    Args:
        path: the destination; its directory must exist.

    Yields:
        A binary file object. If the ``with`` block raises, the temporary file is removed and
        ``path`` is left as it was.
    """
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        yield f


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring)."""
    with atomic_open(path) as f:
        f.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


INFINITIES = {"inf": math.inf, "-inf": -math.inf}
"""How ±∞ is spelled in the project's JSON files (the words the command line reads it from)."""


def to_json_value(obj: Any) -> Any:
    """``obj`` with every float ±∞ replaced by ``"inf"``/``"-inf"`` (tuples become lists).

    Raises:
        ValueError: a NaN anywhere in ``obj``, naming the key that holds it.
    """
    if isinstance(obj, float):
        if math.isnan(obj):
            raise ValueError("NaN is not a value a setting or a result can hold in JSON")
        return obj if math.isfinite(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            try:
                out[k] = to_json_value(v)
            except ValueError as err:
                raise ValueError(f"{k}: {err}") from None
        return out
    if isinstance(obj, list | tuple):
        return [to_json_value(v) for v in obj]
    return obj


def from_json_value(obj: Any) -> Any:
    """The inverse of :func:`to_json_value`: the strings ``"inf"``/``"-inf"`` become floats."""
    if isinstance(obj, str):
        return INFINITIES.get(obj, obj)
    if isinstance(obj, dict):
        return {k: from_json_value(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_json_value(v) for v in obj]
    return obj


def json_dumps(obj: Any, *, indent: int | None = 2, **kwargs: Any) -> str:
    """``obj`` as strict JSON, ±∞ as ``"inf"``/``"-inf"`` (the one encoder; NaN: ValueError)."""
    return json.dumps(to_json_value(obj), indent=indent, allow_nan=False, **kwargs)


def json_loads(text: str | bytes) -> Any:
    """JSON text as written by :func:`json_dumps`, ±∞ restored (the one decoder)."""
    return from_json_value(json.loads(text))


def regular_file(path: str | os.PathLike[str], max_bytes: int, over: str) -> Path:
    """``path``, once it is a regular file of at most ``max_bytes``: checked before a byte is read.

    Raises:
        OSError: no such file.
        ValueError: naming the file: not a regular file (a pipe would wait, a device never end),
            or over ``max_bytes`` (the message ends with ``over``: what to do instead).
    """
    p = Path(path)
    info = os.stat(p)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{p} is not a regular file (a pipe, a device or a directory)")
    if info.st_size > max_bytes:
        raise ValueError(f"{p} is over {max_bytes // 1_000_000} MB: {over}")
    return p


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON file at ``path``, read with :func:`json_loads`.

    Raises:
        OSError: no such file, or it cannot be read.
        ValueError: naming the file: not a regular file (a pipe would wait, a device never
            end), over :data:`MAX_JSON_BYTES`, or not JSON (nested past the parser's depth too).
    """
    p = regular_file(path, MAX_JSON_BYTES, "not a file of ours")
    try:
        return json_loads(p.read_text(encoding="utf-8"))
    except RecursionError:
        raise ValueError(f"{p} is not JSON of ours (nested past the parser's depth)") from None


MAX_JSON_BYTES = 64_000_000
"""The largest JSON file read back (a run's config, its trackers' ids: kilobytes)."""


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 2) -> None:
    """Write ``obj`` with :func:`json_dumps` to ``path`` atomically, ending in a newline."""
    atomic_write_text(path, json_dumps(obj, indent=indent) + "\n")


def atomic_write_with(path: str | os.PathLike[str], write: Callable[[BinaryIO], None]) -> None:
    """Call ``write(f)`` on a binary file object and move the result onto ``path`` atomically.

    For writers that take a file object, e.g. ``lambda f: fig.savefig(f, format="png")``.
    """
    with atomic_open(path) as f:
        write(f)


FIGURE_FORMATS = ("png", "svg", "pdf")
"""The picture formats a figure is written in, chosen by the file's suffix."""


FICLONE = 0x40049409
"""Linux's ioctl that makes a file a copy-on-write clone of another (btrfs, XFS, bcachefs…)."""


def clone_file(src: Path, dst: Path) -> str:
    """``dst`` a new file with ``src``'s bytes and times, which no write to either reaches.

    A copy-on-write clone where the file system makes one (no byte written: ``FICLONE``),
    else a copy (``shutil.copyfile``: the kernel's own, ``sendfile``). Never a hard link: a
    write in place to one name (``truncate``, ``dd``, a tensor patched) would change both.

    Returns:
        ``"clone"`` or ``"copy"``: what was made.
    """
    import fcntl
    import shutil

    how = "copy"
    with open(src, "rb") as source, open(dst, "wb") as target:
        with contextlib.suppress(OSError):  # no clones here (ext4, tmpfs, another device)
            fcntl.ioctl(target.fileno(), FICLONE, source.fileno())
            how = "clone"
    if how == "copy":
        shutil.copyfile(src, dst)
    shutil.copystat(src, dst)
    return how


def what_is(path: Path) -> str:
    """What stands at ``path`` where a directory was asked for, in words for a refusal.

    A symbolic link whose target does not exist is said so, with its target (not "a file").
    """
    if path.is_symlink() and not path.exists():
        return f"a symbolic link to {os.readlink(path)}, which does not exist"
    return "a file"


def output_file(path: str | os.PathLike[str], *, option: str) -> Path:
    """``path`` checked as a file to write; its missing folders are created.

    Args:
        path: where the file goes.
        option: the option that named it, for the message (e.g. ``--out``).

    Raises:
        ValueError: naming the option, the path and what to do: the path is a folder, lies
            under a file, or its folder cannot be written.
    """
    path = Path(path)
    if str(path).strip() in ("", "."):
        raise ValueError(f"{option}: give a file name")
    if path.is_symlink() and not path.exists():
        raise ValueError(f"{option} {path} is {what_is(path)}; give a file name")
    if path.is_dir():
        raise ValueError(f"{option} {path} is a directory; give a file name inside it")
    for parent in reversed(path.parents):
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"{option} {path}: {parent} is a file, not a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"{option} {path}: cannot create {path.parent} ({err.strerror})") from None
    if not os.access(path.parent, os.W_OK):
        raise ValueError(f"{option} {path}: the folder {path.parent} is not writable")
    return path


def figure_file(path: str | os.PathLike[str], *, option: str) -> tuple[Path, str]:
    """``path`` checked as a figure to write (see :func:`output_file`) and its format.

    Raises:
        ValueError: a suffix other than .png, .svg or .pdf, or a path :func:`output_file` refuses.
    """
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in FIGURE_FORMATS and not Path(path).is_dir():
        raise ValueError(
            f"{option} {path}: unknown picture format {Path(path).suffix or '(no suffix)'!r}; "
            f"end the name in {', '.join('.' + f for f in FIGURE_FORMATS)}"
        )
    return output_file(path, option=option), fmt


def save_figure(
    fig: Any, path: str | os.PathLike[str], *, option: str = "--out", **kw: Any
) -> Path:
    """Write a matplotlib figure atomically, in the format its suffix names."""
    path, fmt = figure_file(path, option=option)
    atomic_write_with(path, lambda f: fig.savefig(f, format=fmt, **kw))
    return path
