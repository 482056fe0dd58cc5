"""An episode with tools: the conversation, each reply's calls answered, the batch scored.

:class:`ChatWorld` is one row's episode (its environment reset, its prompt rendered with the
tools' schemas); :func:`settle` scores a batch of them together, as TRL scores a batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from eligibility.lm.episodes.chat import (
    Bounds,
    Span,
    assistant_message,
    parse_calls,
    render,
    system_text,
    tool_suffix,
)
from eligibility.lm.episodes.episode import Ending
from eligibility.lm.episodes.toolbox import Toolbox
from eligibility.lm.tasks import Answer
from eligibility.lm.tokenizer import Tokenizer

STILL = "still calling tools (its calls unanswered)"
"""How a cut episode with tools is said: its last reply's calls are never made."""


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
        here = span(len(self.prompt), f"row {i}'s prompt with its reset() text")
        self.bounds = Bounds(here, max_turns, who="an episode", say=toolbox.note_once)
        self.rounds, self.max_tool_calls = 0, max_tool_calls
        self.said: list[dict[str, Any]] = []  # the completion's messages, as TRL's
        self.ids: list[int] = []  # the completion's ids, the model's and the world's

    def step(self, reply: Sequence[int], ended: bool) -> Answer:
        """Answer a reply (its ids without EOS): its tool calls' results, or the episode's end."""
        text = self.tokenizer.decode(list(reply), skip_special_tokens=False)
        calls = parse_calls(text)
        last = self.bounds.last_reply()
        self.said.append(assistant_message(text))
        eos = [] if ended else [self.tokenizer.eos_token_id]
        self.ids += [*reply, *([self.tokenizer.eos_token_id] if ended else [])]
        spent = self.rounds >= self.max_tool_calls
        if calls and spent:
            self.toolbox.note_once(
                f"an episode's reply called a tool after {self.rounds} rounds of calls "
                "(--max-tool-calls): the episode ended there, its calls unanswered"
            )
        elif calls and last:
            self.bounds.out_of_turns(STILL)
        if not calls or spent or last:
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
        if self.bounds.no_room(len(reply), len(tokens), "with its calls answered"):
            ended_here = self._end(cut=True)
            return dataclasses.replace(ended_here, tool_calls=len(calls), tool_failures=failures)
        return Answer(tokens, 0.0, False, tool_calls=len(calls), tool_failures=failures)

    def shown(self) -> dict[str, Any]:
        """The episode as a person reads it (``lm.episodes.shown``).

        Its system prompt (the template's text, the tools' schemas), its prompt's other
        messages (the reset text in them) and the completion's, as reward functions get them.
        """
        system, prompt = system_text(self.tokenizer, self.messages, self.tools)
        return {"system": system, "prompt": prompt, "completion": list(self.said)}

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


__all__ = ["ChatWorld", "settle"]
