"""The guard on the weights a run ends with (``lm.sound``): a wreck in the last update is a stop.

Update u's batch is drawn from the weights before its step, so the weights the last update
leaves are judged by batches drawn from them when the run ends (two, the guard's window). Held
here: a run whose last update collapses exits 2 with one line, whether its budget (one update
included) or a signal ends it, its wreck checkpointed and its result the last weights the guard
judged sound, which a run stopped at that update exports byte for byte (one process for many);
the per-batch alarm that says which weights were sound; and no false alarm: the sound runs
recorded on the real-model kit, judged at every budget with the batches drawn after it as the
looks, never fire, where the wrecks are caught at the budget before the guard's window met them.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import sys
from pathlib import Path

import pytest

from eligibility import runs
from eligibility.cli import main
from eligibility.lm import watches
from eligibility.lm.config import FinetuneConfig
from eligibility.lm.edge.checkpoint import saved_updates
from eligibility.lm.learner import Diverged
from eligibility.lm.trainer import finetune

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
KIT_RUNS = sorted(RESULTS.glob("lm_guard_kit_*.json"))


def _row(update, mean_reward, entropy, **kw):
    return dict(update=update, mean_reward=mean_reward, min_reward=0.0, entropy=entropy,
                kl=kw.pop("kl", None), loss=0.0, grad_norm=1.0, mean_length=2.0,
                accuracy=mean_reward, frac_reward_zero_std=0.0, **kw)  # fmt: skip


# -- the rule -------------------------------------------------------------------------------


def test_the_last_update_is_judged_by_the_batches_drawn_after_it():
    """Rows 1–5 sound, row 6 collapsed (the weights of update 5), the run ending at 6: the rows
    alone hold one collapsed batch (no verdict: the guard's window is 2); with the looks drawn
    from the last weights the window is met, at the first look. A look at the floor but sure
    of itself at 0.5 of the highest surprisal is no collapse; two looks that recovered are none."""
    kept = [(1, 0.03, 2.2), (2, 0.0, 2.4), (3, 0.0, 2.6), (4, 0.0, 2.5), (5, 0.03, 2.4)]
    rows = [_row(u, r, h) for u, r, h in [*kept, (6, 0.0, 0.27)]]
    assert watches.wreck(rows, 1.0) is None
    collapsed = [_row(6, 0.0, 0.3), _row(6, 0.0, 0.25)]
    what, _ = watches.wreck_at_the_end(rows, collapsed, 1.0)
    assert "surprisal was 0.27, 0.3 nats per token over the last 2 batches" in what
    assert watches.wreck_at_the_end(rows, [_row(6, 0.0, 1.3)] * 2, 1.0) is None
    assert watches.wreck_at_the_end(rows[:5], [_row(5, 0.0, 2.3)] * 2, 1.0) is None
    # one update: the looks alone make the window (the initial batch is the highest surprisal)
    one = [_row(1, 0.03, 2.2)]
    assert watches.wreck_at_the_end(one, [_row(1, 0.0, 0.1)] * 2, 1.0) is not None
    assert watches.wreck_at_the_end(one, [_row(1, 0.0, 0.1)], 1.0) is None
    assert watches.wreck_at_the_end(one, [_row(1, 0.0, 0.1)] * 2, math.inf) is None  # guard off


def test_a_batch_alone_raises_an_alarm_by_each_rules_own_terms():
    """alarmed: the entropy rule's terms (below 0.4 of the highest, at the floor), rambling's
    (at T_max, at the floor), a value that is not finite, the batch reward under the collapse's
    bar past --max-kl; each term alone is not one."""
    base = [_row(1, 0.03, 2.0), _row(2, 0.1, 2.0)]
    assert not watches.alarmed(base, 1.0)
    assert watches.alarmed([*base, _row(3, 0.0, 0.7)], 1.0)
    assert not watches.alarmed([*base, _row(3, 0.0, 0.8)], 1.0)  # 0.4 of 2, not below
    assert not watches.alarmed([*base, _row(3, 0.1, 0.7)], 1.0)  # sure of right replies
    assert not watches.alarmed([*base, _row(3, 0.0, 0.7)], math.inf)  # the guard off
    assert watches.alarmed([*base, {**_row(3, 0.1, 2.0), "loss": math.nan}], math.inf)
    long = [
        {**r, "mean_length": n}
        for r, n in zip([*base, _row(3, 0.0, 2.0)], (12, 12, 16), strict=True)
    ]
    assert watches.alarmed(long, 1.0, t_max=16) and not watches.alarmed(long, 1.0)
    level = [_row(u, 0.3, 2.0, kl=2.0) for u in range(1, 4)]
    assert watches.alarmed([*level, _row(4, 0.0, 2.0, kl=2.0), _row(5, 0.0, 2.0, kl=2.0),
                            _row(6, 0.05, 2.0, kl=2.0)], 1.0)  # fmt: skip
    assert not watches.alarmed([*level, *(_row(u, 0.05, 2.0, kl=0.5) for u in (4, 5, 6))], 1.0)


def _kit_runs():
    out = []
    for path in KIT_RUNS:
        for run in json.loads(path.read_text())["runs"]:
            out.append((f"{path.stem} {run['name']}", run["rows"]))
    return out


def _looks(rows):
    """Rows as looks: batches drawn, not evaluated."""
    return [{**r, "eval_reward": None, "eval_accuracy": None} for r in rows]


def _learned(rows):
    """A learner by what a user sees: its last held-out reward above 0, its last batches above
    its first (the kit replay's reading, ``tests/test_lm_guard_kit.py``)."""
    evals = [r["eval_reward"] for r in rows if r["eval_reward"] is not None]
    last = [r["mean_reward"] for r in rows[-3:]]
    return bool(evals) and evals[-1] > 0 and sum(last) / 3 > rows[0]["mean_reward"]


def test_on_the_kits_recorded_runs_no_learner_ends_wrecked_at_any_budget():
    """Every run of SmolLM2-135M-Instruct recorded on the kit, cut at every budget N: the next
    two batches (drawn from the weights of updates N and N + 1: what the looks draw, and one
    step on) as the looks. No learner is called wrecked at any budget; every wreck the guard
    stops at update s is called one at the end of a run cut at s − 1 (its window not yet met
    there), the ``antonym`` 1e-3 wreck at 5 (the docs' run of 6 updates is stopped)."""
    named = _kit_runs()
    assert len(named) >= 15
    learners = wrecks = 0
    for name, rows in named:
        stop = next((n for n in range(1, len(rows) + 1)
                     if watches.wreck(rows[:n], 1.0, t_max=16) is not None), None)  # fmt: skip
        ends = [
            n
            for n in range(1, len(rows) - 1)
            if watches.wreck_at_the_end(rows[:n], _looks(rows[n : n + 2]), 1.0, t_max=16)
            is not None
        ]
        if _learned(rows):
            learners += 1
            assert stop is None and not ends, (name, ends)
        elif stop is not None and stop > 2:
            wrecks += 1
            assert ends and ends[0] <= stop - 1, (name, stop, ends)
        if "antonym_correct_1e-3_0_on" in name:
            assert ends[0] <= 5, (name, ends)
    assert learners >= 5 and wrecks >= 5, (learners, wrecks)


# -- runs -----------------------------------------------------------------------------------


def _tiny(tmp_path, **kw):
    """The built-in model at --lr 0.3 (300x its default), the guard on (--max-kl 0.05): its
    entropy collapses onto wrong replies in update 8's step (row 9 at 0.03 nats against 2.3)."""
    fixed = dict(lr=0.3, max_kl=0.05, max_updates=8, d_model=8, n_head=2, n_layer=1,
                 group_size=2, prompts_per_batch=2, max_completion_length=3, eval_every=3,
                 checkpoint_every=100, progress=False, out=str(tmp_path / "run"))  # fmt: skip
    return FinetuneConfig("repeat", **{**fixed, **kw})


def _argv(config: FinetuneConfig) -> list[str]:
    return ["finetune", "repeat", "--lr", str(config.lr), "--max-kl", str(config.max_kl),
            "--max-updates", str(config.max_updates), "--d-model", "8", "--n-head", "2",
            "--n-layer", "1", "--group-size", "2", "--prompts-per-batch", "2",
            "--max-completion-length", "3", "--eval-every", "3", "--checkpoint-every", "100",
            "--seed", str(config.seed), "--no-progress", "--out", str(config.out)]  # fmt: skip


@pytest.mark.parametrize(
    ("updates", "more"),
    [pytest.param(8, {}, marks=pytest.mark.slow), (1, {"lr": 3.0, "seed": 6})],
    ids=["the budget after 8", "one update"],
)
def test_a_run_whose_last_update_collapses_exits_2_with_one_line(tmp_path, capsys, updates, more):
    """main today ran these to exit 0 (no window of 2 collapsed rows before the end): now one
    line, exit 2, naming the rate and what to do; every update logged, the last checkpointed
    (the resume's)."""
    config = _tiny(tmp_path, max_updates=updates, **more)
    assert main(_argv(config)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert f"the weights the run ends with look wrecked after update {updates}" in err[0]
    assert "entropy collapsed onto wrong replies" in err[0] and "--lr" in err[0]
    assert f"Stopped with update {updates} checkpointed" in err[0]
    assert len(runs.read_metrics(tmp_path / "run")) == updates
    assert saved_updates(tmp_path / "run" / runs.CHECKPOINT) == updates


def test_with_a_target_or_a_signal_the_end_is_judged_the_same(tmp_path):
    """A target not reached and a SIGTERM after update 8 of 14 end the run at 8: the guard's
    stop, not the signal's (the weights the run would keep are the wreck)."""
    with pytest.raises(Diverged, match="ends with look wrecked after update 8"):
        finetune(_tiny(tmp_path / "a", target_accuracy=0.95))

    def stop(row):
        if row["update"] == 8:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(Diverged, match="ends with look wrecked after update 8"):
        finetune(_tiny(tmp_path / "b", max_updates=14, target_accuracy=None), callback=stop)
    assert len(runs.read_metrics(tmp_path / "b" / "run")) == 8


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    """A tiny random Llama with its tokenizer (an exported model/), four prompts."""
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).parent))
    from lm_user import hf_kit

    home = tmp_path_factory.mktemp("kit")
    hf_kit.model_dir(home / "base")
    (home / "train.txt").write_text("copy a\ncopy b\ncopy a b\ncopy c d\n")
    return home


