r"""The audit's findings named, and held beside the statistical verdict.

:func:`audit` turns the batches a family recorded into :class:`Audit` (findings, the relation
that fits, what the audit covers). :func:`judge` sets it beside a problem's report:

* the z-test stays the judge of E[ĝ] = ∇J: a verdict is never changed;
* where the verdict is biased and no row of the family's table names it (``other``, an
  unnamed ``scale``, ``problem-dependent-scale``), the audit's findings are the diagnosis;
  where a row names it, one reading gives the diagnosis (:func:`one_reading`): the row's
  where the audit's names share one with it, or are the registry's coarser reading of one of
  its names (the audit then says where), the audit's where none of its names is the row's;
* where the test passes but the audit finds weight on tokens no correct estimator weights (a
  world token, the prompt, the padding, a shifted read), or the model's tokens left without
  weight, or weighted against their reply's sign, by a rule of the sample (a place, a length, a
  reward), those terms are on every batch that has them: the problem is reported as not
  passed, with the audit's words and why the test could not see it (its bias is below what N
  resolves). Tokens dropped at random, or by the replies' index in the group alone, are not.

On-policy at β = 0 the reading is: the tokens (:mod:`.tokens`), a factor per token, then the
map of the replies' weights (a relation of :mod:`.relations`, else the search of :mod:`.maps`),
then a constant and its cause where the structure shows one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from eligibility.check.audit.detached import unattached
from eligibility.check.audit.maps import (
    LENGTH_WORDS,
    RETURN_WORDS,
    Map,
    ReplyFactor,
    reply_factor,
    search,
    words,
)
from eligibility.check.audit.maps import findings as map_findings
from eligibility.check.audit.names import Finding
from eligibility.check.audit.relations import (
    COARSE_TOL,
    FIT_TOL,
    ZERO_TOL,
    Relation,
    Units,
    _credit,
    _scale,
    entries,
    leaks,
    others_baseline,
    owed,
    relate,
    shape,
    units,
    within,
)
from eligibility.check.audit.seen import Seen

if TYPE_CHECKING:
    from eligibility.check.audit.kl import KLPart
from eligibility.check.audit.tokens import Drops, Tokens, dropped, flipped, tokens
from eligibility.check.diagnosis import Diagnosis
from eligibility.check.mistakes import MISTAKES, named

# the mistakes this module names, each declared in eligibility.check.mistakes
ACCUMULATION_SCALED = named("accumulation-scaled")
CISPO_ABSOLUTE_CAP = named("cispo-absolute-cap")
BATCH_DEPENDENT_NORMALISER = named("batch-dependent-normaliser")
BATCH_MEAN_BASELINE = named("batch-mean-baseline")
BATCH_WHITENED = named("batch-whitened")
CONSTANT_NORMALISER = named("constant-normaliser")
CREDIT_UNEXPLAINED = named("credit-unexplained")
EPSILON_DIVISOR = named("epsilon-divisor")
LATER_REWARDS_WITHHELD = named("later-rewards-withheld")
OWN_REWARD_WITHHELD = named("own-reward-withheld")
LENGTH_NORMALISED = named("length-normalised")
OTHER = named("other")
PROBLEM_DEPENDENT_SCALE = named("problem-dependent-scale")
RATIO_1_BROKEN = named("ratio-1-broken")
SAMPLER_WRONG_ENTRY = named("sampler-wrong-entry")
SCALE = named("scale")
SIGN = named("sign")
SELF_INCLUDING_MEAN = named("self-including-mean")
STD_NORMALISED = named("std-normalised")
TURNS_WEIGHTED_BY_WHOLE_RETURN = named("turns-weighted-by-whole-return")

CONSTANT_TOL = 1e-3
"""κ within this (relative) of 1 is the exact credit's own scale."""

COVER_TOL = 1e-3
"""The share of ĝ the tapped tensors may leave unexplained (float32 rounding: ≈ 1e-7)."""

REPLACED = (OTHER, SCALE, PROBLEM_DEPENDENT_SCALE)
"""The diagnoses that name no mistake: where the audit names one, its names replace them."""


@dataclass
class Audit:
    """What the audit found on a problem's audited batches.

    Attributes:
        batches: how many batches it read.
        findings: what it found, in order (tokens, entries, drops, relations, constant).
        relation: the relation of the replies' weights to the exact credit, in words (None
            where none fits, or where it is not audited).
        covers: what the weights held cover (and what they do not).
    """

    batches: int
    findings: list[Finding] = field(default_factory=list)
    relation: str | None = None
    covers: str = ""

    @property
    def leak(self) -> bool:
        """A finding of terms no correct estimator has."""
        return any(f.leak for f in self.findings)

    def diagnosis(self) -> Diagnosis | None:
        """The findings' names as a diagnosis (where each is, the report's audit lines say)."""
        if not self.findings:
            return None
        return Diagnosis(tuple(dict.fromkeys(f.name for f in self.findings)))

    def to_json(self) -> dict[str, Any]:
        """The audit as the report's JSON holds it (``details.audit``)."""
        return {
            "batches": self.batches,
            "findings": [f.to_json() for f in self.findings],
            "relation": self.relation,
            "covers": self.covers,
        }


_FORM_WORDS = {
    "group": "the group-centred return (a group-mean or leave-one-out baseline)",
    "none": "the return itself (no baseline: unbiased, more variance)",
    "group-std-1": "the return whitened within its group (σ ÷ (G − 1))",
    "group-std-0": "the return whitened within its group (σ ÷ G)",
    "batch-mean": "the return less the batch's mean (the sample's own reward in its baseline)",
    "batch-std-1": "the return whitened over the batch (mean and σ ÷ (N − 1) of every group)",
    "batch-std-0": "the return whitened over the batch (mean and σ ÷ N of every group)",
    "part-factor": "the group-centred return times a factor per micro-batch",
    "batch-factor": "the group-centred return times a factor per batch",
}


