r"""Gymnasium environments of text: the reply the action, the observation the next user turn.

``finetune module:Id`` (the id ``train`` takes: importing ``module`` registers ``Id``) plays an
environment whose observation and action spaces are ``gymnasium.spaces.Text``: episode i is
``reset(seed=i)``; its observation is the prompt; each reply (decoded, EOS cut) is
``step(action)``, whose reward is that turn's rₖ; ``terminated`` or ``truncated`` ends it, and
so does K_max = ``--max-tool-calls`` + 1 replies. Each later observation is the world's tokens:
on the built-in model (one token per character of the two spaces' character sets) a newline,
the observation and a newline; with a tokenizer, what its chat template renders for a user
message after the reply and the next assistant header. The environments run in a protected
worker (as rewards and tools do): an exception, a hang, ``sys.exit`` is one line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from eligibility._isolate import Worker, import_user_module
from eligibility.lm.episodes.chat import render
from eligibility.lm.episodes.tools import ask
from eligibility.lm.tasks import BOS, EOS, SPECIALS, Answer, EpisodicTask

HELD_OUT_SEED = 1_000_000
"""The held-out episodes are reset with seeds from here (training uses 0, 1, …)."""


def text_env_id(spec: str) -> str | None:
    """The registered id of ``module:Id`` if it names a Gymnasium env (None: it does not)."""
    if ":" not in spec or "," in spec:
        return None
    try:
        import gymnasium as gym
    except ImportError:
        return None
    module, _, name = spec.partition(":")
    if module.endswith(".py") or "/" in module:
        return None
    try:
        import_user_module(module)
    except Exception:
        return None
    return name if name in gym.envs.registry else None


class _Served:
    """The worker's side: live environments by handle."""

    def __init__(self, env_id: str) -> None:
        import gymnasium as gym

        self.gym, self.env_id = gym, env_id
        self.pool: list[Any] = []
        self.live: dict[int, Any] = {}
        self.next = 0

    def setup(self) -> tuple[str, str]:
        env = self.gym.make(self.env_id)
        spaces = (env.observation_space, env.action_space)
        if not all(isinstance(s, self.gym.spaces.Text) for s in spaces):
            kinds = ", ".join(type(s).__name__ for s in spaces)
            raise ValueError(
                f"{self.env_id}: its observation and action spaces are {kinds}; finetune plays "
                "environments of text (gymnasium.spaces.Text), train the others"
            )
        self.pool.append(env)
        return tuple("".join(sorted(s.character_set)) for s in spaces)  # type: ignore[return-value]

    def serve(self, request: tuple[Any, ...]) -> Any:
        kind, *args = request
        if kind == "open":
            env = self.pool.pop() if self.pool else self.gym.make(self.env_id)
            obs, _ = env.reset(seed=int(args[0]))
            self.next += 1
            self.live[self.next] = env
            return self.next, str(obs)
        if kind == "step":
            obs, r, terminated, truncated, _ = self.live[args[0]].step(args[1])
            return str(obs), float(r), bool(terminated or truncated)
        self.pool.append(self.live.pop(args[0]))
        return None


class TextEnvs:
    """One Gymnasium id's environments, in a protected worker.

    Args:
        env_id: a registered id (its module imported in the worker too: ``module:Id``).
        timeout: seconds a reset or a step may take.
    """

    def __init__(self, env_id: str, *, timeout: float = 60.0) -> None:
        module, _, name = env_id.rpartition(":")
        state: dict[str, _Served] = {}

        def setup() -> tuple[str, str]:
            if module:
                import_user_module(module)
            state["served"] = _Served(name)
            return state["served"].setup()

        self.env_id, self.timeout = env_id, timeout
        self._worker = Worker(lambda request: state["served"].serve(request), setup=setup)
        self.charsets = ("", "")

    def _ask(self, request: Any, doing: str) -> Any:
        said = lambda text: f"{self.env_id} {doing}: {text}"  # noqa: E731
        return ask(self._worker, request, self.timeout, self.close, said)

    def start(self) -> TextEnvs:
        """Start the worker, make one environment, check its spaces are text."""
        self.charsets = self._ask(None, "at make")
        return self

    def open(self, seed: int) -> tuple[int, str]:
        """A reset environment: (handle, its first observation)."""
        return self._ask(("open", seed), "at reset")

    def step(self, handle: int, action: str) -> tuple[str, float, bool]:
        """(observation, reward, done) of one action."""
        return self._ask(("step", handle, action), "at step")

    def release(self, handle: int) -> None:
        """The environment back to the pool."""
        self._ask(("release", handle), "at release")

    def close(self) -> None:
        """Stop the worker."""
        self._worker.close()


