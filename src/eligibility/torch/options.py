r"""The one table of the sequence family's options: every baseline, scale, aggregation and KL.

A row (:class:`Option`) holds an option's pure function (in :mod:`eligibility.torch.formulas`,
its formula in the docstring), its name, its names in TRL, verl and OpenRLHF (with the version
read), the mistake ``eligibility check --sequence`` names it by, and the verdict the check
gives it on each exact problem (``length``, ``difficulty``, ``kl``) when it is the only choice
off the defaults. Everything else is a view of these rows:
:func:`~eligibility.torch.sequence.sequence_reinforce_loss` and
:func:`~eligibility.torch.advantages.group_advantages` dispatch on them, ``finetune``'s flags
list their names, the check's reference and named variants are built from their functions,
and the option tables of ``docs/`` are printed from them (``python tools/option_tables.py
--markdown``). Adding an option is adding a row (and its test).

The unbiased estimator of ∇J, J = E[R] − β KL(π_θ ‖ π_ref) over whole sequences, is

    ĝ = (1/N) Σᵢ Σₜ mᵢ,ₜ ∇ℓᵢ,ₜ · (Rᵢ − b₋ᵢ − β Σ_{t′≥t} mᵢ,ₜ′ (ℓᵢ,ₜ′ − ℓ^ref_ᵢ,ₜ′)),

the defaults (``rloo``, scale ``none``, ``sequence-sum``, ``reward-to-go``); every other row
changes E[ĝ], and its verdicts say to what.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eligibility.torch.formulas import (
    baseline_group_mean,
    baseline_none,
    baseline_rloo,
    kl_k1,
    kl_k2,
    kl_k3,
    kl_k3_clamped,
    kl_k3_ratio,
    kl_reward_to_go,
    kl_sequence,
    scale_batch_std,
    scale_group_std,
    scale_none,
    scale_whiten,
    weights_constant,
    weights_constant_sum,
    weights_micro_batch_token_mean,
    weights_padded_width,
    weights_sequence_mean,
    weights_sequence_sum,
    weights_token_mean,
    weights_token_sum_norm,
    whiten,
)

KINDS = ("baseline", "scale", "aggregation", "kl")
"""The columns of a sequence estimator: one row of each kind makes a loss."""

PROBLEMS = ("length", "difficulty", "kl")
"""The exact problems of ``eligibility check --sequence`` a row's verdicts are given on."""

VERSIONS = {"TRL": "TRL 1.16", "verl": "verl 0.9", "OpenRLHF": "OpenRLHF 0.11"}
"""The framework versions whose code the rows' framework names were read from."""

DEFAULTS = {
    "baseline": "rloo",
    "scale": "none",
    "aggregation": "sequence-sum",
    "kl": "reward-to-go",
}
"""The unbiased defaults: a row's verdicts are those of the loss with it and these."""


# ----------------------------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------------------------

Verdict = tuple[str, str | None]
"""What the check reports on one problem: (``unbiased``/``scaled``/``biased``, diagnosis)."""

UNBIASED: Verdict = ("unbiased", None)


def _same(verdict: Verdict) -> dict[str, Verdict]:
    return dict.fromkeys(PROBLEMS, verdict)


@dataclass(frozen=True)
class Option:
    """One row: an option of one kind, its function, its names elsewhere and its verdicts.

    Attributes:
        kind: ``baseline``, ``scale``, ``aggregation`` or ``kl``.
        name: the option's name in ``eligibility`` (the loss's argument, ``finetune``'s flag).
        fn: the pure function (its formula in its docstring), or None for "nothing".
        mistake: the name ``eligibility check`` gives the bias it makes, or None.
        scale: for a step size, the name of the constant the check reports, or None.
        verdicts: problem → the check's verdict of the loss with this row and the defaults.
        frameworks: framework → how it spells this option (``VERSIONS`` names the version).
        placement: for ``kl``: ``reward`` (R̃ = R − β D), ``advantage`` (Â = A − β K) or
            ``loss`` (+ β k per token); empty otherwise.
        summary: one line on what it does to the gradient.
    """

    kind: str
    name: str
    fn: Callable[..., Any] | None
    verdicts: dict[str, Verdict]
    summary: str
    frameworks: dict[str, str] = field(default_factory=dict)
    mistake: str | None = None
    scale: str | None = None
    placement: str = ""


_CONSTANT: Verdict = ("scaled", "constant-normaliser")
"""A padded width W that is T in every batch (no problem but ``length`` has short batches)."""


