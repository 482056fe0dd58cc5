"""The suite's own structure: what collection imports, and the helpers it leaves to their tests."""

from __future__ import annotations

import conftest


def test_no_helper_module_holds_a_doctest():
    """``conftest.pytest_ignore_collect`` keeps the helper modules out of ``--doctest-modules``:
    a doctest written in one would never run, so there is none."""
    helpers = conftest.helper_modules()
    assert any(p.name == "ranks_worker.py" for p in helpers)
    assert all(not p.name.startswith("test_") for p in helpers)
    assert [p.name for p in helpers if ">>>" in p.read_text(encoding="utf-8")] == []


def test_collection_skips_the_helpers_and_keeps_the_tests():
    """The hook's answer: True (not collected) for each helper, None (pytest decides) for a
    test module and for a directory of helpers (its modules are answered one by one)."""
    for path in conftest.helper_modules():
        assert conftest.pytest_ignore_collect(path, None) is True, path
    assert conftest.pytest_ignore_collect(conftest.TESTS / "test_suite.py", None) is None
    assert conftest.pytest_ignore_collect(conftest.TESTS / "lm_user", None) is None
