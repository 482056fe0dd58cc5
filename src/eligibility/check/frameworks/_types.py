"""A framework's configuration keys held to the types its own dataclasses declare.

TRL's ``GRPOConfig`` and verl's ``AlgoConfig``/``FSDPActorConfig`` are dataclasses: a key's
annotation says what the framework takes (``num_generations: int | None``), its ``choices``
metadata (TRL's) which values. A dataclass built from a mapping checks neither (``GRPOConfig(
num_generations=2.5)`` is built, and fails, or silently misbehaves, deep in the trainer), so
each given key is held to its declaration here, before anything runs: a value of another type
is one line naming the key, its value and the declaration. An annotation this module cannot
judge (a class of the framework's own) is left to the framework.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from eligibility._output import quoted


def fits(value: Any, kind: Any) -> bool | None:
    """Whether ``value`` is of the annotated type ``kind`` (None: ``kind`` cannot be judged).

    An integer is not a bool (YAML's ``true`` is no count) and a float is not an integer
    (``2.5`` is no number of generations; nor is ``2.0``, as the framework's parser refuses
    ``int("2.0")``); an integer is a float, NaN is not (±inf is: a bound of none).

    >>> fits(2.5, int), fits(2, float), fits(True, int), fits(None, int | None)
    (False, True, False, True)
    """
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        each = [fits(value, k) for k in args]
        return True if any(each) else (None if None in each else False)
    if origin is Literal:
        return value in args
    if kind is type(None) or kind is None:
        return value is None
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:  # NaN is no setting: every number it meets becomes NaN
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return number and not math.isnan(value)
    if kind is str:
        return isinstance(value, str)
    if kind in (list, tuple) or origin in (list, tuple):
        if not isinstance(value, list | tuple):
            return False
        inner = [fits(v, args[0]) for v in value] if args and origin is list else []
        return False if False in inner else True
    if kind is dict or origin is dict:
        return isinstance(value, dict)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return isinstance(value, kind) or value in {e.value for e in kind}
    return None


def describe(kind: Any) -> str:
    """An annotation in words: ``int | None`` → ``an integer or null``."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(describe(k) for k in args))
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    words = {
        bool: "true or false",
        int: "an integer",
        float: "a number",
        str: "text",
        type(None): "null",
        list: "a list",
        tuple: "a list",
        dict: "a mapping",
    }
    if kind in words:
        return words[kind]
    if origin in words:
        return words[origin] + (f" of {describe(args[0])}" if args and origin is list else "")
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return "one of " + ", ".join(str(e.value) for e in kind)
    return getattr(kind, "__name__", str(kind))


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # a forward reference the framework never resolves: the plain ones
        return {f.name: f.type for f in dataclasses.fields(cls) if not isinstance(f.type, str)}


def refuse_mistyped(values: Mapping[str, Any], cls: type, where: str) -> None:
    """Refuse a value of ``values`` that the dataclass ``cls`` declares otherwise, in one line.

    Each key that is a field of ``cls`` is held to its annotation (:func:`fits`) and, where
    the field declares them, its ``choices``; other keys are the caller's to judge.

    Raises:
        ValueError: ``where``'s key, its value, and what ``cls`` declares.
    """
    hints = _hints(cls)
    choices = {f.name: f.metadata.get("choices") for f in dataclasses.fields(cls)}
    for key, value in values.items():
        if key not in hints:
            continue
        if fits(value, hints[key]) is False:
            raise ValueError(
                f"{where}'s {key}: {quoted(value)} is not {describe(hints[key])} "
                f"({cls.__name__} declares {key} so)"
            )
        allowed = choices.get(key)
        if allowed and isinstance(value, str) and value not in allowed:
            raise ValueError(
                f"{where}'s {key}: {quoted(value)} is not one of {', '.join(map(str, allowed))} "
                f"({cls.__name__}'s choices)"
            )


Range = tuple[float, bool]
"""(low, strict): a value must be > low (strict) or ≥ low."""


def refuse_out_of_range(values: Mapping[str, Any], ranges: Mapping[str, Range], where: str) -> None:
    """Refuse a number of ``values`` below the range its key's math needs, in one line.

    ``ranges``: the keys whose values the check's use of the framework needs in a range (a
    temperature > 0 divides the logits; a clip ≥ 0; at least one epoch), each (low, strict).
    A value that is not a number is left to :func:`refuse_mistyped`.

    Raises:
        ValueError: ``where``'s key, its value, and the range.
    """
    for key, (low, strict) in ranges.items():
        value = values.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not math.isfinite(value) or value < low or (strict and value == low):
            raise ValueError(
                f"{where}'s {key}: {quoted(value)} is out of range: give a finite number "
                f"{'>' if strict else '≥'} {low:g}"
            )


__all__ = ["describe", "fits", "refuse_mistyped", "refuse_out_of_range"]
