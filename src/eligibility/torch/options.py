r"""The one table of the sequence family's options: every baseline, scale, aggregation and KL.

A row (:class:`Option`) names an option's pure function (in :mod:`eligibility.torch.formulas`,
its formula in the docstring; imported, with torch, at a row's first ``fn``: the names alone
import without it), its name, its names in TRL, verl and OpenRLHF (with the version read), the
mistake ``eligibility check --sequence`` names it by, and the verdict the check gives it on each
exact problem (``length``, ``difficulty``, ``kl``) when it is the only choice off the defaults.
Everything else is a view of these rows: :func:`~eligibility.torch.sequence.sequence_reinforce_loss`
and :func:`~eligibility.torch.advantages.group_advantages` dispatch on them, ``finetune``'s flags
list their names, the check's reference and named variants are built from their functions, and
the option tables of ``docs/`` are printed from them (``python tools/option_tables.py
--markdown``). Adding an option is adding a row (and its test).

The unbiased estimator of ∇J, J = E[R] − β KL(π_θ ‖ π_ref) over whole sequences, is

    ĝ = (1/N) Σᵢ Σₜ mᵢ,ₜ ∇ℓᵢ,ₜ · (Rᵢ − b₋ᵢ − β Σ_{t′≥t} mᵢ,ₜ′ (ℓᵢ,ₜ′ − ℓ^ref_ᵢ,ₜ′)),

the defaults (``rloo``, scale ``none``, ``sequence-sum``, ``reward-to-go``); every other row
changes E[ĝ], and its verdicts say to what.
"""

from __future__ import annotations

from eligibility.torch.option_row import (
    BETA,
    NEEDS,
    UNBIASED,
    VERSIONS,
    Option,
    Spelling,
    Verdict,
)
from eligibility.torch.option_row import say as _say
from eligibility.torch.options_offpolicy import (
    OFF_POLICY_DEFAULTS,
    OFF_POLICY_KINDS,
    OFF_POLICY_PROBLEMS,
    OFF_POLICY_ROWS,
)

KINDS = ("baseline", "scale", "aggregation", "kl")
"""The columns of a sequence estimator: one row of each kind makes a loss."""

PROBLEMS = ("length", "difficulty", "kl")
"""The exact problems of ``eligibility check --sequence`` a row's verdicts are given on."""

DEFAULTS = {
    "baseline": "rloo",
    "scale": "none",
    "aggregation": "sequence-sum",
    "kl": "reward-to-go",
}
"""The unbiased defaults: a row's verdicts are those of the loss with it and these."""


# -- The table --


def _same(verdict: Verdict) -> dict[str, Verdict]:
    return dict.fromkeys(PROBLEMS, verdict)


_CONSTANT: Verdict = ("scaled", "constant-normaliser")
"""A padded width W that is T in every batch (no problem but ``length`` has short batches)."""


def _biased(mistake: str, **on: Verdict) -> dict[str, Verdict]:
    return {p: on.get(p, ("biased", mistake)) for p in PROBLEMS}


def _kl_in_loss(
    name: str, formula: str, mistake: str, summary: str, frameworks: dict[str, Spelling]
) -> Option:
    """A ``kl`` row placed in the loss (β k(θ) through the aggregation), given ℓ_ref.

    Its mistake shows on the ``kl`` problem alone: the others' objectives hold no KL.
    """
    return Option(
        "kl",
        name,
        formula,
        _biased(mistake, length=UNBIASED, difficulty=UNBIASED),
        summary,
        frameworks,
        mistake=mistake,
        placement="loss",
        needs=("ref_logps",),
    )


def _verl_kl_loss(kind: str) -> Spelling:
    """verl's KL in the loss: ``actor.kl_loss_type`` ``kind``, coefficient β."""
    return _say({"actor.use_kl_loss": True, "actor.kl_loss_type": kind, "actor.kl_loss_coef": BETA})


