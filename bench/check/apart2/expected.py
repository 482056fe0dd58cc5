"""What each held-out loss should read, derived by hand (and by autograd on a toy batch).

Derived before any run of the check on them.

One entry per case: the loss (``FILE.py:FUNCTION`` under this folder), the options a user would
run it with, the verdict expected on each problem (the exact E[ĝ] against ∇J: ``unbiased``,
``scaled`` with its c, ``biased``, or ``excess variance`` where the mean is exact but terms of
mean zero move components a correct estimator leaves at 0), where the weights depart from the
exact credit (plain words: which tokens, which factor), the registry names that would be true
(``names``; empty where the loss is correct) and names that would be false (``false``). Where no
registry name fits, ``names`` holds ``credit-unexplained`` and ``words`` what its description
should say. ``resolution`` notes a bias that the z-test may not resolve at its N.

The exact credit of a model token t of reply i: (1/N)(Aᵢ − β Σ_{s ≥ t} dₛ), Aᵢ its (turn's)
reward-to-go less a baseline that does not depend on the reply, dₛ = ℓₛ − ℓ^ref_s; off-policy,
times the whole reply's π_θ/μ. G = 8, T = 5, binary rewards on ``length`` and ``difficulty``.
"""

from __future__ import annotations

SEQ_NO_KL = ("--sequence", "--kl", "none")
SEQ = ("--sequence",)
EPISODES = ("--family", "episodes", "--kl", "none")
OFF = ("--off-policy",)

