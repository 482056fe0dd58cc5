"""Where every command's words go: results on stdout, everything else on stderr.

The one set of output helpers of the command line (and of the reports the library renders for
it), so that every subcommand keeps the same promises (docs/cli.md):

- stdout holds the result and nothing else; JSON there is UTF-8, not ASCII-escaped
  (``ensure_ascii=False``), strict (±∞ as ``"inf"``/``"-inf"``, as in every JSON file the
  project writes: :mod:`eligibility._io`; no NaN) and ends in a newline: :func:`emit_json`.
- progress, warnings and notes go to stderr as one line each, prefixed with the command
  (:func:`note`, :func:`warning`), with no colour or cursor codes unless stderr is a terminal
  (:func:`plain`, :func:`stderr_console`); warnings raised by other libraries (Gymnasium
  colours its own) are forwarded the same way (:func:`forward_warnings`).
- tables never cut the words that matter when piped: :func:`stdout_console` is as wide as the
  content when stdout is not a terminal, and :func:`key_column` folds instead of truncating.

Below the command line in the layers: ``check``, ``lab``, ``sweep`` and ``reinforce`` may import
it; it imports only :mod:`eligibility._io`, which imports nothing of the project.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import reprlib
import sys
import warnings
from collections.abc import Iterator
from typing import IO, Any

from eligibility._io import json_dumps

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
"""An ANSI escape sequence: CSI (colours, cursor moves), OSC (titles, links) or a short escape."""

PIPE_WIDTH = 10_000
"""The console width when the stream is not a terminal: a table takes its natural width and a
line is never wrapped, so ``grep`` and ``cut`` see whole words."""


def plain(text: str) -> str:
    """``text`` without ANSI escape sequences (colours, bold, cursor moves)."""
    return ANSI.sub("", text)


def is_terminal(stream: IO[str] | None) -> bool:
    """Whether ``stream`` is an interactive terminal (False for pipes, files, captures)."""
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):  # closed, or not a real file
        return False


def emit_json(obj: Any, *, indent: int | None = 1, file: IO[str] | None = None) -> None:
    """Write ``obj`` to stdout as strict JSON, UTF-8 characters kept as they are, and a newline.

    Args:
        obj: JSON-ready values; ±∞ is written ``"inf"``/``"-inf"`` (NaN raises ``ValueError``:
            convert it to null first).
        indent: as in :func:`json.dumps` (None: one line).
        file: the stream (default: ``sys.stdout`` as it is at the call).
    """
    out = sys.stdout if file is None else file
    out.write(json_dumps(obj, indent=indent, ensure_ascii=False) + "\n")
    out.flush()


QUOTED = 80
"""The most characters of a value of the user's that a message quotes (:func:`quoted`)."""

LINE = 4000
"""The most characters of one line on stderr (:func:`note`): a longer message is cut."""


def _repr() -> reprlib.Repr:
    shown = reprlib.Repr()
    shown.maxstring = shown.maxother = shown.maxlong = QUOTED
    shown.maxlist = shown.maxtuple = shown.maxdict = shown.maxset = 8
    return shown


_REPR = _repr()


def quoted(value: object) -> str:
    """``repr(value)`` as a message quotes it: at most about :data:`QUOTED` characters.

    A value of the user's (a recipe's, a flag's, a file's) may be megabytes, or a list of a
    million items; a message quotes its start and end (``reprlib``: a long string keeps both
    ends around ``...``, a long list its first items), never more, and never builds the whole
    ``repr`` first.

    >>> quoted("x" * 10_000)[:12], len(quoted("x" * 10_000)) <= 90
    ("'xxxxxxxxxxx", True)
    >>> quoted(["lm_head"] * 1_000)
    "['lm_head', 'lm_head', 'lm_head', 'lm_head', 'lm_head', 'lm_head', 'lm_head', 'lm_head', ...]"
    """
    return _REPR.repr(value)


