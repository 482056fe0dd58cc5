"""Defaults that need no warning: ``--importance-sampling auto`` corrects the bf16 sampler's
mismatch where the run computes in bf16 (``lm.importance.resolved``), so the mismatch watch
says nothing about a choice the run made; an uncorrected bf16 run given so still hears it."""

from __future__ import annotations

import json
import warnings

import pytest

from eligibility.lm.config import FinetuneConfig
from eligibility.lm.edge import device
from eligibility.lm.importance import resolved
from eligibility.lm.watches import Watches

ROW = {"sampling/ratio/outside_0.9_1.1": 0.066}  # the kit's antonym at update 1, bf16


def _warned(config: FinetuneConfig) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Watches().check_mismatch(config, dict(ROW), 1)
    return [str(w.message) for w in caught]


def test_the_mismatch_watch_is_silent_where_a_correction_weights_the_update():
    """Default (auto) in bf16: corrected, silent; given as none (or a cut sampler, which auto
    leaves uncorrected): the warning, naming the correction and float32."""
    assert _warned(FinetuneConfig("repeat", dtype="bfloat16")) == []
    for mode in ("sequence-mask", "token-truncate"):
        assert _warned(FinetuneConfig("repeat", dtype="bfloat16", importance_sampling=mode)) == []
    said = _warned(FinetuneConfig("repeat", dtype="bfloat16", importance_sampling="none"))
    assert len(said) == 1 and "6.6% of the sampled tokens" in said[0]
    assert "--importance-sampling sequence-mask" in said[0] and "--dtype float32" in said[0]
    cut = _warned(FinetuneConfig("repeat", dtype="bfloat16", top_k=5))
    assert len(cut) == 1 and "the uncut policy on the cut sampler's" in cut[0]
    # float32 leaves auto uncorrected: a mismatch there (none is expected) is still said
    assert len(_warned(FinetuneConfig("repeat", dtype="float32"))) == 1


@pytest.mark.parametrize(
    ("given", "native", "dtype", "mode"),
    [
        (dict(), True, "float32", "none"),  # the tiny model's column: float32
        (dict(dtype="bfloat16"), False, "bfloat16", "sequence-mask"),
        (dict(dtype="bfloat16", top_k=3), True, "bfloat16", "none"),  # cut: trained as cut
        (dict(dtype="bfloat16", importance_sampling="none"), True, "bfloat16", "none"),
        (dict(dtype="auto"), True, "bfloat16", "sequence-mask"),  # a bf16-native machine
        (dict(dtype="auto"), False, "float32", "none"),  # an AVX2 one
    ],
)
def test_a_run_saves_the_correction_auto_resolved_to(
    tmp_path, monkeypatch, given, native, dtype, mode
):
    """The run resolves ``auto`` where it resolves ``--dtype`` (on its device) and saves both."""
    from eligibility.lm.trainer import finetune

    monkeypatch.setattr(device, "native_bf16", lambda where: native)
    out = tmp_path / "run"
    kw = dict(max_updates=1, d_model=8, n_head=2, n_layer=1, group_size=4, prompts_per_batch=2)
    kw |= dict(max_completion_length=3, eval_every=0, progress=False, target_accuracy=None)
    finetune(FinetuneConfig("repeat", out=str(out), **kw, **given))
    saved = json.loads((out / "config.json").read_text())
    assert (saved["dtype"], saved["importance_sampling"]) == (dtype, mode)
    want = resolved("auto", dtype, "top_k" not in given)
    assert mode == (want if given.get("importance_sampling") is None else "none")


def test_a_resume_keeps_the_correction_the_run_chose(tmp_path, capsys):
    """``auto`` given again (or left out) leaves the saved mode; another mode is refused."""
    from eligibility.cli import main

    out = tmp_path / "run"
    tiny = ["--d-model", "8", "--n-head", "2", "--n-layer", "1", "--group-size", "4",
            "--prompts-per-batch", "2", "--max-completion-length", "3", "--eval-every", "0",
            "--no-progress", "--target-accuracy", "none"]  # fmt: skip
    first = ["finetune", "repeat", "--dtype", "bfloat16", "--max-updates", "1", "--out", str(out)]
    assert main([*first, *tiny]) == 0
    again = ["finetune", "--resume", str(out), "--no-progress"]
    assert main([*again, "--max-updates", "2"]) == 0
    assert main([*again, "--max-updates", "3", "--importance-sampling", "auto"]) == 0
    assert main([*again, "--max-updates", "4", "--dtype", "auto"]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["importance_sampling"] == "sequence-mask"
    capsys.readouterr()
    assert main([*again, "--max-updates", "5", "--importance-sampling", "none"]) == 2
    assert "--importance-sampling 'none' (the run has 'sequence-mask')" in capsys.readouterr().err
