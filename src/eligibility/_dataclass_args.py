"""One config dataclass feeds the command line, the logs and the saved run.

A field's type decides how it is parsed: ``int``, ``float``, ``str``, ``bool``
(``--flag/--no-flag``), ``Literal[...]`` (choices), ``tuple[X, ...]`` (several values; the word
``none`` alone is the empty tuple), and ``X | None`` (the word ``none`` is None). Its
``metadata`` says the rest:

- ``help``: the ``--help`` text (the default is appended);
- ``flag``: the option's name when it is not the field's (``--episodes-per-call`` for
  ``episodes``);
- ``metavar``: the placeholder in ``--help`` (``DIR`` for a directory, ``FILE`` for a file;
  :func:`path_option` declares such a field, None when not given);
- ``deprecated``: old spellings that still work for one release, each printing one
  ``deprecated`` line on stderr: ``{"--episodes": ...}`` (takes a value like the option) or
  ``{"--greedy": "greedy"}`` (a flag that stores that constant);
- ``shorthand``: flags that store a constant, not deprecated (``{"--sample": "sample"}``);
- ``repeat``: a tuple option that may be given several times, its values joined
  (``--set a=1,2 --set b=3``);
- ``min``: the least value of an ``int`` option (default 0: no int option of this project
  takes a negative number).

Numbers are read here once for every command: an ``int`` below its ``min`` and a ``float``
``nan`` are refused by the parser, so the message names the option (``argument --seed: …``)
and nothing has been written yet; ``inf`` and ``-inf`` are read as floats (each config says
which of its fields take them), and :mod:`eligibility._io` writes them to JSON and reads them
back.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin

from eligibility._output import note

T = TypeVar("T")


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, evaluated once per class; read it, never change it.

    The configs' annotations are strings (``from __future__ import annotations``): evaluating
    them compiles each one again, about half a millisecond for a config of some 40 fields, and
    a config's options are built for each command line and, by the sweep, for each ``--set``
    value read.
    """
    return typing.get_type_hints(cls)


def unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """``X | None`` → (X, True); any other type → (itself, False)."""
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


def _int_at_least(minimum: int) -> Any:
    """A converter for an ``int`` option: an integer ≥ ``minimum``, else a message for argparse."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer ≥ {minimum}, got {value}")
        return value

    convert.__name__ = "int"
    return convert


def _number(text: str) -> float:
    """A converter for a ``float`` option: any float, ±inf included, but not nan."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r} (nan is not one)")
    return value


_number.__name__ = "float"


def _reader(tp: Any, f: dataclasses.Field[Any]) -> Any:
    """The converter of one value of the field ``f`` whose (element) type is ``tp``."""
    if tp is int:
        return _int_at_least(f.metadata.get("min", 0))
    if tp is float:
        return _number
    return tp


