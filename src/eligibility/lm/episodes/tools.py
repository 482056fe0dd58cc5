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

An episode (:class:`ChatWorld`) is the row's conversation rendered with the tools' schemas
through the chat template (``lm.episodes.chat``), the environment's ``reset`` text appended to
its last user message. Each reply is decoded, its tool calls read
(``lm.episodes.chat.parse_calls``: a block that is not such JSON, or names no tool offered, is a
failed call, not an error) and made; each result is a ``tool`` message, and the world's tokens
are what the template renders for those messages and the next assistant header. The episode
ends at a reply that calls no tool, when ``max_tool_calls`` rounds of calls have been answered,
at ``max_turns`` replies, or where the context leaves no room for another reply before the
model's positions (a prompt that leaves none is refused, as a single turn's is); a cut is said
once on stderr. Then the reward functions and the environment's ``get_reward()`` are the last
turn's reward.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from eligibility._isolate import load_function
from eligibility._output import note, speaker
from eligibility.lm.episodes.chat import (
    Call,
    Span,
    assistant_message,
    parse_calls,
    render,
    shows_tools,
    tool_suffix,
)
from eligibility.lm.episodes.episode import Ending
from eligibility.lm.episodes.worker import (
    SLACK_S,
    Served,
    UserRaised,
    Worlds,
    bounded,
    describe,
    what,
)
from eligibility.lm.rewards import Raised, as_reward, call_all, combine, reward_name
from eligibility.lm.tasks import Answer, EpisodicTask, Task
from eligibility.lm.tokenizer import Tokenizer
from eligibility.lm.usermetrics import UserLogs

_RESERVED = ("reset", "get_reward")


def _load(spec: str | Callable[..., Any], what: str) -> Callable[..., Any]:
    fn = load_function(spec, example=f"my_env.py:{what}") if isinstance(spec, str) else spec
    if not callable(fn):
        raise ValueError(f"{spec!r} is not callable: give a {what}")
    return fn


def _name(fn: object) -> str:
    return str(getattr(fn, "__name__", None) or type(fn).__name__)


