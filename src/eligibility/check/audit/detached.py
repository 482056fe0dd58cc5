r"""Tokens whose log-prob the loss read only without its gradient: said, never read as a map.

A loss that detaches part of what it should differentiate (``logps.detach()`` on some tokens
or a whole reply, a ratio exp(sg(ℓ) − ℓ_old) whose numerator is detached, a value computed
under ``torch.no_grad()``) gives those tokens wₜ = ∂L/∂ℓₜ = 0 though its value reads them. The
weight is read right (it is 0); what it must not be read as is a mask, a drop at random or a
function of the advantage. The tap notes the entries each detached read was computed from
(:attr:`~eligibility.check.audit.tap.Tap.detached`); the model's tokens among them with an
exact credit cₜ ≠ 0 and no weight are said, described by the simplest rule over their features
(:func:`~eligibility.check.audit.tokens.describe`), and E[ĝ] misses their terms: the check
fails on it, as on a leak. The weights' relation to the credit is then not read (the tokens
that carry none would be read as a map they are not).
"""

from __future__ import annotations

import numpy as np

from eligibility.check.audit.names import Finding
from eligibility.check.audit.seen import Seen
from eligibility.check.audit.tokens import RULE_PHI, _said, _share, atoms, describe, tokens
from eligibility.check.mistakes import named

# the mistake this module names, declared in eligibility.check.mistakes
LOGPS_DETACHED = named("logps-detached")


def unattached(seen: list[Seen], top: float, zero_tol: float) -> Finding | None:
    """The model's tokens owed a weight whose log-prob the loss read detached, and none else.

    Args:
        seen: the audited batches.
        top: the largest |w| on the model's tokens (the reference for no weight).
        zero_tol: |w| at or below ``zero_tol · top`` is no weight.

    Returns:
        The finding (a leak), or None where no such token is.
    """
    if not seen or all(s.detached is None for s in seen):
        return None
    t = tokens(seen)
    cut = np.concatenate(
        [
            np.zeros(int((t.batch == b).sum()), bool)
            if s.detached is None
            else s.detached[t.row[t.batch == b], t.col[t.batch == b]]
            for b, s in enumerate(seen)
        ]
    )
    owed = t.c != 0
    flag = owed & cut & (np.abs(t.w) <= zero_tol * top)
    if not flag.any():
        return None
    count = f"{int(flag.sum())} of the {int(owed.sum())} model tokens whose exact credit is not 0"
    if flag.sum() == owed.sum():
        which = "every one of them"
    else:
        table = atoms(t)
        rule = describe(flag[owed], np.stack([m[owed] for _, _, m in table]))
        how = "exactly" if rule.exact else f"{rule.hit} of the {rule.picked} it picks"
        which = _said([table[i][0] for i in rule.atoms]) + f" ({how})"
        if rule.phi < RULE_PHI:
            which = f"by no rule of their features ({which})"
    return Finding(
        LOGPS_DETACHED,
        f"your loss detaches the log-probs of {count} (.detach(), .data or torch.no_grad() "
        f"on their path): {which}: those tokens carry no gradient, so E[ĝ] misses their terms",
        _share(t, flag),
        leak=True,
    )


__all__ = ["LOGPS_DETACHED", "unattached"]
