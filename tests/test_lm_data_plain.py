"""A plain JSONL file read without ``datasets``: the records ``datasets`` gives, or ``datasets``.

Truth: ``datasets.load_dataset("json", ...)`` itself on each file. Where every column keeps one
kind that Arrow holds unchanged the objects as parsed are returned (asserted equal, and equal in
their values' types); anything Arrow would change (a date read as a timestamp, integers widened,
a missing column filled) is read by ``datasets``, as before.
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile

import pytest

# datasets is imported where a test reads by it, not at collection (2 s on every worker)
if importlib.util.find_spec("datasets") is None:
    pytest.skip("needs datasets (the lm extra)", allow_module_level=True)

from eligibility.lm.edge import data

MSG = [{"role": "user", "content": "What is 1 + 2?"}]
PLAIN = {
    "the kit's": [
        {"prompt": MSG, "answer": "3", "task": "add"},
        {"prompt": [{"role": "user", "content": "Hi"}], "answer": "x", "task": "add"},
    ],
    "text and numbers": [
        {"prompt": "a", "n": 3, "x": 1.5, "ok": True},
        {"prompt": "b", "n": -4, "x": 2.0, "ok": False},
    ],
    "a system turn": [
        {"prompt": [{"role": "system", "content": "Be brief."}, *MSG], "answer": "3"},
    ],
}
CHANGED = {
    "a date": [{"prompt": "a", "answer": "2029-02-09"}, {"prompt": "b", "answer": "x"}],
    "a time in a message": [{"prompt": [{"role": "user", "content": "10:30 now"}]}],
    "ints and floats": [{"prompt": "a", "n": 1}, {"prompt": "b", "n": 2.5}],
    "a missing column": [{"prompt": "a", "n": 1}, {"prompt": "b"}],
    "a null": [{"prompt": "a", "n": None}, {"prompt": "b", "n": 1}],
    "a nested object": [{"prompt": "a", "meta": {"k": 1}}],
    "columns reordered": [{"prompt": "a", "n": 1}, {"n": 2, "prompt": "b"}],
    "messages of other keys": [
        {"prompt": MSG},
        {"prompt": [{"role": "user", "content": "b", "name": "x"}]},
    ],
    "a list of strings": [{"prompt": "a", "answers": ["1", "2"]}],
}


def _file(tmp_path, records) -> str:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


def _by_datasets(path: str) -> list[dict]:
    import datasets

    with tempfile.TemporaryDirectory() as cache:
        ds = datasets.load_dataset("json", data_files=path, split="train", cache_dir=cache,
                                   keep_in_memory=True)  # fmt: skip
        return list(ds)


def _types(x):
    if isinstance(x, dict):
        return {k: _types(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_types(v) for v in x]
    return type(x)


@pytest.mark.parametrize("name", list(PLAIN))
def test_a_plain_file_is_read_without_datasets_as_datasets_reads_it(tmp_path, monkeypatch, name):
    path = _file(tmp_path, PLAIN[name])
    want = _by_datasets(path)

    def refused(*a):
        raise AssertionError("datasets was asked")

    monkeypatch.setattr(data, "_datasets", refused)
    got = data._read(path, "--prompts")
    assert got == want and _types(got) == _types(want)
    assert [list(r) for r in got] == [list(r) for r in want]  # the columns' order


@pytest.mark.parametrize("name", list(CHANGED))
def test_a_file_that_datasets_would_change_is_read_by_datasets(tmp_path, name):
    path = _file(tmp_path, CHANGED[name])
    assert not data._plain(CHANGED[name])
    want = _by_datasets(path)
    got = data._read(path, "--prompts")
    assert got == want and _types(got) == _types(want)


def test_a_reader_that_kills_its_process_is_one_error_naming_both_files(monkeypatch, tmp_path):
    """The files are read in a protected worker: a reader that ends its process (a crash in a
    file format's library) is a ValueError naming the files, and the run goes on to say it."""
    monkeypatch.setattr(data, "load_records", lambda *a: os._exit(3))  # the worker's reader
    train, held = tmp_path / "train.jsonl", tmp_path / "held.jsonl"
    with pytest.raises(ValueError, match="the reader ended the process") as err:
        data.read_files(str(train), str(held))
    assert f"--prompts {train} and --eval-prompts {held}" in str(err.value)
