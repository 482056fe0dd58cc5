"""``finetune`` on what a TRL user brings: their tokenizer, data files and reward functions."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from _user_code_here import rewards_here
from eligibility.lm.edge import data, hf
from eligibility.lm.rewards import Rewards, as_reward, combine, fill_unscorable


@pytest.fixture(scope="module", autouse=True)
def _datasets_in_the_parent():
    """``datasets`` imported before the tests (the reward workers fork from this process), not
    at collection, where every worker would pay its 2 s for this module's tests alone."""
    pytest.importorskip("datasets")


RECORDS = [
    {"prompt": "copy a", "answer": "a"},
    {"prompt": [{"role": "user", "content": "copy b"}], "answer": "b"},
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A directory holding the user's tokenizer (the model is not needed here)."""
    from lm_user import hf_kit

    path = tmp_path_factory.mktemp("hf") / "model"
    hf_kit.tokenizer().save_pretrained(path)
    return path


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


@pytest.mark.parametrize("column", ["completion", "completions", "trainer_state"])
def test_a_data_file_with_a_column_of_the_reward_call_is_one_line_naming_it(tmp_path, column):
    """Refused where the run reads it (``lm.reserved.refuse_columns``), naming the file."""
    from eligibility.lm import FinetuneConfig
    from eligibility.lm.usertask import make_task

    path = tmp_path / "bad.jsonl"
    path.write_text(f'{{"prompt": "a"}}\n{{"prompt": "b", "{column}": 1}}\n')
    with pytest.raises(ValueError) as info:
        make_task(FinetuneConfig(f"{tmp_path}/r.py:f", prompts=str(path)))
    text = str(info.value)
    assert f"--prompts {path}: a column named {column!r} collides" in text and "\n" not in text


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
        r, ok, *_ = rewards(["p", "q"], ["a", "x"], [[5, 0], [6]], {"answer": ["a", "b"]})
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
        ("import time; time.sleep(30)", "did not return within 0.2 s (--reward-timeout)"),
    ],
)
def test_a_misbehaving_reward_is_one_line_naming_it(tmp_path, body, needle):
    (tmp_path / "bad.py").write_text(f"def f(prompts, completions, **kw):\n    {body}\n")
    with Rewards([f"{tmp_path}/bad.py:f"], timeout=0.2) as rewards:
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


def test_a_reward_or_metric_module_that_does_not_load_names_its_kind(tmp_path):
    """91: the error says which was being loaded: the reward functions, or --eval-metric's."""
    from eligibility.lm.rewards import started

    (tmp_path / "ok.py").write_text("def f(prompts, completions, **kw):\n    return [0.0]\n")
    with pytest.raises(ValueError, match=r"^loading the reward functions: .*has no function 'g'"):
        started([f"{tmp_path}/ok.py:g"], None, None, timeout=30)
    with pytest.raises(ValueError, match=r"^loading the eval metric: .*has no function 'm'"):
        started([f"{tmp_path}/ok.py:f"], None, f"{tmp_path}/ok.py:m", timeout=30)


# -- fast representatives of tests/test_lm_user_cli.py's real-process cases --------------------

FACTORIES = """
def needs(n):
    return None

def other():
    return "a model"
"""


@pytest.mark.parametrize(
    ("fn", "needle"), [("needs", "missing 1 required positional"), ("other", "returned str")]
)
def test_a_bad_factory_is_one_line_naming_it(tmp_path, fn, needle):
    from eligibility.lm.edge.loaders import build_model

    (tmp_path / "factories.py").write_text(FACTORIES)
    spec = f"{tmp_path}/factories.py:{fn}"
    with pytest.raises(ValueError, match=needle) as info:
        build_model(spec, 8, 0, d_model=8, n_layer=1, n_head=1, max_positions=8)
    assert spec in str(info.value) and "\n" not in str(info.value)


def test_a_model_with_fewer_positions_than_the_longest_sequence_is_refused_where_it_loads(
    tmp_path,
):
    """The positions are held against the longest prompt + T_max with the vocabulary."""
    from eligibility.lm.edge.loaders import load

    (tmp_path / "short.py").write_text(
        "def short():\n"
        "    from eligibility.lm.edge.model import TinyLM\n"
        "    return TinyLM(8, 8, 1, 1, 4)\n"
    )
    spec = f"{tmp_path}/short.py:short"
    sizes = dict(d_model=8, n_layer=1, n_head=1)
    assert load(spec, 8, 0, **sizes, max_positions=4)[1].positions == 4
    with pytest.raises(ValueError, match="has 4 positions, fewer than the 5") as info:
        load(spec, 8, 0, **sizes, max_positions=5)
    assert "--max-completion-length" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "size", [{"d_model": 10**9}, {"max_completion_length": 10**9}, {"prompts_per_batch": 10**7}]
)
def test_a_size_past_the_machine_is_refused_before_anything_is_allocated(size):
    from eligibility.lm import FinetuneConfig
    from eligibility.lm.build import task_and_model

    with pytest.raises(ValueError, match="GiB for one update, more than this machine's"):
        task_and_model(FinetuneConfig("repeat", **size))