def _hf(kit: Path, out: Path, updates: int, right_until: int):
    """A run of the random Llama at --lr 1 (1000x its default) whose reward (odd lengths) is
    right until update ``right_until``, 0 for every reply after: update 1's step makes the
    policy sure of its replies (surprisal 0.39 against 2.54), which is learning while they are
    right and a collapse onto wrong replies after."""
    from _user_code_here import rewards_here

    done = {"update": 0}

    def odd(prompts, completions, **kw):
        right = done["update"] < right_until
        return [float(len(c) % 2) if right else 0.0 for c in completions]

    def seen(row):
        done["update"] = row["update"]

    config = FinetuneConfig(
        "repeat", prompts=str(kit / "train.txt"), model=str(kit / "base"),
        max_completion_length=3, group_size=2, prompts_per_batch=2, eval_every=0, max_kl=0.05,
        target_accuracy=None, progress=False, dtype="float32", lr=1.0, checkpoint_every=100,
        max_updates=updates, out=str(out),
    )  # fmt: skip
    with rewards_here():
        return finetune(config, reward_funcs=[odd], callback=seen)


def _logits(model_dir: Path):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        return model(torch.tensor([[1, 8, 4, 5, 6, 7, 9, 10, 11, 3]])).logits


@pytest.mark.parametrize(
    ("updates", "kept"),
    [pytest.param(3, 1, marks=pytest.mark.slow), (1, 0)],
    ids=["after 3", "one update"],
)
def test_the_result_is_the_last_sound_update_and_the_wreck_is_checkpointed(
    kit, tmp_path, updates, kept
):
    """The reward wrong from update 2 on (3 updates) or after update 1 (1 update): the batch of
    update 2 was right, so the weights of update 1 were sound; the looks at the end are at the
    floor and collapsed. model/ is then the model a run stopped at update ``kept`` exports (the
    base model for 0), to the logit; the checkpoint holds the last update, not model/'s weights,
    and ``--resume`` goes on from it."""
    import torch

    right_until = 2 if updates == 3 else 1
    with pytest.raises(Diverged) as info:
        _hf(kit, tmp_path / "run", updates, right_until)
    said = str(info.value)
    which = "the initial weights" if kept == 0 else f"the weights of update {kept}"
    assert f"the result (model/) holds {which}, the last the guard judged sound" in said, said
    truth = kit / "base"
    if kept:
        _hf(kit, tmp_path / "straight", kept, right_until).task.close()  # sound to its end
        truth = tmp_path / "straight" / "model"
    result = _logits(tmp_path / "run" / "model")
    assert torch.equal(result, _logits(truth))
    assert saved_updates(tmp_path / "run" / runs.CHECKPOINT) == updates
    from safetensors.torch import load_file

    from eligibility.lm.edge.checkpoint import named_weights

    record = named_weights(tmp_path / "run" / runs.CHECKPOINT)
    assert record is not None  # the weights beside Adam's state, in the slot it names
    wreck = load_file(tmp_path / "run" / record["file"])
    exported = load_file(tmp_path / "run" / "model" / "model.safetensors")
    assert wreck.keys() == exported.keys()
    assert any(not torch.equal(wreck[k], exported[k]) for k in wreck)
    assert re.search(r"--resume \S+ with a smaller --lr", said)


