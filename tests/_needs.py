"""Skip a test module whose optional dependency is missing, without importing it."""

from __future__ import annotations

import importlib.util

import pytest


def installed(*names: str) -> None:
    """Skip the calling test module unless every module named can be found.

    ``pytest.importorskip`` imports the module while the module is collected, on every xdist
    worker, whichever runs its tests (peft: 1.8 s a worker); finding it imports nothing, and the
    tests import it where they use it.
    """
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (the lm extra)", allow_module_level=True)
