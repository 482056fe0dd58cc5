r"""Episodes: the model's tokens and the world's, one row each, and what each turn earned.

An episode is a prompt q followed by turns: the model's reply o⁽ᵏ⁾ (its tokens, sampled from
π_θ), then the world's answer w⁽ᵏ⁾ (a tool's result, an environment's observation, the role
headers a chat template puts between turns: tokens the policy did not choose), then the
model's next reply, and so on; turn k earns rₖ. Its probability under π_θ is

    π(episode) = Πₖ π_θ(o⁽ᵏ⁾ | q, o⁽¹⁾, w⁽¹⁾, …, w⁽ᵏ⁻¹⁾) · Πₖ p(w⁽ᵏ⁾ | …),

and the world's factors p do not depend on θ: ∇ log π(episode) = Σ over the model's tokens of
∇ℓₜ alone. So a row holds every token after the prompt (the model sees them all), and
``completion_mask`` is 1 on the model's tokens only: they are the ones scored, and "length"
(of an aggregation row, of ``mean_length``) counts them.

Williams' rule with per-turn rewards, for an objective J = E[Σₖ rₖ]:

    ∇J = E[Σₖ (Σ_{t ∈ turn k} ∇ℓₜ) (Gₖ − bₖ)],   Gₖ = Σ_{j ≥ k} rⱼ   (reward-to-go),

since a reply cannot change what earlier turns earned; ``outcome`` weights every turn by the
whole return G₁ instead (the same expectation, more variance). bₖ is the group's baseline
of the column k (the other episodes of the prompt, independent of this one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from eligibility.lm.batch import Completions, per_row
from eligibility.lm.credit import WEIGHTINGS
from eligibility.lm.tasks import Ending


@dataclass
class Episode:
    """One episode as it is played: the prompt, then the model's and the world's tokens.

    Attributes:
        prompt: q, the token ids before the first reply.
        tokens: every token after the prompt, in order.
        model: per token, True where the model sampled it.
        turn: per token, the model's turn it belongs to (0, 1, …); a world token belongs to
            the turn it answers.
        logps: per token, ln π of the token when sampled (0 on the world's).
        rewards: rₖ per model turn.
        ended: the last reply ended with EOS (not cut at the reply limit).
        done: the episode is over (the world ended it, or the turn limit).
        cut: it ended at a bound (K_max turns, the tool calls', the model's positions), not
            where its world would have ended it.
        tool_calls: the tool calls the model made.
        tool_failures: those that failed (no such tool, bad arguments, an error, a timeout).
        kept: per token, mₜ = |Kₜ| the sampler's kept set (0 on the world's), where the
            sampler truncated (``lm.truncation``); else None.
        raw: per token, ln π_τ before the truncation (0 on the world's), or None.
        parts: each reward function's r_k of the episode (NaN: not applicable), set where
            the world scores its episodes at the end of a batch (:meth:`settle`).
        success: whether the world says the episode succeeded (1.0 or 0.0; NaN: it does not
            say, and the return decides, ``lm.tasks.succeeded``).
        extra: the reward functions' ``log_extra`` cells of the episode, by column.
        shown: the world's conversation as a person reads it (``World.shown``: its system
            prompt, its prompt's messages, the completion's), or None: read from the tokens
            (``lm.episodes.shown``).
    """

    prompt: tuple[int, ...]
    tokens: list[int] = field(default_factory=list)
    model: list[bool] = field(default_factory=list)
    turn: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    ended: bool = False
    done: bool = False
    cut: bool = False
    tool_calls: int = 0
    tool_failures: int = 0
    kept: list[int] | None = None
    raw: list[float] | None = None
    parts: tuple[float, ...] = ()
    success: float = float("nan")
    extra: dict[str, Any] = field(default_factory=dict)
    shown: dict[str, Any] | None = None

    @property
    def turns(self) -> int:
        """The model's turns so far."""
        return len(self.rewards)

    def context(self) -> tuple[int, ...]:
        """Everything the model reads before its next reply: the prompt and every token since."""
        return (*self.prompt, *self.tokens)

    def act(
        self,
        tokens: Sequence[int],
        logps: Sequence[float],
        ended: bool,
        kept: Sequence[int] | None = None,
        raw: Sequence[float] | None = None,
    ) -> None:
        """Append the model's reply (a new turn, its reward 0 until :meth:`reward`).

        ``kept`` and ``raw``: the truncating sampler's, per token (:attr:`kept`, :attr:`raw`).
        """
        k = len(self.rewards)
        if kept is not None:
            self.kept = [*(self.kept or [0] * len(self.tokens)), *kept]
        if raw is not None:
            self.raw = [*(self.raw or [0.0] * len(self.tokens)), *raw]
        self.tokens += list(tokens)
        self.model += [True] * len(tokens)
        self.turn += [k] * len(tokens)
        self.logps += [float(x) for x in logps]
        self.rewards.append(0.0)
        self.ended = ended

    def answer(self, tokens: Sequence[int]) -> None:
        """Append the world's tokens (never scored as the policy's)."""
        k = max(len(self.rewards) - 1, 0)
        self.tokens += list(tokens)
        self.model += [False] * len(tokens)
        self.turn += [k] * len(tokens)
        self.logps += [0.0] * len(tokens)
        if self.kept is not None:
            self.kept += [0] * len(tokens)
        if self.raw is not None:
            self.raw += [0.0] * len(tokens)

    def reward(self, r: float) -> None:
        """Add r to the reward of the last turn."""
        self.rewards[-1] += float(r)

    def settle(self, ending: Ending) -> None:
        """The world's score of the whole episode, given once its batch has ended."""
        self.reward(ending.reward)
        self.parts, self.success, self.extra = ending.parts, ending.success, ending.extra

    def trimmed(self) -> Episode:
        """The episode less any world tokens after its last reply (no reply reads them)."""
        last = max((i for i, m in enumerate(self.model) if m), default=-1) + 1
        return Episode(
            self.prompt,
            self.tokens[:last],
            self.model[:last],
            self.turn[:last],
            self.logps[:last],
            list(self.rewards),
            self.ended,
            self.done,
            self.cut,
            self.tool_calls,
            self.tool_failures,
            None if self.kept is None else self.kept[:last],
            None if self.raw is None else self.raw[:last],
            self.parts,
            self.success,
            self.extra,
            self.shown,
        )


