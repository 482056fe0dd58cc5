"""A file of keys (a recipe, a framework's configuration): YAML or JSON, each key once, bounded.

A YAML or JSON reader keeps the last of a key given twice and drops the other without a word,
and a YAML alias (``*name``) nested a few lines deep expands to gigabytes (the "billion
laughs"): both are refused here, by name and line, so that what a command holds and what a
message quotes is what the file says, once. YAML is read as YAML 1.2 reads numbers (``1e-5``
is a number, as TRL's parser takes it).
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from eligibility._output import cut, quoted


def read_mapping(path: str | Path, what: str, max_bytes: int, why: str, of: str) -> dict[str, Any]:
    """The mapping in the YAML (``.yaml``, ``.yml``) or JSON file at ``path``, each key once.

    Args:
        path: the file.
        what: how messages name it (``the recipe r.yaml``).
        max_bytes: the largest file read; a larger one is refused before it is parsed.
        why: what the bound is, said where a file passes it.
        of: what the mapping holds (``TRL's keys``), said where the file holds another value.

    Raises:
        ValueError: naming ``what``: not a regular file (a pipe, a device), cannot be read,
            over ``max_bytes``, not UTF-8 text, does not parse, uses an alias, gives a key
            twice (at any depth), or is not a mapping.
    """
    where = Path(path)
    try:
        if not stat.S_ISREG(os.stat(where).st_mode):  # a pipe waits, a device never ends
            raise ValueError(
                f"{what} is not a regular file (a pipe, a device or a directory): save it to a "
                "file and give that"
            )
        with open(where, "rb") as f:
            data = f.read(max_bytes + 1)  # never more than the bound
    except OSError as err:
        raise ValueError(f"cannot read {what}: {err.strerror or err}") from None
    if len(data) > max_bytes:
        raise ValueError(f"{what} is over {max_bytes // 1000} kB: {why}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{what} is not UTF-8 text (byte {err.start}): save it as UTF-8 YAML or JSON"
        ) from None
    kind = "YAML" if where.suffix.lower() in (".yaml", ".yml") else "JSON"
    try:
        value = _yaml(text) if kind == "YAML" else json.loads(text, object_pairs_hook=_once)
    except _Twice as err:
        raise ValueError(f"{what} gives {err} twice: keep one") from None
    except _Alias as err:
        raise ValueError(
            f"{what} uses the YAML alias {err}: write the value out (aliases are refused: "
            "nested, a few lines of them expand to gigabytes)"
        ) from None
    except Exception as err:  # any parse error is the file's
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(f"{what} is not valid {kind}: {cut(first, 300)}") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{what} must hold a mapping of {of}, not a list/value")
    return value


class _Alias(ValueError):
    """A YAML alias (its message: ``*name`` and its line)."""


class _Twice(ValueError):
    """A key a mapping gives twice (its message: the key, and where)."""


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict, or :class:`_Twice` naming a key given twice."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Twice(quoted(key))
        out[key] = value
    return out


def _yaml(text: str) -> Any:
    """YAML ``text`` read with YAML 1.2's numbers.

    Raises:
        _Twice: a key given twice.
        _Alias: an alias (``*name``).
    """
    import yaml

    class Loader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise _Alias(f"*{cut(event.anchor)} (line {event.start_mark.line + 1})")
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise _Twice(f"{quoted(key)} (line {key_node.start_mark.line + 1})")
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    Loader.add_implicit_resolver(  # 1e-5, 1E+3: numbers in YAML 1.2 (1.1 wants a dot)
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"),
    )
    return yaml.load(text, Loader=Loader)  # a SafeLoader


__all__ = ["read_mapping"]
