"""Fixed bugs of public RL trainers, each side with what ``check`` should find.

:data:`CASES` are fifteen fixing commits ported while the check's credit reading was being
made; :data:`FRESH` are ten more (nine commits, ROLL's with two settings) ported after it was
set, a held-out set: their ports and derivations were committed before the check ran on any of
them, and before the reading's code was looked at.

Each :class:`Case` is one fixing commit: the framework's code at the commit's parent
(``buggy``) and at the commit (``fixed``), ported in ``ports.py``, and for each side the
verdict on every problem checked, the names a right reading gives, and where the weight goes
wrong, derived from the ported operations before the check was run on them. ``names`` are the
catalogue's names a right reading must give; ``also`` names that are true as well and may be
given; a side whose departure from the exact credit has no name in the catalogue says so in
``place``, and there a right reading gives no name but ``other`` or ``credit-unexplained``.

Notation: G = 8 completions per prompt, T = 5 tokens at most, N the batch's completions (16 on
``length`` and ``kl``, 24 on ``difficulty``), Lᵢ reply i's tokens, ℓₜ = ln π_θ(oₜ | ·),
Rᵢ ∈ {0, 1}, R̄_g the group's mean, s_g its sample std, w = π_θ(o)/μ(o) (off-policy: the
whole sequence's ratio to the sampler, the exact weight).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Side:
    """One side of a fix: the ported function and what a right reading of it says.

    Attributes:
        function: its name in ``ports.py``.
        verdicts: the verdict on each problem checked.
        names: the catalogue's names a right reading gives.
        also: names that are true as well (a reading may give them).
        place: which tokens' weights depart from the exact credit, and how.
    """

    function: str
    verdicts: dict[str, str]
    names: tuple[str, ...] | dict[str, tuple[str, ...]] = ()
    also: tuple[str, ...] | dict[str, tuple[str, ...]] = ()
    place: str = ""

    def named(self, problem: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The names a right reading gives on ``problem``, and those it may give besides."""
        names = self.names[problem] if isinstance(self.names, dict) else self.names
        also = self.also[problem] if isinstance(self.also, dict) else self.also
        return names, also


@dataclass(frozen=True)
class Case:
    """One fixing commit of a public trainer, ported.

    Attributes:
        key: the case's name.
        repo: the repository (owner/name).
        commit: the fixing commit; ``buggy`` is its parent's code.
        file: the file(s) the fix changed.
        change: what the fix changed, in one line.
        family: ``sequence`` or ``off-policy``.
        settings: the check's settings besides the family and the problems.
        buggy: the parent's side.
        fixed: the commit's side.
    """

    key: str
    repo: str
    commit: str
    file: str
    change: str
    family: str
    settings: dict[str, Any] = field(default_factory=dict)
    buggy: Side = Side("", {})
    fixed: Side = Side("", {})

    @property
    def problems(self) -> tuple[str, ...]:
        return tuple(self.buggy.verdicts)


def _all(verdict: str, *problems: str) -> dict[str, str]:
    return dict.fromkeys(problems, verdict)


def _unchanged(buggy: Side, fixed: str) -> tuple[Side, Side]:
    """A fix that changes no weight on the check's batches: ``fixed`` reads as ``buggy``."""
    return buggy, replace(buggy, function=fixed, place="the same weights on every batch")


