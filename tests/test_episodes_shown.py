"""What happened in an episode, shown: transcripts, ``evaluate --episodes N``, and the
evaluation of a Gymnasium text environment on a Hugging Face model (it crashed: issue 75)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("gymnasium")
sys.path.insert(0, str(Path(__file__).parent))

from eligibility.lm.episodes.episode import Episode, batch_of  # noqa: E402
from eligibility.lm.episodes.shown import as_text, transcript, transcripts  # noqa: E402

ENV = "_text_env:EchoText-v0"
VOCAB = ("<eos>", "<bos>", "a", "b", "c", "|", "!")


def text(ids):
    return "".join(VOCAB[i] for i in ids)


def test_a_transcript_cuts_an_episode_at_its_turns():
    """Two turns: reply ``ab``, answer ``|c``, reply ``b`` (cut before EOS), the padding dropped:
    a world that keeps no conversation (a built-in game) read as messages, the model's replies
    the assistant's, the world's answers the user's, each reply's reward beside it."""
    e = Episode((1, 4))
    e.act([2, 3], [-0.1, -0.2], True)
    e.reward(0.25)
    e.answer([5, 4])
    e.act([3], [-0.3], False)
    e.reward(1.0)
    e.tool_calls, e.tool_failures = 2, 1
    short = Episode((1,))
    short.act([6], [-0.5], True)
    batch = batch_of([e, short], eos_id=0, max_turns=3)
    systems: list[str] = []
    got = transcripts(batch, [0, 1], text, systems)
    assert got[0] == {
        "prompt": [{"role": "user", "content": "c"}],
        "completion": [
            {"role": "assistant", "content": "ab"},
            {"role": "user", "content": "|c"},
            {"role": "assistant", "content": "b"},
        ],
        "rewards": [0.25, 1.0],
        "return": 1.25,
        "tool_calls": 2,
        "tool_failures": 1,
    }
    assert got[1]["prompt"] == [{"role": "user", "content": ""}]  # <bos> alone
    assert got[1]["completion"] == [{"role": "assistant", "content": "!"}] and systems == []
    shown = as_text(got[0]).splitlines()
    assert shown == [
        "  user: c",
        "    1 assistant: ab   (r 0.25)",
        "      user: |c",
        "    2 assistant: b   (r 1)",
        "    return 1.25, 2 tool calls (1 failed)",
    ]


def test_a_transcript_is_the_plain_reading_of_the_row():
    """Against a second reading: the replies, joined, are the model's tokens in order; the
    world's messages, its tokens."""
    rng = np.random.default_rng(0)
    e = Episode((1,))
    for k in range(3):
        e.act(rng.integers(2, 5, 3).tolist(), [0.0] * 3, True)
        e.reward(float(k))
        e.answer(rng.integers(5, 7, 2).tolist())
    record = transcript(e.prompt, e.tokens, e.model, e.turn, e.rewards, text)
    model = "".join(VOCAB[t] for t, m in zip(e.tokens, e.model, strict=True) if m)
    world = "".join(VOCAB[t] for t, m in zip(e.tokens, e.model, strict=True) if not m)
    said = lambda role: "".join(m["content"] for m in record["completion"] if m["role"] == role)  # noqa: E731
    assert said("assistant") == model and said("user") == world
    assert record["return"] == 3.0 and record["rewards"] == [0.0, 1.0, 2.0]


SCHEMA = '<|im_start|>system\nTools: {"name": "increment", "description": "Add a."}'
CALL = {"type": "function", "function": {"name": "increment", "arguments": {"a": 2}}}


def _conversed(system: str, start: int) -> Episode:
    """An episode whose world kept its conversation (a tool's, as ``ChatWorld.shown`` gives it)."""
    e = Episode((1,))
    e.act([2, 0], [0.0, 0.0], True)
    e.answer([5])
    e.act([3, 0], [0.0, 0.0], True)
    e.reward(1.0)
    e.tool_calls = 1
    e.shown = {
        "system": system,
        "prompt": [{"role": "user", "content": f"Reach 3 (from {start})"}],
        "completion": [
            {"role": "assistant", "content": "I add.", "tool_calls": [CALL]},
            {"role": "tool", "name": "increment", "content": str(start + 2)},
            {"role": "assistant", "content": "Done."},
        ],
    }
    return e


