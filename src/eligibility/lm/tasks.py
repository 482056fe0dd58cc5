r"""Verifiable tasks: prompts, a vocabulary, and an exact reward for every completion.

A task is a table of prompts (token ids, BOS first) over its own small vocabulary and a reward
R(prompt, completion) ∈ [0, 1] computed exactly; a completion is *correct* when R = 1. Token 0
is EOS (it ends a completion and is part of it), token 1 is BOS (it starts every prompt).

The built-in tasks give partial credit so that a policy learning from scratch gets a signal:

- ``repeat``: ``BOS x k`` → ``x`` repeated k times, then EOS. R = length of the longest common
  prefix of the answer a (EOS included) and the completion c, over max(|a|, |c|).
- ``reverse``: ``BOS s =`` → s reversed, then EOS. R as for ``repeat``.
- ``sum``: ``BOS =s`` (one token per target s = 4 … 9) → any digits among 1, 2, 3 whose sum is
  s, then EOS.
  R = 1 when the digits sum to s and EOS ends them; otherwise ½ · max(0, 1 − |Σ − s| / s) for a
  completion of digits ended by EOS, and 0 for anything else. Many answers are correct, of
  different lengths.

Your own task: ``module:function`` with ``--prompts FILE`` (JSON lines with a ``"prompt"`` key, or
one prompt per line); ``function(prompt, completion, **fields) -> float`` gets the prompt and the
completion as text (EOS dropped) and the JSON line's other fields as keyword arguments. Its
vocabulary is one token per character of the prompts (and of ``--completion-chars``).
"""

from __future__ import annotations

import importlib
import itertools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EOS, BOS = 0, 1
SPECIALS = ("<eos>", "<bos>")


@dataclass(frozen=True)
class Task:
    """A verifiable task.

    Attributes:
        name: its name (``repeat``) or ``module:function``.
        vocab: token strings; ``vocab[0]`` is EOS, ``vocab[1]`` BOS.
        prompts: the prompts as token ids, each starting with BOS.
        score: ``score(i, completion_ids, ended)`` → R for prompt i; ``ended`` says whether the
            completion stopped at EOS (then ``completion_ids`` excludes it).
        max_completion_length: the default T_max of a completion (EOS included).
    """

    name: str
    vocab: tuple[str, ...]
    prompts: tuple[tuple[int, ...], ...]
    score: Callable[[int, Sequence[int], bool], float] = field(repr=False)
    max_completion_length: int = 16

    @property
    def vocab_size(self) -> int:
        """V, the number of tokens the policy chooses among."""
        return len(self.vocab)

    def text(self, ids: Sequence[int]) -> str:
        """Token ids as text (specials as ``<eos>``/``<bos>``)."""
        return "".join(self.vocab[i] for i in ids)


def _prefix_credit(answer: Sequence[int], completion: Sequence[int], ended: bool) -> float:
    """R = |longest common prefix of a and c| / max(|a|, |c|), a = answer+EOS, c = completion.

    Dividing by the longer of the two makes every token past the answer cost (a policy that
    never stops scores low), and R = 1 exactly when c = a.
    """
    target = [*answer, EOS]
    got = [*completion, EOS] if ended else list(completion)
    n = 0
    for a, b in zip(target, got, strict=False):
        if a != b:
            break
        n += 1
    return n / max(len(target), len(got))


def _vocab(*groups: Sequence[str]) -> tuple[tuple[str, ...], dict[str, int]]:
    vocab = (*SPECIALS, *itertools.chain(*groups))
    return vocab, {s: i for i, s in enumerate(vocab)}


def repeat_task(symbols: str = "abcd", max_count: int = 4) -> Task:
    """``BOS x k`` → x repeated k times, EOS (see the module docstring)."""
    counts = [str(k) for k in range(1, max_count + 1)]
    vocab, ix = _vocab(symbols, counts)
    cases = [(x, k) for x in symbols for k in range(1, max_count + 1)]
    prompts = tuple((BOS, ix[x], ix[str(k)]) for x, k in cases)
    answers = [[ix[x]] * k for x, k in cases]
    return Task(
        "repeat",
        vocab,
        prompts,
        lambda i, c, ended: _prefix_credit(answers[i], c, ended),
        max_completion_length=2 * max_count + 4,
    )


def reverse_task(symbols: str = "abc", max_len: int = 3) -> Task:
    """``BOS s =`` → reversed s, EOS, for every s of length 1 … max_len over ``symbols``."""
    vocab, ix = _vocab(symbols, "=")
    strings = [
        "".join(s) for n in range(1, max_len + 1) for s in itertools.product(symbols, repeat=n)
    ]
    prompts = tuple((BOS, *(ix[ch] for ch in s), ix["="]) for s in strings)
    answers = [[ix[ch] for ch in reversed(s)] for s in strings]
    return Task(
        "reverse",
        vocab,
        prompts,
        lambda i, c, ended: _prefix_credit(answers[i], c, ended),
        max_completion_length=2 * max_len + 4,
    )


