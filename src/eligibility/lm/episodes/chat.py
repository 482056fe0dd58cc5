r"""A conversation with tools through the tokenizer's chat template: the world of an episode.

The prompt is the row's conversation rendered with the tools' schemas (``apply_chat_template(
messages, tools=…, add_generation_prompt=True)``, transformers' tool-use templates), the
environment's ``reset`` text appended to its last user message. Each reply is decoded, its tool
calls read (``lm.episodes.tools.parse_calls``) and made; each result is a ``tool`` message, and
the world's tokens are what the template renders for those messages and the next assistant
header: the tokens of a conversation ending in the tool messages less those of the same
conversation ending at the assistant's call (through its EOS; a reply cut before EOS gets the
EOS from the world; every world answers through :func:`answer_tokens`). The episode ends at a
reply that calls no tool, when ``max_tool_calls`` rounds of calls have been answered, at
``max_turns`` replies, or where the context leaves no room for another reply before the model's
positions (:class:`Span`; a prompt that leaves none is refused, as a single turn's is); a cut
is said once on stderr. Then the environment's ``get_reward()`` and the task's reward of the
last reply are the last turn's reward.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from eligibility.lm.episodes.tools import Toolbox, assistant_message, parse_calls
from eligibility.lm.tasks import Answer, EpisodicTask, Task
from eligibility.lm.tokenizer import Tokenizer


def render(
    tokenizer: Tokenizer,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    *,
    generation: bool,
) -> list[int]:
    """The chat template's token ids of ``messages`` (with the tools' schemas, if any)."""
    ids = tokenizer.apply_chat_template(
        messages, tools=tools or None, tokenize=True, add_generation_prompt=generation
    )
    if isinstance(ids, Mapping) or hasattr(ids, "keys"):  # transformers 5: a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def answer_tokens(
    tokenizer: Tokenizer,
    said: dict[str, Any],
    more: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
) -> list[int]:
    """The world's tokens after an assistant's EOS: the messages ``more`` and the next header.

    Those of a conversation ``[user, said, *more]`` with the generation prompt, less those of
    ``[user, said]`` through its EOS: what the chat template renders after a reply ``said``,
    whatever the reply was (every kind of world answers through here).

    Raises:
        ValueError: a template that renders the conversation's start differently when the
            messages follow (it cannot be answered turn by turn).
    """
    head = [{"role": "user", "content": "x"}, said]
    before = render(tokenizer, head, tools, generation=False)
    after = render(tokenizer, head + more, tools, generation=True)
    eos = tokenizer.eos_token_id
    cut = max((i + 1 for i, t in enumerate(before) if t == eos), default=len(before))
    if after[:cut] != before[:cut]:
        raise ValueError(
            f"the chat template renders a conversation's start differently when {more[0]['role']} "
            "messages follow: it cannot answer the model turn by turn"
        )
    return after[cut:]


def tool_suffix(
    tokenizer: Tokenizer, results: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> list[int]:
    """The world's tokens after an assistant's call: the tool messages and the next header."""
    call = [{"type": "function", "function": {"name": results[0]["name"], "arguments": {}}}]
    said = {"role": "assistant", "content": "", "tool_calls": call}
    return answer_tokens(tokenizer, said, results, tools)


class Span:
    """An episode's context against the model's positions: the prompt, replies and answers.

    ``positions``: the model's (None: unbounded). The prompt with a reply of T_max tokens must
    fit, as a single turn's must (else the run is refused in one line); a later answer that
    would leave no room for a whole reply ends the episode there.
    """

    def __init__(self, positions: int | None, t_max: int, prompt: int, what: str) -> None:
        self.positions, self.t_max, self.length = positions, t_max, prompt
        if positions is not None and prompt + t_max > positions:
            raise ValueError(
                f"{what} makes a prompt of {prompt} tokens: with T_max {t_max} an episode needs "
                f"{prompt + t_max} positions, more than the model's {positions}: shorten it"
            )

    def fits(self, reply: int, answer: int) -> bool:
        """Whether a reply and the world's answer to it leave room for the next reply."""
        self.length += reply + answer
        return self.positions is None or self.length + self.t_max <= self.positions


