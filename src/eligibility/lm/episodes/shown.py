r"""An episode as a person reads it: its messages, each reply's reward, its system prompt once.

A played episode is one row of token ids after its prompt, ``completion_mask`` 1 on the model's
tokens and ``turn`` the model's turn of every token (a world token: the turn it answers):

    q │ o⁽¹⁾ w⁽¹⁾ │ o⁽²⁾ w⁽²⁾ │ … │ o⁽ᴷ⁾        (rₖ beside each turn, G = Σₖ rₖ)

Its record holds it as messages, as TRL logs a conversation: ``prompt`` (the user's messages,
the reset text in them) and ``completion`` (each reply an assistant message with its tool
calls, the tools' results as ``tool`` messages, a Gymnasium environment's observations as
``user`` ones), where the world keeps its conversation (``World.shown``); a world that does
not (the built-in games) is read from the row, cut where (model or world, turn) changes: each
reply o⁽ᵏ⁾ an assistant message and each answer w⁽ᵏ⁾ a user one. ``rewards`` holds rₖ of the
k-th assistant message. What the chat template renders before the first user message (its
system text, the tools' schemas: the same for every episode of an environment) is not
repeated in each: the records of an evaluation name it by its index in one list of system
prompts (``episodes.jsonl``'s ``system``, ``eligibility evaluate --show-system``). Written by
``eligibility evaluate`` and by each evaluation of a run (``episodes.jsonl``), as TRL's
``log_completions`` shows a batch's completions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from eligibility.lm.tasks import SPECIALS

Messages = list[dict[str, Any]]


def transcript(
    prompt: Sequence[int],
    tokens: Sequence[int],
    model: Sequence[int],
    turn: Sequence[int],
    rewards: Sequence[float],
    text: Callable[[Sequence[int]], str],
    *,
    tool_calls: int = 0,
    tool_failures: int = 0,
    shown: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One episode's record, as a person reads it.

    ``{"prompt": [messages], "completion": [messages], "rewards": [rₖ], "return",
    "tool_calls", "tool_failures"}``, and ``"system"`` (its text: :func:`transcripts` puts
    an index in its place) where the world's conversation has one.

    Args:
        prompt: q's token ids (no padding).
        tokens: every token after the prompt (padding, where ``turn`` is −1, is dropped).
        model: per token, 1 where the model sampled it.
        turn: per token, the model's turn it belongs to (−1: padding).
        rewards: rₖ per turn the episode played.
        text: token ids → text (the task's decoding).
        tool_calls: the tool calls the episode made.
        tool_failures: those that failed.
        shown: the world's conversation (``{"system", "prompt", "completion"}``), or None:
            the messages read from the tokens.
    """
    if shown is None:
        shown = _read(prompt, tokens, model, turn, len(rewards), text)
    record: dict[str, Any] = {
        "prompt": list(shown["prompt"]),
        "completion": list(shown["completion"]),
        "rewards": [float(r) for r in rewards],
        "return": float(sum(rewards)),
        "tool_calls": int(tool_calls),
        "tool_failures": int(tool_failures),
    }
    if shown.get("system"):
        record["system"] = shown["system"]
    return record


def _read(
    prompt: Sequence[int],
    tokens: Sequence[int],
    model: Sequence[int],
    turn: Sequence[int],
    turns: int,
    text: Callable[[Sequence[int]], str],
) -> dict[str, Messages]:
    """The messages of a row whose world keeps no conversation: replies and answers by turn."""
    cut: list[dict[str, list[int]]] = [{"reply": [], "answer": []} for _ in range(turns)]
    for t, m, k in zip(tokens, model, turn, strict=True):
        if 0 <= k < turns:
            cut[k]["reply" if m else "answer"].append(int(t))
    completion: Messages = []
    for part in cut:
        completion.append({"role": "assistant", "content": _plain(text(part["reply"]))})
        if answer := _plain(text(part["answer"])):
            completion.append({"role": "user", "content": answer})
    return {"prompt": [{"role": "user", "content": _plain(text(list(prompt)))}],
            "completion": completion}  # fmt: skip


def _plain(said: str) -> str:
    """Decoded text less the built-in vocabulary's ``<bos>`` and ``<eos>``, stripped."""
    for special in SPECIALS:
        said = said.replace(special, "")
    return said.strip()


def transcripts(
    batch: Any, rows: Sequence[int], text: Callable[[Sequence[int]], str], systems: list[str]
) -> list:
    """:func:`transcript` of each of ``rows`` of a batch (``lm.episodes.episode.Episodes``).

    Each system prompt is put in ``systems`` once (appended where new), the record holding its
    index there. With the episode's ``log_extra`` cells (``Episodes.extra``), each under its
    column (one that a transcript has already keeps the transcript's).
    """
    out = []
    for j in rows:
        on = batch.prompt_mask[j].tolist()
        prompt = [int(t) for t, m in zip(batch.prompt_ids[j].tolist(), on, strict=True) if m]
        k = int(batch.turns[j])
        record = transcript(
            prompt,
            batch.completion_ids[j].tolist(),
            batch.completion_mask[j].tolist(),
            batch.turn[j].tolist(),
            batch.turn_rewards[j, :k].tolist(),
            text,
            tool_calls=int(batch.tool_calls[j]),
            tool_failures=int(batch.tool_failures[j]),
            shown=batch.shown[j] if j < len(batch.shown) else None,
        )
        if "system" in record:
            if record["system"] not in systems:
                systems.append(record["system"])
            record["system"] = systems.index(record["system"])
        cells = batch.extra[j] if j < len(batch.extra) else {}  # log_extra's
        out.append({**record, **{c: v for c, v in cells.items() if c not in record}})
    return out


