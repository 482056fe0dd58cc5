"""The grid of a sweep: ``--set KEY=V1,V2`` for any field of the trainer's config, times the seeds.

The config is the trainer's (:mod:`eligibility.trainers`): ``Config`` for ``train``,
``FinetuneConfig`` for ``finetune``. Values are read exactly as that subcommand reads the
field's option (the same parser, built from the config dataclass), so ``--set lr=0.01,0.05``
gives floats and ``--set baseline=none,rloo`` checks the choices. A tuple field takes its
widths joined by ``x`` (``--set hidden=32,64x64`` is (32,) and (64, 64); ``none`` is the linear
policy, ()). A mapping field (``env_kwargs``) takes JSON objects, one per value, separated by
``;`` (or ``,``): ``--set 'env_kwargs={"is_slippery": true}; {"is_slippery": false}'``.

A value given twice in one list (``lr=0.1,1e-1``: the same float) runs once, with a warning;
two settings that would share a run directory are refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import re
import typing
import warnings
from dataclasses import dataclass
from typing import Any

from eligibility._dataclass_args import add_dataclass_arguments, type_hints, unwrap_optional
from eligibility.reinforce.config import flag
from eligibility.trainers import DEFAULT, TRAINERS

_NOT_SWEPT = ("env_id", "seed", "out", "progress")
"""Fields a sweep owns (``train``'s): the env is the sweep's, seeds are the other axis, out is
per run. Another trainer's are its ``subject`` (the task) and the last three."""


def _owned(trainer: str) -> tuple[str, ...]:
    return (TRAINERS[trainer].subject, *_NOT_SWEPT[1:])


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> typing.NoReturn:  # type: ignore[override]
        raise ValueError(message)


def _parser(config: type, name: str) -> _Parser:
    """The option of the field ``name`` alone, as its subcommand reads it."""
    p = _Parser(add_help=False)
    others = tuple(f.name for f in dataclasses.fields(config) if f.name != name)
    add_dataclass_arguments(p, config, skip=others)
    return p


def _type_name(name: str, config: type) -> str:
    tp, optional = unwrap_optional(type_hints(config)[name])
    if typing.get_origin(tp) is typing.Literal:
        text = "one of " + ", ".join(map(str, typing.get_args(tp)))
    elif typing.get_origin(tp) is dict:
        text = 'JSON objects separated by ; (e.g. {"is_slippery": false})'

    elif typing.get_origin(tp) is tuple:
        text = "widths joined by x (e.g. 64x64), or none"
    else:
        text = getattr(tp, "__name__", str(tp))
    return text + (" or none" if optional else "")


def parse_value(name: str, text: str, trainer: str = DEFAULT) -> Any:
    """One value of the field ``name`` of the trainer's config, read as ``--name text`` is.

    Raises:
        ValueError: naming the key and the type of the field.
    """
    config = TRAINERS[trainer].load("config")
    hints = type_hints(config)
    tp, _ = unwrap_optional(hints[name])
    if typing.get_origin(tp) is dict:
        values = json_objects(name, text)
        if len(values) != 1:
            raise ValueError(f"--set {name}={text}: give one JSON object here, got {len(values)}")
        return values[0]
    if tp is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"--set {name}={text}: {name} takes true or false")
        return text.lower() == "true"
    tokens = [text]
    if typing.get_origin(tp) is tuple:
        tokens = [] if text.lower() in ("none", "()", "") else text.split("x")
    # --flag=VALUE, so that a value starting with "-" (-inf) is not taken for an option
    argv = [f"{flag(name)}={tokens[0]}"] if len(tokens) == 1 else [flag(name), *tokens]
    try:
        ns = _parser(config, name).parse_args(argv)
    except ValueError as err:
        kind = _type_name(name, config)
        raise ValueError(f"--set {name}={text}: {err}; {name} takes {kind}") from None
    value = getattr(ns, name)
    return tuple(value) if isinstance(value, list) else value


