"""`eligibility check --sequence` against verl's own advantage and aggregation functions.

verl's ``verl.trainer.ppo.core_algos`` (``compute_grpo_outcome_advantage``,
``compute_rloo_outcome_advantage``, ``agg_loss``) is called unchanged inside the user's loss:
losses we did not write, held against the exact gradient. verl's own requirements (ray,
transformers < 5.11, vllm-era pins) do not install beside this project's, so it is no extra
of ``pyproject.toml``; its pure-torch core installs without them, and ``make ci`` and
``make nightly`` put it in ``.venv/peers`` (``make peers``) and run this module with it:

    make peers && PYTHONPATH=src:.venv/peers .venv/bin/python -m pytest -m slow \
        tests/test_check_sequence_peers.py

Slow (seconds per check): never in the default suite. Where verl cannot be imported the tests
fail, saying how to install it; they are never skipped.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from eligibility.check import check


def _core_algos():
    """verl's ``core_algos``, imported when a test runs (collection never needs verl)."""
    try:
        return importlib.import_module("verl.trainer.ppo.core_algos")
    except ImportError as err:  # a failure that says what to do, never a skip
        pytest.fail(
            f"verl is not importable ({err}); run `make peers` and put .venv/peers on "
            "PYTHONPATH, as `make ci` does"
        )


pytestmark = pytest.mark.slow


def _outcome(batch):
    """verl's token-level rewards: the outcome on the last real token."""
    m = batch.completion_mask
    last = (m.sum(1).long() - 1).unsqueeze(1)
    return torch.zeros_like(m).scatter(1, last, batch.rewards.unsqueeze(1)), m


def verl_loss(estimator: str, mode: str, **kwargs):
    """A loss(logps, batch) made of verl's functions: its advantage, ratio 1 on-policy, agg_loss."""

    core_algos = _core_algos()

    def loss(logps, batch):
        rewards, m = _outcome(batch)
        index = batch.group_ids.numpy()
        if estimator == "grpo":
            adv, _ = core_algos.compute_grpo_outcome_advantage(rewards, m, index, **kwargs)
        else:
            adv, _ = core_algos.compute_rloo_outcome_advantage(rewards, m, index)
        ratio = torch.exp(logps - batch.old_logps)  # 1 on-policy; its gradient is ∇ℓ
        return core_algos.agg_loss(-adv * ratio, m, mode)

    return loss


CASES = {
    # (estimator, loss_agg_mode, kwargs) → verdicts on length, difficulty
    ("rloo", "seq-mean-token-sum", ()): {
        "length": ("unbiased", None),
        "difficulty": ("unbiased", None),
    },
    ("grpo", "token-mean", ()): {
        "length": ("biased", "std-normalised, batch-dependent-normaliser"),
        "difficulty": ("biased", "std-normalised, batch-dependent-normaliser"),
    },
    ("grpo", "seq-mean-token-mean", (("norm_adv_by_std_in_grpo", False),)): {
        "length": ("biased", "length-normalised"),
        "difficulty": ("biased", "length-normalised"),
    },
    ("grpo", "seq-mean-token-sum", (("norm_adv_by_std_in_grpo", False),)): {
        "length": ("scaled", "self-including-mean"),
        "difficulty": ("scaled", "self-including-mean"),
    },
}


@pytest.mark.parametrize("case", list(CASES), ids=lambda c: f"{c[0]}-{c[1]}-{len(c[2])}")
def test_verls_own_functions_get_their_verdicts(case):
    estimator, mode, kwargs = case
    for problem, want in CASES[case].items():
        report = check(verl_loss(estimator, mode, **dict(kwargs)), sequence=True, problem=problem)
        (p,) = report.problems
        assert (p.verdict, p.diagnosis) == want, (case, problem, p)
        assert np.isfinite(p.max_abs_z)
