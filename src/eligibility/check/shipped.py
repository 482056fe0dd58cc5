"""The bugs public trainers shipped in 2025–2026, as ``check --sequence`` names them.

One row per named mistake: its formula, who shipped it (each verifiable in that project's
issue tracker and code), the example in ``examples/check/sequence/`` written from the formula,
the settings the check needs to see it (a loss called per micro-batch, the sampler's τ), and
what the check finds. docs/check.md's table is :func:`markdown` of these rows, and
``tests/test_check_shipped_bugs.py`` runs every row's example through the check (slow) and
holds the page to this table (fast).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Shipped:
    """One shipped bug.

    Attributes:
        name: the diagnosis the check gives.
        formula: what the loss computes, against what it should.
        shipped: where it shipped.
        example: ``FILE.py:FUNCTION`` under ``examples/check/sequence/``.
        settings: the check's settings that let it show (besides ``sequence=True``).
        found: the verdict and diagnosis the check gives on each of ``problems``.
        problems: the problems it is checked on.
    """

    name: str
    formula: str
    shipped: str
    example: str
    settings: dict[str, Any] = field(default_factory=dict)
    found: tuple[str, str | None] = ("biased", None)
    problems: tuple[str, ...] = ("length", "kl")


SHIPPED: tuple[Shipped, ...] = (
    Shipped(
        "temperature-mismatch",
        "sampled from softmax(z/τ), scored as log softmax(z)[o]: the score of another policy",
        "TRL before its fix; nanoGRPO and simple_GRPO (sample at 0.9, score at 1.0)",
        "temperature.py:scored_at_one",
        {"form": "model", "temperature": 0.9},
        ("biased", "temperature-mismatch"),
    ),
    Shipped(
        "accumulation-scaled",
        "Σⱼ ∇lossⱼ over M micro-batches, each lossⱼ undivided: M ∇J",
        "nanoGRPO (every micro-group backpropagated undivided, 4×)",
        "accumulation.py:undivided",
        {"micro_batches": 2},
        ("scaled", "accumulation-scaled"),
    ),
    Shipped(
        "accumulation-scaled",
        "Σⱼ ∇lossⱼ with each lossⱼ divided by M twice, once too often: ∇J / M",
        "ms-swift (DAPO/CISPO losses divided by the accumulation steps a second time)",
        "accumulation.py:divided_twice",
        {"micro_batches": 2},
        ("scaled", "accumulation-scaled"),
    ),
    Shipped(
        "batch-dependent-normaliser",
        "Σⱼ (1/M) Σ_{i∈j} Aᵢ Σₜ mᵢₜ ℓᵢₜ / Σ_{i∈j} Σₜ mᵢₜ: DAPO's token mean over each "
        "accumulation window's tokens, not the batch's",
        "TRL ≤ 1.9 (when steps_per_generation ≠ gradient_accumulation_steps; fixed in 1.10)",
        "dapo_window.py:window",
        {"micro_batches": 2},
        ("biased", "batch-dependent-normaliser"),
    ),
    Shipped(
        "masked-tokens-in-normaliser",
        "−Σᵢ keepᵢ Aᵢ Σₜ mᵢₜ ℓᵢₜ / Σᵢ Σₜ mᵢₜ: truncated completions out of the numerator, "
        "their tokens still in the denominator",
        "TRL ≤ 1.8 (mask_truncated_completions with the dapo/bnpo token mean)",
        "masked_tokens.py:loss",
        {},
        ("biased", "truncated-masked, masked-tokens-in-normaliser, batch-dependent-normaliser"),
        ("length",),
    ),
)
"""The shipped bugs, one row each (a bug with two forms has a row per form)."""

WRITTEN: tuple[Shipped, ...] = (
    Shipped(
        "eos-masked",
        "−Σᵢ Aᵢ Σₜ [oᵢₜ ≠ EOS] mᵢₜ ℓᵢₜ: the stop decision gets no gradient",
        "a mask written ids != pad_token_id for a tokenizer whose pad is EOS (here: ids != EOS)",
        "pad_and_eos.py:eos_masked",
        {"kl": "none"},
        ("biased", "eos-masked"),
        ("length", "difficulty"),
    ),
    Shipped(
        "std-normalised × 1.1",
        "(R − mean_g R)/(σ̂_pop + ε): the sample-std GRPO times √(G/(G − 1)) on every batch",
        "np.std or torch.std(unbiased=False) for the group's std",
        "conventions.py:population_std",
        {"kl": "none"},
        ("biased", "std-normalised × 1.1"),
        ("length", "difficulty"),
    ),
    Shipped(
        "kl-weight",
        "the KL in the reward at β′ = 0.05 while the objective's β = 0.1 (and a token mean per "
        "sequence beside it)",
        "a KL coefficient set in the trainer's config, not the objective's",
        "conventions.py:rloo_kl_005_token_means",
        {"loss_beta": 0.05},
        ("biased", "kl-weight, length-normalised"),
        ("kl",),
    ),
    Shipped(
        "batch-dependent-normaliser",
        "(1/R) Σ_r Σ_{i∈r} Aᵢ Σₜ mᵢₜ ℓᵢₜ / Σ_{i∈r} Σₜ mᵢₜ: a token mean over each rank's own "
        "tokens, averaged by DDP",
        "DAPO's token mean computed per rank (TRL divides by the whole count / num_processes)",
        "ranks.py:rank_token_mean",
        {"world_size": 2},
        ("biased", "batch-dependent-normaliser"),
        ("length",),
    ),
)
"""Mistakes of training code as it is written (a convention, a mask, a rank), one row each."""


def markdown(rows: tuple[Shipped, ...] = SHIPPED, where: str = "shipped in") -> str:
    """The table of docs/check.md ("Bugs that shipped", or ``WRITTEN``'s), from ``rows``."""
    lines = [
        f"| diagnosis | the loss computes | {where} | example | check settings | found |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in row.settings.items()) or "–"
        verdict, diagnosis = row.found
        found = f"{verdict} ({diagnosis}) on {', '.join(f'`{p}`' for p in row.problems)}"
        lines.append(
            f"| `{row.name}` | {row.formula} | {row.shipped} | `{row.example}` | "
            f"{f'`{flags}`' if flags else '–'} | {found} |"
        )
    return "\n".join(lines) + "\n"


__all__ = ["SHIPPED", "WRITTEN", "Shipped", "markdown"]
