"""The real-model kit's tasks and rewards (``bench/lm/lm_real_tasks.py``, ``lm_real_rewards.py``).

Pure Python: the held-out items are never in training, every row's answer scores 1 under its own
reward and metric, and the rewards' partial credit is what their docstring says. The models of the
kit are built by ``make kit`` (downloads), never here.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "lm"))

import lm_real_rewards as rewards
import lm_real_tasks as tasks

ALL = (*tasks.TUNING, *tasks.HELD_OUT)
KIT = Path(os.environ.get("ELIGIBILITY_KIT", Path.home() / ".cache" / "eligibility-kit"))
SMOL = KIT / "models" / "smollm2-135m-instruct"


@pytest.mark.parametrize("task", ALL)
def test_the_held_out_items_are_unseen_and_each_answer_scores_one(task):
    split = tasks.splits(task)
    train = {r["prompt"][0]["content"] for r in split["train"]}
    held = {r["prompt"][0]["content"] for r in split["heldout"]}
    assert held and train and not held & train
    assert len(held) == len(split["heldout"]) == min(tasks.N_HELD_OUT, len(tasks.items(task)) // 4)
    rows = split["train"] + split["heldout"]
    completions = [[{"role": "assistant", "content": r["answer"]}] for r in rows]
    columns = {"answer": [r["answer"] for r in rows], "task": [r["task"] for r in rows]}
    assert rewards.correct(completions, **columns) == [1.0] * len(rows)
    assert rewards.reward(completions, **columns) == [1.0] * len(rows)
    assert rewards.correct([""] * 2, answer=columns["answer"][:2], task=[task] * 2) == [0.0, 0.0]


@pytest.mark.parametrize(
    ("task", "text", "answer", "correct", "reward"),
    [
        ("add", "The answer is 85.", "85", 0.0, 0.5),
        ("add", "85.", "85", 1.0, 1.0),
        ("multiply", "84 or 48", "48", 0.0, 0.5),
        ("capital", "The capital is Lima.", "Lima", 0.0, 0.5),
        ("capital", "buenos aires", "Buenos Aires", 1.0, 1.0),
        ("antonym", "Cold", "cold", 1.0, 1.0),
        ("date", "2021-03-06", "2021-03-05", 0.0, 0.25),
        ("date", "March 5, 2021", "2021-03-05", 0.0, 0.0),
        (
            "json",
            'Sure: {"name": "Ana", "age": 34}',
            json.dumps({"name": "Ana", "age": 34}),
            0.0,
            0.75,
        ),
        ("json", '{"name": "Ana", "age": 35}', json.dumps({"name": "Ana", "age": 34}), 0.0, 0.25),
        ("json", '{"name": "Ana"', json.dumps({"name": "Ana", "age": 34}), 0.0, 0.0),
        ("plural", 'The plural of "mouse" is "mice".', 'The plural of "mouse" is "mice".', 1, 1),
        ("plural", "the plural of mouse is mice", 'The plural of "mouse" is "mice".', 1.0, 1.0),
        ("plural", 'The plural of "mouse" is "mouses".', 'The plural of "mouse" is "mice".', 0, 0),
        ("plural", "mice", 'The plural of "mouse" is "mice".', 0.0, 0.5),
        ("compare", "No.", "no", 1.0, 1.0),
        ("compare", "Yes", "no", 0.0, 0.0),
        ("compare", "No, 8 is not greater than 12.", "no", 0.0, 0.5),
    ],
)
def test_partial_credit(task, text, answer, correct, reward):
    assert rewards.score(task, text, answer) == (correct, reward)


def test_the_added_held_out_tasks_have_their_items_and_a_length_everywhere():
    """``plural`` and ``compare``: a few hundred items or more (64 held out), the same ``T_MAX``
    in every script that keeps one, and ``compare``'s answers both yes and no."""
    import lm_start_eval

    for task in ("plural", "compare"):
        assert task in tasks.HELD_OUT and len(tasks.items(task)) >= 200
        assert len(tasks.splits(task)["heldout"]) == tasks.N_HELD_OUT
    assert all(lm_start_eval.T_MAX[t] == tasks.T_MAX[t] for t in ALL)
    held = [r["answer"] for r in tasks.splits("compare")["heldout"]]
    assert 0.3 < held.count("yes") / len(held) < 0.7 and set(held) == {"yes", "no"}
    assert tasks.items("plural")[5] == (
        'What is the plural of "mouse"? Answer in the form: The plural of "mouse" is "...".',
        'The plural of "mouse" is "mice".',
    )


