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

The third, ``turns-weighted-by-whole-return`` (each turn's tokens weighted by the episode's
whole return G₁ where the rewards come per turn, instead of the reward-to-go Gₖ), changes no
mean: rewards of earlier turns are fixed given the history, E[r₁ ∇ln π(o⁽²⁾ | …)] = 0. It is
told batch by batch on ``two-turn-first-pays``, where the second reply earns nothing and r₁
varies: there the exact reward-to-go term of every second reply is 0 on every episode, so the
components of θ only the second reply is scored through are 0 on every batch of a correct
estimator (any baseline of the group's G₂), and whole-return weighting moves them (verdict
``excess variance``, :func:`~eligibility.check.verdict.moved_from_zero`).
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
        second_turn_rewarded: False: r₂ ≡ 0 (only the first reply earns).
    """

    def __init__(self, name: str, beta: float, *, second_turn_rewarded: bool = True) -> None:
        from eligibility.lab.sequence.episodes import TwoTurnProblem

        self.name, self.beta = name, beta
        self.lab = TwoTurnProblem(beta=beta, seed=1, second_turn_rewarded=second_turn_rewarded)

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

    from eligibility.lm.sample import token_logps

    every, _, _ = problem.enumerated
    batch = every.select(torch.as_tensor(index))
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


def _loss(logps: Any, batch: Any, weighting: str = "reward-to-go", **form: str) -> Any:
    """The reference loss (``form``: option rows in place of the defaults, a mistake's forms).

    ``form`` is ``baseline="none"``, ``aggregation="sequence-mean"``, say.
    """
    from eligibility.lm.episodes import loss
    from eligibility.torch import options

    m = batch.completion_mask
    t_max = max(2 * 2, m.shape[1])
    value, _ = loss(logps, batch.turn_rewards, m, batch.turn, weighting=weighting,
                    group_size=G, max_completion_length=t_max, beta=batch.beta,
                    ref_logps=batch.ref_logps, **{**options.DEFAULTS, **form})  # fmt: skip
    return value


WHOLE_RETURN = "turns-weighted-by-whole-return"
"""The mistake of mean zero: each turn weighted by the whole return under per-turn rewards."""


def _masks(problem: EpisodesProblem) -> dict[str, Any]:
    """The mask mistakes this problem can tell from ∇J by their mean, each as its mask.

    Where the second reply earns nothing, dropping it changes no batch's estimate (its
    reward-to-go advantage is 0): that mistake is left to the other problems.
    """
    every, _, _ = problem.enumerated
    masks = {WORLD: (every.turn >= 0).long()}
    if problem.lab.second_turn_rewarded:
        first = (every.turn == 0) & every.completion_mask.bool()
        masks["model-tokens-after-answer-dropped"] = first.long()
    return masks


WORLD = "world-tokens-trained"
NORMALISED = "length-normalised"
"""Each episode's token terms divided by its own count of tokens (``aggregation``
``sequence-mean``): the engine's diagnosis of the sequence family, on episodes too."""
FORMS: tuple[dict[str, str], ...] = ({}, {"baseline": "none"})
"""The forms a user writes a mistake in: the reference's leave-one-out baseline, and none."""


def _variants(problem: EpisodesProblem) -> list[tuple[str, Any, dict[str, str]]]:
    """(diagnosis, mask, form) of each mistake the check names, in every form a user writes it.

    Each mask mistake with or without a baseline, summed over the episode's tokens or
    normalised by their count (then named with ``length-normalised`` too), and the right mask
    normalised per episode (``length-normalised`` alone): the same mistake reads the same name
    whichever baseline and aggregation surround it.
    """
    every, _, _ = problem.enumerated
    out = []
    for form in FORMS:
        per_episode = {**form, "aggregation": "sequence-mean"}
        out += [(name, m, form) for name, m in _masks(problem).items()]
        out.append((f"{WORLD}, {NORMALISED}", _masks(problem)[WORLD], per_episode))
        out.append((NORMALISED, every.completion_mask, per_episode))
    return out