def _relation_findings(
    rel: Relation,
    u: Units,
    scales: list[tuple[str, float]],
    kept: tuple[float, float] | None = None,
) -> list[Finding]:
    """The names the fitted relation gives (none where it is the exact credit's).

    ``kept``: (the share of the owed credit kept, its standard error) where tokens or
    replies were dropped at random: the constant is then the mean weight over them all,
    κ × kept, and within noise of 1 it is no finding (the rest carry the weight back).
    """
    out = []
    if rel.returns == "whole":
        out.append(
            Finding(
                TURNS_WEIGHTED_BY_WHOLE_RETURN,
                "every turn's tokens weighted by "
                "the episode's whole return where the rewards come per turn",
            )
        )
    if rel.returns == "own":
        out.append(
            Finding(
                LATER_REWARDS_WITHHELD,
                "each turn's tokens credited with its own "
                "turn's reward only: the rewards of the turns after it withheld",
            )
        )
    if rel.returns == "later":
        out.append(
            Finding(
                OWN_REWARD_WITHHELD,
                "each turn's tokens credited with the rewards of the turns after it only: its "
                "own turn's reward left out (the credit a turn late)",
            )
        )
    if rel.length != "none":
        per = "reply" if rel.length == "tokens" else "episode"
        out.append(
            Finding(LENGTH_NORMALISED, f"each {per}'s weight divided by its own number of tokens")
        )
    if rel.form.startswith("group-std"):
        ddof = "G − 1" if rel.form.endswith("1") else "G"
        out.append(
            Finding(
                STD_NORMALISED,
                f"each group's advantages divided by the "
                f"group's standard deviation of the return (÷ {ddof})",
            )
        )
    if rel.form.startswith("batch-std"):
        ddof = "N − 1" if rel.form.endswith("1") else "N"
        out.append(
            Finding(
                BATCH_WHITENED,
                "the advantages whitened across the whole batch "
                f"(every group's returns less their mean, ÷ their σ with {ddof}) "
                "instead of within each group",
            )
        )
    if rel.form == "batch-mean":
        out.append(
            Finding(
                BATCH_MEAN_BASELINE,
                "the baseline is the batch's mean return, "
                "which includes the sample's own: E[ĝ] = (N − 1)/N ∇J and the "
                "prompts' means mixed",
            )
        )
    if rel.form.endswith("factor"):
        out.append(_factor(rel, u))
        return out
    # κ against the form's own scale: the exact credit's for group and none; for a whitening
    # or a batch's baseline, that form's advantage as it is (a 2 there is a factor on top)
    rel_k = _constant_of(rel, u)
    noise = 0.0
    if kept is not None:
        rel_k, noise = rel_k * kept[0], abs(rel_k) * kept[1]
    if abs(rel_k - 1.0) > CONSTANT_TOL + 3 * noise:
        out += _constant(rel_k, scales, rel.form, noise)
    return out


def _constant_of(rel: Relation, u: Units) -> float:
    """κ of a relation: for ``group``, against the exact credit's own (leave-one-out)."""
    kappa = float(np.median(rel.kappa[np.isfinite(rel.kappa)]))
    return kappa * (u.G - 1) / u.G if rel.form == "group" and u.G > 1 else kappa


def _restored(drop: Drops, rel: Relation, u: Units) -> list[Finding]:
    """The drop at random said with what the rest carry back: κ of the kept, × the share kept."""
    if rel.form.endswith("factor"):
        return drop.findings
    k = _constant_of(rel, u)
    c, noise = k * drop.kept, abs(k) * drop.kept_se
    back = abs(c - 1.0) <= CONSTANT_TOL + 3 * noise
    said = (
        f"; the rest weighted {k:.3g} times the credit, so the mean weight over them all is "
        f"c = {c:.3g} ± {noise:.2g}: "
        + ("unbiased within noise (the weight restored)" if back else "a constant, below")
    )
    return [dataclasses.replace(f, where=f.where + said) for f in drop.findings]


def _factor(rel: Relation, full: Units) -> Finding:
    """A factor per batch or micro-batch, said as the normaliser that gives it where one does.

    ÷ the batch's count of the model's tokens (a token mean over the batch); 1/σ_b, the σ over
    the batch of the returns (``std-normalised``: the batch's σ in place of each group's) or of
    the group-centred returns (``batch-whitened``), where κ_b σ_b is one value
    (:func:`batch_sigma`, over ``full``, every reply of the batches: the fit may leave some
    out); else a factor that depends on the sample, with its range.
    """
    u = rel.units
    by = u.part if rel.form == "part-factor" else u.batch
    keys = [k for k in np.unique(by) if np.isfinite(rel.kappa[by == k][0])]
    kappa = np.asarray([rel.kappa[by == k][0] for k in keys])
    counts = np.asarray([u.tokens[by == k].sum() for k in keys])
    where = "micro-batch" if rel.form == "part-factor" else "batch"
    said = f"a factor that changes from {where} to {where} ({kappa.min():.3g} to {kappa.max():.3g})"
    if np.ptp(kappa * counts) <= 1e-3 * np.abs(kappa * counts).max():
        said = f"÷ the {where}'s count of the model's tokens (a token mean over the {where})"
    elif rel.form == "batch-factor" and (sigma := batch_sigma(rel, full)) is not None:
        return Finding(
            STD_NORMALISED if sigma == "return" else BATCH_WHITENED,
            "every weight ÷ one σ a batch: "
            + (
                "each group's centred advantages divided by the standard deviation of the "
                "whole batch's returns"
                if sigma == "return"
                else "the group-centred advantages whitened over the whole batch (÷ their σ "
                "over the batch)"
            ),
        )
    return Finding(
        BATCH_DEPENDENT_NORMALISER,
        f"every token's weight {said}: a normaliser that depends on the sample",
    )


SIGMA_TOL = 2.0
"""κ_b σ_b is one value where its spread is within this many times the fit's tolerance."""


