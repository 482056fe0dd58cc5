"""``finetune`` on what a TRL user brings: their tokenizer, data files and reward functions."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from eligibility.lm import data, hf
from eligibility.lm.rewards import Rewards, as_reward, combine, fill_unscorable

pytest.importorskip("datasets")

RECORDS = [
    {"prompt": "copy a", "answer": "a"},
    {"prompt": [{"role": "user", "content": "copy b"}], "answer": "b"},
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from lm_user import hf_kit

    return hf_kit.model_dir(tmp_path_factory.mktemp("hf") / "model")


@pytest.fixture(autouse=True)
def _user_modules(monkeypatch):
    import pathlib

    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).parent))


# -- data: every format through `datasets`, against the records written -------------------


def _write(tmp_path, fmt):
    import datasets

    rows = [{"prompt": "copy a", "answer": "a"}, {"prompt": "copy b c", "answer": "b c"}]
    path = tmp_path / f"p.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "json":
        path.write_text(json.dumps(rows))
    elif fmt == "csv":
        path.write_text("prompt,answer\ncopy a,a\ncopy b c,b c\n")
    elif fmt == "parquet":
        datasets.Dataset.from_list(rows).to_parquet(str(path))
    else:
        path = tmp_path / "saved"
        datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return rows, str(path)


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet", "disk"])
def test_every_format_reads_the_records_written(tmp_path, fmt):
    rows, path = _write(tmp_path, fmt)
    assert data.load_records(path) == rows


def test_conversational_prompts_and_a_fingerprint_of_the_contents(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS[1:]))
    assert data.load_records(str(path))[0]["prompt"] == RECORDS[1]["prompt"]
    before = data.fingerprint(str(path))
    path.write_text(path.read_text().replace("copy b", "copy c"))
    assert data.fingerprint(str(path)) != before


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"text": "a"}\n', "no 'prompt' column"),
        ('{"prompt": "a", "completion": "b"}\n', "'completion' collides"),
        ('{"prompt": "a", "completions": "b"}\n', "'completions' collides"),
        ('{"prompt": 3}\n', "record 1: the prompt must be text or"),
        ("{oops\n", "does not parse"),
    ],
)
def test_bad_data_is_one_line_naming_the_file(tmp_path, content, needle):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=needle) as info:
        data.load_records(str(path))
    assert str(path) in str(info.value) and "\n" not in str(info.value)


# -- the tokenizer: the user's ids, their chat template, decoding without specials -------------


def test_the_users_tokenizer_encodes_and_decodes(model_dir):
    from lm_user import hf_kit

    tok = hf.load_tokenizer(str(model_dir))
    ix = {w: i for i, w in enumerate((*hf_kit.SPECIALS, *hf_kit.WORDS))}
    assert hf.special_ids(tok) == (ix["<eos>"], ix["<bos>"], ix["<pad>"])
    assert hf.encode_prompt(tok, "copy a b") == [ix["<bos>"], ix["copy"], ix["a"], ix["b"]]
    chat = hf.encode_prompt(tok, RECORDS[1]["prompt"])
    words = "user : copy b assistant :".split()
    assert chat == [ix[w] for w in words]  # the template's tokens, generation prompt added
    assert hf.decode(tok, [ix["a"], ix["<pad>"], ix["b"]]) == "a b"  # specials skipped


def test_a_directory_without_a_tokenizer_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="holds no tokenizer that loads") as info:
        hf.load_tokenizer(str(tmp_path))
    assert "\n" not in str(info.value) and "--tokenizer DIR" in str(info.value)


# -- rewards: TRL's convention, its None, any real number -------------------------------------


def test_combine_is_trls_weighted_nansum():
    r = [[1.0, None, 0.5, None], [None, 2.0, 1.0, None]]
    got, scorable = combine(r, [1.0, 0.5])
    # TRL: (rewards_per_func * weights).nansum(dim=1), a row of None unscorable
    rpf = torch.tensor([[np.nan if x is None else x for x in col] for col in zip(*r, strict=True)])
    want = (rpf * torch.tensor([1.0, 0.5])).nansum(dim=1)
    assert got.tolist() == pytest.approx(want.tolist())
    assert scorable.tolist() == [True, True, True, False]


def test_an_unscorable_completion_counts_at_its_groups_scorable_mean():
    r = np.array([1.0, 0.0, 0.0, 0.0, 3.0, 0.0])
    ok = np.array([True, True, False, False, False, False])
    filled = fill_unscorable(r, ok, 3)
    assert filled.tolist() == [1.0, 0.0, 0.5, 0.0, 0.0, 0.0]
    # the group's mean is TRL's nanmean of its scorable rewards
    assert filled[:3].mean() == pytest.approx(np.nanmean([1.0, 0.0, np.nan]))


@pytest.mark.parametrize(
    "value", [True, 1, 0.5, np.float32(0.5), np.int64(1), torch.tensor(0.5), np.array([0.5])]
)
def test_any_real_number_is_a_reward(value):
    assert as_reward(value) == float(np.asarray(value.item() if hasattr(value, "item") else value))


@pytest.mark.parametrize("value", ["1", [1.0], torch.ones(2), float("nan"), 1j])
def test_a_non_number_is_refused(value):
    with pytest.raises(ValueError):
        as_reward(value)


def test_rewards_in_trls_convention_from_a_file_and_a_module(tmp_path, monkeypatch):
    (tmp_path / "mytask.py").write_text(
        "import numpy as np\n"
        "def exact(prompts, completions, completion_ids, answer, **kw):\n"
        "    return [np.float32(c == a) for c, a in zip(completions, answer)]\n"
        "def short(prompts, completions, completion_ids, **kw):\n"
        "    return [None if len(ids) > 1 else True for ids in completion_ids]\n"
    )
    monkeypatch.chdir(tmp_path)  # mytask:short imports from the current directory
    with Rewards(["mytask.py:exact", "mytask:short"], [1.0, 0.5], timeout=30) as rewards:
        r, ok = rewards(["p", "q"], ["a", "x"], [[5, 0], [6]], {"answer": ["a", "b"]})
    assert r.tolist() == [1.0, 0.5] and ok.tolist() == [True, True]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("return [1.0]", "returned 1 rewards for 2 completions"),
        ("return 1.0", "returned a float, not a list of 2"),
        ("return ['x', 1]", "returned a str ('x'), not a number for completion 0"),
        ("raise KeyError('no answer')", "raised KeyError: 'no answer'"),
        ("import sys; sys.exit(0)", "called sys.exit(0) instead of returning"),
        ("import os; os._exit(3)", "ended the process (exit status 3)"),
        ("import time; time.sleep(30)", "did not return within 0.5 s (--reward-timeout)"),
    ],
)
def test_a_misbehaving_reward_is_one_line_naming_it(tmp_path, body, needle):
    (tmp_path / "bad.py").write_text(f"def f(prompts, completions, **kw):\n    {body}\n")
    with Rewards([f"{tmp_path}/bad.py:f"], timeout=0.5) as rewards:
        with pytest.raises(ValueError) as info:
            rewards(["p", "q"], ["a", "b"], [[1], [2]], {})
    text = str(info.value)
    assert needle in text and "bad.py:f" in text and "\n" not in text, text


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ("def f(:\n", "does not import: SyntaxError"),
        ("raise RuntimeError('no grader')\n", "does not import: RuntimeError: no grader"),
        ("import os\nos._exit(0)\n", "ended the process (exit status 0)"),
        ("x = 1\n", "has no function 'f'"),
    ],
)
def test_a_reward_module_that_does_not_load_is_one_line(tmp_path, source, needle):
    (tmp_path / "broken.py").write_text(source)
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        Rewards([f"{tmp_path}/broken.py:f"], timeout=30).start()