CASES: dict[str, dict] = {
    "median_of_others": {
        "loss": "completions.py:median_of_others",
        "options": SEQ_NO_KL,
        "kind": "on-policy: group statistic (correct)",
        "verdict": {"length": "unbiased", "difficulty": "unbiased"},
        "place": "none: the baseline (the median of the group's other 7 rewards) never depends "
        "on the reply it is subtracted from",
        "names": [],
        "false": ["self-including-mean", "batch-mean-baseline", "credit-unexplained"],
    },
    "running_mean_baseline": {
        "loss": "completions.py:running_mean_baseline",
        "options": SEQ_NO_KL,
        "kind": "on-policy: baseline across steps (correct)",
        "verdict": {"length": "unbiased", "difficulty": "unbiased"},
        "place": "none: the baseline is an average of earlier batches' rewards, a constant of "
        "this batch; this batch's rewards enter only after the loss is built",
        "names": [],
        "false": ["batch-mean-baseline", "credit-unexplained"],
    },
    "mask_shifted_for_labels": {
        "loss": "completions.py:mask_shifted_for_labels",
        "options": SEQ_NO_KL,
        "kind": "on-policy: token positions (mask)",
        "verdict": {"length": "biased", "difficulty": "biased"},
        "place": "every completion's first token gets weight 0 (its credit is the completion's "
        "advantage); the position just past each completion's last token (the first padding) "
        "gets the completion's advantage where the completion is shorter than the batch's "
        "longest (its log-prob is a constant 0: weight, no gradient)",
        "names": ["model-tokens-dropped", "padding-in-loss"],
        "words": "the first token of its reply",
        "false": ["eos-masked", "truncated-masked", "dropped-at-random"],
    },
    "reward_per_token": {
        "loss": "completions.py:reward_per_token",
        "options": SEQ_NO_KL,
        "kind": "on-policy: per-reply factor in the reward (normalisation)",
        "verdict": {"length": "biased", "difficulty": "biased"},
        "place": "each reply credited with R/L less the mean of its group's others' R/L: the "
        "reward reshaped by the reply's own length before the baseline (the gradient of "
        "E[R/L]), not (R − b)/L",
        "names": ["credit-unexplained"],
        "near": ["length-normalised", "reply-factor"],
        "words": "the reward divided by the reply's length before the baseline",
        "false": ["std-normalised", "batch-dependent-normaliser"],
    },
    "mean_over_informative_groups": {
        "loss": "completions.py:mean_over_informative_groups",
        "options": SEQ_NO_KL,
        "kind": "on-policy: per-batch factor (filtered groups)",
        "verdict": {"length": "biased", "difficulty": "biased"},
        "place": "every reply's weight is its credit × N/n, n the completions of groups whose "
        "rewards differ (a factor per batch that depends on the rewards drawn); prompt by "
        "prompt E = 1.22, 1.62, 1.22 on difficulty, 1.008 and 1.072 on length",
        "names": ["batch-dependent-normaliser"],
        "words": "a factor per batch",
        "resolution": "length: a 6 % difference between its two prompts, likely below the "
        "z-test's resolution (unbiased there would be a miss of the test, not a false alarm)",
        "false": ["std-normalised", "scale"],
    },
    "advantage_on_final_token": {
        "loss": "completions.py:advantage_on_final_token",
        "options": SEQ_NO_KL,
        "kind": "on-policy: token positions (credit on one token)",
        "verdict": {"length": "biased", "difficulty": "biased"},
        "place": "only each completion's last token (its EOS, or its T-th token where cut) is "
        "weighted, by the full advantage; every earlier token gets 0",
        "names": ["model-tokens-dropped"],
        "words": "every token before the last of its reply",
        "false": ["eos-masked", "position-weighted", "dropped-at-random"],
    },
    "confidence_weighted": {
        "loss": "completions.py:confidence_weighted",
        "options": SEQ_NO_KL,
        "kind": "on-policy: per-reply factor of its own probability",
        "verdict": {"length": "biased", "difficulty": "biased"},
        "place": "each reply's weight is its credit × (1 − exp(mean ℓ)), one minus its "
        "geometric-mean token probability (detached): a factor of the reply's own probability",
        "names": ["reply-factor", "credit-unexplained"],
        "words": "a factor of the reply's own (mean token) probability",
        "false": ["length-normalised", "per-token-weight", "std-normalised"],
    },
    "rank_advantage": {
        "loss": "completions.py:rank_advantage",
        "options": SEQ_NO_KL,
        "kind": "on-policy: advantage transform (ordinal ranks)",
        "verdict": {"length": "scaled 3.5", "difficulty": "scaled 3.5"},
        "place": "each reply's weight is its ordinal rank in the group less (G − 1)/2; with "
        "binary rewards a tied reply's rank is its index among the ties, so batch by batch a "
        "success can get a negative weight; the index is exchangeable, and E[ĝ] = "
        "(G − 1)/2 ∇J = 3.5 ∇J on both problems (derived: Σᵢ E[rank | R = 1] − E[rank | R = 0] "
        "= G(G − 1)/2 for every success rate)",
        "names": ["scale"],
        "words": "c = 3.5; the weight depends on the reply's index among tied rewards",
        "false": ["self-including-mean", "std-normalised", "sign"],
    },
    "kl_after_baseline": {
        "loss": "completions.py:kl_after_baseline",
        "options": SEQ,
        "kind": "KL (β > 0): the KL taken off after the baseline (correct)",
        "verdict": {"length": "unbiased", "difficulty": "unbiased", "kl": "unbiased"},
        "place": "none: the KL part is −β × the whole reply's Σ(ℓ − ℓ^ref), its prefix terms "
        "of mean zero; no baseline for it is needed",
        "names": [],
        "false": ["kl-token-local", "kl-no-gradient", "credit-unexplained"],
    },
    "kl_written_backwards": {
        "loss": "completions.py:kl_written_backwards",
        "options": SEQ,
        "kind": "KL (β > 0): the log-ratio's sign",
        "verdict": {"length": "unbiased", "difficulty": "unbiased", "kl": "biased"},
        "place": "on kl, every token's KL part has the wrong sign: the KL is rewarded, "
        "+β Σ(ℓ − ℓ^ref) in the reward (a weight of −β on the KL against the objective's β)",
        "names": ["kl-weight"],
        "words": "the KL weighed by −0.1 (or: the KL's sign turned over)",
        "false": ["sign", "kl-forward", "kl-no-gradient"],
    },
    "k3_in_reward": {
        "loss": "completions.py:k3_in_reward",
        "options": SEQ,
        "kind": "KL (β > 0): estimator",
        "verdict": {"length": "unbiased", "difficulty": "unbiased", "kl": "biased"},
        "place": "on kl, every token's KL part is −β × Σ over the whole reply of "
        "e^(−d) + d − 1 (k3 as a reward, ≈ d²/2 near 0, never negative), not the log-ratio d",
        "names": ["kl-estimator-unknown"],
        "words": "the KL part a function e^(−d) + d − 1 of the log-ratio",
        "false": ["kl-forward", "kl-no-gradient", "kl-token-local"],
    },
    "returns_accumulated_forward": {
        "loss": "episodes.py:returns_accumulated_forward",
        "options": EPISODES,
        "kind": "episodes: credit between turns",
        "verdict": {
            "two-turn": "biased",
            "two-turn-first-pays": "excess variance",
            "two-turn-long-answers": "biased",
        },
        "place": "reply 1 credited with r₁ alone (r₂, which follows from it through the world's "
        "answer, withheld); reply 2 credited with r₁ + r₂, the whole return (mean zero extra); "
        "on two-turn-first-pays r₂ ≡ 0, so reply 1 is right and reply 2 carries r₁",
        "names": ["later-rewards-withheld", "turns-weighted-by-whole-return"],
        "words": "reply 1 credited with its own turn's reward only",
        "false": ["own-reward-withheld", "first-reply-uncredited"],
    },
    "whole_return_baseline": {
        "loss": "episodes.py:whole_return_baseline",
        "options": EPISODES,
        "kind": "episodes: baseline per episode (mean exact)",
        "verdict": {
            "two-turn": "unbiased",
            "two-turn-first-pays": "excess variance (unbiased mean)",
            "two-turn-long-answers": "unbiased",
        },
        "place": "none in the mean; turn 2's baseline is the others' whole return, not their "
        "turn-2 reward-to-go, so on two-turn-first-pays reply 2's tokens get −b ≠ 0 on every "
        "batch (terms of mean zero)",
        "names": [],
        "false": ["turns-weighted-by-whole-return", "batch-mean-baseline", "other"],
    },
    "divided_by_turns": {
        "loss": "episodes.py:divided_by_turns",
        "options": EPISODES,
        "kind": "episodes: per-episode factor",
        "verdict": {
            "two-turn": "scaled 0.5",
            "two-turn-first-pays": "scaled 0.5",
            "two-turn-long-answers": "scaled 0.5",
        },
        "place": "every token's weight is its credit ÷ its episode's number of turns, 2 in "
        "every episode of these problems: a constant 1/2 here (a bias where turns vary)",
        "names": ["scale"],
        "words": "c = 0.5",
        "false": ["accumulation-scaled", "length-normalised", "self-including-mean"],
    },
    "kl_over_every_token": {
        "loss": "episodes.py:kl_over_every_token",
        "options": ("--family", "episodes", "--problem", "two-turn-kl"),
        "kind": "episodes, KL (β = 0.3): the KL over the world's tokens",
        "verdict": {"two-turn-kl": "biased"},
        "place": "each episode's KL penalty also sums the world's answer's log-ratios (its "
        "header and observation, ln π_θ(w) − ln π_ref(w)), which depend on reply 1: reply 1's "
        "tokens carry them as credit; no world token is weighted itself",
        "names": ["credit-unexplained", "kl-estimator-unknown"],
        "words": "the KL part of reply 1 holds the world tokens' log-ratios",
        "false": ["world-tokens-trained", "kl-no-gradient", "kl-token-local"],
    },
    "ratio_clipped_per_token_then_multiplied": {
        "loss": "offpolicy.py:ratio_clipped_per_token_then_multiplied",
        "options": OFF,
        "kind": "off-policy: a clip inside the sequence ratio",
        "verdict": {"ratio-one": "unbiased", "near": "biased", "far": "biased"},
        "place": "each reply weighted by Πₜ clip(rₜ, 0.8, 1.2) × π_old/μ instead of Πₜ rₜ × "
        "π_old/μ: one weight for every token of the reply, its token ratios clamped to "
        "[0.8, 1.2] inside the product; no token is cut",
        "names": ["credit-unexplained"],
        "words": "the reply's ratio product with each token's ratio clamped to [0.8, 1.2]",
        "false": ["clipping-bias", "per-token-ratio", "truncation-bias"],
    },
    "self_normalised_weights": {
        "loss": "offpolicy.py:self_normalised_weights",
        "options": OFF,
        "kind": "off-policy: per-batch factor (self-normalised importance weights)",
        "verdict": {"ratio-one": "unbiased", "near": "biased", "far": "biased"},
        "place": "every reply's exact weight π_θ/μ divided by the batch's mean of those "
        "weights: a factor per batch (self-normalised importance sampling, biased O(1/N))",
        "names": ["batch-dependent-normaliser"],
        "words": "a factor per batch",
        "resolution": "near: the batch's weights vary less; the O(1/N) bias may be below the "
        "z-test's resolution",
        "false": ["truncation-bias", "uncorrected-sampler"],
    },
    "sampler_corrected_twice": {
        "loss": "offpolicy.py:sampler_corrected_twice",
        "options": OFF,
        "kind": "off-policy: the sampler weight counted twice",
        "verdict": {"ratio-one": "unbiased", "near": "biased", "far": "biased"},
        "place": "each reply weighted by (π_θ/μ)(π_old/μ): the owed π_θ/μ times π_old/μ once "
        "more (the sampler's weight squared)",
        "names": ["reply-factor"],
        "words": "an extra factor π_old/μ, one of the reply's own ratios",
        "false": ["uncorrected-sampler", "per-token-sampler-weight", "stale-old-logps"],
    },
    "penalty_to_old_policy": {
        "loss": "offpolicy.py:penalty_to_old_policy",
        "options": OFF,
        "kind": "off-policy: a KL penalty to π_old (trust region)",
        "verdict": {"ratio-one": "unbiased", "near": "biased", "far": "biased"},
        "place": "every model token's weight is the exact one plus (0.1/N)(1/rₜ − 1), a part "
        "that does not depend on the reward, a function of the token's own ratio rₜ = "
        "π_θ/π_old (0 where rₜ = 1)",
        "names": ["credit-unexplained"],
        "words": "a per-token part in the token's own ratio, independent of the advantage",
        "false": ["ratio-1-broken", "per-token-ratio", "kl-token-local"],
    },
}
"""The held-out cases by name."""
