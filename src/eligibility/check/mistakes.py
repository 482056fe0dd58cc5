r"""Every mistake ``eligibility check`` can name: one declaration each, read by every part.

A :class:`Mistake` is a name the report can print (``std-normalised``), what it means, the
change that removes it in each form of the user's function (``logps``, ``model``, ``step``) and
under each framework (a row of the option table, :mod:`eligibility.torch.options`, whose
framework column holds the keys: the keys are read from there, never written here), whether
it moves E[ĝ] off ∇J, and which parts of the check give it (the engine, the credit audit, a
family's named variants). The report's explanations (:mod:`eligibility.check.report`), the
families' ``diagnoses``, the fixes (:mod:`eligibility.check.fixes`) and the table of
``docs/check-mistakes.md`` are views of :data:`MISTAKES`; a test walks it (every name any part
of the check can emit is here; each has a meaning and a fix, and says where the fix is held by
a test or why none is).

    >>> MISTAKES["std-normalised"].moves_mean
    True
    >>> named("no-such-mistake")
    Traceback (most recent call last):
    ...
    ValueError: no mistake is named 'no-such-mistake' in eligibility.check.mistakes
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eligibility.torch.options import Spelling

ENGINE, AUDIT = "engine", "audit"
"""Who gives a name besides the families: the engine's own findings (a sign, a scale, no
gradient), and the credit audit's (:mod:`eligibility.check.audit`)."""

FINDERS = (ENGINE, AUDIT, "episodic", "sequence", "off-policy", "episodes")
"""The parts of the check that give names: the engine, the audit, and each family by its key."""


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
    """The change that removes one mistake.

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


@dataclass(frozen=True)
class Mistake:
    """One name the check gives.

    Attributes:
        name: the name the report prints.
        meaning: what it means, in the report's words.
        fix: the change that removes it (:class:`Fix`).
        moves_mean: whether it moves E[ĝ] off ∇J (a bias or a constant); False where it adds
            terms of mean zero only (more variance, the same mean: ``excess variance``).
        found_by: the parts that give it (:data:`FINDERS`).
        said: a family's (by its key) or a form's (``step``) own words, where the meaning's
            would not fit there.
        fixed: a family's own fix, where the general one would point to another family's
            examples.
        held: the test module whose cases apply the fix to a loss showing the name and find
            the name gone; empty where none does, and ``unheld`` says why.
        unheld: why no test applies the fix (empty where ``held`` names one).
        coarser: the names the credit audit gives this mistake's structure where it reads
            less of it: a batch's σ read as one factor a batch (``batch-dependent-normaliser``
            for ``std-normalised``), a divisor that varies by batch read on batches where it
            did not (``constant-normaliser``). Beside a row of the table that names this
            mistake, and where the audit does not give this name itself, such a name of the
            audit's is its reading of the row's mistake, not another one
            (:func:`~eligibility.check.audit.judge.one_reading`).
    """

    name: str
    meaning: str
    fix: Fix
    moves_mean: bool = True
    found_by: tuple[str, ...] = ()
    said: dict[str, str] = field(default_factory=dict)
    fixed: dict[str, Fix] = field(default_factory=dict)
    held: str = ""
    unheld: str = ""
    coarser: tuple[str, ...] = ()

    def meaning_in(self, family: str | None = None, form: str | None = None) -> str:
        """The meaning as ``family``'s report in ``form`` says it."""
        return self.said.get(form or "", self.said.get(family or "", self.meaning))