def shows_tools(tokenizer: Tokenizer, tools: list[dict[str, Any]]) -> None:
    """Refuse a chat template that would hide the tools, or a reply's calls, from the model.

    A template written without tool use renders a conversation the same with the tools'
    schemas as without, and an assistant's ``tool_calls`` as nothing: the model would be
    trained on calls it never sees offered, and its calls would vanish from its context.

    Raises:
        ValueError: which of the two the template drops, and the way out.
    """
    user = [{"role": "user", "content": "x"}]
    if render(tokenizer, user, tools, generation=True) == render(
        tokenizer, user, None, generation=True
    ):
        hidden = "the tools (it renders a conversation the same with their schemas as without)"
    else:
        name = tools[0]["function"]["name"]
        call = [{"type": "function", "function": {"name": name, "arguments": {}}}]
        said = [*user, {"role": "assistant", "content": "", "tool_calls": call}]
        plain = [*user, {"role": "assistant", "content": ""}]
        if render(tokenizer, said, tools, generation=False) != render(
            tokenizer, plain, tools, generation=False
        ):
            return
        hidden = "a reply's tool calls (it renders an assistant's tool_calls as nothing)"
    raise ValueError(
        f"the chat template hides {hidden}: give a model or --tokenizer whose template renders "
        "tools and tool calls (transformers' tool-use templates; TRL refuses such a template too)"
    )


class ChatWorld:
    """One episode: the row's environment (reset), its prompt, and the answers to each reply.

    It keeps the conversation as TRL hands it to reward functions (the replies as assistant
    messages with their ``tool_calls``, the tools' answers as ``tool`` messages) and the
    episode's ids, for the score at its end (``Toolbox.score``).
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
            return self._end()
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
            return dataclasses.replace(self._end(), tool_calls=len(calls), tool_failures=failures)
        return Answer(tokens, 0.0, False, tool_calls=len(calls), tool_failures=failures)

    def _end(self) -> Answer:
        """The last answer: the episode's reward (its reward functions and ``get_reward()``)."""
        columns = {k: [v] for k, v in self.row.items() if k != "prompt"}
        batch = {
            "prompts": [self.messages],
            "completions": [self.said],
            "completion_ids": [self.ids],
            "columns": columns,
        }
        r = self.toolbox.score(self.handle, batch, self.i)
        self.toolbox.release(self.handle)
        return Answer((), r, done=True)


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
    The rewards come at the end (TRL's), so the default weighting is the outcome.

    Raises:
        ValueError: no tokenizer, a negative bound, a row naming no environment given.
    """
    if task.tokenizer is None:
        raise ValueError("tools need a tokenizer with a chat template (--tokenizer or --model)")
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
        **{**fields, "prompts": prompts}, world=world, max_turns=turns, weighting=weighting
    )


def with_tools(
    task: Task,
    train: Sequence[Mapping[str, Any]],
    held: Sequence[Mapping[str, Any]] | None,
    box: Toolbox,
    *,
    max_tool_calls: int,
    max_turns: int | None = None,
    positions: int | None = None,
) -> EpisodicTask:
    """The user's task played with the tools and environments of ``box`` as episodes.

    The toolbox's worker starts here (its imports and one probe instance of each environment);
    the task's ``close`` stops it too.

    Raises:
        ValueError: no tokenizer, a spec that does not load, a factory that raises, a row
            naming no environment given (one line).
    """
    if task.tokenizer is None:
        raise ValueError("--tools and --env need a tokenizer with a chat template (--model DIR)")
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


__all__ = [
    "ChatWorld",
    "Span",
    "answer_tokens",
    "render",
    "shows_tools",
    "tool_suffix",
    "tool_task",
    "with_tools",
]
