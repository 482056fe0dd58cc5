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


def test_plain_files_are_read_here_giving_the_workers_records_and_errors(monkeypatch, tmp_path):
    """Text files and plain JSONL are read in this process, not in a forked worker (a fork a
    run saved): the records and the one-line errors are the worker's own, read by
    :class:`eligibility._isolate.Worker` here; JSONL that ``datasets`` would change, and any
    other format, still go to the worker."""
    from eligibility import _isolate

    train, held, bad = tmp_path / "train.txt", tmp_path / "held.jsonl", tmp_path / "bad.txt"
    train.write_text("copy a\n\n  \ncopy b c\n")
    held.write_text('{"prompt": "copy d", "answer": "d"}\n{"prompt": "copy a", "answer": "a"}\n')
    bad.write_bytes(b"copy \xff\n")

    def in_worker(*pairs):
        """Each (prompts, eval_prompts) pair's records read in one forked worker, in turn."""

        def read():
            return [
                (
                    data.load_records(prompts, "--prompts"),
                    None if evals is None else data.load_records(evals, "--eval-prompts"),
                )
                for prompts, evals in pairs
            ]

        worker = _isolate.Worker(lambda _: None, setup=read)
        try:
            return worker.start(timeout=60)
        finally:
            worker.close()

    want = in_worker((str(train), str(held)), (str(held), None))
    with pytest.raises(ValueError) as from_worker:
        in_worker((str(bad), None))
    forked = []
    monkeypatch.setattr(
        data, "Worker", lambda *a, **kw: forked.append(a) or _isolate.Worker(*a, **kw)
    )
    assert [data.read_files(str(train), str(held)), data.read_files(str(held), None)] == want
    assert want[0][0] == [{"prompt": "copy a"}, {"prompt": "copy b c"}]
    assert want[1][0][0] == {"prompt": "copy d", "answer": "d"}
    with pytest.raises(ValueError) as here:
        data.read_files(str(bad), None)
    assert str(here.value) == str(from_worker.value) and "is not UTF-8 text" in str(here.value)
    assert forked == []
    filled = tmp_path / "filled.jsonl"  # a missing column, which datasets fills with None
    filled.write_text('{"prompt": "copy d", "answer": "d"}\n{"prompt": "copy a"}\n')
    assert data.read_files(str(train), str(filled))[1][1] == {"prompt": "copy a", "answer": None}
    assert len(forked) == 1  # read by the worker
