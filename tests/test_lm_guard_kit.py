"""The wreck guard replayed on runs of the real-model kit, as ``finetune`` logged them.

``bench/results/lm_guard_kit_*.json`` (``bench/lm/lm_guard.py``) keep the metrics rows of
SmolLM2-135M-Instruct runs on the kit's tasks: the tuning tasks ``add`` and ``capital`` with the
guard off (the whole trajectory: seed 0, which the rule was chosen on, and seed 1) and the
held-out tasks ``antonym`` and ``multiply`` with the guard on, as a user runs them; and the
held-out ``antonym`` with ``--dtype bfloat16`` on an AMD EPYC's native bf16 (another path than
the held-out record's), the ``--lr 1e-3`` wreck and a default-rate learner, with the guard off.
Each run is stepped through :func:`~eligibility.lm.watches.wreck` one update at a time at the
pretrained default ``--max-kl`` (1), as the trainer steps it. What each run is (a wreck, a
learner, a run that never moved) is read from its rows by what a user sees: the held-out
evaluations and the batch rewards, not by the guard's rule.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eligibility.lm import watches

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
TUNING = sorted(RESULTS.glob("lm_guard_kit_tuning*.json"))  # seed 0, and seed 1
HELD_OUT = RESULTS / "lm_guard_kit_heldout.json"
BF16 = RESULTS / "lm_guard_kit_bf16.json"
MAX_KL = 1.0  # the pretrained default
T_MAX = 16  # the runs' T_max: the user task's default (no --max-completion-length given)


def _runs(path):
    return json.loads(path.read_text())["runs"]


def _stop(rows):
    """The update at which the guard first fires on ``rows``, replayed in order, or None."""
    for n in range(1, len(rows) + 1):
        if watches.wreck(rows[:n], MAX_KL, t_max=T_MAX) is not None:
            return rows[n - 1]["update"]
    return None


def _kind(run):
    """What the run did, by its rewards alone.

    ``still``: every batch at the floor and no gradient at any update (nothing moved); ``learned``:
    its last held-out reward above 0 and its last 3 batches' mean above its first batch's;
    ``wrecked``: its last two held-out evaluations at 0 and its last 3 batches at the floor,
    after a gradient (a batch above the floor) that did not teach."""
    rows = run["rows"] + run.get("resume", {}).get("rows", [])
    floor = min(r["min_reward"] for r in rows)
    evals = [r["eval_reward"] for r in rows if r["eval_reward"] is not None]
    last = [r["mean_reward"] for r in rows[-3:]]
    if all(r["mean_reward"] == floor and r["grad_norm"] == 0 for r in rows):
        return "still"
    if evals and evals[-1] > 0 and sum(last) / 3 > rows[0]["mean_reward"]:
        return "learned"
    if evals[-2:] == [0, 0] and all(m == floor for m in last):
        return "wrecked"
    return "other"


def _table(*paths):
    return [(run["name"], run) for path in paths for run in _runs(path)]


MISSED: dict[str, str] = {}
"""Wrecks the guard does not stop, each with what it does not see (none, since rambling is read:
``capital`` at 1e-3, whose every reply ran to T_max from update 2, seeds 0 and 1)."""


@pytest.mark.parametrize(("name", "run"), _table(*TUNING), ids=[n for n, _ in _table(*TUNING)])
def test_on_the_tuning_tasks_the_guard_stops_the_wrecks_and_no_learner(name, run):
    kind, stop = _kind(run), _stop(run["rows"])
    assert kind in ("still", "learned", "wrecked"), name
    if kind in ("still", "learned"):
        assert stop is None, (name, kind, stop)
    else:
        assert (stop is None) == (name in MISSED), (name, kind, stop)


def test_the_tuning_tasks_hold_wrecks_learners_and_runs_that_never_moved():
    """The rule had each kind to tell apart: the wrecks at 1e-3 and 3e-4 on ``add`` (stopped at
    update 3), the learners at the default rate (surprisal down to 0.22 and 0.30 of its highest,
    the batch reward up), and runs whose every reward was 0 from the start (no gradient)."""
    kinds = {name: (_kind(run), _stop(run["rows"])) for name, run in _table(*TUNING)}
    assert kinds["add_reward_1e-3_0_off"] == ("wrecked", 3)
    assert kinds["add_reward_3e-4_0_off"] == ("wrecked", 3)
    assert kinds["add_reward_def_0_off"] == ("learned", None)
    assert kinds["capital_reward_def_0_off"] == ("learned", None)
    assert kinds["capital_correct_1e-3_0_off"] == ("still", None)
    # rambling: every reply at T_max and wrong from update 2; the surprisal did not collapse
    assert kinds["capital_reward_1e-3_0_off"] == ("wrecked", 3)
    assert kinds["capital_reward_1e-3_1_off"] == ("wrecked", 3)
    assert kinds["capital_reward_3e-4_0_off"] == ("learned", None)  # at T_max, not wrong


EVERY = (*TUNING, HELD_OUT, BF16)


@pytest.mark.parametrize(("name", "run"), _table(*EVERY), ids=[n for n, _ in _table(*EVERY)])
def test_rambling_fires_on_the_wrecks_that_ramble_and_no_learner(name, run):
    """The rule alone: on the tuning wrecks it was chosen for (update 3), and, checked after,
    on the held-out 1e-3 wrecks at the updates the guard stops them (6, 10); on the bf16 wreck
    its shortfall's share was chosen on (6), and on ``add`` at 1e-3 seed 1 (replies of 15.2–16
    tokens at the floor) at update 12, where the collapse stops it too; on no learner and no run
    that never moved."""
    rows = run["rows"]
    first = next(
        (
            rows[n - 1]["update"]
            for n in range(1, len(rows) + 1)
            if watches.rambling(rows[:n], T_MAX)
        ),
        None,
    )
    expected = {
        "capital_reward_1e-3_0_off": 3,
        "capital_reward_1e-3_1_off": 3,
        "antonym_correct_1e-3_0_on": 6,
        "multiply_reward_1e-3_0_on": 10,
        "add_reward_1e-3_1_off": 12,
        "antonym_correct_1e-3_0_off_bf16": 6,
    }
    assert first == expected.get(name), name
    if _kind(run) in ("still", "learned"):
        assert first is None, name


@pytest.mark.parametrize(("name", "run"), _table(HELD_OUT), ids=[n for n, _ in _table(HELD_OUT)])
def test_on_the_held_out_tasks_the_replay_is_the_live_runs_verdict(name, run):
    """The guard as the run met it: a run it stopped exited 2 at the update the replay fires
    (its last logged row), its resume at ``--lr 1e-5`` ran to its end (exit 0 or 1: no target
    reached); a run it left alone ran on, and the replay is silent on it too."""
    stop = _stop(run["rows"])
    if run["exit"] == 2:
        assert stop == run["rows"][-1]["update"], name
        assert "looks wrecked" in run["guard"], name
        assert run["resume"]["exit"] in (0, 1) and len(run["resume"]["rows"]) > 0, name
    else:
        assert stop is None and run["guard"] is None, name
    if _kind(run) == "learned":
        assert run["exit"] != 2, name


def test_on_the_held_out_tasks_the_wrecks_stop_and_the_learners_run_on():
    """Checked after the rule was chosen: ``antonym`` at 1e-3 stops at update 6 (within the
    6 updates of the docs' command), ``multiply`` at 1e-3 with the shaped reward at update 10;
    the default-rate runs that learned ran their 12 updates unstopped."""
    kinds = {name: (_kind(run), run["exit"], _stop(run["rows"])) for name, run in _table(HELD_OUT)}
    assert kinds["antonym_correct_1e-3_0_on"] == ("wrecked", 2, 6)
    assert kinds["multiply_reward_1e-3_0_on"] == ("wrecked", 2, 10)
    assert kinds["antonym_correct_def_0_on"] == ("learned", 0, None)
    assert kinds["multiply_reward_def_0_on"] == ("learned", 0, None)
    assert kinds["multiply_correct_1e-3_0_on"] == ("still", 0, None)  # no right sample: no step


@pytest.mark.parametrize(("name", "run"), _table(BF16), ids=[n for n, _ in _table(BF16)])
def test_in_bf16_the_guard_stops_the_wreck_and_no_learner(name, run):
    kind, stop = _kind(run), _stop(run["rows"])
    assert kind in ("learned", "wrecked"), name
    assert (stop is None) == (kind == "learned"), (name, kind, stop)


def test_the_bf16_wreck_stops_at_the_update_the_recorded_one_does():
    """``antonym`` at ``--lr 1e-3``, seed 0: stopped at update 6 in the held-out record (live);
    on this record's bf16 kernels (mean lengths 11.5, 2.56, 3.31, 15.25, 15.6, 16.0) at 6 too,
    within the 6 updates of the docs' command, where "every reply at T_max" and the collapse of
    the batch reward (3 batches at the floor) would have waited to update 7. The bf16 learner
    at the default rate (held-out exact match 0.12, 0.35, 0.41) runs on."""
    bf16 = dict(_table(BF16))
    recorded = dict(_table(HELD_OUT))
    assert _stop(recorded["antonym_correct_1e-3_0_on"]["rows"]) == 6
    wreck, learner = bf16["antonym_correct_1e-3_0_off_bf16"], bf16["antonym_correct_def_0_off_bf16"]
    assert (_kind(wreck), _stop(wreck["rows"])) == ("wrecked", 6)
    assert (_kind(learner), _stop(learner["rows"])) == ("learned", None)
    assert all(r["mean_length"] < T_MAX for r in wreck["rows"][:5])  # no batch at T_max by 5
    assert json.loads(BF16.read_text())["meta"]["dtype"] == "bfloat16"