def batch_sigma(rel: Relation, u: Units) -> str | None:
    """Which σ over the batch a ``batch-factor`` relation's κ_b is the inverse of, if any.

    κ_b σ_b one value over the batches (relative spread ≤ :data:`SIGMA_TOL` × the tolerance
    the relation was fitted at), σ_b the standard deviation (÷ n − 1) over every reply ``u`` of
    batch b of its return X (``"return"``), or of X less its group's mean (``"centred"``).
    None on several turns (a σ per turn is no one factor a batch) or where no σ fits.
    """
    if rel.form != "batch-factor" or u.turn.max() > 0:
        return None
    at = rel.units.batch
    keys = [k for k in np.unique(at) if np.isfinite(rel.kappa[at == k][0])]
    kappa = np.asarray([rel.kappa[at == k][0] for k in keys])
    x = getattr(u, rel.returns).astype(np.float64)
    tol = SIGMA_TOL * (FIT_TOL if rel.residual <= FIT_TOL else COARSE_TOL)
    for which, v in (("return", x), ("centred", shape(u, x, "group") * u.rows)):
        sd = np.asarray([v[u.batch == k].std(ddof=1) for k in keys])
        k_sd = kappa * sd
        if len(keys) > 1 and np.all(sd > 0) and np.ptp(k_sd) <= tol * np.abs(k_sd).max():
            return which
    return None


EPSILONS = (1e-3, 1e-4, 1e-5, 1e-6, 1e-8, 1e-10, 1e-12)
"""The ε a denominator that is 0 is said to be, where c = 1/ε (within 1 %)."""


def _epsilon(c: float) -> float | None:
    """The ε of :data:`EPSILONS` whose 1/ε is c within 1 %, or None."""
    return next((e for e in EPSILONS if abs(abs(c) * e - 1.0) <= 1e-2), None)


def _map_constant(m: Map, G: int) -> list[Finding]:
    """κ of a map whose A is unbiased on the replies it weights, said where it is 1/ε.

    X less one other reply's X (``group-first``) has the exact credit's mean on the G − 1
    replies it weights, so E[ĝ] = κ·(G − 1)/G ∇J: κ is a constant, and 1/ε is the only cause
    of one that size the structure shows.
    """
    kappa = m.kappa[np.isfinite(m.kappa)]
    if m.base != "group-first" or m.scale != "one" or not len(kappa):
        return []
    k = float(np.median(kappa))
    eps = _epsilon(k) if abs(k) >= 100 else None
    if eps is None:
        return []
    c = k * (G - 1) / G
    return [
        Finding(
            EPSILON_DIVISOR,
            f"each reply's weight is κ = {k:.4g} times its reward less its group's first "
            f"reply's: 1/ε with ε = {eps:g}, a division by a quantity that is 0 on this sample "
            f"plus ε (a σ over one reply's reward?); E[ĝ] = c ∇J, c = κ·(G − 1)/G = {c:.4g}",
            constant=c,
        )
    ]


def _constant(
    c: float, scales: list[tuple[str, float]], form: str, noise: float = 0.0
) -> list[Finding]:
    """A constant κ said as its cause where the loss's structure shows one.

    A constant the family names is said by each of its names, each finding carrying c (one
    cause: (G − 1)/(G T) is a self-including group mean and a constant normaliser at once); a
    group mean that includes the sample, (G − 1)/G, only where the weights are centred
    within each group; c = 1/ε, a division by a quantity that is 0 here plus ε; an integer
    c, a gradient counted c times; a known cause times a plain fraction (0.2 × 0.175), the
    fraction said as what the structure does not show; where the family names
    ``ratio-1-broken`` among its constants (its batches carry π_θ/π_old, and where it is 1
    the weight must be 1), that fraction is each token's weight at ratio 1, read off as a
    cap's bound. ``noise``: the constant's standard error, where it is a share of tokens kept
    at random. A c below 0 is the loss's sign: it descends J whatever its size.
    """
    said = f"c = {c:.4g}" + (f" ± {noise:.2g}" if noise else "")
    if c < 0:
        return [
            Finding(
                SIGN,
                f"every weight is {said} times the exact credit's: each token pushed against "
                "its credit (the loss maximised where it is minimised)",
                constant=c,
            )
        ]
    for name, value in scales:
        if SELF_INCLUDING_MEAN in name and form != "group":
            continue  # no group mean is taken: (G − 1)/G is not its cause
        if abs(c / value - 1.0) <= 1e-3:
            first, *rest = name.split(", ")
            whole = f"every weight is {said} times the exact credit's, c = {_cause(name, value)}"
            return [Finding(first, whole, constant=c)] + [
                Finding(n, f"with {first}, the one constant {said}: {_cause(n)}", constant=c)
                for n in rest
            ]
    if abs(c) >= 100:
        eps = _epsilon(c)
        cause = f"1/ε with ε = {eps:g}" if eps is not None else "far above any count of the batch"
        return [
            Finding(
                EPSILON_DIVISOR,
                f"every weight is {said} times the exact credit's: {cause}, a division by a "
                "quantity that is 0 on this sample plus ε (a σ or a count over one value?)",
                constant=c,
            )
        ]
    whole = round(abs(c))
    if whole >= 2 and abs(abs(c) - whole) <= 1e-3 * whole:
        return [
            Finding(
                SCALE,
                f"every weight is {said} times the exact credit's: the gradient counted {whole} "
                "times (a loss summed over micro-batches or ranks, or backed through twice, "
                "where it is averaged)",
                constant=c,
            )
        ]
    at_ratio_one = any(RATIO_1_BROKEN in name for name, _ in scales)
    for name, value in scales:  # a known cause times a plain number the structure leaves
        r = c / value
        if (SELF_INCLUDING_MEAN in name and form != "group") or RATIO_1_BROKEN in name:
            continue
        if 0.05 <= r < 0.999 and abs(r * 20 - round(r * 20)) <= 2e-3:
            if at_ratio_one:  # the factor is each token's weight where its ratio is 1
                return [
                    Finding(
                        RATIO_1_BROKEN,
                        f"every weight is {said} times the exact credit's: {r:.4g} × "
                        f"{_cause(name, value)}; where every ratio π_θ/π_old is 1, each token's "
                        f"weight is {r:.4g}, not 1: a cap or clip whose bound is {r:.4g} "
                        f"(min(π_θ/π_old, {r:.4g})), or a coefficient {r:.4g}",
                        constant=c,
                    )
                ]
            return [
                Finding(
                    SCALE,
                    f"every weight is {said} times the exact credit's: {r:.4g} × "
                    f"{_cause(name, value)}; the factor {r:.4g} the weights' structure does "
                    "not show "
                    "(a weight that is not 1 where the ratio is 1, a cap, a coefficient)",
                    constant=c,
                )
            ]
    return [
        Finding(SCALE, f"every weight is {said} times the exact credit's (a step size)", constant=c)
    ]


