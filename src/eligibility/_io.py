"""Atomic file writing: the one helper every writer of this project uses.

A file is written to a temporary sibling in the same directory, flushed to disk, then renamed
over its destination with ``os.replace`` (atomic on POSIX and Windows), so a reader, or a run
killed at any moment (``kill -9``, disk full), sees either the old file whole or the new one
whole, never a mix; a failed write removes its temporary file. The file gets the mode a plain
``open()`` would give it (0644 under umask 022), not ``mkstemp``'s 0600.
"""

from __future__ import annotations

import contextlib
import json
import os
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
def atomic_open(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Open a temporary sibling of ``path`` for binary writing; rename it over ``path`` on success.

    Args:
        path: the destination; its directory must exist.

    Yields:
        A binary file object. If the ``with`` block raises, the temporary file is removed and
        ``path`` is left as it was.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp's 0600 → what open() would give
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring)."""
    with atomic_open(path) as f:
        f.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 2) -> None:
    """Write ``obj`` as strict JSON (no NaN or ∞) to ``path`` atomically, ending in a newline."""
    atomic_write_text(path, json.dumps(obj, indent=indent, allow_nan=False) + "\n")


def atomic_write_with(path: str | os.PathLike[str], write: Callable[[BinaryIO], None]) -> None:
    """Call ``write(f)`` on a binary file object and move the result onto ``path`` atomically.

    For writers that take a file object, e.g. ``lambda f: fig.savefig(f, format="png")``.
    """
    with atomic_open(path) as f:
        write(f)


FIGURE_FORMATS = ("png", "svg", "pdf")
"""The picture formats a figure is written in, chosen by the file's suffix."""


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
