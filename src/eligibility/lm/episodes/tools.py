r"""Tools and environments in TRL's conventions, run in a protected worker as rewards are.

A class written for TRL's ``GRPOTrainer(environment_factory=...)`` runs unchanged: one
instance per episode (made once, reset often), ``reset(**row)`` with the row's fields (its
return value, if not None, is text appended to the last user message), every public method
other than ``reset`` and ``get_reward`` a tool described by its signature and docstring
(``transformers.utils.get_json_schema``, as the chat templates' ``tools=`` take them), an
optional ``get_reward()`` the environment's own reward; a dict of factories is selected by
each row's ``environment`` field. Standalone tools (``module:fn``) are offered beside them.

The user's code (factories, ``reset``, the tools, ``get_reward``) runs in one
:class:`eligibility._isolate.Worker` for the run, so a print cannot reach stdout and a hang,
``sys.exit`` or a crash cannot take the command down: a tool that raises is a *failed call*
(its error is the tool's message, as TRL answers it, and it is counted), while a call that
outlasts ``timeout`` or ends the worker is a ``ValueError`` of one line (the run stops, its last
checkpoint whole).

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

from eligibility._isolate import UserCodeError, Worker, load_function

_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_RESERVED = ("reset", "get_reward")


def ask(
    worker: Worker,
    request: Any,
    timeout: float,
    close: Callable[[], None],
    said: Callable[[str], str],
) -> Any:
    """One request to a world's worker (None: start it), bounded by ``--tool-timeout``.

    The user's code failing (an exception, a hang, an exit) closes the world and is one
    ValueError, ``said`` of the worker's text; the worker's own ValueError closes it too.
    """
    try:
        if request is None:
            return worker.start(timeout=timeout)
        return worker.call(request, timeout=timeout)
    except UserCodeError as err:
        close()
        hint = " (--tool-timeout)" if err.kind == "timeout" else ""
        raise ValueError(f"{said(err.text)}{hint}") from None
    except ValueError:
        close()
        raise


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


def _load(spec: str | Callable[..., Any], what: str) -> Callable[..., Any]:
    fn = load_function(spec, example=f"my_env.py:{what}") if isinstance(spec, str) else spec
    if not callable(fn):
        raise ValueError(f"{spec!r} is not callable: give a {what}")
    return fn


def _schema(fn: Callable[..., Any]) -> dict[str, Any]:
    from transformers.utils import get_json_schema

    try:
        return get_json_schema(fn)
    except Exception as err:  # transformers' DocstringParsingException and TypeError
        name = getattr(fn, "__qualname__", repr(fn))
        raise ValueError(
            f"tool {name} cannot be described to the model ({err}): give it type hints and a "
            "Google-style docstring with an Args: section"
        ) from None


def _tools_of(env: Any) -> dict[str, Callable[..., Any]]:
    """An environment's public methods other than ``reset`` and ``get_reward``."""
    return {
        name: member
        for name, member in inspect.getmembers(env, predicate=inspect.ismethod)
        if not name.startswith("_") and name not in _RESERVED
    }


