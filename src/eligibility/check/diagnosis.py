r"""What the check found on one problem, as values: the mistakes' names, a constant, a note.

A diagnosis is built once, where the engine (or a rule after it) finds it, and read as values
everywhere after: the fixes (:mod:`eligibility.check.fixes`) by its names, the constant in
words by its fitted constant, the report's explanation by each name. Only the report renders
it, as one line:

    name₁ (note₁), name₂ × c

``a, b`` are the named mistakes (a family's variant names each of its mistakes), ``× c`` a
constant fitted to a variant (V × c: the user's estimates are c times V's), ``(note)`` what a
name carries with it (``kl-weight (config 0.04, objective β = 0.1)``).

    >>> found = Diagnosis(("kl-weight", "std-normalised"), 1.155, (("kl-weight", "config 0.04"),))
    >>> found.text
    'kl-weight (config 0.04), std-normalised × 1.2'
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Diagnosis:
    """The names of what was found, the constant fitted to them, and each name's note.

    Attributes:
        names: the mistakes named (``std-normalised``), or one of the engine's own findings
            (``scale``, ``sign``, ``other``, ``no-gradient``), in the order found.
        times: c where the user's estimates are c times the named variant's (``V × c``);
            None where the variant is the estimator as it is.
        notes: (name, note) for a name that carries values with it (the KL weights of
            ``kl-weight``).
        by_value: the names of :attr:`names` given as the cause of ``times`` from its value
            alone (a constant the problem knows equals it: 1/T = 0.2 at T = 5 is also a cap
            at 0.2); the credit audit, where it reads the weights' map, keeps only those its
            reading shows. Where the names came from, not what they are: not compared.
    """

    names: tuple[str, ...]
    times: float | None = None
    notes: tuple[tuple[str, str], ...] = ()
    by_value: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def of(cls, label: str, times: float | None = None) -> Diagnosis:
        """A family's label of a variant or a mistake (its names joined by ``", "``).

        A label is the family's own data (``", ".join`` of its mistakes' names, as its
        ``Draw.variants`` and ``Trial.expectations`` key them), never a rendered diagnosis:
        it has no constant and no note.
        """
        return cls(tuple(label.split(", ")), times)

    def note(self, name: str) -> str | None:
        """The note ``name`` carries, or None."""
        return dict(self.notes).get(name)

    def plus(self, name: str) -> Diagnosis:
        """This diagnosis with ``name`` added last (kept once)."""
        if name in self.names:
            return self
        return Diagnosis((*self.names, name), self.times, self.notes, self.by_value)

    @property
    def text(self) -> str:
        """The report's line: ``a (note), b × c`` (c to two digits)."""
        parts = [f"{n} ({self.note(n)})" if self.note(n) else n for n in self.names]
        times = "" if self.times is None else f" × {self.times:.2g}"
        return ", ".join(parts) + times

    def __str__(self) -> str:
        return self.text


__all__ = ["Diagnosis"]