@dataclass(kw_only=True)
class Episodes(Completions):
    """A batch of episodes as completions: ``completion_mask`` is 1 on the model's tokens.

    ``completion_ids`` holds every token after the prompt (right-padded with EOS); the model
    reads them all (``lm.sample.token_logps`` attends every position of a row) and only the
    model's are scored. ``lengths`` counts the model's tokens. Each field it adds says how it
    pads, as those of ``Completions`` do: its rows are selected, moved and gathered by the
    batch's one walk over its fields (``lm.batch``).

    Attributes:
        turn: [N, T] the model's turn of each token (−1 on padding).
        turn_rewards: [N, K] rₖ (0 after an episode's last turn).
        turns: [N] the model's turns of each episode.
        tool_calls: [N] the tool calls of each episode.
        tool_failures: [N] the failed ones.
        cut: [N] the episode ended at a bound (turns, tool calls, positions), not of itself.
        reward_parts: [N, R] each reward function's r of each episode (NaN: not applicable),
            where the world scores episodes at the end of a batch; else None.
        success: [N] the environment's word on each episode (1, 0; NaN: none), or None.
        reward_names: the R reward functions' names (metrics.csv's ``rewards/NAME/*``).
        extra: each episode's ``log_extra`` cells (:attr:`Ending.extra`), in the order the
            batch was played: like ``logged`` (``lm.batch.Completions``), the batch's as
            played (a selection of its rows does not carry it; an evaluation's transcripts
            read it).
        shown: each episode's conversation (:attr:`Episode.shown`), as ``extra`` is kept;
            empty where no world keeps one.
        max_turns: K_max, the most turns an episode may have (the constant normalisers' T_max
            is K_max times the reply limit).
        weighting: how a turn's tokens are weighted (:data:`WEIGHTINGS`).
    """

    turn: torch.Tensor = field(metadata=per_row(-1))
    turn_rewards: torch.Tensor = field(metadata=per_row())
    turns: torch.Tensor = field(metadata=per_row())
    tool_calls: torch.Tensor = field(metadata=per_row())
    tool_failures: torch.Tensor = field(metadata=per_row())
    cut: torch.Tensor | None = field(default=None, metadata=per_row())
    reward_parts: torch.Tensor | None = field(default=None, metadata=per_row())
    success: torch.Tensor | None = field(default=None, metadata=per_row())
    reward_names: tuple[str, ...] = ()
    extra: tuple[dict[str, Any], ...] = ()
    shown: tuple[dict[str, Any] | None, ...] = ()
    max_turns: int = 1
    weighting: str = "reward-to-go"

    @property
    def returns(self) -> torch.Tensor:
        """[N] Σₖ rₖ, each episode's return."""
        return self.turn_rewards.sum(1)


