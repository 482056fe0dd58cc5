"""One config dataclass feeds the command line, the logs and the saved run.

A field's ``metadata["help"]`` becomes its ``--help`` text; its type decides how it is parsed:
``int``, ``float``, ``str``, ``bool`` (``--flag/--no-flag``), ``Literal[...]`` (choices),
``tuple[int, ...]`` (several values), and ``X | None``.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any, Literal, TypeVar, get_args, get_origin

T = TypeVar("T")


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _or_none(tp: Any) -> Any:
    """A converter for an ``X | None`` option: the word ``none`` gives None, else ``tp(text)``."""

    def convert(text: str) -> Any:
        return None if text.strip().lower() == "none" else tp(text)

    convert.__name__ = tp.__name__  # argparse names the type in "invalid float value"
    return convert


def add_dataclass_arguments(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    positional: tuple[str, ...] = (),
    skip: tuple[str, ...] = (),
) -> None:
    """Add one option per field of the dataclass ``cls`` (``foo_bar`` → ``--foo-bar``).

    Args:
        parser: the parser to extend.
        cls: a dataclass whose fields carry ``metadata={"help": ...}``.
        positional: fields taken as positional arguments instead of options.
        skip: fields left out of the command line.
    """
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        tp, optional = _unwrap_optional(hints[f.name])
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        )
        help_text = f.metadata.get("help", "")
        kwargs: dict[str, Any] = {"help": f"{help_text} (default: {default})"}
        if f.name in positional:
            names = [f.name]
        else:
            names = ["--" + f.name.replace("_", "-")]
            kwargs["dest"] = f.name
            kwargs["default"] = default
        if tp is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif get_origin(tp) is Literal:
            kwargs["choices"] = list(get_args(tp))
            kwargs["type"] = type(get_args(tp)[0])
        elif get_origin(tp) is tuple:
            kwargs["nargs"] = "*"
            kwargs["type"] = get_args(tp)[0]
            kwargs["metavar"] = f.name.upper()
        else:
            kwargs["type"] = _or_none(tp) if optional else tp
            if optional:
                kwargs["metavar"] = f.name.upper()
        parser.add_argument(*names, **kwargs)


def dataclass_from_args(cls: type[T], args: argparse.Namespace, **overrides: Any) -> T:
    """Build ``cls`` from the parsed options (tuples restored), then apply ``overrides``."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not hasattr(args, f.name):
            continue
        v = getattr(args, f.name)
        tp, _ = _unwrap_optional(hints[f.name])
        if get_origin(tp) is tuple and v is not None:
            v = tuple(v)
        values[f.name] = v
    values.update(overrides)
    return cls(**values)
