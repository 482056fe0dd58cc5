r"""An episode as a person reads it: the prompt, each reply and the world's answer to it.

A played episode is one row of token ids after its prompt, ``completion_mask`` 1 on the model's
tokens and ``turn`` the model's turn of every token (a world token: the turn it answers). Its
transcript cuts the row where (model or world, turn) changes:

    q │ o⁽¹⁾ w⁽¹⁾ │ o⁽²⁾ w⁽²⁾ │ … │ o⁽ᴷ⁾        (rₖ beside each turn, G = Σₖ rₖ)

with the reset text (the environment's first observation, a tool episode's conversation) in
q, each reply o⁽ᵏ⁾ as the model wrote it (its tool calls in it) and each answer w⁽ᵏ⁾ as the
world gave it (the tools' results, the next observation, the template's headers). TRL's
``log_completions`` shows a batch's prompts and completions; this is the same for episodes,
written by ``eligibility evaluate`` and by each evaluation of a run (``episodes.jsonl``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


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
) -> dict[str, Any]:
    """One episode's record, as a person reads it.

    ``{"prompt", "turns": [{"reply", "answer", "reward"}], "return", "tool_calls",
    "tool_failures"}``.

    Args:
        prompt: q's token ids (no padding).
        tokens: every token after the prompt (padding, where ``turn`` is −1, is dropped).
        model: per token, 1 where the model sampled it.
        turn: per token, the model's turn it belongs to (−1: padding).
        rewards: rₖ per turn the episode played.
        text: token ids → text (the task's decoding).
        tool_calls: the tool calls the episode made.
        tool_failures: those that failed.
    """
    turns: list[dict[str, Any]] = [{"reply": [], "answer": [], "reward": float(r)} for r in rewards]
    for t, m, k in zip(tokens, model, turn, strict=True):
        if 0 <= k < len(turns):
            turns[k]["reply" if m else "answer"].append(int(t))
    for row in turns:
        row["reply"], row["answer"] = text(row["reply"]), text(row["answer"])
    return {
        "prompt": text(list(prompt)),
        "turns": turns,
        "return": float(sum(rewards)),
        "tool_calls": int(tool_calls),
        "tool_failures": int(tool_failures),
    }


def transcripts(batch: Any, rows: Sequence[int], text: Callable[[Sequence[int]], str]) -> list:
    """:func:`transcript` of each of ``rows`` of a batch (``lm.episodes.episode.Episodes``).

    With the episode's ``log_extra`` cells (``Episodes.extra``), each under its column (one
    that a transcript has already keeps the transcript's).
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
        )
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


def as_text(record: dict[str, Any]) -> str:
    """A transcript for a terminal: the prompt, then each turn's reply (→) and answer (←)."""
    lines = [f"  {record['prompt'].strip()}"]
    for k, turn in enumerate(record["turns"], 1):
        lines.append(f"    {k} → {turn['reply'].strip()}   (r {turn['reward']:g})")
        if turn["answer"].strip():
            lines.append(f"      ← {turn['answer'].strip()}")
    lines.append(
        f"    return {record['return']:g}, {record['tool_calls']} tool calls "
        f"({record['tool_failures']} failed)"
    )
    return "\n".join(lines)


__all__ = ["as_text", "replies_cut", "transcript", "transcripts"]
