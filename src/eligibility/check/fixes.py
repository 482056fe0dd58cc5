r"""What to change for each name the check gives: the line of a loss, or a framework's key.

One row per diagnosis (:data:`FIXES`): the change that removes it from a loss written in the
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
from dataclasses import dataclass, field
from typing import Any

from eligibility.check.diagnosis import Diagnosis
from eligibility.torch import options
from eligibility.torch.options import Spelling


@dataclass(frozen=True)
class Cure:
    """A framework's fix: the option-table row to choose instead, and another way, if any.

    Attributes:
        kind: the row's kind (``scale``, ``aggregation``, ``baseline``, ``kl``).
        name: the row's name; its framework column holds the keys (:class:`Spelling`).
        also: another way, said after the keys (``or --kl none``).
    """

    kind: str
    name: str
    also: str = ""


@dataclass(frozen=True)
class Fix:
    """The change that removes one diagnosis.

    Attributes:
        loss: the line to change in a ``logps``-form loss (the other forms too, unless given).
        model: the ``model`` and ``step`` forms' fix, where the log-probs are the user's own.
        step: the ``step`` form's own fix (a training step's line), where it differs.
        framework: ``--framework`` name → the :class:`Cure` (a row whose keys remove it),
            the keys of an option the table has no row for, or the words where no key does
            (a check flag, an update).
        weight: the fix is the framework's KL weight set to the objective's β (every key of
            its KL rows whose value is β), or ``--beta`` declaring the configuration's.
    """

    loss: str
    model: str | None = None
    step: str | None = None
    framework: dict[str, Cure | Spelling | str] = field(default_factory=dict)
    weight: bool = False


_NO_KL = "or beta: 0.0 with --kl none where your objective has no KL"
_KL_IN_REWARD = {
    "trl": Cure("kl", "sequence-reward", _NO_KL),
    "verl": Cure("kl", "sequence-reward", "or --kl none"),
    "openrlhf": Cure("kl", "reward-to-go", "or --kl none"),
}
_KEEP_TRUNCATED = Spelling((("mask_truncated_completions", False),))
"""TRL's truncation mask off: an option of TRL's alone, which the option table has no row for
(``finetune``'s losses keep every completion)."""
_PER_TOKEN = (
    "OpenRLHF 0.11.2 weighs each token by its own wₜ, never the sequence's w = Πₜ wₜ: no "
    "setting of it is unbiased away from π_old"
)
_SUMMED = {"trl": Cure("aggregation", "constant"), "verl": Cure("aggregation", "sequence-sum")}

FIXES_KL = {
    "kl-no-gradient": "put k1 in the reward: R̃ = R − β Σₜ (ℓ^old − ℓ^ref)ₜ, before the baseline "
    "(or pass --kl none where your objective has no KL)",
    "kl-forward": "take k3 out of the loss; put k1 in the reward, R̃ = R − β Σₜ (ℓ^old − ℓ^ref)ₜ",
    "kl-token-local": "take the per-token KL out of the loss; put k1 in the reward as a whole "
    "sequence's (or as each token's reward-to-go)",
}
"""The KL mistakes' fixes in a loss (the same on completions and on episodes)."""
_EPISODES_KL = {
    "trl": "beta: 0.0 with --kl none: no TRL 1.16 key puts an episode's KL in its reward "
    "(GRPOTrainer's is per token in the loss; RLOOTrainer, k1 in the reward, has no "
    "rollout_func for episodes)",
}
"""TRL's KL fix on episodes, where RLOOTrainer (the completions' fix) cannot run."""

FIXES: dict[str, Fix] = {
    "sign": Fix("return the loss to minimise, −Σ A ℓ (or pass --objective for an objective)"),
    "scale": Fix(
        "a constant step size: divide by a constant (N, or G × groups), or pass "
        "--allow-scale to take it as a learning rate"
    ),
    "no-gradient": Fix(
        "build the loss from the logps argument, undetached (no .detach(), .item() or "
        "torch.no_grad() on its path)",
        model="build the loss from model(...).logits, undetached (no .detach(), .item() or "
        "torch.no_grad() on its path)",
        step="call loss.backward() and optimizer.step() on the optimizer handed to you "
        "(the check reads the recorded step, or the accumulated .grad)",
    ),
    "other": Fix(
        "no named mistake fits: hold your loss term by term against the unbiased RLOO "
        "(examples/check/sequence/rloo.py; episodic: examples/check/correct.py); the report's "
        "cosine and bias decomposition say which part is off",
    ),
    "missing-discount-weighting": Fix(
        "weigh step t's term by γᵗ as well as by its discounted return Gₜ",
    ),
    "data-reuse": Fix(
        "one gradient step per batch, or an importance ratio π_θ/π_old on each later step",
    ),
    "problem-dependent-scale": Fix(
        "a normaliser that depends on the problem (a per-token or per-step mean): sum the "
        "token terms and divide by a constant",
        step="a clip or a normaliser whose factor depends on the batch: sum the token terms, "
        "divide by a constant, and clip only where the norm is a safety net",
    ),
    "length-normalised": Fix(
        "sum each completion's token terms, (per_token * mask).sum(1), without the "
        "÷ mask.sum(1); divide by a constant (max_completion_length) if the step size matters",
        framework=_SUMMED,
    ),
    "std-normalised": Fix(
        "A = R − baseline without the ÷ (std + ε) (the group's or the batch's)",
        framework={
            "trl": Cure("scale", "none"),
            "verl": Cure("scale", "none"),
            "openrlhf": Cure("baseline", "rloo", "or dr_grpo"),
        },
    ),
    "batch-whitened": Fix(
        "A = R − baseline, not whitened over the batch (no ÷ batch std)",
        framework={
            "trl": Cure("scale", "none", "RLOOTrainer: normalize_advantages: false"),
            "openrlhf": Cure("baseline", "rloo"),
        },
    ),
    "batch-dependent-normaliser": Fix(
        "divide the summed token terms by a constant (N × max_completion_length, or N), not "
        "by the token count of the batch, the micro-batch or the padded width",
        framework=_SUMMED,
    ),
    "self-including-mean": Fix(
        "a leave-one-out mean, (r.sum(1, keepdim=True) − r)/(G − 1), or --allow-scale",
        framework={
            "trl": "--allow-scale (a step size (G − 1)/G)",
            "verl": Cure("baseline", "rloo", "or --allow-scale: a step size (G − 1)/G"),
        },
    ),
    "constant-normaliser": Fix(
        "a step size: keep it and pass --allow-scale, or divide by N instead of the constant",
        framework={"trl": "--allow-scale (Dr. GRPO's ÷ max_completion_length)"},
    ),
    **{name: Fix(text, framework=_KL_IN_REWARD) for name, text in FIXES_KL.items()},
    "kl-normalised": Fix(
        "sum the KL term over each completion's tokens and average over the completions, "
        "beta * (k * batch.completion_mask).sum(1).mean(), not a per-sequence or batch token mean",
    ),
    "kl-weight": Fix(
        "weigh the KL by the objective's β (batch.beta), or declare your loss's weight as the "
        "objective's with --beta",
        weight=True,
    ),
    "no-shift": Fix(
        "the logits of position t predict token t + 1: logits[:, P − 1 : −1] for the "
        "completion's tokens (or logits_to_keep = K + 1 and drop the last)",
    ),
    "prompt-in-loss": Fix(
        "sum over the completion's tokens only: multiply by batch.completion_mask (not the "
        "attention mask)",
    ),
    "padding-in-loss": Fix(
        "mask the padding after EOS: multiply by batch.completion_mask (or ids != pad_id)",
    ),
    "eos-masked": Fix(
        "mask with batch.completion_mask (it keeps the EOS token), not ids != eos_token_id",
    ),
    "truncated-masked": Fix(
        "keep the truncated completions in the loss (no mask on completions without EOS)",
        framework={"trl": _KEEP_TRUNCATED},
    ),
    "masked-tokens-in-normaliser": Fix(
        "count in the normaliser only the tokens the numerator keeps, or keep the truncated "
        "completions (no truncation mask)",
        framework={"trl": _KEEP_TRUNCATED},
    ),
    "temperature-mismatch": Fix(
        "score at the sampler's temperature: logits / batch.temperature before log_softmax",
        framework={"trl": "update TRL (it scores at temperature since its fix)"},
    ),
    "accumulation-scaled": Fix(
        "divide each micro-batch's loss by M exactly once (loss / M before backward), or "
        "normalise by the whole batch's N",
        step="divide each micro-batch's loss by M exactly once before backward()",
    ),
    "per-token-ratio": Fix(
        "use the sequence's ratio, exp(Σₜ (ℓ − ℓ^old)ₜ), detached, as each token's weight",
    ),
    "geometric-mean": Fix(
        "use the sequence's product ratio exp(Σₜ (ℓ − ℓ^old)ₜ), not its geometric mean "
        "exp(mean over t); the geometric mean is no importance weight away from ratio 1",
    ),
    "stale-old-logps": Fix(
        "compute old_logps once at θ_old, before the first optimiser step (batch.old_logps)",
    ),
    "uncorrected-sampler": Fix(
        "weigh each completion by π_old/μ = exp(Σₜ (ℓ^old − ℓ^μ)ₜ) (batch.sampler_logps)",
        framework={
            "trl": Cure("correction", "exact"),
            "openrlhf": "algo.advantage.is_correction_level: token and "
            "algo.advantage.is_correction_mode: clip (TIS; " + _PER_TOKEN + ")",
        },
    ),
    "per-token-sampler-weight": Fix(
        "weigh each completion by its whole w = exp(Σₜ (ℓ^old − ℓ^μ)ₜ), not each token by its own",
        framework={"trl": Cure("correction", "exact"), "openrlhf": _PER_TOKEN},
    ),
    "truncation-bias": Fix(
        "raise the truncation C (TRL's default 3 is rarely reached) or leave w untruncated",
        framework={
            "trl": Cure("correction", "exact"),
            "openrlhf": "a wider algo.advantage.is_correction_threshold (LOW HIGH; "
            + _PER_TOKEN
            + ")",
        },
    ),
    "masking-bias": Fix(
        "raise the mask's C, or weigh by w unmasked",
        framework={
            "trl": Cure("correction", "exact"),
            "openrlhf": "a wider algo.advantage.is_correction_threshold (LOW HIGH; "
            + _PER_TOKEN
            + ")",
        },
    ),
    "clipping-bias": Fix(
        "a PPO clip is biased wherever it cuts: take fewer steps per batch (smaller distance "
        "from θ_old), or drop the clip",
    ),
    "ratio-1-broken": Fix(
        "at ratio 1 the weight must be 1: detach the ratio's denominator, ratio = "
        "exp(ℓ − ℓ^old) with ℓ^old detached; a cap no lower than 1",
    ),
    "cispo-relative-cap": Fix("widen the cap, or use the uncapped product ratio"),
    "cispo-absolute-cap": Fix("set epsilon_high ≥ the largest ratio (TRL: epsilon_high)"),
    "sampler-support": Fix(
        "sample without top-k/top-p/min-p for the gradient's batches: no weight brings back "
        "what the sampler never draws",
    ),
    "sampler-logps": Fix(
        "score the policy's own log-probs (untruncated softmax), not the cut sampler's",
    ),
    "gradient-clipped": Fix(
        "clip_grad_norm_ cut this problem's gradient: raise max_norm above the norms the "
        "report gives, or accept a clipped (biased) step",
        step="raise max_norm in clip_grad_norm_ above the norms the report gives",
    ),
    "world-tokens-trained": Fix(
        "multiply the token terms by batch.completion_mask (1 on the model's tokens only): the "
        "world's tokens (tool results, observations, role headers) are context, not the policy's",
        framework={
            "trl": "return env_mask from your rollout_func, 1 on the model's tokens and 0 on "
            "the world's (TRL multiplies its loss mask by it)"
        },
    ),
    "first-reply-uncredited": Fix(
        "credit the first reply with its reward-to-go G₁ = Σⱼ rⱼ (batch.turn_rewards summed "
        "from column 0 on), not a return zeroed before the world's answer, and keep its tokens "
        "in the mask",
    ),
    "later-rewards-withheld": Fix(
        "weight turn k's tokens by its reward-to-go Gₖ = Σ_{j ≥ k} rⱼ: a reply earns the rewards "
        "of the turns it leads to, not its own turn's alone",
    ),
    "batch-mean-baseline": Fix(
        "take each sample's baseline from its own group's others (leave-one-out), not from the "
        "batch's mean, which holds the sample's own reward and other prompts'",
    ),
    "per-token-weight": Fix(
        "weight every token of a reply by the reply's one credit: no factor of the token's "
        "own probability (π, a ratio, a cap or a floor) where the batch is on-policy",
    ),
    "wrong-entry": Fix(
        "gather the log-prob of the token sampled at each position: "
        "log_softmax(logits[:, t]).gather(-1, input_ids[:, t + 1])",
    ),
    "reads-whole-distribution": Fix(
        "an entropy or a KL over the whole vocabulary is another objective's gradient: take it "
        "out, or declare it (a KL in the objective, --beta)",
    ),
    "ratio-floor": Fix(
        "no floor under the ratio: weigh each reply by its product ratio exp(Σₜ (ℓ − ℓ^old)ₜ), "
        "detached; a floor keeps a weight on tokens the new policy has made unlikely",
    ),
    "sampler-wrong-entry": Fix(
        "read μ's log-prob of the sampled token (batch.sampler_logps, or the top-k entry whose "
        "id is the sampled token's), not the sampler's most probable entry",
    ),
    "credit-unexplained": Fix(
        "the weights fit none of the audit's relations to the exact credit: hold your "
        "advantage term by term against the reward-to-go less the group's leave-one-out mean",
    ),
    "model-tokens-after-answer-dropped": Fix(
        "keep every reply in the loss: mask with batch.completion_mask, the turns after the "
        "world's first answer included",
    ),
    "turns-weighted-by-whole-return": Fix(
        "weight turn k's tokens by its reward-to-go Gₖ = Σ_{j ≥ k} rⱼ (batch.turn_rewards "
        "summed from column k on, its baseline from the group's Gₖ), not by the whole return",
        framework={
            "trl": "no key: TRL 1.16 gives every token of a completion its one advantage; "
            "alone it changes no mean, so remove the normalisers beside it (loss_type: "
            "dr_grpo, scale_rewards: none)"
        },
    ),
    **{
        f"episodes:{name}": Fix(FIXES_KL[name], framework=_EPISODES_KL)
        for name in ("kl-no-gradient", "kl-forward", "kl-token-local")
    },
    "episodes:other": Fix(
        "no named mistake fits: hold your loss term by term against the episodes' correct "
        "loss (examples/check/episodes.py:reward_to_go: the model's tokens alone, turn k "
        "weighted by its reward-to-go less the group's); the report's cosine says how far off",
    ),
}
"""Diagnosis → its fix (see :class:`Fix`); ``FAMILY:name``: that family's own, where the
diagnosis's general fix would point elsewhere (another family's examples)."""


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
    finding: Diagnosis | None, c: float | None, *, G: int | None = None, M: int = 1, R: int = 1
) -> str | None:
    """A fitted constant said as its likely cause, with the formula; None where none fits.

    The constant is the finding's own (the c of ``V × c``), else ``c``, the fitted scale
    (``accumulation-scaled`` is named from the scale).

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
        p.constant = constant_in_words(
            p.finding, p.scale, G=G, M=report.micro_batches, R=report.world_size
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
