r"""What to change for each name the check gives: the line of a loss, or a framework's key.

One row per diagnosis (:data:`FIXES`): the change that removes it from a loss written in the
``logps`` form (the line to change: the normaliser, the mask, the KL's place), where the
``model`` and ``step`` forms need another word, and, under ``--framework``, the configuration
key and value that remove it (``loss_type: dr_grpo``, ``scale_rewards: none``, ``beta: …``).
Each row's fix is held by a test that applies it to an example showing the name and finds the
check passing (tests/test_check_fixes.py; TRL's keys in tests/test_check_frameworks_trl.py,
verl's and OpenRLHF's in tests/test_check_fixes_peers.py).

A fitted constant is said in words where its cause is known (:func:`constant_in_words`):

    std-normalised × c, c = √(G/(G − 1))   a population standard deviation (÷ G),
    accumulation-scaled, c = M             the micro-batches' losses never divided by M,
    accumulation-scaled, c = 1/M           divided by M once too often.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Fix:
    """The change that removes one diagnosis.

    Attributes:
        loss: the line to change in a ``logps``-form loss (the other forms too, unless given).
        model: the ``model`` and ``step`` forms' fix, where the log-probs are the user's own.
        step: the ``step`` form's own fix (a training step's line), where it differs.
        framework: ``--framework`` name → the configuration key and value that remove it.
    """

    loss: str
    model: str | None = None
    step: str | None = None
    framework: dict[str, str] | None = None


_RLOO_KL = (
    "trainer: rloo with beta: β (RLOOTrainer puts k1 in the reward), or beta: 0.0 with "
    "--kl none where your objective has no KL"
)

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
        framework={
            "trl": "loss_type: dr_grpo",
            "verl": "actor.loss_agg_mode: seq-mean-token-sum",
        },
    ),
    "std-normalised": Fix(
        "A = R − baseline without the ÷ (std + ε) (the group's or the batch's)",
        framework={
            "trl": "scale_rewards: none",
            "verl": "algorithm.norm_adv_by_std_in_grpo: false",
            "openrlhf": "algo.advantage.estimator: rloo (or dr_grpo)",
        },
    ),
    "batch-whitened": Fix(
        "A = R − baseline, not whitened over the batch (no ÷ batch std)",
        framework={
            "trl": "scale_rewards: none (RLOOTrainer: normalize_advantages: false)",
            "openrlhf": "algo.advantage.estimator: rloo",
        },
    ),
    "batch-dependent-normaliser": Fix(
        "divide the summed token terms by a constant (N × max_completion_length, or N), not "
        "by the token count of the batch, the micro-batch or the padded width",
        framework={
            "trl": "loss_type: dr_grpo",
            "verl": "actor.loss_agg_mode: seq-mean-token-sum",
        },
    ),
    "self-including-mean": Fix(
        "a leave-one-out mean, (r.sum(1, keepdim=True) − r)/(G − 1), or --allow-scale",
        framework={
            "trl": "--allow-scale (a step size (G − 1)/G)",
            "verl": "algorithm.adv_estimator: rloo (or --allow-scale: a step size (G − 1)/G)",
        },
    ),
    "constant-normaliser": Fix(
        "a step size: keep it and pass --allow-scale, or divide by N instead of the constant",
        framework={"trl": "--allow-scale (Dr. GRPO's ÷ max_completion_length)"},
    ),
    "kl-no-gradient": Fix(
        "put k1 in the reward: R̃ = R − β Σₜ (ℓ^old − ℓ^ref)ₜ, before the baseline (or pass "
        "--kl none where your objective has no KL)",
        framework={
            "trl": _RLOO_KL,
            "verl": "algorithm.use_kl_in_reward: true and algorithm.kl_ctrl.kl_coef: β (or --kl "
            "none)",
            "openrlhf": "algo.kl.init_coef: β and algo.kl.use_loss: false (k1 in the reward; or "
            "--kl none)",
        },
    ),
    "kl-forward": Fix(
        "take k3 out of the loss; put k1 in the reward, R̃ = R − β Σₜ (ℓ^old − ℓ^ref)ₜ",
        framework={
            "trl": _RLOO_KL,
            "verl": "algorithm.use_kl_in_reward: true and algorithm.kl_ctrl.kl_coef: β and "
            "actor.use_kl_loss: false",
            "openrlhf": "algo.kl.use_loss: false and algo.kl.estimator: k1 (k1 in the reward)",
        },
    ),
    "kl-token-local": Fix(
        "take the per-token KL out of the loss; put k1 in the reward as a whole sequence's "
        "(or as each token's reward-to-go)",
        framework={
            "trl": _RLOO_KL,
            "verl": "algorithm.use_kl_in_reward: true and algorithm.kl_ctrl.kl_coef: β and "
            "actor.use_kl_loss: false",
            "openrlhf": "algo.kl.use_loss: false and algo.kl.estimator: k1 (k1 in the reward)",
        },
    ),
    "kl-weight": Fix(
        "weigh the KL by the objective's β (batch.beta), or declare your loss's weight as the "
        "objective's with --beta",
        framework={
            "trl": "beta: the objective's β, or --beta with the configuration's to declare it",
            "verl": "algorithm.kl_ctrl.kl_coef: the objective's β (actor.kl_loss_coef with "
            "actor.use_kl_loss), or --beta with the configuration's",
            "openrlhf": "algo.kl.init_coef: the objective's β, or --beta with the configuration's",
        },
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
        framework={"trl": "mask_truncated_completions: false"},
    ),
    "masked-tokens-in-normaliser": Fix(
        "count in the normaliser only the tokens the numerator keeps, or keep the truncated "
        "completions (no truncation mask)",
        framework={"trl": "mask_truncated_completions: false"},
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
    ),
    "truncation-bias": Fix(
        "raise the truncation C (TRL's default 3 is rarely reached) or leave w untruncated",
    ),
    "masking-bias": Fix("raise the mask's C, or weigh by w unmasked"),
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
    ),
    "model-tokens-after-answer-dropped": Fix(
        "keep every reply in the loss: mask with batch.completion_mask, the turns after the "
        "world's first answer included",
    ),
    "turns-weighted-by-whole-return": Fix(
        "weight turn k's tokens by its reward-to-go Gₖ = Σ_{j ≥ k} rⱼ (batch.turn_rewards "
        "summed from column k on, its baseline from the group's Gₖ), not by the whole return",
    ),
    "episodes:other": Fix(
        "no named mistake fits: hold your loss term by term against the episodes' correct "
        "loss (examples/check/episodes.py:reward_to_go: the model's tokens alone, turn k "
        "weighted by its reward-to-go less the group's); the report's cosine says how far off",
    ),
}
"""Diagnosis → its fix (see :class:`Fix`); ``FAMILY:name``: that family's own, where the
diagnosis's general fix would point elsewhere (another family's examples)."""


def fix(
    name: str, form: str = "logps", framework: str | None = None, family: str | None = None
) -> str | None:
    """The fix of one diagnosis part for ``form`` (or ``framework``), or None where none is known.

    Under a framework, its configuration key where the row has one, else the loss's line; a
    ``family``'s own row (``FAMILY:name``) before the general one.

    >>> fix("std-normalised", framework="trl")
    'scale_rewards: none'
    """
    row = FIXES.get(f"{family}:{name}") or FIXES.get(name)
    if row is None:
        return None
    if framework is not None and row.framework and framework in row.framework:
        return row.framework[framework]
    if form == "step" and row.step:
        return row.step
    if form in ("model", "step") and row.model:
        return row.model
    return row.loss


def parts(diagnosis: str) -> list[str]:
    """The names in a diagnosis: ``"a, b × 1.1"`` → ``["a", "b"]`` (a part's own parentheses kept).

    >>> parts("kl-weight (config 0.04, objective β = 0), std-normalised × 1.1")
    ['kl-weight', 'std-normalised']
    """
    name = diagnosis.partition(" × ")[0]
    return [re.sub(r"\s*\(.*\)$", "", p) for p in re.split(r",\s(?![^(]*\))", name) if p]


def fixes_for(
    diagnosis: str | None, form: str, framework: str | None = None, family: str | None = None
) -> list[str]:
    """Each part's fix, as ``name: fix`` (the parts without one left out)."""
    if not diagnosis:
        return []
    out = []
    for name in dict.fromkeys(parts(diagnosis)):
        said = fix(name, form, framework, family)
        if said:
            out.append(f"{name}: {said}")
    return out


CONSTANT_TOL = 0.03
"""How close (relative) a fitted constant must be to a known cause's to be said as it."""


def constant_in_words(
    diagnosis: str | None, c: float | None, *, G: int | None = None, M: int = 1, R: int = 1
) -> str | None:
    """A fitted constant said as its likely cause, with the formula; None where none fits.

    ``c`` is the constant: the ``× c`` of ``V × c``, else the fitted scale (``accumulation-
    scaled`` is named from the scale).

    >>> constant_in_words("std-normalised × 1.2", None, G=4)  # doctest: +ELLIPSIS
    'c = √(G/(G − 1)) = 1.155 at G = 4: a population standard deviation (÷ G, ...'
    """
    if not diagnosis:
        return None
    times = diagnosis.partition(" × ")[2]
    if times:
        try:
            c = float(times)
        except ValueError:
            return None
    if c is None or c <= 0:
        return None
    named = parts(diagnosis)
    tol = 0.06 if times else CONSTANT_TOL  # a constant of "V × c" is said to two digits

    def near(want: float) -> bool:
        return abs(c / want - 1.0) <= tol

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
        if p.verdict in ("unbiased", "error"):
            p.fix, p.constant = None, None
            continue
        p.fix = fixes_for(p.diagnosis, report.form, report.framework, report.family) or None
        G = (p.details or {}).get("group_size")
        p.constant = constant_in_words(
            p.diagnosis, p.scale, G=G, M=report.micro_batches, R=report.world_size
        )
    return report


__all__ = ["FIXES", "Fix", "attach_fixes", "constant_in_words", "fix", "fixes_for", "parts"]