def test_an_episodes_messages_are_shown_and_its_system_prompt_once(capsys):
    """91: the episodes of a world that keeps its conversation are its messages, the tool calls
    and results among them; the system prompt (the template's text, the tools' schemas) is
    not in any episode, but once in the evaluation's list, each episode naming its own by
    index; ``evaluate`` prints none of it unasked, and with ``--show-system`` each once."""
    from eligibility.cli.evaluate import _finetune_text
    from eligibility.lm.episodes.shown import LEFT_OUT

    episodes = [_conversed(SCHEMA, 1), _conversed(SCHEMA, 0), _conversed("Other tools", 1)]
    systems: list[str] = []
    got = transcripts(batch_of(episodes, eos_id=0, max_turns=2), [0, 1, 2], text, systems)
    assert systems == [SCHEMA, "Other tools"] and [r["system"] for r in got] == [0, 0, 1]
    assert got[0]["completion"][1] == {"role": "tool", "name": "increment", "content": "3"}
    assert got[0]["rewards"] == [0.0, 1.0] and got[0]["prompt"][0]["content"] == "Reach 3 (from 1)"
    assert as_text(got[0]).splitlines() == [
        "  user: Reach 3 (from 1)",
        '    1 assistant: I add. → increment({"a": 2})   (r 0)',
        "      tool increment: 3",
        "    2 assistant: Done.   (r 1)",
        "    return 1, 1 tool calls (0 failed)",
    ]
    summary = {"task": "t", "accuracy": 1.0, "mean_reward": 1.0, "mean_length": 2.0,
               "completions": 3, "policy": "greedy", "episodes": got}  # fmt: skip
    quiet = _finetune_text(summary)
    assert "Tools:" not in quiet and "Other tools" not in quiet and LEFT_OUT in quiet
    asked = _finetune_text({**summary, "system": systems})
    assert asked.count("Tools: {") == 1 and asked.count("Other tools") == 1
    assert "system prompt 0:" in asked and LEFT_OUT not in asked
    assert "system" not in got[0]["prompt"][0] and "Tools" not in json.dumps(got)


def test_a_task_on_a_tokenizer_without_a_decode_reads_as_the_tokenizer_reads():
    """A task of a tokenizer has no vocabulary of its own (``vocab=()``, as a Gymnasium text
    environment's on ``--model DIR``): ``Task.text`` indexed it (IndexError in ``evaluate``)."""
    from eligibility.lm.tasks import Task
    from lm_user import hf_kit

    tok = hf_kit.tokenizer()
    task = Task("env", (), ((1,),), lambda i, c, e: 0.0, eos_id=0, n_tokens=len(tok),
                tokenizer=tok)  # fmt: skip
    ids = tok.encode("a b", add_special_tokens=False)
    assert task.text(ids) == tok.decode(ids) == "a b"
    assert task.prompt_text(0) == tok.decode([1])


