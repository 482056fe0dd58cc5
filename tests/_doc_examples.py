"""The examples of README.md and docs/: fenced code blocks, the commands and programs in them.

A page marks a block it cannot run here with an HTML comment on the line before the fence,
``<!-- example: needs REASON -->`` (the real-model kit, a GPU, a Ray cluster): the block is
still parsed, and the reason is shown where the tests report it.
"""

from __future__ import annotations

import ast
import builtins
import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
SHELLS = {"sh", "bash", "shell", "console", ""}
FENCE = re.compile(r"(?ms)^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$")
NOTE = re.compile(r"<!--\s*example:\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text and its note (or "")."""

    page: Path
    line: int
    lang: str
    text: str
    note: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


@dataclass(frozen=True)
class Command:
    """One command line of a shell block, split as the shell would (argv without env vars)."""

    block: Block
    line: int
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    expect: int | None = None
    """The exit status the page shows for it (``$ echo $?`` and its answer), if it shows one."""

    @property
    def where(self) -> str:
        return f"{self.block.page.relative_to(ROOT)}:{self.line}"

    def __str__(self) -> str:
        return shlex.join(self.argv)


def blocks(pages: tuple[Path, ...] = PAGES) -> list[Block]:
    """Every fenced block of ``pages``, with the note of the line before it."""
    out = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            note = NOTE.search(before)
            line = text[: m.start()].count("\n") + 2
            out.append(Block(page, line, m.group(1), m.group(2), note.group(1) if note else ""))
    return out


_SEQ = re.compile(r"\$\(seq -s ' ' (\d+) (\d+)\)")


def _numbers(m: re.Match[str]) -> str:
    return " ".join(str(i) for i in range(int(m[1]), int(m[2]) + 1))


def _expand_seq(text: str) -> str:
    """``$(seq -s ' ' A B)`` written out; quoted where a variable is set to it."""
    text = re.sub(
        r"(\w+)=" + _SEQ.pattern, lambda m: f"{m[1]}='{_numbers(_SEQ.search(m[0]))}'", text
    )
    return _SEQ.sub(_numbers, text)


_WRAPPERS = {"nice", "timeout", "/usr/bin/time"}
_VALUED = {"-f", "-n", "-o", "-s", "-k"}
"""Options of the wrappers that take a value."""


def _unwrap(words: list[str]) -> list[str]:
    """``words`` without ``nice -n 10``, ``timeout 60``, ``/usr/bin/time -f FMT`` before them."""
    while words and words[0] in _WRAPPERS:
        wrapper, words = words[0], words[1:]
        while words and words[0].startswith("-"):
            words = words[2:] if words[0] in _VALUED else words[1:]
        if wrapper == "timeout" and words:
            words = words[1:]
    return words


def _complete(text: str) -> bool:
    """Whether ``text`` is a whole command: no quotation left open."""
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return False
    return True


def _logical_lines(block: Block) -> list[tuple[int, str]]:
    """(line number, text) of each command of a shell block: continuations and quotes joined.

    In a console block (``$ `` before each command) the other lines are the output.
    """
    console = block.lang in ("console", "")
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for i, raw in enumerate(block.text.splitlines()):
        line = raw.rstrip()
        if pending is None:
            if console:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            pending = (block.line + i, line)
        else:
            pending = (pending[0], pending[1] + "\n" + line)
        if not line.endswith("\\") and _complete(pending[1]):
            out.append((pending[0], pending[1].replace("\\\n", " ")))
            pending = None
    return out


def commands(block: Block) -> list[Command]:
    """The commands of a shell block; ``a && b`` is two, output redirections are dropped.

    ``S=$(seq -s ' ' 1 3)`` alone on a line sets ``$S`` for the block's later commands.
    """
    if block.lang not in SHELLS:
        return []
    out, variables = [], {}
    for line, text in _logical_lines(block):
        text = _expand_seq(text)
        text = re.sub(r"\$(\w+)", lambda m: variables.get(m[1], m[0]), text)
        for part in text.split("&&"):
            words = shlex.split(part, comments=True)
            redirected = {i + 1 for i, w in enumerate(words) if re.fullmatch(r"\d?>", w)}
            words = [
                w for i, w in enumerate(words) if i not in redirected and not re.match(r"^\d?>", w)
            ]
            env = []
            while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
                key, _, value = words.pop(0).partition("=")
                known = {**variables, **dict(env)}  # `A=x B=$A/y`: B reads the A before it
                env.append((key, re.sub(r"\$(\w+)", lambda m, k=known: k.get(m[1], m[0]), value)))
            if not words and env:  # S=…: a variable of the block, not a command
                variables.update(env)
                continue
            words = _unwrap(words)
            if words[:2] == ["echo", "$?"] and out:  # the page shows the status of the last
                shown = block.text.splitlines()[line - block.line + 1 :][:1]
                if shown and shown[0].strip().isdigit():
                    out[-1] = replace(out[-1], expect=int(shown[0]))
            elif words:
                out.append(Command(block, line, tuple(words), tuple(env)))
    return out


def python_names(source: str) -> tuple[set[str], set[str]]:
    """(names the program loads but never binds, names it imports), builtins aside."""
    tree = ast.parse(source)
    bound, loaded, imported = set(), set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                name = (alias.asname or alias.name).split(".")[0]
                bound.add(name)
                imported.add(name)
    return loaded - bound - set(dir(builtins)), imported


def imports_of(source: str) -> str:
    """The program's import statements alone, in order."""
    tree = ast.parse(source)
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    return "\n".join(ast.unparse(n) for n in nodes)
