"""An episode with tools: the conversation, each reply's calls answered, the batch scored.

:class:`ChatWorld` is one row's episode (its environment reset, its prompt rendered with the
tools' schemas); :func:`respond` answers a turn's replies of every live episode, their calls
made at once; :func:`settle` scores a batch of them together, as TRL scores a batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from eligibility.lm.episodes.chat import (
    Bounds,
    Call,
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
        self._read: tuple[int, bool, list[Call], bool] = (0, False, [], False)  # the last reply

    def step(self, reply: Sequence[int], ended: bool) -> Answer:
        """Answer a reply (its ids without EOS): its tool calls' results, or the episode's end."""
        return respond([self], [reply], [ended])[0]

    def read(self, reply: Sequence[int], ended: bool) -> list[Call]:
        """Take a reply (its ids without EOS) into the conversation: the calls to make.

        None (an empty list) where the episode ends at this reply (it calls no tool, or past a
        bound, its calls unanswered); :meth:`answered` gives the answer either way.
        """
        text = self.tokenizer.decode(list(reply), skip_special_tokens=False)
        calls = parse_calls(text)
        last = self.bounds.last_reply()
        self.said.append(assistant_message(text))
        self.ids += [*reply, *([self.tokenizer.eos_token_id] if ended else [])]
        spent = self.rounds >= self.max_tool_calls
        if calls and spent:
            self.toolbox.note_once(
                f"an episode's reply called a tool after {self.rounds} rounds of calls "
                "(--max-tool-calls): the episode ended there, its calls unanswered"
            )
        elif calls and last:
            self.bounds.out_of_turns(STILL)
        ends = not calls or spent or last
        self._read = (len(reply), ended, [] if ends else calls, bool(calls) and ends)
        if not ends:
            self.rounds += 1
        return self._read[2]

    def answered(self, answers: Sequence[tuple[str, bool]]) -> Answer:
        """The answer to the reply :meth:`read` took, given its calls' ``answers`` in order."""
        n, ended, calls, cut = self._read
        if not calls:
            return self._end(cut=cut)
        eos = [] if ended else [self.tokenizer.eos_token_id]
        results = [
            {"role": "tool", "name": c.name or "unknown", "content": text}
            for c, (text, _) in zip(calls, answers, strict=True)
        ]
        tokens = (*eos, *tool_suffix(self.tokenizer, results, self.tools))
        self.said += results
        self.ids += tokens[len(eos) :]
        failures = sum(failed for _, failed in answers)
        if self.bounds.no_room(n, len(tokens), "with its calls answered"):
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


def respond(
    worlds: Sequence[ChatWorld], replies: Sequence[Sequence[int]], ended: Sequence[bool]
) -> list[Answer]:
    """Each world's answer to its reply, every world's tool calls made at once.

    The replies are read in order, then their calls made in one request (``Toolbox.calls``:
    the episodes at once, each one's in its order), then answered in order: with tools that
    share nothing between episodes, the answers are those of each world's own ``step`` in turn.
    """
    if not worlds:
        return []
    calls = [w.read(r, e) for w, r, e in zip(worlds, replies, ended, strict=True)]
    made = [[(w.handle, c) for c in cs] for w, cs in zip(worlds, calls, strict=True)]
    answers = worlds[0].toolbox.calls(made)
    return [w.answered(a) for w, a in zip(worlds, answers, strict=True)]


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


__all__ = ["ChatWorld", "respond", "settle"]