def test_the_update_estimate_is_a_floor_of_what_torch_allocates():
    """The estimate's parameter count is the tiny model's own (a closed form against torch)."""
    from eligibility.lm.edge.model import TinyLM, tiny_params

    m = TinyLM(11, d_model=16, n_layer=3, n_head=2, max_positions=20)
    assert (
        tiny_params(11, 20, d_model=16, n_layer=3)
        == sum(p.numel() for p in m.parameters()) - 2 * 16
    )  # the final LayerNorm (weight and bias) is left out


def test_an_edited_data_file_is_named_against_the_saved_sha256(tmp_path):
    import dataclasses

    from eligibility.lm import FinetuneConfig
    from eligibility.lm.usertask import user_data

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "a"}\n')
    config, _ = user_data(FinetuneConfig("m:f", prompts=str(prompts)), None, None, None, None)
    assert config.data_sha256 == {str(prompts): data.fingerprint(str(prompts))}
    assert user_data(config, "run", None, None, None)[0] == config  # unchanged: resumes
    prompts.write_text('{"prompt": "b"}\n')
    with pytest.raises(ValueError, match=f"{prompts} changed since the run began"):
        user_data(config, "run", None, None, None)
    fresh = dataclasses.replace(config, data_sha256={})
    assert user_data(fresh, None, None, None, None)[0].data_sha256 != config.data_sha256


@pytest.mark.slow
def test_a_resume_on_an_edited_prompt_file_is_refused_by_name(tmp_path):
    from eligibility.lm import FinetuneConfig, finetune

    (tmp_path / "r.py").write_text(
        "def short(prompts, completions, **kw):\n    return [float(not c) for c in completions]\n"
    )
    prompts = tmp_path / "p.txt"
    prompts.write_text("ab\nba\n")
    kw = dict(
        prompts=str(prompts),
        d_model=8,
        n_head=2,
        n_layer=1,
        group_size=2,
        max_updates=1,
        prompts_per_batch=1,
        eval_every=0,
        target_accuracy=None,
        progress=False,
        max_completion_length=3,
    )
    finetune(FinetuneConfig(f"{tmp_path}/r.py:short", out=str(tmp_path / "run"), **kw))
    prompts.write_text("ab\nbb\n")
    more = FinetuneConfig(f"{tmp_path}/r.py:short", **{**kw, "max_updates": 2})
    with pytest.raises(ValueError, match=f"{prompts} changed since the run began"):
        finetune(more, resume=tmp_path / "run")


def test_trl_option_names_are_aliases_with_a_note(capsys):
    from eligibility.cli import build_parser

    argv = [
        "finetune",
        "repeat",
        "--num_generations",
        "3",
        "--max-steps",
        "7",
        "--loss_type",
        "grpo",
        "--scale_rewards",
        "group",
        "--learning_rate",
        "0.01",
        "--save_steps",
        "5",
    ]
    args = build_parser().parse_args(argv)
    assert (args.group_size, args.max_updates, args.lr, args.checkpoint_every) == (3, 7, 0.01, 5)
    assert (args.aggregation, args.scale) == ("sequence-mean", "group-std")
    err = "".join(f"{line}\n" for line in args.trl_notes)  # said once the config is built
    assert "--loss_type grpo is --aggregation sequence-mean (" in err
    assert "--num_generations 3 is --group-size 3\n" in err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["finetune", "repeat", "--loss_type", "sapo"])
    assert "--loss_type 'sapo': TRL's values here are grpo, dr_grpo, dapo, bnpo" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        (["--learning_rate", "abc"], "--learning_rate: invalid float value: 'abc'"),
        (["--num_generations", "x"], "--num_generations: invalid int value: 'x'"),
        (["--max_steps", "-3"], "--max_steps: expected an integer ≥ 0, got -3"),
    ],
)
def test_a_bad_number_to_a_trl_name_is_one_line_and_exit_2(given, reason, capsys):
    """As our own option's bad number is (it was an ArgumentTypeError traceback)."""
    from eligibility.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["finetune", "repeat", *given])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and reason in err and err.count("\n") == 1


