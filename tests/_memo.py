"""One computation shared by the tests of a module: a pure function of arrays, memoised by value.

The check's statistical tests each run the engine on the same problem, N and seed with another
function to check: the engine's reference estimates on those draws are the same for every one of
them (a pure function of the problem's arrays, the draws and the estimators), and they are most
of a fast check's time. :func:`shared` replaces such a function, for a module's tests, by one that
computes it once per distinct argument *value* and hands back a copy; what the tests assert is
unchanged (the same numbers reach the engine), only how often they are computed.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np


def digest(*parts: Any) -> str:
    """A key for ``parts`` by value: arrays by dtype, shape and bytes, the rest by ``repr``."""
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        if hasattr(part, "numpy") and not isinstance(part, np.ndarray):  # a torch tensor
            part = part.detach().cpu().numpy()
        if isinstance(part, np.ndarray):
            h.update(f"{part.dtype}{part.shape}".encode())
            h.update(np.ascontiguousarray(part).tobytes())
        else:
            h.update(repr(part).encode())
    return h.hexdigest()


def shared(
    monkeypatch: Any, owner: Any, name: str, key: Callable[..., str]
) -> Iterator[dict[str, Any]]:
    """``owner.name`` memoised under ``key(*args, **kwargs)`` while the generator is open.

    Yields the memo (key → result), so a test can assert that it was shared. A result is
    copied on the way out (``copy.deepcopy``), so no caller can change another's.
    """
    original = getattr(owner, name)
    memo: dict[str, Any] = {}

    def once(*args: Any, **kwargs: Any) -> Any:
        k = key(*args, **kwargs)
        if k not in memo:
            memo[k] = original(*args, **kwargs)
        return copy.deepcopy(memo[k])

    monkeypatch.setattr(owner, name, once)
    yield memo
