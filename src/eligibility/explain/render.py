"""Render a :class:`~eligibility.explain.doc.Document` as text, Markdown or LaTeX.

Text is for a person at a terminal: rich tables with aligned columns, Unicode mathematics, and
colour only when asked for (the command line asks when stdout is a terminal). Markdown keeps
the Unicode mathematics and turns tables into pipe tables. LaTeX is an ASCII fragment for a
document that loads ``amsmath``.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import TextIO

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table as RichTable
from rich.text import Text

from eligibility.explain.doc import (
    Block,
    Document,
    Equation,
    Math,
    Num,
    Paragraph,
    Piece,
    Section,
    Table,
    Vector,
    fmt,
)
from eligibility.explain.notation import SUBSCRIPTS, SUPERSCRIPTS, SYMBOLS, to_tex

_STYLE = {"math": "cyan", "num": "bold yellow", "title": "bold", "section": "bold magenta"}


def _piece_text(p: Piece, precision: int) -> str:
    if isinstance(p, str):
        return p
    if isinstance(p, Math):
        return p.text
    if isinstance(p, Num):
        return fmt(p.x, precision, p.sci)
    return "[" + ", ".join(fmt(x, precision) for x in p.xs) + "]"


def _sections(x: Document) -> list[tuple[str | None, list[Section]]]:
    """Each part's sections, then the autograd check as a part of its own."""
    out: list[tuple[str | None, list[Section]]] = [(p.label, list(p.sections)) for p in x.parts]
    out.append((None, [x.check_section]))
    return out


def _numbered(x: Document) -> list[tuple[str | None, list[tuple[str, Section]]]]:
    parts = _sections(x)
    out = []
    last = len(parts) - 1
    for j, (label, secs) in enumerate(parts):
        if j == last:
            n = max(len(s) for _, s in parts[:-1]) + 1 if last else 1
            out.append((label, [(str(n), secs[0])]))
        else:
            out.append((label, [(str(i + 1), s) for i, s in enumerate(secs)]))
    return out


# text ---------------------------------------------------------------------------------------


def _rich_line(pieces: tuple[Piece, ...], precision: int, width: int | None = None) -> Text:
    """Styled text; wrapped at ``width`` between words, never inside a number or a vector."""
    chars: list[tuple[str, str]] = []
    for p in pieces:
        style = (
            ""
            if isinstance(p, str)
            else _STYLE["num"]
            if isinstance(p, Num | Vector)
            else (_STYLE["math"])
        )
        s = _piece_text(p, precision)
        if isinstance(p, Vector):
            s = s.replace(" ", "\0")  # a vector is one word: no break after its commas
        chars += [(c, style) for c in s]
    words: list[list[tuple[str, str]]] = [[]]
    for c, style in chars:
        if c == " ":
            words.append([])
        else:
            words[-1].append((" " if c == "\0" else c, style))
    # Our own line breaks; rich must not wrap again (but may justify a table header).
    t = Text(no_wrap=True, overflow="ignore") if width is not None else Text()
    col = 0
    for j, word in enumerate(words):
        if j:
            if width is not None and col > 0 and col + 1 + len(word) > width:
                t.append("\n")
                col = 0
            else:
                t.append(" ")
                col += 1
        for c, style in word:
            t.append(c, style=style)
        col += len(word)
    return t