@pytest.mark.slow
def test_callables_and_in_memory_datasets_from_python():
    """TRL's Python form: reward callables (a closure here) and a datasets.Dataset, no files."""
    import datasets

    from eligibility.lm import FinetuneConfig, finetune

    train = datasets.Dataset.from_list([{"prompt": "ab", "answer": ""}, {"prompt": "ba"}])
    target = ""

    def empty(prompts, completions, completion_ids, answer, **kw):
        return [np.float32(c == target) for c in completions]

    config = FinetuneConfig(
        "empty",
        d_model=8,
        n_head=2,
        n_layer=1,
        group_size=4,
        prompts_per_batch=2,
        max_updates=15,
        lr=3e-2,
        max_completion_length=4,
        eval_every=5,
        target_accuracy=None,
        progress=False,
    )
    held = [{"prompt": "aa", "answer": ""}]
    r = finetune(config, reward_funcs=[empty], train_dataset=train, eval_dataset=held)
    assert r.history[0]["mean_reward"] < 0.5 and r.history[-1]["mean_reward"] > 0.9
    assert r.final_eval_return == 1.0


def test_an_eval_metric_and_an_eval_limit_on_the_held_out_records(tmp_path):
    """--eval-metric's values are the accuracy (None left out); --eval-limit keeps the first N.
    Both functions called here (``tests/_user_code_here.py``): the values, not the worker."""
    from eligibility.lm import FinetuneConfig
    from eligibility.lm.usertask import make_task

    (tmp_path / "m.py").write_text(
        "def zero(prompts, completions, **kw):\n    return [0.0] * len(completions)\n"
        "def half(prompts, completions, **kw):\n"
        "    return [None if p == 'c' else len(c) == 1 for p, c in zip(prompts, completions)]\n"
    )
    config = FinetuneConfig(
        f"{tmp_path}/m.py:zero", eval_metric=f"{tmp_path}/m.py:half", eval_limit=3
    )
    train = [{"prompt": "ab"}]
    held = [{"prompt": p} for p in ("a", "b", "c", "d")]
    with rewards_here():
        task = make_task(config, records=(train, held))
    try:
        ev = task.evaluation
        assert len(ev.prompts) == 3  # the first 3 of 4
        completions, ended = [[2], [2, 2], [2]], [True] * 3
        r, *_ = ev.rewards([0, 1, 2], completions, ended)
        values = ev.correct([0, 1, 2], completions, ended, r)
        assert r.tolist() == [0.0, 0.0, 0.0]
        assert values[:2].tolist() == [1.0, 0.0] and np.isnan(values[2])
    finally:
        task.close()


def test_a_reward_function_that_cannot_take_the_call_is_never_called(tmp_path):
    """75.2: a function whose signature cannot take TRL's call (a column given by name,
    without **kwargs) is refused at start in one line naming what it lacks, never called."""
    from eligibility.lm import FinetuneConfig
    from eligibility.lm.usertask import make_task

    calls = tmp_path / "calls"
    (tmp_path / "m.py").write_text(
        f"def narrow(prompts, completions, completion_ids):\n"
        f"    open({str(calls)!r}, 'a').write('narrow\\n')\n"
        f"    return [0.0] * len(completions)\n"
    )
    records = ([{"prompt": "ab", "answer": "a"}], None)
    with pytest.raises(ValueError) as info:
        make_task(FinetuneConfig(f"{tmp_path}/m.py:narrow"), records=records)
    text = str(info.value)
    assert "narrow" in text and "answer" in text and "**kwargs" in text and "\n" not in text
    assert not calls.exists()


def test_an_error_in_a_del_prints_no_traceback(tmp_path, capfd, monkeypatch):
    """72: an object of the user's whose __del__ raises, in their reward function, prints no
    "Exception ignored ... Traceback" (the worker's stderr holds the user's prints alone).

    In process: the worker forks from here and writes to this process's file descriptors,
    which ``capfd`` reads. It inherits Python's own hook for such errors (which prints them)
    and ``sys.stdout`` and ``sys.stderr`` on descriptors 1 and 2, not pytest's (which would
    keep the errors quiet and the prints off the descriptors, whatever the worker did)."""
    (tmp_path / "leaky.py").write_text(
        "class Leaky:\n    def __del__(self):\n        raise RuntimeError('in __del__')\n"
        "def f(prompts, completions, **kw):\n    Leaky()\n    print('said', flush=True)\n"
        "    return [1.0] * len(completions)\n"
    )
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)
    monkeypatch.setattr(sys, "stdout", sys.__stdout__)
    monkeypatch.setattr(sys, "stderr", sys.__stderr__)
    with Rewards([str(tmp_path / "leaky.py") + ":f"], timeout=30) as rewards:
        assert rewards(["p"], ["a"], [[1]], {})[0].tolist() == [1.0]
    said = capfd.readouterr()
    assert said.out == "" and "said" in said.err
    assert "Exception ignored" not in said.err and "Traceback" not in said.err, said.err