def test_a_resume_after_a_stop_at_the_end_is_judged_from_the_rows_after_it():
    """Watches.replay with the checkpoint's guard_since: the rows before it (the run's highest
    surprisal, the collapsed row that met the looks) neither stop the resume at once nor set the
    highest surprisal it is held to; a collapse after it still stops it, judged from there."""
    config = FinetuneConfig("repeat", max_kl=1.0, target_accuracy=0.9)
    rows = [_row(u, r, h) for u, r, h in [(1, 0.03, 2.2), (2, 0.0, 2.9), (3, 0.03, 2.5),
                                           (4, 0.0, 0.3)]]  # fmt: skip
    w = watches.Watches()
    w.replay(config, rows, since=4)
    assert (w.warned_wreck, w.since) == (False, 4)
    w.check_wreck(config, _row(5, 0.0, 0.25), 5)  # collapsed against 2.9, not against 0.3
    w.check_wreck(config, _row(6, 0.0, 0.3), 6)
    with pytest.raises(Diverged, match="after update 8: the entropy collapsed"):
        for u, h in [(7, 0.1), (8, 0.1)]:
            w.check_wreck(config, _row(u, 0.0, h), u)
    before = watches.Watches()  # without it, the rows before are judged: stopped at once
    before.replay(config, rows)
    with pytest.raises(Diverged, match="after update 5"):
        before.check_wreck(config, _row(5, 0.0, 0.25), 5)


