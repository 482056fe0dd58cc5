r"""The built-in sequence problems, each built to expose one family of mistakes.

Vocabulary V = 4: ``EOS`` = 0 and three answer tokens ``A`` = 1, ``B`` = 2, ``C`` = 3. Prompts
have two tokens, completions at most T = 5, groups G = 8 (the same T and G everywhere, so that a
constant such as 1/T or (G − 1)/G scales every problem alike); the policy is
:class:`~eligibility.lab.sequence.model.TinyCausalLM`
(zₜ = token[xₜ] + prompt[x₀] (+ position[t])) at a θ chosen by hand, and its stated
properties (success rates, the correlation of reward and length, the KL) are tests.

=============  ============================================================================
problem        built to expose
=============  ============================================================================
``length``     right answers short, wrong ones long: a per-sequence 1/L (GRPO's sequence mean
               of token means) reweights them; a batch token-mean too
``difficulty`` prompts solved 90 %, 50 % and 10 % of the time: a per-group 1/σ reweights them
``kl``         β = 0.1 and π_ref ≠ π_θ: k1 in the loss (no gradient), k3 in the loss (the
               forward KL), a per-token KL (no reward-to-go) each differ from ∇J
``clip``       (the check's ``--form step`` only) rewards 0 or 10, a score: a batch's gradient
               has norm ≈ 5, above the usual ``clip_grad_norm_`` bound (``max_norm`` 1), so
               a training step's clip binds, as it does on a real model's gradient
=============  ============================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from eligibility.lab.sequence.model import TinyCausalLM
from eligibility.lab.sequence.problem import SequenceProblem

EOS, A, B, C = 0, 1, 2, 3
"""The vocabulary of the built-in problems."""

VOCAB = ("EOS", "A", "B", "C")


def answers_first(answer: int = A, *, needs_eos: bool = True) -> Callable[..., float]:
    """R(q, o) = 1 if o begins with ``answer`` (and, if ``needs_eos``, ends in EOS), else 0."""

    def reward(prompt: tuple[int, ...], completion: tuple[int, ...]) -> float:
        del prompt
        ok = len(completion) >= 1 and completion[0] == answer
        if needs_eos:
            ok = ok and completion[-1] == EOS and len(completion) >= 2
        return float(ok)

    return reward


def _rows(**rows: list[float]) -> np.ndarray:
    """A V×V table from named rows (``EOS``, ``A``, ``B``, ``C``); missing rows are 0."""
    table = np.zeros((4, 4))
    for name, row in rows.items():
        table[VOCAB.index(name)] = row
    return table


def _no_empty(max_completion_length: int, prompt_length: int = 2) -> np.ndarray:
    """A position table that forbids an empty completion: EOS logit −4 at the last prompt token."""
    position = np.zeros((prompt_length + max_completion_length, 4))
    position[prompt_length - 1, EOS] = -4.0
    return position


MAX_COMPLETION_LENGTH, GROUP_SIZE = 5, 8
"""T and G, the same for every built-in problem (the module docstring says why)."""

NO_KL = "β = 0: a KL term has nothing to act on; kl shows its placements"
"""What a built-in problem without a KL term (β = 0) is blind to."""


def _problem(
    token: np.ndarray,
    prompt: np.ndarray,
    prompts: list[list[int]],
    reward: Callable[..., float],
    *,
    no_empty: bool = True,
    ref_token: np.ndarray | None = None,
    **named: Any,
) -> SequenceProblem:
    """A built-in problem at T and G: π_θ from the ``token`` and ``prompt`` tables.

    ``no_empty``: an empty completion is (nearly) forbidden (:func:`_no_empty`); π_ref has
    ``ref_token`` alone (None: uniform). ``named``: the rest of :class:`SequenceProblem`'s.
    """
    position = _no_empty(MAX_COMPLETION_LENGTH) if no_empty else None
    return SequenceProblem(
        TinyCausalLM(4, token=token, prompt=prompt, position=position),
        TinyCausalLM(4, token=ref_token),
        prompts,
        reward,
        max_completion_length=MAX_COMPLETION_LENGTH,
        group_size=GROUP_SIZE,
        **named,
    )


def length_problem() -> SequenceProblem:
    """Right answers short, wrong ones long.

    After ``A`` the model stops (P(EOS) ≈ 0.9); after ``B`` or ``C`` it goes on (P(EOS) ≈ 0.2
    per step), so right answers have L ≈ 2.2 and wrong ones L ≈ 3.6 (T = 5).
    """
    token = _rows(A=[3.0, -1.0, 0.0, 0.0], B=[-1.0, -3.0, 0.0, 0.0], C=[-1.0, -3.0, 0.0, 0.0])
    prompt = _rows(B=[0.0, 1.0, 0.0, 0.0], C=[0.0, 2.0, 0.0, 0.0])
    return _problem(
        token,
        prompt,
        [[B, A], [C, A]],
        answers_first(A),
        name="length",
        description="right answers short (L ≈ 2.2), wrong ones long (L ≈ 3.6), T = 5",
        shows=("length-normalised", "batch-dependent-normaliser"),
        blind_to=(
            NO_KL,
            "success rates 0.28 and 0.51 have similar σ, so a 1/σ reweighting is nearly a "
            "constant here; difficulty shows it",
        ),
    )


def difficulty_problem() -> SequenceProblem:
    """Three prompts solved 90 %, 50 % and 10 % of the time.

    1/σ with σ = √(p(1 − p)) weighs p = 0.9 and p = 0.1 alike, so the 50 % prompt is what
    makes a per-group 1/σ a reweighting rather than a constant; and only large enough groups
    estimate σ (with G = 4 the sample std of a mixed group is ≈ 0.5 for any p; G = 8 here).
    Every answer token has the same continuation row, so given the prompt the length is
    independent of the reward.
    """
    same = [-1.0, 0.0, 0.0, 0.0]
    token = _rows(A=same, B=same, C=same)
    prompt = _rows(A=[0.0, 2.89, 0.0, 0.0], B=[0.0, 0.7, 0.0, 0.0], C=[0.0, -1.5, 0.0, 0.0])
    return _problem(
        token,
        prompt,
        [[A, C], [B, C], [C, C]],
        answers_first(A, needs_eos=False),
        name="difficulty",
        description="three prompts solved 90 %, 50 % and 10 % of the time, T = 5",
        shows=("std-normalised",),
        blind_to=(NO_KL,),
    )


def kl_problem() -> SequenceProblem:
    """β = 0.1 and a reference policy far from π_θ (a base model the policy drifted from)."""
    token = _rows(A=[2.0, -1.0, 0.0, 0.0], B=[-1.0, 0.0, 1.0, 0.0], C=[0.0, 0.5, 0.0, 1.0])
    prompt = _rows(B=[-2.0, 1.0, 0.0, 0.0], C=[-2.0, 0.0, 1.0, 0.0])
    ref_token = _rows(A=[0.0, 0.0, 1.0, 0.0], B=[0.0, 0.0, 0.0, 0.0], C=[1.0, 0.0, 0.0, 0.0])
    return _problem(
        token,
        prompt,
        [[B, C], [C, A]],
        answers_first(A),
        no_empty=False,
        ref_token=ref_token,
        beta=0.1,
        name="kl",
        description="β = 0.1, π_ref a base model π_θ has drifted from, T = 5",
        shows=("kl-no-gradient", "kl-forward", "kl-token-local"),
    )


CLIP_REWARD = 10.0
"""The ``clip`` problem's reward for a right answer (0 otherwise)."""


