r"""What to change for each name the check gives: the line of a loss, or a framework's key.

One row per mistake (:data:`FIXES`, a view of :mod:`eligibility.check.mistakes`, where each
fix is declared beside its name and meaning): the change that removes it from a loss written in the
``logps`` form (the line to change: the normaliser, the mask, the KL's place), where the
``model`` and ``step`` forms need another word, and, under ``--framework``, the option the
framework should choose instead: a row of the option table (:mod:`eligibility.torch.options`),
whose framework column holds the keys and values that choose it (``loss_type: dr_grpo``,
``scale_rewards: none``, ``beta: …``), so that a framework's keys are written in one place.
Each row's fix is held by a test that applies it to an example showing the name and finds the
check passing (tests/test_check_fixes.py; TRL's keys in tests/test_check_frameworks_trl.py,
verl's and OpenRLHF's in tests/test_check_fixes_peers.py).

A fitted constant is said in words where its cause is known (:func:`constant_in_words`):

    std-normalised × c, c = √(G/(G − 1))   a population standard deviation (÷ G),
    accumulation-scaled, c = M             the micro-batches' losses never divided by M,
    accumulation-scaled, c = 1/M           divided by M once too often.

A finding reaches here as values (:class:`~eligibility.check.diagnosis.Diagnosis`): its names
and its fitted constant, never as the text the report prints.
"""

from __future__ import annotations

import math
from typing import Any

from eligibility.check.diagnosis import Diagnosis
from eligibility.check.mistakes import REGISTRY, Cure, Fix
from eligibility.torch import options
from eligibility.torch.options import Spelling

FIXES: dict[str, Fix] = {
    **{m.name: m.fix for m in REGISTRY},
    **{f"{family}:{m.name}": fix for m in REGISTRY for family, fix in m.fixed.items()},
}
"""Mistake → its fix (:attr:`~eligibility.check.mistakes.Mistake.fix`); ``FAMILY:name``: that
family's own, where the general fix would point elsewhere (another family's examples). A view
of :data:`~eligibility.check.mistakes.REGISTRY`."""


_COLUMN = {"trl": "TRL", "verl": "verl", "openrlhf": "OpenRLHF"}
"""``--framework`` → its column of the option table."""


def _beta_keys(framework: str) -> list[str]:
    """The keys of ``framework``'s column of the option table that hold the KL weight β."""
    column = _COLUMN[framework]
    said = [o.frameworks[column] for o in options.ROWS if column in o.frameworks]
    return list(dict.fromkeys(k for s in said for k, v in s.keys if v == options.BETA))


def fix_keys(name: str, framework: str) -> dict[str, Any] | None:
    """The keys and values ``framework``'s fix of ``name`` sets, or None where it sets none.

    A value :data:`~eligibility.torch.options.BETA` is the objective's KL weight.

    >>> fix_keys("std-normalised", "verl")
    {'algorithm.norm_adv_by_std_in_grpo': False}
    """
    row = FIXES.get(name)
    if row is None or framework not in _COLUMN:
        return None
    if row.weight:
        return dict.fromkeys(_beta_keys(framework), options.BETA) or None
    cure = row.framework.get(framework)
    if isinstance(cure, Spelling):
        return cure.config
    if not isinstance(cure, Cure):
        return None
    return options.row(cure.kind, cure.name).frameworks[_COLUMN[framework]].config


def _framework_fix(row: Fix, framework: str) -> str | None:
    """The words of ``row``'s fix under ``framework``: its keys and values, or its own words."""
    if row.weight:
        keys = " or ".join(f"{k}: the objective's β" for k in _beta_keys(framework))
        return keys and f"{keys}, or --beta with the configuration's to declare it"
    cure = row.framework.get(framework)
    if isinstance(cure, Spelling):
        return cure.text
    if not isinstance(cure, Cure):
        return cure
    return options.row(cure.kind, cure.name).frameworks[_COLUMN[framework]].said(cure.also)


def fix(
    name: str, form: str = "logps", framework: str | None = None, family: str | None = None
) -> str | None:
    """The fix of one diagnosis name for ``form`` (or ``framework``), or None where none is known.

    Under a framework, its configuration's keys where the row has them, else the loss's line; a
    ``family``'s own row (``FAMILY:name``) before the general one.

    >>> fix("std-normalised", framework="trl")
    'scale_rewards: none'
    """
    row = FIXES.get(f"{family}:{name}") or FIXES.get(name)
    if row is None:
        return None
    if framework is not None:
        said = _framework_fix(row, framework)
        if said:
            return said
    if form == "step" and row.step:
        return row.step
    if form in ("model", "step") and row.model:
        return row.model
    return row.loss