@pytest.mark.slow
def test_a_run_stopped_at_its_end_is_resumed_and_judged_anew_from_there(tmp_path):
    """Stopped at the end of update 8, resumed with a smaller --lr to update 10: the rows that
    stopped it (the run's highest surprisal, 2.3, before the collapse) do not stop the resume
    at once; its rows are judged from update 9, as after a stop mid-run."""
    with pytest.raises(Diverged, match="ends with look wrecked after update 8"):
        finetune(_tiny(tmp_path))
    result = finetune(_tiny(tmp_path, lr=1e-3, max_updates=10), resume=tmp_path / "run")
    assert result.updates == 10
    assert len(runs.read_metrics(tmp_path / "run")) == 10


def test_the_kept_weights_are_those_the_last_sound_batch_was_drawn_from():
    """SoundWeights, stepped as the trainer steps it (after each update's row, the weights now
    those of that update): the batch of update u was drawn from the weights of update u − 1, so
    a batch without an alarm keeps them; an alarm keeps the ones before. Held against copies
    taken as the weights were set."""
    import torch

    from eligibility.lm.policy import Policy
    from eligibility.lm.sound import SoundWeights

    model = torch.nn.Linear(3, 2)
    policy = Policy(model)
    seen = {}

    def set_to(update):
        with torch.no_grad():
            model.weight.fill_(float(update))
        seen[update] = {k: v.clone() for k, v in model.state_dict().items()}

    set_to(0)
    kept = SoundWeights(policy, 0)
    assert kept.kept_update is None and kept.restore() is None
    for update, alarm, expected in [(1, False, 0), (2, False, 1), (3, True, 1), (4, True, 1)]:
        set_to(update)  # the step of update u, then its row (drawn from u − 1)
        kept.step(alarm, update)
        assert kept.kept_update == expected
    set_to(5)
    assert kept.restore() == 1
    assert all(torch.equal(v, seen[1][k]) for k, v in model.state_dict().items())
    assert SoundWeights(policy, 0, enabled=False).kept_update is None