_FIXES_TEST = "tests/test_check_fixes.py"
_AUDIT_TEST = "tests/test_check_audit.py"
_DETACHED_TEST = "tests/test_check_detached.py"
_FIXED_TEST = "tests/test_check_audit_fixes.py"
_NO_KL = "or beta: 0.0 with --kl none where your objective has no KL"
_KL_IN_REWARD: dict[str, Cure | Spelling | str] = {
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
_WIDER_CUT = "a wider algo.advantage.is_correction_threshold (LOW HIGH; " + _PER_TOKEN + ")"
_SUMMED: dict[str, Cure | Spelling | str] = {
    "trl": Cure("aggregation", "constant"),
    "verl": Cure("aggregation", "sequence-sum"),
}
_EPISODES_KL: dict[str, Cure | Spelling | str] = {
    "trl": "beta: 0.0 with --kl none: no TRL 1.16 key puts an episode's KL in its reward "
    "(GRPOTrainer's is per token in the loss; RLOOTrainer, k1 in the reward, has no "
    "rollout_func for episodes)",
}
"""TRL's KL fix on episodes, where RLOOTrainer (the completions' fix) cannot run."""
_K1_TO_GO = (
    "put k1 in the reward: R̃ = R − β Σₜ (ℓ^old − ℓ^ref)ₜ, before the baseline (the KL's exact "
    "gradient is each token's log-ratio to go)"
)
_SEQ = ("sequence",)
_OFF = ("off-policy",)
_EPS = ("episodes",)


def _kl(name: str, meaning: str, loss: str, found_by: tuple[str, ...] = ()) -> Mistake:
    """A KL mistake: its fix the same on completions and on episodes, TRL's apart there."""
    return Mistake(
        name,
        meaning,
        Fix(loss, framework=_KL_IN_REWARD),
        found_by=("sequence", "episodes", *found_by),
        fixed={"episodes": Fix(loss, framework=_EPISODES_KL)},
        held=_FIXES_TEST,
    )


REGISTRY: tuple[Mistake, ...] = (
    # -- the engine's own findings ---------------------------------------------------------------
    Mistake(
        "sign",
        "E[ĝ] = c ∇J with c < 0: the loss has the wrong sign (descends J)",
        Fix("return the loss to minimise, −Σ A ℓ (or pass --objective for an objective)"),
        found_by=(ENGINE, AUDIT),
        held=_FIXES_TEST,
    ),
    Mistake(
        "scale",
        "a constant factor (a sum instead of a mean, say)",
        Fix(
            "a constant step size: divide by a constant (N, or G × groups), or pass "
            "--allow-scale to take it as a learning rate"
        ),
        found_by=(ENGINE, AUDIT),
        held=_FIXES_TEST,
    ),
    Mistake(
        "other",
        "no row of the table: E[ĝ] ≠ ∇J, and no known mistake is your estimator (by its "
        "exact mean, or batch by batch on the batches your loss saw; a mean within noise of "
        "one is not enough); how far from ∇J: ‖bias‖ beside the noise, and the cosine",
        Fix(
            "no named mistake fits: hold your loss term by term against the unbiased RLOO "
            "(examples/check/sequence/rloo.py; episodic: examples/check/correct.py); the "
            "report's cosine and bias decomposition say which part is off",
        ),
        found_by=(ENGINE,),
        fixed={
            "episodes": Fix(
                "no named mistake fits: hold your loss term by term against the episodes' "
                "correct loss (examples/check/episodes.py:reward_to_go: the model's tokens "
                "alone, turn k weighted by its reward-to-go less the group's); the report's "
                "cosine says how far off",
            )
        },
        unheld="no change is known to remove an unnamed bias: the fix points to a reference "
        "to hold the loss against",
    ),
    Mistake(
        "no-gradient",
        "a detached tensor, or a loss built from something else",
        Fix(
            "build the loss from the logps argument, undetached (no .detach(), .item() or "
            "torch.no_grad() on its path)",
            model="build the loss from model(...).logits, undetached (no .detach(), .item() or "
            "torch.no_grad() on its path)",
            step="call loss.backward() and optimizer.step() on the optimizer handed to you "
            "(the check reads the recorded step, or the accumulated .grad)",
        ),
        found_by=(ENGINE,),
        said={
            "step": "your step left no update to read: it called neither optimizer.step() nor "
            "backward() on the policy's parameters (or every gradient it left was zero)",
        },
        unheld="the fix reattaches the loss to θ: any passing example is the fixed loss "
        "(tests/test_check.py holds the detached losses)",
    ),
    Mistake(
        "problem-dependent-scale",
        "E[ĝ] = c ∇J on some problems, but c differs between them (see the scale column): a "
        "bias, not a step size",
        Fix(
            "a normaliser that depends on the problem (a per-token or per-step mean): sum the "
            "token terms and divide by a constant",
            step="a clip or a normaliser whose factor depends on the batch: sum the token "
            "terms, divide by a constant, and clip only where the norm is a safety net",
        ),
        found_by=(ENGINE,),
        unheld="named across problems where no row fits: the fixes of the rows that do "
        "(length-normalised, batch-dependent-normaliser) are held",
    ),
    Mistake(
        "gradient-clipped",
        "the step's clip_grad_norm_ bound on this problem: each batch's gradient rescaled by "
        "max_norm/‖g‖, a factor that depends on the batch (a bias)",
        Fix(
            "clip_grad_norm_ cut this problem's gradient: raise max_norm above the norms the "
            "report gives, or accept a clipped (biased) step",
            step="raise max_norm in clip_grad_norm_ above the norms the report gives",
        ),
        found_by=(ENGINE,),
        held=_FIXES_TEST,
    ),
    # -- the episodic family ---------------------------------------------------------------------
    Mistake(
        "missing-discount-weighting",
        "the γᵗ factor is dropped: E[ĝ] uses the undiscounted visitation of the states",
        Fix("weigh step t's term by γᵗ as well as by its discounted return Gₜ"),
        found_by=("episodic",),
        unheld="the episodic examples' correct loss (examples/check/correct.py) is the fixed "
        "one; tests/test_check.py holds both apart",
    ),
    Mistake(
        "data-reuse",
        "several gradient steps on one batch without an importance ratio: from the second "
        "step on, the gradient is taken at θ' ≠ θ on episodes drawn at θ",
        Fix("one gradient step per batch, or an importance ratio π_θ/π_old on each later step"),
        found_by=("episodic",),
        unheld="one step per batch is the correct loss itself (tests/test_check_reuse.py "
        "holds the reused and the single step apart)",
    ),
    # -- the option table's mistakes (sequence, off-policy, episodes) ---------------------------
    Mistake(
        "length-normalised",
        "each sequence divided by its length: E[ĝ] is the gradient of the reshaped reward "
        "(R − b)/L (long wrong answers are penalised less)",
        Fix(
            "sum each completion's token terms, (per_token * mask).sum(1), without the "
            "÷ mask.sum(1); divide by a constant (max_completion_length) if the step size "
            "matters",
            framework=_SUMMED,
        ),
        found_by=(*_SEQ, *_OFF, *_EPS, AUDIT),
        said={
            "episodes": "each episode's token terms divided by its own number of tokens: an "
            "episode's weight depends on its length (sum them, divide by a constant)",
        },
        held=_FIXES_TEST,
    ),
    Mistake(
        "std-normalised",
        "advantages divided by a std of the rewards (the group's: each prompt reweighted by "
        "1/σ̂, which depends on the sample's own reward; or the batch's)",
        Fix(
            "A = R − baseline without the ÷ (std + ε) (the group's or the batch's)",
            framework={
                "trl": Cure("scale", "none"),
                "verl": Cure("scale", "none"),
                "openrlhf": Cure("baseline", "rloo", "or dr_grpo"),
            },
        ),
        found_by=(*_SEQ, *_OFF, *_EPS, AUDIT),
        held=_FIXES_TEST,
        coarser=("batch-dependent-normaliser",),
    ),
    Mistake(
        "batch-whitened",
        "advantages whitened over the batch (REINFORCE++): biased at this batch size",
        Fix(
            "A = R − baseline, not whitened over the batch (no ÷ batch std)",
            framework={
                "trl": Cure("scale", "none", "RLOOTrainer: normalize_advantages: false"),
                "openrlhf": Cure("baseline", "rloo"),
            },
        ),
        found_by=(*_SEQ, AUDIT),
        held=_FIXES_TEST,
        coarser=("batch-dependent-normaliser",),
    ),
    Mistake(
        "batch-dependent-normaliser",
        "a token mean counted over the batch, a micro-batch or the padded width: a random "
        "factor correlated with the lengths",
        Fix(
            "divide the summed token terms by a constant (N × max_completion_length, or N), "
            "not by the token count of the batch, the micro-batch or the padded width",
            framework=_SUMMED,
        ),
        found_by=(*_SEQ, *_OFF, *_EPS, AUDIT),
        held=_FIXES_TEST,
        coarser=("constant-normaliser",),
    ),
    Mistake(
        "self-including-mean",
        "c = (G − 1)/G on the reward's part: a group mean that includes the sample itself (a "
        "step size, --allow-scale; a bias where a KL term outside the reward is left "
        "unscaled)",
        Fix(
            "a leave-one-out mean, (r.sum(1, keepdim=True) − r)/(G − 1), or --allow-scale",
            framework={
                "trl": "--allow-scale (a step size (G − 1)/G)",
                "verl": Cure("baseline", "rloo", "or --allow-scale: a step size (G − 1)/G"),
            },
        ),
        found_by=(*_SEQ, AUDIT),
        held=_FIXES_TEST,
    ),
    Mistake(
        "constant-normaliser",
        "c = 1/T or N/T: a constant normaliser such as Dr. GRPO's max_completion_length (a "
        "step size; --allow-scale)",
        Fix(
            "a step size: keep it and pass --allow-scale, or divide by N instead of the constant",
            framework={"trl": "--allow-scale (Dr. GRPO's ÷ max_completion_length)"},
        ),
        found_by=(*_SEQ, ENGINE, AUDIT),
        held=_FIXES_TEST,
    ),
    _kl(
        "kl-no-gradient",
        "the KL term contributes no expected gradient (k1 in the loss, or no KL): put k1 in "
        "the reward",
        "put k1 in the reward: R̃ = R − β Σₜ (ℓ^old − ℓ^ref)ₜ, before the baseline (or pass "
        "--kl none where your objective has no KL)",
        (AUDIT,),
    ),
    _kl(
        "kl-forward",
        "k3 in the loss: its gradient is the forward KL(π_ref ‖ π_θ)'s",
        "take k3 out of the loss; put k1 in the reward, R̃ = R − β Σₜ (ℓ^old − ℓ^ref)ₜ",
        (AUDIT,),
    ),
    _kl(
        "kl-token-local",
        "a per-token KL in the loss (k2, or k1 as a per-token reward without reward-to-go): "
        "misses each token's effect on later tokens' KL",
        "take the per-token KL out of the loss; put k1 in the reward as a whole sequence's "
        "(or as each token's reward-to-go)",
        (AUDIT,),
    ),
    Mistake(
        "kl-reward-estimate",
        "the credit audit: the KL taken off each reply's reward as the sum of k2 or k3 over "
        "its tokens: REINFORCE on that reward is not the KL's gradient (k2's mean is not the "
        "KL; k3's own gradient, which the reward's score leaves out, is not 0 in mean)",
        Fix(
            "take k1 off the reward, R̃ = R − β Σₜ (ℓ^old − ℓ^ref)ₜ: its score-function "
            "gradient is the KL's",
        ),
        found_by=(AUDIT,),
        held=_FIXED_TEST,
    ),
    Mistake(
        "kl-normalised",
        "the KL term added to the loss apart from the policy term and divided by each "
        "completion's length or by the batch's token count: each sequence's KL weighed by a "
        "factor that depends on the sample; sum it over each completion's tokens",
        Fix(
            "sum the KL term over each completion's tokens and average over the completions, "
            "beta * (k * batch.completion_mask).sum(1).mean(), not a per-sequence or batch "
            "token mean",
        ),
        found_by=(*_SEQ, AUDIT),
        unheld="tests/test_check_sequence_kl_apart.py holds the summed KL term (the fix) "
        "passing beside the normalised ones, not as a before-and-after case",
    ),
    Mistake(
        "kl-weight",
        "the loss weighs its KL term by another β than the objective's (--beta, or the "
        "problem's): the gradient of another objective",
        Fix(
            "weigh the KL by the objective's β (batch.beta), or declare your loss's weight as "
            "the objective's with --beta",
            weight=True,
        ),
        found_by=(*_SEQ, AUDIT),
        held=_FIXES_TEST,
    ),
    Mistake(
        "no-shift",
        "the log-probs read from the logits at the token's own position: logits[:, t] "
        "predicts input_ids[:, t + 1]",
        Fix(
            "the logits of position t predict token t + 1: logits[:, P − 1 : −1] for the "
            "completion's tokens (or logits_to_keep = K + 1 and drop the last)",
        ),
        found_by=(*_SEQ, AUDIT),
        held=_FIXES_TEST,
    ),
    Mistake(
        "prompt-in-loss",
        "the prompt's tokens are summed in the loss",
        Fix(
            "sum over the completion's tokens only: multiply by batch.completion_mask (not the "
            "attention mask)",
        ),
        found_by=(*_SEQ, AUDIT),
        held=_FIXES_TEST,
    ),
    Mistake(
        "padding-in-loss",
        "the padding after EOS is summed in the loss (mask it)",
        Fix("mask the padding after EOS: multiply by batch.completion_mask (or ids != pad_id)"),
        found_by=(*_SEQ, AUDIT),
        held=_FIXES_TEST,
    ),
    Mistake(
        "eos-masked",
        "the EOS token dropped from the loss (a mask written ids != eos_token_id, or ids != "
        "pad_token_id where the pad is EOS): the decision to stop gets no gradient; mask with "
        "batch.completion_mask or ids != batch.pad_id",
        Fix("mask with batch.completion_mask (it keeps the EOS token), not ids != eos_token_id"),
        found_by=(*_SEQ, AUDIT),
        held=_FIXES_TEST,
    ),
    Mistake(
        "truncated-masked",
        "the truncated completions (no EOS within T) dropped from the loss (TRL's "
        "mask_truncated_completions): a completion cut at T gets no gradient, a weight that "
        "depends on the sample",
        Fix(
            "keep the truncated completions in the loss (no mask on completions without EOS)",
            framework={"trl": _KEEP_TRUNCATED},
        ),
        found_by=(*_SEQ, *_EPS, AUDIT),
        said={
            "episodes": "the episodes whose last reply was cut at T (no EOS) dropped from the "
            "loss (TRL's mask_truncated_completions): a weight that depends on the sample",
        },
        held=_FIXES_TEST,
    ),
    Mistake(
        "masked-tokens-in-normaliser",
        "a token-mean denominator that counts tokens the numerator dropped: truncated "
        "completions masked out of the loss (TRL's mask_truncated_completions) but still "
        "counted by the normaliser (TRL ≤ 1.8)",
        Fix(
            "count in the normaliser only the tokens the numerator keeps, or keep the "
            "truncated completions (no truncation mask)",
            framework={"trl": _KEEP_TRUNCATED},
        ),
        found_by=_SEQ,
        held=_FIXES_TEST,
    ),
    Mistake(
        "temperature-mismatch",
        "log-probs scored at another temperature than the sampler's: the logits not divided "
        "by batch.temperature (TRL before its fix; nanoGRPO and simple_GRPO sample at 0.9 and "
        "score at 1.0)",
        Fix(
            "score at the sampler's temperature: logits / batch.temperature before log_softmax",
            framework={"trl": "update TRL (it scores at temperature since its fix)"},
        ),
        found_by=_SEQ,
        held=_FIXES_TEST,
    ),
    Mistake(
        "accumulation-scaled",
        "c = M or 1/M with M micro-batches: the accumulated losses divided by the number of "
        "micro-batches never (nanoGRPO backpropagates each micro-group undivided) or once too "
        "often (ms-swift's DAPO/CISPO divided by the accumulation steps a second time); "
        "--allow-scale takes it as a step size",
        Fix(
            "divide each micro-batch's loss by M exactly once (loss / M before backward), or "
            "normalise by the whole batch's N",
            step="divide each micro-batch's loss by M exactly once before backward()",
        ),
        found_by=(*_SEQ, AUDIT),
        held=_FIXES_TEST,
    ),
    # -- the off-policy family -------------------------------------------------------------------
    Mistake(
        "ratio-1-broken",
        "at ratio 1 the loss is not REINFORCE: a cap below 1 (TRL's CISPO with epsilon_high "
        "unset caps at 0.2), a swapped ratio π_old/π_θ, or an importance weight that is not "
        "detached",
        Fix(
            "at ratio 1 the weight must be 1: detach the ratio's denominator, ratio = "
            "exp(ℓ − ℓ^old) with ℓ^old detached; a cap no lower than 1",
        ),
        found_by=(*_OFF, AUDIT),
        held=_FIXES_TEST,
    ),
    Mistake(
        "per-token-ratio",
        "a per-token ratio rₜ where the sequence's Π rₜ belongs: drops the prefix's and the "
        "suffix's ratios",
        Fix("use the sequence's ratio, exp(Σₜ (ℓ − ℓ^old)ₜ), detached, as each token's weight"),
        found_by=(*_OFF, AUDIT),
        held=_FIXES_TEST,
    ),
    Mistake(
        "geometric-mean",
        "the geometric mean s^{1/L} of the ratios (GSPO): length-fair, not an importance weight",
        Fix(
            "use the sequence's product ratio exp(Σₜ (ℓ − ℓ^old)ₜ), not its geometric mean "
            "exp(mean over t); the geometric mean is no importance weight away from ratio 1",
        ),
        found_by=(*_OFF, AUDIT),
        held=_FIXES_TEST,
    ),
    Mistake(
        "stale-old-logps",
        "the ratio is identically 1 although θ ≠ θ_old: old_logps taken at θ (recomputed "
        "after the first step), not θ_old's",
        Fix("compute old_logps once at θ_old, before the first optimiser step (batch.old_logps)"),
        found_by=(*_OFF, AUDIT),
        held=_FIXES_TEST,
    ),
    Mistake(
        "uncorrected-sampler",
        "no π_old/μ weight although the sampler μ differs from π_old",
        Fix(
            "weigh each completion by π_old/μ = exp(Σₜ (ℓ^old − ℓ^μ)ₜ) (batch.sampler_logps)",
            framework={
                "trl": Cure("correction", "exact"),
                "openrlhf": "algo.advantage.is_correction_level: token and "
                "algo.advantage.is_correction_mode: clip (TIS; " + _PER_TOKEN + ")",
            },
        ),
        found_by=(*_OFF, AUDIT),
        held=_FIXES_TEST,
    ),
    Mistake(
        "sampler-support",
        "the sampler is cut (--top-k, --top-p, --min-p): the policy's completions it never "
        "draws get no gradient, and no importance weight (TRL's token/sequence truncate/mask "
        "corrections included) brings them back; the report says which gradient the mean "
        "estimates, the policy's ∇J or the cut sampler's own ∇J_μ",
        Fix(
            "sample without top-k/top-p/min-p for the gradient's batches: no weight brings "
            "back what the sampler never draws",
        ),
        found_by=_OFF,
        unheld="the fix is in the sampler's settings, not the loss: an uncut sampler is "
        "every other off-policy case",
    ),
    Mistake(
        "sampler-logps",
        "the cut sampler's renormalised log-probs ln μ = ln π − ln S scored as the policy's: "
        "the gradient of the sampler's own objective ∇J_μ, not the policy's",
        Fix("score the policy's own log-probs (untruncated softmax), not the cut sampler's"),
        found_by=_OFF,
        coarser=("reads-whole-distribution",),  # ln S reads the nucleus's logits
        unheld="the fixed loss scores the policy's log-probs, as every off-policy case does; "
        "no before-and-after case is run",
    ),
    Mistake(
        "truncation-bias",
        "the sampler weight truncated at C (TIS): −E_μ[(w − C)₊ g]",
        Fix(
            "raise the truncation C (TRL's default 3 is rarely reached) or leave w untruncated",
            framework={"trl": Cure("correction", "exact"), "openrlhf": _WIDER_CUT},
        ),
        found_by=(*_OFF, AUDIT),
        held=_FIXES_TEST,
    ),
    Mistake(
        "per-token-sampler-weight",
        "each token weighed by its own π_old/μ, not by the sequence's Πₜ: the other tokens' "
        "factors dropped (TRL's token_* modes where the cap never binds)",
        Fix(
            "weigh each completion by its whole w = exp(Σₜ (ℓ^old − ℓ^μ)ₜ), not each token by "
            "its own",
            framework={"trl": Cure("correction", "exact"), "openrlhf": _PER_TOKEN},
        ),
        found_by=(*_OFF, AUDIT),
        unheld="held through TRL's own token_* modes (tests/test_check_frameworks_offpolicy.py),"
        " not as a before-and-after case",
    ),
    Mistake(
        "masking-bias",
        "the sampler weight masked above C (MIS): −E_μ[1{w > C} w g]",
        Fix(
            "raise the mask's C, or weigh by w unmasked",
            framework={"trl": Cure("correction", "exact"), "openrlhf": _WIDER_CUT},
        ),
        found_by=(*_OFF, AUDIT),
        held=_FIXES_TEST,
    ),
    Mistake(
        "clipping-bias",
        "tokens cut by a PPO clip (or a dual clip, or GSPO's clip of the sequence's ratio): "
        "they contribute no gradient",
        Fix(
            "a PPO clip is biased wherever it cuts: take fewer steps per batch (smaller "
            "distance from θ_old), or drop the clip",
        ),
        found_by=(*_OFF, AUDIT),
        held=_FIXES_TEST,
    ),
    Mistake(
        "cispo-relative-cap",
        "CISPO's relative cap: the detached weight clipped to [1 − ε_low, 1 + ε_high] (verl's "
        "cispo, the paper's): no token is cut, but a capped token's weight is not its "
        "importance ratio",
        Fix("widen the cap, or use the uncapped product ratio"),
        found_by=(*_OFF, AUDIT),
        held=_FIXES_TEST,
    ),
    Mistake(
        "cispo-absolute-cap",
        "CISPO's absolute cap: the detached weight min(ρ, ε_high) (TRL's cispo; ε_high unset "
        "is 0.2, every on-policy weight 0.2): a capped weight is not the importance ratio",
        Fix("set epsilon_high ≥ the largest ratio (TRL: epsilon_high)"),
        found_by=(*_OFF, AUDIT),
        unheld="held through TRL's own cispo loss (tests/test_check_frameworks_offpolicy.py), "
        "not as a before-and-after case",
    ),
    # -- the episodes family ---------------------------------------------------------------------
    Mistake(
        "world-tokens-trained",
        "the world's tokens (a tool's result, an observation, the template's headers) scored "
        "as the policy's: mask with batch.completion_mask, 1 on the model's tokens only",
        Fix(
            "multiply the token terms by batch.completion_mask (1 on the model's tokens only): "
            "the world's tokens (tool results, observations, role headers) are context, not "
            "the policy's",
            framework={
                "trl": "return env_mask from your rollout_func, 1 on the model's tokens and 0 "
                "on the world's (TRL multiplies its loss mask by it)"
            },
        ),
        found_by=(*_EPS, AUDIT),
        held=_AUDIT_TEST,
    ),
    Mistake(
        "model-tokens-after-answer-dropped",
        "the model's tokens after the world's first answer left out of the loss: every reply "
        "is the policy's, the later ones too",
        Fix(
            "keep every reply in the loss: mask with batch.completion_mask, the turns after "
            "the world's first answer included",
        ),
        found_by=(*_EPS, AUDIT),
        held=_FIXED_TEST,
    ),
    Mistake(
        "turns-weighted-by-whole-return",
        "each turn's tokens weighted by the episode's whole return where the rewards come per "
        "turn: a later turn carries the rewards of earlier ones, which it cannot change (the "
        "same mean, more variance; beside a length or std normaliser, another mean)",
        Fix(
            "weight turn k's tokens by its reward-to-go Gₖ = Σ_{j ≥ k} rⱼ (batch.turn_rewards "
            "summed from column k on, its baseline from the group's Gₖ), not by the whole "
            "return",
            framework={
                "trl": "no key: TRL 1.16 gives every token of a completion its one advantage; "
                "alone it changes no mean, so remove the normalisers beside it (loss_type: "
                "dr_grpo, scale_rewards: none)"
            },
        ),
        moves_mean=False,
        found_by=(*_EPS, AUDIT),
        unheld="alone it changes no mean: the fixed loss differs in variance only, which no "
        "before-and-after verdict tells",
    ),
    # -- the credit audit's own ------------------------------------------------------------------
    Mistake(
        "first-reply-uncredited",
        "the credit audit: the first reply's tokens get no weight where their exact credit "
        "(the whole reward-to-go) is not 0 (a return zeroed before the world's answer, or the "
        "first reply left out of the loss)",
        Fix(
            "credit the first reply with its reward-to-go G₁ = Σⱼ rⱼ (batch.turn_rewards "
            "summed from column 0 on), not a return zeroed before the world's answer, and keep "
            "its tokens in the mask",
        ),
        found_by=(AUDIT,),
        held=_AUDIT_TEST,
    ),
    Mistake(
        "later-rewards-withheld",
        "the credit audit: each turn credited with its own reward only; a reply leads to the "
        "later turns' rewards too, and is owed them",
        Fix(
            "weight turn k's tokens by its reward-to-go Gₖ = Σ_{j ≥ k} rⱼ: a reply earns the "
            "rewards of the turns it leads to, not its own turn's alone",
        ),
        found_by=(AUDIT,),
        held=_AUDIT_TEST,
    ),
    Mistake(
        "turns-discounted",
        "the credit audit: each turn credited with the later turns' rewards discounted by a "
        "γ < 1 a turn, where the objective J = E[Σₖ rₖ] sums them undiscounted",
        Fix(
            "weight turn k's tokens by its reward-to-go Gₖ = Σ_{j ≥ k} rⱼ, undiscounted (or "
            "declare the discounted objective you mean to maximise)",
        ),
        found_by=(AUDIT,),
        held=_FIXED_TEST,
    ),
    Mistake(
        "own-reward-withheld",
        "the credit audit: each turn credited with the rewards of the turns after it only, its "
        "own turn's reward left out (the credit a turn late: a return shifted by one)",
        Fix(
            "weight turn k's tokens by its reward-to-go Gₖ = Σ_{j ≥ k} rⱼ, turn k's own reward "
            "rₖ included: it follows from the reply of that turn",
        ),
        found_by=(AUDIT,),
        held=_FIXED_TEST,
    ),
    Mistake(
        "batch-mean-baseline",
        "the credit audit: a baseline taken over the whole batch, the sample's own reward and "
        "other prompts' in it",
        Fix(
            "take each sample's baseline from its own group's others (leave-one-out), not from "
            "the batch's mean, which holds the sample's own reward and other prompts'",
        ),
        found_by=(AUDIT,),
        held=_FIXED_TEST,
    ),
    Mistake(
        "per-token-weight",
        "the credit audit: the weights vary token by token within a reply whose exact credit "
        "is one value (a factor of the token's own or the sampler's probability)",
        Fix(
            "weight every token of a reply by the reply's one credit: no factor of the token's "
            "own probability (π, a ratio, a cap or a floor) where the batch is on-policy",
        ),
        found_by=(AUDIT,),
        held=_AUDIT_TEST,
    ),
    Mistake(
        "wrong-entry",
        "the credit audit: the loss reads the log-prob of another token than the one sampled "
        "at a position",
        Fix(
            "gather the log-prob of the token sampled at each position: "
            "log_softmax(logits[:, t]).gather(-1, input_ids[:, t + 1])",
        ),
        found_by=(AUDIT,),
        held=_FIXED_TEST,
    ),
    Mistake(
        "reads-whole-distribution",
        "the credit audit: the loss reads the whole distribution at the model's positions (an "
        "entropy, a KL over the vocabulary), not only the sampled token's log-prob",
        Fix(
            "an entropy or a KL over the whole vocabulary is another objective's gradient: take "
            "it out, or declare it (a KL in the objective, --beta)",
        ),
        found_by=(AUDIT,),
        held=_FIXED_TEST,
    ),
    Mistake(
        "ratio-floor",
        "the credit audit: each token's ratio π_θ/π_old floored (max(ratio, f)), not the "
        "reply's product",
        Fix(
            "no floor under the ratio: weigh each reply by its product ratio "
            "exp(Σₜ (ℓ − ℓ^old)ₜ), detached; a floor keeps a weight on tokens the new policy "
            "has made unlikely",
        ),
        found_by=(AUDIT,),
        held=_AUDIT_TEST,
    ),
    Mistake(
        "sampler-wrong-entry",
        "the credit audit: the importance weight built from the sampler's most probable "
        "token's log-prob at each position, not the sampled token's",
        Fix(
            "read μ's log-prob of the sampled token (batch.sampler_logps, or the top-k entry "
            "whose id is the sampled token's), not the sampler's most probable entry",
        ),
        found_by=(AUDIT,),
        held=_AUDIT_TEST,
    ),
    Mistake(
        "model-tokens-dropped",
        "the credit audit: some of the model's tokens get no weight where their exact credit is "
        "not 0, by a rule of the sample (their place, the lengths or the rewards drawn: a mask "
        "aligned to the wrong end, say), or off-policy by no clip ε or sampler bound C it "
        "tries: E[ĝ] misses their terms",
        Fix(
            "keep every token of a weighted reply in the loss: multiply by "
            "batch.completion_mask alone; a clip or a token mask that cuts tokens drops terms "
            "whose credit is not 0, so widen its bounds or take it out",
        ),
        found_by=(AUDIT,),
        held=_FIXED_TEST,
    ),
    Mistake(
        "logps-detached",
        "the credit audit: the loss reads the log-probs of tokens whose exact credit is not 0 "
        "only detached (.detach(), .data, torch.no_grad(): a ratio's numerator, a reply or a "
        "token cut off the graph): those tokens carry no gradient, and E[ĝ] misses their terms",
        Fix(
            "keep the log-prob each term differentiates attached: detach the weight beside it "
            "(an advantage, an importance weight's value, π_old), never ℓ itself; a ratio is "
            "exp(ℓ − ℓ_old.detach()), its numerator attached",
        ),
        found_by=(AUDIT,),
        held=_DETACHED_TEST,
    ),
    Mistake(
        "dropped-at-random",
        "the credit audit: the model's tokens or replies given no weight at random (by no rule "
        "of their features), the rest re-weighted or not: unbiased where the kept ones are "
        "re-weighted by 1/p (more variance), else a constant, said with it",
        Fix(
            "nothing to change where the kept tokens are re-weighted by 1/p (a dropout): the "
            "mean is right and the variance larger; else divide by the share kept",
        ),
        moves_mean=False,
        found_by=(AUDIT,),
        held=_FIXED_TEST,
    ),
    Mistake(
        "sign-flipped",
        "the credit audit: tokens weighted with the opposite sign to their reply's other "
        "tokens, whose credit is one value a reply",
        Fix(
            "weight every token of a reply by the reply's one credit, its sign included: no "
            "per-token factor that can turn negative (a difference of log-probs, a centred "
            "weight)",
        ),
        found_by=(AUDIT,),
        held=_FIXED_TEST,
    ),
    Mistake(
        "advantage-transformed",
        "the credit audit: each reply's weight a non-linear function of its advantage (|A|, "
        "A², its sign, a clip, a positive part, a power), said with its fitted constants",
        Fix(
            "weight each reply by its advantage itself, A = R − baseline: no square, absolute "
            "value, sign, clip or positive part of it",
        ),
        found_by=(AUDIT,),
        held=_FIXED_TEST,
    ),
    Mistake(
        "mean-normalised",
        "the credit audit: each group's advantages divided by the group's mean return (a "
        "relative advantage): each prompt reweighted by 1/mean, a factor of the sample",
        Fix("A = R − baseline, without the ÷ the group's mean return"),
        found_by=(AUDIT,),
        held=_FIXED_TEST,
    ),
    Mistake(
        "reply-factor",
        "the credit audit: each reply's weight its credit times a line in one of its own "
        "features (its log-prob, its probability, its length, or 1 + b/L of its length L: an "
        "advantage summed over more positions than it is divided by; off-policy, one of its "
        "own ratios where the owed one is divided out); the line 1 + ln π(reply) of an "
        "importance weight left attached is named ratio-1-broken",
        Fix(
            "detach every factor of a reply's weight that is not its credit (an importance "
            "weight, a length), or take it out",
        ),
        found_by=(AUDIT,),
        held=_FIXED_TEST,
    ),
    Mistake(
        "position-weighted",
        "the credit audit: each token's weight a function of its place in the reply (γᵗ from "
        "its start or its end) where the exact credit is one value a reply",
        Fix(
            "weight every token of a reply by the reply's one credit: no discount γᵗ over the "
            "tokens of a reply rewarded as a whole",
        ),
        found_by=(AUDIT,),
        held=_FIXED_TEST,
    ),
    Mistake(
        "epsilon-divisor",
        "the credit audit: a constant c in the hundreds or more, a division by a quantity that "
        "is 0 on the batch plus its ε (a σ of equal rewards, a count of no tokens)",
        Fix(
            "do not divide by a quantity that can be 0 (a group's σ of equal rewards): divide "
            "by a constant, or leave the group's terms at 0",
        ),
        found_by=(AUDIT,),
        held=_FIXED_TEST,
    ),
    Mistake(
        "kl-estimator-unknown",
        "the credit audit, β > 0: the KL's part of each weight is none of the known "
        "estimators' gradients (the log-ratio to go, each token's own, k3's 1 − e^(−d)): said "
        "as a function of the log-ratio",
        Fix(_K1_TO_GO, framework=_KL_IN_REWARD),
        found_by=(AUDIT,),
        fixed={"episodes": Fix(_K1_TO_GO, framework=_EPISODES_KL)},
        held=_FIXED_TEST,
    ),
    Mistake(
        "credit-unexplained",
        "the credit audit: the tokens are the right ones, but the weights on the model's "
        "replies fit none of its relations to the exact credit",
        Fix(
            "the weights fit none of the audit's relations to the exact credit: hold your "
            "advantage term by term against the reward-to-go less the group's leave-one-out "
            "mean",
        ),
        found_by=(AUDIT,),
        unheld="no change is known to remove an unexplained weight: the fix points to the "
        "credit to hold the loss against",
    ),
)
"""Every mistake the check names (the module's docstring)."""

MISTAKES: dict[str, Mistake] = {m.name: m for m in REGISTRY}
""":data:`REGISTRY` by name."""

JOINED: dict[tuple[str, ...], str] = {
    ("self-including-mean", "constant-normaliser"): "c = (G − 1)/(G T) or (G − 1) N/(G T): a "
    "self-including group mean and a constant normaliser (Dr. GRPO; a step size; "
    "--allow-scale)",
}
"""Names that a family's variant gives together, with the meaning of the two at once where it
is more than each one's (a constant that is their product)."""


def named(name: str) -> str:
    """``name``, where it is a mistake of :data:`MISTAKES` (a part that emits it says so once).

    Raises:
        ValueError: no mistake is so named.
    """
    if name not in MISTAKES:
        raise ValueError(f"no mistake is named {name!r} in eligibility.check.mistakes")
    return name


def meanings(finder: str, form: str | None = None) -> dict[str, str]:
    """The meaning of every mistake ``finder`` gives (:data:`FINDERS`), as its report says it.

    A family's view (:attr:`~eligibility.check.family.Family.diagnoses`): its own names, and
    the names that join them in its variants (:data:`JOINED`).
    """
    family = finder if finder not in (ENGINE, AUDIT) else None
    out = {m.name: m.meaning_in(family, form) for m in REGISTRY if finder in m.found_by}
    for names, text in JOINED.items():
        if family and all(n in out for n in names):
            out[", ".join(names)] = text
    return out


def explained(family: str | None = None, form: str | None = None) -> dict[str, str]:
    """Every name's meaning as ``family``'s report in ``form`` says it, the joined ones too."""
    out = {m.name: m.meaning_in(family, form) for m in REGISTRY}
    return out | {", ".join(names): text for names, text in JOINED.items()}


def markdown() -> str:
    """The table of ``docs/check-mistakes.md``, a row a mistake.

    Its name, what it means, who gives it, whether it moves E[ĝ], and where its fix is applied
    in a test (or why not).
    """
    lines = [
        "| name | meaning | given by | moves E[ĝ] | its fix applied in a test |",
        "|---|---|---|---|---|",
    ]
    for m in REGISTRY:
        mean = "yes" if m.moves_mean else "no (variance only)"
        text = m.meaning.replace("|", "\\|")
        held = f"`{m.held}`" if m.held else f"no: {m.unheld}"
        lines.append(f"| `{m.name}` | {text} | {', '.join(m.found_by)} | {mean} | {held} |")
    return "\n".join(lines) + "\n"


__all__ = [
    "AUDIT",
    "ENGINE",
    "FINDERS",
    "JOINED",
    "MISTAKES",
    "REGISTRY",
    "Cure",
    "Fix",
    "Mistake",
    "explained",
    "markdown",
    "meanings",
    "named",
]