def batch_of(
    episodes: Sequence[Episode],
    *,
    eos_id: int,
    max_turns: int,
    weighting: str = "reward-to-go",
    reward_names: Sequence[str] | None = None,
) -> Episodes:
    """Episodes as one :class:`Episodes` batch (prompts left-padded, the rest right-padded).

    ``reward_names``: the reward functions whose ``parts`` the episodes hold (None: the world
    gives none, and ``reward_parts`` is None).
    """
    from eligibility.lm.sample import left_pad

    done = [e.trimmed() for e in episodes]
    prompt_ids, prompt_mask = left_pad([e.prompt for e in done], eos_id)
    width = max(1, *(len(e.tokens) for e in done))
    k = max(1, *(e.turns for e in done))

    def padded(rows: list[list], pad: object, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=dtype)

    return Episodes(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=padded([e.tokens for e in done], eos_id, torch.long),
        completion_mask=padded([[int(m) for m in e.model] for e in done], 0, torch.long),
        logps=padded([e.logps for e in done], 0.0, torch.float32),
        ended=torch.tensor([e.ended for e in done], dtype=torch.bool),
        turn=padded([e.turn for e in done], -1, torch.long),
        turn_rewards=torch.tensor(
            [e.rewards + [0.0] * (k - e.turns) for e in done], dtype=torch.float64
        ),
        turns=torch.tensor([e.turns for e in done], dtype=torch.long),
        tool_calls=torch.tensor([e.tool_calls for e in done], dtype=torch.long),
        tool_failures=torch.tensor([e.tool_failures for e in done], dtype=torch.long),
        cut=torch.tensor([e.cut for e in done], dtype=torch.bool),
        reward_parts=None
        if reward_names is None
        else torch.tensor(
            [list(e.parts) or [float("nan")] * len(reward_names) for e in done],
            dtype=torch.float64,
        ).reshape(len(done), len(reward_names)),
        success=torch.tensor([e.success for e in done], dtype=torch.float64),
        reward_names=tuple(reward_names or ()),
        extra=tuple(e.extra for e in done) if any(e.extra for e in done) else (),
        shown=tuple(e.shown for e in done) if any(e.shown for e in done) else (),
        max_turns=max_turns,
        weighting=weighting,
        kept_sizes=None
        if any(e.kept is None for e in done)
        else padded([e.kept for e in done], 0, torch.long),  # type: ignore[misc]
        raw_logps=None
        if any(e.raw is None for e in done)
        else padded([e.raw for e in done], 0.0, torch.float32),  # type: ignore[misc]
    )


__all__ = ["WEIGHTINGS", "Ending", "Episode", "Episodes", "batch_of"]
