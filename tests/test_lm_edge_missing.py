"""A Hugging Face library that is not installed: a ValueError naming the option, what needs
the library, and how to install it (one helper, ``lm.edge.hf.hugging_face``, for both)."""

from __future__ import annotations

import sys

import pytest

from eligibility.lm.edge import data, hf


@pytest.mark.parametrize(
    ("library", "call", "text"),
    [
        (
            "datasets",
            lambda: data._datasets("--prompts", "p.parquet"),
            "--prompts p.parquet: reading it needs the datasets library; install it with "
            "pip install 'eligibility[lm]'",
        ),
        (
            "transformers",
            lambda: hf._transformers("--tokenizer", "tok"),
            "--tokenizer tok: a Hugging Face tokenizer needs transformers; install it with "
            "pip install 'eligibility[lm]'",
        ),
    ],
)
def test_a_missing_library_is_a_value_error_saying_how_to_install_it(
    monkeypatch, library, call, text
):
    monkeypatch.setitem(sys.modules, library, None)  # import of it raises ModuleNotFoundError
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value) == text
