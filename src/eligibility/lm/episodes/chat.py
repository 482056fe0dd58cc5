r"""The tokenizer's chat template, as every world of an episode speaks through it.

A conversation's tokens are what ``apply_chat_template(messages, tools=…,
add_generation_prompt=True)`` renders (:func:`render`, transformers' tool-use templates); the
world's tokens after a reply are those of a conversation ending in the world's messages and the
next assistant header, less those of the same conversation ending at the reply through its EOS
(:func:`answer_tokens`; a reply cut before EOS gets the EOS from the world). :class:`Span` holds
an episode's context against the model's positions. A reply's tool calls are read the way
Hermes-style templates (Qwen's among them) render one,
``<tool_call>{"name": …, "arguments": {…}}</tool_call>`` (:func:`parse_calls`), and the reply is
handed to reward functions as TRL hands it (:func:`assistant_message`). The worlds that use
these: ``lm.episodes.tools`` (tools and TRL's environments) and ``lm.episodes.gym`` (Gymnasium's
environments of text).
"""

from __future__ import annotations

import dataclasses
import json
import re
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from eligibility.lm.tokenizer import Tokenizer

_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


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


_ELIDED = "\x00the first message\x00"
"""Stands for the first message's content while the text before it is read (:func:`system_text`)."""


def system_text(
    tokenizer: Tokenizer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> tuple[str, list[dict[str, Any]]]:
    """(the system prompt, the messages after it) of a conversation's prompt.

    The system prompt is the text the chat template renders before the first message that is
    not a system one: the system messages, the template's own system text, the tools' schemas
    (as the model reads them), less the tail it shares with the text between two turns (a
    turn's end, the next one's header); empty where the template renders nothing else. It is
    the same for every episode of an environment and system messages (``lm.episodes.shown``
    shows it once); the messages after it are the episode's own.
    """
    k = next((j for j, m in enumerate(messages) if m.get("role") != "system"), len(messages))
    key = json.dumps([messages[:k], tools], sort_keys=True, default=str)
    try:
        known = _SYSTEMS.setdefault(tokenizer, {})
    except TypeError:  # a tokenizer no weak reference can name: rendered each time
        known = {}
    if key not in known:
        text = _before(tokenizer, [*messages[:k], {"role": "user", "content": _ELIDED}], tools)
        said = {"role": "assistant", "content": _SAID}
        between = _before(tokenizer, [{"role": "user", "content": "x"}, said,
                                      {"role": "user", "content": _ELIDED}], None)  # fmt: skip
        between = between.rpartition(_SAID)[2]
        shared = next(n for n in range(min(len(text), len(between)), -1, -1)
                      if text[len(text) - n :] == between[len(between) - n :])  # fmt: skip
        known[key] = text[: len(text) - shared].strip()
    return known[key], list(messages[k:])


_SAID = "\x00a reply\x00"
"""Stands for a reply while the text between two turns is read (:func:`system_text`)."""


def _before(tokenizer: Tokenizer, messages: list[dict[str, Any]], tools: Any) -> str:
    """The template's text of ``messages`` before the last one's content (:data:`_ELIDED`).

    Empty where the template does not render that content as given (it escapes it, say).
    """
    text = str(tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False))
    return text.partition(_ELIDED)[0] if _ELIDED in text else ""


_SYSTEMS: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()
""":func:`system_text`'s by tokenizer, then by system messages and tools: rendered once."""


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


class Bounds:
    """The end rules every world of several turns shares, each said once a run where it binds.

    An episode ends at its K_max-th reply (``max_turns``; ``bound`` names what set it: an
    option, a registered limit) or where the world's answer would leave no room for a whole
    reply before the model's positions (``span``, a :class:`Span`). ``who`` names the episode
    in the note (``"an episode"``, ``"an episode of X"``); ``say`` says a note once a run.
    """

    def __init__(
        self,
        span: Span,
        max_turns: int,
        *,
        who: str,
        say: Callable[[str], None],
        bound: str = "--max-turns",
    ) -> None:
        self.span, self.max_turns, self.who, self.say, self.bound = span, max_turns, who, say, bound
        self.replies = 0

    def last_reply(self) -> bool:
        """Count a reply: whether it is the K_max-th, after which the world answers no more."""
        self.replies += 1
        return self.replies >= self.max_turns

    def out_of_turns(self, still: str) -> None:
        """Say that K_max replies ended an episode ``still`` going."""
        self.say(f"{self.who} reached {self.max_turns} replies ({self.bound}) {still}: cut there")

    def no_room(self, reply: int, answer: int, still: str) -> bool:
        """Whether a reply and the world's answer leave no room for the next reply (said)."""
        if self.span.fits(reply, answer):
            return False
        positions = self.span.positions
        self.say(f"{self.who} reached the model's {positions} positions {still}: cut there")
        return True


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


@dataclasses.dataclass(frozen=True)
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


__all__ = [
    "Bounds",
    "Call",
    "Span",
    "answer_tokens",
    "assistant_message",
    "parse_calls",
    "render",
    "shows_tools",
    "system_text",
    "tool_suffix",
]
