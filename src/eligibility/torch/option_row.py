r"""One row of the option table (:mod:`eligibility.torch.options`) and how a framework spells it.

An :class:`Option` is an option's pure function, its name, its verdicts and, per framework, the
configuration that chooses it (a :class:`Spelling`: keys and values as the framework reads them,
which ``check``'s fixes read too). The rows themselves are in :mod:`~eligibility.torch.options`
(on-policy) and :mod:`~eligibility.torch.options_offpolicy`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

VERSIONS = {"TRL": "TRL 1.16", "verl": "verl 0.9", "OpenRLHF": "OpenRLHF 0.11"}
"""The framework versions whose code the rows' framework names were read from."""

BETA = "β"
"""A key's value that stands for the objective's KL weight (the user's β)."""


def _yaml(value: Any) -> str:
    """A value as a YAML configuration writes it (``true``, ``null``, ``0.2``, ``[0.2, 0.28]``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Spelling:
    """How one framework's configuration chooses a row: its keys and their values, and a note.

    The keys are the ones the framework reads, as ``eligibility check --framework`` takes
    them (read from TRL 1.16's ``GRPOConfig`` and the check's ``trainer`` key, verl 0.9.1's
    YAML paths ``algorithm.…``/``actor.…``, OpenRLHF 0.11.2's command-line keys ``algo.…``/
    ``actor.…``); a value :data:`BETA` is the objective's KL weight. ``check``'s fixes for a
    framework are these keys (:mod:`eligibility.check.fixes`).

    >>> Spelling((("algorithm.norm_adv_by_std_in_grpo", False),)).text
    'algorithm.norm_adv_by_std_in_grpo: false'
    """

    keys: tuple[tuple[str, Any], ...] = ()
    note: str = ""

    @property
    def config(self) -> dict[str, Any]:
        """The keys as a configuration (``{"scale_rewards": "none"}``)."""
        return dict(self.keys)

    @property
    def text(self) -> str:
        """``key: value and key: value (note)``, or the note alone where there are no keys."""
        return self.said()

    def said(self, also: str = "") -> str:
        """:attr:`text` with ``also`` after the note (``… (note; also)``)."""
        keys = " and ".join(f"{k}: {_yaml(v)}" for k, v in self.keys)
        notes = "; ".join(n for n in (self.note, also) if n)
        return f"{keys} ({notes})" if keys and notes else keys or notes


def say(keys: dict[str, Any] | None = None, note: str = "") -> Spelling:
    """The :class:`Spelling` of ``keys`` (in their order) and ``note``."""
    return Spelling(tuple((keys or {}).items()), note)


Verdict = tuple[str, str | None]
"""What the check reports on one problem: (``unbiased``/``scaled``/``biased``, diagnosis)."""

UNBIASED: Verdict = ("unbiased", None)


@dataclass(frozen=True)
class Option:
    """One row: an option of one kind, its function, its names elsewhere and its verdicts.

    Attributes:
        kind: ``baseline``, ``scale``, ``aggregation`` or ``kl`` (on-policy), or ``ratio``,
            ``surrogate`` or ``correction`` (off-policy: :data:`OFF_POLICY_KINDS`).
        name: the option's name in ``eligibility`` (the loss's argument, ``finetune``'s flag).
        formula: its pure function's name in :mod:`~eligibility.torch.formulas`, or None.
        mistake: the name ``eligibility check`` gives the bias it makes, or None.
        scale: for a step size, the name of the constant the check reports, or None.
        verdicts: problem → the check's verdict of the loss with this row and the defaults
            (the problems of its family: :data:`PROBLEMS` or :data:`OFF_POLICY_PROBLEMS`).
        frameworks: framework → how its configuration chooses this option (:class:`Spelling`;
            ``VERSIONS`` names the version).
        placement: for ``kl``: ``reward`` (R̃ = R − β D), ``advantage`` (Â = A − β K) or
            ``loss`` (+ β k per token); empty otherwise.
        summary: one line on what it does to the gradient.
        params: an off-policy row's settings its verdicts hold for (ε, c, the cap C, the level),
            as :func:`~eligibility.torch.offpolicy.off_policy_loss` takes them; a row that is a
            setting of another (``clip-higher`` of ``ppo-clip``) names it (``surrogate=…``).
        needs: what a loss using this row must be given (:data:`NEEDS`), as torch's
            ``arg_constraints`` sit beside a distribution; one check reads it for every loss.
        takes: the loss's optional arguments only this row reads (``normaliser``).
    """

    kind: str
    name: str
    formula: str | None
    verdicts: dict[str, Verdict]
    summary: str
    frameworks: dict[str, Spelling] = field(default_factory=dict)
    mistake: str | None = None
    scale: str | None = None
    placement: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    needs: tuple[str, ...] = ()
    takes: tuple[str, ...] = ()

    @property
    def fn(self) -> Callable[..., Any] | None:
        """The pure function, or None; imported here, so the names import without torch."""
        from eligibility.torch import formulas  # an import statement torch.compile traces

        return None if self.formula is None else getattr(formulas, self.formula)


NEEDS = {
    "max_completion_length": "max_completion_length (T_max, the generation limit): pass it",
    "even_rows": "logps with an even number of rows N (it splits the batch in two halves)",
    "ref_logps": "ref_logps (the reference policy's per-token log-probs) when beta > 0",
}
"""What a row may need (its ``needs``): the argument named, and what it is."""


__all__ = ["BETA", "NEEDS", "UNBIASED", "VERSIONS", "Option", "Spelling", "Verdict", "say"]
