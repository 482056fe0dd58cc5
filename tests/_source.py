"""The package's source as syntax trees, parsed once a worker for every test that reads it.

The layer tests (``test_runs``, ``test_layers``, ``test_trainers``), the registry's
(``test_explain_registry``) and the command line's (``test_cli_convention``) each read the
modules' imports and names from their trees: parsing the 250-odd files is most of each such
test's time. A tree is read, never changed, by the tests that share it.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.cache
def parsed(path: Path) -> ast.Module:
    """The syntax tree of the file at ``path`` (UTF-8)."""
    return ast.parse(Path(path).read_text(encoding="utf-8"))


@functools.cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of :func:`parsed`'s tree, in ``ast.walk``'s order."""
    return tuple(ast.walk(parsed(path)))
