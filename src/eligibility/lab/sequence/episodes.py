r"""An exact two-turn problem: the model replies, the world answers, the model replies again.

A prompt q (one token); the model's first reply o⁽¹⁾ (at most T tokens, ending at its first
EOS or cut at T); the world's answer w = (h, y): a header token h (a chat template's role
header) and an observation y drawn from p(y | q, o⁽¹⁾); the model's second reply o⁽²⁾; the
rewards r₁(q, o⁽¹⁾) and r₂(q, o⁽¹⁾, y, o⁽²⁾) (with ``header`` a role header of several
tokens, and ``long_answers`` an observation b of two tokens (b, EOS): world answers of varying
length). Every episode is enumerated
(7 replies × 2 observations × 7 replies a prompt with V = 3, T = 2), so with

    π(e | q) = π_θ(o⁽¹⁾ | q) · p(y | q, o⁽¹⁾) · π_θ(o⁽²⁾ | q, o⁽¹⁾, h, y)

the objective is an exact finite sum,

    J(θ) = (1/Q) Σ_q Σ_e π(e | q) [r₁ + r₂ − β (log π_θ(o | …) − log π_ref(o | …))],

the KL over the model's tokens only (the world's factor is the same under both policies).
∇J is torch autograd through that sum in float64; the log-probabilities are read from the
model's logits here (a log-softmax and a gather), sharing nothing with the option table.

The world's tokens are ids of the model's own vocabulary (h is EOS, y is a or b): a loss that
scores them as the policy's gets a different gradient, which is how a test tells.

With a sampler's processing (``top_k``, ``top_p``, ``min_p``, ``repetition_penalty``, as
``transformers``' warpers define them) the policy is the distribution sampled: at each model
token, with z′ the logits penalised where the token was seen before (z/θ if z > 0, else z·θ),
K the kept set (top-k, then top-p, then min-p, each on what the one before kept) and

    π̃(v | …) = exp z′ᵥ / Σ_{u ∈ K} exp z′ᵤ  (v ∈ K; 0 elsewhere),

J is E_π̃ and ∇J its gradient with every K held fixed (a constant of θ almost everywhere). The
kept sets are found here by a plain loop over each position (sharing nothing with
``lm.truncation``); the reference of the KL stays the full policy (``finetune``'s).

With ``second_turn_rewarded=False`` the second reply earns nothing (r₂ ≡ 0) while r₁ varies:
turn 2's reward-to-go is then 0 on every episode, so the exact per-episode Williams term of
its tokens, (Σ_{t ∈ turn 2} ∇ℓₜ)(G₂ − b₂), is 0 however b₂ is taken from the group, and the
components of θ that only the second reply's tokens are scored through
(:meth:`TwoTurnProblem.only_turn`) get exactly 0 from every batch of a correct estimator. One
that weights turn 2 by the whole return G₁ = r₁ moves them on every batch whose r₁ vary: the
same mean (E[r₁ ∇ln π(o⁽²⁾ | …)] = 0), terms no correct estimator has.
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch

from eligibility.lab.sequence.model import TinyCausalLM

EOS, A, B = 0, 1, 2
HEADER = EOS
"""The world's role header: a token the policy did not choose, of its own vocabulary."""


def replies(vocab_size: int, t_max: int, eos: int = EOS) -> list[tuple[int, ...]]:
    """Every reply: k non-EOS tokens then EOS (k < T), or T non-EOS tokens (cut at T)."""
    words = [v for v in range(vocab_size) if v != eos]
    out: list[tuple[int, ...]] = []
    for k in range(t_max + 1):
        for body in itertools.product(words, repeat=k):
            out.append((*body, eos) if k < t_max else body)
    return out


def observe(q: int, reply: tuple[int, ...]) -> dict[int, float]:
    """p(y | q, o⁽¹⁾): a is likelier when the reply starts with the prompt's token."""
    p_a = 0.75 if reply[:1] == (q,) else 0.3
    return {A: p_a, B: 1.0 - p_a}


