"""The real-model kit's rewards, in TRL's convention (copied into the kit by lm_real_kit.py).

Every row of the kit's data carries its ``task`` and ``answer`` columns, which reach these
functions by name as TRL passes a dataset's columns::

    reward(completions, answer, task, **kw) -> list[float]

``correct`` is 1.0 exactly when the completion is the answer in the asked form (the held-out
accuracy's metric, ``--eval-metric correct``); ``reward`` is ``correct`` with partial credit
where a task has a natural one (the right number or word somewhere in a longer reply, a date or
a JSON object in the asked form but wrong), so a policy that is nearly right is told so.
``concise`` is ``reward`` with its partial credit scaled by the answer's share of the reply: a
reply holding the answer scores more the less else it says, which ranks the replies of a group
on the way to the asked form where ``reward`` gives them all the same 0.5.

Standalone: nothing of ``eligibility`` is imported, so the kit is what a TRL user brings.
"""

from __future__ import annotations

import json
import re

_NUMBER = re.compile(r"-?\d+")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_OBJECT = re.compile(r"\{.*?\}", re.DOTALL)


def _text(completion) -> str:
    """A completion's text: TRL gives a conversational one as a list of messages."""
    return completion[-1]["content"] if isinstance(completion, list) else completion


def _words(text: str) -> str:
    """Lower case, punctuation and surrounding quotes dropped, spaces collapsed."""
    return " ".join(re.sub(r"[^\w\s-]", " ", text.lower()).split())


def _json(text: str):
    """The first JSON object in ``text`` (None when there is none that parses)."""
    for m in _OBJECT.finditer(text):
        try:
            value = json.loads(m.group(0))
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def score(task: str, text: str, answer: str) -> tuple[float, float]:
    """(correct, reward) of one completion's ``text`` on ``task``."""
    text = text.strip()
    if task in ("add", "multiply"):
        exact = float(text.rstrip(".") == answer)
        found = _NUMBER.findall(text)
        return exact, exact or 0.5 * float(answer in found)
    if task in ("capital", "antonym", "compare"):
        exact = float(_words(text) == _words(answer))
        return exact, exact or 0.5 * float(_words(answer) in _words(text).split())
    if task == "plural":  # the answer is a sentence; its last word is the plural
        exact = float(_words(text) == _words(answer))
        return exact, exact or 0.5 * float(_words(answer).split()[-1] in _words(text).split())
    if task == "date":
        exact = float(text.rstrip(".") == answer)
        return exact, exact or 0.25 * float(_DATE.fullmatch(text.rstrip(".")) is not None)
    if task == "json":
        got, want = _json(text), json.loads(answer)
        exact = float(got == want and text.startswith("{") and text.endswith("}"))
        keys = got is not None and set(got) == set(want)
        return exact, exact or (0.5 * float(got == want) + 0.25 * float(keys))
    raise ValueError(f"unknown task {task!r}")


def reward(completions, answer, task, **kwargs) -> list[float]:
    """``correct`` with partial credit (see the module docstring)."""
    return [score(t, _text(c), a)[1] for c, a, t in zip(completions, answer, task, strict=True)]


def correct(completions, answer, task, **kwargs) -> list[float]:
    """1.0 when the completion is the answer in the asked form, else 0.0."""
    return [score(t, _text(c), a)[0] for c, a, t in zip(completions, answer, task, strict=True)]


def concise(completions, answer, task, **kwargs) -> list[float]:
    """``reward``, its partial credit times len(answer) / len(reply) (1 when exactly right)."""
    out = []
    for c, a, t in zip(completions, answer, task, strict=True):
        text = _text(c).strip()
        exact, partial = score(t, text, a)
        out.append(exact or partial * min(1.0, len(a) / max(len(text), 1)))
    return out