class TextWorld:
    """One episode of a text environment: its reset prompt and the answers to each reply."""

    def __init__(
        self,
        envs: TextEnvs,
        seed: int,
        *,
        prompt: Callable[[str], list[int]],
        turn: Callable[[str], list[int]],
        decode: Callable[[Sequence[int]], str],
        eos_id: int,
    ) -> None:
        self.envs, self.turn, self.decode, self.eos_id = envs, turn, decode, eos_id
        self.handle, first = envs.open(seed)
        self.prompt = tuple(prompt(first))

    def step(self, reply: Sequence[int], ended: bool) -> Answer:
        """The reply as the action; the observation as the next user turn."""
        obs, r, done = self.envs.step(self.handle, self.decode(reply))
        if done:
            self.envs.release(self.handle)
            return Answer((), r, done=True)
        return Answer((*(() if ended else (self.eos_id,)), *self.turn(obs)), r)


def text_task(env_id: str, *, tokenizer: Any = None, episodes: int = 64, held_out: int = 16,
              max_turns: int = 5, timeout: float = 60.0) -> EpisodicTask:  # fmt: skip
    """``env_id`` as a task of several turns (see the module docstring).

    ``episodes`` training seeds (0, 1, …) and ``held_out`` evaluation seeds from
    :data:`HELD_OUT_SEED`; the built-in model's vocabulary is the spaces' characters.
    """
    envs = TextEnvs(env_id, timeout=timeout).start()
    if tokenizer is None:
        chars = sorted(set("".join(envs.charsets)) | {"\n"})
        vocab = (*SPECIALS, *chars)
        ix = {c: i for i, c in enumerate(vocab)}

        def encode(text: str) -> list[int]:
            return [ix[c] for c in text if c in ix]

        def prompt(obs: str) -> list[int]:
            return [BOS, *encode(obs), ix["\n"]]

        def turn(obs: str) -> list[int]:
            return [ix["\n"], *encode(obs), ix["\n"]]

        def decode(ids: Sequence[int]) -> str:
            return "".join(vocab[i] for i in ids if i >= len(SPECIALS))

        eos, n_tokens = EOS, None
    else:
        vocab, eos, n_tokens = (), tokenizer.eos_token_id, len(tokenizer)

        def prompt(obs: str) -> list[int]:
            return render(tokenizer, [{"role": "user", "content": obs}], None, generation=True)

        def turn(obs: str) -> list[int]:
            head = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
            before = render(tokenizer, head, None, generation=False)
            after = render(tokenizer, [*head, {"role": "user", "content": obs}], None,
                           generation=True)  # fmt: skip
            cut = max((i + 1 for i, t in enumerate(before) if t == eos), default=len(before))
            return after[cut:]

        def decode(ids: Sequence[int]) -> str:
            return str(tokenizer.decode(list(ids), skip_special_tokens=True))

    def on(first: int, n: int) -> EpisodicTask:
        def world(i: int) -> TextWorld:
            return TextWorld(envs, first + i, prompt=prompt, turn=turn, decode=decode, eos_id=eos)

        return EpisodicTask(env_id, vocab, tuple((BOS,) for _ in range(n)), lambda i, c, e: 0.0,
                            max_completion_length=16, eos_id=eos, n_tokens=n_tokens,
                            close=envs.close, tokenizer=tokenizer, world=world,
                            max_turns=max_turns)  # fmt: skip

    task = on(0, episodes)
    return EpisodicTask(**{**vars(task), "held_out": on(HELD_OUT_SEED, held_out)})


__all__ = ["HELD_OUT_SEED", "TextEnvs", "TextWorld", "text_env_id", "text_task"]