def first_reward(q: int, reply: tuple[int, ...]) -> float:
    """r₁: ½ for a reply that starts with q and stops (EOS), ¼ for one that starts with q."""
    if reply[:1] != (q,):
        return 0.0
    return 0.5 if reply[-1] == EOS else 0.25


def second_reward(q: int, first: tuple[int, ...], y: int, reply: tuple[int, ...]) -> float:
    """r₂: 1 for echoing the observation then EOS, 0.4 for echoing it, −0.2 for an empty reply."""
    if reply == (EOS,):
        return -0.2
    if reply[:1] != (y,):
        return 0.1 * (len(first) == 1)
    return 1.0 if reply == (y, EOS) else 0.4


def _kept(z: list[float], top_k: int, top_p: float, min_p: float | None) -> list[int]:
    """The tokens a sampler keeps of logits ``z``: top-k, then top-p, then min-p, in a loop.

    top-k: z ≥ the k-th largest; top-p: with the survivors in ascending order, those whose
    running softmax mass is ≤ 1 − p are cut (the largest stays); min-p: probability ≥
    min_p · the largest, on the survivors' softmax.
    """
    kept = list(range(len(z)))
    if top_k > 0:
        bar = sorted(z, reverse=True)[min(top_k, len(z)) - 1]
        kept = [v for v in kept if z[v] >= bar]

    def softmax(vs: list[int]) -> dict[int, float]:
        top = max(z[v] for v in vs)
        e = {v: math.exp(z[v] - top) for v in vs}
        return {v: x / sum(e.values()) for v, x in e.items()}

    if top_p < 1.0:
        p, running, cut = softmax(kept), 0.0, set()
        ascending = sorted(kept, key=lambda v: z[v])
        for v in ascending[:-1]:
            running += p[v]
            if running <= 1 - top_p:
                cut.add(v)
        kept = [v for v in kept if v not in cut]
    if min_p is not None:
        p = softmax(kept)
        kept = [v for v in kept if p[v] >= min_p * max(p.values())]
    return kept


@dataclass(frozen=True)
class Enumerated:
    """One episode of the enumeration.

    Attributes:
        prompt: q's tokens.
        tokens: every token after the prompt: o⁽¹⁾, h, y, o⁽²⁾.
        model: per token, True where the policy chose it.
        turn: per token, 0 or 1: the reply it belongs to (h and y belong to the first).
        rewards: (r₁, r₂).
        p_world: p(y | q, o⁽¹⁾).
    """

    prompt: tuple[int, ...]
    tokens: tuple[int, ...]
    model: tuple[bool, ...]
    turn: tuple[int, ...]
    rewards: tuple[float, float]
    p_world: float