def _cause(name: str, value: float | None = None) -> str:
    """The words of a constant's names (``value``, where given, said first)."""
    words = {
        ACCUMULATION_SCALED: "the number of micro-batches or ranks (or its inverse): the "
        "accumulated losses divided never, or once too often",
        SELF_INCLUDING_MEAN: "(G − 1)/G: a group mean that includes the sample",
        CONSTANT_NORMALISER: "a constant normaliser (1/T or N/T)",
        SCALE: "the batch's N replies: the token terms summed over the batch where a mean is "
        "meant (a step size at a fixed batch size)",
        RATIO_1_BROKEN: "the weight where the ratio is 1 (a cap at 0.2: TRL's CISPO with "
        "epsilon_high unset)",
    }
    said = "; ".join(words.get(n, n) for n in name.split(", "))
    return said if value is None else f"{value:.4g}: {said}"


def audit(seen: list[Seen], scales: list[tuple[str, float]] | None = None) -> Audit:
    """The findings on the audited batches ``seen`` (the families' records)."""
    if not seen:
        return Audit(0, covers="no batch was audited")
    out = Audit(len(seen))
    uncovered = max(s.uncovered for s in seen)
    if uncovered > COVER_TOL:
        out.covers = (
            f"not audited: {uncovered:.0%} of the loss's gradient reaches θ by a path "
            "the audit does not read (log-probs computed without the model's logits, "
            "a fused head, or another model's forward)"
        )
        return out
    out.findings += leaks(seen) + entries(seen)
    if any(s.unmatched for s in seen):
        out.covers = (
            "not audited: the loss scored rows other than the batch's (a framework "
            "that re-encodes or re-pads the completions: its rows are not matched to "
            "the batch's)"
        )
        return out
    cut = unattached(seen, _scale(seen), ZERO_TOL)
    if cut is not None:  # their zero weights are no map's: the relation is not read
        out.findings.append(cut)
        out.covers += "the tokens scored and the entries read; not the weights' relation"
        return out
    u = units(seen)
    if not np.any(u.w):
        out.covers += "no token of the model's has any weight: the loss moves nothing"
        return out
    if not len(u.w):
        out.covers += "no reply of the model's was weighted"
        return out
    t = tokens(seen)
    top = _scale(seen)
    if any(s.beta for s in seen) and all(s.ref is not None for s in seen):
        return _with_kl(out, seen, t, top, scales or [])
    if any(s.beta for s in seen):
        out.findings += dropped(t, np.ones(len(t.w), bool), top, ZERO_TOL).findings
        out.covers += (
            "the objective holds a KL (β > 0): each token's credit then differs "
            "token by token; the tokens scored, the entries read and the tokens "
            "dropped are audited, not the relation of the weights"
        )
        return out
    seen = _flips(out, seen)  # the replies read with the flipped tokens' sign set right
    u, t = units(seen), tokens(seen)
    if any(s.off_policy for s in seen):
        return _off_policy(out, seen, u, scales or [])
    return _on_policy(out, seen, u, t, top, scales or [])


def _flips(out: Audit, seen: list[Seen]) -> list[Seen]:
    """Tokens weighted against their reply's sign said; the batches with their sign set right.

    Only where each reply's credit is one value (β = 0, or the KL's part read apart).
    """
    t = tokens(seen)
    flips, flagged = flipped(t, _scale(seen), ZERO_TOL)
    out.findings += flips
    return _unflipped(seen, t, flagged) if flagged.any() else seen


def _with_kl(
    out: Audit, seen: list[Seen], t: Tokens, top: float, scales: list[tuple[str, float]]
) -> Audit:
    """β > 0: the KL's part of the weights read apart (:mod:`.kl`), the rest as at β = 0."""
    from eligibility.check.audit import kl

    part = kl.separate(seen)
    if part is None:
        out.findings += dropped(t, np.ones(len(t.w), bool), top, ZERO_TOL).findings
        out.findings.append(kl.describe(seen))
        out.covers += (
            "the tokens scored, the entries read and the tokens dropped; the KL's part of the "
            "weights fits no estimator, so the rest is not read"
        )
        return out
    part = kl.in_reward(_settled(part, seen), seen)
    out.findings += kl.findings(part, seen)
    how = "in each reply's reward" if part.in_reward is not None else part.estimator
    out.covers += f"the KL's part read apart ({how}); "
    rest = _flips(out, part.rest)
    out = _on_policy(out, rest, units(rest), tokens(rest), _scale(rest), scales)
    if _one_normaliser(kl.weight_factor(part, seen), out.findings, scales):
        out.findings = [f for f in out.findings if f.name != kl.KL_WEIGHT]
    if part.length == "batch" and any(f.name == BATCH_DEPENDENT_NORMALISER for f in out.findings):
        # the reward's part a token mean over the batch too: one aggregation of the whole loss,
        # said by the reward's part, as the family's table names it
        out.findings = [f for f in out.findings if f.where != kl.BATCH_KL_WORDS]
    return out


