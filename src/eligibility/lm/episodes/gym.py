r"""Gymnasium environments of text: the reply the action, the observation the next user turn.

``finetune module:Id`` (the id ``train`` takes: importing ``module``, or a file ``path.py``,
registers ``Id``) plays an environment whose observation and action spaces are
``gymnasium.spaces.Text``: episode i is ``reset(seed=i)``; its observation is the prompt; each
reply (decoded, EOS cut) is ``step(action)``, whose reward is that turn's rₖ; ``terminated`` or
``truncated`` ends it: an episode runs to its environment's own end, its registered
``max_episode_steps`` included (Gymnasium's ``TimeLimit`` truncates there, and it is K_max).
``--max-turns`` bounds it otherwise; without either, :data:`RUNAWAY_TURNS` replies, a bound
only against a world that never ends, said once when it binds. An episode's success is its
last step's ``info["is_success"]``, else its return at ``--success-return``, by default the
registered ``reward_threshold`` (Gymnasium's "solved"), else a return of 1. Each later
observation is the world's tokens: on the built-in model (one token per character of the
two spaces' character sets) a newline, the observation and a newline; with a tokenizer, what
its chat template renders for a user message after the reply and the next assistant header
(``lm.episodes.chat.answer_tokens``). An observation that is not text, or holds a character
the built-in model has no token for, is refused in one line.

The module is imported, and the environments run, in the worlds' worker
(``lm.episodes.worker``), as tools and rewards are: its prints never reach stdout, and an
exception, a hang or an exit at import, reset or step is one line; an id its module does not
register says so. A turn's steps of every live episode run there at once (:func:`steps`, up to
``--max-env-workers`` at a time), each environment stepped by one thread at a time.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from eligibility._isolate import load_module
from eligibility.lm.episodes.chat import Bounds, Span, answer_tokens, render, system_text
from eligibility.lm.episodes.episode import Ending
from eligibility.lm.episodes.worker import Served, UserRaised, Worlds, bounded, describe, what
from eligibility.lm.rewards import as_reward
from eligibility.lm.tasks import BOS, EOS, SPECIALS, Answer, EpisodicTask
from eligibility.lm.tokenizer import Tokenizer

HELD_OUT_SEED = 1_000_000
"""The held-out episodes are reset with seeds from here (training uses 0, 1, …)."""

RUNAWAY_TURNS = 100
"""K_max of an environment that registers no ``max_episode_steps``, without ``--max-turns``:
a bound against a world that never ends, not a length a game is expected to have (an
episode cut there is said once on stderr and counted in ``episodes_cut``; the constant
normaliser's T_max is K_max times the reply limit, so ``--aggregation constant`` wants a
``--max-turns`` of the world's real length)."""


class _Served(Served):
    """The worker's side: the module imported, the environments by handle."""

    def __init__(self, spec: str, timeout: float) -> None:
        super().__init__(timeout)
        self.spec = spec
        self.where, _, self.name = spec.rpartition(":")

    def setup(self) -> tuple[tuple[str, str], int | None, float | None] | None:
        """The spaces' character sets, the registered max_episode_steps and reward_threshold.

        None where ``spec`` is no Gymnasium id (a function).
        """
        try:
            import gymnasium as gym
        except ImportError:
            return None
        self.gym = gym
        module = load_module(self.where)
        if self.name not in gym.envs.registry:
            if callable(getattr(module, self.name, None)):
                return None  # module:function, a reward function: a task of prompts
            near = difflib.get_close_matches(self.name, list(gym.envs.registry), n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ValueError(
                f"no such environment registered: importing {self.where} registers no "
                f"{self.name!r}{hint}, nor defines a function of that name"
            )
        env = self.checkout(None)[1]
        self.do_release(self.next)
        spaces = (env.observation_space, env.action_space)
        if not all(isinstance(s, gym.spaces.Text) for s in spaces):
            kinds = ", ".join(type(s).__name__ for s in spaces)
            raise ValueError(
                f"its observation and action spaces are {kinds}; finetune plays environments "
                "of text (gymnasium.spaces.Text), train the others"
            )
        charsets = tuple("".join(sorted(s.character_set)) for s in spaces)
        registered = getattr(env, "spec", None)
        steps = getattr(registered, "max_episode_steps", None)
        solved = getattr(registered, "reward_threshold", None)
        return (  # type: ignore[return-value]
            charsets,
            steps if isinstance(steps, int) and steps >= 1 else None,
            float(solved) if isinstance(solved, int | float) and np.isfinite(solved) else None,
        )

    def make(self, kind: str | None) -> Any:
        try:
            return self.user(self.gym.make, self.name)
        except UserRaised as err:
            raise ValueError(f"gymnasium.make {describe(err, None)}") from None

    def _observed(self, method: str, obs: object) -> str:
        if not isinstance(obs, str):
            raise ValueError(
                f"{method} returned {what(obs)} as its observation: a Text space's is a string"
            )
        return bounded(method, obs)

    def do_open(self, seed: int) -> tuple[int, str]:
        handle, env = self.checkout(None)
        try:
            obs, _ = self.user(env.reset, seed=int(seed))
        except UserRaised as err:
            raise ValueError(f"reset() {describe(err, None)}") from None
        return handle, self._observed("reset()", obs)

    def do_step(self, handle: int, action: str) -> tuple[str, float, bool, float]:
        try:
            obs, r, terminated, truncated, info = self.user(self.live[handle][1].step, action)
        except UserRaised as err:
            raise ValueError(f"step() {describe(err, None)}") from None
        try:
            reward = as_reward(r)
        except ValueError as err:
            raise ValueError(f"step() returned the reward {err}") from None
        success = info.get("is_success") if isinstance(info, dict) else None
        if success is not None and not isinstance(success, bool | np.bool_):
            raise ValueError(
                f"step()'s info['is_success'] is {what(success)}: a bool (Gymnasium's), or none"
            )
        done = bool(terminated or truncated)
        stated = float("nan") if success is None else float(success)
        return self._observed("step()", obs), float(reward or 0.0), done, stated


class TextEnvs(Worlds):
    """One Gymnasium id's environments, in the worlds' worker.

    Args:
        spec: ``module:Id`` or ``path.py:Id`` (the module imported in the worker).
        timeout: seconds an import, a reset or a step may take.
        workers: how many episodes' steps of a turn run at once (``--max-env-workers``;
            None: every episode's; 1: one after another).
    """

    def __init__(self, spec: str, *, timeout: float = 60.0, workers: int | None = None) -> None:
        super().__init__(lambda: _Served(spec, timeout), timeout=timeout)
        self.env_id, self.workers = spec, workers
        self.charsets = ("", "")
        self.max_episode_steps: int | None = None  # as registered (None: none)
        self.reward_threshold: float | None = None  # as registered: the return that solves it

    def start(self) -> TextEnvs | None:
        """Import the module, make one environment, check its spaces are text (None: no id).

        Raises:
            ValueError: a module that does not import (or exits, or hangs), an id it does not
                register, spaces that are not text (one line).
        """
        started = self.ask(None, self.env_id)
        if started is None:
            self.close()
            return None
        self.charsets, self.max_episode_steps, self.reward_threshold = started
        return self

    def open(self, seed: int) -> tuple[int, str]:
        """A reset environment: (handle, its first observation)."""
        return self.ask(("open", seed), f"{self.env_id} at reset (seed {seed})")

    def step(self, handle: int, action: str) -> tuple[str, float, bool, float]:
        """(observation, reward, done, success) of one action.

        ``success``: the step's ``info["is_success"]`` (1.0, 0.0; NaN: none), Gymnasium's word.
        """
        return self.steps([(handle, action)])[0]

    def steps(self, actions: Sequence[tuple[int, str]]) -> list[tuple[str, float, bool, float]]:
        """:meth:`step` of each ``(handle, action)``, the environments' steps made at once.

        Up to ``workers`` at a time (``Worlds.ask_all``); a step that fails is said as one
        alone is, the first in order.
        """
        doing = f"{self.env_id} at step"
        asked = [[(("step", h, a), doing)] for h, a in actions]
        return [out for (out,) in self.ask_all(asked, workers=self.workers)]

    def release(self, handle: int) -> None:
        """The environment back to the pool."""
        self.ask(("release", handle), f"{self.env_id} at release")


def text_env_id(spec: str, *, timeout: float = 60.0) -> str | None:
    """The registered id of ``module:Id`` if it names a Gymnasium env (None: it does not).

    The module is imported in a worker (see the module docstring), never here.

    Raises:
        ValueError: as :meth:`TextEnvs.start`.
    """
    envs = probe(spec, timeout=timeout)
    if envs is None:
        return None
    envs.close()
    return spec.rpartition(":")[2]


def probe(spec: str, *, timeout: float = 60.0, workers: int | None = None) -> TextEnvs | None:
    """``spec``'s environments started, if it names a Gymnasium id (None: it does not).

    ``workers``: how many episodes' steps of a turn run at once (:class:`TextEnvs`).
    """
    if ":" not in spec or "," in spec or not spec.rpartition(":")[0]:
        return None
    return TextEnvs(spec, timeout=timeout, workers=workers).start()


STILL = "before the environment ended it"
"""How a cut episode of a text environment is said."""


class TextWorld:
    """One episode of a text environment: its reset prompt and the answers to each reply."""

    def __init__(
        self,
        envs: TextEnvs,
        seed: int,
        codec: _Characters | _Templated,
        *,
        span: Callable[[int, str], Span],
        max_turns: int,
        bound: str = "--max-turns",
    ) -> None:
        self.envs, self.codec = envs, codec
        self.handle, first = envs.open(seed)
        self.success = float("nan")  # the last step's info["is_success"]
        self._read = (0, False)  # the last reply's length and whether it ended at EOS
        self.prompt = tuple(codec.prompt(first))
        self.messages = [{"role": "user", "content": first}]  # the observations, the replies
        here = span(len(self.prompt), f"{envs.env_id}'s reset (seed {seed})")
        who = f"an episode of {envs.env_id}"
        self.bounds = Bounds(here, max_turns, who=who, say=envs.note_once, bound=bound)

    def step(self, reply: Sequence[int], ended: bool) -> Answer:
        """The reply as the action; the observation as the next user turn."""
        return steps([self], [reply], [ended])[0]

    def read(self, reply: Sequence[int], ended: bool) -> str:
        """Take a reply (its ids without EOS): the action it is (:meth:`answered` goes on)."""
        action = self.codec.decode(reply)
        self.messages.append({"role": "assistant", "content": action})
        self._read = (len(reply), ended)
        return action

    def answered(self, stepped: tuple[str, float, bool, float]) -> Answer:
        """The answer to the reply :meth:`read` took, given its step's outcome (``TextEnvs``)."""
        (n, ended), (obs, r, done, self.success) = self._read, stepped
        eos = () if ended else (self.codec.eos_id,)
        tokens = () if done else (*eos, *self.codec.turn(obs))
        last, cut = self.bounds.last_reply(), not done
        if not done and last:
            self.bounds.out_of_turns(STILL)
            done = True
        elif not done and self.bounds.no_room(n, len(tokens), STILL):
            done = True
        if done:
            self.envs.release(self.handle)
            return Answer((), r, done=True, cut=cut)
        self.messages.append({"role": "user", "content": obs})  # what the model reads next
        return Answer(tokens, r)

    def shown(self) -> dict[str, Any]:
        """The episode as a person reads it (``lm.episodes.shown``).

        The observations the model read as user messages, its replies as assistant ones, the
        template's system text apart.
        """
        return {"system": self.codec.system(self.messages), "prompt": self.messages[:1],
                "completion": self.messages[1:]}  # fmt: skip


class _Characters:
    """The built-in model's codec: one token per character of the two spaces' character sets.

    The prompt is BOS, the observation and a newline; each later observation, a newline, it
    and a newline.
    """

    def __init__(self, env_id: str, charsets: tuple[str, str]) -> None:
        self.env_id = env_id
        self.vocab = (*SPECIALS, *sorted(set("".join(charsets)) | {"\n"}))
        self.ix = {c: i for i, c in enumerate(self.vocab)}
        self.eos_id, self.n_tokens = EOS, None

    def encode(self, text: str) -> list[int]:
        if missing := sorted(set(text) - self.ix.keys()):
            raise ValueError(
                f"{self.env_id}'s observation {text[:40]!r} holds {''.join(missing)[:20]!r}, "
                "outside its spaces' character sets (the built-in model's only tokens): give "
                "the Text spaces every character the environment says, or a tokenizer "
                "(--tokenizer DIR)"
            )
        return [self.ix[c] for c in text]

    def prompt(self, obs: str) -> list[int]:
        return [BOS, *self.encode(obs), self.ix["\n"]]

    def turn(self, obs: str) -> list[int]:
        return [self.ix["\n"], *self.encode(obs), self.ix["\n"]]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.vocab[i] for i in ids if i >= len(SPECIALS))

    def system(self, messages: list[dict[str, Any]]) -> str:
        return ""  # BOS alone before the first observation


class _Templated:
    """A tokenizer's codec: each observation a user message through its chat template."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer, self.vocab = tokenizer, ()
        self.eos_id, self.n_tokens = tokenizer.eos_token_id, len(tokenizer)

    def prompt(self, obs: str) -> list[int]:
        return render(self.tokenizer, [{"role": "user", "content": obs}], None, generation=True)

    def turn(self, obs: str) -> list[int]:
        said = {"role": "assistant", "content": "y"}
        return answer_tokens(self.tokenizer, said, [{"role": "user", "content": obs}], None)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def system(self, messages: list[dict[str, Any]]) -> str:
        return system_text(self.tokenizer, messages[:1], None)[0]


def _bound(max_turns: int | None, steps: int | None) -> tuple[int, str]:
    """(K_max, how the cut names it): ``--max-turns``, the registered limit, or the runaway's."""
    if max_turns is not None:
        return max_turns, "--max-turns"
    if steps is not None:  # its TimeLimit ends the episode there: never a cut of ours
        return steps, "its max_episode_steps"
    return RUNAWAY_TURNS, (
        "the bound against a world that never ends: it registers no max_episode_steps; "
        "--max-turns sets another"
    )


def steps(
    worlds: Sequence[TextWorld], replies: Sequence[Sequence[int]], ended: Sequence[bool]
) -> list[Answer]:
    """Each world's answer to its reply, the environments' steps made at once.

    The replies are read in order, stepped in one request (``TextEnvs.steps``), then answered
    in order: with environments that share nothing, the answers of each world's own ``step``.
    """
    if not worlds:
        return []
    actions = [(w.handle, w.read(r, e)) for w, r, e in zip(worlds, replies, ended, strict=True)]
    stepped = worlds[0].envs.steps(actions)
    return [w.answered(out) for w, out in zip(worlds, stepped, strict=True)]


def _stated(worlds: list[TextWorld], state: object) -> tuple[list[Ending], dict[str, list[float]]]:
    """Each episode's success as its last step's info says (the rewards came turn by turn)."""
    return [Ending(0.0, (), w.success) for w in worlds], {}


def text_task(
    env_id: str,
    *,
    tokenizer: Tokenizer | None = None,
    episodes: int = 64,
    held_out: int = 16,
    max_turns: int | None = None,
    timeout: float = 60.0,
    envs: TextEnvs | None = None,
    positions: int | None = None,
    t_max: int = 16,
) -> EpisodicTask:
    """``env_id`` as a task of several turns (see the module docstring).

    ``episodes`` training seeds (0, 1, …) and ``held_out`` evaluation seeds from
    :data:`HELD_OUT_SEED`; the built-in model's vocabulary is the spaces' characters;
    ``max_turns``: K_max (``--max-turns``; None: the environment's registered
    ``max_episode_steps``, else :data:`RUNAWAY_TURNS`); ``envs``: its environments already
    started (:func:`probe`); ``positions``: the model's (an episode's prompt and a reply of
    ``t_max`` tokens must fit; None: unbounded).

    Raises:
        ValueError: as :meth:`TextEnvs.start`, or ``env_id`` names no Gymnasium environment.
    """
    envs = envs or probe(env_id, timeout=timeout)
    if envs is None:
        raise ValueError(f"{env_id}: no such environment registered")
    codec = _Characters(env_id, envs.charsets) if tokenizer is None else _Templated(tokenizer)
    turns, bound = _bound(max_turns, envs.max_episode_steps)

    def span(n: int, what: str) -> Span:
        return Span(positions, t_max, n, what)

    def on(first: int, n: int) -> EpisodicTask:
        def world(i: int) -> TextWorld:
            return TextWorld(envs, first + i, codec, span=span, max_turns=turns, bound=bound)

        return EpisodicTask(
            env_id,
            codec.vocab,
            tuple((BOS,) for _ in range(n)),
            lambda i, c, e: 0.0,
            max_completion_length=t_max,
            eos_id=codec.eos_id,
            n_tokens=codec.n_tokens,
            close=envs.close,
            tokenizer=tokenizer,
            world=world,
            max_turns=turns,
            finish=_stated,
            respond=steps,  # type: ignore[arg-type]
            success_return=envs.reward_threshold,  # Gymnasium's "solved" (None: R = 1)
        )

    task = on(0, episodes)
    return EpisodicTask(**{**vars(task), "held_out": on(HELD_OUT_SEED, held_out)})


__all__ = [
    "HELD_OUT_SEED",
    "RUNAWAY_TURNS",
    "TextEnvs",
    "TextWorld",
    "probe",
    "steps",
    "text_env_id",
    "text_task",
]
