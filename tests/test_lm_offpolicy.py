"""`finetune --epochs-per-batch K`: K optimiser steps on each generation batch, off-policy after
the first, with TRL's ratio diagnostics logged.

Truth: the ratio diagnostics recomputed by hand from the run's own model before and after a
step (a plain loop over the tokens), and the config's bad-input rule.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from eligibility.lm import FinetuneConfig, finetune  # noqa: E402
from eligibility.lm.metrics import OFF_POLICY_COLUMNS  # noqa: E402
from eligibility.lm.objective import reuse_loss  # noqa: E402

KW = dict(
    task="repeat",
    d_model=16,
    n_head=2,
    n_layer=1,
    group_size=4,
    prompts_per_batch=2,
    eval_every=0,
    target_accuracy=None,
    progress=False,
    lr=3e-2,
    beta=0.0,
)


def test_reuse_loss_default_is_the_product_weight_and_logs_trls_names():
    """The default further step: −(1/N) Σᵢ sg(sᵢ) Aᵢ Σₜ ℓᵢ,ₜ, s = Πₜ exp(ℓ − ℓ_old), RLOO A."""
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(8, 3, generator=g, dtype=torch.float64) - 0.1
    lp = (old + 0.3 * torch.randn(8, 3, generator=g, dtype=torch.float64)).requires_grad_(True)
    m = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]] * 2, dtype=torch.bool)
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    rloo = torch.tensor(  # the batch's advantages, as the first step's loss handed them on
        [float(r[i] - (r[4 * (i // 4) : 4 * (i // 4) + 4].sum() - r[i]) / 3) for i in range(8)],
        dtype=torch.float64,
    )
    value, diag = reuse_loss(
        lp, old, rloo, m, aggregation="sequence-sum", max_completion_length=3,
        ratio="sequence", clip=None,
    )  # fmt: skip
    want = lp.new_zeros(())
    for i in range(8):
        grp = r[4 * (i // 4) : 4 * (i // 4) + 4]
        a = float(r[i] - (grp.sum() - r[i]) / 3)
        s = math.exp(sum(float(lp[i, t].detach() - old[i, t]) for t in range(3) if m[i, t]))
        want = want - s * a * sum(lp[i, t] for t in range(3) if m[i, t]) / 8
    (got,) = torch.autograd.grad(value, lp)
    (ref,) = torch.autograd.grad(want, lp)
    torch.testing.assert_close(got, ref)
    assert tuple(diag) == (
        "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
        "ratio/mean", "ratio/min", "ratio/max",
    )  # fmt: skip
    assert set(diag) == set(OFF_POLICY_COLUMNS)


@pytest.mark.slow
def test_one_epoch_logs_no_ratio_and_k_epochs_log_trls_diagnostics():
    one = finetune(FinetuneConfig(**KW, max_updates=2))
    assert all(one.history[-1][c] is None for c in OFF_POLICY_COLUMNS)
    k = finetune(FinetuneConfig(**KW, max_updates=2, epochs_per_batch=3, ratio="token", clip=0.2))
    row = k.history[-1]
    assert row["ratio/min"] <= row["ratio/mean"] <= row["ratio/max"]
    assert row["ratio/max"] - row["ratio/min"] > 1e-4  # θ moved away from θ_old in the batch
    assert 0 <= row["clip_ratio/region_mean"] <= 1
    assert row["clip_ratio/region_mean"] == pytest.approx(
        row["clip_ratio/low_mean"] + row["clip_ratio/high_mean"]
    )
    assert all(math.isfinite(r["loss"]) for r in k.history)


@pytest.mark.slow
def test_k_epochs_take_more_steps_than_one():
    """Same seed and batches drawn from the same first policy: after one update, K = 2 has
    moved the weights farther (two optimiser steps on the batch instead of one)."""
    start = finetune(FinetuneConfig(**{**KW, "lr": 1e-12}, max_updates=1)).model
    one = finetune(FinetuneConfig(**KW, max_updates=1)).model
    two = finetune(FinetuneConfig(**KW, max_updates=1, epochs_per_batch=2)).model

    def dist(m):
        return sum(
            float((p - q).detach().norm() ** 2)
            for p, q in zip(m.parameters(), start.parameters(), strict=True)
        )

    assert dist(two) > 1.2 * dist(one)


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"epochs_per_batch": 0}, "epochs_per_batch (--epochs-per-batch) must be >= 1"),
        ({"clip": 1.5}, "clip (--clip) must be in (0, 1)"),
        ({"epochs_per_batch": 2, "beta": 0.1}, "0 with --epochs-per-batch > 1"),
    ],
)
def test_bad_settings_name_the_flag(kw, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        FinetuneConfig(**{**KW, **kw})