def _one_normaliser(factor: float, found: list[Finding], scales: list[tuple[str, float]]) -> bool:
    """Is the KL's weight β under the constant normaliser the reward's part is read with?

    Dr. GRPO divides the whole loss, the KL term with it, by N·T_max: the KL's part is then 1/T
    of the objective's β/N, and so is the reward's (``constant-normaliser``). That is one
    normaliser of the whole loss, not another KL weight (``factor``, κ over the objective's,
    equal to a constant normaliser of ``scales`` within 1 %).
    """
    if not any(f.name == CONSTANT_NORMALISER for f in found):
        return False
    return any(
        name == CONSTANT_NORMALISER and abs(factor / value - 1.0) <= 1e-2 for name, value in scales
    )


def _settled(part: KLPart, seen: list[Seen]) -> KLPart:
    """The KL's part with the tokens alone in their reply past its line read by the rest's map.

    Where such tokens exist (:func:`~eligibility.check.audit.kl.unreached`), the relation of
    the other replies' rest is fitted and gives those replies' reward part; one rule for their
    KL part (:func:`~eligibility.check.audit.kl.settle`) sets them apart. Else as it was.
    """
    from eligibility.check.audit import kl

    alone = kl.unreached(part, seen)
    u = units(part.rest)
    if not any(a.any() for a in alone) or u.turn.max() > 0:  # a unit a row: one reply each
        return part
    apart = np.concatenate([_per_unit(s, a) for s, a in zip(part.rest, alone, strict=True)])
    rel = relate(u, every=False, leave=apart)
    if rel is None or not np.isfinite(rel.kappa).any():
        return part
    # a batch whose every reply has credit 0 (one reward in each group) leaves its own factor
    # unfitted (nan): only the batches of the tokens set apart need theirs, checked below
    kappa = float(np.median(rel.kappa[np.isfinite(rel.kappa)]))
    if rel.form.endswith("factor"):  # one κ a batch (or part): each unit its batch's
        by = {int(b): float(k) for b, k in zip(rel.units.batch, rel.kappa, strict=True)}
        kappas = np.asarray([by.get(int(b), np.nan) for b in u.batch])
    else:
        kappas = np.full(len(u.w), kappa)
    lam = {"none": 1.0, "tokens": u.tokens, "episode": u.episode}[rel.length]
    predicted = kappas * shape(u, getattr(u, rel.returns).astype(np.float64), rel.form) / lam
    if not np.all(np.isfinite(predicted[apart])):
        return part
    reward, at = [], 0
    for s, a in zip(part.rest, alone, strict=True):
        n = len(_per_unit(s, a))
        per_row = predicted[at : at + n]
        at += n
        reward.append(per_row[np.nonzero(a)[0]])
    settled = kl.settle(part, seen, alone, reward)
    return part if settled is None else settled


def _per_unit(s: Seen, grid: np.ndarray) -> np.ndarray:
    """Which units of one batch (its rows, one a reply: a single turn) hold a token of ``grid``."""
    return grid.any(1)


def _unflipped(seen: list[Seen], t: Tokens, flagged: np.ndarray) -> list[Seen]:
    """The batches with the flipped tokens' weights negated back."""
    out = []
    for b, s in enumerate(seen):
        at = flagged & (t.batch == b)
        w = s.w.copy()
        w[t.row[at], t.col[at]] *= -1
        out.append(dataclasses.replace(s, w=w))
    return out


def _read_map(
    u: Units, ratios: dict[str, np.ndarray] | None = None
) -> tuple[Relation | Map | ReplyFactor | None, Map | None, str]:
    """The relation or map of the replies' weights, simplest first, and the closest tried.

    Fitted first to every reply (a map that explains the replies without weight drops none),
    then to those with weight, then a factor per reply from its own features
    (:func:`~eligibility.check.audit.maps.reply_factor`); then all at :data:`COARSE_TOL`.
    Returns (what fits, the closest map of the search, how it was fitted).
    """
    every = np.ones(len(u.w), bool)
    weighted = ~u.zero | (np.abs(_credit(u)) == 0)
    closest: Map | None = None
    for tol, how in ((FIT_TOL, ""), (COARSE_TOL, f"fitted to {COARSE_TOL:.0%} (bf16?)")):
        for live, is_every in ((every, True), (weighted, False)):
            rel = relate(u, every=is_every, tol=tol)
            if rel is not None:
                return rel, closest, how
            found, near = search(u, live, tol)
            if near is not None and (closest is None or near.residual < closest.residual):
                closest = near
            if found is not None:
                return found, closest, how
        factor = reply_factor(u, _credit(u), weighted, tol, ratios)
        if factor is not None:
            return factor, closest, how
    return None, closest, ""


def _plainness(fitted: Relation | Map | ReplyFactor | None, _: Map | None, how: str) -> tuple:
    """How plainly a fit of :func:`_read_map` explains the weights, least first.

    Fitted at the strict tolerance before the coarse one; a relation of the credit, then a map
    of the grammar (its fewest changes first), then a factor a reply.
    """
    if isinstance(fitted, Relation):
        return (bool(how), 0, 0)
    if isinstance(fitted, Map):
        return (bool(how), 1, fitted.changes)
    return (bool(how), 2, 0)


OTHERS_WORDS = (
    "each reply weighted by its reward less a baseline from its group's other rewards alone "
    "(not the leave-one-out mean: another statistic of the others, as a median): the exact "
    "credit's mean"
)
"""The relation said where the replies' weights are a baseline of the others' (no finding)."""