def _blind_to(problem: EpisodesProblem) -> tuple[str, ...]:
    if problem.lab.second_turn_rewarded:
        return (f"{WHOLE_RETURN} changes no mean and is told on two-turn-first-pays only",)
    return ("model-tokens-after-answer-dropped cannot show here (the second reply earns "
            "nothing, its terms are 0): two-turn and two-turn-kl show it",)  # fmt: skip


def _rows(problem: EpisodesProblem, n: int, rng: np.random.Generator) -> np.ndarray:
    """[n, Q·G] episode indices: each batch a group of G episodes of every prompt."""
    _, prompt_of, p = problem.enumerated
    out = []
    for q in range(len(problem.lab.prompts)):
        idx = np.flatnonzero(prompt_of == q)
        out.append(rng.choice(idx, size=(n, G), p=p[idx] / p[idx].sum()))
    return np.concatenate(out, axis=1)


def _expected(problem: EpisodesProblem, mask: Any, weighting: str = "reward-to-go") -> np.ndarray:
    """E[ĝ] of the reference loss with ``mask`` (and ``weighting``), exact.

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
    (d,) = torch.autograd.grad(_loss(held, batch, weighting), held)
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
    variants = _variants(problem)

    def estimates(rows: np.ndarray, mask: Any = None, form: dict[str, str] | None = None):
        from eligibility.lm.sample import token_logps

        out = []
        for r in rows:
            user.reset_policy(params, theta)
            batch = _batch(problem, r, mask)
            logps = token_logps(model, batch, vocab_size=model.vocab_size)
            g = torch.autograd.grad(_loss(logps, batch, **(form or {})), params)
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
            variants=[(name, estimates(rows, m, form)) for name, m, form in variants],
        )

    expectations = {name: _expected(problem, m) for name, m in masks.items()}
    pilot = estimates(_rows(problem, PILOT, rng))
    lab = problem.lab
    return Trial(
        name=problem.name,
        exact=problem.exact,
        sigma=pilot.std(axis=0, ddof=1),
        draw=draw,
        expectations=expectations,
        blind_to=_blind_to(problem),
        J=lab.objective()[0],
        held_at_zero={} if lab.second_turn_rewarded else {WHOLE_RETURN: lab.only_turn(1)},
    )


FAMILY = Family(
    name="episodes",
    problems={
        "two-turn": lambda: EpisodesProblem("two-turn", 0.0),
        "two-turn-kl": lambda: EpisodesProblem("two-turn-kl", 0.3),
        "two-turn-first-pays": lambda: EpisodesProblem(
            "two-turn-first-pays", 0.0, second_turn_rewarded=False
        ),
    },
    forms=("model",),
    arguments={"model": ("model", "batch")},
    trial=trial,
    diagnoses={
        WORLD: "the world's tokens (a tool's result, an observation, the "
        "template's headers) scored as the policy's: mask with batch.completion_mask, 1 on the "
        "model's tokens only",
        "model-tokens-after-answer-dropped": "the model's tokens after the world's first "
        "answer left out of the loss: every reply is the policy's, the later ones too",
        NORMALISED: "each episode's token terms divided by its own number of tokens: an "
        "episode's weight depends on its length (sum them, divide by a constant)",
        WHOLE_RETURN: "each turn's tokens weighted by the episode's whole return where the "
        "rewards come per turn: a later turn carries the rewards of earlier ones, which it "
        "cannot change (the same mean, more variance)",
    },
    reference="RLOO per turn over the model's tokens (reward-to-go, KL as a reward-to-go)",
    min_samples=400,
    kl_problems=("two-turn-kl",),
    batch=lambda report: "a batch of episodes (one group of 2 per prompt) per call",
)
"""The episodes family of ``eligibility check``."""


__all__ = ["FAMILY", "WHOLE_RETURN", "EpisodesProblem", "reference_loss", "trial"]