def _openrlhf_kl_loss(estimator: str) -> Spelling:
    """OpenRLHF's KL in the loss: ``algo.kl.estimator`` ``estimator``, coefficient β."""
    return _say(
        {"algo.kl.init_coef": BETA, "algo.kl.use_loss": True, "algo.kl.estimator": estimator}
    )


ROWS: tuple[Option, ...] = (
    # -- baselines --
    Option(
        "baseline",
        "rloo",
        "baseline_rloo",
        _same(UNBIASED),
        "leave-one-out mean of the others: unbiased (default)",
        {
            "TRL": _say({"trainer": "rloo"}),
            "verl": _say({"algorithm.adv_estimator": "rloo"}),
            "OpenRLHF": _say({"algo.advantage.estimator": "rloo"}),
        },
    ),
    Option(
        "baseline",
        "mean",
        "baseline_group_mean",
        {
            "length": ("scaled", "self-including-mean"),
            "difficulty": ("scaled", "self-including-mean"),
            "kl": ("biased", "self-including-mean"),
        },
        "group mean including the sample: the reward's gradient × (G − 1)/G, not the KL's",
        {
            "TRL": _say({"trainer": "grpo"}),
            "verl": _say({"algorithm.adv_estimator": "grpo"}),
            "OpenRLHF": _say({"algo.advantage.estimator": "reinforce_baseline"}, "or dr_grpo"),
        },
        scale="self-including-mean",
    ),
    Option(
        "baseline",
        "none",
        "baseline_none",
        _same(UNBIASED),
        "no baseline (A = R): unbiased, noisier",
        {"OpenRLHF": _say({"algo.advantage.estimator": "reinforce"}, "then whitened")},
    ),
    # -- scales --
    Option(
        "scale",
        "none",
        "scale_none",
        _same(UNBIASED),
        "no scaling (default)",
        {
            "TRL": _say({"scale_rewards": "none"}),
            "verl": _say({"algorithm.norm_adv_by_std_in_grpo": False}),
        },
    ),
    Option(
        "scale",
        "group-std",
        "scale_group_std",
        _biased("std-normalised"),
        "÷ the group's reward std: each prompt reweighted by 1/σ̂_q",
        {
            "TRL": _say({"scale_rewards": "group"}),
            "verl": _say({"algorithm.norm_adv_by_std_in_grpo": True}),
            "OpenRLHF": _say({"algo.advantage.estimator": "group_norm"}, "ε = 1e-9"),
        },
        mistake="std-normalised",
    ),
    Option(
        "scale",
        "batch-std",
        "scale_batch_std",
        _biased("std-normalised"),
        "÷ the batch's reward std: one number per batch, biased at small N",
        {"TRL": _say({"scale_rewards": "batch"})},
        mistake="std-normalised",
    ),
    Option(
        "scale",
        "whiten",
        "scale_whiten",
        _biased("batch-whitened"),
        "(A − μ)/σ̂ over the batch (REINFORCE++): biased at small N",
        {
            "TRL": _say({"trainer": "rloo", "normalize_advantages": True}),
            "verl": _say({"algorithm.adv_estimator": "reinforce_plus_plus"}, "per token"),
            "OpenRLHF": _say(
                {"algo.advantage.estimator": "reinforce"},
                "or reinforce_baseline; per token, no Bessel",
            ),
        },
        mistake="batch-whitened",
    ),
    # -- aggregations --
    Option(
        "aggregation",
        "sequence-sum",
        "weights_sequence_sum",
        _same(UNBIASED),
        "(1/N) Σᵢ Σₜ: each sequence's sum, the mean over sequences (default)",
        {
            "verl": _say({"actor.loss_agg_mode": "seq-mean-token-sum"}),
            "TRL": _say({"trainer": "rloo"}),
        },
    ),
    Option(
        "aggregation",
        "constant",
        "weights_constant",
        _same(_CONSTANT),
        "Σ/(N·T_max): a step size 1/T_max",
        {
            "TRL": _say({"loss_type": "dr_grpo"}),
            "verl": _say(
                {
                    "actor.loss_agg_mode": "seq-mean-token-sum-norm",
                    "actor.loss_scale_factor": "T_max",
                }
            ),
        },
        scale="constant-normaliser",
        needs=("max_completion_length",),
    ),
    Option(
        "aggregation",
        "constant-sum",
        "weights_constant_sum",
        _same(_CONSTANT),
        "Σ/T_max, not ÷ N: a step size N/T_max (verl 0.8's seq-mean-token-sum-norm at T_max)",
        scale="constant-normaliser",
        needs=("max_completion_length",),
    ),
    Option(
        "aggregation",
        "sequence-mean",
        "weights_sequence_mean",
        _biased("length-normalised"),
        "(1/N) Σᵢ (1/Lᵢ) Σₜ: the gradient of the reshaped reward (R − b)/L",
        {
            "TRL": _say({"loss_type": "grpo"}),
            "verl": _say({"actor.loss_agg_mode": "seq-mean-token-mean"}),
            "OpenRLHF": _say({"actor.loss_agg_mode": "seq-mean-token-mean"}),
        },
        mistake="length-normalised",
    ),
    Option(
        "aggregation",
        "token-mean",
        "weights_token_mean",
        _biased("batch-dependent-normaliser"),
        "Σ/Σm over the batch: a random factor correlated with the lengths",
        {
            "TRL": _say({"loss_type": "dapo"}),
            "verl": _say({"actor.loss_agg_mode": "token-mean"}),
            "OpenRLHF": _say({"actor.loss_agg_mode": "token-mean"}),
        },
        mistake="batch-dependent-normaliser",
        takes=("normaliser",),
    ),
    Option(
        "aggregation",
        "micro-batch-token-mean",
        "weights_micro_batch_token_mean",
        _biased("batch-dependent-normaliser"),
        "a token mean per half of the batch, averaged (gradient accumulation)",
        {"TRL": _say({"loss_type": "bnpo"})},
        mistake="batch-dependent-normaliser",
        needs=("even_rows",),
    ),
    Option(
        "aggregation",
        "token-sum-norm",
        "weights_token_sum_norm",
        _biased("batch-dependent-normaliser", difficulty=_CONSTANT, kl=_CONSTANT),
        "Σ/W, not ÷ N, W the padded width (verl 0.8's seq-mean-token-sum-norm)",
        mistake="batch-dependent-normaliser",
        takes=("normaliser",),
    ),
    Option(
        "aggregation",
        "padded-width",
        "weights_padded_width",
        _biased("batch-dependent-normaliser", difficulty=_CONSTANT, kl=_CONSTANT),
        "Σ/(N·W), W the batch's padded width",
        {"verl": _say({"actor.loss_agg_mode": "seq-mean-token-sum-norm"})},
        mistake="batch-dependent-normaliser",
    ),
    # -- KL placements --
    Option(
        "kl",
        "reward-to-go",
        "kl_reward_to_go",
        _same(UNBIASED),
        "k1 as a per-token reward-to-go on the advantage: the exact gradient (default)",
        {
            "OpenRLHF": _say(
                {"algo.kl.init_coef": BETA, "algo.kl.use_loss": False, "algo.kl.estimator": "k1"},
                "a per-token reward, summed to go",
            )
        },
        placement="advantage",
        needs=("ref_logps",),
    ),
    Option(
        "kl",
        "sequence-reward",
        "kl_sequence",
        _same(UNBIASED),
        "the sequence's k1 in the reward, before the baseline: the exact gradient",
        {
            "TRL": _say({"trainer": "rloo", "beta": BETA}, "RLOOTrainer puts k1 in the reward"),
            "verl": _say(
                {
                    "algorithm.use_kl_in_reward": True,
                    "algorithm.kl_ctrl.kl_coef": BETA,
                    "actor.use_kl_loss": False,
                },
                "outcome estimators",
            ),
        },
        placement="reward",
        needs=("ref_logps",),
    ),
    Option(
        "kl",
        "none",
        None,
        _biased("kl-no-gradient", length=UNBIASED, difficulty=UNBIASED),
        "no KL term (β unused)",
        {
            "TRL": _say({"beta": 0.0}, "default"),
            "verl": _say({"actor.use_kl_loss": False}),
            "OpenRLHF": _say({"algo.kl.init_coef": 0}),
        },
        mistake="kl-no-gradient",
    ),
    _kl_in_loss(
        "k1",
        "kl_k1",
        "kl-no-gradient",
        "k1 in the loss: gradient 0 in expectation",
        {"verl": _verl_kl_loss("kl"), "OpenRLHF": _openrlhf_kl_loss("k1")},
    ),
    _kl_in_loss(
        "k2",
        "kl_k2",
        "kl-token-local",
        "k2 in the loss: each token's own KL score, blind to later tokens",
        {"verl": _verl_kl_loss("mse"), "OpenRLHF": _openrlhf_kl_loss("k2")},
    ),
    _kl_in_loss(
        "k3",
        "kl_k3",
        "kl-forward",
        "k3 in the loss: the forward KL's gradient",
        {
            "TRL": _say({"beta": BETA, "use_bias_correction_kl": False}),
            "OpenRLHF": _openrlhf_kl_loss("k3"),
        },
    ),
    _kl_in_loss(
        "k3-clamped",
        "kl_k3_clamped",
        "kl-forward",
        "k3 clamped to ±10 in the loss: the forward KL's gradient where k3 ≤ 10",
        {"verl": _verl_kl_loss("low_var_kl")},
    ),
    _kl_in_loss(
        "k3-ratio",
        "kl_k3_ratio",
        "kl-token-local",
        "k3 × the ratio exp(ℓ − sg ℓ) in the loss: k2's gradient, token-local",
        {"TRL": _say({"beta": BETA}, "use_bias_correction_kl: true, the default")},
    ),
)
"""Every option of the sequence family, one row each."""


