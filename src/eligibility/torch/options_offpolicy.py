r"""The off-policy rows of the option table: the ratio π_θ/π_old, the surrogate, the correction.

Each kind (:data:`OFF_POLICY_KINDS`) with the others at their defaults
(:data:`OFF_POLICY_DEFAULTS`) makes :func:`~eligibility.torch.offpolicy.off_policy_loss`'s
estimator; a row's verdicts are the check's on the off-policy problems
(:data:`OFF_POLICY_PROBLEMS`). :mod:`eligibility.torch.options` reads these rows with its own.
"""

from __future__ import annotations

from eligibility.torch.option_row import UNBIASED, Option, Verdict
from eligibility.torch.option_row import say as _say

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


__all__ = ["OFF_POLICY_DEFAULTS", "OFF_POLICY_KINDS", "OFF_POLICY_PROBLEMS", "OFF_POLICY_ROWS"]