class TwoTurnProblem:
    """The two-turn problem at a fixed θ: its episodes, exact J and ∇J.

    Args:
        beta: β ≥ 0, the KL's weight in J.
        seed: the draw of θ and of the reference's parameters (normal, scale ½).
        max_reply_length: T, each reply's limit.
        second_turn_rewarded: False: r₂ ≡ 0 (only the first reply earns).
        top_k: the sampler keeps the k largest logits (0: off).
        top_p: the smallest set of largest tokens holding mass ≥ p (1: off).
        min_p: the tokens of probability ≥ min_p · max (None: off).
        repetition_penalty: θ on the logits of the tokens seen before (1: off).
        header: the world's role header, its tokens (a chat template's, of several).
        long_answers: the observation b comes as two tokens (b, EOS), a's as one: world
            answers of varying length (a tool's result, an error message).
    """

    vocab_size = 3
    prompts = ((A,), (B,))

    def __init__(
        self,
        *,
        beta: float = 0.0,
        seed: int = 0,
        max_reply_length: int = 2,
        second_turn_rewarded: bool = True,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float | None = None,
        repetition_penalty: float = 1.0,
        header: tuple[int, ...] = (HEADER,),
        long_answers: bool = False,
    ) -> None:
        if beta < 0:
            raise ValueError(f"beta must be ≥ 0, got {beta}")
        if not header or any(h not in (EOS, A, B) for h in header):
            raise ValueError(f"header must be one or more tokens of {EOS, A, B}, got {header}")
        rng = np.random.default_rng(seed)
        self.header, self.long_answers = tuple(header), long_answers
        world = len(self.header) + (2 if long_answers else 1)
        v, n_pos = self.vocab_size, 1 + 2 * max_reply_length + world

        def lm() -> TinyCausalLM:
            return TinyCausalLM(
                v,
                token=0.5 * rng.standard_normal((v, v)),
                prompt=0.5 * rng.standard_normal((v, v)),
                position=0.5 * rng.standard_normal((n_pos, v)),
            )

        self.model, self.ref_model = lm(), lm()
        self.beta, self.max_reply_length = float(beta), max_reply_length
        self.second_turn_rewarded = second_turn_rewarded
        self.processing = (top_k, top_p, min_p, repetition_penalty)
        self._model64 = copy.deepcopy(self.model).double()
        self._ref64 = copy.deepcopy(self.ref_model).double()

    def episodes(self, q: int) -> list[Enumerated]:
        """Every episode of prompt ``q`` (an index of :attr:`prompts`)."""
        prompt = self.prompts[q]
        out = []
        for first in replies(self.vocab_size, self.max_reply_length):
            for y, p in observe(prompt[0], first).items():
                answer = (*self.header, *self.observation(y))
                for second in replies(self.vocab_size, self.max_reply_length):
                    tokens = (*first, *answer, *second)
                    model = (True,) * len(first) + (False,) * len(answer) + (True,) * len(second)
                    turn = (0,) * (len(first) + len(answer)) + (1,) * len(second)
                    r2 = second_reward(prompt[0], first, y, second)
                    r = (first_reward(prompt[0], first), r2 if self.second_turn_rewarded else 0.0)
                    out.append(Enumerated(prompt, tokens, model, turn, r, p))
        return out

    def observation(self, y: int) -> tuple[int, ...]:
        """The world's tokens of observation y after the header: (y,), or (b, EOS) when long."""
        return (y, EOS) if self.long_answers and y == B else (y,)

    def only_turn(self, k: int) -> np.ndarray:
        """The components of θ (flattened, ``named_parameters()`` order) only turn k scores through.

        The position rows t from which every token of the model predicted, in every episode,
        belongs to reply k (position t predicts token t + 1): ∂ℓ/∂ of such a row is 0 for every
        token of another reply. The token and prompt tables are shared by every turn.
        """
        turns: dict[int, set[int]] = {}
        for q in range(len(self.prompts)):
            for e in self.episodes(q):
                for j, (m, k_j) in enumerate(zip(e.model, e.turn, strict=True)):
                    if m:
                        turns.setdefault(len(e.prompt) + j - 1, set()).add(k_j)
        v = self.vocab_size
        start = sum(p.numel() for n, p in self.model.named_parameters() if n != "position.weight")
        rows = sorted(t for t, ks in turns.items() if ks == {k})
        return np.asarray([start + t * v + c for t in rows for c in range(v)], dtype=np.int64)

    def _ids(self, rows: list[Enumerated]) -> tuple[torch.Tensor, torch.Tensor]:
        """[E, W] each episode's ids (right-padded with EOS); [E, W] 1 on the model's tokens."""
        width = max(len(e.prompt) + len(e.tokens) for e in rows)
        ids = torch.tensor(
            [[*e.prompt, *e.tokens] + [EOS] * (width - len(e.prompt) - len(e.tokens)) for e in rows]
        )
        chosen = torch.zeros(ids.shape, dtype=torch.float64)
        for i, e in enumerate(rows):
            for j, m in enumerate(e.model):
                chosen[i, len(e.prompt) + j] = float(m)
        return ids, chosen

    def _token_logps(
        self, lm: torch.nn.Module, rows: list[Enumerated], processed: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """[E, W − 1] ln π(token t + 1 | tokens ≤ t), and the kept sets' sizes |K| (V: no cut).

        ``processed``: the sampled policy's; False: the full one's.
        """
        ids, _ = self._ids(rows)
        z = lm(ids).logits[:, :-1]  # position t predicts token t + 1
        sizes = torch.full(ids[:, 1:].shape, self.vocab_size)
        if processed and self.processing != (0, 1.0, None, 1.0):
            z, sizes = self._processed(z, ids)
        ell = torch.log_softmax(z, dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
        return ell, sizes

    def _processed(self, z: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """z′ penalised, −inf outside each position's kept set (a plain loop); the sets' sizes."""
        top_k, top_p, min_p, theta = self.processing
        n, width, v = z.shape
        # the tokens among x₀ … xₜ at position t: a running maximum of their one-hot rows
        seen = torch.nn.functional.one_hot(ids[:, :width], v).cummax(1).values.bool()
        keep = torch.zeros((n, width, v), dtype=torch.bool)
        zp = torch.where(seen, torch.where(z > 0, z / theta, z * theta), z)
        values = zp.detach().tolist()
        for i in range(n):
            for t in range(width):
                for u in _kept(values[i][t], top_k, top_p, min_p):
                    keep[i, t, u] = True
        return zp.masked_fill(~keep, float("-inf")), keep.sum(-1)

    def _logp(
        self, lm: torch.nn.Module, rows: list[Enumerated], processed: bool = True
    ) -> torch.Tensor:
        """[E] Σ over the model's tokens of ln π(token | everything before it), float64."""
        _, chosen = self._ids(rows)
        ell, _ = self._token_logps(lm, rows, processed)  # −inf for a token outside its set
        return torch.where(chosen[:, 1:].bool(), ell, 0.0).sum(1)

    def token_logps(self, q: int, *, processed: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """ln π of each model token after q's prompt, and its kept set's size |K|, [E, T] each.

        Per episode of :meth:`episodes` (q's), 0 on the world's tokens. ``processed``: the
        sampled policy (the processing's); False: the full one. float64, differentiable in the
        float64 model at θ (:meth:`objective`'s).
        """
        rows = self.episodes(q)
        _, chosen = self._ids(rows)
        ell, sizes = self._token_logps(self._at(None), rows, processed)
        p = len(self.prompts[q])
        mask = chosen[:, p:].bool()
        return torch.where(mask, ell[:, p - 1 :], 0.0), sizes[:, p - 1 :] * mask.long()

    def probabilities(self, q: int, params: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """[E] π(e | q) of :meth:`episodes` (q's), the world's factor included."""
        rows = self.episodes(q)
        with torch.no_grad():
            logp = self._logp(self._at(params), rows)
        return torch.tensor([e.p_world for e in rows], dtype=torch.float64) * logp.exp()

    def _at(self, params: dict[str, torch.Tensor] | None) -> torch.nn.Module:
        """The float64 model at θ (or at ``params``: float64 leaves, ``named_parameters`` keys)."""
        with torch.no_grad():
            for k, p in self._model64.named_parameters():
                source = dict(self.model.named_parameters())[k] if params is None else params[k]
                p.copy_(source.to(torch.float64))
        return self._model64

    def objective(self) -> tuple[float, np.ndarray]:
        """(J, ∇J flattened in ``named_parameters()`` order), exact, float64."""
        lm = self._at(None)
        for p in lm.parameters():
            p.grad = None
        total = torch.zeros((), dtype=torch.float64)
        for q in range(len(self.prompts)):
            rows = self.episodes(q)
            logp = self._logp(lm, rows)
            with torch.no_grad():  # the KL's reference: the full policy, as finetune's
                ref = self._logp(self._ref64, rows, processed=False)
            r = torch.tensor([sum(e.rewards) for e in rows], dtype=torch.float64)
            p = torch.tensor([e.p_world for e in rows], dtype=torch.float64) * logp.exp()
            logp = torch.where(p > 0, logp, 0.0)  # an episode the sampler cannot play: no term
            total = total + (p * (r - self.beta * (logp - ref))).sum() / len(self.prompts)
        total.backward()
        grad = torch.cat([p.grad.reshape(-1) for p in lm.parameters()])
        return float(total.detach()), grad.numpy().copy()


__all__ = ["TwoTurnProblem", "first_reward", "observe", "replies", "second_reward"]