_BY_KIND = {
    kind: {o.name: o for o in (*ROWS, *OFF_POLICY_ROWS) if o.kind == kind}
    for kind in (*KINDS, *OFF_POLICY_KINDS)
}


def rows(kind: str) -> dict[str, Option]:
    """The rows of one kind, by name, in the table's order."""
    if kind not in _BY_KIND:
        raise ValueError(f"kind must be one of {tuple(_BY_KIND)}; got {kind!r}")
    return dict(_BY_KIND[kind])


def names(kind: str) -> tuple[str, ...]:
    """The names of the options of one kind (e.g. ``finetune``'s choices)."""
    return tuple(rows(kind))


def base_names(kind: str) -> tuple[str, ...]:
    """The names a loss takes for ``kind``: its rows less those that are settings of another."""
    return tuple(n for n, o in rows(kind).items() if kind not in o.params)


def row(kind: str, name: object) -> Option:
    """The row ``name`` of ``kind``; a ValueError listing the choices for any other name."""
    table = _BY_KIND[kind] if kind in _BY_KIND else rows(kind)
    if not isinstance(name, str) or name not in table:
        raise ValueError(f"{kind} must be one of {tuple(table)}; got {name!r}")
    return table[name]


__all__ = [
    "BETA",
    "DEFAULTS",
    "KINDS",
    "NEEDS",
    "OFF_POLICY_DEFAULTS",
    "OFF_POLICY_KINDS",
    "OFF_POLICY_PROBLEMS",
    "OFF_POLICY_ROWS",
    "PROBLEMS",
    "ROWS",
    "VERSIONS",
    "Option",
    "Spelling",
    "base_names",
    "names",
    "row",
    "rows",
]
