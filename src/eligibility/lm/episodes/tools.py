r"""Tools and environments in TRL's conventions: the user's rows played as episodes with them.

A class written for TRL's ``GRPOTrainer(environment_factory=...)`` runs unchanged: one
instance per episode (made once, reset often), ``reset(**row)`` with the row's fields (its
return value, if not None, is text appended to the last user message), every public method
other than ``reset`` and ``get_reward`` a tool described by its signature and docstring
(``lm.edge.hf.tool_schema``, as the chat templates' ``tools=`` take them), an
optional ``get_reward()`` the environment's own reward; a dict of factories is selected by
each row's ``environment`` field. Standalone tools (``module:fn``) are offered beside them.

The parts, one job each: ``lm.episodes.served`` is the worker's side (the user's code, sync or
``async def``, run bounded and isolated: a tool that raises or outlasts ``timeout`` is a
*failed call*, as TRL answers it; a reset or reward that fails is one line naming the
environment, the method and the row); ``lm.episodes.toolbox`` the caller's side and ``--env``'s
text; ``lm.episodes.chatworld`` an episode (each reply's calls read, made and answered as
``tool`` messages; the end at a reply that calls no tool, after ``max_tool_calls`` rounds, at
``max_turns`` replies or the model's positions, by the rules every world shares:
``lm.episodes.chat.Bounds``) and a batch's score (the reward functions and each environment's
``get_reward()``, the last turn's reward). Here the task is assembled: :class:`ToolSettings`
(the options that shape it), :func:`with_tools` (the toolbox started, train and held-out rows
played) and :func:`tool_task`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from eligibility.lm.episodes.chat import Span, render, shows_tools
from eligibility.lm.episodes.chatworld import ChatWorld, respond, settle
from eligibility.lm.episodes.served import Factories, Tool
from eligibility.lm.episodes.toolbox import Toolbox
from eligibility.lm.tasks import EpisodicTask, Task
from eligibility.lm.tokenizer import Tokenizer


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


def _rendered(
    tokenizer: Tokenizer, rows: Sequence[Mapping[str, Any]], toolbox: Toolbox
) -> tuple[tuple[int, ...], ...]:
    """Each row's prompt as the template renders it with its environment's tools' schemas.

    Every row's environment is named up front, and every template checked to show the tools.

    Raises:
        ValueError: a row naming no environment given, a template that hides the tools.
    """
    kinds = [toolbox.environment_of(r, i) for i, r in enumerate(rows)]
    for schemas in toolbox.schemas.values():
        if schemas:
            shows_tools(tokenizer, schemas)
    return tuple(
        tuple(render(tokenizer, list(r["prompt"]), toolbox.schemas[k] or None, generation=True))
        for r, k in zip(rows, kinds, strict=True)
    )


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
    prompts = _rendered(tok, rows, toolbox)
    turns = max_tool_calls + 1 if max_turns is None else max_turns
    if turns < 1:
        raise ValueError(f"--max-turns must be ≥ 1, got {turns}")

    def world(i: int) -> ChatWorld:
        span = lambda n, what: Span(positions, t_max, n, what)  # noqa: E731
        return ChatWorld(
            toolbox, tok, rows[i], i, max_tool_calls=max_tool_calls, max_turns=turns, span=span
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
        respond=respond,  # type: ignore[arg-type]
    )


@dataclasses.dataclass(frozen=True)
class ToolSettings:
    """What shapes a task of tools: the toolbox's contents and bounds, an episode's bounds.

    Attributes:
        tools: standalone tools, callables or ``module:fn`` / ``FILE.py:fn`` specs (``--tools``).
        environment_factory: a factory, a dict of them by the rows' ``environment``, or
            ``--env``'s text (``lm.episodes.toolbox.factories``); None: tools only.
        schema: a tool's JSON schema for the chat template (``lm.edge.hf.tool_schema``).
        timeout: seconds a reset, a tool or a ``get_reward`` may take (``--tool-timeout``).
        rewards: reward functions in TRL's convention, called on each batch's conversations.
        weights: w_k, one per reward function (None: all 1; ``--reward-weights``).
        reward_timeout: seconds the reward functions may take on a batch (``--reward-timeout``).
        max_tool_calls: rounds of calls an episode's replies may make (``--max-tool-calls``).
        max_turns: K_max replies (None: ``max_tool_calls`` + 1; ``--max-turns``).
        positions: the model's (None: unbounded; see ``lm.episodes.chat.Span``).
        workers: how many episodes' tool calls of a turn run at once (None: every live
            episode's; 1: one call after another; ``--max-env-workers``).
    """

    schema: Callable[[Callable[..., Any]], dict[str, Any]]
    max_tool_calls: int
    tools: Sequence[Tool] = ()
    environment_factory: Factories | None = None
    timeout: float = 60.0
    rewards: Sequence[Any] = ()
    weights: Sequence[float] | None = None
    reward_timeout: float = 60.0
    max_turns: int | None = None
    positions: int | None = None
    workers: int | None = None

    def toolbox(self) -> Toolbox:
        """The :class:`Toolbox` of these settings, not yet started."""
        return Toolbox(
            self.tools,
            self.environment_factory,
            timeout=self.timeout,
            schema=self.schema,
            rewards=self.rewards,
            weights=self.weights,
            reward_timeout=self.reward_timeout,
            workers=self.workers,
        )


def with_tools(
    task: Task,
    train: Sequence[Mapping[str, Any]],
    held: Sequence[Mapping[str, Any]] | None,
    settings: ToolSettings,
) -> EpisodicTask:
    """The user's task played as episodes with the tools and environments of ``settings``.

    Their :class:`Toolbox` starts here: its imports and one probe instance of each
    environment; the task's ``close`` stops it too. ``task``'s rows of ``train`` (and its
    held-out task's of ``held``) are each an episode's prompt.

    Raises:
        ValueError: no tokenizer, a spec that does not load, a factory that raises, a row
            naming no environment given (one line).
    """
    if task.tokenizer is None:
        raise ValueError("--tools and --env need a tokenizer with a chat template (--model DIR)")
    box = settings.toolbox()
    close = task.close

    def both() -> None:
        box.close()
        close()

    bounds = {
        "max_tool_calls": settings.max_tool_calls,
        "max_turns": settings.max_turns,
        "positions": settings.positions,
    }
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


__all__ = ["TOOLS_SUCCESS", "ToolSettings", "tool_task", "with_tools"]