def scored(answer: int = A, points: float = CLIP_REWARD) -> Callable[..., float]:
    """R(q, o) = ``points`` if o begins with ``answer``, else 0: a score, not a 0/1 check."""
    right = answers_first(answer, needs_eos=False)
    return lambda prompt, completion: points * right(prompt, completion)


def clip_problem() -> SequenceProblem:
    """Rewards on a score's scale, so that a batch's gradient norm exceeds 1.

    The gradient of a REINFORCE loss is linear in the reward, ∇ = −(1/N) Σᵢ Aᵢ Σₜ ∇ℓᵢₜ: on
    the 0/1 problems a batch's norm is ≈ 0.3–0.5 (for the leave-one-out baseline), below the
    ``max_norm`` 1 that TRL and verl clip at, so no clip binds there. Here a right answer
    scores 10, and the norm is ≈ 5 (above 1 in nearly every batch; a test). Two prompts
    solved ≈ 70 % and 30 % of the time; as in ``difficulty``, every answer token has the same
    continuation row, so the length is independent of the reward given the prompt. What it
    shows is the step's (``gradient-clipped``, read from ``clip_grad_norm_``'s record), not a
    mistake with an exact expectation, so its ``shows`` is empty.
    """
    same = [-1.0, 0.0, 0.0, 0.0]
    token = _rows(A=same, B=same, C=same)
    prompt = _rows(A=[0.0, 1.54, 0.0, 0.0], B=[0.0, -0.15, 0.0, 0.0])
    return _problem(
        token,
        prompt,
        [[A, C], [B, C]],
        scored(A),
        name="clip",
        description="rewards 0 or 10, prompts solved 70 % and 30 %: gradient norm ≈ 5, T = 5",
        blind_to=(NO_KL,),
    )


PROBLEMS: dict[str, Callable[[], SequenceProblem]] = {
    "length": length_problem,
    "difficulty": difficulty_problem,
    "kl": kl_problem,
}
"""The built-in sequence problems by name (the lab's and the check's)."""

STEP_PROBLEMS: dict[str, Callable[[], SequenceProblem]] = {"clip": clip_problem}
"""Problems built for a training step's own mechanisms (``check --form step``): the check's
only, not the lab's estimators'."""


def get_problem(name: str) -> SequenceProblem:
    """The built-in sequence problem called ``name`` (of :data:`PROBLEMS` or :data:`STEP_PROBLEMS`).

    Raises:
        ValueError: an unknown name; the message lists the known ones.
    """
    known = {**PROBLEMS, **STEP_PROBLEMS}
    if name not in known:
        raise ValueError(
            f"unknown sequence problem {name!r}; choose one of {', '.join(known)} or all"
        )
    return known[name]()


__all__ = [
    "CLIP_REWARD",
    "PROBLEMS",
    "STEP_PROBLEMS",
    "answers_first",
    "clip_problem",
    "difficulty_problem",
    "get_problem",
    "kl_problem",
    "length_problem",
    "scored",
]
