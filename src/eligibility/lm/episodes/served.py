"""The worker's side of tools and environments: the user's factories, tools and rewards, live.

:class:`ToolsServed` is what ``lm.episodes.toolbox.Toolbox`` runs in its worker
(``lm.episodes.worker``): it imports the tools, the environment factories and the reward
functions there, probes one instance of each environment for its tools' schemas, resets an
environment with a row, calls a tool, and scores a batch of ended episodes as TRL scores one
(the reward functions on the whole conversations, then each environment's ``get_reward``).
Every call into the user's code is made here, bounded and isolated; a failure comes back as
one line naming the environment, the method and the option that bounds it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from eligibility._isolate import load_function
from eligibility.lm.episodes.episode import Ending
from eligibility.lm.episodes.worker import Served, UserRaised, bounded, describe, what
from eligibility.lm.rewards import Raised, as_reward, call_all, combine, reward_name
from eligibility.lm.usermetrics import UserLogs

_RESERVED = ("reset", "get_reward")


def _load(spec: str | Callable[..., Any], what: str) -> Callable[..., Any]:
    fn = load_function(spec, example=f"my_env.py:{what}") if isinstance(spec, str) else spec
    if not callable(fn):
        raise ValueError(f"{spec!r} is not callable: give a {what}")
    return fn


def _name(fn: object) -> str:
    return str(getattr(fn, "__name__", None) or type(fn).__name__)


def short_name(spec: object) -> str:
    """A reward function's name in metrics (TRL's ``__name__``): ``FILE.py:fn`` → ``fn``."""
    return spec.rpartition(":")[2] if isinstance(spec, str) else _name(spec)


def _tools_of(env: object) -> dict[str, Callable[..., Any]]:
    """An environment's public methods other than ``reset`` and ``get_reward``.

    Listed on its class, as TRL lists them: a property is never evaluated to find them.
    """
    return {
        name: getattr(env, name)
        for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
        if not name.startswith("_") and name not in _RESERVED
    }


def _reward_is_a_method(kind: type, name: str | None) -> None:
    """Refuse a ``get_reward`` that TRL could not call: a property, a number, not a method.

    (``get_reward = None`` says the class has none.)

    Raises:
        ValueError: naming the environment and what its ``get_reward`` is.
    """
    found = inspect.getattr_static(kind, "get_reward", None)
    if found is None or callable(found) or isinstance(found, staticmethod | classmethod):
        return
    what = "a property" if isinstance(found, property) else f"a {type(found).__name__}"
    raise ValueError(
        f"{env_words(name)}'s get_reward is {what}, not a method: TRL calls env.get_reward(); "
        "write it as def get_reward(self) -> float"
    )


def env_words(name: str | None) -> str:
    """How an error names an environment: ``"the environment"``, ``"environment 'a'"``."""
    return "the environment" if name is None else f"environment {name!r}"


Schemas = dict[str | None, list[dict[str, Any]]]

Tool = Callable[..., object] | str
"""A standalone tool: a callable, or a ``module:fn`` / ``FILE.py:fn`` spec."""

Factory = Callable[[], object] | str
"""Makes one environment (TRL's ``environment_factory``; a class, a callable or a spec)."""

Factories = Factory | Mapping[str, Factory]
"""One factory, or one per environment name (a row's ``environment`` chooses)."""

TrlTools = tuple[Sequence[Tool] | None, Factories | None]
"""TRL's ``tools=`` and ``environment_factory=`` from Python (None: ``--tools``, ``--env``)."""


class ToolsServed(Served):
    """The worker's side: the factories, the live environments, the standalone tools."""

    def __init__(
        self,
        tools: Sequence[Any],
        factories: Mapping[str | None, Any],
        schema: Callable[[Callable[..., Any]], dict[str, Any]],
        timeout: float,
        rewards: Sequence[Any] = (),
        weights: Sequence[float] | None = None,
        reward_timeout: float = 60.0,
    ) -> None:
        super().__init__(timeout)
        self.reward_timeout = reward_timeout
        self.specs = (tools, factories, rewards)
        self.weights = [1.0] * len(rewards) if weights is None else [float(w) for w in weights]
        self.schema = schema
        self.tools: dict[str, Callable[..., Any]] = {}

    def setup(self) -> None:
        """Nothing of the user's yet: each kind is loaded by a request of its own (:meth:`do_load`).

        So that a failure names what was being loaded (``lm.episodes.toolbox.LOADED``).
        """

    def do_load(self, kind: str) -> None:
        """Import one kind of the user's code: ``rewards``, ``tools`` or ``factories``."""
        tools, factories, rewards = self.specs
        if kind == "rewards":
            self.rewards = [(reward_name(f), _load(f, "reward")) for f in rewards]
        elif kind == "tools":
            for spec in tools:
                fn = _load(spec, "tool")
                if _name(fn) in self.tools:
                    raise ValueError(
                        f"two tools are named {_name(fn)!r} (the model calls a tool by its "
                        "name): rename one, or give it once"
                    )
                self.tools[_name(fn)] = fn
        else:
            self.factories = {k: _load(f, "Factory") for k, f in factories.items()}

    def make(self, kind: str | None) -> Any:
        """A new instance of environment ``kind`` (None: tools only, no environment)."""
        if kind not in self.factories:  # standalone tools only
            return None
        try:
            return self.user(self.factories[kind])
        except UserRaised as err:
            raise ValueError(f"{env_words(kind)}'s factory {describe(err, None)}") from None

    def do_probe(self) -> tuple[Schemas, list[str], list[str]]:
        """Probe one instance of each environment: the tools' schemas, notes, and its reward.

        Returns:
            The schemas by environment name, notes to say, and the names of the environment
            classes that pay their own reward (``get_reward``): each a reward of its own, at
            weight 1, named after its class (TRL's).
        """
        schemas, notes = {}, []
        self.paid: list[type] = []
        for name in self.factories or {None: None}:
            methods: dict[str, Callable[..., Any]] = {}
            if name in self.factories:
                handle, env = self.checkout(name)
                self.do_release(handle)  # the probe seeds the pool
                if not callable(getattr(env, "reset", None)):
                    raise ValueError(f"{env_words(name)} has no reset() (TRL's contract)")
                methods = _tools_of(env)
                _reward_is_a_method(type(env), name)
                if callable(getattr(env, "get_reward", None)) and type(env) not in self.paid:
                    self.paid.append(type(env))
                if both := sorted(set(methods) & set(self.tools)):
                    raise ValueError(
                        f"tool {both[0]!r} is both a standalone tool (--tools) and a method of "
                        f"{env_words(name)}: the model could not tell them apart; rename one"
                    )
                if not methods and not self.tools:
                    said = "has no public method: its episodes offer no tool"
                    notes.append(f"{env_words(name)} {said}")
            try:
                schemas[name] = [
                    self.schema(fn) for fn in [*self.tools.values(), *methods.values()]
                ]
            except ValueError as err:
                raise ValueError(f"{env_words(name)}: {err}") from None
        return schemas, notes, [kind.__name__ for kind in self.paid]

    def do_open(self, name: str | None, row: dict[str, Any]) -> tuple[int, str | None]:
        """An environment of ``name`` reset with the row: (handle, the text ``reset`` gave)."""
        handle, env = self.checkout(name)
        if env is None:
            return handle, None
        try:
            observation = self.user(env.reset, **row)
        except UserRaised as err:
            raise ValueError(f"reset() {describe(err, None)}") from None
        if observation is not None and not isinstance(observation, str):
            raise ValueError(
                f"reset() returned {what(observation)}: return the text to append to the last "
                "user message, or None (TRL's contract)"
            )
        return handle, observation if observation is None else bounded("reset()", observation)

    def do_call(self, handle: int, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """A tool's answer as TRL gives it, and whether the call failed."""
        _, env = self.live[handle]
        fn = self.tools.get(name) or (_tools_of(env).get(name) if env is not None else None)
        if fn is None:
            return str({"error": f"Tool {name} not found."}), True
        try:
            return str(self.tool(handle, fn, arguments)), False
        except Exception as err:  # the tool's error is its answer, as TRL gives it
            return str({"error": str(err)}), True

    def do_settle(
        self, handles: list[int], batch: dict[str, Any], state: object
    ) -> tuple[list[Ending], dict[str, list[float]]]:
        """Score a batch's ended episodes at once, then pool their environments.

        Each reward function is called once on the whole batch as TRL calls it (``batch`` as
        ``lm.rewards.call_all`` takes it, with ``environments``, ``trainer_state``,
        ``log_metric`` and ``log_extra``); then each environment class with ``get_reward()`` is
        one more function of weight 1, None on the other classes' episodes (TRL's). For
        episode i, R = Σ_{k : r_ik ≠ None} w_k · r_ik (0 where none scores).

        ``log_extra(column, values)`` (one value per episode of the batch, in its order) gives
        each episode its cell of ``column`` (:attr:`Ending.extra`): a column of the trackers'
        ``completions`` table and of ``episodes.jsonl`` at an evaluation, as TRL's columns of
        its completions table (a value that is not a number, text or None: its text). Both
        loggers check what they are given at the call (``lm.usermetrics``).

        Returns:
            Each episode's :class:`Ending` (its ``success`` the environment's ``is_success``),
            and what the functions logged with ``log_metric``, by name.
        """
        envs = [self.live[h][1] for h in handles]
        logs = UserLogs(len(handles))  # checked at the call, in the user's code
        extra: dict[str, Any] = {
            "trainer_state": state,
            "log_metric": logs.log_metric,
            "log_extra": logs.log_extra,
        }
        if any(env is not None for env in envs):
            extra["environments"] = envs
        r_ik = self._scored({**batch, "extra": extra})
        for kind in self.paid:
            r_ik.append(
                [
                    self.do_reward(h) if type(e) is kind else None
                    for h, e in zip(handles, envs, strict=True)
                ]
            )
        r, _ = combine(r_ik, [*self.weights, *[1.0] * len(self.paid)])
        parts = [
            tuple(float("nan") if x is None else x for x in col) for col in zip(*r_ik, strict=True)
        ]
        endings = [
            Ending(
                float(r[i]),
                parts[i],
                self._success(envs[i]),
                logs.extra(i),
            )
            for i in range(len(handles))
        ]
        for h in handles:
            self.do_release(h)
        return endings, logs.logged

    def _scored(self, batch: dict[str, Any]) -> list[list[float | None]]:
        """``call_all`` of the reward functions on the batch, given ``--reward-timeout`` in all.

        Raises:
            ValueError: a function raised, returned no rewards, or is still running past the
                timeout (named, with the option).
        """
        names = {id(fn): name for name, fn in self.rewards}
        running: list[str] = []

        def call(fn: Callable[..., Any], **kwargs: Any) -> Any:
            running.append(names.get(id(fn), _name(fn)))
            return self.user(fn, **kwargs)

        try:
            return self.within(self.reward_timeout, call_all, self.rewards, batch, call=call)
        except Raised as err:
            raise ValueError(f"reward function {err.name} {describe(err.err, None)}") from None
        except TimeoutError:
            raise ValueError(
                f"reward function {running[-1]} did not return within {self.reward_timeout:g} s "
                "(--reward-timeout): it sleeps, waits or loops; raise --reward-timeout if it "
                "honestly needs longer"
            ) from None

    def _success(self, env: object) -> float:
        """The environment's ``is_success`` (an attribute or property: a bool), or NaN.

        Read on a thread given ``--tool-timeout``, as the environment's methods are.
        """
        try:
            value = (
                None
                if env is None
                else self.within(self.timeout, self.user, getattr, env, "is_success", None)
            )
        except TimeoutError:
            raise ValueError(
                f"the environment's is_success did not return within {self.timeout:g} s "
                "(--tool-timeout)"
            ) from None
        except UserRaised as err:
            raise ValueError(f"the environment's is_success {describe(err, None)}") from None
        if value is None:
            return float("nan")
        if not isinstance(value, bool | np.bool_):
            raise ValueError(
                f"the environment's is_success is {what(value)}: make it a bool (the episode "
                "succeeded), or None where it does not say"
            )
        return float(value)

    def do_reward(self, handle: int) -> float | None:
        """The episode's environment's ``get_reward()`` (None: it has none, or it hung)."""
        _, env = self.live[handle]
        get = getattr(env, "get_reward", None)
        if get is None or handle in self.stuck:
            return None
        try:  # on a thread given --tool-timeout, as a tool is
            value = self.tool(handle, get, {})
        except TimeoutError:
            raise ValueError(
                f"get_reward() did not return within {self.timeout:g} s (--tool-timeout)"
            ) from None
        except (Exception, SystemExit) as err:
            raise ValueError(f"get_reward() {describe(err, None)}") from None
        try:
            return as_reward(value)
        except ValueError as err:
            raise ValueError(f"get_reward() returned {err}: return a real number") from None


__all__ = [
    "Factories",
    "Factory",
    "Schemas",
    "Tool",
    "ToolsServed",
    "TrlTools",
    "env_words",
    "short_name",
]