@pytest.mark.slow
def test_a_text_environment_on_a_tokenizer_is_evaluated_and_shown():
    """``text_task`` with a tokenizer has no vocabulary of its own: its text is the tokenizer's
    (``Task.text`` indexed an empty vocabulary: IndexError in ``eligibility evaluate``); the
    evaluation plays ``limit`` episodes and shows them with the environment's observations."""
    from eligibility.lm.episodes.episode_rollout import evaluate_episodes
    from eligibility.lm.episodes.gym import text_task
    from lm_user import hf_kit

    tok = hf_kit.tokenizer()
    task = text_task(ENV, tokenizer=tok, episodes=2, held_out=4, max_turns=3)
    try:
        ev = task.evaluation
        assert ev.text(tok.encode("a b", add_special_tokens=False)) == "a b"
        assert isinstance(ev.prompt_text(0), str)
        model = hf_kit.model(len(tok), max_positions=128)
        result = evaluate_episodes(model, task, 2, 8, keep=2, limit=3)
        assert result.completions == 3 and len(result.episodes) == 2
        first = result.episodes[0]
        assert first["prompt"] == [{"role": "user", "content": first["prompt"][0]["content"]}]
        assert first["prompt"][0]["content"] in ("a", "b")  # the reset observation
        roles = [m["role"] for m in first["completion"]]
        assert roles == ["assistant", "user", "assistant"]  # Echo ends at its second step
        assert first["completion"][1]["content"] in ("a", "b")  # the next observation
        assert len(first["rewards"]) == 2 and "system" not in first  # the template has none
    finally:
        task.close()


