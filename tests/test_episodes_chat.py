"""A conversation with tools through a chat template: the world's tokens are the template's
rendering of the tool messages and the next header, never the model's; a class written for
TRL's environment_factory answers the calls; a malformed call is a failed call, counted.

The environments and rewards here are served in the test's process (``tests/_user_code_here.py``):
these tests hold the episodes' tokens and rewards, not the worker (its tests:
``tests/test_episodes_tools.py``, ``tests/test_episodes_worlds.py``)."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from _user_code_here import rewards_here, worlds_here  # noqa: E402
from eligibility.lm.edge.hf import tool_schema  # noqa: E402
from eligibility.lm.edge.model import TinyLM  # noqa: E402
from eligibility.lm.episodes import Episode, batch_of  # noqa: E402
from eligibility.lm.episodes.chat import Span, tool_suffix  # noqa: E402
from eligibility.lm.episodes.chatworld import ChatWorld, settle  # noqa: E402
from eligibility.lm.episodes.episode_rollout import play  # noqa: E402
from eligibility.lm.episodes.toolbox import Toolbox  # noqa: E402
from eligibility.lm.episodes.tools import tool_task  # noqa: E402
from eligibility.lm.rewards import TrainerState  # noqa: E402
from eligibility.lm.sample import token_logps  # noqa: E402
from eligibility.lm.tasks import Task  # noqa: E402
from lm_user import hf_kit  # noqa: E402


class Counter:
    """TRL's environment_factory: given as a class from Python, and as its source in a file."""

    def reset(self, start=0, **kwargs):
        self.n = start
        return f" (from {start})"

    def increment(self, a: int) -> int:
        """Increment the counter.

        Args:
            a: The value to add.
        """
        self.n += a
        return self.n

    def get_reward(self) -> float:
        return float(self.n == 3)


ENV = inspect.getsource(Counter)
"""``counter.py``: the same class, as the command line loads it (``--env counter.py:Counter``)."""
CALL = '<tool_call>{"name": "increment", "arguments": {"a": 2}}</tool_call>'


@pytest.fixture(scope="module", autouse=True)
def _user_code_here():
    """The module's environments and rewards served here (see the docstring)."""
    with worlds_here(), rewards_here():
        yield


@pytest.fixture(scope="module")
def tokenizer():
    """Every byte a token, and the chat's two specials (``<|im_end|>`` the EOS)."""
    return hf_kit.tool_tokenizer()


@pytest.fixture
def toolbox(tmp_path):
    (tmp_path / "counter.py").write_text(ENV)
    box = Toolbox((), f"{tmp_path / 'counter.py'}:Counter", timeout=10, schema=tool_schema)
    box.start()
    yield box
    box.close()


def test_the_worlds_tokens_are_the_templates_tool_message_and_header(tokenizer):
    results = [{"role": "tool", "name": "increment", "content": "3"}]
    suffix = tokenizer.decode(tool_suffix(tokenizer, results, None))
    assert suffix == "\n<|im_start|>user\n<tool_response>3</tool_response><|im_end|>\n" + (
        "<|im_start|>assistant\n"
    )


