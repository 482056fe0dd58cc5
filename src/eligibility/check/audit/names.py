r"""The finding the credit audit gives: a mistake of the registry, where and how much.

Every name the audit can give is declared once, in :mod:`eligibility.check.mistakes`, with its
meaning, its fix in each form and the framework keys that remove it; the audit is one of its
finders (:data:`~eligibility.check.mistakes.AUDIT`). A :class:`Finding` can only carry such a
name (a ``ValueError`` otherwise), so the audit cannot say a name the report does not explain.
"""

from __future__ import annotations

from dataclasses import dataclass

from eligibility.check.mistakes import AUDIT, MISTAKES, named


@dataclass(frozen=True)
class Finding:
    """One thing the audit found.

    Attributes:
        name: its name, a mistake of :data:`~eligibility.check.mistakes.MISTAKES` that the
            audit gives.
        where: the tokens and the relation, in the user's terms.
        share: the share of the loss's total |weight| on the tokens concerned (None where
            the finding is a relation, not a set of tokens).
        leak: a term no correct estimator has, or one it must have and lacks, on every
            batch that holds it, whatever the mean says: the check fails on it.
        constant: the c of "every weight is c times the exact credit's", where the finding
            is a constant the audit fitted (None otherwise): the one value the report holds
            against the table's scale, whatever words ``where`` says it in.
        instead_of: names this finding shows untrue on these batches, where the weights alone
            would fit them too (``stale-old-logps`` beside a cap read with the ratio the loss
            computes from θ_old's log-probs): a row of the table that gives one of them is
            not the reading (:func:`~eligibility.check.audit.judge.one_reading`).
    """

    name: str
    where: str
    share: float | None = None
    leak: bool = False
    constant: float | None = None
    instead_of: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for other in self.instead_of:
            named(other)
        if AUDIT not in MISTAKES[named(self.name)].found_by:
            raise ValueError(
                f"the mistake {self.name!r} is not one the credit audit gives "
                "(eligibility.check.mistakes: its found_by)"
            )

    def to_json(self) -> dict[str, object]:
        """The finding as the report's JSON holds it."""
        return {
            "name": self.name,
            "where": self.where,
            "share": self.share,
            "leak": self.leak,
            "constant": self.constant,
        }


__all__ = ["Finding"]
