"""The run's tools and environments as the loop asks for them: the caller's side of the worker.

:class:`Toolbox` starts ``lm.episodes.served.ToolsServed`` in the worlds' one worker
(``lm.episodes.worker``) and asks it to open an episode's environment with its row, answer a
turn's tool calls (every episode's at once, up to ``workers`` episodes at a time), score a
batch of ended episodes and pool the environments again; :func:`factories` reads ``--env``'s
text into what it takes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from eligibility._output import note, speaker
from eligibility.lm.episodes.chat import Call
from eligibility.lm.episodes.episode import Ending
from eligibility.lm.episodes.served import (
    Factories,
    Schemas,
    Tool,
    ToolsServed,
    env_words,
    short_name,
)
from eligibility.lm.episodes.worker import SLACK_S, Worlds

LOADED = {
    "rewards": "the reward functions",
    "tools": "the tools (--tools)",
    "factories": "the environment factories (--env)",
}
"""What the worker loads, in order, each kind by one request: an error says which it was
loading (a reward module that does not import is not blamed on the tools)."""


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
        workers: how many episodes' tool calls of a turn run at once (SkyRL's
            ``max_env_workers``); None: every episode's; 1: one call after another.
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
        workers: int | None = None,
    ) -> None:
        if workers is not None and workers < 1:
            raise ValueError(f"--max-env-workers must be ≥ 1 or none, got {workers}")
        self.workers = workers
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
        self.reward_names = [short_name(f) for f in rewards]  # and get_reward's, known at start
        served = lambda: ToolsServed(  # noqa: E731
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
        self.ask(None, "starting the tools' worker")  # nothing of the user's is loaded yet
        for kind, words in LOADED.items():  # a failure names what was being loaded
            self.ask(("load", kind), f"loading {words}")
        self.schemas, notes, paid = self.ask(("probe",), "making one of each environment")
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
        return self.ask(("open", name, fields), f"{env_words(name)}{where}")

    def call(self, handle: int, call: Call) -> tuple[str, bool]:
        """A tool call's answer, and whether it failed (a malformed call, a timeout too)."""
        return self.calls([[(handle, call)]])[0][0]

    def calls(self, episodes: Sequence[Sequence[tuple[int, Call]]]) -> list[list[tuple[str, bool]]]:
        """Each episode's tool calls ``(handle, call)`` answered as :meth:`call` answers one.

        The episodes' calls run at once in the worker, up to ``workers`` episodes at a time,
        each episode's in its order (``Worlds.ask_all``); each call is given
        ``--tool-timeout``. A malformed call is answered here, never sent.
        """
        sent = [
            [
                (("call", h, c.name, c.arguments), f"calling {c.name}")
                for h, c in e
                if c.error is None
            ]
            for e in episodes
        ]
        answers = iter(self.ask_all(sent, workers=self.workers, slack=SLACK_S))
        out = []
        for e in episodes:
            made = iter(next(answers))
            out.append(
                [
                    (str({"error": c.error}), True) if c.error is not None else next(made)
                    for _, c in e
                ]
            )
        return out

    @property
    def rewarded(self) -> bool:
        """Whether the episodes have a reward: functions, or an environment's ``get_reward``."""
        return bool(self.reward_names)

    def settle(
        self, handles: list[int], batch: dict[str, Any], state: object
    ) -> tuple[list[Ending], dict[str, list[float]]]:
        """A batch's ended episodes scored at once (``ToolsServed.do_settle``).

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


__all__ = ["LOADED", "Toolbox", "factories"]
