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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

KINDS = ("baseline", "scale", "aggregation", "kl")
"""The columns of a sequence estimator: one row of each kind makes a loss."""

PROBLEMS = ("length", "difficulty", "kl")
"""The exact problems of ``eligibility check --sequence`` a row's verdicts are given on."""

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


def _say(keys: dict[str, Any] | None = None, note: str = "") -> Spelling:
    return Spelling(tuple((keys or {}).items()), note)


DEFAULTS = {
    "baseline": "rloo",
    "scale": "none",
    "aggregation": "sequence-sum",
    "kl": "reward-to-go",
}
"""The unbiased defaults: a row's verdicts are those of the loss with it and these."""


# -- The table --

Verdict = tuple[str, str | None]
"""What the check reports on one problem: (``unbiased``/``scaled``/``biased``, diagnosis)."""

UNBIASED: Verdict = ("unbiased", None)


def _same(verdict: Verdict) -> dict[str, Verdict]:
    return dict.fromkeys(PROBLEMS, verdict)


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

_CONSTANT: Verdict = ("scaled", "constant-normaliser")
"""A padded width W that is T in every batch (no problem but ``length`` has short batches)."""


def _biased(mistake: str, **on: Verdict) -> dict[str, Verdict]:
    return {p: on.get(p, ("biased", mistake)) for p in PROBLEMS}


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
    Option(
        "kl",
        "k1",
        "kl_k1",
        _biased("kl-no-gradient", length=UNBIASED, difficulty=UNBIASED),
        "k1 in the loss: gradient 0 in expectation",
        {
            "verl": _say(
                {"actor.use_kl_loss": True, "actor.kl_loss_type": "kl", "actor.kl_loss_coef": BETA}
            ),
            "OpenRLHF": _say(
                {"algo.kl.init_coef": BETA, "algo.kl.use_loss": True, "algo.kl.estimator": "k1"}
            ),
        },
        mistake="kl-no-gradient",
        placement="loss",
        needs=("ref_logps",),
    ),
    Option(
        "kl",
        "k2",
        "kl_k2",
        _biased("kl-token-local", length=UNBIASED, difficulty=UNBIASED),
        "k2 in the loss: each token's own KL score, blind to later tokens",
        {
            "verl": _say(
                {"actor.use_kl_loss": True, "actor.kl_loss_type": "mse", "actor.kl_loss_coef": BETA}
            ),
            "OpenRLHF": _say(
                {"algo.kl.init_coef": BETA, "algo.kl.use_loss": True, "algo.kl.estimator": "k2"}
            ),
        },
        mistake="kl-token-local",
        placement="loss",
        needs=("ref_logps",),
    ),
    Option(
        "kl",
        "k3",
        "kl_k3",
        _biased("kl-forward", length=UNBIASED, difficulty=UNBIASED),
        "k3 in the loss: the forward KL's gradient",
        {
            "TRL": _say({"beta": BETA, "use_bias_correction_kl": False}),
            "OpenRLHF": _say(
                {"algo.kl.init_coef": BETA, "algo.kl.use_loss": True, "algo.kl.estimator": "k3"}
            ),
        },
        mistake="kl-forward",
        placement="loss",
        needs=("ref_logps",),
    ),
    Option(
        "kl",
        "k3-clamped",
        "kl_k3_clamped",
        _biased("kl-forward", length=UNBIASED, difficulty=UNBIASED),
        "k3 clamped to ±10 in the loss: the forward KL's gradient where k3 ≤ 10",
        {
            "verl": _say(
                {
                    "actor.use_kl_loss": True,
                    "actor.kl_loss_type": "low_var_kl",
                    "actor.kl_loss_coef": BETA,
                }
            )
        },
        mistake="kl-forward",
        placement="loss",
        needs=("ref_logps",),
    ),
    Option(
        "kl",
        "k3-ratio",
        "kl_k3_ratio",
        _biased("kl-token-local", length=UNBIASED, difficulty=UNBIASED),
        "k3 × the ratio exp(ℓ − sg ℓ) in the loss: k2's gradient, token-local",
        {"TRL": _say({"beta": BETA}, "use_bias_correction_kl: true, the default")},
        mistake="kl-token-local",
        placement="loss",
        needs=("ref_logps",),
    ),
)
"""Every option of the sequence family, one row each."""


