"""`finetune --max-staleness k`: a sampler process draws while the learner steps.

Truth: the alternating loop of one process (k = 0 gives its metrics.csv row for row, through
the sampler's process and the channel), a second run of the same command (k = 1 is
deterministic), an uninterrupted run (a resumed one is it row for row), plain loops over the
tokens for the corrections' weights, and the process group's own errors (a peer killed, a peer
stopped) for the faults. The whole runs are slow (each starts a sampler process); the channel,
the weights and the config's rules are fast.
"""

from __future__ import annotations

import csv
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import test_lm_offpolicy  # noqa: E402
from eligibility.lm import FinetuneConfig, finetune  # noqa: E402
from eligibility.lm.channel import Channel, SyncLost, open_store  # noqa: E402
from eligibility.lm.importance import importance_weight  # noqa: E402
from eligibility.lm.mismatch import effective_sample_size  # noqa: E402

KW = {**test_lm_offpolicy.KW, "max_updates": 4}  # the tiny model on `repeat`, 8 rows an update
HERE = Path(__file__).resolve().parent
CLOCK = ("wall_s", "tokens_per_s")  # and time/*: what two runs may differ in


def _rows(out: Path) -> list[dict[str, str]]:
    with (out / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def _learned(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """Each row without its clock: what was learned."""
    return [{k: v for k, v in r.items() if k not in CLOCK and not k.startswith("time/")}
            for r in rows]  # fmt: skip


# -- the channel (fast: two ends in one process) -------------------------------------------------


def _pair(mode: str):
    """The learner's end here, the sampler's in a process of its own (tests/async_peer.py)."""
    store = open_store(60.0)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    peer = subprocess.Popen([sys.executable, str(HERE / "async_peer.py"), str(store.port), mode],
                            env=env)  # fmt: skip
    return Channel(store, 0, 60.0), peer, store


@pytest.mark.slow
def test_the_channel_carries_the_weights_and_a_batch_exactly():
    from async_peer import weights

    learner, peer, _store = _pair("echo")
    try:
        sent = weights()
        learner.send_weights(5, sent)
        back = learner.receive_object("a batch")
    finally:
        peer.kill()
    assert (back.update, back.version, back.rngs) == (6, 5, [{"state": 7}])
    assert back.drawn.keys() == sent.keys()
    for name, t in sent.items():
        assert back.drawn[name].dtype == t.dtype and torch.equal(back.drawn[name], t)


@pytest.mark.slow
def test_a_wait_that_gets_nothing_ends_at_its_bound_naming_it():
    learner, peer, _store = _pair("silent")
    learner.timeout_s = 2.0  # each wait's bound, as --weight-sync-timeout sets it
    t0 = time.monotonic()
    try:
        with pytest.raises(SyncLost) as caught:
            learner.receive_object("a batch")
    finally:
        peer.kill()
    assert time.monotonic() - t0 < 30
    said = str(caught.value)
    assert said == (
        "the learner could not receive a batch: the sampler did not answer within "
        "--weight-sync-timeout 2 s"
    )
    assert caught.value.what == "a batch"


# -- the config and the corrections (fast) -----------------------------------------------------


@pytest.mark.parametrize(
    "bad,flag",
    [
        (dict(max_staleness=-1), "--max-staleness"),
        (dict(weight_sync_timeout=0.0), "--weight-sync-timeout"),
        (dict(stale_batches="later"), "--stale-batches"),
    ],
)
def test_a_bad_async_setting_is_one_line_naming_its_flag(bad, flag):
    with pytest.raises(ValueError, match=flag):
        FinetuneConfig(**{**KW, **bad})


def _weights_case():
    g = torch.Generator().manual_seed(0)
    lp = -torch.rand(6, 4, generator=g, dtype=torch.float64) - 0.05
    lq = lp + 0.6 * torch.randn(6, 4, generator=g, dtype=torch.float64)
    m = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]] * 2, dtype=torch.bool)
    return lp, lq, m