def parse_set(item: str, trainer: str = DEFAULT) -> tuple[str, list[Any]]:
    """``KEY=V1,V2`` → (field name, [values]), a field of the trainer's config.

    Raises:
        ValueError: no ``=``, an unknown key (with the close ones), an empty list, a bad value.
    """
    if "=" not in item:
        raise ValueError(f"--set {item}: write KEY=V1,V2 (e.g. baseline=none,rloo)")
    key, _, values = item.partition("=")
    name = key.strip().lstrip("-").replace("-", "_")
    config = TRAINERS[trainer].load("config")
    owns = _owned(trainer)
    every = [f.name for f in dataclasses.fields(config)]
    if name not in every or name in owns:
        import difflib

        close = difflib.get_close_matches(name, every, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close and name not in close else ""
        owned = f" ({name} is set by the sweep itself)" if name in owns else ""
        if "seed" in close or name == "seed":
            hint += " (the seeds are --seeds N or --seed-list S ...)"
        of = f" of {config.__name__}" if trainer != DEFAULT else ""
        raise ValueError(f"--set {item}: unknown key {key!r}{of}{owned}{hint}")
    if typing.get_origin(unwrap_optional(type_hints(config)[name])[0]) is dict:
        parsed = json_objects(name, values)
    else:
        texts = [v.strip() for v in values.split(",") if v.strip()]
        parsed = [parse_value(name, t, trainer) for t in texts]
    if not parsed:
        raise ValueError(f"--set {item}: no values; write {name}=V1,V2")
    return name, _merged(name, parsed)


def json_objects(name: str, text: str) -> list[dict[str, Any]]:
    """The JSON objects in ``text``, one after another, separated by ``;`` or ``,``.

    Raises:
        ValueError: naming the key, the position and the expected syntax.
    """
    decoder = json.JSONDecoder()
    example = f"""--set '{name}={{"is_slippery": true}}; {{"is_slippery": false}}'"""
    out, i = [], 0
    while True:
        while i < len(text) and (text[i].isspace() or text[i] in ";,"):
            i += 1
        if i == len(text):
            return out
        try:
            value, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"--set {name}: not JSON at character {err.pos + 1} of {text!r} ({err.msg}); "
                f"write JSON objects separated by ;, e.g. {example}"
            ) from None
        if not isinstance(value, dict):
            raise ValueError(
                f"--set {name}: {json.dumps(value)} is not a JSON object; e.g. {example}"
            )
        out.append(value)


def _merged(name: str, values: list[Any]) -> list[Any]:
    """``values`` with repeats dropped (as read: ``0.1`` and ``1e-1`` are one), with a warning."""
    kept: list[Any] = []
    for v in values:
        if v in kept:
            warnings.warn(
                f"--set {name}: the value {_show(v)} is given twice; it runs once",
                UserWarning,
                stacklevel=3,
            )
        else:
            kept.append(v)
    return kept


@dataclass(frozen=True)
class Grid:
    """The settings (the product of the ``--set`` lists) and the seeds of a sweep.

    ``env_id`` is the sweep's positional argument: the env id, or (``finetune``) the task;
    ``trainer`` the key of :data:`~eligibility.trainers.TRAINERS` that trains the runs.
    """

    env_id: str
    axes: dict[str, list[Any]]
    seeds: list[int]
    trainer: str = DEFAULT

    @classmethod
    def from_args(
        cls, env_id: str, sets: list[str], seeds: list[int], trainer: str = DEFAULT
    ) -> Grid:
        """Parse every ``--set`` (a key given twice is an error) and check the seeds.

        Raises:
            ValueError: a bad ``--set``, a repeated key, or no seeds.
        """
        axes: dict[str, list[Any]] = {}
        for item in sets:
            name, values = parse_set(item, trainer)
            if name in axes:
                raise ValueError(f"--set {name} is given twice; give all its values in one")
            axes[name] = values
        if not seeds:
            raise ValueError("the grid is empty: give --seeds N (N ≥ 1) or --seed-list")
        if any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct and ≥ 0, got {seeds}")
        return cls(env_id, axes, list(seeds), trainer)

    @property
    def settings(self) -> list[dict[str, Any]]:
        """Every combination of the axes' values, in the order given (one {} without axes)."""
        keys = list(self.axes)
        return [
            dict(zip(keys, combo, strict=True)) for combo in itertools.product(*self.axes.values())
        ]

    @property
    def varying(self) -> list[str]:
        """The keys with more than one value (those that name a setting; the rest are fixed)."""
        return [k for k, v in self.axes.items() if len(v) > 1]

    def runs(self) -> list[tuple[int, dict[str, Any], int]]:
        """(setting index, setting, seed) for every run: settings outer, seeds inner."""
        return [(i, s, seed) for i, s in enumerate(self.settings) for seed in self.seeds]

    def to_json(self) -> dict[str, Any]:
        """The grid as JSON values (tuples as lists); another trainer than ``train``'s is named.

        ``{"env_id": …, "axes": …, "seeds": …}``, or ``{"trainer": "finetune", "task": …, …}``.
        """
        axes = {
            k: [list(v) if isinstance(v, tuple) else v for v in vs] for k, vs in self.axes.items()
        }
        named = {} if self.trainer == DEFAULT else {"trainer": self.trainer}
        subject = TRAINERS[self.trainer].subject
        return {**named, subject: self.env_id, "axes": axes, "seeds": self.seeds}


def label(setting: dict[str, Any]) -> str:
    """A setting as ``key=value key=value`` (``defaults`` for the empty one)."""
    if not setting:
        return "defaults"
    return " ".join(f"{k}={_show(v)}" for k, v in setting.items())


def _show(v: Any) -> str:
    if isinstance(v, dict):
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    if isinstance(v, tuple):
        return "x".join(map(str, v)) or "none"
    return str(v)


def run_name(setting: dict[str, Any], seed: int) -> str:
    """The run's directory under the sweep's: deterministic, so a re-run finds it."""
    slug = re.sub(r"[^A-Za-z0-9=.,_-]+", "_", label(setting).replace(" ", ","))
    return f"{slug}/seed-{seed}"


__all__ = ["Grid", "label", "parse_set", "parse_value", "run_name"]