class _Served:
    """The worker's side: the factories, the live environments, the standalone tools."""

    def __init__(self, tools: Sequence[Any], factories: Mapping[str | None, Any]) -> None:
        self.tools = {fn.__name__: fn for fn in (_load(t, "tool") for t in tools)}
        self.factories = {k: _load(f, "Factory") for k, f in factories.items()}
        self.pool: dict[str | None, list[Any]] = {k: [] for k in self.factories}
        self.live: dict[int, tuple[str | None, Any]] = {}
        self.next = 0

    def setup(self) -> dict[str | None, list[dict[str, Any]]]:
        """Probe one instance of each environment: the tools' schemas by environment name."""
        schemas = {}
        for name in self.factories or {None: None}:
            methods = {}
            if name in self.factories:
                env = self._make(name)
                if not callable(getattr(env, "reset", None)):
                    raise ValueError(f"environment {name or ''} has no reset() (TRL's contract)")
                self.pool[name].append(env)
                methods = _tools_of(env)
            schemas[name] = [_schema(fn) for fn in [*self.tools.values(), *methods.values()]]
        return schemas

    def _make(self, name: str | None) -> Any:
        try:
            return self.factories[name]()
        except Exception as err:
            named = f" {name!r}" if name is not None else ""
            raise ValueError(f"environment factory{named} raised: {err!r}") from None

    def serve(self, request: tuple[Any, ...]) -> Any:
        kind, *args = request
        return getattr(self, "do_" + kind)(*args)

    def do_open(self, name: str | None, row: dict[str, Any]) -> tuple[int, Any]:
        if name not in self.factories and self.factories:
            known = ", ".join(sorted(map(str, self.factories)))
            raise ValueError(f"a row's environment {name!r} is none of {known}")
        env = None
        observation = None
        if self.factories:
            env = self.pool[name].pop() if self.pool[name] else self._make(name)
            observation = env.reset(**row)
        self.next += 1
        self.live[self.next] = (name, env)
        return self.next, None if observation is None else str(observation)

    def do_call(self, handle: int, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        _, env = self.live[handle]
        fn = self.tools.get(name) or (_tools_of(env).get(name) if env is not None else None)
        if fn is None:
            return str({"error": f"Tool {name} not found."}), True
        try:
            return str(fn(**arguments)), False
        except Exception as err:  # the tool's error is its answer, as TRL gives it
            return str({"error": str(err)}), True

    def do_reward(self, handle: int) -> float | None:
        _, env = self.live[handle]
        get = getattr(env, "get_reward", None)
        return None if get is None else float(get())

    def do_release(self, handle: int) -> None:
        name, env = self.live.pop(handle)
        if env is not None:
            self.pool[name].append(env)


class Toolbox:
    """The run's tools and environments, in a protected worker.

    Args:
        tools: standalone tools, callables or ``module:fn`` / ``FILE.py:fn`` specs.
        environment_factory: a factory (a class, a callable or a spec), or a dict of them by
            the rows' ``environment`` value, or None.
        timeout: seconds a single call (a reset, a tool, a reward) may take.
    """

    def __init__(
        self,
        tools: Sequence[Any] = (),
        environment_factory: Any = None,
        *,
        timeout: float = 60.0,
    ) -> None:
        factories = environment_factory
        if factories is None:
            factories = {}
        elif not isinstance(factories, Mapping):
            factories = {None: factories}
        if not tools and not factories:
            raise ValueError("give tools (--tools module:fn,...) or an environment (--env)")
        self.multi = isinstance(environment_factory, Mapping)
        self.timeout = timeout
        state: dict[str, _Served] = {}  # the worker's own (filled there by setup)

        def setup() -> dict[str | None, list[dict[str, Any]]]:
            state["served"] = _Served(tools, factories)
            return state["served"].setup()

        self._worker = Worker(lambda request: state["served"].serve(request), setup=setup)
        self.schemas: dict[str | None, list[dict[str, Any]]] = {}

    def start(self) -> Toolbox:
        """Start the worker: import the tools and factories, probe each environment once.

        Raises:
            ValueError: a spec that does not load, a factory that raises, an environment
                without ``reset``, a tool without a docstring the model can read (one line).
        """
        self.schemas = self._ask(None, "loading the tools and environments")
        return self

    def _ask(self, request: Any, doing: str) -> Any:
        said = lambda text: f"{doing}: the user's code {text}"  # noqa: E731
        return ask(self._worker, request, self.timeout, self.close, said)

    def environment_of(self, row: Mapping[str, Any]) -> str | None:
        """The environment a row selects (None: the only one, or none)."""
        return row.get("environment") if self.multi else None

    def open(self, row: Mapping[str, Any]) -> tuple[int, str | None]:
        """An environment for one episode, reset with the row: (handle, observation or None)."""
        name = self.environment_of(row)
        fields = {k: v for k, v in row.items() if not (self.multi and k == "environment")}
        return self._ask(("open", name, fields), "resetting an environment")

    def call(self, handle: int, call: Call) -> tuple[str, bool]:
        """A tool call's answer, and whether it failed (a malformed call fails here too)."""
        if call.error is not None:
            return str({"error": call.error}), True
        return self._ask(("call", handle, call.name, call.arguments), f"calling {call.name}")

    def reward(self, handle: int) -> float | None:
        """The environment's ``get_reward()`` (None: it has none)."""
        return self._ask(("reward", handle), "asking get_reward()")

    def release(self, handle: int) -> None:
        """The episode's environment back to the pool (reset again when next used)."""
        self._ask(("release", handle), "releasing an environment")

    def close(self) -> None:
        """Stop the worker (and anything it started)."""
        self._worker.close()


def factories(spec: str | None) -> Any:
    """``--env``'s value as ``Toolbox`` takes it: one spec, or ``{name: spec}`` of ``a=spec,…``."""
    if spec is None:
        return None
    entries = [e.strip() for e in spec.split(",") if e.strip()]
    named = [e.partition("=") for e in entries]
    if all(sep for _, sep, _ in named):
        return {k.strip(): v.strip() for k, _, v in named}
    if len(entries) != 1 or any(sep for _, sep, _ in named):
        raise ValueError(
            f"--env {spec!r}: give one module:Factory, or name=module:Factory,... (each row's "
            "environment field names one)"
        )
    return entries[0]


__all__ = ["Call", "Toolbox", "factories", "parse_calls"]