@pytest.mark.parametrize("mode", ["exact", "token-icepop", "geometric-mask"])
def test_each_staleness_correction_is_its_formula_in_a_plain_loop(mode):
    """exact: w = Πₜ π/μ unbounded (C ignored); token-icepop: wₜ kept in [1/C, C];
    geometric-mask: w kept where (Πₜ wₜ)^(1/L) lies in [1/C, C]."""
    lp, lq, m = _weights_case()
    c = 1.5
    got = importance_weight(lp, lq, m, mode, c)
    for i in range(6):
        toks = [t for t in range(4) if m[i, t]]
        w_t = {t: math.exp(float(lp[i, t] - lq[i, t])) for t in toks}
        w = math.prod(w_t.values())
        for t in toks:
            if mode == "exact":
                want = w
            elif mode == "token-icepop":
                want = w_t[t] if 1 / c <= w_t[t] <= c else 0.0
            else:
                geo = w ** (1 / len(toks))
                want = w if 1 / c <= geo <= c else 0.0
            assert float(got[i, t]) == pytest.approx(want, rel=1e-12)


def test_exact_is_the_sequence_weight_with_no_bound():
    lp, lq, m = _weights_case()
    exact = importance_weight(lp, lq, m, "exact", 0.1)
    torch.testing.assert_close(exact, importance_weight(lp, lq, m, "sequence-truncate", math.inf))


def test_the_effective_sample_size_is_kishs_in_a_plain_loop():
    w = torch.tensor([0.2, 1.0, 3.0, 0.5], dtype=torch.float64)
    s, s2 = sum(float(x) for x in w), sum(float(x) ** 2 for x in w)
    assert float(effective_sample_size(w)) == pytest.approx(s * s / (4 * s2))


# -- whole runs (slow: each starts a sampler process) -------------------------------------------


@pytest.mark.slow
def test_k0_through_the_sampler_is_the_alternating_loop_row_for_row(tmp_path):
    finetune(FinetuneConfig(**KW, out=str(tmp_path / "sync")))
    finetune(FinetuneConfig(**KW, max_staleness=0, out=str(tmp_path / "k0")))
    sync, k0 = _rows(tmp_path / "sync"), _rows(tmp_path / "k0")
    assert _learned(sync) == _learned(k0)
    assert {r["async/staleness"] for r in k0} == {"0"}


@pytest.mark.slow
def test_k1_is_deterministic_one_step_off_and_resumes_exactly(tmp_path):
    """One step off: batch u drawn at version u − 2, so every update after the first learns a
    batch one update stale; the same command twice gives the same rows, and a run stopped
    after update 2 and resumed gives the uninterrupted run's."""
    config = dict(KW, max_staleness=1, checkpoint_every=10)
    first = finetune(FinetuneConfig(**config, out=str(tmp_path / "a")))
    finetune(FinetuneConfig(**config, out=str(tmp_path / "b")))
    a, b = _rows(tmp_path / "a"), _rows(tmp_path / "b")
    assert _learned(a) == _learned(b)
    assert [r["async/staleness"] for r in a] == ["0", "1", "1", "1"]
    assert FinetuneConfig(**config).importance_sampling == "auto"  # resolved, and saved, as:
    assert '"importance_sampling": "exact"' in (tmp_path / "a" / "config.json").read_text()
    assert first.updates == 4
    # the alternating loop, weighted as k = 1 is by default (auto: exact at k >= 1)
    finetune(FinetuneConfig(**KW, importance_sampling="exact", out=str(tmp_path / "s")))
    alternating = _learned(_rows(tmp_path / "s"))
    assert alternating[0] == _learned(a)[0] and alternating[1] != _learned(a)[1]
    # stopped after update 2 (the callback), resumed to 4
    out = tmp_path / "c"
    finetune(FinetuneConfig(**config, out=str(out)), callback=lambda row: row["update"] < 2)
    assert (out / "async-pending-2.pt").is_file()
    finetune(FinetuneConfig(**config, out=str(out)), resume=out)
    assert _learned(_rows(out)) == _learned(a)


