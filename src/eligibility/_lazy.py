"""A package's public names imported on first use (PEP 562), from one table of where they live.

``import eligibility`` is every command line's first import, and ``eligibility.check`` the
check's: their names are bound when first read, so that a command imports only what it runs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def names_on_first_use(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: name ↦ ``package.<where[name]>.<name>``, bound there.

    Args:
        package: the package's ``__name__``.
        where: each public name → the submodule (relative to ``package``) that defines it.
    """

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        setattr(sys.modules[package], name, value)  # read once: the next lookup finds it bound
        return value

    return __getattr__