def test_the_race_reports_the_time_to_the_first_evaluation_past_the_target(capsys):
    """``lm_real_race.py report --target``: per (task, seed), the training seconds at the first
    evaluation at or past the target (a plain scan of each curve), TRL's over ours where both
    reach it, and "not reached" where a run never does."""
    import lm_real_race

    def run(system, seed, curve, user_s=None):
        row = {"system": system, "task": "json", "seed": seed, "curve": curve}
        return row | ({} if user_s is None else {"user_s": user_s})

    rows = [
        run("eligibility", 0, [[2, 0.5, 10.0], [4, 0.96, 20.0], [6, 0.94, 30.0]],
            [[2, 25.0], [4, 40.0], [6, 55.0]]),
        run("trl", 0, [[2, 0.95, 30.0], [4, 1.0, 60.0]], [[2, 100.0], [4, 150.0]]),
        run("eligibility", 1, [[2, 0.2, 10.0]]),
        run("trl", 1, [[2, 0.97, 25.0]]),
    ]  # fmt: skip
    lm_real_race.to_target(rows, 0.95)
    lines = capsys.readouterr().out.splitlines()
    assert "| json | 0 | eligibility | 4, 20 |  | 40 |  |" in lines
    assert "| json | 0 | trl | 2, 30 | 1.50 | 100 | 2.50 |" in lines  # as run: start-up, evals
    assert "| json | 1 | eligibility | not reached |  |  |  |" in lines
    assert "| json | 1 | trl | 2, 25 |  |  |  |" in lines


@pytest.mark.slow  # transformers imported, every task's answers tokenized: a few seconds
@pytest.mark.skipif(not SMOL.is_dir(), reason=f"no real-model kit at {KIT} (make kit)")
def test_every_answer_and_its_eos_fit_the_tasks_t_max():
    """Each task's longest answer, in the kit's SmolLM2 tokens, plus EOS, is at most ``T_MAX``."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(SMOL, local_files_only=True)
    for task in ALL:
        answers = sorted({a for _, a in tasks.items(task)})
        longest = max(len(ids) for ids in tok(answers, add_special_tokens=False)["input_ids"])
        assert longest + 1 <= tasks.T_MAX[task], (task, longest)


def test_the_tool_chats_call_a_tool_offered_with_its_arguments_and_are_seeded():
    """``lm_real_tools.chats``: each conversation's call names one of the tools offered, with
    the arguments its signature takes, and its result is the tool's own (the counter's: the
    target); the same seed, the same chats."""
    import inspect

    import lm_real_tools as tools

    chats = tools.chats(60, seed=0)
    assert chats == tools.chats(60, seed=0) and chats != tools.chats(60, seed=1)
    for messages, offered in chats:
        (call,) = messages[1]["tool_calls"]
        name, args = call["function"]["name"], call["function"]["arguments"]
        assert name in [f.__name__ for f in offered]
        assert set(args) == set(inspect.signature(tools.TOOLS[name]).parameters)
        if name in ("add", "multiply"):
            assert messages[2]["content"] == str(tools.TOOLS[name](**args))
        if name == "increment":  # "Reach N The counter starts at S." → a = N − S
            n, s = (int(w.strip(".")) for w in messages[0]["content"].split() if w[0].isdigit())
            assert args["a"] == n - s and messages[2]["content"] == str(n)


def test_the_warm_start_scores_the_assistants_tokens_only():
    """The mask of a chat is exactly the assistant's replies as the template renders them."""
    sys.path.insert(0, str(Path(__file__).parent))
    import lm_real_tools as tools
    from lm_user import hf_kit

    tok = hf_kit.tool_tokenizer()
    for messages, offered in tools.chats(5, seed=2):
        ids, mask = tools.tokens_and_mask(tok, messages, offered)
        said = tok.decode([i for i, m in zip(ids, mask, strict=True) if m])
        call = messages[1]["tool_calls"][0]["function"]
        assert said.startswith("<tool_call>") and call["name"] in said
        assert said.endswith(messages[3]["content"] + "<|im_end|>")
        assert "<tool_response>" not in said and messages[0]["content"] not in said


