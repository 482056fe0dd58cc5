"""finetune's loss: its options are the table's rows, and ``--kl none`` means no KL term."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from eligibility.cli import main
from eligibility.lm.config import FinetuneConfig
from eligibility.torch import options

TINY = ["--d-model", "8", "--n-head", "2", "--n-layer", "1", "--group-size", "2"]
TINY += ["--prompts-per-batch", "1", "--max-updates", "1", "--eval-every", "0", "--no-progress"]


def test_kl_none_alone_runs_with_the_default_beta(tmp_path, capsys):
    """`--kl none` with β at its default: no KL term (no reference model), not a refusal."""
    out = tmp_path / "run"
    assert main(["finetune", "repeat", "--kl", "none", *TINY, "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["kl"] == "none"
    assert "beta must be" not in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["baseline", "scale", "aggregation", "kl"])
def test_finetune_offers_the_table_rows(kind):
    """Every row of the table is a choice of finetune's flag, and nothing else is."""
    for name in options.names(kind):
        assert getattr(FinetuneConfig("repeat", **{kind: name}), kind) == name
    with pytest.raises(ValueError, match=kind):
        FinetuneConfig("repeat", **{kind: "no-such-row"})