# -- The off-policy rows: the ratio π_θ/π_old, the surrogate, the sampler correction --

OFF_POLICY_KINDS = ("ratio", "surrogate", "correction")
"""The off-policy columns: one row of each kind (with the on-policy defaults) makes
:func:`~eligibility.torch.offpolicy.off_policy_loss`'s estimator."""

OFF_POLICY_PROBLEMS = ("ratio-one", "near", "far")
"""The exact problems of ``eligibility check --sequence --off-policy`` (θ = θ_old and μ = π_old;
θ two and four exact steps from θ_old, μ a perturbed, hotter sampler)."""

OFF_POLICY_DEFAULTS = {"ratio": "sequence", "surrogate": "ratio", "correction": "exact"}
"""The unbiased off-policy defaults: the product weight, unclipped, the sampler weight whole."""


def _off(mistake: str, **on: Verdict) -> dict[str, Verdict]:
    """Unbiased at ratio 1 (every ratio and weight is 1 there), ``mistake`` away from it."""
    away = {"near": ("biased", mistake), "far": ("biased", mistake), **on}
    return {"ratio-one": UNBIASED, **away}


OFF_POLICY_ROWS: tuple[Option, ...] = (
    # -- ratios: ρ on each token, stop-gradient form --
    Option(
        "ratio",
        "sequence",
        "ratio_sequence",
        dict.fromkeys(OFF_POLICY_PROBLEMS, UNBIASED),
        "the product π_θ(o)/π_old(o) on every token: unbiased under sampling from π_old (default)",
    ),
    Option(
        "ratio",
        "token",
        "ratio_token",
        _off("per-token-ratio"),
        "each token's own ratio: drops the prefix's and the suffix's; exact only at ratio 1",
        {
            "TRL": _say({"importance_sampling_level": "token"}),
            "verl": _say({"actor.policy_loss.loss_mode": "vanilla"}),
            "OpenRLHF": _say({"actor.policy_loss_type": "ppo"}),
        },
        mistake="per-token-ratio",
    ),
    Option(
        "ratio",
        "geometric-mean",
        "ratio_geometric_mean",
        _off("geometric-mean"),
        "s^(1/L), GSPO's: length-fair but no importance weight away from ratio 1",
        {
            "TRL": _say({"importance_sampling_level": "sequence"}),
            "verl": _say({"actor.policy_loss.loss_mode": "gspo"}),
        },
        mistake="geometric-mean",
    ),
    # -- surrogates: the per-token loss f(ρ, A) --
    Option(
        "surrogate",
        "ratio",
        "surrogate_ratio",
        dict.fromkeys(OFF_POLICY_PROBLEMS, UNBIASED),
        "−ρA, nothing clipped (default)",
    ),
    Option(
        "surrogate",
        "ppo-clip",
        "surrogate_ppo_clip",
        _off("clipping-bias"),
        "PPO's min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high)A): a clipped token has no gradient",
        {
            "TRL": _say({"epsilon": 0.2}, "loss_type grpo, dapo, …"),
            "verl": _say({"actor.clip_ratio_low": 0.2, "actor.clip_ratio_high": 0.2}),
            "OpenRLHF": _say({"actor.eps_clip": 0.2}),
        },
        mistake="clipping-bias",
        params={"eps_low": 0.2},
    ),
    Option(
        "surrogate",
        "dual-clip",
        "surrogate_dual_clip",
        _off("clipping-bias"),
        "PPO-clip, and no gradient where A < 0 and ρ > c",
        {
            "verl": _say({"actor.clip_ratio_c": 3.0}),
            "OpenRLHF": _say({"actor.dual_clip": 3.0}),
        },
        mistake="clipping-bias",
        params={"eps_low": 0.2, "dual_clip": 3.0},
    ),
    Option(
        "surrogate",
        "clip-higher",
        "surrogate_ppo_clip",
        _off("clipping-bias"),
        "PPO-clip with ε_high > ε_low (DAPO's clip-higher): a setting of `ppo-clip`",
        {
            "TRL": _say({"epsilon_high": 0.28}),
            "verl": _say({"actor.clip_ratio_high": 0.28}),
            "OpenRLHF": _say({"actor.eps_clip_low_high": [0.2, 0.28]}),
        },
        mistake="clipping-bias",
        params={"surrogate": "ppo-clip", "eps_low": 0.2, "eps_high": 0.28},
    ),
    Option(
        "surrogate",
        "cispo",
        "surrogate_cispo",
        _off("cispo-relative-cap"),
        "−sg(clip(ρ, 1 − ε_low, 1 + ε_high)) A ℓ: no token loses its gradient, the weight is "
        "capped",
        {
            "TRL": _say({"loss_type": "cispo"}, "its cap is absolute: cispo-absolute"),
            "verl": _say({"actor.policy_loss.loss_mode": "cispo"}),
        },
        params={"eps_low": 0.2, "cispo_cap": "relative"},
    ),
    Option(
        "surrogate",
        "cispo-absolute",
        "surrogate_cispo",
        {
            "ratio-one": ("scaled", "ratio-1-broken"),
            "near": ("biased", "cispo-absolute-cap"),
            "far": ("biased", "cispo-absolute-cap"),
        },
        "TRL's CISPO: the absolute cap min(ρ, ε_high); ε_high unset is ε = 0.2, so every "
        "on-policy gradient is 0.2× (a setting of `cispo`)",
        {"TRL": _say({"loss_type": "cispo"}, "epsilon_high unset")},
        mistake="ratio-1-broken",
        params={"surrogate": "cispo", "cispo_cap": "absolute", "eps_low": 0.2},
    ),
    # -- sampler corrections: w = π_old(o)/μ(o), the rollout engine's mismatch --
    Option(
        "correction",
        "exact",
        "sampler_log_weight",
        dict.fromkeys(OFF_POLICY_PROBLEMS, UNBIASED),
        "the whole weight π_old/μ of the sequence: unbiased under sampling from μ (default)",
        {
            "TRL": _say(
                {
                    "vllm_importance_sampling_mode": "sequence_mask",
                    "vllm_importance_sampling_clip_max": None,
                },
                "no bound: nothing masked",
            )
        },
    ),
    Option(
        "correction",
        "none",
        None,
        _off("uncorrected-sampler"),
        "no sampler weight: the gradient under μ, not under π_old",
        {"TRL": _say({"vllm_importance_sampling_correction": False})},
        mistake="uncorrected-sampler",
    ),
    Option(
        "correction",
        "tis",
        "truncate_weight",
        dict.fromkeys(OFF_POLICY_PROBLEMS, UNBIASED),
        "w truncated at C (TIS): biased where w > C, which at C = 3 (TRL's) is too rare on the "
        "check's problems to show at its N",
        {"TRL": _say({"vllm_importance_sampling_mode": "sequence_truncate"})},
        mistake="truncation-bias",
        params={"cap": 3.0, "correction_level": "sequence"},
    ),
    Option(
        "correction",
        "mis",
        "mask_weight",
        _off("masking-bias", far=UNBIASED),
        "w masked above C (MIS): a masked completion is dropped whole",
        {
            "TRL": _say(
                {"vllm_importance_sampling_mode": "sequence_mask"}, "default with vLLM, C = 3"
            )
        },
        mistake="masking-bias",
        params={"cap": 3.0, "correction_level": "sequence"},
    ),
    Option(
        "correction",
        "tis-token",
        "truncate_weight",
        _off("truncation-bias"),
        "each token's own weight truncated at C: drops the other tokens' factors (a setting "
        "of `tis`)",
        {"TRL": _say({"vllm_importance_sampling_mode": "token_truncate"})},
        mistake="truncation-bias",
        params={"correction": "tis", "cap": 2.0, "correction_level": "token"},
    ),
    Option(
        "correction",
        "mis-token",
        "mask_weight",
        _off("masking-bias"),
        "each token's own weight masked above C (a setting of `mis`)",
        {"TRL": _say({"vllm_importance_sampling_mode": "token_mask"})},
        mistake="masking-bias",
        params={"correction": "mis", "cap": 2.0, "correction_level": "token"},
    ),
)
"""The off-policy options, one row each (verdicts with the other kinds at their defaults)."""


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
