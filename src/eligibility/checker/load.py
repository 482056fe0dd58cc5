"""Load a user's function from ``path/to/file.py:name``, with one-line errors."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def load_function(target: str) -> Callable[..., Any]:
    """The function ``name`` of the Python file in ``"path/to/file.py:name"``.

    The file runs as a module named after its stem, with its folder on ``sys.path`` (so it can
    import its neighbours), exactly as ``python path/to/file.py`` would see them.

    Raises:
        ValueError: no ``:name``, a file that does not exist, one that raises on import
            (its error named), or no attribute ``name`` in it.
    """
    path_text, sep, name = target.rpartition(":")
    if not sep or not path_text or not name:
        raise ValueError(
            f"{target!r} does not name a function; write path/to/file.py:function_name"
        )
    path = Path(path_text)
    if not path.is_file():
        raise ValueError(f"{path}: no such file (write path/to/file.py:{name})")
    module_name = f"_eligibility_check_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path}: not a Python file that can be imported")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # the user's import-time error, named in one line
        line = str(err).splitlines()[0] if str(err) else ""
        raise ValueError(
            f"{path} does not import: {type(err).__name__}: {line}".rstrip(": ")
        ) from None
    finally:
        sys.path.remove(folder)
    fn = getattr(module, name, None)
    if fn is None:
        found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise ValueError(
            f"{path} has no function {name!r}"
            + (f"; it defines {', '.join(found)}" if found else "")
        )
    return fn


__all__ = ["load_function"]
