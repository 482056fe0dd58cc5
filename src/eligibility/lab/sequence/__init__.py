"""Exact sequence problems: a causal LM small enough to enumerate every completion."""

from eligibility.lab.sequence.model import CausalLMOutput, TinyCausalLM
from eligibility.lab.sequence.problem import (
    Draw,
    Enumeration,
    SequenceBatch,
    SequenceProblem,
    grpo_advantage,
    rloo_advantage,
    token_logps,
)

__all__ = [
    "CausalLMOutput",
    "Draw",
    "Enumeration",
    "SequenceBatch",
    "SequenceProblem",
    "TinyCausalLM",
    "grpo_advantage",
    "rloo_advantage",
    "token_logps",
]
