"""The derivation as data: sections of paragraphs, equations and tables over raw numbers.

A derivation is built once (:mod:`eligibility.explain.derivation`) and rendered many ways
(:mod:`eligibility.explain.render`). Numbers stay floats until a renderer formats them, so the
precision is a rendering choice; symbols carry a Unicode spelling (text, markdown) and a LaTeX
one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class M:
    """A piece of mathematics: its Unicode spelling and its LaTeX spelling."""

    text: str
    tex: str


@dataclass(frozen=True)
class N:
    """A number, formatted with the renderer's precision (``sci``: in scientific notation)."""

    x: float
    sci: bool = False


@dataclass(frozen=True)
class V:
    """A vector of numbers, written ``[x₀, x₁, …]``."""

    xs: tuple[float, ...]


Piece = str | M | N | V
"""Plain prose (a ``str``), mathematics, a number or a vector."""

Line = tuple[Piece, ...]


@dataclass(frozen=True)
class Para:
    """A paragraph of prose mixed with inline mathematics and numbers."""

    pieces: Line


@dataclass(frozen=True)
class Eq:
    """A displayed equation (a line of its own)."""

    pieces: Line


@dataclass(frozen=True)
class Table:
    """Aligned columns, one row per component; ``mark`` is the row of the action taken."""

    header: tuple[Piece, ...]
    rows: tuple[tuple[Piece, ...], ...]
    mark: int | None = None
    mark_label: str = "← a"


Block = Para | Eq | Table


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


def vec(xs: Iterable[float] | np.ndarray) -> V:
    """A :class:`V` from any 1-d sequence of numbers."""
    return V(tuple(float(x) for x in np.ravel(np.asarray(xs, dtype=float))))


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