def replies_cut(batch: Any, eos_id: int) -> tuple[int, int]:
    """(replies cut at the length limit, replies) of a batch of episodes.

    A reply that ended carries its EOS as its last token (``Episode.act``); a reply whose last
    token is another was cut at ``--max-completion-length`` (a tool call cut before its
    closing tag, an answer cut mid-word). A cut reply is T tokens long, so cut replies of one
    token mean T = 1: replies of one token by design (``guess``), with no room for an EOS;
    then none is counted cut, and (0, 0) says the rate does not apply.
    """
    cut = replies = 0
    longest = 0  # the longest cut reply: T, where any is cut
    for ids, model, turn in zip(
        batch.completion_ids.tolist(),
        batch.completion_mask.tolist(),
        batch.turn.tolist(),
        strict=True,
    ):
        last: dict[int, int] = {}  # each turn's last model token
        width: dict[int, int] = {}  # each turn's model tokens
        for t, m, k in zip(ids, model, turn, strict=True):
            if m and k >= 0:
                last[k] = t
                width[k] = width.get(k, 0) + 1
        replies += len(last)
        cut += sum(t != eos_id for t in last.values())
        longest = max([longest, *(width[k] for k, t in last.items() if t != eos_id)])
    return (0, 0) if longest == 1 else (cut, replies)


def said(message: dict[str, Any]) -> str:
    """One message on one line: ``role: content``, a reply's calls after it, a tool's name.

    ``assistant: I add them. → add({"a": 2, "b": 3})``; ``tool add: 5``.
    """
    role = message.get("role", "?")
    who = f"{role} {message['name']}" if role == "tool" and message.get("name") else role
    line = " ".join(str(message.get("content") or "").split())
    for call in message.get("tool_calls") or ():
        fn = call.get("function", call)
        arguments = json.dumps(fn.get("arguments", {}), ensure_ascii=False)
        line += f" → {fn.get('name')}({arguments})"
    return f"{who}: {line.strip()}".rstrip()


def conversation(messages: Messages) -> str:
    """Messages as lines of :func:`said` (the trackers' completions table's cells)."""
    return "\n".join(said(m) for m in messages)


def as_text(record: dict[str, Any]) -> str:
    """A transcript for a terminal: the prompt's messages, each reply and the world's after it.

    Each reply with its turn's number and reward; no system prompt (:func:`system_lines`).
    """
    lines = [f"  {said(m)}" for m in record["prompt"]]
    rewards, k = record["rewards"], 0
    for m in record["completion"]:
        if m.get("role") == "assistant" and k < len(rewards):
            k += 1
            lines.append(f"    {k} {said(m)}   (r {rewards[k - 1]:g})")
        else:
            lines.append(f"      {said(m)}")
    lines.append(
        f"    return {record['return']:g}, {record['tool_calls']} tool calls "
        f"({record['tool_failures']} failed)"
    )
    return "\n".join(lines)


TABLE = ("step", "prompt", "completion", "reward", "tool_calls", "tool_failures")
"""The columns of the ``completions`` table the trackers get at each evaluation (TRL's
``log_completions``' first ones): the run's step, the prompt's messages (the reset text in
them), the completion's (each reply and the world's messages after it, in order; one a line,
:func:`conversation`), the return and the episode's tool calls."""


def table(step: int, records: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Episodes' transcripts (:func:`transcripts`) as the ``completions`` table: columns, rows.

    A column a record has beyond a transcript's (what a reward function gave ``log_extra``)
    comes after :data:`TABLE`'s, empty in the rows that lack it.
    """
    own = {"prompt", "completion", "rewards", "system", "return", "tool_calls", "tool_failures"}
    extra = list(dict.fromkeys(k for r in records for k in r if k not in own))
    rows = [
        [
            step,
            conversation(r["prompt"]),
            conversation(r["completion"]),
            r["return"],
            r["tool_calls"],
            r["tool_failures"],
            *(r.get(k) for k in extra),
        ]
        for r in records
    ]
    return [*TABLE, *extra], rows


LEFT_OUT = (
    "  (the system prompt, the template's text and the tools' schemas, is left out: "
    "--show-system prints it)"
)
"""What ``eligibility evaluate`` says in place of the system prompts it was not asked for."""


def system_lines(systems: Sequence[str]) -> str:
    """The system prompts of an evaluation's episodes for a terminal, each once.

    Numbered where there are several (an episode's ``system`` is its index).
    """
    lines = []
    for i, text in enumerate(systems):
        named = "" if len(systems) == 1 else f" {i}"
        lines += [f"  system prompt{named}:", *(f"    {x}" for x in text.splitlines())]
    return "\n".join(lines)


__all__ = [
    "LEFT_OUT",
    "TABLE",
    "Messages",
    "as_text",
    "conversation",
    "replies_cut",
    "said",
    "system_lines",
    "table",
    "transcript",
    "transcripts",
]
