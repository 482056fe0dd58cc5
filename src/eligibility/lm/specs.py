"""TRL's objects given from Python, named in a run's config as importable specs.

A run made from Python with ``reward_funcs=``, ``tools=`` or ``environment_factory=`` saves
in config.json where each object is found again (``FILE.py:qualname`` or
``module:qualname``), so that ``--resume`` or ``evaluate`` from the command line loads it
again; an object with no such name (a lambda, a script's own) is saved as
:data:`FROM_PYTHON` and refused there in one line (:func:`refuse_unnamed`).
"""

from __future__ import annotations

import importlib
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eligibility.lm.episodes.served import Factories, Tool
from eligibility.lm.rewards import RewardFunc


def _spec(obj: object) -> str | None:
    """``FILE.py:qualname`` or ``module:qualname`` of a callable or class found there again.

    The module's file (:func:`_file_of`) where it is the user's own, so that the run loads it
    from any directory (``evaluate``, ``--resume``), as the command line takes ``FILE.py:fn``;
    else its name (an installed module, a package's). None where there is none: a lambda or a
    function defined in a function, an instance, or anything of ``__main__`` (a script's
    module: importing its file again would run it).
    """
    if isinstance(obj, str):
        return obj
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        return None
    try:
        found: object = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return f"{_file_of(module) or module}:{qualname}" if found is obj else None


def _file_of(name: str) -> str | None:
    """The absolute path of module ``name``'s file, where it is the user's own top-level module.

    None for a module of a package (a file loaded alone loses its relative imports), one
    installed (the standard library, site-packages: its name imports anywhere), or one without
    a ``.py`` file.
    """
    path = getattr(sys.modules.get(name), "__file__", None)
    if "." in name or not isinstance(path, str) or not path.endswith(".py"):
        return None
    where = Path(path).resolve()
    paths = sysconfig.get_paths()
    installed = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    if any(where.is_relative_to(Path(p).resolve()) for p in installed):
        return None
    return str(where)


def as_specs(
    reward_funcs: Sequence[str | RewardFunc] | None,
    tools: Sequence[Tool] | None,
    environment_factory: Factories | None,
) -> dict[str, str]:
    """The config's fields that name TRL's objects given from Python, as importable specs.

    So that the run's config.json names them and ``--resume`` or ``evaluate`` from the command
    line loads them again: ``task`` (the reward functions), ``tools`` and
    ``environment_factory`` (``name=spec,...`` for a dict), each where every object in it has
    a spec (:func:`_spec`); else the field is left as given.
    """
    out: dict[str, str] = {}
    given: dict[str, Sequence[Any] | None] = {"task": reward_funcs, "tools": tools}
    for name, objects in given.items():
        specs = [_spec(f) for f in objects or ()]
        if specs and all(s is not None for s in specs):
            out[name] = ",".join(s for s in specs if s is not None)
        elif specs:  # named as given: a resume from the command line refuses them in one line
            out[name] = FROM_PYTHON + ",".join(_name_of(f) for f in objects or ())
    if isinstance(environment_factory, Mapping):
        named = {k: _spec(f) for k, f in environment_factory.items()}
        if named and all(s is not None for s in named.values()):
            out["environment_factory"] = ",".join(f"{k}={s}" for k, s in named.items())
        elif named:
            out["environment_factory"] = FROM_PYTHON + ",".join(map(str, environment_factory))
    elif environment_factory is not None:
        spec = _spec(environment_factory)
        out["environment_factory"] = spec or FROM_PYTHON + _name_of(environment_factory)
    return out


FROM_PYTHON = "python:"
"""How config.json names TRL's objects given from Python that have no importable spec (a
lambda, a function defined in a function, a script's own): ``python:<lambda>``. A run that
names one is continued from Python, the objects given again; the command line refuses it."""


def _name_of(obj: object) -> str:
    return str(getattr(obj, "__qualname__", None) or type(obj).__name__)


def refuse_unnamed(option: str, value: str | None, keyword: str) -> None:
    """Refuse a field naming objects given from Python without a spec (:data:`FROM_PYTHON`).

    Raises:
        ValueError: naming them and how to continue the run.
    """
    if value is not None and value.startswith(FROM_PYTHON):
        raise ValueError(
            f"this run's {option} ({value.removeprefix(FROM_PYTHON)}) came from Python without "
            "an importable name (a lambda, a function defined in a function, a script's own): "
            f"continue it from Python, giving them again (finetune(config, resume=RUN, "
            f"{keyword}=...)), or define them in a module"
        )


__all__ = ["FROM_PYTHON", "as_specs", "refuse_unnamed"]