def _on_policy(
    out: Audit,
    seen: list[Seen],
    u: Units,
    t: Tokens,
    top: float,
    scales: list[tuple[str, float]],
) -> Audit:
    """The audit of a batch scored at the policy it was drawn from (β = 0).

    Where the reading names something but every reply's weight is (1/N)(Rᵢ − b), b a statistic
    of its group's other rewards (:func:`~eligibility.check.audit.relations.others_baseline`),
    one weight a reply and no token of a weighted reply left out, the credit is exact in the
    mean: its zeros (the replies whose reward is b) are no drop, its values no transform.
    """
    had = list(out.findings)
    read = _read_on_policy(out, seen, u, t, top, scales)
    if read.findings != had and _exact_of_others(u, t, top):
        read.findings, read.relation = had, OTHERS_WORDS
    return read


def _exact_of_others(u: Units, t: Tokens, top: float) -> bool:
    """Whether the replies read as (1/N)(Rᵢ − b), b from the group's other rewards.

    Every token of a weighted reply holds its reply's one weight (none left at 0).
    """
    zero = np.abs(t.w) <= ZERO_TOL * top
    if (zero & ~u.zero[t.unit]).any():
        return False  # a token of a weighted reply left out: the tokens' reading stands
    live = ~zero
    if np.any(np.abs(t.w[live] - u.w[t.unit[live]]) > FIT_TOL * np.abs(u.w[t.unit[live]])):
        return False
    kappa = others_baseline(u)
    return kappa is not None and bool(np.all(np.abs(kappa * u.rows - 1.0) <= FIT_TOL))


def _read_on_policy(
    out: Audit,
    seen: list[Seen],
    u: Units,
    t: Tokens,
    top: float,
    scales: list[tuple[str, float]],
) -> Audit:
    """The reading of :func:`_on_policy`: the replies' map, the tokens, the constants."""
    # a per-token factor read (γᵗ, πᵏ) is divided out; of its readings, the one whose
    # replies' map fits most simply (γ from the reply's end, where γᵗ from its start would
    # leave a factor of the reply's length), the first of equals
    readings = [(said, units(divided)) for said, divided in within(u, seen)] or [([], u)]
    maps = [_read_map(v) for _, v in readings]
    fits = [i for i, m in enumerate(maps) if m[0] is not None]
    pick = min(fits, key=lambda i: (_plainness(*maps[i]), i)) if fits else 0
    (per_token, u), (fitted, closest, how) = readings[pick], maps[pick]
    credit = _credit(u)
    if isinstance(fitted, Relation):
        owed_units = owed(u, fitted) & (np.abs(credit) > 0)
    elif isinstance(fitted, (Map, ReplyFactor)):
        scale = max(float(np.abs(fitted.predicted).max(initial=0.0)), 1e-300)
        owed_units = (np.abs(fitted.predicted) > ZERO_TOL * scale) & (np.abs(credit) > 0)
    else:
        owed_units = np.abs(credit) > 0
    drop = dropped(t, owed_units[t.unit] & (t.c != 0), top, ZERO_TOL)
    random = drop.random and isinstance(fitted, Relation)
    out.findings += _restored(drop, fitted, u) if random else drop.findings  # type: ignore[arg-type]
    out.findings += per_token
    out.covers += "every weight on the model's tokens" + (f"; {how}" if how else "")
    multi_turn = bool(u.turn.max() > 0)
    if fitted is None:
        best = "" if closest is None else f"; the closest description: {words(closest, multi_turn)}"
        out.relation = "no description of the audit's search fits the replies' weights" + best
        if not out.findings:
            out.findings.append(Finding(CREDIT_UNEXPLAINED, out.relation))
        return out
    have = {f.name for f in out.findings}
    if isinstance(fitted, ReplyFactor):
        out.relation = fitted.words()
        out.findings += fitted.findings()
        return out
    if isinstance(fitted, Map):
        out.relation = words(fitted, multi_turn)
        out.findings += [f for f in map_findings(fitted) if f.name not in have]
        out.findings += [f for f in _map_constant(fitted, u.G) if f.name not in have]
        return out
    said = RETURN_WORDS[fitted.returns] if multi_turn else "its reward"
    out.relation = (
        f"each reply weighted by {_FORM_WORDS[fitted.form]} of {said}" + LENGTH_WORDS[fitted.length]
    )
    kept = (drop.kept, drop.kept_se) if drop.random else None
    named = _relation_findings(fitted, u, scales, kept)
    out.findings += [f for f in named if f.name not in have]
    return out


def _owed_divided(out: Audit, seen: list[Seen], u: Units) -> Audit:
    """Where no split fits: the replies read with an owed weight divided out.

    Each unit's mean weight over its owed importance weight Πₜ π_θ/μ, then over its policy
    ratio Πₜ π_θ/π_old alone (the sampler's part left to be read), is read as on-policy (the
    map, then a factor of the reply's own features or ratios); the first that fits is said
    with what was divided out, else ``credit-unexplained`` with the closest description.
    """
    from eligibility.check.audit.sampler import reply_ratios

    ratios = reply_ratios(seen)
    owed = {
        "Πₜ π_θ/μ": ratios["whole_ratio"],
        "Πₜ π_θ/π_old": ratios["whole_ratio"] / ratios["sampler_ratio"],
    }
    multi_turn = bool(u.turn.max() > 0)
    head = "no split of the weights into a per-token ratio and a reply's sampler weight fits; "
    nearest: tuple[str, Map] | None = None
    for name, h in owed.items():
        v = dataclasses.replace(u, w=np.where(h > 0, u.w / np.where(h > 0, h, 1.0), 0.0))
        fitted, closest, _ = _read_map(v, ratios)
        lead = f"{head}with each reply's {name} divided out, "
        if isinstance(fitted, ReplyFactor) or (isinstance(fitted, Map) and fitted.changes):
            said = fitted.words() if isinstance(fitted, ReplyFactor) else words(fitted, multi_turn)
            out.relation = lead + said
            named = fitted.findings() if isinstance(fitted, ReplyFactor) else map_findings(fitted)
            out.findings += [Finding(f.name, f"{lead}{f.where}", f.share) for f in named]
            return out
        if closest is not None and (nearest is None or closest.residual < nearest[1].residual):
            nearest = (lead, closest)
    if nearest is not None:
        out.relation = f"{nearest[0]}the closest description: {words(nearest[1], multi_turn)}"
    else:
        out.relation = head + "and no description of the audit's search comes near"
    out.findings.append(Finding(CREDIT_UNEXPLAINED, out.relation))
    return out


