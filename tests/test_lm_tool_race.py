"""The tool race's files (``bench/lm/lm_tool_race.py``, ``calculator.py``): pure Python.

The held-out questions are never trained on and never a worked example, every row's answer is
A·B and scores 1 under the kit's ``correct``; the calculator is described to the model the way
both systems describe it (``transformers.utils.get_json_schema``), and a call the environment
cannot answer is answered with the error, as TRL's tool loop answers it.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "lm"))

import calculator
import lm_real_rewards as rewards
import lm_tool_race as race
import weather


def test_the_held_out_questions_are_unseen_and_each_answer_scores_one():
    train, held = race.rows()
    question = lambda r: r["prompt"][-1]["content"]  # noqa: E731
    assert (len(train), len(held)) == (256, 32)
    assert not {question(r) for r in train} & {question(r) for r in held}
    shots = {f"What is {a} times {b}?" for a, b in race.SHOTS}
    for r in train + held:
        a, b = map(int, re.fullmatch(r"What is (\d+) times (\d+)\?", question(r)).groups())
        assert 100 <= a <= 999 and 10 <= b <= 99 and r["answer"] == str(a * b)
        assert question(r) not in shots and len(r["prompt"]) == 4 * len(race.SHOTS) + 1
    done = [[{"role": "assistant", "content": r["answer"]}] for r in held]
    columns = {"answer": [r["answer"] for r in held], "task": [r["task"] for r in held]}
    assert rewards.correct(done, **columns) == [1.0] * len(held)
    assert race.rows() == (train, held)  # drawn once, the same files every time


def test_the_word_problems_hold_pairs_never_trained_on_and_each_answer_scores_one():
    train, held = race.word_rows()
    assert (len(train), len(held)) == (256, 32)
    pairs = []
    for r in train + held:
        (message,) = r["prompt"]  # no worked example
        numbers = [int(x) for x in re.findall(r"\d+", message["content"])]
        a = next(x for x in numbers if 100 <= x <= 999)
        b = next(x for x in numbers if 10 <= x <= 99)
        assert sorted(numbers) == [b, a] and r["answer"] == str(a * b)
        assert "times" not in message["content"]
        pairs.append((a, b))
    assert len(set(pairs)) == len(pairs)  # the held-out pairs apart from the trained ones
    done = [[{"role": "assistant", "content": r["answer"]}] for r in held]
    columns = {"answer": [r["answer"] for r in held], "task": [r["task"] for r in held]}
    assert rewards.correct(done, **columns) == [1.0] * len(held)
    assert race.word_rows() == (train, held)


def test_the_weather_rows_ask_one_figure_that_only_the_tool_reports_and_each_answer_scores_one():
    train, held = race.weather_rows()
    assert (len(train), len(held)) == (256, 32)
    for r in train + held:
        (message,) = r["prompt"]  # no worked example
        field, city = re.fullmatch(
            r"What is the (\w+) in (\w+) today\? Reply with the number only\.", message["content"]
        ).groups()
        assert city == r["city"] and r["answer"] == str(r[field])
        assert not re.search(r"\d", message["content"])  # the number is only in the tool's report
        env = weather.Weather()
        env.reset(**{k: v for k, v in r.items() if k != "prompt"})
        report = env.weather(city.upper())  # a city's name in any case
        assert f"{field} {r[field]} " in report and report.startswith(f"{city} today: ")
        assert all(f"{f} {r[f]} " in report for f in weather.FIELDS)
        assert env.weather("Atlantis") == "No report for Atlantis."
    done = [[{"role": "assistant", "content": r["answer"]}] for r in held]
    columns = {"answer": [r["answer"] for r in held], "task": [r["task"] for r in held]}
    assert rewards.correct(done, **columns) == [1.0] * len(held)
    assert race.weather_rows() == (train, held)
    shot = race.weather_rows(shots=1)[0]
    assert len({str(r["prompt"][:-1]) for r in shot}) == 1  # the same example before every row
    ask, call, report, said = shot[0]["prompt"][:-1]
    assert call["tool_calls"][0]["function"] == {"name": "weather", "arguments": {"city": "Oslo"}}
    assert f"wind {said['content']} km/h" in report["content"] and "wind" in ask["content"]


def test_one_rule_names_each_kit_task_that_prepare_writes_and_a_run_reads():
    named = {
        (2, 2, "multiply"): "multiply-tool",
        (0, 2, "multiply"): "multiply-tool-0",
        (1, 3, "multiply"): "multiply3-tool-1",
        (2, 2, "counter-near"): "counter-near-tool",
        (2, 2, "words"): "words-tool",
        (1, 2, "weather"): "weather-tool-1",
    }
    for (shots, factors, env_task), name in named.items():
        assert race.task_name(shots, factors, env_task) == name
        args = argparse.Namespace(shots=shots, factors=factors, env_task=env_task)
        assert race.setting(args)[0] == name


@pytest.mark.slow  # transformers' import
def test_the_calculator_is_one_tool_with_integer_factors():
    from transformers.utils import get_json_schema

    schema = get_json_schema(calculator.Calculator().multiply)["function"]
    assert schema["name"] == "multiply" and schema["parameters"]["required"] == ["a", "b"]
    assert {p["type"] for p in schema["parameters"]["properties"].values()} == {"integer"}


def test_a_call_is_answered_as_trl_answers_it():
    env = calculator.Calculator()
    env.reset(prompt=[], answer="1", task="multiply")
    assert race.answer(env, {"multiply"}, {"name": "multiply", "arguments": {"a": "347", "b": 29}})[
        "content"
    ] == str(347 * 29)
    assert env.calls == 1
    missing = race.answer(env, {"multiply"}, {"name": "calls", "arguments": {}})
    assert missing["content"] == str({"error": "Tool calls not found."})
    bad = race.answer(env, {"multiply"}, {"name": "multiply", "arguments": {"a": 1}})
    assert bad["content"].startswith("{'error': ") and env.calls == 1


def test_the_async_races_trl_arm_gets_the_calculators_delay(monkeypatch):
    """``lm_async.py run --setting agent``: GRPOTrainer's process is given the environment the
    other arms get (``CALCULATOR_DELAY_S``: its calculator waits as finetune's does)."""
    import lm_async
    import lm_trl

    seen = {}

    def child(argv, env):
        seen.update(argv=argv, env=env)
        return {"error": "not run"}, {}

    monkeypatch.setattr(lm_trl, "child", child)
    args = argparse.Namespace(setting="agent", model="smollm2-135m-tools", lr=1e-5, g=2,
                              prompts=1, t_max=4, updates=2, eval_every=1, threads=2,
                              async_threads=1, dtype="float32", stop_at=None, shots=0,
                              max_tool_calls=1, tool_delay=0.5, task="multiply",
                              max_env_workers=None)  # fmt: skip
    row = lm_async.one(args, "trl", None, 7)
    assert seen["argv"][2:4] == ["trl-child", "7"] and row["system"] == "trl"
    assert seen["env"]["CALCULATOR_DELAY_S"] == "0.5" and seen["env"]["OMP_NUM_THREADS"] == "2"


def test_the_async_races_agent_arm_passes_max_env_workers(monkeypatch):
    """``lm_async.py run --setting agent --max-env-workers 1``: ours' finetune is given it (the
    calls one after another), and its row records it."""
    import lm_async
    import lm_real_race

    seen = {}

    def ours(ns, name, seed, *rest):
        seen["extra"] = list(ns.extra)
        return {"train_s": 1.0, "updates": 1}

    monkeypatch.setattr(lm_real_race, "ours", ours)
    args = argparse.Namespace(setting="agent", model="smollm2-135m-tools", lr=1e-5, g=2,
                              prompts=1, t_max=4, updates=2, eval_every=1, threads=2,
                              async_threads=1, dtype="float32", stop_at=None, shots=0,
                              max_tool_calls=1, tool_delay=0.5, task="multiply",
                              max_env_workers=1)  # fmt: skip
    row = lm_async.one(args, "sync", None, 7)
    at = seen["extra"].index("--max-env-workers")
    assert seen["extra"][at + 1] == "1" and row["max_env_workers"] == 1