def cut(text: str, limit: int = QUOTED) -> str:
    """``text`` of the user's as a message shows it: its first ``limit`` characters, and a count.

    >>> cut("lm_head " * 100, 16)
    'lm_head lm_head … (784 more characters)'
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


_CONTROL = {
    c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if chr(c) not in "\n\t"
} | {c: f"\\u{c:04x}" for c in (0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A))}
"""Characters a line on stderr shows escaped, as ``repr`` does (``\\x00``): controls (C0, DEL,
C1), line separators and bidirectional overrides, which a terminal would act on or a reader
not see. A message quotes the user's text (a recipe's key, a flag's value) as it came."""


def escaped(text: str) -> str:
    r"""``text`` with its control characters written as escapes (a NUL as ``\x00``).

    >>> escaped("lear\x00ning_rate")
    'lear\\x00ning_rate'
    """
    return text.translate(_CONTROL)


def _line(command: str, kind: str, message: object) -> str:
    text = escaped(" ".join(plain(cut(str(message), LINE)).split("\n")).strip())
    label = f"eligibility {command}" if command else "eligibility"
    return f"{label}: {kind}: {text}\n" if kind else f"{label}: {text}\n"


def note(command: str, message: object, *, kind: str = "note") -> None:
    """One line on stderr: ``eligibility COMMAND: note: MESSAGE`` (escapes and newlines removed).

    Args:
        command: the subcommand (``train``); empty for the top level.
        message: the text; its line breaks become spaces.
        kind: ``note``, ``warning``, ``error``, ``deprecated``; empty for a progress line.
    """
    sys.stderr.write(_line(command, kind, message))
    sys.stderr.flush()


def warning(command: str, message: object) -> None:
    """One warning line on stderr (see :func:`note`)."""
    note(command, message, kind="warning")


@contextlib.contextmanager
def forward_warnings(command: str) -> Iterator[None]:
    """Within the block, every Python warning is one plain line on stderr (see :func:`note`).

    Gymnasium colours its warnings (an escape code, then ``WARN: …``); the codes are removed,
    so a log file or a pipe holds the words only. Each distinct warning is shown once.
    """
    seen: set[str] = set()

    def show(message: Any, category: Any, filename: str, lineno: int, *rest: Any) -> None:
        line = _line(command, "warning", message)
        if line not in seen:
            seen.add(line)
            sys.stderr.write(line)

    token = _COMMAND.set(command)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = show
            yield
    finally:
        _COMMAND.reset(token)


_COMMAND: contextvars.ContextVar[str | None] = contextvars.ContextVar("command", default=None)
"""The subcommand the command line runs (set by :func:`forward_warnings`)."""


def speaker(default: str) -> str:
    """The subcommand a note of shared code speaks for: the one running, else ``default``.

    (An environment's note during ``evaluate`` is ``eligibility evaluate: note: …``.)
    """
    return _COMMAND.get() or default


def stdout_console(**kwargs: Any) -> Any:
    """A rich Console on stdout: colour on a terminal; plain and never wrapped when piped."""
    return _console(sys.stdout, **kwargs)


def stderr_console(**kwargs: Any) -> Any:
    """A rich Console on stderr (progress bars): colour only when stderr is a terminal."""
    return _console(sys.stderr, **kwargs)


def _console(stream: IO[str], **kwargs: Any) -> Any:
    from rich.console import Console

    kwargs.setdefault("highlight", False)
    if not is_terminal(stream):
        kwargs.setdefault("width", PIPE_WIDTH)
        kwargs.setdefault("color_system", None)
        kwargs.setdefault("soft_wrap", True)
    return Console(file=stream, **kwargs)


def key_column(table: Any, header: str, **kwargs: Any) -> None:
    """Add a column whose words are never cut: folded onto a new line if space runs out.

    Use it for the columns a reader greps for (a problem's name, a verdict, a diagnosis).
    """
    kwargs.setdefault("justify", "left")
    table.add_column(header, overflow="fold", min_width=len(header), **kwargs)


__all__ = [
    "ANSI",
    "LINE",
    "PIPE_WIDTH",
    "QUOTED",
    "cut",
    "emit_json",
    "escaped",
    "forward_warnings",
    "is_terminal",
    "key_column",
    "note",
    "plain",
    "quoted",
    "stderr_console",
    "stdout_console",
    "warning",
]
