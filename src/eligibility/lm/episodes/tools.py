r"""Tools and environments in TRL's conventions, run in a protected worker as rewards are.

A class written for TRL's ``GRPOTrainer(environment_factory=...)`` runs unchanged: one
instance per episode (made once, reset often), ``reset(**row)`` with the row's fields (its
return value, if not None, is text appended to the last user message), every public method
other than ``reset`` and ``get_reward`` a tool described by its signature and docstring
(``lm.edge.hf.tool_schema``, as the chat templates' ``tools=`` take them), an
optional ``get_reward()`` the environment's own reward; a dict of factories is selected by
each row's ``environment`` field. Standalone tools (``module:fn``) are offered beside them.

The user's code (factories, ``reset``, the tools, ``get_reward``; sync or ``async def``, as
TRL awaits both) runs in the worlds' one worker (``lm.episodes.worker``), so a print cannot
reach stdout and a hang, ``sys.exit`` or a crash cannot take the command down: a tool that
raises or outlasts ``timeout`` is a *failed call* (its error is the tool's message, as TRL
answers it, and it is counted), while a reset or a reward that fails, or a worker that ends,
is a ``ValueError`` of one line naming the environment, the method and the row (the run stops,
its last checkpoint whole). Two tools of one name, a standalone tool named as an
environment's method, a row naming no environment given, a ``reset`` returning other than
text or None: each refused in one line.

The model calls a tool the way Hermes-style chat templates (Qwen's among them) render a call:
``<tool_call>{"name": …, "arguments": {…}}</tool_call>``; :func:`parse_calls` reads them, and a
block that is not such JSON, or names no tool offered, is a failed call, not an error.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eligibility._isolate import load_function
from eligibility._output import note
from eligibility.lm.episodes.worker import SLACK_S, Served, UserRaised, Worlds, describe, what
from eligibility.lm.rewards import Raised, as_reward, call_all, combine, reward_name

_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_RESERVED = ("reset", "get_reward")


@dataclass(frozen=True)
class Call:
    """One tool call read from a reply: its name and arguments, or why it cannot be made."""

    name: str
    arguments: dict[str, Any]
    error: str | None = None


def parse_calls(text: str) -> list[Call]:
    """The tool calls of a reply, in order: each ``<tool_call>…</tool_call>`` block's JSON.

    A block that does not parse, is not ``{"name": str, "arguments": {…}}`` (arguments may be
    a JSON string of an object) or is cut before its closing tag is a :class:`Call` with an
    ``error``.
    """
    calls = []
    for block in _CALL.finditer(text):
        body, closed = block.group(1).strip(), block.group(0).endswith("</tool_call>")
        try:
            if not closed:
                raise ValueError("the call is cut before </tool_call>")
            data = json.loads(body)
            name, args = data.get("name"), data.get("arguments", {})
            args = json.loads(args) if isinstance(args, str) else args
            if not isinstance(name, str) or not isinstance(args, dict):
                raise ValueError('a call is {"name": "...", "arguments": {...}}')
        except (ValueError, AttributeError) as err:
            calls.append(Call("", {}, f"malformed tool call: {err}"))
            continue
        calls.append(Call(name, args))
    return calls


def assistant_message(text: str) -> dict[str, Any]:
    """A reply as TRL hands it to reward functions: its text and well-formed calls.

    The text outside the ``<tool_call>`` blocks is its ``content``; the calls, its
    ``tool_calls``.
    """
    message: dict[str, Any] = {"role": "assistant", "content": _CALL.sub("", text).strip()}
    if calls := [c for c in parse_calls(text) if c.error is None]:
        message["tool_calls"] = [
            {"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ]
    return message


def _load(spec: str | Callable[..., Any], what: str) -> Callable[..., Any]:
    fn = load_function(spec, example=f"my_env.py:{what}") if isinstance(spec, str) else spec
    if not callable(fn):
        raise ValueError(f"{spec!r} is not callable: give a {what}")
    return fn


def _name(fn: object) -> str:
    return str(getattr(fn, "__name__", None) or type(fn).__name__)


def _tools_of(env: object) -> dict[str, Callable[..., Any]]:
    """An environment's public methods other than ``reset`` and ``get_reward``.

    Listed on its class, as TRL lists them: a property is never evaluated to find them.
    """
    return {
        name: getattr(env, name)
        for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
        if not name.startswith("_") and name not in _RESERVED
    }


def _env(name: str | None) -> str:
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


def _ignored(*args: object, **kwargs: object) -> None:
    """TRL's ``log_metric`` and ``log_extra``, taken and not logged (yet)."""


