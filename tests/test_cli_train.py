"""The train / evaluate / plot commands, in process and (for kill -9) in a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from eligibility.cli import main


@pytest.mark.curve
def test_train_evaluate_plot(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(
        [
            "train",
            "CartPole-v1",
            "--out",
            str(out),
            "--total-steps",
            "400",
            "--eval-every",
            "2",
            "--eval-episodes",
            "3",
            "--hidden",
            "16",
            "--no-progress",
        ]
    )
    assert rc == 0
    assert "run in" in capsys.readouterr().out
    for name in ("config.json", "metrics.csv", "learning_curve.png", "checkpoint.safetensors"):
        assert (out / name).is_file(), name
    assert list(out.glob("events.out.tfevents.*"))
    saved = json.loads((out / "config.json").read_text())
    assert saved["hidden"] == [16] and saved["env_id"] == "CartPole-v1"
    assert saved["lr"] == 0.05  # untouched options come from Config.for_env

    assert main(["evaluate", str(out), "--episodes", "7", "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 7 and {"mean_return", "std_return"} <= set(summary)
    assert main(["evaluate", str(out), "--episodes", "3", "--sample", "--seed", "2"]) == 0
    assert "sample episodes" in capsys.readouterr().out

    png = tmp_path / "both.png"
    assert main(["plot", str(out), str(out), "--plot", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG" and capsys.readouterr().out == f"{png}\n"
    assert main(["plot", str(out), "--out", str(tmp_path / "figs"), "--format", "json"]) == 0
    written = json.loads(capsys.readouterr().out)["plot"]
    assert written == str(tmp_path / "figs" / "learning_curve.png")
    assert (tmp_path / "figs" / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["train", "CartPol-v1"], "did you mean CartPole-v1"),
        (["train", "CartPole-v1", "--lr", "-1"], "--lr) must be"),
        (["train", "CartPole-v1", "--gamma", "2"], "--gamma) must be"),
        (["train", "CartPole-v1", "--baseline", "median"], "invalid choice"),
        (["train", "CartPole-v1", "--episodes-per-batch", "x"], "invalid int value"),
        (["train"], "ENV_ID"),
        (["train", "--resume", "/nonexistent/run"], "no training run in"),
        (["evaluate", "/nonexistent/run"], "no training run"),
        (["evaluate", "/nonexistent", "--episodes", "0"], "--episodes"),
        (["plot", "/nonexistent/run"], "not a run directory"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, needle, capsys):
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse errors
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_kill_9_then_resume(tmp_path):
    """A run killed with SIGKILL at an arbitrary moment resumes from intact files."""
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "eligibility.cli",
        "train",
        "CartPole-v1",
        "--out",
        str(out),
        "--checkpoint-every",
        "1",
        "--eval-every",
        "0",
        "--total-steps",
        "100000000",
        "--no-progress",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = (
                (out / "metrics.csv").read_text().count("\n")
                if (out / "metrics.csv").exists()
                else 0
            )
            if rows >= 3:  # the header and two rows: checkpointed, and into the third update
                break
            time.sleep(0.05)
        else:
            pytest.fail("the run did not get going")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    rows_before = (out / "metrics.csv").read_text().count("\n") - 1
    rc = main(["train", "--resume", str(out), "--total-steps", "1", "--no-progress"])
    assert rc == 0  # config and checkpoint load; the total is reached, so it stops at once
    lines = (out / "metrics.csv").read_text().splitlines()
    assert (
        rows_before - 1 <= len(lines) - 1 <= rows_before
    )  # at most the row after the checkpoint dropped
    assert all(len(r.split(",")) == len(lines[0].split(",")) for r in lines)
    steps = int(lines[-1].split(",")[1])
    rc = main(["train", "--resume", str(out), "--total-steps", str(steps + 2000), "--no-progress"])
    assert rc == 0
    lines2 = (out / "metrics.csv").read_text().splitlines()
    assert len(lines2) > len(lines) and steps < int(lines2[-1].split(",")[1]) <= steps + 2000
    updates = [int(r.split(",")[0]) for r in lines2[1:]]
    assert updates == list(range(1, len(updates) + 1))  # no gap, no duplicate


def test_torch_backend_run_evaluates(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [
        "train",
        "CartPole-v1",
        "--backend",
        "torch",
        "--out",
        str(out),
        "--no-progress",
        "--total-steps",
        "600",
        "--eval-every",
        "0",
        "--baseline",
        "value",
    ]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["evaluate", str(out), "--episodes", "4", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 4
    assert main(["train", "CartPole-v1", "--out", str(out), "--no-progress"]) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_a_target_asked_for_and_not_reached_is_exit_1(tmp_path, capsys):
    """Exit 1 is the command's own negative finding (docs/cli.md); no target asked: exit 0."""
    argv = ["train", "CartPole-v1", "--total-steps", "200", "--eval-every", "100", "--no-progress"]
    argv += ["--eval-episodes", "2", "--hidden", "none", "--format", "json"]
    assert main([*argv, "--out", str(tmp_path / "a"), "--target-return", "400"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["solved"] is False and result["target_return"] == 400.0
    assert result["config"]["hidden"] == []  # --hidden none: a linear policy
    assert main([*argv, "--out", str(tmp_path / "b"), "--target-return", "inf"]) == 0
    assert json.loads(capsys.readouterr().out)["target_return"] is None  # no target


def test_continuous_head_choices_are_the_box_heads(capsys):
    """--continuous-head offers BOX_HEADS' names: in --help, the CLI's error and from_dict's."""
    import typing

    from eligibility.reinforce.config import Config
    from eligibility.reinforce.heads import BOX_HEADS

    names = list(BOX_HEADS)
    assert typing.get_args(typing.get_type_hints(Config)["continuous_head"]) == tuple(names)
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "--continuous-head {" + ",".join(names) + "}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["train", "Pendulum-v1", "--continuous-head", "gamma"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and all(repr(n) in err for n in names)
    with pytest.raises(ValueError, match="--continuous-head.* " + ", ".join(names) + ", got"):
        Config.from_dict({"env_id": "Pendulum-v1", "continuous_head": "gamma"})