def _off_policy(out: Audit, seen: list[Seen], u: Units, scales: list[tuple[str, float]]) -> Audit:
    """The audit of a batch scored away from its sampler (:mod:`.sampler`)."""
    from eligibility.check.audit.sampler import clamp_bounds, clamp_words, split

    found = split(seen)
    if found is None:  # a per-token factor on top of the ratios (γᵗ, πᵏ): read, divided out
        for per_token, divided in within(u, seen):
            if divided is not seen and (found := split(divided)) is not None:
                out.findings += per_token
                break
    coarse = found is None and (found := split(seen, COARSE_TOL)) is not None
    if found is None and all(s.sampler_top is not None for s in seen):  # a wrong entry of μ?
        read = [dataclasses.replace(s, sampler=s.sampler_top) for s in seen]
        found = split(read)
        if found is not None:
            out.findings.append(
                Finding(
                    SAMPLER_WRONG_ENTRY,
                    "the sampler's log-prob read from its most probable token at each position "
                    "(top_logprobs[..., 0]), not the sampled token's: the importance weight of "
                    "another token",
                )
            )
    out.covers += "every weight on the model's tokens (off-policy: θ ≠ θ_old or μ ≠ π_old)"
    out.covers += f"; fitted to {COARSE_TOL:.0%} (the loss's arithmetic, bf16?)" if coarse else ""
    if found is None:
        return _owed_divided(out, seen, u)
    floored = f" × max(its own π_θ/π_old, {found.token.rsplit('-', 1)[-1]})"
    if found.token.startswith(("q-clamped", "q-s-clamped")):
        lo, hi = clamp_bounds(found.token)
        of_sampler = found.token.startswith("q-s-clamped")
        which = "π_old/μ" if of_sampler else "π_θ/π_old"
        floored = f" × its own {which} {clamp_words(lo, hi)}"
        floored = (" × its own π_θ/π_old" if of_sampler else "") + floored
    words = {
        "none": "",
        "q": " × its own π_θ/π_old",
        "qs": " × its own π_θ/μ",
        "s": " × its own π_old/μ",
    }
    if found.reply in ("whole-truncated", "whole-masked"):
        how = "truncated at" if found.reply == "whole-truncated" else "0 above"
        reply = f"× the reply's π_θ/μ {how} {found.cut:.3g}"
    else:
        policy, sampler = found.reply.split("|")
        parts = [
            {"q": "π_θ/π_old", "q-geometric": "(π_θ/π_old)^{1/L}", "none": ""}[policy],
            {
                "s": "π_old/μ",
                "s-truncated": f"min(π_old/μ, {found.cut})",
                "s-masked": f"π_old/μ (0 above {found.cut})",
                "none": "",
            }[sampler],
        ]
        said = " × ".join(p for p in parts if p)
        reply = f"× the reply's {said}" if said else "with no importance weight"
    if found.attached:
        reply += " left attached (× (1 + ln π_θ(o)) where it moves with θ)"
    rel = found.relation
    out.relation = (
        f"each token weighted{words.get(found.token, floored)}, each reply {reply} "
        f"and by {_FORM_WORDS[rel.form]} of its reward"
        f"{LENGTH_WORDS[rel.length]}"
    )
    named = _one_cap(found.findings + _relation_findings(rel, rel.units, scales))
    have = {f.name for f in out.findings}
    out.findings += [f for f in named if f.name not in have]
    return out


def _one_cap(findings: list[Finding]) -> list[Finding]:
    """A cap read on every token and the constant's weight at ratio 1 said by one name.

    Where the split reads a bound that binds on every token (``cispo-absolute-cap``), the
    constant's factor the structure does not show, read as the weight where the ratio is 1
    (``ratio-1-broken``), is that bound: the constant's finding keeps its words and its c
    (held against the table's, :func:`~eligibility.check.run.one_constant`) under the cap's
    name, the cap's own finding (what the weights and the loss's reads show) beside it.
    """
    if not any(f.name == CISPO_ABSOLUTE_CAP for f in findings):
        return findings
    return [
        dataclasses.replace(f, name=CISPO_ABSOLUTE_CAP)
        if f.name == RATIO_1_BROKEN and f.constant is not None
        else f
        for f in findings
    ]


UNREAD = (CREDIT_UNEXPLAINED, named("kl-estimator-unknown"))
"""The audit's names that say no description of its search fits (the credit's map, the KL's
part of each weight): beside a row of the table that names the problem, they are not said
(the table names what the audit could not read)."""


def coarser_of(findings: list[Finding], names: set[str]) -> set[int]:
    """The indices of ``findings`` that are the audit's coarser reading of a row's ``names``.

    A finding whose name a row's name declares coarser than itself
    (:attr:`~eligibility.check.mistakes.Mistake.coarser`), where the audit does not give that
    row's name itself (where it does, the coarser name is a structure of its own: a group's σ
    and a token mean over the batch); with it, every finding of its constant (one cause said
    by each of its names: (G − 1)/(G T) read on the audit's batches, where the row reads the
    divisor batch by batch).
    """
    said = {f.name for f in findings}
    coarse = {c for n in names - said if n in MISTAKES for c in MISTAKES[n].coarser} - names
    hit = {i for i, f in enumerate(findings) if f.name in coarse}
    constants = {findings[i].constant for i in hit} - {None}
    return hit | {i for i, f in enumerate(findings) if f.constant in constants and constants}