def fixes_for(
    finding: Diagnosis | None, form: str, framework: str | None = None, family: str | None = None
) -> list[str]:
    """Each name's fix, as ``name: fix`` (the names without one left out)."""
    if finding is None:
        return []
    out = []
    for name in dict.fromkeys(finding.names):
        said = fix(name, form, framework, family)
        if said:
            out.append(f"{name}: {said}")
    return out


CONSTANT_TOL = 0.03
"""How close (relative) a fitted constant must be to a known cause's to be said as it."""


def constant_in_words(
    finding: Diagnosis | None,
    c: float | None,
    *,
    G: int | None = None,
    M: int = 1,
    R: int = 1,
    N: int | None = None,
) -> str | None:
    """A fitted constant said as its likely cause, with the formula; None where none fits.

    The constant is the finding's own (the c of ``V × c``), else ``c``, the fitted scale
    (``accumulation-scaled`` is named from the scale; ``scale`` as a sum over the batch's N
    completions where c is N or N·(G − 1)/G).

    >>> found = Diagnosis(("std-normalised",), times=1.16)
    >>> constant_in_words(found, None, G=4)  # doctest: +ELLIPSIS
    'c = √(G/(G − 1)) = 1.155 at G = 4: a population standard deviation (÷ G, ...'
    """
    if finding is None:
        return None
    if finding.times is not None:
        c = finding.times
    if c is None or c <= 0:
        return None
    named = finding.names

    def near(want: float) -> bool:
        return abs(c / want - 1.0) <= CONSTANT_TOL

    if G and G > 1 and "std-normalised" in named:
        pop = math.sqrt(G / (G - 1))
        if near(pop):
            return (
                f"c = √(G/(G − 1)) = {pop:.4g} at G = {G}: a population standard deviation "
                "(÷ G, torch.std(unbiased=False), numpy.std) where the sample one (÷ (G − 1)) "
                "is meant; either way a std normaliser is the bias"
            )
        if near(1 / pop):
            return (
                f"c = √((G − 1)/G) = {1 / pop:.4g} at G = {G}: a sample standard deviation "
                "(÷ (G − 1)) where the population one (÷ G) was held; either way a std "
                "normaliser is the bias"
            )
    if "accumulation-scaled" in named:
        for k, who in ((M, "M micro-batches"), (R, "R ranks")):
            if k > 1 and near(k):
                return (
                    f"c = {c:.3g} ≈ {k} ({who}): the losses were never divided by {k} — "
                    f"ĝ = Σₘ ∇Lₘ where ∇L = (1/{k}) Σₘ ∇Lₘ is meant"
                )
            if k > 1 and near(1 / k):
                return (
                    f"c = {c:.3g} ≈ 1/{k} ({who}): the losses were divided by {k} once too "
                    f"often — ĝ = (1/{k}) ∇L, each loss ÷ {k} and the sum ÷ {k} again"
                )
    if "scale" in named and N:
        centred = "self-including-mean" in named and G and G > 1
        k = N * (G - 1) / G if centred else N  # type: ignore[operator]
        if near(k):
            said = f"N·(G − 1)/G = {k:.4g} at N = {N}, G = {G}" if centred else f"N = {N}"
            return (
                f"c = {said}: the token terms summed over the batch's N completions where a "
                "mean is meant (a step size at a fixed batch size: divide by N)"
            )
    if "self-including-mean" in named and G and G > 1 and near((G - 1) / G):
        return f"c = (G − 1)/G = {(G - 1) / G:.3g} at G = {G}: the group mean includes the sample"
    return None


def attach_fixes(report: Any) -> Any:
    """Each finding's fixes for the form (or framework) checked, and its constant in words."""
    for p in report.problems:
        if p.verdict == "error" or (p.verdict == "unbiased" and not p.misweighted):
            p.fix, p.constant = None, None
            continue
        p.fix = fixes_for(p.finding, report.form, report.framework, report.family) or None
        G = (p.details or {}).get("group_size")
        N = (p.details or {}).get("completions")
        p.constant = constant_in_words(
            p.finding, p.scale, G=G, M=report.micro_batches, R=report.world_size, N=N
        )
    return report


__all__ = [
    "FIXES",
    "Cure",
    "Fix",
    "attach_fixes",
    "constant_in_words",
    "fix",
    "fix_keys",
    "fixes_for",
]