CASES: tuple[Case, ...] = (
    Case(
        "trl-scale-rewards-none",
        "huggingface/trl",
        "35702ce3786a2f4be527d3dd52544fd7ab64785b",
        "trl/trainer/grpo_trainer.py",
        "`scale_rewards: none` stopped dividing the advantages by the group's std (the branches "
        "of none/batch and group were swapped)",
        "sequence",
        {"kl": "none"},
        Side(
            "trl_scale_none_buggy",
            _all("biased", "length", "difficulty"),
            ("std-normalised",),
            ("constant-normaliser", "self-including-mean"),
            "every token of reply i weighted by (Rᵢ − R̄_g)/(s_g + 1e-4) ÷ (N·T): its group's "
            "centred reward divided by the group's sample std, a factor that depends on the "
            "group's own rewards",
        ),
        Side(
            "trl_scale_none_fixed",
            _all("scaled", "length", "difficulty"),
            ("self-including-mean", "constant-normaliser"),
            (),
            "every token of reply i weighted by (Rᵢ − R̄_g) ÷ (N·T): the exact credit times "
            "(G − 1)/G ÷ T, c = 0.175 on both problems",
        ),
    ),
    Case(
        "trl-cispo-branch",
        "huggingface/trl",
        "97ca1a2569367d4d1d30bedf8d29377b3d4d1ec4",
        "trl/trainer/grpo_trainer.py",
        "the CISPO weight min(rₜ, ε_high) ran for loss types grpo/bnpo/dr_grpo/dapo and the PPO "
        "clip for cispo; the conditions were swapped back",
        "off-policy",
        {},
        Side(
            "trl_cispo_branch_buggy",
            {"ratio-one": "scaled", "near": "biased"},
            {"ratio-one": ("ratio-1-broken",), "near": ("cispo-absolute-cap",)},
            {
                "ratio-one": ("cispo-absolute-cap", "self-including-mean", "constant-normaliser"),
                "near": (
                    "uncorrected-sampler",
                    "per-token-ratio",
                    "self-including-mean",
                    "constant-normaliser",
                ),
            },
            "each token weighted by sg(min(rₜ, 0.2))·(Rᵢ − R̄_g) ÷ (N·T): at θ = θ_old every "
            "token 0.2 (c = 0.2·7/8·1/5 = 0.035); off it, a per-token cap at 0.2 with no "
            "sequence ratio and no sampler weight",
        ),
        Side(
            "trl_cispo_branch_fixed",
            {"ratio-one": "scaled", "near": "biased"},
            {
                "ratio-one": ("self-including-mean", "constant-normaliser"),
                "near": ("per-token-ratio", "clipping-bias", "uncorrected-sampler"),
            },
            {"ratio-one": (), "near": ("self-including-mean", "constant-normaliser")},
            "each token weighted by its own PPO-clipped ratio rₜ (ε 0.2), no sampler weight; at "
            "θ = θ_old the exact credit × 7/8 ÷ T (c = 0.175)",
        ),
    ),
    Case(
        "trl-accumulation",
        "huggingface/trl",
        "d14f7f3eb274c77490cf1fc34b2d379288adb794",
        "trl/trainer/grpo_trainer.py",
        "the Trainer now divides GRPO's loss by the gradient accumulation steps",
        "sequence",
        {"kl": "none", "micro_batches": 2},
        Side(
            "trl_accumulation_buggy",
            {"length": "biased"},
            ("std-normalised", "length-normalised", "accumulation-scaled"),
            (),
            "each token of reply i weighted by (Rᵢ − R̄_g)/(s_g + 1e-4)/Lᵢ ÷ (N/2): GRPO's "
            "weights times 2, the two micro-batches' means summed",
        ),
        Side(
            "trl_accumulation_fixed",
            {"length": "biased"},
            ("std-normalised", "length-normalised"),
            (),
            "each token of reply i weighted by (Rᵢ − R̄_g)/(s_g + 1e-4)/Lᵢ ÷ N: GRPO's weights",
        ),
    ),
    Case(
        "verl-is-detach",
        "volcengine/verl",
        "e01fc05be3302c835acefe15fa89757142354ad1",
        "verl/trainer/ppo/rollout_corr_helper.py",
        "the truncated rollout IS weight min(π_θ/π_rollout, C) is detached (bypass mode, "
        "policy-gradient loss)",
        "off-policy",
        {},
        Side(
            "verl_is_detach_buggy",
            {"ratio-one": "biased", "near": "biased"},
            ("ratio-1-broken",),
            {"ratio-one": (), "near": ("truncation-bias",)},
            "each reply with w < 2 weighted by Aᵢ·w·(1 + Σₜ ℓₜ) instead of Aᵢ·w: a factor per "
            "reply, 1 + ln π_θ(oᵢ), negative for every reply less likely than e⁻¹ (the sign of "
            "its credit flipped); replies with w ≥ 2 weighted 2·Aᵢ",
        ),
        Side(
            "verl_is_detach_fixed",
            {"ratio-one": "unbiased", "near": "biased"},
            {"ratio-one": (), "near": ("truncation-bias",)},
            (),
            "each reply weighted by sg(min(w, 2))·Aᵢ (RLOO, summed, ÷ N): exact where w ≤ 2, "
            "replies with w > 2 under-weighted; at θ = θ_old, w = 1: exact",
        ),
    ),
    Case(
        "verl-kept-count",
        "volcengine/verl",
        "2af4aff52cbfbcf13985df133d2bcada45ea5890",
        "verl/trainer/ppo/core_algos.py",
        "seq-mean-token-sum divides by the batch's sequences, no longer by those the rollout "
        "rejection left (introduced in ab3e8af0a)",
        "off-policy",
        {},
        Side(
            "verl_kept_count_buggy",
            {"ratio-one": "unbiased", "near": "biased"},
            {"ratio-one": (), "near": ("masking-bias", "batch-dependent-normaliser")},
            (),
            "replies with w ∉ [0.5, 2] weighted 0, the others Aᵢ·w ÷ (the number kept): a "
            "factor per batch N/n_kept on top of the rejection; at θ = θ_old none rejected: exact",
        ),
        Side(
            "verl_kept_count_fixed",
            {"ratio-one": "unbiased", "near": "biased"},
            {"ratio-one": (), "near": ("masking-bias",)},
            (),
            "replies with w ∉ [0.5, 2] weighted 0, the others Aᵢ·w ÷ N; at θ = θ_old exact",
        ),
    ),
    Case(
        "verl-grpo-at-mean",
        "volcengine/verl",
        "a194638f1d5725ff2e621eff3ff209400ea82302",
        "verl/trainer/ppo/core_algos.py",
        "a score within ε of its group's mean gets advantage 0 (no change where rewards are "
        "0 or 1: a score equals its group's mean only in a constant group, 0 either way)",
        "sequence",
        {"kl": "none"},
        *_unchanged(
            Side(
                "verl_grpo_mean_buggy",
                _all("biased", "length", "difficulty"),
                ("std-normalised",),
                (),
                "each reply weighted by (Rᵢ − R̄_g)/(s_g + 1e-6), summed over its tokens, ÷ N",
            ),
            "verl_grpo_mean_fixed",
        ),
    ),
    Case(
        "openrlhf-zero-action-baseline",
        "OpenRLHF/OpenRLHF",
        "68f36f4993d5d47f69d4855504329eb52697ac72",
        "openrlhf/trainer/ppo_utils/experience_maker.py",
        "samples with no action token are left out of the group baselines (no change where "
        "every completion has a token, as here)",
        "sequence",
        {"kl": "none"},
        *_unchanged(
            Side(
                "openrlhf_zero_action_buggy",
                _all("biased", "length", "difficulty"),
                ("batch-dependent-normaliser",),
                (),
                "each token weighted by its RLOO advantage ÷ the batch's token count",
            ),
            "openrlhf_zero_action_fixed",
        ),
    ),
    Case(
        "openrlhf-seq-mask-tis",
        "OpenRLHF/OpenRLHF",
        "0d7490c2052e00e0b6fe313981b64484ee1e5422",
        "openrlhf/models/loss.py",
        "seq-mask-tis clamps each token's π_old/μ weight to [0.5, 5] (it was unclamped)",
        "off-policy",
        {},
        Side(
            "openrlhf_seq_mask_tis_buggy",
            {"ratio-one": "biased", "near": "biased"},
            {
                "ratio-one": ("batch-dependent-normaliser",),
                "near": (
                    "per-token-ratio",
                    "clipping-bias",
                    "per-token-sampler-weight",
                    "batch-dependent-normaliser",
                ),
            },
            {"ratio-one": (), "near": ("masking-bias",)},
            "each token weighted by sg(π_old/μ at that token)·clip(rₜ)·Aᵢ ÷ the batch's tokens, "
            "sequences whose geometric-mean π_old/μ is outside [0.5, 5] weighted 0; at θ = θ_old "
            "and μ = π_old only the ÷ the batch's tokens remains",
        ),
        Side(
            "openrlhf_seq_mask_tis_fixed",
            {"ratio-one": "biased", "near": "biased"},
            {
                "ratio-one": ("batch-dependent-normaliser",),
                "near": (
                    "per-token-ratio",
                    "clipping-bias",
                    "per-token-sampler-weight",
                    "truncation-bias",
                    "batch-dependent-normaliser",
                ),
            },
            {"ratio-one": (), "near": ("masking-bias",)},
            "as before, each token's π_old/μ clamped to [0.5, 5] (a floor as well as a cap); at "
            "θ = θ_old and μ = π_old the same as before",
        ),
    ),
    Case(
        "skyrl-kl-no-grad",
        "NovaSky-AI/SkyRL",
        "9d7bca91a505970211ec844f10bf5c072e921163",
        "skyrl/backends/skyrl_train/utils/ppo_utils.py",
        "`compute_approx_kl` lost its @torch.no_grad(): the KL loss has a gradient",
        "sequence",
        {},
        Side(
            "skyrl_kl_grad_buggy",
            {"kl": "biased"},
            ("length-normalised", "kl-no-gradient"),
            (),
            "the policy term: each token Aᵢ/Lᵢ (RLOO, a mean per sequence); the KL term "
            "contributes nothing to the gradient",
        ),
        Side(
            "skyrl_kl_grad_fixed",
            {"kl": "biased"},
            ("length-normalised", "kl-forward"),
            ("kl-normalised",),
            "the policy term as before; the KL term β·(1/Lᵢ)Σₜ k3ₜ differentiated through k3: "
            "the forward KL's gradient, per sequence divided by its length",
        ),
    ),
    Case(
        "prime-rl-loss-scale",
        "PrimeIntellect-ai/prime-rl",
        "dece5e7fca4297d2a016fe26d2b1380615630a15",
        "src/prime_rl/trainer/rl/loss.py",
        "the loss is divided by max(loss_scale, 1), the batch's token count (it was "
        "min(loss_scale, 1) = 1)",
        "sequence",
        {"kl": "none"},
        Side(
            "prime_loss_scale_buggy",
            _all("scaled", "length", "difficulty"),
            ("self-including-mean",),
            ("scale",),
            "every token of reply i weighted by Rᵢ − R̄_g, summed over the batch: the exact "
            "credit × N·(G − 1)/G (c = 14 on length, 21 on difficulty: a sum, not a mean)",
        ),
        Side(
            "prime_loss_scale_fixed",
            _all("biased", "length", "difficulty"),
            ("batch-dependent-normaliser",),
            ("self-including-mean",),
            "every token of reply i weighted by (Rᵢ − R̄_g) ÷ the batch's token count",
        ),
    ),
    Case(
        "prime-rl-gspo-ratio",
        "PrimeIntellect-ai/prime-rl",
        "48b9ec7a874f2760accadf10684c60d29c534182",
        "src/prime_rl/trainer/rl/loss.py",
        "the sequence ratio is ℓₜ − sg(ℓₜ) + sg(Σ(ℓ − ℓ^μ)), no longer torch.full_like of the "
        "sequence's log-ratio",
        "off-policy",
        {},
        Side(
            "prime_gspo_buggy",
            _all("error", "ratio-one", "near"),
            (),
            (),
            "torch.full_like refuses a fill value that carries a gradient (TypeError): no "
            "gradient is ever computed",
        ),
        Side(
            "prime_gspo_fixed",
            {"ratio-one": "biased", "near": "biased"},
            ("length-normalised",),
            {
                "ratio-one": ("self-including-mean", "scale"),
                "near": ("self-including-mean", "masking-bias", "scale"),
            },
            "each reply weighted by sg(w)·(Rᵢ − R̄_g)/Lᵢ, summed over the batch; replies with "
            "w ∉ [0.125, 8] weighted 0",
        ),
    ),
    Case(
        "nemo-rl-kl-score",
        "NVIDIA-NeMo/RL",
        "33bce20d783468d2eec75bace5982f3cc2c5bb8d",
        "nemo_rl/algorithms/loss/loss_functions.py",
        "the k3 KL term is multiplied by exp(ℓ − sg ℓ) (value 1), adding the score-function part "
        "of its gradient",
        "sequence",
        {},
        Side(
            "nemo_kl_score_buggy",
            {"kl": "biased"},
            ("length-normalised", "kl-forward"),
            ("kl-normalised",),
            "the policy term each token Aᵢ/Lᵢ (RLOO); the KL term β·(1/Lᵢ)Σₜ k3ₜ: the forward "
            "KL's gradient",
        ),
        Side(
            "nemo_kl_score_fixed",
            {"kl": "biased"},
            ("length-normalised", "kl-token-local"),
            ("kl-normalised",),
            "the policy term as before; the KL term's gradient β(∇k3ₜ + k3ₜ∇ℓₜ)/Lᵢ: each "
            "token's own reverse-KL score, without the later tokens' KL",
        ),
    ),
    Case(
        "nemo-rl-kl-clamp",
        "NVIDIA-NeMo/RL",
        "2206ae11f7e0b48b01c319617cb904ec14b55849",
        "nemo_rl/algorithms/utils.py",
        "the KL's weight moves inside calculate_kl, before the output clamp, and is detached "
        "where the input clamp binds",
        "sequence",
        {},
        Side(
            "nemo_kl_clamp_buggy",
            {"kl": "biased"},
            ("length-normalised", "kl-token-local"),
            ("kl-normalised",),
            "as nemo-rl-kl-score's fixed side; on a token whose k3 passes the output clamp (10), "
            "the clamped value keeps its score part: weight −10β/(Lᵢ N)",
        ),
        Side(
            "nemo_kl_clamp_fixed",
            {"kl": "biased"},
            ("length-normalised", "kl-token-local"),
            ("kl-normalised",),
            "as the parent's, except on a token whose k3 passes 10: the clamp is applied after "
            "the weight, so that token's KL gives no weight at all (first derived as no change; "
            "the weights test found such tokens on kl before the check was run on this case)",
        ),
    ),
    Case(
        "areal-seq-advantage",
        "inclusionAI/AReaL",
        "b2fb234d927a0740f3cea4c8cc22c46fa3154686",
        "areal/utils/functional/functional.py",
        "the 2D sequence-level advantage sums the loss positions' advantages only (it summed "
        "every position's, the prompt's included, ÷ the loss positions)",
        "sequence",
        {"kl": "none"},
        Side(
            "areal_seq_advantage_buggy",
            _all("biased", "length", "difficulty"),
            ("batch-dependent-normaliser",),
            (),
            "each reply weighted by Rᵢ·(Lᵢ + P − 1)/Lᵢ = Rᵢ(1 + 1/Lᵢ) (P = 2: GAE carries the "
            "advantage back through the prompt's positions), summed over its tokens, ÷ the "
            "batch's tokens: a factor per reply from its length that no catalogue name has",
        ),
        Side(
            "areal_seq_advantage_fixed",
            _all("biased", "length", "difficulty"),
            ("batch-dependent-normaliser",),
            (),
            "each reply weighted by Rᵢ (no baseline), summed over its tokens, ÷ the batch's tokens",
        ),
    ),
    Case(
        "slime-rpp-kl-mask",
        "THUDM/slime",
        "166441911f2f59428100323d95fb957a5057cec8",
        "slime/utils/ppo_utils.py",
        "REINFORCE++'s returns take the KL of loss-masked tokens out (no change on one reply, "
        "whose tokens are all in the loss)",
        "sequence",
        {},
        *_unchanged(
            Side(
                "slime_rpp_kl_mask_buggy",
                {"kl": "unbiased"},
                (),
                (),
                "each token weighted by Rᵢ − β Σ_{s ≥ t} (ℓₛ − ℓ^refₛ): the KL as a reward to go",
            ),
            "slime_rpp_kl_mask_fixed",
        ),
    ),
)
"""The cases, each derived before the check ran on it."""

