r"""The episodes family of ``eligibility check``: a loss over episodes of several turns.

The problems are the lab's exact two-turn environment
(:class:`~eligibility.lab.sequence.episodes.TwoTurnProblem`): the model replies, the world
answers (a header and an observation, tokens of the model's own vocabulary), the model replies
again; per-turn rewards; ∇J by enumeration. The user's ``fn(model, batch)`` gets a batch of
episodes (:class:`~eligibility.lm.episodes.Episodes`: every token after the prompt in
``completion_ids``, ``completion_mask`` 1 on the model's tokens only, ``turn``,
``turn_rewards`` [N, K], ``group_size``, ``beta``, ``ref_logps`` of every token,
``max_completion_length`` the most tokens after the prompt an episode holds, the world's
included, and ``eos_id``) and returns the loss. Its mean ĝ is held against ∇J, and against the
exact expectations of the mask mistakes:

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

**A framework's episode loss.** Where the user's estimates are biased and none of the mistakes
above is them batch by batch, the check also tries the option table's rows as a framework
builds its episode loss (:func:`wide_variants`: a mask, a weighting, a baseline, a scale, an
aggregation and a KL placement), on the same batches: TRL's ``GRPOTrainer`` gives every token
of an episode its one advantage (``turns-weighted-by-whole-return``), which beside a length or
std normaliser does change the mean, so it is named with them. There are hundreds of
combinations: the ones nearest the user's estimates on the first batches are computed on all
(:data:`SCREENED`), from every token's score ∇θ ℓ computed once (:class:`Wide`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from functools import cached_property
from typing import Any

import numpy as np

from eligibility.check import user
from eligibility.check.audit import Recorder
from eligibility.check.family import Draw, Family, Trial
from eligibility.check.mistakes import meanings, named

G = 2
PILOT = 300


def enumerated(lab: Any) -> tuple[Any, np.ndarray, np.ndarray]:
    """Every episode of a two-turn lab problem as one batch, each row's prompt, π(e | q).

    Each episode as ``finetune`` plays it: the model's first reply, the world's answer (its
    header and observation), the model's second reply, a reward after each turn.
    """
    from eligibility.lm.episodes import Episode, batch_of

    rows, prompt_of, probs = [], [], []
    for q in range(len(lab.prompts)):
        for e in lab.episodes(q):
            ep, cut = Episode(e.prompt), e.model.index(False)
            back = e.model.index(True, cut)  # the world's answer: from cut to back
            ep.act(e.tokens[:cut], [0.0] * cut, ended=e.tokens[cut - 1] == 0)
            ep.reward(e.rewards[0])
            ep.answer(e.tokens[cut:back])
            ep.act(e.tokens[back:], [0.0] * (len(e.tokens) - back), ended=True)
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
        **world: the world's answers (``TwoTurnProblem``'s ``header`` and ``long_answers``).
    """

    def __init__(
        self, name: str, beta: float, *, second_turn_rewarded: bool = True, **world: Any
    ) -> None:
        from eligibility.lab.sequence.episodes import TwoTurnProblem

        self.name, self.beta = name, beta
        self.lab = TwoTurnProblem(
            beta=beta, seed=1, second_turn_rewarded=second_turn_rewarded, **world
        )

    @cached_property
    def exact(self) -> np.ndarray:
        """∇J(θ), by enumeration."""
        return self.lab.objective()[1]

    @cached_property
    def max_completion_length(self) -> int:
        """The most tokens after the prompt an episode holds, the world's included."""
        every, _, _ = self.enumerated
        return int((every.turn >= 0).sum(1).max())

    @cached_property
    def enumerated(self) -> tuple[Any, np.ndarray, np.ndarray]:
        """(every episode as one batch, each row's prompt, π(e | q)): :func:`enumerated`."""
        return enumerated(self.lab)


def _batch(problem: EpisodesProblem, index: np.ndarray, mask: Any = None) -> Any:
    """The rows ``index`` as a batch, with the contract's extra fields (``mask``: a wrong one)."""
    import torch

    from eligibility.lab.sequence.episodes import EOS
    from eligibility.lm.sample import token_logps

    every, _, _ = problem.enumerated
    batch = every.select(torch.as_tensor(index))
    if mask is not None:
        batch.completion_mask = mask[torch.as_tensor(index)]
    with torch.no_grad():
        ref = token_logps(problem.lab.ref_model, batch, vocab_size=problem.lab.vocab_size)
    batch.ref_logps, batch.beta, batch.group_size = ref, problem.beta, G
    batch.max_completion_length, batch.eos_id = problem.max_completion_length, EOS
    return batch


def reference_loss(model: Any, batch: Any) -> Any:
    """RLOO per turn over the packed model tokens, KL as a reward-to-go (``lm.objective.loss``)."""
    from eligibility.lm.sample import token_logps

    return _loss(token_logps(model, batch, vocab_size=model.vocab_size), batch)