def _biased(mistake: str, **on: Verdict) -> dict[str, Verdict]:
    return {p: on.get(p, ("biased", mistake)) for p in PROBLEMS}


ROWS: tuple[Option, ...] = (
    # -- baselines --
    Option(
        "baseline",
        "rloo",
        baseline_rloo,
        _same(UNBIASED),
        "leave-one-out mean of the others: unbiased (default)",
        {
            "TRL": "RLOOTrainer",
            "verl": "adv_estimator=rloo",
            "OpenRLHF": "advantage.estimator=rloo",
        },
    ),
    Option(
        "baseline",
        "mean",
        baseline_group_mean,
        {
            "length": ("scaled", "self-including-mean"),
            "difficulty": ("scaled", "self-including-mean"),
            "kl": ("biased", "self-including-mean"),
        },
        "group mean including the sample: the reward's gradient × (G − 1)/G, not the KL's",
        {
            "TRL": "GRPOTrainer",
            "verl": "adv_estimator=grpo",
            "OpenRLHF": "advantage.estimator=reinforce_baseline, dr_grpo",
        },
        scale="self-including-mean",
    ),
    Option(
        "baseline",
        "none",
        baseline_none,
        _same(UNBIASED),
        "no baseline (A = R): unbiased, noisier",
        {"OpenRLHF": "advantage.estimator=reinforce (then whitened)"},
    ),
    # -- scales --
    Option(
        "scale",
        "none",
        scale_none,
        _same(UNBIASED),
        "no scaling (default)",
        {"TRL": 'scale_rewards="none"', "verl": "norm_adv_by_std_in_grpo=False"},
    ),
    Option(
        "scale",
        "group-std",
        scale_group_std,
        _biased("std-normalised"),
        "÷ the group's reward std: each prompt reweighted by 1/σ̂_q",
        {
            "TRL": 'scale_rewards="group"',
            "verl": "norm_adv_by_std_in_grpo=True",
            "OpenRLHF": "advantage.estimator=group_norm (ε = 1e-9)",
        },
        mistake="std-normalised",
    ),
    Option(
        "scale",
        "batch-std",
        scale_batch_std,
        _biased("std-normalised"),
        "÷ the batch's reward std: one number per batch, biased at small N",
        {"TRL": 'scale_rewards="batch"'},
        mistake="std-normalised",
    ),
    Option(
        "scale",
        "whiten",
        scale_whiten,
        _biased("batch-whitened"),
        "(A − μ)/σ over the batch (REINFORCE++): biased at small N",
        {
            "verl": "adv_estimator=reinforce_plus_plus (per token, Bessel σ)",
            "OpenRLHF": "advantage.estimator=reinforce, reinforce_baseline (per token)",
        },
        mistake="batch-whitened",
    ),
    # -- aggregations --
    Option(
        "aggregation",
        "sequence-sum",
        weights_sequence_sum,
        _same(UNBIASED),
        "(1/N) Σᵢ Σₜ: each sequence's sum, the mean over sequences (default)",
        {"verl": "seq-mean-token-sum", "TRL": "RLOOTrainer"},
    ),
    Option(
        "aggregation",
        "constant",
        weights_constant,
        _same(_CONSTANT),
        "Σ/(N·T_max): a step size 1/T_max",
        {
            "TRL": 'loss_type="dr_grpo"',
            "verl": "seq-mean-token-sum-norm, loss_scale_factor=T_max",
        },
        scale="constant-normaliser",
    ),
    Option(
        "aggregation",
        "constant-sum",
        weights_constant_sum,
        _same(_CONSTANT),
        "Σ/T_max, not ÷ N: a step size N/T_max (verl 0.8's seq-mean-token-sum-norm at T_max)",
        scale="constant-normaliser",
    ),
    Option(
        "aggregation",
        "sequence-mean",
        weights_sequence_mean,
        _biased("length-normalised"),
        "(1/N) Σᵢ (1/Lᵢ) Σₜ: the gradient of the reshaped reward (R − b)/L",
        {
            "TRL": 'loss_type="grpo"',
            "verl": "seq-mean-token-mean",
            "OpenRLHF": "token_level_loss=False",
        },
        mistake="length-normalised",
    ),
    Option(
        "aggregation",
        "token-mean",
        weights_token_mean,
        _biased("batch-dependent-normaliser"),
        "Σ/Σm over the batch: a random factor correlated with the lengths",
        {"TRL": 'loss_type="dapo"', "verl": "token-mean", "OpenRLHF": "token_level_loss=True"},
        mistake="batch-dependent-normaliser",
    ),
    Option(
        "aggregation",
        "micro-batch-token-mean",
        weights_micro_batch_token_mean,
        _biased("batch-dependent-normaliser"),
        "a token mean per half of the batch, averaged (gradient accumulation)",
        {"TRL": 'loss_type="bnpo"'},
        mistake="batch-dependent-normaliser",
    ),
    Option(
        "aggregation",
        "token-sum-norm",
        weights_token_sum_norm,
        _biased("batch-dependent-normaliser", difficulty=_CONSTANT, kl=_CONSTANT),
        "Σ/W, not ÷ N, W the padded width (verl 0.8's seq-mean-token-sum-norm)",
        mistake="batch-dependent-normaliser",
    ),
    Option(
        "aggregation",
        "padded-width",
        weights_padded_width,
        _biased("batch-dependent-normaliser", difficulty=_CONSTANT, kl=_CONSTANT),
        "Σ/(N·W), W the batch's padded width",
        {"verl": "seq-mean-token-sum-norm"},
        mistake="batch-dependent-normaliser",
    ),
    # -- KL placements --
    Option(
        "kl",
        "reward-to-go",
        kl_reward_to_go,
        _same(UNBIASED),
        "k1 as a per-token reward-to-go on the advantage: the exact gradient (default)",
        {"OpenRLHF": "kl.init_coef > 0, kl.estimator=k1 (a per-token reward, summed to go)"},
        placement="advantage",
    ),
    Option(
        "kl",
        "sequence-reward",
        kl_sequence,
        _same(UNBIASED),
        "the sequence's k1 in the reward, before the baseline: the exact gradient",
        {"TRL": "RLOOTrainer", "verl": "use_kl_in_reward (outcome estimators)"},
        placement="reward",
    ),
    Option(
        "kl",
        "none",
        None,
        _biased("kl-no-gradient", length=UNBIASED, difficulty=UNBIASED),
        "no KL term (β unused)",
        {"TRL": "beta=0.0 (default)", "verl": "use_kl_loss=False", "OpenRLHF": "kl.init_coef=0"},
        mistake="kl-no-gradient",
    ),
    Option(
        "kl",
        "k1",
        kl_k1,
        _biased("kl-no-gradient", length=UNBIASED, difficulty=UNBIASED),
        "k1 in the loss: gradient 0 in expectation",
        {"verl": "use_kl_loss, kl_loss_type=k1", "OpenRLHF": "kl.use_loss, kl.estimator=k1"},
        mistake="kl-no-gradient",
        placement="loss",
    ),
    Option(
        "kl",
        "k2",
        kl_k2,
        _biased("kl-token-local", length=UNBIASED, difficulty=UNBIASED),
        "k2 in the loss: each token's own KL score, blind to later tokens",
        {"verl": "use_kl_loss, kl_loss_type=mse", "OpenRLHF": "kl.use_loss, kl.estimator=k2"},
        mistake="kl-token-local",
        placement="loss",
    ),
    Option(
        "kl",
        "k3",
        kl_k3,
        _biased("kl-forward", length=UNBIASED, difficulty=UNBIASED),
        "k3 in the loss: the forward KL's gradient",
        {
            "TRL": "beta>0, use_bias_correction_kl=False",
            "OpenRLHF": "kl.use_loss, kl.estimator=k3",
        },
        mistake="kl-forward",
        placement="loss",
    ),
    Option(
        "kl",
        "k3-clamped",
        kl_k3_clamped,
        _biased("kl-forward", length=UNBIASED, difficulty=UNBIASED),
        "k3 clamped to ±10 in the loss: the forward KL's gradient where k3 ≤ 10",
        {"verl": "use_kl_loss, kl_loss_type=low_var_kl"},
        mistake="kl-forward",
        placement="loss",
    ),
    Option(
        "kl",
        "k3-ratio",
        kl_k3_ratio,
        _biased("kl-token-local", length=UNBIASED, difficulty=UNBIASED),
        "k3 × the ratio exp(ℓ − sg ℓ) in the loss: k2's gradient, token-local",
        {"TRL": "beta>0 (use_bias_correction_kl=True, default)"},
        mistake="kl-token-local",
        placement="loss",
    ),
)
"""Every option of the sequence family, one row each."""