def test_the_help_names_every_built_in_task_and_both_trainers(capsys):
    from eligibility.cli import main
    from eligibility.lm.tasks import BUILTIN

    for argv in (["finetune", "--help"], ["evaluate", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
    out = " ".join(capsys.readouterr().out.split())
    assert all(f"{name}," in out or f"{name};" in out for name in BUILTIN), out
    assert "written by eligibility train or finetune" in out


def test_replies_cut_at_the_limit_are_counted_and_the_columns_are_rates():
    """A reply that ended carries EOS last; one cut at T_max does not. The batch's columns:
    means per episode, the failed share of the calls, the cut share of the replies."""
    from types import SimpleNamespace

    from eligibility.lm.episodes.episode_rollout import EpisodeRollout
    from eligibility.lm.episodes.shown import replies_cut
    from eligibility.lm.metrics import EPISODE_COLUMNS, SCHEMA

    e = Episode((1,))
    e.act([2, 0], [0.0, 0.0], True)  # ended: EOS (0) last
    e.answer([5])
    e.act([3, 3], [0.0, 0.0], False)  # cut at T = 2
    e.answer([0, 5])  # the world's EOS after a cut reply, not the model's
    e.act([4], [0.0], False)  # cut
    e.tool_calls, e.tool_failures, e.cut = 2, 1, True  # e: ended at a bound (75.4)
    f = Episode((1,))
    f.act([6, 0], [0.0, 0.0], True)
    batch = batch_of([e, f], eos_id=0, max_turns=3)
    assert replies_cut(batch, 0) == (2, 4)
    columns = EpisodeRollout(SimpleNamespace(eos_id=0)).columns  # the task's EOS is all it reads
    row = columns(batch)
    assert set(row) == set(EPISODE_COLUMNS)
    assert row == {"turns": 2.0, "tool_calls": 1.0, "tool_failures": 0.5,
                   "tool_failure_rate": 0.5, "replies_cut": 0.5,
                   "episodes_cut": 0.5, "success_stated": 0.0}  # fmt: skip
    assert {f"episodes/{c}" for c in EPISODE_COLUMNS} <= set(SCHEMA.tags)
    f.tool_calls = e.tool_calls = e.tool_failures = 0
    assert columns(batch_of([f], eos_id=0, max_turns=3))["tool_failure_rate"] is None


def test_each_reward_function_has_its_columns_and_what_it_logs_is_averaged():
    """75.4: rewards/NAME/mean and /std (TRL's names) over the episodes a function applies to
    (NaN: None, left out, as TRL's nanmean and nanstd), in metrics.csv's schema and the
    trackers' tags; a value logged with log_metric is averaged into the row (75.2), as
    user/NAME (90)."""
    import dataclasses
    from types import SimpleNamespace

    from eligibility.lm.episodes.episode import Ending
    from eligibility.lm.episodes.episode_rollout import EpisodeRollout
    from eligibility.lm.metrics import SCHEMA, schema_of

    nan = float("nan")
    episodes = []
    for parts in [(1.0, nan), (2.0, 5.0), (4.0, nan)]:
        e = Episode((1,))
        e.act([2, 0], [0.0, 0.0], True)
        e.settle(Ending(sum(x for x in parts if x == x), parts))
        episodes.append(e)
    batch = batch_of(episodes, eos_id=0, max_turns=1, reward_names=("judge", "Counter"))
    batch = dataclasses.replace(batch, logged={"judged": [1.0, 0.0]})
    row = EpisodeRollout(SimpleNamespace(eos_id=0)).columns(batch)
    assert row["rewards/judge/mean"] == pytest.approx(7 / 3)
    assert row["rewards/judge/std"] == pytest.approx(float(np.std([1, 2, 4], ddof=1)))
    assert row["rewards/Counter/mean"] == 5.0 and row["rewards/Counter/std"] is None
    assert row["user/judged"] == 0.5 and "judged" not in row  # 90: the user's namespace
    assert batch.returns.tolist() == [1.0, 7.0, 4.0]
    schema = schema_of(("judge", "Counter"))
    want = [f"rewards/{n}/{s}" for n in ("judge", "Counter") for s in ("mean", "std")]
    assert [c for c in schema.columns if c.startswith("rewards/")] == want
    assert set(want) <= set(schema.tags.values()) and schema.columns[-1] == SCHEMA.columns[-1]
    assert schema_of(None) is SCHEMA


def test_an_evaluations_episodes_are_the_trackers_completions_table():
    """75 B6: the transcripts as TRL's completions table (step, prompt, completion, reward, …),
    each episode's log_extra cells (Ending.extra) a column after those; an episode without a
    column's cell is empty there; a Markdown reading of the table for TensorBoard's text."""
    from eligibility.lm.episodes.episode import Ending
    from eligibility.lm.episodes.shown import TABLE, table
    from eligibility.runs.trackers import markdown_table

    e = Episode((1, 4))
    e.act([2, 3], [0.0, 0.0], True)
    e.answer([5, 4])
    e.act([3, 0], [0.0, 0.0], True)
    e.settle(Ending(1.5, extra={"judge": "ok", "prompt": "not the transcript's"}))
    e.tool_calls = 1
    f = Episode((1,))
    f.act([6, 0], [0.0, 0.0], True)
    f.settle(Ending(0.0))
    records = transcripts(batch_of([e, f], eos_id=0, max_turns=2), [0, 1], text, [])
    assert records[0]["judge"] == "ok" and records[0]["prompt"][0]["content"] == "c"
    assert "judge" not in records[1]
    columns, rows = table(40, records)
    assert columns == [*TABLE, "judge"]
    assert rows == [
        [40, "user: c", "assistant: ab\nuser: |c\nassistant: b", 1.5, 1, 0, "ok"],
        [40, "user:", "assistant: !", 0.0, 0, 0, None],
    ]
    shown = markdown_table(["a", "b"], [["x|y", "1\n2"]]).splitlines()
    assert shown == ["| a | b |", "| --- | --- |", "| x\\|y | 1<br>2 |"]


def test_the_readme_shows_episodes_and_tools():
    """The README said nothing of episodes or tools (issue 75): a user could not find them."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "eligibility finetune guess" in readme and "docs/tutorials/agent.md" in readme
    assert "--tools" in readme and "environment_factory" in readme


def test_each_evaluations_episodes_are_logged_and_a_resume_rewrites_its_own(tmp_path):
    """``episodes.jsonl``: one line an evaluation; an update evaluated again (a resumed run)
    replaces its line and every later one, so the file is the uninterrupted run's."""
    from eligibility.lm.evaluation import logged

    path = tmp_path / "episodes.jsonl"
    for update in (1, 2, 3):
        logged(path, update, [{"prompt": f"p{update}"}])
    logged(path, 2, [{"prompt": "again", "system": 0}], ["S"])  # resumed from update 1's
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines == [
        {"update": 1, "system": [], "episodes": [{"prompt": "p1"}]},
        {"update": 2, "system": ["S"], "episodes": [{"prompt": "again", "system": 0}]},
    ]