def test_a_saved_run_of_python_functions_no_module_holds_says_what_to_pass():
    """75.6: a run made from Python with a function no module holds keeps its name in
    config.json; evaluate or --resume from the command line refuses it in one line saying what
    to pass (the functions again, from Python) rather than only "unknown task"."""
    from eligibility.lm import FinetuneConfig
    from eligibility.lm.usertask import make_task

    with pytest.raises(ValueError) as info:
        make_task(FinetuneConfig("fmt"))
    text = str(info.value)
    assert text.startswith("unknown task 'fmt'") and "reward_funcs=[...]" in text
    assert "resume=DIR" in text and "\n" not in text


def test_greedy_evaluation_in_bounded_batches_equals_one_batch():
    """The held-out set is evaluated chunk by chunk; the result is the one-batch result."""
    from eligibility.lm.edge.model import TinyLM
    from eligibility.lm.evaluation import evaluate_policy
    from eligibility.lm.tasks import make_task as builtin

    torch.manual_seed(0)
    task = builtin("sum")  # 6 prompts
    model = TinyLM(task.vocab_size, d_model=8, n_layer=1, n_head=2, max_positions=12).eval()
    whole = evaluate_policy(model, task, 4, len(task.prompts))
    assert evaluate_policy(model, task, 4, 4) == whole == evaluate_policy(model, task, 4, 1)


def test_paths_are_stored_absolute(tmp_path, monkeypatch):
    """A relative --prompts, --eval-prompts, --model DIR or FILE.py reward resumes from anywhere."""
    from eligibility.lm import FinetuneConfig

    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    config = FinetuneConfig(
        "r.py:f,pkg.mod:g", prompts="p.jsonl", eval_prompts="../h.jsonl", model="m", out="run"
    )
    assert config.task == f"{tmp_path}/r.py:f,pkg.mod:g"
    assert (config.prompts, config.eval_prompts) == (
        str(tmp_path / "p.jsonl"),
        str(tmp_path.parent / "h.jsonl"),
    )
    assert (config.model, config.out) == (str(tmp_path / "m"), str(tmp_path / "run"))
    assert FinetuneConfig("repeat").model == "tiny"


def test_an_exported_directory_follows_the_umask(tmp_path):
    """Bug: exports were mode 0700 with weights 0600 (mkdtemp's and temp files' modes)."""
    import os
    import stat

    from lm_user import hf_kit

    tok = hf_kit.tokenizer()
    old = os.umask(0o022)
    try:
        out = hf.save_pretrained(hf_kit.model(len(tok)), tok, tmp_path / "exported")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [out, *out.rglob("*")]}
    assert modes.pop("exported") == 0o755 and "model.safetensors" in modes
    assert set(modes.values()) == {0o644}, modes


@pytest.mark.parametrize(
    ("task", "given", "kind"),
    [
        ("reverse", {}, "built-in"),  # a built-in name, whatever else is given
        ("reverse", {"records": ([{"prompt": "a"}], None)}, "built-in"),
        ("mod:Env-v0", {}, "environment"),  # no data, no tools: probed as a Gymnasium id
        ("m.py:fn", {"records": ([{"prompt": "a"}], None)}, "prompts"),
        ("m.py:fn", {"trl_tools": (["tool"], None)}, "episodes"),
        ("anything", {"trl_tools": (None, "m:Env")}, "episodes"),  # tools: a name is theirs
        ("reverse", {"reward_funcs": [len]}, "environment"),  # functions from Python, no data
    ],
)
def test_the_kind_of_task_is_decided_once_from_what_was_given(task, given, kind):
    """``usertask.kind_of`` names the row of KINDS that makes the task; each row a maker."""
    from eligibility.lm import FinetuneConfig
    from eligibility.lm.usertask import KINDS, Given, kind_of

    assert kind_of(FinetuneConfig(task), Given(**given)) == kind
    assert set(KINDS) == {"built-in", "environment", "episodes", "prompts"}


def test_an_unknown_task_name_is_refused_before_any_kind_is_made():
    """A name neither built in nor a module's, without tools: one line naming the choices."""
    from eligibility.lm import FinetuneConfig
    from eligibility.lm.usertask import Given, kind_of

    with pytest.raises(ValueError, match=r"unknown task 'revers'.*choose one of"):
        kind_of(FinetuneConfig("revers"), Given())
