"""A run's identity and the resume rule, for every run config dataclass.

A run is what its saved ``config.json`` says. A resume takes that config, applies the
options given now that may change (the budget, the cadences, the target, progress), and refuses
by name, with both values, any option of the run's identity given with another value.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal

import numpy as np

from eligibility._io import read_json
from eligibility._output import quoted


def flag(name: str, cls: Any = None) -> str:
    """The command-line flag of a config field: ``total_steps`` → ``--total-steps``.

    With the config class ``cls``: the flag its field declares where it names one
    (``metadata={"flag": "--env"}`` for ``environment_factory``).
    """
    if cls is not None:
        declared = {f.name: f.metadata.get("flag") for f in dataclasses.fields(cls)}
        if declared.get(name):
            return str(declared[name])
    return "--" + name.replace("_", "-")


def absent(path: Path) -> str:
    """Why ``path`` is no file to read: missing, or there as something else (a pipe, a link)."""
    return "is not a regular file" if path.is_symlink() or path.exists() else "is missing"


def bad_value(name: str, rule: str, value: Any, cls: Any = None) -> str:
    """The message of a bad config value: ``lr (--lr) must be > 0, got -1`` (the value cut)."""
    return f"{name} ({flag(name, cls)}) must be {rule}, got {quoted(value)}"


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _options(tp: Any) -> list[Any]:
    """The alternatives of a field's type: ``float | None`` → [float]; others → [tp]."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(tp) if a is not type(None)]
    return [tp]


def _is_int(v: Any) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def _as(t: Any, name: str, value: Any, infinite: frozenset[str]) -> tuple[bool, Any]:
    """(True, ``value`` as the type ``t``), or (False, None) when it is not one."""
    origin = typing.get_origin(t)
    if origin is Literal:
        return isinstance(value, str) and value in typing.get_args(t), value
    if origin is dict:
        ok = isinstance(value, dict) and all(isinstance(k, str) for k in value)
        return ok, dict(value) if ok else None
    if origin is tuple:  # tuple[X, ...]: each item an X
        item = typing.get_args(t)[0]
        items = (
            [_as(item, name, v, infinite) for v in value] if isinstance(value, list | tuple) else []
        )
        ok = isinstance(value, list | tuple) and all(good for good, _ in items)
        return ok, tuple(v for _, v in items) if ok else None
    if t is bool:
        return isinstance(value, bool), value
    if t is int:
        return _is_int(value), int(value) if _is_int(value) else None
    if t is float:
        if not (_is_int(value) or isinstance(value, float)):
            return False, None
        v = float(value)
        if math.isfinite(v) or (name in infinite and v == math.inf):
            return True, v
        raise ValueError(bad_value(name, "a finite number", value))
    return isinstance(value, str), value


def checked(name: str, value: Any, cls: type, infinite: frozenset[str] = frozenset()) -> Any:
    """``value`` as the type ``cls`` declares for its field ``name``, or a ValueError naming it.

    An int for a float field becomes a float; a list for a tuple field becomes a tuple.

    Args:
        name: the field.
        value: the value given.
        cls: the config dataclass that declares ``name``.
        infinite: float fields that may be +inf (``target_return``: no target).
    """
    tp = _hints(cls)[name]
    if value is None and type(None) in typing.get_args(tp):
        return None
    for t in _options(tp):
        ok, v = _as(t, name, value, infinite)
        if ok:
            return v
    kinds = [_KINDS.get(t) or _kind(t) for t in _options(tp)]
    if type(None) in typing.get_args(tp):
        kinds.append("None")
    raise ValueError(bad_value(name, " or ".join(kinds), value, cls))


_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "text"}


def _kind(t: Any) -> str:
    if typing.get_origin(t) is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(t)))
    if typing.get_origin(t) is dict:
        return "a mapping of names to values"
    item = typing.get_args(t)[0]
    return f"a list, each item {_KINDS.get(item) or _kind(item)}"


def load_config(run_dir: str | Path, cls: Any) -> Any:
    """The config (of the class ``cls``) saved in ``run_dir``, with ``out`` set to it.

    Raises:
        ValueError: no run there, or a config.json that is not a valid config (naming the file
            and the field).
    """
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise ValueError(
            f"no training run in {str(run_dir)!r}: {path.name} {absent(path)} (give a directory "
            "an `eligibility train` or `eligibility finetune` run wrote)"
        )
    try:
        d = read_json(path)
        if isinstance(d, dict):
            d["out"] = str(run_dir)
        return cls.from_dict(d)
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        raise ValueError(f"{path} is not a valid run config: {err}") from None


def resumed(
    saved: Any,
    given: dict[str, Any],
    identity: frozenset[str],
    infinite: frozenset[str] = frozenset(),
) -> Any:
    """The config a resume runs with: ``saved`` with the changeable options in ``given`` applied.

    Args:
        saved: the run's saved config (its identity).
        given: options given now (field name → value); identity options must equal the saved
            value.
        identity: the fields of the run's identity.
        infinite: float fields that may be +inf (see :func:`checked`).

    Raises:
        ValueError: naming every identity option given with another value, and both values.
    """
    now = {k: checked(k, v, type(saved), infinite) for k, v in given.items()}
    conflicts = [
        f"{flag(k, type(saved))} {quoted(now[k])} (the run has {quoted(getattr(saved, k))})"
        for k in sorted(now)
        if k in identity and now[k] != getattr(saved, k)
    ]
    if conflicts:
        raise ValueError(
            "--resume continues a run as it was made; these options differ from it: "
            + "; ".join(conflicts)
            + ". Drop them, or start a new run with another --out"
        )
    changes = {k: v for k, v in now.items() if k not in identity and k != "out"}
    return dataclasses.replace(saved, **changes)


def resume_config(
    run_dir: str | Path,
    config: Any,
    identity: frozenset[str],
    infinite: frozenset[str] = frozenset(),
) -> Any:
    """The config a resume of ``run_dir`` runs with, given the settings of ``config`` now.

    Every field of ``config`` but ``out`` is given (see :func:`resumed`): ``config`` must agree
    with the run on its identity; its changeable settings apply.
    """
    given = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    given.pop("out", None)
    return resumed(load_config(run_dir, type(config)), given, identity, infinite)