_SEQ = ("length", "difficulty")
_NO_KL = {"kl": "none"}

FRESH: tuple[Case, ...] = (
    Case(
        "pipelinerl-group-stats",
        "ServiceNow/PipelineRL",
        "f90d0efcd5f539f2d70ce68763ca017faddc0128",
        "pipelinerl/finetune/rl/__init__.py",
        "the group's reward mean and std are taken over every rollout's first step, no longer "
        "over the group's first rollout alone (`rollout_index == 0` → `step_index == 0`)",
        "sequence",
        _NO_KL,
        Side(
            "pipelinerl_group_stats_buggy",
            _all("scaled", *_SEQ),
            ("epsilon-divisor", "dropped-at-random"),
            ("scale",),
            "every token of reply i weighted by (Rᵢ − R_{g,1})·10⁴ ÷ N, R_{g,1} the reward of its "
            "group's first reply: the std of that one row is NaN, read as 0, + 1e-4. The group's "
            "first reply is weighted 0 (its own reward is its baseline); every other reply's "
            "baseline is another reply's reward, independent of it, so E[ĝ] = 10⁴·(G − 1)/G ∇J: "
            "c = 8750 on both problems",
        ),
        Side(
            "pipelinerl_group_stats_fixed",
            _all("biased", *_SEQ),
            ("std-normalised",),
            ("self-including-mean", "batch-dependent-normaliser"),
            "every token of reply i weighted by (Rᵢ − R̄_g)/(s_g + 1e-4) ÷ N (s_g the group's "
            "sample std): GRPO's ÷ the group's σ, summed over the reply's tokens",
        ),
    ),
    Case(
        "msswift-sapo-gate",
        "modelscope/ms-swift",
        "a7986dca16627101cc245f3a954c7562d2f2c62f",
        "swift/rlhf_trainers/grpo_trainer.py",
        "SAPO's soft gate σ(τ(rₜ − 1)) is multiplied by 4/τ, so that its slope at rₜ = 1 is 1 "
        "(it was τ/4)",
        "sequence",
        _NO_KL,
        Side(
            "msswift_sapo_gate_buggy",
            _all("biased", *_SEQ),
            ("length-normalised", "advantage-transformed"),
            ("scale",),
            "each token of reply i weighted by (τ/4)·Aᵢ/(Lᵢ N), Aᵢ the RLOO advantage, τ = 1 where "
            "Aᵢ > 0 and 1.05 where Aᵢ < 0: a quarter of the length-normalised weight, with the "
            "negative advantages 5 % heavier than the positive (a function of A that is not A)",
        ),
        Side(
            "msswift_sapo_gate_fixed",
            _all("biased", *_SEQ),
            ("length-normalised",),
            (),
            "each token of reply i weighted by Aᵢ/(Lᵢ N) (RLOO): the gate's slope is 1 on both "
            "signs, SAPO's sequence mean remains",
        ),
    ),
    Case(
        "msswift-gspo-broadcast",
        "modelscope/ms-swift",
        "ab85a61defb11f6607a53373f0acaabc081621ff",
        "swift/trainers/rlhf_trainer/grpo_trainer.py",
        "GSPO's sequence log-weight Σ(ℓ − ℓ_old)/L takes `unsqueeze(-1)` after the quotient (it "
        "divided an [N] tensor by an [N, 1] one)",
        "sequence",
        _NO_KL,
        Side(
            "msswift_gspo_broadcast_buggy",
            _all("error", *_SEQ),
            (),
            (),
            "the log-weight broadcasts to [N, N], and the loss's product with the [N, T] "
            "completion mask fails (N = 16 or 24, T = 5): no gradient is ever computed",
        ),
        Side(
            "msswift_gspo_broadcast_fixed",
            _all("biased", *_SEQ),
            ("length-normalised",),
            ("self-including-mean",),
            "each token of reply i weighted by (Rᵢ − R̄_g)/(Lᵢ N): GSPO's sequence ratio (value "
            "1 on-policy, ∂/∂ℓₜ = 1/Lᵢ) under the mean per sequence",
        ),
    ),
    Case(
        "verl-kl-loss-sign",
        "volcengine/verl",
        "a65c9157bc0b85b64cd753de19f94e80a11bd871",
        "verl/workers/actor/dp_actor.py",
        "the KL loss is added to the policy loss (it was subtracted: the KL to the reference "
        "was maximised)",
        "sequence",
        {},
        Side(
            "verl_kl_sign_buggy",
            {"kl": "biased"},
            ("std-normalised", "batch-dependent-normaliser", "kl-weight"),
            ("kl-forward", "kl-normalised", "kl-estimator-unknown"),
            "the policy term: each token (Rᵢ − R̄_g)/(s_g + 1e-6) ÷ the batch's tokens; the KL "
            "term: each token +β(1 − π_ref/π)/(the batch's tokens), the gradient of k3 with "
            "the sign reversed (a weight −β on the KL), 0 where k3 passes its clamp at 10",
        ),
        Side(
            "verl_kl_sign_fixed",
            {"kl": "biased"},
            ("std-normalised", "batch-dependent-normaliser", "kl-forward"),
            ("kl-normalised",),
            "the policy term as before; the KL term each token −β(1 − π_ref/π)/(the batch's "
            "tokens): k3's gradient in the loss, the forward KL's, 0 where k3 passes 10",
        ),
    ),
    Case(
        "openrlhf-gspo-loss",
        "OpenRLHF/OpenRLHF",
        "1b23ecf0b17f0842138f9a6a3216fa21baff5355",
        "openrlhf/models/loss.py",
        "GSPO's loss is a mean per sequence then over the sequences (`token_level_loss` False); "
        "it was one token mean over the batch",
        "sequence",
        _NO_KL,
        Side(
            "openrlhf_gspo_loss_buggy",
            _all("biased", *_SEQ),
            ("batch-dependent-normaliser",),
            (),
            "each token of reply i weighted by Aᵢ ÷ the batch's tokens (RLOO): the sequence "
            "ratio's ∂/∂ℓₜ = 1/Lᵢ summed over the reply's Lᵢ tokens",
        ),
        Side(
            "openrlhf_gspo_loss_fixed",
            _all("biased", *_SEQ),
            ("length-normalised",),
            (),
            "each token of reply i weighted by Aᵢ/(Lᵢ N) (RLOO): GSPO's mean per sequence",
        ),
    ),
    Case(
        "trl-loss-normalisation",
        "huggingface/trl",
        "293b62095099561a6a2e27d2d521c3cee709a1f2",
        "trl/trainer/grpo_trainer.py",
        "GRPO's loss is one token mean over the batch; it was a mean per sequence then over "
        "the sequences",
        "sequence",
        _NO_KL,
        Side(
            "trl_loss_normalisation_buggy",
            _all("biased", *_SEQ),
            ("std-normalised", "length-normalised"),
            (),
            "each token of reply i weighted by (Rᵢ − R̄_g)/(s_g + 1e-4)/(Lᵢ N)",
        ),
        Side(
            "trl_loss_normalisation_fixed",
            _all("biased", *_SEQ),
            ("std-normalised", "batch-dependent-normaliser"),
            (),
            "each token of reply i weighted by (Rᵢ − R̄_g)/(s_g + 1e-4) ÷ the batch's tokens",
        ),
    ),
    Case(
        "trl-truncated-normaliser",
        "huggingface/trl",
        "7c1fa85ad5d1878edef7a795c74e91749961b152",
        "trl/trainer/grpo_trainer.py",
        "DAPO's normaliser counts the tokens of the loss mask, after `mask_truncated_completions`; "
        "it counted every completion token, the masked truncated ones too",
        "sequence",
        _NO_KL,
        Side(
            "trl_truncated_normaliser_buggy",
            _all("biased", *_SEQ),
            ("truncated-masked", "masked-tokens-in-normaliser", "batch-dependent-normaliser"),
            ("self-including-mean",),
            "replies with no EOS within T weighted 0; each token of another reply i weighted by "
            "(Rᵢ − R̄_g) ÷ the batch's completion tokens, the truncated replies' included (R̄_g "
            "the whole group's mean, truncated replies' rewards in it)",
        ),
        Side(
            "trl_truncated_normaliser_fixed",
            _all("biased", *_SEQ),
            ("truncated-masked", "batch-dependent-normaliser"),
            ("self-including-mean",),
            "replies with no EOS within T weighted 0; each token of another reply i weighted by "
            "(Rᵢ − R̄_g) ÷ the tokens of the replies kept",
        ),
    ),
    Case(
        "roll-agg-token-mean",
        "alibaba/ROLL",
        "d8d7e78f14726357e57ed26672f8b8579824b65b",
        "roll/utils/functionals.py",
        '`agg_loss` "seq-mean-token-mean" divides each sequence\'s token mean by its length '
        "once, not twice",
        "sequence",
        _NO_KL,
        Side(
            "roll_agg_token_mean_buggy",
            _all("biased", *_SEQ),
            (),
            ("reply-factor", "self-including-mean"),
            "each token of reply i weighted by (Rᵢ − R̄_g)/(Lᵢ² N): a factor 1/Lᵢ² per reply, "
            "which no catalogue name has",
        ),
        Side(
            "roll_agg_token_mean_fixed",
            _all("biased", *_SEQ),
            ("length-normalised",),
            ("self-including-mean",),
            "each token of reply i weighted by (Rᵢ − R̄_g)/(Lᵢ N)",
        ),
    ),
    Case(
        "roll-agg-token-sum",
        "alibaba/ROLL",
        "d8d7e78f14726357e57ed26672f8b8579824b65b",
        "roll/utils/functionals.py",
        '`agg_loss` "seq-mean-token-sum" sums each sequence\'s tokens (it took their mean)',
        "sequence",
        _NO_KL,
        Side(
            "roll_agg_token_sum_buggy",
            _all("biased", *_SEQ),
            ("length-normalised",),
            ("self-including-mean",),
            "each token of reply i weighted by (Rᵢ − R̄_g)/(Lᵢ N)",
        ),
        Side(
            "roll_agg_token_sum_fixed",
            _all("scaled", *_SEQ),
            ("self-including-mean",),
            ("scale",),
            "each token of reply i weighted by (Rᵢ − R̄_g) ÷ N: the exact credit × (G − 1)/G, "
            "c = 0.875 on both problems",
        ),
    ),
)
"""Fixes ported after the check's reading was set (held out from its making), each derived
before the check ran on it."""