def test_an_episode_with_tools_scores_only_the_models_tokens(tokenizer, toolbox):
    """reset's text in the prompt, a call answered by the environment's method, a malformed
    call answered with its error (a failure, counted), get_reward at the end; the batch's mask
    is the replies' tokens, and the model's tokens after a tool result are scored."""
    row = {"prompt": [{"role": "user", "content": "Reach 3"}], "start": 1}
    world = ChatWorld(toolbox, tokenizer, row, 0, max_tool_calls=3, max_turns=4,
                      span=lambda n, what: Span(None, 4, n, what))  # fmt: skip
    assert tokenizer.decode(list(world.prompt)).endswith(
        "Tools: increment<|im_end|>\n<|im_start|>user\nReach 3 (from 1)<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    episode, eos = Episode(world.prompt), tokenizer.eos_token_id
    replies = [CALL, "<tool_call>{oops}</tool_call>", "Done."]
    answer = _play(world, episode, tokenizer, replies)
    assert answer.done and episode.rewards == [0.0, 0.0, 0.0]  # scored with its batch:
    (ending,), _ = settle(toolbox, [world], TrainerState())
    episode.settle(ending)
    assert episode.rewards == [0.0, 0.0, 1.0] and ending.parts == (1.0,)  # get_reward: n == 3
    assert (episode.tool_calls, episode.tool_failures) == (2, 1)
    batch = batch_of([episode], eos_id=eos, max_turns=4)
    ids, m = batch.completion_ids[0].tolist(), batch.completion_mask[0].bool().tolist()
    model_text = tokenizer.decode([t for t, k in zip(ids, m, strict=True) if k])
    assert model_text == "<|im_end|>".join(replies) + "<|im_end|>"
    world_text = tokenizer.decode([t for t, k in zip(ids, m, strict=True) if not k])
    assert "<tool_response>3</tool_response>" in world_text and "oops" not in world_text
    assert "malformed tool call" in world_text
    model = TinyLM(len(tokenizer), 8, 1, 2, 512)
    logps = token_logps(model, batch, vocab_size=len(tokenizer))
    assert (logps[0][~batch.completion_mask[0].bool()] == 0).all()
    assert (logps[0][batch.completion_mask[0].bool()] < 0).all()


def _play(world, episode, tokenizer, replies):
    """The model's ``replies`` played in ``world``, each ended by EOS: the world's last answer."""
    eos = tokenizer.eos_token_id
    for text in replies:
        ids = tokenizer.encode(text)
        episode.act([*ids, eos], [-1.0] * (len(ids) + 1), ended=True)
        answer = world.step(ids, True)
        episode.reward(answer.reward)
        episode.tool_calls += answer.tool_calls
        episode.tool_failures += answer.tool_failures
        if not answer.done:
            episode.answer(answer.tokens)
    return answer


def _scripted(toolbox, tokenizer):
    """An episode of three replies (a call, a malformed call, an answer), settled: its batch."""
    row = {"prompt": [{"role": "user", "content": "Reach 3"}], "start": 1}
    world = ChatWorld(toolbox, tokenizer, row, 0, max_tool_calls=3, max_turns=4,
                      span=lambda n, what: Span(None, 4, n, what))  # fmt: skip
    episode, eos = Episode(world.prompt), tokenizer.eos_token_id
    _play(world, episode, tokenizer, [CALL, "<tool_call>{oops}</tool_call>", "Done."])
    (ending,), _ = settle(toolbox, [world], TrainerState())
    episode.settle(ending)
    return batch_of([episode], eos_id=eos, max_turns=4)


def test_episodes_played_here_are_the_episodes_of_the_worker(tokenizer, tmp_path, monkeypatch):
    """``tests/_user_code_here.py``: the scripted episode with its environment in the forked
    worker and served here is one episode: its tokens, mask, rewards, turns and calls; the
    worker forked for the first only."""
    from eligibility import _isolate
    from eligibility.lm.episodes import worker

    forks = []
    own = _isolate.Worker.fork
    monkeypatch.setattr(_isolate.Worker, "fork", lambda self: (forks.append(self), own(self))[1])
    (tmp_path / "counter.py").write_text(ENV)
    batches = []
    for served in ("in its worker", "here"):
        with pytest.MonkeyPatch.context() as mp:
            if served == "in its worker":  # the module's worlds_here undone
                mp.setattr(worker, "Worker", _isolate.Worker)
            box = Toolbox((), f"{tmp_path / 'counter.py'}:Counter", timeout=10,
                          schema=tool_schema)  # fmt: skip
            box.start()
            try:
                batches.append(_scripted(box, tokenizer))
            finally:
                box.close()
        assert len(forks) == 1, served
    worker_batch, here_batch = batches
    assert worker_batch.tool_calls.tolist() == [2] and worker_batch.returns.tolist() == [1.0]
    for name in ("completion_ids", "completion_mask", "turn_rewards", "returns", "turns",
                 "tool_calls", "tool_failures"):  # fmt: skip
        assert torch.equal(getattr(here_batch, name), getattr(worker_batch, name)), name


def test_a_tool_task_plays_with_the_sampler(tokenizer, toolbox):
    """The task of rows and a toolbox, played by the sampler: each episode opens with its own
    environment's prompt (reset's text in it) and ends by the turn limit at the latest."""
    rows = [{"prompt": [{"role": "user", "content": f"Reach {k}"}], "start": k} for k in (1, 2)]
    base = Task("tools", (), (), lambda i, c, e: 0.0, max_completion_length=4,
                eos_id=tokenizer.eos_token_id, n_tokens=len(tokenizer),
                tokenizer=tokenizer)  # fmt: skip
    task = tool_task(base, rows, toolbox, max_tool_calls=2)
    assert task.max_turns == 3
    torch.manual_seed(0)
    model = TinyLM(len(tokenizer), 8, 1, 2, 512)
    batch = play(model, task, [0, 1, 1], t_max=4, rng=np.random.default_rng(0))
    prompts = [tokenizer.decode(row) for row in batch.prompt_ids.tolist()]
    assert "(from 1)" in prompts[0] and "(from 2)" in prompts[2]
    assert (batch.turns == 1).all()  # random replies call no tool
    assert batch.tool_calls.sum() == 0


class Stated(Counter):
    """An environment that states its success (``is_success``), its reward aside."""

    @property
    def is_success(self) -> bool:
        return self.n == 2

    def get_reward(self) -> float:
        return 0.0


def test_the_evaluation_reads_the_success_an_environment_states(tokenizer, tmp_path):
    """75.3: an environment's is_success (an attribute or property) is the episode's success,
    whatever its return (0 here): the evaluation's accuracy reads it; it is not a tool."""
    from eligibility.lm.episodes.episode_rollout import evaluate_episodes

    (tmp_path / "stated.py").write_text(ENV + "\n\n" + inspect.getsource(Stated))
    box = Toolbox((), f"{tmp_path / 'stated.py'}:Stated", timeout=10, schema=tool_schema)
    box.start()
    try:
        assert [s["function"]["name"] for s in box.schemas[None]] == ["increment"]
        rows = [{"prompt": [{"role": "user", "content": "Reach"}], "start": k} for k in (1, 2, 2)]
        base = Task("tools", (), (), lambda i, c, e: 0.0, max_completion_length=4,
                    eos_id=tokenizer.eos_token_id, n_tokens=len(tokenizer),
                    tokenizer=tokenizer)  # fmt: skip
        task = tool_task(base, rows, box, max_tool_calls=1)
        model = TinyLM(len(tokenizer), 8, 1, 2, 512)
        batch = play(model, task, [0, 1, 2], t_max=4)
        assert batch.success.tolist() == [0.0, 1.0, 1.0] and batch.returns.tolist() == [0.0] * 3
        ev = evaluate_episodes(model, task, 4, 8)
        assert ev.accuracy == pytest.approx(2 / 3) and ev.mean_reward == 0.0
    finally:
        box.close()


class AlwaysYes(Counter):
    """Says every episode succeeded; pays nothing."""

    is_success = True

    def get_reward(self) -> float:
        return 0.0


class SaysNo(Counter):
    """Pays 3 an episode, and says it failed."""

    is_success = False

    def get_reward(self) -> float:
        return 3.0


class PaysOne(Counter):
    """Pays 1 an episode (its get_reward), and says nothing of success."""

    def get_reward(self) -> float:
        return 1.0


def _bonus(completions, **kwargs):
    """A format bonus of 0.2 for every episode."""
    return [0.2] * len(completions)


@pytest.mark.parametrize(
    ("env", "success_return", "rewards", "want"),
    [
        (AlwaysYes, None, [], 1.0),  # was: accuracy 0.0, eval_accuracy 1.0
        (SaysNo, 3.0, [], 0.0),  # was: accuracy 1.0 (R ≥ 3), eval_accuracy 0.0
        (PaysOne, None, [_bonus], 1.0),  # was: 0.0 both (R = 1.2 is not exactly 1)
    ],
)
def test_a_batch_and_the_evaluation_read_one_success(
    tokenizer, tmp_path, env, success_return, rewards, want
):
    """91.1: training's accuracy and the evaluation's read success the same way: the
    environment's is_success where it has one, else --success-return, else the default of a
    task of tools (a return of at least 1: a correct answer with any bonus beside it)."""
    from eligibility.lm.episodes.episode_rollout import EpisodeRollout, evaluate_episodes
    from eligibility.lm.tasks import judged

    name = env.__name__
    (tmp_path / "envs.py").write_text(ENV + "\n\n" + inspect.getsource(env))
    box = Toolbox((), f"{tmp_path / 'envs.py'}:{name}", timeout=10, schema=tool_schema,
                  rewards=rewards)  # fmt: skip
    box.start()
    try:
        rows = [{"prompt": [{"role": "user", "content": "Reach"}], "start": k} for k in (1, 2)]
        base = Task("tools", (), (), lambda i, c, e: 0.0, max_completion_length=4,
                    eos_id=tokenizer.eos_token_id, n_tokens=len(tokenizer),
                    tokenizer=tokenizer)  # fmt: skip
        task = judged(tool_task(base, rows, box, max_tool_calls=1), success_return)
        model = TinyLM(len(tokenizer), 8, 1, 2, 512)
        batch = play(model, task, [0, 1], t_max=4)
        rollout = EpisodeRollout(task)
        accuracy = float(rollout.successes(batch, batch.returns.float()).float().mean())
        assert accuracy == evaluate_episodes(model, task, 4, 8).accuracy == want
        stated = rollout.columns(batch)["success_stated"]
        assert stated == (0.0 if env is PaysOne else 1.0)  # the column says which rule read it
    finally:
        box.close()


@pytest.mark.slow
def test_finetune_with_an_environment_from_the_command_line(tokenizer, tmp_path, capsys):
    """``finetune REWARD --prompts ROWS --model DIR --env FILE.py:Counter``: a TRL environment
    class unchanged, one update, metrics.csv's turns and tool columns; a factory that does not
    load is one line and exit 2."""
    import csv
    import json

    from eligibility.cli import main

    model = hf_kit.tool_model_dir(tmp_path / "model", tokenizer)
    (tmp_path / "counter.py").write_text(ENV)
    (tmp_path / "reward.py").write_text(
        "def zero(completions, **kw):\n    return [0.0] * len(completions)\n"
    )
    rows = [{"prompt": [{"role": "user", "content": f"Reach {k}"}], "start": k} for k in (1, 2)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["finetune", f"{tmp_path / 'reward.py'}:zero", "--prompts", str(tmp_path / "rows.jsonl"),
            "--model", str(model), "--max-tool-calls", "2", "--max-updates", "1",
            "--group-size", "2", "--prompts-per-batch", "1", "--eval-every", "1",
            "--max-completion-length", "8", "--target-accuracy", "none",
            "--no-progress"]  # fmt: skip
    out = tmp_path / "run"
    assert main([*argv, "--env", f"{tmp_path / 'counter.py'}:Counter", "--out", str(out)]) == 0
    (row,) = list(csv.DictReader((out / "metrics.csv").open()))
    assert 1 <= float(row["turns"]) <= 3 and float(row["tool_failures"]) >= 0
    code = main([*argv, "--env", f"{tmp_path / 'counter.py'}:Nope", "--out", str(tmp_path / "r2")])
    err = capsys.readouterr().err
    assert code == 2 and "has no function 'Nope'" in err and "Traceback" not in err


def _zero(completions, **kwargs):
    return [0.0] * len(completions)


def _seen(completions, log_metric, log_extra, **kwargs):
    """Zero, logging the batch's size (log_metric) and each episode's length (log_extra)."""
    log_metric("seen", len(completions))
    log_extra("messages", [len(c) for c in completions])
    return [0.0] * len(completions)


def test_trls_objects_from_python_are_named_by_importable_specs():
    """75.6: a module's function or class given from Python is recorded by a spec --resume and
    evaluate load again: 91: the user's own module by its file (``FILE.py:qualname``, as the
    command line takes it: found from any directory), an installed one or a package's by its
    name (``module:qualname``); a function defined in a function, a lambda, or a list holding
    one, is named python:NAME, which the command line refuses in one line (90: it was left as
    the config named it, and a resume ran without it)."""
    import json

    from eligibility.lm.specs import as_specs
    from lm_user.rewards import zero

    def local(completions, **kwargs):
        return [0.0] * len(completions)

    here = str(Path(__file__).resolve())
    assert as_specs([_zero, "m.py:f"], None, Counter) == {
        "task": f"{here}:_zero,m.py:f",
        "environment_factory": f"{here}:Counter",
    }
    assert as_specs([json.dumps, zero], None, None) == {
        "task": "json:dumps,lm_user.rewards:zero"  # the standard library's; a package's
    }
    inner = "test_trls_objects_from_python_are_named_by_importable_specs.<locals>"
    assert as_specs([_zero, local], [lambda: 1], {"a": Counter, "b": Stated}) == {
        "environment_factory": f"a={here}:Counter,b={here}:Stated",
        # 90: marked, so that the command line refuses them (it ran without them, silently)
        "task": f"python:_zero,{inner}.local",
        "tools": f"python:{inner}.<lambda>",
    }
    assert as_specs(None, None, None) == {}


@pytest.mark.slow
def test_finetune_takes_trls_arguments_from_python(tokenizer, tmp_path):
    """``finetune(config, reward_funcs=…, train_dataset=…, environment_factory=Class)``, as
    ``GRPOTrainer`` takes them."""
    import csv
    import json

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from eligibility.cli import main
    from eligibility.lm import FinetuneConfig
    from eligibility.lm.trainer import finetune

    model = hf_kit.tool_model_dir(tmp_path / "model", tokenizer)
    rows = [{"prompt": [{"role": "user", "content": f"Reach {k}"}], "start": k} for k in (1, 2)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = str(tmp_path / "run")
    config = FinetuneConfig("zero", model=str(model), max_updates=1, group_size=2,
                            prompts_per_batch=1, eval_every=1, max_completion_length=8,
                            target_accuracy=None, progress=False, out=out,
                            prompts=str(tmp_path / "rows.jsonl"))  # fmt: skip
    result = finetune(config, reward_funcs=[_seen], environment_factory=Counter)
    assert result.updates == 1
    (row,) = list(csv.DictReader((tmp_path / "run" / "metrics.csv").open()))
    assert row["turns"] != ""  # played as episodes
    assert float(row["rewards/_seen/mean"]) == 0.0 and row["rewards/Counter/mean"] != ""
    assert float(row["user/seen"]) == 2.0 == result.history[0]["user/seen"]  # B2, 90: user/
    # B6: the evaluation's episodes in TensorBoard, the table's log_extra column with them
    board = EventAccumulator(out, size_guidance={"tensors": 0})
    board.Reload()
    assert board.Scalars("user/seen")[0].value == 2.0
    (shown,) = board.Tensors("completions")
    header = shown.tensor_proto.string_val[0].decode().splitlines()[0]
    assert (
        header == "| step | prompt | completion | reward | tool_calls | tool_failures | messages |"
    )
    (line,) = (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()
    assert all(isinstance(e["messages"], int) for e in json.loads(line)["episodes"])
    # 75.6: config.json names TRL's objects by importable specs: the command line continues it
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["task"] == f"{Path(__file__).resolve()}:_seen"  # 91: its file, found anywhere
    assert saved["environment_factory"] == f"{Path(__file__).resolve()}:Counter"
    assert main(["finetune", "--resume", out, "--max-updates", "2", "--no-progress"]) == 0
    rows = list(csv.DictReader((tmp_path / "run" / "metrics.csv").open()))
    assert [float(r["user/seen"]) for r in rows] == [2.0, 2.0]  # the column kept by the resume


@pytest.mark.parametrize(
    ("shown", "hidden"), [(hf_kit.TOOLS_SHOWN, "the tools"), (hf_kit.CALLS_SHOWN, "calls")]
)
def test_a_template_that_hides_the_tools_or_the_calls_is_refused_in_one_line(
    tokenizer, toolbox, shown, hidden
):
    """A template without tool use (the tools' schemas not rendered, or an assistant's calls
    rendered as nothing) is refused before any episode is played, naming what it hides; the
    template that shows both is taken (as TRL's check of a template does)."""
    import copy

    rows = [{"prompt": [{"role": "user", "content": "Reach 3"}]}]
    task = Task("tools", (), (), lambda i, c, e: 0.0, n_tokens=256, tokenizer=tokenizer)
    tool_task(task, rows, toolbox, max_tool_calls=1)  # this template shows both
    blind = copy.deepcopy(tokenizer)
    assert shown in hf_kit.TOOL_CHAT
    blind.chat_template = hf_kit.TOOL_CHAT.replace(shown, "")
    with pytest.raises(ValueError, match=f"chat template hides .*{hidden}") as err:
        tool_task(dataclasses.replace(task, tokenizer=blind), rows, toolbox, max_tool_calls=1)
    assert "\n" not in str(err.value)


def _judge(prompts, completions, completion_ids, environments, trainer_state, log_metric,
           log_extra, start, **kwargs):  # fmt: skip
    """TRL's reward function: the batch's whole conversations, environments, columns, state."""
    call = {"type": "function", "function": {"name": "increment", "arguments": {"a": 2}}}
    log_metric("batch_size", len(completions))
    log_metric("step", trainer_state.global_step)
    log_extra("start", list(start))  # a column of the completions table (TRL's), per episode
    log_extra("judge", [{"by": "judge"}] * len(start))  # not a number or text: its text
    rewards = []
    given = zip(completions, environments, start, completion_ids, prompts, strict=True)
    for said, env, s, ids, p in given:
        ok = (said[0] == {"role": "assistant", "content": "", "tool_calls": [call]}
              and said[1] == {"role": "tool", "name": "increment", "content": str(s + 2)}
              and said[-1] == {"role": "assistant", "content": "Done."}
              and env.n == s + 2 and len(ids) > 10
              and p[-1]["content"] == f"Reach 3 (from {s})")  # fmt: skip
        rewards.append(100.0 * s if ok else -100.0)
    return rewards


async def _judge_async(**kwargs):
    return _judge(**kwargs)


@pytest.mark.parametrize("judge", [_judge, _judge_async])
def test_reward_functions_are_called_once_a_batch_with_the_whole_conversations(
    tokenizer, tmp_path, judge
):
    """75.2: a reward function is called as TRL calls it, once a batch: the conversations'
    messages (the replies with their tool_calls, the tools' answers), environments=, the rows'
    columns, trainer_state (the run's step), log_metric (what it logs kept) and log_extra
    (B2: each episode's cell of a column); an async one
    awaited; each environment class's get_reward() one more reward at weight 1."""
    (tmp_path / "counter.py").write_text(ENV)
    box = Toolbox((), f"{tmp_path / 'counter.py'}:Counter", timeout=10, schema=tool_schema,
                  rewards=[judge])  # fmt: skip
    box.start()
    try:
        worlds = []
        for i, start in enumerate((1, 2)):
            row = {"prompt": [{"role": "user", "content": "Reach 3"}], "start": start}
            world = ChatWorld(box, tokenizer, row, i, max_tool_calls=3, max_turns=4,
                              span=lambda n, what: Span(None, 4, n, what))  # fmt: skip
            assert not world.step(tokenizer.encode(CALL), True).done
            answer = world.step(tokenizer.encode("Done."), True)
            assert answer.done and answer.reward == 0.0  # scored with its batch
            worlds.append(world)
        endings, logged = settle(box, worlds, TrainerState(global_step=7))
        assert [e.reward for e in endings] == [101.0, 200.0]  # the judge's, get_reward's (n = 3)
        assert [e.parts for e in endings] == [(100.0, 1.0), (200.0, 0.0)]
        assert box.reward_names == ["_judge" if judge is _judge else "_judge_async", "Counter"]
        assert logged == {"batch_size": [2.0], "step": [7.0]}  # one call for the whole batch
        judged = str({"by": "judge"})
        assert [e.extra for e in endings] == [{"start": s, "judge": judged} for s in (1, 2)]
    finally:
        box.close()


def _logs_badly(completions, log_metric, log_extra, **kwargs):
    log_extra("note", ["x"] * (len(completions) - 1))  # one short: refused, not padded
    return [0.0] * len(completions)


def test_a_bad_log_extra_is_one_line_naming_the_reward_function(tokenizer, tmp_path):
    """90: a log_extra list one shorter than the episodes was padded with None silently; now
    the batch's score stops in one line naming the function and what it gave."""
    (tmp_path / "counter.py").write_text(ENV)
    box = Toolbox((), f"{tmp_path / 'counter.py'}:Counter", timeout=10, schema=tool_schema,
                  rewards=[_logs_badly])  # fmt: skip
    box.start()
    try:
        row = {"prompt": [{"role": "user", "content": "Reach 3"}], "start": 1}
        span = lambda n, what: Span(None, 4, n, what)  # noqa: E731
        worlds = [ChatWorld(box, tokenizer, row, i, max_tool_calls=1, max_turns=1, span=span)
                  for i in (0, 1)]  # fmt: skip
        for world in worlds:
            world.step(tokenizer.encode("Done."), True)
        with pytest.raises(ValueError) as err:
            settle(box, worlds, TrainerState())
    finally:
        box.close()
    text = str(err.value)
    assert "reward function _logs_badly raised ValueError: log_extra('note', …)" in text
    assert "1 values for the batch's 2 episodes" in text and "\n" not in text


def test_a_text_prompt_with_tools_is_one_line(tokenizer, tmp_path):
    """72/75.8: a row whose prompt is text, given tools or an environment, is refused in one
    line naming the row and the conversation to write (TRL's tool loop takes messages), not a
    TypeError from the chat template."""
    from eligibility.lm.config import FinetuneConfig
    from eligibility.lm.usertask import make_task

    tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "counter.py").write_text(ENV)
    config = FinetuneConfig(task="count", model=str(tmp_path / "model"),
                            environment_factory=f"{tmp_path / 'counter.py'}:Counter")  # fmt: skip
    rows = [{"prompt": [{"role": "user", "content": "Reach 3"}]}, {"prompt": "Reach 3"}]
    with pytest.raises(ValueError) as info:
        make_task(config, records=(rows, None))
    text = str(info.value)
    assert text.startswith("row 1's prompt is text") and '"role": "user"' in text
    assert "\n" not in text


def test_get_reward_alone_and_no_dataset(tokenizer, tmp_path):
    """75.2: TASK a name alone takes the environment's get_reward() as the reward; without
    --prompts each row is an empty user message that reset() fills (TRL's dataset-free mode);
    an environment without get_reward and no reward function is refused in one line, one whose
    get_reward is a property says so (90). No reward function is called before an episode ends
    (no probe)."""
    from eligibility.lm.config import FinetuneConfig
    from eligibility.lm.usertask import make_task

    tokenizer.save_pretrained(tmp_path / "model")
    unpaid = "\n\nclass Unpaid(Counter):\n    get_reward = None\n"
    unpaid += "\n\nclass Held(Counter):\n    @property\n    def get_reward(self):\n"
    unpaid += "        return 1.0\n"
    (tmp_path / "counter.py").write_text(ENV + unpaid)
    (tmp_path / "noisy.py").write_text(
        "from pathlib import Path\n\ndef noisy(completions, **kw):\n"
        "    Path(__file__).with_suffix('.called').touch()\n    return [0.0] * len(completions)\n"
    )
    given = {"model": str(tmp_path / "model"), "prompts_per_batch": 3}

    def config(task: str, env: str) -> FinetuneConfig:
        return FinetuneConfig(task=task, environment_factory=f"{tmp_path / 'counter.py'}:{env}",
                              **given)  # fmt: skip

    task = make_task(config("count", "Counter"))
    try:
        assert len(task.prompts) == 3
        assert "(from 0)" in tokenizer.decode(list(task.world(0).prompt))
    finally:
        task.close()
    with pytest.raises(ValueError, match="no reward: give reward functions"):
        make_task(config("count", "Unpaid"))
    with pytest.raises(ValueError) as err:  # 90: it read "no reward … give get_reward()"
        make_task(config("count", "Held"))
    assert "get_reward is a property, not a method: TRL calls env.get_reward()" in str(err.value)
    make_task(config(f"{tmp_path / 'noisy.py'}:noisy", "Counter")).close()
    assert not (tmp_path / "noisy.called").exists()