_BY_KIND = {kind: {o.name: o for o in ROWS if o.kind == kind} for kind in KINDS}


def rows(kind: str) -> dict[str, Option]:
    """The rows of one kind, by name, in the table's order."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
    return dict(_BY_KIND[kind])


def names(kind: str) -> tuple[str, ...]:
    """The names of the options of one kind (e.g. ``finetune``'s choices)."""
    return tuple(rows(kind))


def row(kind: str, name: object) -> Option:
    """The row ``name`` of ``kind``; a ValueError listing the choices for any other name."""
    table = _BY_KIND[kind] if kind in _BY_KIND else rows(kind)
    if not isinstance(name, str) or name not in table:
        raise ValueError(f"{kind} must be one of {tuple(table)}; got {name!r}")
    return table[name]


# ----------------------------------------------------------------------------------------------
# The docs' tables: printed from the rows (``python tools/option_tables.py --markdown``)
# ----------------------------------------------------------------------------------------------


def _verdict_cell(v: Verdict) -> str:
    return v[0] if v[1] is None else f"{v[0]} ({v[1]})"


def _formula(o: Option) -> str:
    """The first line of the row's docstring: its formula."""
    if o.fn is None or not o.fn.__doc__:
        return "—"
    return o.fn.__doc__.strip().splitlines()[0].rstrip(".").replace("|", "\\|")


def _options_table() -> list[str]:
    head = "| kind | option | formula | " + " | ".join(f"`{p}`" for p in PROBLEMS) + " |"
    lines = [head, "|---|---|---|" + "---|" * len(PROBLEMS)]
    for o in ROWS:
        default = " (default)" if DEFAULTS[o.kind] == o.name else ""
        cells = [o.kind, f"`{o.name}`{default}", _formula(o)]
        cells += [_verdict_cell(o.verdicts[p]) for p in PROBLEMS]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _found(o: Option) -> str:
    """The verdicts of a row, the problems named where they differ."""
    by: dict[str, list[str]] = {}
    for p in PROBLEMS:
        by.setdefault(_verdict_cell(o.verdicts[p]), []).append(f"`{p}`")
    if len(by) == 1:
        return next(iter(by))
    return "; ".join(f"{cell} on {', '.join(ps)}" for cell, ps in by.items())


def _frameworks_table() -> list[str]:
    frameworks = list(VERSIONS)
    head = "| kind | option | " + " | ".join(VERSIONS[f] for f in frameworks)
    lines = [head + " | what the check finds |", "|---|---|" + "---|" * (len(frameworks) + 1)]
    for o in ROWS:
        names = [f"`{o.frameworks[f]}`" if f in o.frameworks else "–" for f in frameworks]
        lines.append("| " + " | ".join([o.kind, f"`{o.name}`", *names, _found(o)]) + " |")
    return lines


TABLES: dict[str, Callable[[], list[str]]] = {
    "options": _options_table,
    "frameworks": _frameworks_table,
}
"""The generated tables, by the name of their marker in the docs."""

_BLOCK = re.compile(r"(<!-- table:(\w+) -->\n)(.*?)(<!-- /table:\2 -->)", re.S)


def markdown(name: str) -> str:
    """The table ``name`` of :data:`TABLES` in Markdown."""
    return "\n".join(TABLES[name]()) + "\n"


def sync(text: str) -> str:
    """``text`` with every ``<!-- table:NAME -->`` … ``<!-- /table:NAME -->`` block regenerated."""
    return _BLOCK.sub(lambda m: m.group(1) + markdown(m.group(2)) + m.group(4), text)


def main(argv: list[str] | None = None) -> int:
    """Print the tables (``--markdown``) or rewrite the marked blocks of docs (``--update``)."""
    parser = argparse.ArgumentParser(prog="python tools/option_tables.py")
    parser.add_argument("--markdown", action="store_true", help="print every table")
    parser.add_argument("--update", nargs="+", metavar="DOC", help="regenerate these docs' tables")
    args = parser.parse_args(argv)
    if args.update:
        from eligibility._io import atomic_write_text

        for doc in args.update:
            path = Path(doc)
            atomic_write_text(path, sync(path.read_text(encoding="utf-8")))
    if args.markdown or not args.update:
        for name in TABLES:
            sys.stdout.write(f"<!-- table:{name} -->\n{markdown(name)}<!-- /table:{name} -->\n\n")
    return 0


__all__ = [
    "DEFAULTS",
    "KINDS",
    "PROBLEMS",
    "ROWS",
    "VERSIONS",
    "Option",
    "kl_reward_to_go",
    "kl_sequence",
    "names",
    "row",
    "rows",
    "whiten",
]
