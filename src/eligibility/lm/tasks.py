r"""Verifiable tasks: prompts, a vocabulary, and an exact reward for every completion.

A task is a table of prompts (token ids, BOS first) over its own small vocabulary and a reward
R(prompt, completion) ∈ [0, 1] computed exactly; a completion is *correct* when R = 1. Token 0
is EOS (it ends a completion and is part of it), token 1 is BOS (it starts every prompt).

The built-in tasks give partial credit so that a policy learning from scratch gets a signal:

- ``repeat``: ``BOS x k`` → ``x`` repeated k times, then EOS. R = length of the longest common
  prefix of the answer a (EOS included) and the completion c, over max(|a|, |c|).
- ``reverse``: ``BOS s =`` → s reversed, then EOS. R as for ``repeat``.
- ``sum``: ``BOS =s`` (one token per target s = 4 … 9) → any digits among 1, 2, 3 whose sum is
  s, then EOS.
  R = 1 when the digits sum to s and EOS ends them; otherwise ½ · max(0, 1 − |Σ − s| / s) for a
  completion of digits ended by EOS, and 0 for anything else. Many answers are correct, of
  different lengths.

- ``guess``: a game of several turns (:class:`EpisodicTask`). ``BOS ?`` → the model guesses a
  number 1 … 5 (one token), the game answers ``higher``, ``lower`` or ``right`` followed by the
  header ``|`` of the model's next turn, and so on for at most 3 guesses (a binary search
  always wins). r = 1 on the turn
  the guess is right (the game then ends), 0 on every other turn; a reply that is not a
  number is answered ``?``. Each prompt is one secret number (hidden from the model), so the
  held-out games are the same five. The third wrong guess ends the game (its rule, not a
  cut: ``--max-turns`` sets the guesses), and a reply is one token with no EOS after it.

Your own task (``lm.usertask``): reward functions in TRL's convention scoring completions of
the prompts in your data, over your tokenizer's vocabulary (or, on the tiny model without a
tokenizer, one token per character of the prompts and of ``--completion-chars``).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, cast

import numpy as np

from eligibility.lm.rewards import Scored

EOS, BOS = 0, 1
SPECIALS = ("<eos>", "<bos>")


if TYPE_CHECKING:
    from eligibility.lm.rewards import TrainerState


@dataclass(frozen=True)
class Task:
    """A verifiable task.

    Attributes:
        name: its name (``repeat``) or ``module:function``.
        vocab: token strings; ``vocab[0]`` is EOS, ``vocab[1]`` BOS.
        prompts: the prompts as token ids, each starting with BOS.
        score: ``score(i, completion_ids, ended)`` → R for prompt i; ``ended`` says whether the
            completion stopped at EOS (then ``completion_ids`` excludes it).
        max_completion_length: the default T_max of a completion (EOS included).
        eos_id: the id that ends a completion (and pads).
        n_tokens: V when the vocabulary is a tokenizer's (None: ``len(vocab)``).
        batch_rewards: ``batch_rewards(prompt_index, completions, ended, state)`` →
            ``lm.rewards.Scored`` for a whole batch (the user's reward functions, handed the
            run's ``state`` as TRL's ``trainer_state``); None: ``score`` per completion.
        metric: ``metric(prompt_index, completions, ended)`` → [N] values whose mean is the
            accuracy (None: the fraction with R = 1).
        decode: ids → text (None: the vocabulary's strings joined).
        held_out: the task on the held-out prompts, where accuracy is measured (None: this).
        close: stops what the task runs (the reward worker); idempotent.
        tokenizer: the user's Hugging Face tokenizer (None: a vocabulary of our own).
        shown: each prompt as its user wrote it (their text, or their conversation's last
            message), where the ids hold more (a chat template's system prompt and roles);
            empty: the ids decoded.
        success_return: a completion (an episode) is a success, counted in the accuracy,
            when its return R ≥ this (None: R = 1 exactly; :func:`succeeded`).
        reward_names: the reward functions whose values a batch reports apart, in order
            (metrics.csv's ``rewards/NAME/mean`` and ``/std``; None: none).
        max_turns: K_max, the most replies an episode may have (None: one completion, no
            turns; :class:`EpisodicTask`'s bound).
        given: the rows given in memory from Python (training, held-out), which the run
            writes with it (``lm.usertask.keep_records``); None: read from files, or none.
    """

    name: str
    vocab: tuple[str, ...]
    prompts: tuple[tuple[int, ...], ...]
    score: Callable[[int, Sequence[int], bool], float] = field(repr=False)
    max_completion_length: int = 16
    eos_id: int = EOS
    n_tokens: int | None = None
    batch_rewards: Callable[..., tuple[np.ndarray, np.ndarray]] | None = field(
        default=None, repr=False
    )
    metric: Callable[..., np.ndarray] | None = field(default=None, repr=False)
    decode: Callable[[Sequence[int]], str] | None = field(default=None, repr=False)
    held_out: Task | None = field(default=None, repr=False)
    close: Callable[[], None] = field(default=lambda: None, repr=False)
    tokenizer: Any = field(default=None, repr=False)
    shown: tuple[str, ...] = field(default=(), repr=False)
    success_return: float | None = None
    reward_names: tuple[str, ...] | None = None
    max_turns: int | None = None
    given: tuple[list[dict[str, Any]], list[dict[str, Any]] | None] | None = field(
        default=None, repr=False
    )

    rollout: ClassVar[str] = "prompts"
    """How an update draws this task's batch and credits its tokens, in the words of the kinds
    of task (``lm.usertask.KINDS``): ``prompts``, each completed once, or ``episodes``, played
    turn by turn; a row of ``lm.build.ROLLOUTS`` (TRL's ``rollout_func`` is the model). The
    loop never asks which."""

    @property
    def vocab_size(self) -> int:
        """V, the number of tokens the policy chooses among."""
        return len(self.vocab) if self.n_tokens is None else self.n_tokens

    @property
    def evaluation(self) -> Task:
        """The task accuracy is measured on: the held-out one, or this."""
        return self if self.held_out is None else self.held_out

    def text(self, ids: Sequence[int]) -> str:
        """Token ids as text (the tokenizer's decoding; built in: specials as ``<eos>``)."""
        if self.decode is not None:
            return self.decode(ids)
        if self.tokenizer is not None:  # a tokenizer's task without a decode of its own
            return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))
        return "".join(self.vocab[i] for i in ids)

    def prompt_text(self, i: int) -> str:
        """Prompt ``i`` for a person to read: as its user wrote it, or its ids less BOS."""
        if self.shown:
            return self.shown[i]
        return self.text(self.prompts[i][0 if self.decode or self.tokenizer else 1 :])

    def rewards(
        self,
        prompt_index: Sequence[int],
        completions: list[list[int]],
        ended: Sequence[bool],
        state: TrainerState | None = None,
    ) -> Scored:
        """R [N], scorable [N] and what was logged, of completions (ids without EOS) of prompts.

        ``state``: the run's progress, the user's reward functions' ``trainer_state`` (None:
        a blank one).
        """
        if self.batch_rewards is not None:
            return self.batch_rewards(prompt_index, completions, ended, state)
        rows = zip(prompt_index, completions, ended, strict=True)
        r = [self.score(int(p), c, bool(e)) for p, c, e in rows]
        return Scored.plain(np.asarray(r, dtype=np.float64))

    def correct(
        self,
        prompt_index: Sequence[int],
        completions: list[list[int]],
        ended: Sequence[bool],
        r: np.ndarray,
    ) -> np.ndarray:
        """Each completion's accuracy value: the metric's, or R = 1."""
        if self.metric is not None:
            return self.metric(prompt_index, completions, ended)
        return succeeded(r, self.success_return).astype(np.float64)


def succeeded(returns: Any, success_return: float | None = None) -> Any:
    """Which returns are successes: R ≥ ``success_return``, or R = 1 exactly without one.

    The accuracy of a batch or an evaluation is their mean. A return of 1 is a success for a
    0/1 reward; a return that is a sum of several turns' rewards, or a reward with partial
    credit, needs its own threshold (``--success-return``, as ``train``'s ``--target-return``
    for an episodic return). Works on NumPy arrays and torch tensors alike.

    >>> succeeded(np.array([1.0, 3.0, 0.5])).tolist()
    [True, False, False]
    >>> succeeded(np.array([1.0, 3.0, 0.5]), 1.0).tolist()
    [True, True, False]
    """
    return returns == 1.0 if success_return is None else returns >= success_return


def judged(task: Task, success_return: float | None) -> Task:
    """``task`` (and its held-out task) counting a success as :func:`succeeded` does."""
    if success_return is None:
        return task
    held = task.held_out and dataclasses.replace(task.held_out, success_return=success_return)
    return dataclasses.replace(task, success_return=success_return, held_out=held)


@dataclass(frozen=True)
class Answer:
    """The world's answer to one reply.

    Attributes:
        tokens: the world's tokens appended after the reply (a tool's result, an observation,
            the template's header of the next turn); never scored as the policy's.
        reward: r of the turn the reply made.
        done: the episode is over (no further reply).
        tool_calls: the tool calls the reply made.
        tool_failures: those that failed.
        cut: the episode ends at a bound (its turns, its tool calls, the model's positions),
            not where the world would have ended it.
    """

    tokens: tuple[int, ...] = ()
    reward: float = 0.0
    done: bool = False
    tool_calls: int = 0
    tool_failures: int = 0
    cut: bool = False


@dataclass(frozen=True)
class Ending:
    """A world's score of one whole episode, given when its batch has ended (TRL's rewards).

    Attributes:
        reward: R = Σₖ w_k · r_k over the reward functions that apply, added to the last turn.
        parts: r_k of each reward function (NaN: not applicable), in the task's order.
        success: the environment's word on the episode (1.0, 0.0; NaN: none).
        extra: the cells the reward functions gave this episode with ``log_extra`` (TRL's
            columns of the completions table), by column.
    """

    reward: float
    parts: tuple[float, ...] = ()
    success: float = float("nan")
    extra: dict[str, Any] = field(default_factory=dict)


class World(Protocol):
    """One episode's world: it answers each of the model's replies.

    A world may also keep its conversation for a person to read: ``shown()`` →
    ``{"system": text, "prompt": messages, "completion": messages}`` (``lm.episodes.shown``;
    without it, the episode's messages are read from its tokens).
    """

    def step(self, reply: Sequence[int], ended: bool) -> Answer:
        """The world's answer to ``reply`` (its ids, EOS left out; ``ended``: it stopped at EOS).

        The answer's tokens join the episode (the world's, never scored), its reward is the
        turn's rₖ, and ``done`` ends the episode.
        """
        ...


class Respond(Protocol):
    """Every live episode's world's answer to its reply, at one turn."""

    def __call__(
        self, worlds: list[World], replies: list[Sequence[int]], ended: list[bool]
    ) -> list[Answer]:
        """One :class:`Answer` per world, in order (``replies[i]``, ``ended[i]`` its reply's)."""
        ...


def each_steps(
    worlds: list[World], replies: list[Sequence[int]], ended: list[bool]
) -> list[Answer]:
    """Each world's ``step`` on its reply, one after another (a :class:`Respond`)."""
    return [w.step(r, e) for w, r, e in zip(worlds, replies, ended, strict=True)]


class Finish(Protocol):
    """The scoring of a batch's episodes once all have ended (the reward functions, once)."""

    def __call__(
        self, worlds: list[World], state: TrainerState
    ) -> tuple[list[Ending], dict[str, list[float]]]:
        """(one ``Ending`` per world, in order; what the reward functions logged by name).

        ``worlds``: a rank's worlds of the batch; ``state``: the run's
        ``lm.rewards.TrainerState`` (the step a curriculum reads).
        """
        ...


@dataclass(frozen=True)
class EpisodicTask(Task):
    """A task of several turns: the model replies, the world answers, the model replies again.

    ``score`` is unused (the rewards come per turn from the world's answers); an episode ends
    when an answer says ``done`` or after ``max_turns`` replies.

    Attributes:
        world: ``world(i)`` → the world of one episode of prompt i (``lm.contracts.World``:
            its ``step(reply_ids, ended)`` returns an :class:`Answer`).
        max_turns: K_max, the most replies an episode may have.
        weighting: ``reward-to-go`` (each turn's tokens weighted by the rewards from it on)
            or ``outcome`` (by the whole return).
        finish: ``finish(worlds, state)`` (``lm.contracts.Finish``), called once a batch when
            all its episodes have ended: the reward functions called once on the whole
            batch, as TRL calls them. None: the last answers hold the rewards.
        last_turn_ends: K_max is the world's own length (``guess``: a game of three
            guesses), so an episode that reaches it ended by its rule, not cut at a bound.
        respond: ``respond(worlds, replies, ended)`` (:class:`Respond`), a turn's answers of
            every live episode's world: each world's ``step`` in turn (:func:`each_steps`), or
            a task's own that makes the worlds' calls at once (tools: ``lm.episodes.chatworld``).
    """

    world: Callable[[int], World] = field(default=lambda i: None, repr=False)  # type: ignore[arg-type,return-value]
    max_turns: int = 4
    weighting: str = "reward-to-go"
    finish: Finish | None = field(default=None, repr=False)
    last_turn_ends: bool = False
    respond: Respond = field(default=each_steps, repr=False)

    rollout: ClassVar[str] = "episodes"

    @property
    def evaluation(self) -> EpisodicTask:
        """The task accuracy is measured on: the held-out one (of turns too), or this."""
        return self if self.held_out is None else cast(EpisodicTask, self.held_out)


class _Guess:
    """One game of ``guess``: a secret number; each reply a guess, answered until right."""

    def __init__(self, secret: int, ix: dict[str, int], numbers: int) -> None:
        self.secret, self.ix = secret, ix
        self.number = {ix[str(n)]: n for n in range(1, numbers + 1)}

    def step(self, reply: Sequence[int], ended: bool) -> Answer:
        if len(reply) != 1 or reply[0] not in self.number:
            return Answer((self.ix["?"], self.ix["|"]))
        guess = self.number[reply[0]]
        if guess == self.secret:
            return Answer((self.ix["right"],), reward=1.0, done=True)
        said = "higher" if self.secret > guess else "lower"
        return Answer((self.ix[said], self.ix["|"]))


def guess_task(numbers: int = 5, max_turns: int = 3) -> EpisodicTask:
    """``BOS ?`` → guesses of a hidden number, answered higher/lower/right (module docstring)."""
    words = ["?", "|", "higher", "lower", "right"]
    vocab, ix = _vocab([str(n) for n in range(1, numbers + 1)], words)
    prompts = tuple((BOS, ix["?"]) for _ in range(numbers))
    return EpisodicTask(
        "guess",
        vocab,
        prompts,
        lambda i, c, ended: 0.0,
        max_completion_length=1,
        world=lambda i: _Guess(i + 1, ix, numbers),
        max_turns=max_turns,
        last_turn_ends=True,  # the game's guesses (--max-turns sets them): its third ends it
    )


def _prefix_credit(answer: Sequence[int], completion: Sequence[int], ended: bool) -> float:
    """R = |longest common prefix of a and c| / max(|a|, |c|), a = answer+EOS, c = completion.

    Dividing by the longer of the two makes every token past the answer cost (a policy that
    never stops scores low), and R = 1 exactly when c = a.
    """
    target = [*answer, EOS]
    got = [*completion, EOS] if ended else list(completion)
    n = 0
    for a, b in zip(target, got, strict=False):
        if a != b:
            break
        n += 1
    return n / max(len(target), len(got))


def _answer_task(
    name: str,
    vocab: tuple[str, ...],
    prompts: tuple[tuple[int, ...], ...],
    answers: list[list[int]],
) -> Task:
    """A task with one right answer per prompt, rewarded by :func:`_prefix_credit`.

    T_max = 2 · (the longest answer) + 4: room to run past the answer, so not stopping is seen.
    """
    return Task(
        name,
        vocab,
        prompts,
        lambda i, c, ended: _prefix_credit(answers[i], c, ended),
        max_completion_length=2 * max(map(len, answers)) + 4,
    )


def _vocab(*groups: Sequence[str]) -> tuple[tuple[str, ...], dict[str, int]]:
    vocab = (*SPECIALS, *itertools.chain(*groups))
    return vocab, {s: i for i, s in enumerate(vocab)}


def repeat_task(symbols: str = "abcd", max_count: int = 4) -> Task:
    """``BOS x k`` → x repeated k times, EOS (see the module docstring)."""
    counts = [str(k) for k in range(1, max_count + 1)]
    vocab, ix = _vocab(symbols, counts)
    cases = [(x, k) for x in symbols for k in range(1, max_count + 1)]
    prompts = tuple((BOS, ix[x], ix[str(k)]) for x, k in cases)
    answers = [[ix[x]] * k for x, k in cases]
    return _answer_task("repeat", vocab, prompts, answers)


def reverse_task(symbols: str = "abc", max_len: int = 3) -> Task:
    """``BOS s =`` → reversed s, EOS, for every s of length 1 … max_len over ``symbols``."""
    vocab, ix = _vocab(symbols, "=")
    strings = [
        "".join(s) for n in range(1, max_len + 1) for s in itertools.product(symbols, repeat=n)
    ]
    prompts = tuple((BOS, *(ix[ch] for ch in s), ix["="]) for s in strings)
    answers = [[ix[ch] for ch in reversed(s)] for s in strings]
    return _answer_task("reverse", vocab, prompts, answers)


def sum_task(targets: range = range(4, 10), digits: str = "123") -> Task:
    """``BOS =s`` → digits from ``digits`` whose sum is s, EOS (see the module docstring)."""
    vocab, ix = _vocab(digits, [f"={s}" for s in targets])
    digit = {ix[d]: int(d) for d in digits}
    prompts = tuple((BOS, ix[f"={s}"]) for s in targets)
    goal = list(targets)

    def score(i: int, c: Sequence[int], ended: bool) -> float:
        if not ended or not c or any(t not in digit for t in c):
            return 0.0
        total, s = sum(digit[t] for t in c), goal[i]
        return 1.0 if total == s else 0.5 * max(0.0, 1.0 - abs(total - s) / s)

    return Task("sum", vocab, prompts, score, max_completion_length=12)


BUILTIN: dict[str, Callable[[], Task]] = {
    "repeat": repeat_task,
    "reverse": reverse_task,
    "sum": sum_task,
    "guess": guess_task,
}
"""The built-in tasks by name."""
TASK_HELP = (
    f"{', '.join(BUILTIN)} (built in), or your reward functions in TRL's convention, "
    "FILE.py:fn or module:fn, several joined by commas, with --prompts"
)
"""``finetune``'s TASK (``lm.config``): the built-in tasks named from :data:`BUILTIN`."""
SUCCESS_RETURN_HELP = (
    "a completion or episode is a success (accuracy, --target-accuracy) when its return "
    "reaches this (as train's --target-return; none: a return of exactly 1)"
)
"""``--success-return``'s help (``lm.config``): the rule of :func:`succeeded`."""


def make_task(name: str, prompts: str | None = None) -> Task:
    """A built-in task by name (the user's own: ``lm.usertask.make_task``).

    Raises:
        ValueError: an unknown name, or ``--prompts`` with a built-in task.
    """
    if name in BUILTIN:
        if prompts is not None:
            raise ValueError(f"--prompts is for your own task (module:function), not {name!r}")
        return BUILTIN[name]()
    raise ValueError(
        f"unknown task {name!r}: choose one of {', '.join(BUILTIN)}, or give your own "
        "reward functions as FILE.py:fn or module:fn with --prompts FILE"
    )