def test_the_tool_template_is_trls_and_its_calls_read_back():
    """The template the kit gives SmolLM2 is TRL's ``qwen2_5.jinja`` (the wheel's member is the
    installed TRL's file), one TRL accepts for tool use, and a call it renders is read back by
    ``finetune``'s parser as the call made."""
    pytest.importorskip("trl")
    import json as _json

    import trl
    from trl.chat_template_utils import add_response_schema

    import lm_real_tools as tools
    from eligibility.lm.episodes.chat import parse_calls

    path = Path(trl.__file__).parent / tools.TRL_TEMPLATE.removeprefix("trl/")
    assert tools.TRL_WHEEL == f"trl=={trl.__version__}"
    sys.path.insert(0, str(Path(__file__).parent))
    from lm_user import hf_kit

    tok = hf_kit.tool_tokenizer()
    tok.chat_template = path.read_text()
    add_response_schema(tok)  # TRL refuses a template it does not know
    messages, offered = tools.chats(1, seed=3)[0]
    text = tok.apply_chat_template(messages[:2], tools=offered, tokenize=False)
    (call,) = parse_calls(text.split("<|im_start|>assistant")[-1])
    want = messages[1]["tool_calls"][0]["function"]
    assert (call.name, call.arguments, call.error) == (want["name"], want["arguments"], None)
    assert _json.dumps(want["arguments"]) in text


def test_the_kit_writes_the_agent_task_its_calculator_answers_every_row(tmp_path):
    """``write_tasks``: ``multiply-tool-0`` (256 training and 32 held-out products, none asked
    twice, no worked example before the question) and ``calculator.py`` beside the rewards;
    the calculator's product is each row's answer, which ``correct`` scores 1."""
    import importlib.util
    import re

    import lm_real_kit

    d = lm_real_kit.write_tasks(tmp_path)
    rows = {
        s: [json.loads(x) for x in (d / lm_real_kit.AGENT_TASK / f"{s}.jsonl").open()]
        for s in ("train", "heldout")
    }
    asked = {s: {r["prompt"][-1]["content"] for r in rows[s]} for s in rows}
    assert (len(asked["train"]), len(asked["heldout"])) == (256, 32)
    assert not asked["train"] & asked["heldout"]
    every = rows["train"] + rows["heldout"]
    assert all(len(r["prompt"]) == 1 for r in every)  # the question alone
    spec = importlib.util.spec_from_file_location("kit_calculator", d / "calculator.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    env = module.Calculator()
    env.reset(**every[0])
    for r in every:
        a, b = map(int, re.findall(r"\d+", r["prompt"][-1]["content"]))
        assert str(env.multiply(a, b)) == r["answer"]
    assert env.calls == len(every)
    completions = [[{"role": "assistant", "content": r["answer"]}] for r in every]
    tasks_ = [r["task"] for r in every]
    answers = [r["answer"] for r in every]
    assert rewards.correct(completions, answer=answers, task=tasks_) == [1.0] * len(every)


def test_the_training_seconds_at_an_evaluation_take_out_that_evaluations_own():
    """``lm_real_race.trained``: the loop's seconds at each evaluated row less the ``time/eval``
    of every row up to it, and less what ``eval_wall_s`` holds beyond them (the start's
    evaluation); a file without the column shares ``eval_wall_s`` evenly, as before."""
    import lm_real_race

    def row(update, wall, spent, acc):
        return {"update": str(update), "wall_s": str(wall), "time/eval": str(spent),
                "eval_accuracy": acc}  # fmt: skip

    rows = [row(1, 142.0, 104.0, "0.0"), row(2, 150.0, 0.0, ""), row(3, 507.0, 294.0, "0.5")]
    got = lm_real_race.trained(rows, {"eval_wall_s": 408.0})  # 10 s evaluating at the start
    assert [(r["update"], s) for r, s in got] == [("1", 142.0 - 104 - 10), ("3", 507.0 - 398 - 10)]
    old = [{k: v for k, v in r.items() if k != "time/eval"} for r in rows]
    shared = lm_real_race.trained(old, {"eval_wall_s": 398.0})
    assert [s for _, s in shared] == [142.0 - 199, 507.0 - 398]  # an even share can fall
