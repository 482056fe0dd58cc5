"""``eligibility finetune`` as a TRL user runs it: their model directory, files and rewards; the
policy back as a Hugging Face directory; every hostile input in a real process.

Each case here starts Python with torch and transformers (seconds on 2 cores), so they run in
``make nightly`` (slow); their fast representatives are in ``tests/test_lm_user.py``: the same
worker, data reader, factory check and size refusal, called in process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from eligibility.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _datasets_in_the_parent():
    """``datasets`` imported before the tests (the reward workers fork from this process), not
    at collection, where every worker of ``make test`` would pay its 2 s for slow tests."""
    pytest.importorskip("datasets")


SRC = str(Path(__file__).resolve().parents[1] / "src")
TRAIN = [("copy a", "a"), ("copy b", "b"), ("copy a b", "a b"), ("copy c d", "c d")]
REWARD = """
def exact(prompts, completions, completion_ids, answer, **kw):
    text = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [float(t == a) for t, a in zip(text, answer)]
"""


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """A model directory, training and held-out JSONL files and a reward module, in one place."""
    import sys as _sys

    _sys.path.insert(0, str(Path(__file__).parent))
    from lm_user import hf_kit

    root = tmp_path_factory.mktemp("kit")
    hf_kit.model_dir(root / "model")
    (root / "train.jsonl").write_text(
        "".join(json.dumps({"prompt": p, "answer": a}) + "\n" for p, a in TRAIN)
    )
    held = {"prompt": [{"role": "user", "content": "copy d"}], "answer": "d"}
    (root / "held.jsonl").write_text(json.dumps(held) + "\n")
    (root / "rewards.py").write_text(textwrap.dedent(REWARD))
    return root


def _args(kit: Path, *extra: str) -> list[str]:
    return [
        "finetune",
        f"{kit}/rewards.py:exact",
        "--model",
        str(kit / "model"),
        "--prompts",
        str(kit / "train.jsonl"),
        "--eval-prompts",
        str(kit / "held.jsonl"),
        "--max-completion-length",
        "4",
        "--group-size",
        "2",
        "--prompts-per-batch",
        "2",
        "--eval-every",
        "1",
        "--no-progress",
        *extra,
    ]


def test_a_trl_users_model_files_and_reward_run_and_come_back(kit, tmp_path, capsys):
    """The run trains on the user's ids and hands back a directory transformers loads, equal to
    the last checkpoint; export writes the same; an edited data file is refused on resume."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from eligibility.lm import runs

    out = tmp_path / "run"
    # TRL's --bf16 false: float32, the same run on every machine (a pretrained model's auto
    # is bf16 where the hardware has it)
    argv = [*_args(kit, "--max_steps", "2", "--bf16", "false", "--target-accuracy", "none")]
    argv += ["--out", str(out)]
    assert main([*argv, "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["updates"] == 2
    saved = json.loads((out / "config.json").read_text())
    assert saved["prompts"] == str(kit / "train.jsonl") and len(saved["data_sha256"]) == 2
    assert saved["dtype"] == "float32"
    rows = (out / "metrics.csv").read_text().splitlines()
    assert "eval_reward" in rows[0].split(",") and len(rows) == 3

    back = AutoModelForCausalLM.from_pretrained(out / "model")
    _, model, task = runs.load(out)
    task.close()
    for k, v in model.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k
    assert AutoTokenizer.from_pretrained(out / "model")("copy a")["input_ids"] == list(
        task.prompts[0]
    )
    assert task.vocab_size == back.config.vocab_size  # the whole vocabulary, no slice

    assert main(["export", str(out), str(tmp_path / "exported")]) == 0
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "exported")
    assert all(torch.equal(exported.state_dict()[k], v) for k, v in model.state_dict().items())
    capsys.readouterr()

    edited = tmp_path / "train.jsonl"
    edited.write_text((kit / "train.jsonl").read_text())
    saved["prompts"] = str(edited)
    saved["data_sha256"] = {str(edited): saved["data_sha256"][str(kit / "train.jsonl")]}
    saved["data_sha256"][str(kit / "held.jsonl")] = "0" * 64  # as if held.jsonl was edited
    (out / "config.json").write_text(json.dumps(saved))
    assert main(["finetune", "--resume", str(out), "--max-updates", "3", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{kit / 'held.jsonl'} changed since the run began" in err and err.count("\n") == 1


def test_the_policy_is_over_the_models_whole_vocabulary(kit, tmp_path):
    """A model with more logits than its tokenizer has tokens (padded embeddings): V is the
    model's, the prompts are the tokenizer's ids, EOS is the tokenizer's."""
    from eligibility.lm import FinetuneConfig
    from eligibility.lm.build import task_and_model
    from lm_user import hf_kit

    tok = hf_kit.tokenizer()
    hf_kit.model(len(tok) + 4).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    config = FinetuneConfig(
        f"{kit}/rewards.py:exact", prompts=str(kit / "train.jsonl"), model=str(tmp_path / "m")
    )
    task, _model, _ = task_and_model(config)
    task.close()
    assert task.vocab_size == len(tok) + 4 and task.eos_id == tok.eos_token_id
    assert task.prompts[0] == tuple(tok("copy a")["input_ids"])


# -- hostile inputs, each in a real process -----------------------------------------------------

HOSTILE_REWARD = """
import os, signal, sys, time
calls = 0

def f(prompts, completions, **kw):
    global calls
    calls += 1
    if calls >= 4:  # the check before the run, update 1 and its evaluation (checkpointed)
        {body}
    return [0.0] * len(completions)
"""


def _hostile(kit: Path, tmp: Path, body: str) -> list[str]:
    (tmp / "hostile.py").write_text(textwrap.dedent(HOSTILE_REWARD).format(body=body))
    args = _args(kit, "--checkpoint-every", "1", "--max-updates", "4", "--reward-timeout", "2")
    args[1] = f"{tmp}/hostile.py:f"
    return args


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "eligibility.cli", *argv, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
        env=env,
    )


MID_RUN = {
    "sys.exit(0)": ("sys.exit(0)", "called sys.exit(0) instead of returning"),
    "sys.exit(3)": ("sys.exit(3)", "called sys.exit(3) instead of returning"),
    "os._exit": ("os._exit(0)", "ended the process (exit status 0)"),
    "a signal": ("os.kill(os.getpid(), signal.SIGTERM)", "was killed by SIGTERM"),
    "sleeps": ("time.sleep(60)", "did not return within 2 s (--reward-timeout)"),
}


@pytest.mark.parametrize("case", list(MID_RUN))
def test_a_reward_that_leaves_mid_run_is_one_line_exit_2_and_a_whole_checkpoint(
    kit, tmp_path, case
):
    from safetensors import safe_open

    body, needle = MID_RUN[case]
    out = tmp_path / "run"
    proc = _run([*_hostile(kit, tmp_path, body), "--out", str(out)], tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout)
    err = [x for x in proc.stderr.strip().splitlines() if ": note: " not in x]  # the start's
    assert len(err) == 1 and needle in err[0] and "hostile.py:f" in err[0], proc.stderr
    with safe_open(str(out / "checkpoint.safetensors"), framework="numpy") as f:
        assert json.loads(f.metadata()["counters"])["updates"] == 1


def test_prints_stay_off_stdout_and_a_forked_child_dies_with_the_run(kit, tmp_path):
    body = (
        "print('debugging output')\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(120)\n"
        "            os._exit(0)\n"
        "        return [0.0] * len(completions)"
    )
    proc = _run([*_hostile(kit, tmp_path, body), "--out", str(tmp_path / "run")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["updates"] == 4  # stdout is the result alone
    assert "debugging output" in proc.stderr


def _bad_model_dirs(kit: Path, tmp: Path) -> dict[str, Path]:
    import shutil

    from transformers import BertConfig, BertModel

    dirs = {}
    for name in ("truncated", "corrupt"):
        d = tmp / name
        shutil.copytree(kit / "model", d)
        blob = (d / "model.safetensors").read_bytes()
        (d / "model.safetensors").write_bytes(
            blob[: len(blob) // 2] if name == "truncated" else b"\x07" * 64 + blob[64:]
        )
        dirs[name] = d
    BertModel(
        BertConfig(
            hidden_size=8,
            num_hidden_layers=1,
            num_attention_heads=1,
            intermediate_size=8,
            vocab_size=16,
        )
    ).save_pretrained(tmp / "bert")
    shutil.copy(kit / "model" / "tokenizer.json", tmp / "bert")
    shutil.copy(kit / "model" / "tokenizer_config.json", tmp / "bert")
    shutil.copy(kit / "model" / "chat_template.jinja", tmp / "bert")
    dirs["not causal"] = tmp / "bert"
    return dirs


FACTORIES = """
def raises():
    raise RuntimeError("no weights")

def needs(n):
    return None

def other():
    return "a model"
"""
SIZES = {
    "--max-completion-length 1e9": ["--model", "tiny", "--max-completion-length", "1000000000"],
    "--prompts-per-batch 1e7": ["--model", "tiny", "--prompts-per-batch", "10000000"],
    "--d-model 1e9": ["--model", "tiny", "--d-model", "1000000000"],
}


def _before_the_run(kit: Path, tmp: Path) -> dict[str, tuple[list[str], str]]:
    """Case → (argv, needle): each refused in one line, exit 2, no run directory."""
    (tmp / "factories.py").write_text(textwrap.dedent(FACTORIES))
    (tmp / "syntax.py").write_text("def f(:\n")
    (tmp / "raising.py").write_text("raise ImportError('grader missing')\n")
    (tmp / "long.jsonl").write_text(json.dumps({"prompt": "a" * 40_000, "answer": "a"}) + "\n")
    (tmp / "clash.jsonl").write_text(json.dumps({"prompt": "copy a", "completion": "a"}) + "\n")
    cases: dict[str, tuple[list[str], str]] = {}
    for name, d in _bad_model_dirs(kit, tmp).items():
        needle = "does not run as a causal LM" if name == "not causal" else "not a loadable"
        cases[f"{name} model"] = (_args(kit, "--model", str(d)), needle)
    for fn, needle in (
        ("raises", "RuntimeError: no weights"),
        ("needs", "missing 1 required"),
        ("other", "returned NoneType" if False else "returned str"),
    ):
        args = _args(kit, "--model", f"{tmp}/factories.py:{fn}", "--tokenizer", str(kit / "model"))
        cases[f"factory {fn}"] = (args, needle)
    cases["too few positions"] = (
        _args(kit, "--max-completion-length", "200"),
        "the model has 64 positions",
    )
    for mod, needle in (("syntax", "SyntaxError"), ("raising", "ImportError: grader missing")):
        args = _args(kit)
        args[1] = f"{tmp}/{mod}.py:f"
        cases[f"reward module {mod}"] = (args, needle)
    for name, extra in SIZES.items():
        args = _args(kit)
        i = args.index("--model")
        del args[i : i + 2]
        args[args.index("--eval-prompts") : args.index("--eval-prompts") + 2] = []
        cases[name] = ([*args, *extra], "GiB for one update")
    long_prompt = _args(kit, "--model", "tiny")
    long_prompt[long_prompt.index("--prompts") + 1] = str(tmp / "long.jsonl")
    long_prompt[long_prompt.index("--eval-prompts") : long_prompt.index("--eval-prompts") + 2] = []
    cases["a 40 000-character prompt"] = (long_prompt, "GiB for one update")
    clash = _args(kit)
    clash[clash.index("--prompts") + 1] = str(tmp / "clash.jsonl")
    cases["a column named completion"] = (clash, "'completion' collides")
    return cases


CASES = [
    "truncated model",
    "corrupt model",
    "not causal model",
    "factory raises",
    "factory needs",
    "factory other",
    "too few positions",
    "reward module syntax",
    "reward module raising",
    *SIZES,
    "a 40 000-character prompt",
    "a column named completion",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_exit_2_before_the_run_directory(kit, tmp_path, case):
    argv, needle = _before_the_run(kit, tmp_path)[case]
    out = tmp_path / "run"
    proc = _run([*argv, "--out", str(out)], tmp_path)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stderr)
    assert len(err) == 1 and needle in err[0] and "Traceback" not in proc.stderr, proc.stderr
    assert not out.exists()