def _sampler_pid() -> int:
    """The sampler process this one started (``python -m eligibility.lm.sampler``)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(next(x for x in status.splitlines() if x.startswith("PPid:")).split()[1])
        if ppid == os.getpid() and b"eligibility.lm.sampler" in cmd:
            return int(entry.name)
    raise AssertionError("no sampler process")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["killed", "stopped"])
def test_a_sampler_that_dies_or_hangs_ends_the_run_in_one_line_and_it_resumes(tmp_path, how):
    """Killed (SIGKILL): its socket closes and the learner's wait ends at once; stopped
    (SIGSTOP, a weight sync that never arrives): the wait ends at --weight-sync-timeout. Each is
    one line naming the wait, the cause and the update kept; the run resumes to the end."""
    out = tmp_path / "run"
    config = FinetuneConfig(**KW, max_staleness=1, checkpoint_every=1, weight_sync_timeout=3.0,
                            out=str(out))  # fmt: skip
    victims: list[int] = []

    def strike(row):
        if row["update"] == 2:
            victims.append(_sampler_pid())
            os.kill(victims[-1], signal.SIGKILL if how == "killed" else signal.SIGSTOP)

    t0 = time.monotonic()
    with pytest.raises(SyncLost) as caught:
        finetune(config, callback=strike)
    assert time.monotonic() - t0 < 60
    said = str(caught.value)
    assert "\n" not in said and "the sampler" in said
    assert ("connection closed" if how == "killed" else "--weight-sync-timeout 3 s") in said
    kept = f"the checkpoint of update 2 stays: resume with eligibility finetune --resume {out}"
    assert kept in said
    _wait_gone(victims[-1], 30)  # a stopped sampler too: the learner ends it (SIGKILL)
    result = finetune(config, resume=out)
    assert result.updates == 4 and [r["update"] for r in _rows(out)] == ["1", "2", "3", "4"]


@pytest.mark.slow
def test_ctrl_c_and_a_lost_learner_leave_no_process_waiting(tmp_path):
    """The CLI run is stopped with SIGINT (the terminal's Ctrl-C): it checkpoints, says so and
    exits, its sampler with it; a learner killed outright leaves a sampler that ends by itself
    (its peer's socket closed), within --weight-sync-timeout."""
    out = tmp_path / "run"
    args = [sys.executable, "-m", "eligibility", "finetune", "repeat", "--d-model",
            "16", "--n-head", "2", "--n-layer", "1", "--group-size", "4",
            "--prompts-per-batch", "2", "--eval-every", "0", "--max-updates", "200",
            "--max-staleness", "1", "--weight-sync-timeout", "20", "--no-progress",
            "--out", str(out)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for end in (signal.SIGINT, signal.SIGKILL):
        if end == signal.SIGKILL:
            args[args.index("--out") + 1 :] = [str(tmp_path / "killed")]
        run = subprocess.Popen(args, env=env, stderr=subprocess.PIPE, text=True)
        metrics = Path(args[-1]) / "metrics.csv"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (
            metrics.is_file() and len(metrics.read_text().splitlines()) >= 3
        ):
            time.sleep(0.2)
        children = _children(run.pid)
        assert children, "the sampler runs beside the learner"
        run.send_signal(end)
        _, err = run.communicate(timeout=120)
        if end == signal.SIGINT:
            assert run.returncode == 130, err
            assert "Traceback" not in err
        for pid in children:  # ended by the learner, or by itself once the learner is gone
            _wait_gone(pid, 60)
    again = [*args[:4], "--resume", str(out), "--max-updates", "4", "--no-progress"]
    resumed = subprocess.run(again, env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            ppid = int(next(x for x in status.splitlines() if x.startswith("PPid:")).split()[1])
            if ppid == pid:
                out.append(int(entry.name))
    return out


def _wait_gone(pid: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return
        if "\nState:\tZ" in state:
            return
        time.sleep(0.2)
    raise AssertionError(f"process {pid} still runs {seconds} s after its learner ended")


@pytest.mark.slow
def test_lora_and_top_p_run_asynchronously_and_k0_is_still_the_loop(tmp_path):
    more = dict(lora_r=2, top_p=0.9, max_updates=3)
    finetune(FinetuneConfig(**{**KW, **more}, out=str(tmp_path / "sync")))
    finetune(FinetuneConfig(**{**KW, **more}, max_staleness=0, out=str(tmp_path / "k0")))
    assert _learned(_rows(tmp_path / "sync")) == _learned(_rows(tmp_path / "k0"))
    finetune(FinetuneConfig(**{**KW, **more}, max_staleness=1, out=str(tmp_path / "k1")))
    assert [r["async/staleness"] for r in _rows(tmp_path / "k1")] == ["0", "1", "1"]


@pytest.mark.slow
def test_drop_mode_counts_what_it_drops_and_learns_nothing_older_than_k(tmp_path):
    finetune(FinetuneConfig(**KW, max_staleness=0, stale_batches="drop",
                            out=str(tmp_path / "d")))  # fmt: skip
    rows = _rows(tmp_path / "d")  # which batches drop is timing's: only the bound is certain
    assert len(rows) == 4 and {r["async/staleness"] for r in rows} == {"0"}
    assert all(int(r["async/dropped"]) >= 0 for r in rows)


def test_a_run_of_several_ranks_is_refused_in_one_line():
    from eligibility.lm.feed import Overlapped

    class _Ranks:
        world = 2

    class _Policy:
        ranks = _Ranks()

    with pytest.raises(ValueError, match="runs on one process"):
        counters = {"updates": 0, "completions": 0, "tokens": 0}
        Overlapped.start(FinetuneConfig(**KW, max_staleness=1), _Policy(), {}, [], counters, None)


# -- the correction, held by `eligibility check --off-policy` (slow: N calls a problem) ---------

FIELD = ["token-truncate", "token-icepop", "geometric-mask", "sequence-truncate", "sequence-mask"]


@pytest.mark.slow
@pytest.mark.usefixtures("check_calls_in_process")  # the same gradients, no worker round trips
@pytest.mark.parametrize("problem", ["ratio-one", "far"])
def test_the_exact_weight_is_unbiased_at_every_distance_the_check_has(problem):
    """``exact`` at no distance (θ = θ_old, μ = π_old) and at the far one (four exact steps)."""
    from eligibility.check import check

    (p,) = check(f"{HERE / 'async_losses.py'}:exact", off_policy=True, problem=problem).problems
    assert p.verdict == "unbiased", p.diagnosis


@pytest.mark.slow
@pytest.mark.usefixtures("check_calls_in_process")  # the same gradients, no worker round trips
@pytest.mark.parametrize("mode", ["exact", "none", *FIELD])
def test_the_loss_a_stale_run_steps_on_is_unbiased_with_exact_and_named_otherwise(mode):
    """The first step's loss of ``finetune`` under each ``--importance-sampling`` mode
    (tests/async_losses.py, C = 2) on the check's ``near`` problem: θ two exact steps from the
    θ_old that drew the batch, the sampler μ's log-probs as the run records them. ``exact``
    (Πₜ π_θ/μ) is unbiased; ``none`` (no weight) and each of the field's corrections is biased
    and named."""
    from eligibility.check import check

    (p,) = check(f"{HERE / 'async_losses.py'}:{mode.replace('-', '_')}", off_policy=True,
                 problem="near").problems  # fmt: skip
    if mode == "exact":
        assert p.verdict == "unbiased", p.diagnosis
    else:
        assert p.verdict == "biased" and p.diagnosis not in (None, "other"), p.diagnosis


# -- episodes: a slow world played by the sampler (slow) -----------------------------------------


class SlowCounter:
    """A TRL ``environment_factory`` world that takes 0.5 s at each reset and each call."""

    def reset(self, start=0, **kwargs):
        time.sleep(0.5)
        self.n = start
        return f" (from {start})"

    def increment(self, a: int) -> int:
        """Increment the counter.

        Args:
            a: The value to add.
        """
        time.sleep(0.5)
        self.n += int(a)
        return self.n

    def get_reward(self) -> float:
        return float(self.n == 3)


@pytest.mark.slow
def test_episodes_with_a_slow_world_lora_and_top_p_are_played_by_the_sampler(tmp_path):
    """TRL's ``environment_factory`` (its world 0.5 s a reset and a call), LoRA adapters and a
    top-p sampler, one step off: the sampler plays the episodes, the learner steps, and the
    stale update is weighted by ``--importance-sampling exact``; k = 0 is the alternating
    loop's rows."""
    import json

    from lm_user import hf_kit

    model = hf_kit.tool_model_dir(tmp_path / "model")
    rows = [{"prompt": [{"role": "user", "content": f"Reach {k}"}], "start": k} for k in (1, 2)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    kw = dict(task="zero", model=str(model), group_size=2, prompts_per_batch=1, eval_every=0,
              max_completion_length=6, max_updates=3, target_accuracy=None, progress=False,
              prompts=str(tmp_path / "rows.jsonl"), lora_r=2, top_p=0.9)  # fmt: skip
    out = {}
    for name, more in {
        "sync": {},
        "k0": dict(max_staleness=0),
        "k1": dict(max_staleness=1, importance_sampling="exact"),
    }.items():
        out[name] = tmp_path / name
        finetune(FinetuneConfig(**kw, **more, out=str(out[name])), environment_factory=SlowCounter)
    k1 = _rows(out["k1"])
    assert all(r["turns"] != "" for r in k1)  # episodes, played by the sampler
    assert [r["async/staleness"] for r in k1] == ["0", "1", "1"]
    assert _learned(_rows(out["k0"])) == _learned(_rows(out["sync"]))


def failing_reward(completions, **kwargs):
    """A TRL reward function that fails at its third batch (its calls counted in a file)."""
    calls = Path(os.environ["ASYNC_REWARD_CALLS"])
    with calls.open("a") as f:
        f.write("call\n")
    if len(calls.read_text().splitlines()) == 3:
        raise RuntimeError("the reward service is down")
    return [0.0] * len(completions)


@pytest.mark.slow
def test_a_reward_that_fails_in_the_sampler_ends_the_run_and_it_resumes(tmp_path, monkeypatch):
    """The user's reward raises in the sampler's process: the learner ends the run with the
    reward's own words (the checkpoint on disk kept), and a resume goes on to the end."""
    monkeypatch.setenv("ASYNC_REWARD_CALLS", str(tmp_path / "calls"))
    out, prompts = tmp_path / "run", tmp_path / "p.txt"
    prompts.write_text("ab\nba\n")
    more = dict(prompts_per_batch=1, prompts=str(prompts), max_completion_length=3)
    config = FinetuneConfig(**{**KW, **more}, max_staleness=1, checkpoint_every=1, out=str(out))
    with pytest.raises(ValueError, match="the reward service is down"):
        finetune(config, reward_funcs=[failing_reward])
    kept = [r["update"] for r in _rows(out)]
    assert kept and len(kept) < 4
    result = finetune(config, resume=out, reward_funcs=[failing_reward])
    assert result.updates == 4


def test_the_command_line_refuses_a_bad_staleness_in_one_line(capsys):
    from eligibility.cli import main

    with pytest.raises(SystemExit) as ended:
        main(["finetune", "repeat", "--max-staleness", "-1", "--no-progress"])
    assert ended.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--max-staleness" in err and "Traceback" not in err