def _same_constant(findings: list[Finding], times: float | None) -> set[int]:
    """The indices of ``findings`` that name a cause of the constant ``times`` (within 1 %)."""
    if not times:
        return set()
    return {
        i
        for i, f in enumerate(findings)
        if f.constant is not None and abs(f.constant / times - 1.0) <= 1e-2
    }


def one_reading(found: Audit, table: Diagnosis) -> tuple[Audit, Diagnosis]:
    """The diagnosis beside a row of the table that names it, from one reading, and the audit.

    Where the audit's names share one with the table's, the table's stay (the finer name: a
    joined constant; the one cause of what the audit reads at each place, a missing shift that
    also moves weight onto the padding), the audit's other names are added after them where
    they are of the weights' map, not the places a leak or a drop by a rule reaches (what it
    reads beside the row's: a per-token sampler weight beside a per-token ratio, a rejection
    beside a normaliser; never a bare ``scale``), and the audit says where. Where the audit names
    mistakes and none of them is the table's, the two readings differ and the audit's, read
    token by token on every batch it holds, gives the diagnosis (a constant the table named
    from its value where the loss shows no such structure, a drop the table matched to a
    mask), and so where the row gives a name a finding of the audit shows untrue on these
    batches (:attr:`~eligibility.check.audit.names.Finding.instead_of`: a ratio read missing,
    ``stale-old-logps``, where the loss computes it from θ_old's log-probs and caps it on every
    token, two variants whose means the test cannot tell apart). Where it names none of its own
    (``credit-unexplained``), the table's stays and that finding is not said beside it: the
    report never gives one problem two names.

    A name of the audit's that the registry declares a coarser reading of a row's name
    (:attr:`~eligibility.check.mistakes.Mistake.coarser`: a batch's σ read as one factor a
    batch, a divisor that varies by batch read as a constant on the audit's first batches),
    where the audit does not give the row's name itself, is the audit's reading of the row's
    mistake: it counts as shared, and is not said beside the row's finer name (nor are the
    other names of its constant, :func:`coarser_of`).

    Beside a row that carries its fitted constant (``V × c``), a cause the audit names for
    that same c is named from its value alone (:func:`_constant`: 1/T = 0.2 at T = 5 is also
    TRL's CISPO cap ε_high = 0.2 where the ratio is 1): the row's × c says the constant, and the
    guessed cause is not said.
    """
    names = set(table.names)
    if names & {n for f in found.findings for n in f.instead_of}:  # a row the audit shows untrue
        said = tuple(dict.fromkeys(f.name for f in found.findings if f.name not in UNREAD))
        return found, Diagnosis(said)
    coarse = coarser_of(found.findings, names) | _same_constant(found.findings, table.times)
    findings = [f for i, f in enumerate(found.findings) if i not in coarse]
    said = {f.name for f in findings}
    if coarse or said & names:  # the row's names, then what the audit reads beside them
        more = [
            f.name
            for f in findings
            if f.name not in names and f.name not in (*UNREAD, *REPLACED) and not f.leak
        ]
        kept = [f for f in findings if f.name not in UNREAD]
        for name in dict.fromkeys(more):
            table = table.plus(name)
        return dataclasses.replace(found, findings=kept), table
    if said - set(UNREAD):
        return found, Diagnosis(tuple(dict.fromkeys(f.name for f in found.findings)))
    kept = [f for f in found.findings if f.name not in UNREAD]
    return dataclasses.replace(found, findings=kept), table


def shown(table: Diagnosis, found: Audit) -> Diagnosis:
    """The table's diagnosis without the constant's causes the audit's reading does not show.

    The causes are those given from the constant's value alone (:attr:`Diagnosis.by_value`). A
    constant the problem knows may equal the fitted one by coincidence (1/T = 0.2 at T = 5
    is also TRL's CISPO cap ε_high where every ratio is 1): where the audit read the map of
    the weights (:attr:`Audit.relation`), a cause it does not name is not said; the row's
    ``× c`` still says the constant. Where it read no map, the table's reading stands.
    """
    if not table.by_value or found.relation is None:
        return table
    seen = {f.name for f in found.findings}
    unseen = set(table.by_value) - seen
    names = tuple(n for n in table.names if n not in unseen)
    return dataclasses.replace(table, names=names, by_value=())


def judge(report: Any, found: Audit) -> None:
    """Set the audit beside one problem's report (see the module docstring)."""
    if report.finding is not None:
        report.finding = shown(report.finding, found)
        if CONSTANT_NORMALISER not in report.finding.names and report.details:
            report.details.pop("c_times_T", None)  # the constant's T, said for ÷ T_max alone
    table = report.finding
    named_by_a_row = table is not None and not set(table.names) <= set(REPLACED)
    if (
        found.findings
        and named_by_a_row
        and report.verdict in ("biased", "scaled", "excess variance")
    ):
        found, report.finding = one_reading(found, table)
    report.details = {**(report.details or {}), "audit": found.to_json()}
    named = found.diagnosis()
    if named is None or report.verdict in ("error", "no gradient"):
        return
    if report.verdict in ("biased", "scaled", "excess variance"):
        if report.finding is None or set(report.finding.names) <= set(REPLACED):
            if report.verdict == "scaled" and not found.leak and SCALE in named.names:
                return  # the same unnamed step size: nothing more to say
            if report.verdict == "biased" and not any(
                MISTAKES[n].moves_mean for n in named.names
            ):  # what the audit names moves no mean: the bias is not located
                named = Diagnosis((CREDIT_UNEXPLAINED,))
            report.finding = named
        return  # a row of the table names it: the audit's places are in its details
    if report.verdict == "unbiased" and found.leak:
        leaks_only = [f for f in found.findings if f.leak]
        report.finding = Diagnosis(tuple(dict.fromkeys(f.name for f in leaks_only)))


__all__ = ["Audit", "audit", "coarser_of", "judge", "one_reading", "shown"]