class _Served(Served):
    """The worker's side: the factories, the live environments, the standalone tools."""

    def __init__(
        self,
        tools: Sequence[Any],
        factories: Mapping[str | None, Any],
        schema: Callable[[Callable[..., Any]], dict[str, Any]],
        timeout: float,
        rewards: Sequence[Any] = (),
        weights: Sequence[float] | None = None,
    ) -> None:
        super().__init__(timeout)
        self.rewards = [(reward_name(f), _load(f, "reward")) for f in rewards]
        self.weights = [1.0] * len(self.rewards) if weights is None else [float(w) for w in weights]
        self.tools: dict[str, Callable[..., Any]] = {}
        for spec in tools:
            fn = _load(spec, "tool")
            if _name(fn) in self.tools:
                raise ValueError(
                    f"two tools are named {_name(fn)!r} (the model calls a tool by its name): "
                    "rename one, or give it once"
                )
            self.tools[_name(fn)] = fn
        self.factories = {k: _load(f, "Factory") for k, f in factories.items()}
        self.schema = schema

    def make(self, kind: str | None) -> Any:
        if kind not in self.factories:  # standalone tools only
            return None
        try:
            return self.user(self.factories[kind])
        except UserRaised as err:
            raise ValueError(f"{_env(kind)}'s factory {describe(err, None)}") from None

    def setup(self) -> tuple[Schemas, list[str], bool]:
        """Probe one instance of each environment: the tools' schemas, notes, and a reward.

        Returns:
            The schemas by environment name, notes to say, and whether an environment pays
            its own reward (``get_reward``).
        """
        schemas, notes, paid = {}, [], False
        for name in self.factories or {None: None}:
            methods: dict[str, Callable[..., Any]] = {}
            if name in self.factories:
                handle, env = self.checkout(name)
                self.do_release(handle)  # the probe seeds the pool
                if not callable(getattr(env, "reset", None)):
                    raise ValueError(f"{_env(name)} has no reset() (TRL's contract)")
                methods = _tools_of(env)
                paid = paid or callable(getattr(env, "get_reward", None))
                if both := sorted(set(methods) & set(self.tools)):
                    raise ValueError(
                        f"tool {both[0]!r} is both a standalone tool (--tools) and a method of "
                        f"{_env(name)}: the model could not tell them apart; rename one"
                    )
                if not methods and not self.tools:
                    notes.append(f"{_env(name)} has no public method: its episodes offer no tool")
            try:
                schemas[name] = [
                    self.schema(fn) for fn in [*self.tools.values(), *methods.values()]
                ]
            except ValueError as err:
                raise ValueError(f"{_env(name)}: {err}") from None
        return schemas, notes, paid

    def do_open(self, name: str | None, row: dict[str, Any]) -> tuple[int, str | None]:
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
        return handle, observation

    def do_call(self, handle: int, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        _, env = self.live[handle]
        fn = self.tools.get(name) or (_tools_of(env).get(name) if env is not None else None)
        if fn is None:
            return str({"error": f"Tool {name} not found."}), True
        try:
            return str(self.tool(handle, fn, arguments)), False
        except Exception as err:  # the tool's error is its answer, as TRL gives it
            return str({"error": str(err)}), True

    def do_score(self, handle: int, batch: dict[str, Any]) -> float:
        """R = Σ_{k : r_k ≠ None} w_k · r_k of a finished episode, ``get_reward()`` at w = 1.

        The reward functions are called as TRL calls them, on a batch of one (``batch`` as
        ``lm.rewards.call_all`` takes it) with ``environments``; R is 0 where none scores.
        """
        _, env = self.live[handle]
        extra: dict[str, Any] = {
            "trainer_state": None,
            "log_metric": _ignored,
            "log_extra": _ignored,
        }
        if env is not None:
            extra["environments"] = [env]
        try:
            r_ik = call_all(self.rewards, {**batch, "extra": extra}, call=self.user)
        except Raised as err:
            raise ValueError(f"reward function {err.name} {describe(err.err, None)}") from None
        r, _ = combine([*r_ik, [self.do_reward(handle)]], [*self.weights, 1.0])
        return float(r[0])

    def do_reward(self, handle: int) -> float | None:
        _, env = self.live[handle]
        get = getattr(env, "get_reward", None)
        if get is None or handle in self.stuck:
            return None
        try:
            value = self.user(get)
            return as_reward(value)
        except UserRaised as err:
            raise ValueError(f"get_reward() {describe(err, None)}") from None
        except ValueError as err:
            raise ValueError(f"get_reward() returned {err}: return a real number") from None


class Toolbox(Worlds):
    """The run's tools and environments, in a protected worker (``lm.episodes.worker``).

    Args:
        tools: standalone tools, callables or ``module:fn`` / ``FILE.py:fn`` specs.
        environment_factory: a factory (a class, a callable or a spec), or a dict of them by
            the rows' ``environment`` value, or None.
        timeout: seconds a single call (a reset, a tool, a reward) may take; a tool that takes
            longer is a failed call, anything else stops the run in one line.
        schema: a tool's JSON schema for the chat template (``lm.edge.hf.tool_schema``).
        rewards: reward functions in TRL's convention (specs or callables), called in the
            worker on each finished episode's whole conversation, with ``environments=``.
        weights: w_k, one per reward function (None: all 1).
        reward_timeout: seconds the reward functions may take on one episode.
    """

    def __init__(
        self,
        tools: Sequence[Tool] = (),
        environment_factory: Factories | None = None,
        *,
        timeout: float = 60.0,
        schema: Callable[[Callable[..., Any]], dict[str, Any]],
        rewards: Sequence[Any] = (),
        weights: Sequence[float] | None = None,
        reward_timeout: float = 60.0,
    ) -> None:
        factories = environment_factory
        if factories is None:
            factories = {}
        elif not isinstance(factories, Mapping):
            factories = {None: factories}
        if not tools and not factories:
            raise ValueError("give tools (--tools module:fn,...) or an environment (--env)")
        self.multi = isinstance(environment_factory, Mapping)
        self.names = sorted(map(str, factories))
        if weights is not None and len(weights) != len(rewards):
            raise ValueError(
                f"--reward-weights has {len(weights)} weights for {len(rewards)} reward "
                "functions: give one weight per function (get_reward() weighs 1, as TRL's)"
            )
        self.reward_timeout = reward_timeout
        self.rewarded = bool(rewards)  # or an environment's get_reward (known at start)
        served = lambda: _Served(tools, factories, schema, timeout, rewards, weights)  # noqa: E731
        super().__init__(served, timeout=timeout)
        self.schemas: Schemas = {}

    def start(self) -> Toolbox:
        """Start the worker: import the tools and factories, probe each environment once.

        Raises:
            ValueError: a spec that does not load, a factory that raises, an environment
                without ``reset``, a tool without a docstring the model can read, two tools of
                one name (one line).
        """
        self.schemas, notes, paid = self.ask(None, "loading the tools and environments")
        self.rewarded = self.rewarded or paid
        for text in notes:
            note("finetune", text)
        return self

    def environment_of(self, row: Mapping[str, Any], i: int | None = None) -> str | None:
        """The environment a row selects (None: the only one, or none).

        Raises:
            ValueError: a row of several environments' run that names none of them.
        """
        if not self.multi:
            return None
        name = row.get("environment")
        if name not in self.names:
            where = "a row" if i is None else f"row {i}"
            said = (
                "has no environment field"
                if "environment" not in row
                else (f"has environment {name!r}")
            )
            raise ValueError(
                f"{where} {said}: each row names one of the environments given "
                f"({', '.join(self.names)})"
            )
        return name

    def open(self, row: Mapping[str, Any], i: int | None = None) -> tuple[int, str | None]:
        """An environment for one episode, reset with the row: (handle, observation or None)."""
        name = self.environment_of(row, i)
        fields = {k: v for k, v in row.items() if not (self.multi and k == "environment")}
        where = "" if i is None else f" (row {i})"
        return self.ask(("open", name, fields), f"{_env(name)}{where}")

    def call(self, handle: int, call: Call) -> tuple[str, bool]:
        """A tool call's answer, and whether it failed (a malformed call, a timeout too)."""
        if call.error is not None:
            return str({"error": call.error}), True
        return self.ask(
            ("call", handle, call.name, call.arguments), f"calling {call.name}", slack=SLACK_S
        )

    def score(self, handle: int, batch: dict[str, Any], row: int) -> float:
        """A finished episode's reward (``_Served.do_score``), bounded by --reward-timeout."""
        return self.ask(
            ("score", handle, batch), f"scoring row {row}'s episode", slack=self.reward_timeout
        )

    def reward(self, handle: int) -> float | None:
        """The environment's ``get_reward()`` (None: it has none)."""
        return self.ask(("reward", handle), "the environment's reward")

    def release(self, handle: int) -> None:
        """The episode's environment back to the pool (reset again when next used)."""
        self.ask(("release", handle), "releasing an environment")


def factories(spec: str | None) -> Any:
    """``--env``'s value as ``Toolbox`` takes it: one spec, or ``{name: spec}`` of ``a=spec,…``."""
    if spec is None:
        return None
    entries = [e.strip() for e in spec.split(",") if e.strip()]
    named = [e.partition("=") for e in entries]
    if all(sep for _, sep, _ in named):
        names = [k.strip() for k, _, _ in named]
        if twice := sorted({k for k in names if names.count(k) > 1}):
            raise ValueError(
                f"--env {spec!r} names environment {twice[0]!r} twice: give each name once"
            )
        return {k.strip(): v.strip() for k, _, v in named}
    if len(entries) != 1 or any(sep for _, sep, _ in named):
        raise ValueError(
            f"--env {spec!r}: give one module:Factory, or name=module:Factory,... (each row's "
            "environment field names one)"
        )
    return entries[0]


__all__ = ["Call", "Toolbox", "assistant_message", "factories", "parse_calls"]
