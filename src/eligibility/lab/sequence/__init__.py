r"""Exact sequence problems: a causal LM small enough to enumerate every completion.

    >>> import numpy as np
    >>> from eligibility.lab.sequence import get_problem
    >>> p = get_problem("length")
    >>> round(p.J, 4), p.n_params
    (0.3957, 60)
    >>> batch = p.sample(2, np.random.default_rng(0))          # 2 prompts × G = 8 completions
    >>> logps, batch = p.on_policy(batch)                        # differentiable in θ, [16, W]
    >>> tuple(batch.completion_ids.shape) == tuple(logps.shape)
    True

See docs/lab.md ("Sequence problems") for the objective, the protocol and the problems.
"""

from eligibility.lab.sequence.builtin import PROBLEMS, answers_first, get_problem
from eligibility.lab.sequence.model import CausalLMOutput, TinyCausalLM
from eligibility.lab.sequence.problem import (
    Draw,
    Enumeration,
    SequenceBatch,
    SequenceProblem,
    advantage_of,
    token_logps,
)

__all__ = [
    "PROBLEMS",
    "CausalLMOutput",
    "Draw",
    "Enumeration",
    "SequenceBatch",
    "SequenceProblem",
    "TinyCausalLM",
    "advantage_of",
    "answers_first",
    "get_problem",
    "token_logps",
]
