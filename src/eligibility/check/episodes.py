r"""The episodes family of ``eligibility check``: a loss over episodes of several turns.

The problems are the lab's exact two-turn environment
(:class:`~eligibility.lab.sequence.episodes.TwoTurnProblem`): the model replies, the world
answers (a header and an observation, tokens of the model's own vocabulary), the model replies
again; per-turn rewards; ∇J by enumeration. The user's ``fn(model, batch)`` gets a batch of
episodes (:class:`~eligibility.lm.episodes.Episodes`: every token after the prompt in
``completion_ids``, ``completion_mask`` 1 on the model's tokens only, ``turn``,
``turn_rewards`` [N, K], ``group_size``, ``beta``, ``ref_logps`` of every token) and returns the
loss. Its mean ĝ is held against ∇J, and against the exact expectations of the mask mistakes:

* ``world-tokens-trained``: the world's tokens (a tool's result, an observation, the template's
  headers) scored as the policy's;
* ``model-tokens-after-answer-dropped``: the model's tokens after the world's first answer left
  out (a mask of the first reply only).

Weighting each turn by the whole return instead of the reward-to-go is not among them: rewards
of earlier turns are fixed given the history, so E[ĝ] is ∇J either way (more variance only).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

import numpy as np

from eligibility.check import user
from eligibility.check.family import Draw, Family, Trial

G = 2
PILOT = 300


def enumerated(lab: Any) -> tuple[Any, np.ndarray, np.ndarray]:
    """Every episode of a two-turn lab problem as one batch, each row's prompt, π(e | q).

    Each episode as ``finetune`` plays it: the model's first reply, the world's two-token
    answer, the model's second reply, a reward after each turn.
    """
    from eligibility.lm.episodes import Episode, batch_of

    rows, prompt_of, probs = [], [], []
    for q in range(len(lab.prompts)):
        for e in lab.episodes(q):
            ep, cut = Episode(e.prompt), e.model.index(False)
            ep.act(e.tokens[:cut], [0.0] * cut, ended=e.tokens[cut - 1] == 0)
            ep.reward(e.rewards[0])
            ep.answer(e.tokens[cut : cut + 2])
            ep.act(e.tokens[cut + 2 :], [0.0] * (len(e.tokens) - cut - 2), ended=True)
            ep.reward(e.rewards[1])
            rows.append(ep)
            prompt_of.append(q)
        probs.append(lab.probabilities(q).numpy())
    batch = batch_of(rows, eos_id=0, max_turns=2)
    return batch, np.asarray(prompt_of), np.concatenate(probs)


class EpisodesProblem:
    """A two-turn problem at θ, with its enumerated episodes as one batch.

    Args:
        name: the key of ``--problem``.
        beta: β of J.
    """

    def __init__(self, name: str, beta: float) -> None:
        from eligibility.lab.sequence.episodes import TwoTurnProblem

        self.name, self.lab = name, TwoTurnProblem(beta=beta, seed=1)
        self.beta = beta

    @cached_property
    def exact(self) -> np.ndarray:
        """∇J(θ), by enumeration."""
        return self.lab.objective()[1]

    @cached_property
    def enumerated(self) -> tuple[Any, np.ndarray, np.ndarray]:
        """(every episode as one batch, each row's prompt, π(e | q)): :func:`enumerated`."""
        return enumerated(self.lab)


def _batch(problem: EpisodesProblem, index: np.ndarray, mask: Any = None) -> Any:
    """The rows ``index`` as a batch, with the contract's extra fields (``mask``: a wrong one)."""
    import torch

    from eligibility.lm.episodes import select
    from eligibility.lm.sample import token_logps

    every, _, _ = problem.enumerated
    batch = select(every, torch.as_tensor(index))
    if mask is not None:
        batch.completion_mask = mask[torch.as_tensor(index)]
    with torch.no_grad():
        ref = token_logps(problem.lab.ref_model, batch, vocab_size=problem.lab.vocab_size)
    batch.ref_logps, batch.beta, batch.group_size = ref, problem.beta, G
    return batch


def reference_loss(model: Any, batch: Any) -> Any:
    """RLOO per turn over the packed model tokens, KL as a reward-to-go (``lm.episodes.loss``)."""
    from eligibility.lm.sample import token_logps

    return _loss(token_logps(model, batch, vocab_size=model.vocab_size), batch)


def _loss(logps: Any, batch: Any) -> Any:
    from eligibility.lm.episodes import loss
    from eligibility.torch import options

    m = batch.completion_mask
    t_max = max(2 * 2, m.shape[1])
    value, _ = loss(logps, batch.turn_rewards, m, batch.turn, weighting="reward-to-go",
                    group_size=G, max_completion_length=t_max, beta=batch.beta,
                    ref_logps=batch.ref_logps, **options.DEFAULTS)  # fmt: skip
    return value


def _masks(problem: EpisodesProblem) -> dict[str, Any]:
    every, _, _ = problem.enumerated
    return {
        "world-tokens-trained": (every.turn >= 0).long(),
        "model-tokens-after-answer-dropped": (
            (every.turn == 0) & every.completion_mask.bool()
        ).long(),
    }


def _rows(problem: EpisodesProblem, n: int, rng: np.random.Generator) -> np.ndarray:
    """[n, Q·G] episode indices: each batch a group of G episodes of every prompt."""
    _, prompt_of, p = problem.enumerated
    out = []
    for q in range(len(problem.lab.prompts)):
        idx = np.flatnonzero(prompt_of == q)
        out.append(rng.choice(idx, size=(n, G), p=p[idx] / p[idx].sum()))
    return np.concatenate(out, axis=1)


def _expected(problem: EpisodesProblem, mask: Any) -> np.ndarray:
    """E[ĝ] of the reference loss with ``mask``, exact.

    Every group of every prompt in one batch; the loss's gradient with respect to the
    log-probs, weighted by each group's probability, carried to θ by autograd.
    """
    import torch

    from eligibility.lm.sample import token_logps

    _, prompt_of, p = problem.enumerated
    of = [np.flatnonzero(prompt_of == q) for q in range(len(problem.lab.prompts))]
    pairs = [(i, j) for idx in of for i in idx for j in idx]
    index = np.asarray(pairs).reshape(-1)
    batch = _batch(problem, index, mask)
    model = problem.lab.model
    params = list(model.parameters())
    logps = token_logps(model, batch, vocab_size=problem.lab.vocab_size)
    held = logps.detach().requires_grad_(True)
    (d,) = torch.autograd.grad(_loss(held, batch), held)
    w = torch.as_tensor(p[index[0::2]] * p[index[1::2]] * len(pairs) / len(problem.lab.prompts))
    d = d * w.repeat_interleave(G)[:, None].to(d.dtype)
    grads = torch.autograd.grad(logps, params, grad_outputs=-d)
    return torch.cat([g.reshape(-1) for g in grads]).double().numpy()


def trial(problem: EpisodesProblem, fn: Callable[..., Any], config: Any, seed: int) -> Trial:
    """The episodes problem as the engine sees it (see the module docstring)."""
    import torch

    rng = np.random.default_rng(seed)
    sign = 1.0 if config.objective else -1.0
    model = problem.lab.model
    params = list(model.parameters())
    theta = [q.detach().clone() for q in params]
    masks = _masks(problem)

    def estimates(rows: np.ndarray, mask: Any = None) -> np.ndarray:
        out = []
        for r in rows:
            user.reset_policy(params, theta)
            g = torch.autograd.grad(reference_loss(model, _batch(problem, r, mask)), params)
            out.append(-torch.cat([x.reshape(-1) for x in g]).double().numpy())
        return np.asarray(out)

    def draw(n: int) -> Draw:
        rows = _rows(problem, n, rng)

        def step(k: int) -> np.ndarray | None:
            user.reset_policy(params, theta)
            return user.call(fn, (model, _batch(problem, rows[k])), params, sign, theta)

        return Draw(
            step=step,
            setup=lambda: torch.manual_seed(seed),
            references={"variance_ratio": estimates(rows)},
            variants=[(name, estimates(rows, m)) for name, m in masks.items()],
        )

    expectations = {name: _expected(problem, m) for name, m in masks.items()}
    pilot = estimates(_rows(problem, PILOT, rng))
    return Trial(
        name=problem.name,
        exact=problem.exact,
        sigma=pilot.std(axis=0, ddof=1),
        draw=draw,
        expectations=expectations,
        J=problem.lab.objective()[0],
    )


FAMILY = Family(
    name="episodes",
    problems={
        "two-turn": lambda: EpisodesProblem("two-turn", 0.0),
        "two-turn-kl": lambda: EpisodesProblem("two-turn-kl", 0.3),
    },
    forms=("model",),
    arguments={"model": ("model", "batch")},
    trial=trial,
    diagnoses={
        "world-tokens-trained": "the world's tokens (a tool's result, an observation, the "
        "template's headers) scored as the policy's: mask with batch.completion_mask, 1 on the "
        "model's tokens only",
        "model-tokens-after-answer-dropped": "the model's tokens after the world's first "
        "answer left out of the loss: every reply is the policy's, the later ones too",
    },
    reference="RLOO per turn over the model's tokens (reward-to-go, KL as a reward-to-go)",
    min_samples=400,
    kl_problems=("two-turn-kl",),
    batch=lambda report: "a batch of episodes (one group of 2 per prompt) per call",
)
"""The episodes family of ``eligibility check``."""


__all__ = ["FAMILY", "EpisodesProblem", "reference_loss", "trial"]