def _short(spec: object) -> str:
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
        f"{_env(name)}'s get_reward is {what}, not a method: TRL calls env.get_reward(); write "
        "it as def get_reward(self) -> float"
    )


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
        reward_timeout: float = 60.0,
    ) -> None:
        super().__init__(timeout)
        self.reward_timeout = reward_timeout
        self.specs = (tools, factories, rewards)
        self.weights = [1.0] * len(rewards) if weights is None else [float(w) for w in weights]
        self.schema = schema
        self.tools: dict[str, Callable[..., Any]] = {}

    def _load_all(self) -> None:
        """Import the tools, factories and reward functions (in the worker, at its start)."""
        tools, factories, rewards = self.specs
        self.rewards = [(reward_name(f), _load(f, "reward")) for f in rewards]
        for spec in tools:
            fn = _load(spec, "tool")
            if _name(fn) in self.tools:
                raise ValueError(
                    f"two tools are named {_name(fn)!r} (the model calls a tool by its name): "
                    "rename one, or give it once"
                )
            self.tools[_name(fn)] = fn
        self.factories = {k: _load(f, "Factory") for k, f in factories.items()}

    def make(self, kind: str | None) -> Any:
        if kind not in self.factories:  # standalone tools only
            return None
        try:
            return self.user(self.factories[kind])
        except UserRaised as err:
            raise ValueError(f"{_env(kind)}'s factory {describe(err, None)}") from None

    def setup(self) -> tuple[Schemas, list[str], list[str]]:
        """Probe one instance of each environment: the tools' schemas, notes, and its reward.

        Returns:
            The schemas by environment name, notes to say, and the names of the environment
            classes that pay their own reward (``get_reward``): each a reward of its own, at
            weight 1, named after its class (TRL's).
        """
        self._load_all()
        schemas, notes = {}, []
        self.paid: list[type] = []
        for name in self.factories or {None: None}:
            methods: dict[str, Callable[..., Any]] = {}
            if name in self.factories:
                handle, env = self.checkout(name)
                self.do_release(handle)  # the probe seeds the pool
                if not callable(getattr(env, "reset", None)):
                    raise ValueError(f"{_env(name)} has no reset() (TRL's contract)")
                methods = _tools_of(env)
                _reward_is_a_method(type(env), name)
                if callable(getattr(env, "get_reward", None)) and type(env) not in self.paid:
                    self.paid.append(type(env))
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
        return schemas, notes, [kind.__name__ for kind in self.paid]

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
        return handle, observation if observation is None else bounded("reset()", observation)

    def do_call(self, handle: int, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
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


class Toolbox(Worlds):
    """The run's tools and environments, in a protected worker (``lm.episodes.worker``).

    Args:
        tools: standalone tools, callables or ``module:fn`` / ``FILE.py:fn`` specs.
        environment_factory: a factory (a class, a callable or a spec), or a dict of them by
            the rows' ``environment`` value, or ``--env``'s text (:func:`factories`), or None.
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
        if isinstance(environment_factory, str):  # --env's value: one spec, or name=spec,...
            environment_factory = factories(environment_factory)
        given = environment_factory
        if given is None:
            given = {}
        elif not isinstance(given, Mapping):
            given = {None: given}
        if not tools and not given:
            raise ValueError("give tools (--tools module:fn,...) or an environment (--env)")
        self.multi = isinstance(environment_factory, Mapping)
        self.names = sorted(map(str, given))
        if weights is not None and len(weights) != len(rewards):
            raise ValueError(
                f"--reward-weights has {len(weights)} weights for {len(rewards)} reward "
                "functions: give one weight per function (get_reward() weighs 1, as TRL's)"
            )
        self.reward_timeout = reward_timeout
        self.reward_names = [_short(f) for f in rewards]  # and get_reward's, known at start
        served = lambda: _Served(  # noqa: E731
            tools, given, schema, timeout, rewards, weights, reward_timeout
        )
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
        self.reward_names += paid
        for text in notes:
            note(speaker("finetune"), text)
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

    @property
    def rewarded(self) -> bool:
        """Whether the episodes have a reward: functions, or an environment's ``get_reward``."""
        return bool(self.reward_names)

    def settle(
        self, handles: list[int], batch: dict[str, Any], state: object
    ) -> tuple[list[Ending], dict[str, list[float]]]:
        """A batch's ended episodes scored at once (``_Served.do_settle``).

        Returns their endings and what the reward functions logged (``log_metric``). In the
        worker the reward functions are given ``--reward-timeout``, each environment's
        ``get_reward`` and ``is_success`` ``--tool-timeout``, each stopped there with a message
        naming its option; the request's own bound, their sum, is only a last resort.
        """
        return self.ask(
            ("settle", handles, batch, state),
            f"scoring a batch of {len(handles)} episodes",
            slack=self.reward_timeout + 2 * len(handles) * self.timeout + SLACK_S,
            bound="--reward-timeout, --tool-timeout",
        )

    def reward(self, handle: int) -> float | None:
        """The environment's ``get_reward()`` (None: it has none)."""
        return self.ask(("reward", handle), "the environment's reward")

    def release(self, handle: int) -> None:
        """The episode's environment back to the pool (reset again when next used)."""
        self.ask(("release", handle), "releasing an environment")


class ChatWorld:
    """One episode: the row's environment (reset), its prompt, and the answers to each reply.

    It keeps the conversation as TRL hands it to reward functions (the replies as assistant
    messages with their ``tool_calls``, the tools' answers as ``tool`` messages) and the
    episode's ids, for the batch's score once every episode of it has ended (:func:`settle`).
    """

    def __init__(
        self,
        toolbox: Toolbox,
        tokenizer: Tokenizer,
        row: Mapping[str, Any],
        i: int,
        *,
        max_tool_calls: int,
        max_turns: int,
        span: Callable[[int, str], Span],
    ) -> None:
        self.toolbox, self.tokenizer, self.row, self.i = toolbox, tokenizer, row, i
        self.handle, observation = toolbox.open(row, i)
        self.tools = toolbox.schemas[toolbox.environment_of(row, i)] or None
        self.messages = [dict(m) for m in row["prompt"]]
        if observation is not None:
            self.messages[-1]["content"] = str(self.messages[-1]["content"]) + observation
        self.prompt = tuple(render(tokenizer, self.messages, self.tools, generation=True))
        self.span = span(len(self.prompt), f"row {i}'s prompt with its reset() text")
        self.rounds, self.replies = 0, 0
        self.max_tool_calls, self.max_turns = max_tool_calls, max_turns
        self.said: list[dict[str, Any]] = []  # the completion's messages, as TRL's
        self.ids: list[int] = []  # the completion's ids, the model's and the world's

    def step(self, reply: Sequence[int], ended: bool) -> Answer:
        """Answer a reply (its ids without EOS): its tool calls' results, or the episode's end."""
        text = self.tokenizer.decode(list(reply), skip_special_tokens=False)
        calls = parse_calls(text)
        self.replies += 1
        self.said.append(assistant_message(text))
        eos = [] if ended else [self.tokenizer.eos_token_id]
        self.ids += [*reply, *([self.tokenizer.eos_token_id] if ended else [])]
        if calls and self.rounds >= self.max_tool_calls:
            self.toolbox.note_once(
                f"an episode's reply called a tool after {self.rounds} rounds of calls "
                "(--max-tool-calls): the episode ended there, its calls unanswered"
            )
        if not calls or self.rounds >= self.max_tool_calls or self.replies >= self.max_turns:
            if calls and self.replies >= self.max_turns and self.rounds < self.max_tool_calls:
                self.toolbox.note_once(
                    f"an episode reached {self.max_turns} replies (--max-turns) still calling "
                    "tools: the episode ended there, its calls unanswered"
                )
            return self._end(cut=bool(calls))
        self.rounds += 1
        answers = [self.toolbox.call(self.handle, c) for c in calls]
        results = [
            {"role": "tool", "name": c.name or "unknown", "content": text}
            for c, (text, _) in zip(calls, answers, strict=True)
        ]
        tokens = (*eos, *tool_suffix(self.tokenizer, results, self.tools))
        self.said += results
        self.ids += tokens[len(eos) :]
        failures = sum(failed for _, failed in answers)
        if not self.span.fits(len(reply), len(tokens)):  # no room left for a reply
            self.toolbox.note_once(
                f"an episode's context reached the model's {self.span.positions} positions: "
                "the episode ended there"
            )
            ended_here = self._end(cut=True)
            return dataclasses.replace(ended_here, tool_calls=len(calls), tool_failures=failures)
        return Answer(tokens, 0.0, False, tool_calls=len(calls), tool_failures=failures)

    def _end(self, *, cut: bool) -> Answer:
        """The last answer: over; the reward comes with the batch's (:func:`settle`)."""
        return Answer((), 0.0, done=True, cut=cut)


def settle(
    toolbox: Toolbox, worlds: Sequence[ChatWorld], state: object
) -> tuple[list[Ending], dict[str, list[float]]]:
    """A batch's ended episodes scored together, as TRL scores a batch (``Toolbox.settle``).

    The reward functions get the batch's conversations as TRL passes them: ``prompts`` (the
    rows' messages, the ``reset`` text included), ``completions`` (the replies as assistant
    messages with their ``tool_calls``, the tools' answers as ``tool`` messages),
    ``completion_ids`` (the model's and the world's), and each other column of the rows.

    Returns:
        Each world's :class:`~eligibility.lm.episodes.episode.Ending`, and what the reward
        functions logged (``log_metric``): ``{name: [values]}``.
    """
    if not worlds:  # a rank with no episode of the batch
        return [], {}
    keys = sorted({k for w in worlds for k in w.row} - {"prompt"})
    batch = {
        "prompts": [w.messages for w in worlds],
        "completions": [w.said for w in worlds],
        "completion_ids": [w.ids for w in worlds],
        "columns": {k: [w.row.get(k) for w in worlds] for k in keys},
    }
    return toolbox.settle([w.handle for w in worlds], batch, state)


def _conversations(rows: Sequence[Mapping[str, Any]]) -> None:
    """Refuse a row whose prompt is text: TRL's tool loop appends messages to a conversation.

    Raises:
        ValueError: the first such row, and the conversation to write instead.
    """
    for i, row in enumerate(rows):
        if isinstance(row["prompt"], str):
            raise ValueError(
                f"row {i}'s prompt is text: with tools and environments a prompt is a "
                'conversation, as TRL takes it: write it as [{"role": "user", "content": '
                f"{row['prompt'][:30]!r}}}]"
            )


TOOLS_SUCCESS = 1.0
"""A task of tools' ``success_return`` where the user gives none: R ≥ 1, a correct answer
(a reward of 1: ``get_reward``, a judge) with any bonus beside it (a format reward of 0.2
makes R = 1.2), where "exactly 1" would count it a failure."""


def tool_task(
    task: Task,
    rows: Sequence[Mapping[str, Any]],
    toolbox: Toolbox,
    *,
    max_tool_calls: int,
    max_turns: int | None = None,
    positions: int | None = None,
    weighting: str = "outcome",
) -> EpisodicTask:
    """``task`` (its tokenizer, rows of conversational prompts, its reward) played with tools.

    Each prompt's episode is a :class:`ChatWorld`; K_max = ``max_turns`` replies (None:
    ``max_tool_calls`` + 1). ``positions``: the model's (None: unbounded; see :class:`Span`).
    The rewards come at the end (TRL's), so the default weighting is the outcome; an episode
    its environment does not judge (``is_success``) succeeds, without ``--success-return``,
    at a return of :data:`TOOLS_SUCCESS` or more.

    Raises:
        ValueError: no tokenizer, a negative bound, a row naming no environment given, a
            prompt that is text, not a conversation (TRL's tool loop appends messages to it).
    """
    if task.tokenizer is None:
        raise ValueError("tools need a tokenizer with a chat template (--tokenizer or --model)")
    _conversations(rows)
    if max_tool_calls < 0:
        raise ValueError(f"--max-tool-calls must be ≥ 0, got {max_tool_calls}")
    if not toolbox.rewarded:
        raise ValueError(
            "no reward: give reward functions (TASK as FILE.py:fn,...) or an environment with "
            "get_reward() (TRL's contract)"
        )
    tok, t_max = task.tokenizer, task.max_completion_length
    kinds = [toolbox.environment_of(r, i) for i, r in enumerate(rows)]  # every row's, up front
    turns = max_tool_calls + 1 if max_turns is None else max_turns
    if turns < 1:
        raise ValueError(f"--max-turns must be ≥ 1, got {turns}")

    def world(i: int) -> ChatWorld:
        span = lambda n, what: Span(positions, t_max, n, what)  # noqa: E731
        return ChatWorld(
            toolbox, tok, rows[i], i, max_tool_calls=max_tool_calls, max_turns=turns, span=span
        )

    for schemas in toolbox.schemas.values():
        if schemas:
            shows_tools(tok, schemas)
    prompts = tuple(
        tuple(render(tok, list(r["prompt"]), toolbox.schemas[k] or None, generation=True))
        for r, k in zip(rows, kinds, strict=True)
    )
    fields = {f.name: getattr(task, f.name) for f in dataclasses.fields(Task)}
    return EpisodicTask(
        **{
            **fields,
            "prompts": prompts,
            "reward_names": tuple(toolbox.reward_names),
            "max_turns": turns,
            "success_return": TOOLS_SUCCESS if task.success_return is None else task.success_return,
        },
        world=world,
        weighting=weighting,
        finish=lambda worlds, state: settle(toolbox, worlds, state),
    )


def with_tools(
    task: Task,
    train: Sequence[Mapping[str, Any]],
    held: Sequence[Mapping[str, Any]] | None,
    tools: Sequence[Tool],
    environment_factory: Factories | None,
    *,
    schema: Callable[[Callable[..., Any]], dict[str, Any]],
    timeout: float = 60.0,
    rewards: Sequence[Any] = (),
    weights: Sequence[float] | None = None,
    reward_timeout: float = 60.0,
    max_tool_calls: int,
    max_turns: int | None = None,
    positions: int | None = None,
) -> EpisodicTask:
    """The user's task played as episodes with ``tools`` and ``environment_factory``.

    Their :class:`Toolbox` (of the arguments of the same names) starts here: its imports and
    one probe instance of each environment; the task's ``close`` stops it too. ``task``'s
    rows of ``train`` (and its held-out task's of ``held``) are each an episode's prompt.

    Raises:
        ValueError: no tokenizer, a spec that does not load, a factory that raises, a row
            naming no environment given (one line).
    """
    if task.tokenizer is None:
        raise ValueError("--tools and --env need a tokenizer with a chat template (--model DIR)")
    box = Toolbox(
        tools,
        environment_factory,
        timeout=timeout,
        schema=schema,
        rewards=rewards,
        weights=weights,
        reward_timeout=reward_timeout,
    )
    close = task.close

    def both() -> None:
        box.close()
        close()

    bounds = {"max_tool_calls": max_tool_calls, "max_turns": max_turns, "positions": positions}
    try:
        box.start()
        task = dataclasses.replace(task, close=both)
        played = tool_task(task, train, box, **bounds)
        if held is not None and task.held_out is not None:
            on_held = dataclasses.replace(task.held_out, close=both)
            played = dataclasses.replace(played, held_out=tool_task(on_held, held, box, **bounds))
    except BaseException:
        both()
        raise
    return played


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


__all__ = [
    "Call",
    "ChatWorld",
    "Toolbox",
    "factories",
    "parse_calls",
    "settle",
    "tool_task",
    "with_tools",
]
