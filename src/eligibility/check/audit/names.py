r"""Every name the credit audit gives, with its meaning, and the finding that carries one.

A :class:`Finding` can only carry a name of :data:`FINDINGS` (a ``ValueError`` otherwise), so the
audit cannot say a name the table does not explain.
"""

from __future__ import annotations

from dataclasses import dataclass

FINDINGS = {
    # tokens scored that must not be, and entries read that are not the token's
    "prompt-in-loss": "the prompt's tokens weighted: a term of no correct estimator",
    "padding-in-loss": "the padding weighted: a term of no correct estimator",
    "world-tokens-trained": "the world's tokens (a header, an observation) weighted",
    "no-shift": "the logits at a token's own position read for it (logits[:, t] predicts t + 1)",
    "wrong-entry": "the log-prob of another token than the one sampled read at a position",
    "reads-whole-distribution": "more of the logits read than the sampled token's log-prob",
    # the model's tokens given no weight where their exact credit is not 0
    "eos-masked": "the EOS token of each reply given no weight",
    "truncated-masked": "the replies cut at T (no EOS) given no weight",
    "first-reply-uncredited": "the first reply's tokens given no weight",
    "model-tokens-after-answer-dropped": "the replies after the world's first answer given "
    "no weight",
    "model-tokens-dropped": "the model's tokens given no weight by a rule of the sample (their "
    "place, the lengths or the rewards drawn): E[ĝ] misses their terms",
    "dropped-at-random": "the model's tokens or replies given no weight at random (no rule of "
    "their features), the rest re-weighted or not: said with the constant it leaves",
    "sign-flipped": "tokens weighted with the opposite sign to their reply's other tokens",
    # how the rest relate to the exact credit
    "turns-weighted-by-whole-return": "every turn weighted by the episode's whole return",
    "later-rewards-withheld": "each turn credited with its own turn's reward only",
    "length-normalised": "each reply's weight divided by a function of its own length",
    "std-normalised": "each group's advantages divided by the group's σ of the return",
    "mean-normalised": "each group's advantages divided by the group's mean return",
    "batch-whitened": "the advantages whitened across the batch, not within each group",
    "batch-mean-baseline": "the baseline is the batch's mean return (the sample's own in it)",
    "batch-dependent-normaliser": "a factor that changes from batch to batch (a normaliser "
    "counted on the sample)",
    "advantage-transformed": "each reply's weight a non-linear function of its advantage (|A|, "
    "A², its sign, a clip, a positive part), said with its fitted constants",
    "reply-factor": "each reply's weight its credit times a line in one of its own features (its "
    "log-prob, its probability, its length)",
    "position-weighted": "each token's weight a function of its place in the reply (γᵗ)",
    "per-token-weight": "the weights vary token by token within a reply whose credit is one value",
    "credit-unexplained": "no description of the search fits: said with the best one found and "
    "how far off it is",
    # a constant
    "scale": "every weight a constant c times the exact credit's (a step size)",
    "accumulation-scaled": "c = the number of micro-batches or ranks, or its inverse",
    "self-including-mean": "c = (G − 1)/G: a group-mean baseline that includes the sample",
    "constant-normaliser": "c = 1/T or N/T: a constant normaliser",
    "epsilon-divisor": "c in the hundreds or more: a division by a quantity that is 0 here, plus ε",
    # off-policy
    "per-token-ratio": "each token weighted by its own π_θ/π_old where the reply's product is owed",
    "per-token-sampler-weight": "each token weighted by its own π_old/μ",
    "cispo-relative-cap": "each token weighted by its ratio π_θ/π_old clamped to [lo, hi]",
    "ratio-floor": "each token's ratio π_θ/π_old floored (max(ratio, f))",
    "clipping-bias": "tokens whose ratio leaves [1 − ε, 1 + ε] on the advantage's side dropped",
    "masking-bias": "tokens or replies whose sampler weight exceeds C dropped",
    "truncation-bias": "the sampler's weight (or the reply's whole weight) truncated at C",
    "geometric-mean": "each reply weighted by the geometric mean of its ratios, not the product",
    "stale-old-logps": "no π_θ/π_old ratio although θ ≠ θ_old",
    "uncorrected-sampler": "no π_old/μ weight although the sampler differs from π_old",
    "sampler-wrong-entry": "the sampler's log-prob read from another entry than the sampled one",
    "kl-token-local": "the KL's part of each token's weight its own log-ratio only (k2 in the "
    "loss, k1 as a per-token reward): the later tokens' KL left out",
    "kl-forward": "the KL's part of each token's weight 1 − π_ref/π (k3 in the loss): the "
    "forward KL's gradient, not the objective's",
    "kl-weight": "the KL's part weighted by another β (or normaliser) than the objective's",
    "kl-estimator-unknown": "the KL's part of each weight is none of the estimators' gradients: "
    "said as a function of the log-ratio",
}
"""Every name the audit gives → its meaning in one line."""


@dataclass(frozen=True)
class Finding:
    """One thing the audit found.

    Attributes:
        name: its name, one of :data:`FINDINGS`.
        where: the tokens and the relation, in the user's terms.
        share: the share of the loss's total |weight| on the tokens concerned (None where
            the finding is a relation, not a set of tokens).
        leak: a term no correct estimator has, or one it must have and lacks, on every
            batch that holds it, whatever the mean says: the check fails on it.
    """

    name: str
    where: str
    share: float | None = None
    leak: bool = False

    def __post_init__(self) -> None:
        if self.name not in FINDINGS:
            raise ValueError(f"the audit has no finding named {self.name!r} (see FINDINGS)")

    def to_json(self) -> dict[str, object]:
        """The finding as the report's JSON holds it."""
        return {"name": self.name, "where": self.where, "share": self.share, "leak": self.leak}


__all__ = ["FINDINGS", "Finding"]
