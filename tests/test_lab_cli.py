"""``eligibility lab``: JSON for scripts, a table for a person, a plot, one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from eligibility.cli import main
from eligibility.lab import get_problem


def test_json_has_every_field_per_case(capsys):
    rc = main(["lab", "--problem", "bandit-bernoulli", "--samples", "60", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["config"]["problem"] == "bandit-bernoulli" and out["config"]["samples"] == 60
    cases = out["cases"]
    assert [c["baseline"] for c in cases] == [
        "none",
        "moving-average",
        "batch-mean",
        "rloo",
        "value",
    ]
    exact = get_problem("bandit-bernoulli").exact["logits"]
    for c in cases:
        for key in (
            "problem",
            "baseline",
            "exact",
            "mean",
            "max_abs_z",
            "variance",
            "variance_ratio",
            "biased",
            "z",
            "stderr",
            "z_threshold",
            "passed",
            "bias",
        ):
            assert key in c, key
        np.testing.assert_allclose(c["exact"], exact)
        assert c["biased"] == (c["baseline"] == "batch-mean")
        assert len(c["mean"]) == len(c["z"]) == 2
    assert cases[0]["variance_ratio"] == 1.0
    assert out["all_unbiased_passed"] is True
    assert out["problems"][0]["J"] == pytest.approx(get_problem("bandit-bernoulli").J)


def test_text_table_and_plot(tmp_path, capsys):
    png = tmp_path / "figs" / "lab.png"
    # the bandit at the least N: the table and the picture are the same code for every problem
    # (the short corridor's long episodes took half the test; the lab's runs: test_lab_estimator)
    rc = main(["lab", "--problem", "bandit-logits", "--samples", "30", "--plot", str(png)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "bandit-logits" in out and "rloo" in out and "✓ unbiased" in out
    assert "unbiased cases pass their z-test" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in png.parent.iterdir()] == ["lab.png"]  # no temp file left behind


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--problem", "nope"], "unknown problem 'nope'"),
        (["--samples", "5"], "samples must be at least 30"),
        (["--episodes-per-batch", "1"], "--episodes-per-batch) must be at least 2"),
        (["--format", "xml"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    try:
        rc = main(["lab", *argv])
    except SystemExit as err:  # argparse errors exit from inside the parser
        rc = err.code
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and err.count("\n") == 1