def sum_task(targets: range = range(4, 10), digits: str = "123") -> Task:
    """``BOS =s`` → digits from ``digits`` whose sum is s, EOS (see the module docstring)."""
    vocab, ix = _vocab(digits, [f"={s}" for s in targets])
    digit = {ix[d]: int(d) for d in digits}
    prompts = tuple((BOS, ix[f"={s}"]) for s in targets)
    goal = list(targets)

    def score(i: int, c: Sequence[int], ended: bool) -> float:
        if not ended or not c or any(t not in digit for t in c):
            return 0.0
        total, s = sum(digit[t] for t in c), goal[i]
        return 1.0 if total == s else 0.5 * max(0.0, 1.0 - abs(total - s) / s)

    return Task("sum", vocab, prompts, score, max_completion_length=12)


BUILTIN: dict[str, Callable[[], Task]] = {
    "repeat": repeat_task,
    "reverse": reverse_task,
    "sum": sum_task,
}
"""The built-in tasks by name."""


def _read_prompts(path: str) -> list[dict[str, Any]]:
    """Prompt records from a JSONL file (``{"prompt": …, other fields}``) or plain lines."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--prompts {path}: no such file; give a JSONL or text file of prompts")
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise ValueError(f"--prompts {path} is not UTF-8 text") from None
    jsonl = p.suffix.lower() in (".jsonl", ".json")
    records = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if not jsonl:
            records.append({"prompt": line})
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"--prompts {path}, line {n}: not JSON ({err.msg})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("prompt"), str):
            raise ValueError(
                f'--prompts {path}, line {n}: each line must be an object with a "prompt" string'
            )
        records.append(rec)
    if not records:
        raise ValueError(f"--prompts {path} holds no prompts")
    return records


def _import_function(spec: str, option: str) -> Callable[..., Any]:
    """``pkg.mod:function`` imported; a ValueError naming ``option`` otherwise."""
    mod, sep, name = spec.partition(":")
    if not sep or not mod or not name:
        raise ValueError(f"{option} {spec!r}: give module:function")
    try:
        fn = getattr(importlib.import_module(mod), name)
    except ImportError as err:
        raise ValueError(f"{option} {spec!r}: cannot import {mod} ({err})") from None
    except AttributeError:
        raise ValueError(f"{option} {spec!r}: {mod} has no {name}") from None
    if not callable(fn):
        raise ValueError(f"{option} {spec!r}: {name} is not callable")
    return fn


def user_task(
    spec: str, prompts: str | None, completion_chars: str = "", max_completion_length: int = 16
) -> Task:
    """The user's task: ``module:function`` scoring completions of the prompts in a file."""
    if prompts is None:
        raise ValueError(f"task {spec!r} needs --prompts FILE (JSON lines or one prompt a line)")
    fn = _import_function(spec, "task")
    records = _read_prompts(prompts)
    chars = sorted(set("".join(r["prompt"] for r in records)) | set(completion_chars))
    vocab, ix = _vocab(chars)
    texts = [r["prompt"] for r in records]
    extras = [{k: v for k, v in r.items() if k != "prompt"} for r in records]

    def score(i: int, c: Sequence[int], ended: bool) -> float:
        completion = "".join(vocab[t] for t in c)
        try:
            r = fn(texts[i], completion, **extras[i])
        except Exception as err:
            raise ValueError(
                f"the reward function {spec} raised {type(err).__name__}: {err} (prompt "
                f"{texts[i]!r}, completion {completion!r}); fix it to return a number"
            ) from None
        if isinstance(r, bool) or not isinstance(r, int | float) or not math.isfinite(r):
            raise ValueError(
                f"the reward function {spec} returned {r!r} for prompt {texts[i]!r}, completion "
                f"{completion!r}; it must return a finite number"
            )
        return float(r)

    task = Task(
        spec,
        vocab,
        tuple((BOS, *(ix[ch] for ch in t)) for t in texts),
        score,
        max_completion_length=max_completion_length,
    )
    score(0, [], True)  # a reward function that cannot score is bad input, before any run starts
    return task


def make_task(
    name: str,
    prompts: str | None = None,
    completion_chars: str = "",
    max_completion_length: int = 16,
) -> Task:
    """A built-in task by name, or the user's ``module:function`` task.

    Raises:
        ValueError: an unknown name, a prompt file that does not parse, a reward function that
            cannot be imported or does not return a finite number.
    """
    if name in BUILTIN:
        if prompts is not None:
            raise ValueError(f"--prompts is for your own task (module:function), not {name!r}")
        return BUILTIN[name]()
    if ":" not in name:
        raise ValueError(
            f"unknown task {name!r}: choose one of {', '.join(BUILTIN)}, or give your own "
            "reward as module:function with --prompts FILE"
        )
    return user_task(name, prompts, completion_chars, max_completion_length)