def flag_of(f: dataclasses.Field[Any]) -> str:
    """The option of a field: ``metadata["flag"]``, else ``foo_bar`` → ``--foo-bar``."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _command(parser: argparse.ArgumentParser) -> str:
    return parser.prog.removeprefix("eligibility").strip()


class _Tuple(argparse.Action):
    """Several values as a tuple; ``none`` alone is ``()``; with ``repeat``, given again adds."""

    def __init__(self, *args: Any, repeat: bool = False, **kwargs: Any) -> None:
        self.repeat = repeat
        super().__init__(*args, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        values = list(values)
        if None in values:  # the converter read "none"
            if len(values) > 1:
                parser.error(f"{option_string}: none stands alone (it means no values)")
            values = []
        seen = namespace.__dict__.setdefault("_given", set())
        if self.repeat and self.dest in seen:
            values = [*getattr(namespace, self.dest), *values]
        seen.add(self.dest)
        setattr(namespace, self.dest, tuple(values))


class Alias(argparse.Action):
    """Another spelling of an option: a constant (no value) or the option's own value.

    A command whose spelling means more subclasses it (``alias_actions`` of
    :func:`add_dataclass_arguments`).
    """

    def __init__(self, *args: Any, target: str, deprecated: bool, inner: Any, **kwargs: Any):
        self.target, self.deprecated, self.inner = target, deprecated, inner
        super().__init__(*args, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        if self.deprecated:
            note(
                _command(parser),
                f"{option_string} is deprecated and will be removed; use {self.target}",
                kind="deprecated",
            )
        if self.inner is not None:
            self.inner(parser, namespace, values, option_string)
        else:
            setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def path_option(text: str, metavar: str = "FILE") -> Any:
    """A config field for a file or directory to read or write, None when not given.

    ``field(default=None, metadata={"help": text, "metavar": metavar})``: ``--help`` shows
    ``metavar`` (``FILE``, or ``DIR`` for a directory) as the option's placeholder.
    """
    return dataclasses.field(default=None, metadata={"help": text, "metavar": metavar})


def add_dataclass_arguments(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    positional: tuple[str, ...] = (),
    skip: tuple[str, ...] = (),
    given_only: bool = False,
    alias_actions: Mapping[str, type[Alias]] | None = None,
) -> dict[str, argparse.Action]:
    """Add one option per field of the dataclass ``cls`` (``foo_bar`` → ``--foo-bar``).

    Args:
        parser: the parser to extend.
        cls: a dataclass whose fields carry ``metadata={"help": ...}`` (see the module
            docstring for the other keys).
        positional: fields taken as positional arguments instead of options.
        skip: fields left out of the command line.
        given_only: only the options given reach the namespace (their default
            ``argparse.SUPPRESS``; ``--help`` still shows the field's), and a positional may
            be left out (None): for a command whose defaults come from elsewhere (a resumed
            run's saved config, ``Config.for_env``).
        alias_actions: a ``shorthand`` or ``deprecated`` spelling → the :class:`Alias`
            subclass that registers it, for a spelling whose meaning depends on what else was
            given.

    Returns:
        Each field's action, by field name.
    """
    hints = type_hints(cls)
    actions: dict[str, argparse.Action] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        tp, optional = unwrap_optional(hints[f.name])
        default = _default(f)
        help_text = f.metadata.get("help", "")
        kwargs: dict[str, Any] = {"help": f"{help_text} (default: {_shown(default)})"}
        if f.name in positional:
            names = [f.name]
            kwargs["help"] = help_text
        else:
            names = [flag_of(f)]
            kwargs["dest"] = f.name
            kwargs["default"] = argparse.SUPPRESS if given_only else default
        if tp is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif get_origin(tp) is Literal:
            kwargs["choices"] = list(get_args(tp))
            kwargs["type"] = type(get_args(tp)[0])
        elif get_origin(tp) is tuple:
            kwargs["nargs"] = "+" if f.name in positional else "*"
            kwargs["type"] = _or_none(_reader(get_args(tp)[0], f))
            kwargs["action"] = _Tuple
            if f.metadata.get("repeat"):
                kwargs["repeat"] = True
            kwargs["metavar"] = f.name.upper()
        else:
            kwargs["type"] = _or_none(_reader(tp, f)) if optional else _reader(tp, f)
            if optional:
                kwargs["metavar"] = f.name.upper()
        if "metavar" in f.metadata:
            kwargs["metavar"] = f.metadata["metavar"]
        if f.name in positional:
            kwargs["metavar"] = f.metadata.get("metavar", f.name.upper())
            kwargs.pop("dest", None)
            if given_only:
                kwargs.update(nargs="*" if get_origin(tp) is tuple else "?", default=None)
        actions[f.name] = parser.add_argument(*names, **kwargs)
        _add_aliases(parser, f, kwargs, alias_actions or {})
    return actions


def _add_aliases(
    parser: argparse.ArgumentParser,
    f: Any,
    kwargs: dict[str, Any],
    alias_actions: Mapping[str, type[Alias]],
) -> None:
    """The field's ``deprecated`` and ``shorthand`` spellings (hidden from ``--help``)."""
    for key, is_deprecated in (("deprecated", True), ("shorthand", False)):
        for spelling, const in f.metadata.get(key, {}).items():
            target = flag_of(f) if const is ... else f"{flag_of(f)} {const}"
            alias: dict[str, Any] = {
                "dest": f.name,
                "default": argparse.SUPPRESS,
                "target": target,
                "deprecated": is_deprecated,
                "inner": None,
                "help": argparse.SUPPRESS if is_deprecated else f"the same as {target}",
            }
            if const is ...:  # takes a value, parsed as the option's own
                alias.update(nargs=kwargs.get("nargs"), type=kwargs.get("type"))
                alias["choices"] = kwargs.get("choices")
                alias["metavar"] = kwargs.get("metavar")
                if kwargs.get("action") is _Tuple:
                    alias["inner"] = _Tuple(
                        [spelling], f.name, repeat=bool(f.metadata.get("repeat"))
                    )
            else:
                alias.update(nargs=0, const=const)
            parser.add_argument(spelling, action=alias_actions.get(spelling, Alias), **alias)


def _shown(default: Any) -> Any:
    """A default as the command line spells it: ``()`` → none, ``None`` → none, ``""`` → ''."""
    if default is None or default == ():
        return "none"
    if isinstance(default, str) and default == "":
        return "''"
    if isinstance(default, tuple):
        return " ".join(map(str, default))
    return default


def dataclass_from_args(cls: type[T], args: argparse.Namespace, **overrides: Any) -> T:
    """Build ``cls`` from the parsed options (tuples restored), then apply ``overrides``.

    Fields absent from ``args`` (skipped, or ``argparse.SUPPRESS``-ed and not given) take the
    dataclass's own default.
    """
    hints = type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not hasattr(args, f.name):
            continue
        v = getattr(args, f.name)
        tp, _ = unwrap_optional(hints[f.name])
        if get_origin(tp) is tuple and v is not None:
            v = tuple(v)
        values[f.name] = v
    values.update(overrides)
    return cls(**values)
