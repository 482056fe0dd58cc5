"""The derivation as data: sections of paragraphs, equations and tables over raw numbers.

A derivation is built once (one module per distribution, e.g.
:mod:`eligibility.explain.categorical`) and rendered many ways (:mod:`eligibility.explain.render`,
which imports only this module). Numbers stay floats until a renderer formats them, so the
precision is a rendering choice; mathematics is written once in Unicode and spelt in LaTeX by
:func:`eligibility.explain.notation.to_tex`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from eligibility.explain.notation import to_tex


@dataclass(frozen=True)
class Math:
    """A piece of mathematics, written once in Unicode; :attr:`tex` is its LaTeX spelling."""

    text: str

    @property
    def tex(self) -> str:
        """The LaTeX spelling (maths mode) of :attr:`text`."""
        return to_tex(self.text)


@dataclass(frozen=True)
class Num:
    """A number, formatted with the renderer's precision (``sci``: in scientific notation)."""

    x: float
    sci: bool = False


@dataclass(frozen=True)
class Vector:
    """A vector of numbers, written ``[x₀, x₁, …]``."""

    xs: tuple[float, ...]


Piece = str | Math | Num | Vector
"""Plain prose (a ``str``), mathematics, a number or a vector."""

Line = tuple[Piece, ...]


@dataclass(frozen=True)
class Paragraph:
    """A paragraph of prose mixed with inline mathematics and numbers."""

    pieces: Line


@dataclass(frozen=True)
class Equation:
    """A displayed equation (a line of its own)."""

    pieces: Line


@dataclass(frozen=True)
class Table:
    """Aligned columns, one row per component; ``mark`` is the row of the action taken."""

    header: tuple[Piece, ...]
    rows: tuple[tuple[Piece, ...], ...]
    mark: int | None = None
    mark_label: str = "← a"


Block = Paragraph | Equation | Table


@dataclass(frozen=True)
class Section:
    """A numbered step of the derivation."""

    title: str
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class Part:
    """The derivation for one row of a batch (the whole derivation when there is one row)."""

    label: str | None
    sections: tuple[Section, ...]


@dataclass(frozen=True)
class Document:
    """What a renderer needs: a title, the parts (one per row), and the closing check."""

    title: str
    parts: tuple[Part, ...]
    check_section: Section


def vector(xs: Iterable[float] | np.ndarray) -> Vector:
    """A :class:`Vector` from any 1-d sequence of numbers."""
    return Vector(tuple(float(x) for x in np.ravel(np.asarray(xs, dtype=float))))


def line(*parts: object) -> Line:
    """A line of pieces: floats become :class:`Num`, arrays :class:`Vector`, the rest as given."""
    out: list[Piece] = []
    for p in parts:
        if isinstance(p, np.ndarray):
            out.append(vector(p))
        elif isinstance(p, float | np.floating):
            out.append(Num(float(p)))
        elif isinstance(p, Math | Num | Vector | str):
            out.append(p)
        else:
            raise TypeError(f"cannot place {p!r} in a line")
    return tuple(out)


def paragraph(*parts: object) -> Paragraph:
    """A paragraph (pieces as in :func:`line`)."""
    return Paragraph(line(*parts))


def equation(*parts: object) -> Equation:
    """A displayed equation (pieces as in :func:`line`)."""
    return Equation(line(*parts))


def table(header: list[object], rows: list[list[object]], mark: int | None = None) -> Table:
    """A table; integers are shown as integers, floats with the renderer's precision."""

    def cell(x: object) -> Piece:
        if isinstance(x, int | np.integer) and not isinstance(x, bool):
            return str(int(x))
        return line(x)[0]

    return Table(
        header=tuple(cell(h) for h in header),
        rows=tuple(tuple(cell(x) for x in r) for r in rows),
        mark=mark,
    )


def fmt(x: float, precision: int, sci: bool = False) -> str:
    """``x`` with ``precision`` decimals, ASCII minus, ±∞ spelt out, and no negative zero."""
    if np.isnan(x):
        return "nan"
    if np.isinf(x):
        return "-inf" if x < 0 else "inf"
    s = f"{x:.{max(precision - 2, 1)}e}" if sci else f"{x:.{precision}f}"
    if s.startswith("-") and float(s) == 0.0:
        s = s[1:]
    return s