def _loss(logps: Any, batch: Any, weighting: str = "reward-to-go", **form: str) -> Any:
    """The reference loss (``form``: option rows in place of the defaults, a mistake's forms).

    ``form`` is ``baseline="none"``, ``aggregation="sequence-mean"``, say.
    """
    from eligibility.lm.credit import Credit
    from eligibility.lm.objective import loss
    from eligibility.torch import options

    credit = Credit(batch.turn_rewards, batch.turn, weighting)
    t_max = batch.max_completion_length  # the world's tokens counted, as TRL's tool loop does
    value, _ = loss(logps, credit, batch.completion_mask, group_size=G,
                    max_completion_length=t_max, beta=batch.beta, ref_logps=batch.ref_logps,
                    **{**options.DEFAULTS, **form})  # fmt: skip
    return value


WHOLE_RETURN = named("turns-weighted-by-whole-return")
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


EPISODE_EOS, EPISODE_B = 0, 2
"""The lab's EOS and b (``lab.sequence.episodes``): a role header of two tokens, (EOS, b)."""

WORLD = named("world-tokens-trained")
NORMALISED = named("length-normalised")
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
        return (
            f"{WHOLE_RETURN} alone changes no mean and is told on two-turn-first-pays "
            "only (beside a std or a length normaliser it moves the mean, and is named)",
        )
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


TRUNCATED = named("truncated-masked")
"""An episode whose last token is not EOS (its last reply cut at T) left out of the loss (TRL's
``mask_truncated_completions``, which reads the completion's last token)."""
WIDE = {
    "baseline": ("rloo", "mean"),
    "scale": ("none", "group-std", "batch-std"),
    "aggregation": ("sequence-sum", "sequence-mean", "token-mean", "constant"),
}
"""The option table's rows a framework's episode loss is tried as (:func:`wide_variants`)."""
KLS = ("reward-to-go", "none", "k3-ratio", "k3")
"""The KL rows tried where the objective holds a KL (β > 0); ``reward-to-go`` alone elsewhere."""
SCREENED = (40, 12)
"""(M, K): every wide variant is computed on the first M batches, and the K nearest the user's
estimates there on all N (a wide variant costs a loss call a batch; there are hundreds)."""


def wide_ended(problem: EpisodesProblem) -> np.ndarray:
    """[E] each enumerated episode's last reply stopped at EOS (not cut at T)."""
    from eligibility.lab.sequence.episodes import EOS

    every, _, _ = problem.enumerated
    last = every.completion_ids.gather(1, (every.turn >= 0).sum(1, keepdim=True) - 1)[:, 0]
    return (last == EOS).numpy()


class Wide:
    """Every token's log-prob and score ∇θ ℓ of the enumeration at θ, for the wide variants.

    A variant's estimate on a batch is then −Σᵢₜ (∂loss/∂ℓᵢₜ) ∇θ ℓᵢₜ: one call of its loss on
    the batch's log-probs (held), no forward pass of the model.
    """

    def __init__(self, problem: EpisodesProblem) -> None:
        import torch
        from torch.func import functional_call, jacfwd

        from eligibility.lab.sequence.episodes import EOS
        from eligibility.lm.sample import token_logps

        every, _, _ = problem.enumerated
        self.problem = problem
        self.all_tokens = (every.turn >= 0).long()
        model = problem.lab.model
        whole = every.select(torch.arange(len(every.completion_ids)))
        whole.completion_mask = self.all_tokens  # every token's log-prob, the world's too

        def logps(params: dict[str, Any]) -> Any:
            forward = functools.partial(functional_call, model, params)
            return token_logps(_Called(forward), whole, vocab_size=problem.lab.vocab_size)

        params = {k: v.detach() for k, v in model.named_parameters()}
        self.logps = logps(params).detach()
        jac = jacfwd(logps)(params)  # 39 parameters: forward mode, one pass each
        self.scores = torch.cat([jac[k].flatten(2) for k, _ in model.named_parameters()], 2)
        last = every.completion_ids.gather(1, self.all_tokens.sum(1, keepdim=True) - 1)[:, 0]
        self.ended = last == EOS  # the last reply stopped at EOS (not cut at T)

    def estimates(self, rows: np.ndarray, variants: list[tuple[str, str, dict[str, str]]]):
        """[len(variants), n, p] each variant's ĝ on each batch of ``rows`` ([n, Q·G])."""
        import torch

        out = np.zeros((len(variants), len(rows), self.scores.shape[-1]))
        for b, r in enumerate(rows):
            index = torch.as_tensor(r)
            batch = _batch(self.problem, r)
            model_mask = batch.completion_mask
            masks = {
                "model": model_mask,
                WORLD: self.all_tokens[index],
                TRUNCATED: model_mask * self.ended[index, None].long(),
            }
            s = self.scores[index].double()
            for v, (mask, weighting, form) in enumerate(variants):
                held = self.logps[index].clone().requires_grad_(True)
                batch.completion_mask = masks[mask]
                (d,) = torch.autograd.grad(_loss(held, batch, weighting, **form), held)
                out[v, b] = -torch.einsum("it,itp->p", d.double(), s).numpy()
        return out