def _rich_table(tab: Table, precision: int) -> RichTable:
    rt = RichTable(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for j, h in enumerate(tab.header):
        words = any(isinstance(row[j], str) and not row[j].isdigit() for row in tab.rows)
        rt.add_column(_rich_line((h,), precision), justify="left" if words else "right")
    if tab.mark is not None:
        rt.add_column("", justify="left")
    for i, row in enumerate(tab.rows):
        cells: list[RenderableType] = [Text(_piece_text(c, precision)) for c in row]
        if tab.mark is not None:
            cells.append(Text(tab.mark_label if i == tab.mark else ""))
        rt.add_row(*cells, style="bold" if i == tab.mark else None)
    return rt


def renderables(x: Document, precision: int = 4, width: int = 100) -> list[RenderableType]:
    """The explanation as rich renderables, for a console ``width`` columns wide."""
    out: list[RenderableType] = [Text(x.title, style=_STYLE["title"]), Text("")]
    for label, secs in _numbered(x):
        if label is not None:
            out += [Text(f"── {label} ──", style=_STYLE["title"]), Text("")]
        for num, sec in secs:
            out.append(Text(f"{num}. {sec.title}", style=_STYLE["section"]))
            for b in sec.blocks:
                if isinstance(b, Paragraph):
                    body: RenderableType = _rich_line(b.pieces, precision, width - 4)
                elif isinstance(b, Equation):
                    body = Padding(_rich_line(b.pieces, precision, width - 7), (0, 0, 0, 3))
                else:
                    body = Padding(_rich_table(b, precision), (0, 0, 0, 3))
                out.append(Padding(body, (0, 0, 0, 3)))
            out.append(Text(""))
    return out


def text(x: Document, precision: int = 4, width: int = 100, color: bool = False) -> str:
    """Render as text of the given width (ANSI colour codes only when ``color``)."""
    buf = io.StringIO()
    console = Console(
        file=buf,
        width=width,
        force_terminal=color,
        color_system="standard" if color else None,
        highlight=False,
        emoji=False,
        legacy_windows=False,
        force_jupyter=False,  # in a notebook rich would display HTML and leave buf empty
    )
    console.print(Group(*renderables(x, precision, width)))
    lines = [ln.rstrip() for ln in buf.getvalue().splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n"


def print_text(x: Document, precision: int = 4, file: TextIO | None = None) -> None:
    """Print for a person: colour and the terminal's width on a terminal, plain text when piped."""
    console = Console(file=file, highlight=False, emoji=False)
    if console.is_terminal:
        console.print(Group(*renderables(x, precision, console.width)))
    else:
        (file or console.file).write(text(x, precision=precision))


# markdown -----------------------------------------------------------------------------------


def _md_escape_cell(s: str) -> str:
    return s.replace("|", r"\|")


def markdown(x: Document, precision: int = 4) -> str:
    """Render as Markdown: one heading per step, pipe tables, Unicode mathematics."""

    def block(b: Block) -> list[str]:
        if isinstance(b, Paragraph):
            return ["".join(_piece_text(p, precision) for p in b.pieces), ""]
        if isinstance(b, Equation):
            return ["> " + "".join(_piece_text(p, precision) for p in b.pieces), ""]
        head = [_md_escape_cell(_piece_text(h, precision)) for h in b.header]
        if b.mark is not None:
            head.append("")
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" for _ in head) + "|"]
        for i, row in enumerate(b.rows):
            cells = [_md_escape_cell(_piece_text(c, precision)) for c in row]
            if b.mark is not None:
                cells.append(b.mark_label if i == b.mark else "")
            lines.append("| " + " | ".join(cells) + " |")
        return [*lines, ""]

    return _joined(
        x,
        [f"# {x.title}", ""],
        lambda label: f"## {label}",
        lambda num, title, stepped: f"{'###' if stepped else '##'} {num}. {title}",
        block,
    )


def _joined(
    x: Document,
    top: list[str],
    step: Callable[[str], str],
    section: Callable[[str, str, bool], str],
    block: Callable[[Block], list[str]],
) -> str:
    """A markup's text: ``top``, then each step's heading and each section's and its blocks.

    ``section`` is told whether the section sits under a step; a blank line follows each
    heading, none ends the text.
    """
    lines = list(top)
    for label, secs in _numbered(x):
        if label is not None:
            lines += [step(label), ""]
        for num, sec in secs:
            lines += [section(num, sec.title, label is not None), ""]
            for b in sec.blocks:
                lines += block(b)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n"


# latex --------------------------------------------------------------------------------------

_TEXT_TEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "—": "---",
    "–": "--",
    "…": r"\ldots{}",
    "•": r"\textbullet{}",
    "‘": "`",
    "’": "'",
    "“": "``",
    "”": "''",
    # in the default OT1 text font these three print as ¿, ¡ and —
    ">": "$>$",
    "<": "$<$",
    "|": r"\textbar{}",
}

_SUB = SUBSCRIPTS
_SUP = SUPERSCRIPTS


def _tex_chars(s: str) -> str:
    out = []
    for ch in s:
        if ch in _TEXT_TEX:
            out.append(_TEXT_TEX[ch])
        elif ch in SYMBOLS:  # the one TeX table, that of the formulas
            out.append(f"${SYMBOLS[ch]}$")
        elif ord(ch) < 128:
            out.append(ch)
        else:
            out.append("?")  # never reached by our prose; keeps the output ASCII
    return "".join(out)


_SCRIPT_RUN = re.compile("([" + "".join(_SUB) + "]+|[" + "".join(_SUP) + "]+)")
_INDEXED = re.compile(r"(?<![\w.])([A-Za-zα-ωΣ]_[A-Za-zα-ω](?:,[" + "".join(_SUB) + r"]+)?)(?!\w)")
"""A symbol with a ``_`` index in prose (``e_z,ᵢ``, ``e_μ``), not an identifier (``log_prob``)."""


_CODE = re.compile(r"`([^`]+)`")
"""A code span in prose (a word in backquotes), set in typewriter type."""


def _tex_prose(s: str) -> str:
    r"""Prose with stray Unicode mathematics as inline LaTeX; ᵢₐ becomes one subscript.

    A symbol indexed with ``_`` (``Σᵢ e_z,ᵢ``) is one piece of mathematics, ``e_{z,i}``; a code
    span is set with ``\texttt``.
    """
    pieces = _CODE.split(s)
    if len(pieces) > 1:
        return "".join(
            rf"\texttt{{{_tex_chars(p)}}}" if k % 2 else _tex_prose(p) for k, p in enumerate(pieces)
        )
    out = []
    for k, piece in enumerate(_INDEXED.split(s)):
        if k % 2:
            out.append("$" + to_tex(piece) + "$")
            continue
        for j, chunk in enumerate(_SCRIPT_RUN.split(piece)):
            if j % 2 == 0:
                out.append(_tex_chars(chunk))
            elif chunk[0] in _SUB:
                out.append("$_{" + "".join(_SUB[c] for c in chunk) + "}$")
            else:
                out.append("$^{" + "".join(_SUP[c] for c in chunk) + "}$")
    return "".join(out).replace("$$", "")


def _tex_num(p: Num | Vector, precision: int) -> str:
    def one(v: float, sci: bool = False) -> str:
        s = fmt(v, precision, sci)
        if s in ("inf", "-inf"):
            return r"-\infty" if s.startswith("-") else r"\infty"
        if "e" in s:
            mant, ex = s.split("e")
            return rf"{mant}\times 10^{{{int(ex)}}}"
        return s

    if isinstance(p, Num):
        return one(p.x, p.sci)
    return r"\bigl[" + ",\\ ".join(one(v) for v in p.xs) + r"\bigr]"


def _tex_pieces(pieces: tuple[Piece, ...], precision: int, display: bool) -> str:
    r"""Prose as text, maths merged into runs; in display maths, prose goes into \\text{}."""
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            out.append("".join(run) if display else "$" + "".join(run) + "$")
            run.clear()

    for p in pieces:
        if isinstance(p, str):
            flush()
            body = _tex_prose(p)
            out.append(rf"\text{{{body}}}" if display and p.strip() else ("~" if display else body))
        elif isinstance(p, Math):
            run.append(p.tex)
        else:
            run.append(_tex_num(p, precision))
    flush()
    return "".join(out)


def latex(x: Document, precision: int = 4) -> str:
    """Render as a LaTeX fragment (sections, displayed equations, tabulars); ASCII only."""

    def block(b: Block) -> list[str]:
        if isinstance(b, Paragraph):
            return [_tex_pieces(b.pieces, precision, display=False), ""]
        if isinstance(b, Equation):
            return [r"\[ " + _tex_pieces(b.pieces, precision, display=True) + r" \]", ""]
        ncol = len(b.header) + (1 if b.mark is not None else 0)
        lines = [r"\begin{tabular}{" + "r" * ncol + "}"]
        head = [_tex_cell(h, precision) for h in b.header]
        if b.mark is not None:
            head.append("")
        lines.append(" & ".join(head) + r" \\ \hline")
        for i, row in enumerate(b.rows):
            cells = [_tex_cell(c, precision) for c in row]
            if b.mark is not None:
                cells.append(r"$\leftarrow a$" if i == b.mark else "")
            lines.append(" & ".join(cells) + r" \\")
        return [*lines, r"\end{tabular}", ""]

    return _joined(
        x,
        [
            "% eligibility explain: needs \\usepackage{amsmath}",
            rf"\section*{{{_tex_prose(x.title)}}}",
            "",
        ],
        lambda label: rf"\subsection*{{{_tex_prose(label)}}}",
        lambda num, title, _: rf"\subsubsection*{{{num}. {_tex_prose_title(title)}}}",
        block,
    )


def _tex_prose_title(s: str) -> str:
    return _tex_prose(s)


def _tex_cell(p: Piece, precision: int) -> str:
    if isinstance(p, str):
        return _tex_prose(p)
    return _tex_pieces((p,), precision, display=False)


__all__ = ["latex", "markdown", "print_text", "renderables", "text"]