class _Called:
    """A functional call of the model, seen as the model (``lm.sample.token_logps`` calls it)."""

    def __init__(self, forward: Callable[..., Any]) -> None:
        self.forward = forward

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(args, kwargs)


def wide_variants(problem: EpisodesProblem) -> list[tuple[str, tuple[str, str, dict[str, str]]]]:
    """(diagnosis, (mask, weighting, form)) of each wide variant holding a mistake of the mean.

    Every combination of a mask (the model's tokens, every token, the truncated episodes
    left out), a weighting (each turn by its reward-to-go, or by the whole return: what one
    reward an episode gives every token, as TRL's reward functions do) and one row of each kind
    of :data:`WIDE` and :data:`KLS` (the option table's). Named by its mistakes in that order;
    a combination whose only change is a step size (a group mean including the sample, a
    constant normaliser) or the whole-return weighting changes no mean's direction and is left
    to the rescaling and :attr:`Trial.held_at_zero`.
    """
    import itertools

    from eligibility.torch import options

    kls = KLS if problem.beta > 0 else ("reward-to-go",)
    out = []
    for mask, weighting, baseline, scale, aggregation, kl in itertools.product(
        ("model", WORLD, TRUNCATED), ("reward-to-go", "outcome"), *WIDE.values(), kls
    ):
        form = {"baseline": baseline, "scale": scale, "aggregation": aggregation, "kl": kl}
        rows = [options.row(kind, name).mistake for kind, name in form.items()]
        named = [n for n in (mask if mask != "model" else None, *rows) if n]
        if not named:
            continue
        if weighting == "outcome":
            named.insert(1 if mask != "model" else 0, WHOLE_RETURN)
        out.append((", ".join(dict.fromkeys(named)), (mask, weighting, form)))
    return out


def _closer(problem: EpisodesProblem, rows: np.ndarray, theta: list[Any]) -> Callable[..., Any]:
    """The draw's ``closer``: the wide variants nearest the user's estimates (:data:`SCREENED`).

    Every wide variant on the first M batches; the K nearest the user's G there, batch by
    batch (:func:`~eligibility.check.verdict.relative_residual`), on all N.
    """

    def closer(G: np.ndarray) -> list[tuple[str, np.ndarray]]:
        from eligibility.check.verdict import relative_residual

        user.reset_policy(list(problem.lab.model.parameters()), theta)
        wide = Wide(problem)
        named = wide_variants(problem)
        m, k = SCREENED
        first = wide.estimates(rows[:m], [v for _, v in named])
        near = np.argsort([relative_residual(G[:m], V) for V in first])[:k]
        every = wide.estimates(rows, [named[i][1] for i in near])
        return [(named[i][0], every[j]) for j, i in enumerate(near)]

    return closer


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
        recorder = Recorder(sign=sign)

        def step(k: int) -> np.ndarray | None:
            user.reset_policy(params, theta)
            batch = _batch(problem, rows[k])
            if not recorder.wants(k):
                return user.call(fn, (model, batch), params, sign, theta)
            with recorder.tap(k, model=model, batch=batch) as tap:
                g = user.call(fn, (model, batch), params, sign, theta, tap=tap)
            truncated = ~wide_ended(problem)[rows[k]]
            recorder.record(recorder.episodes, batch, tap, k, truncated, problem.beta)
            return g

        return Draw(
            step=step,
            setup=lambda: torch.manual_seed(seed),
            summary=recorder.summary,
            references={"variance_ratio": estimates(rows)},
            variants=[(name, estimates(rows, m, form)) for name, m, form in variants],
            closer=_closer(problem, rows, theta),
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
        "two-turn-long-answers": lambda: EpisodesProblem(
            "two-turn-long-answers", 0.0, header=(EPISODE_EOS, EPISODE_B), long_answers=True
        ),
    },
    forms=("model",),
    arguments={"model": ("model", "batch")},
    trial=trial,
    diagnoses=meanings("episodes"),
    reference="RLOO per turn over the model's tokens (reward-to-go, KL as a reward-to-go)",
    min_samples=400,
    kl_problems=("two-turn-kl",),
    batch=lambda report: "a batch of episodes (one group of 2 per prompt) per call",
)
"""The episodes family of ``eligibility check``."""


__all__ = ["FAMILY", "WHOLE_RETURN", "EpisodesProblem", "reference_loss", "trial"]
