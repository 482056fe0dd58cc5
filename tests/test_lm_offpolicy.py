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
from eligibility.lm.objective import loss as first_loss  # noqa: E402
from eligibility.lm.objective import reuse_loss  # noqa: E402
from eligibility.torch import options  # noqa: E402

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


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(8, 3, generator=g, dtype=torch.float64) - 0.1
    lp = (old + 0.3 * torch.randn(8, 3, generator=g, dtype=torch.float64)).requires_grad_(True)
    ref = -torch.rand(8, 3, generator=g, dtype=torch.float64) - 0.1
    m = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]] * 2, dtype=torch.bool)
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    return old, lp, ref, m, r


def _settings(**kw):
    return dict(
        group_size=4, baseline="rloo", scale="none", aggregation="sequence-sum",
        max_completion_length=3, kl="reward-to-go", beta=0.1,
    ) | kw  # fmt: skip


def test_reuse_loss_default_is_the_product_weight_and_logs_trls_names():
    """The default further step: −(1/N) Σᵢ sg(sᵢ) Σₜ ℓᵢ,ₜ (Aᵢ − β Kᵢ,ₜ), s = Πₜ exp(ℓ − ℓ_old),
    RLOO A, K the KL still ahead of token t at θ (a plain loop over the tokens)."""
    old, lp, ref, m, r = _batch()
    value, diag = reuse_loss(lp, old, r, m, **_settings(), ref_logps=ref, ratio="sequence",
                             clip=None)  # fmt: skip
    want = lp.new_zeros(())
    for i in range(8):
        grp = r[4 * (i // 4) : 4 * (i // 4) + 4]
        a = float(r[i] - (grp.sum() - r[i]) / 3)
        s = math.exp(sum(float(lp[i, t].detach() - old[i, t]) for t in range(3) if m[i, t]))
        for t in range(3):
            if m[i, t]:
                k = sum(float(lp[i, u].detach() - ref[i, u]) for u in range(t, 3) if m[i, u])
                want = want - s * (a - 0.1 * k) * lp[i, t] / 8
    (got,) = torch.autograd.grad(value, lp)
    (ref_grad,) = torch.autograd.grad(want, lp)
    torch.testing.assert_close(got, ref_grad)
    assert tuple(diag) == (
        "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
        "ratio/mean", "ratio/min", "ratio/max",
    )  # fmt: skip
    assert set(diag) == set(OFF_POLICY_COLUMNS)


@pytest.mark.parametrize("kl", options.names("kl"))
@pytest.mark.parametrize(
    "choice",
    [{}, {"aggregation": "token-mean"}, {"baseline": "mean", "scale": "group-std"},
     {"aggregation": "constant", "ratio": "token", "clip": 0.2}],
    ids=["defaults", "token-mean", "grpo-advantage", "constant-token-clip"],
)  # fmt: skip
def test_a_reuse_step_at_theta_old_is_the_first_steps_update(kl, choice):
    """At θ = θ_old every ratio is 1: the further step's gradient is the on-policy loss's
    (:func:`loss`, held against the exact gradient by the check), for every KL row."""
    _, lp, ref, m, r = _batch(1)
    kw = _settings(kl=kl) | {k: v for k, v in choice.items() if k not in ("ratio", "clip")}
    scorable = torch.tensor([True] * 7 + [False])
    first, _ = first_loss(lp, r, m, **kw, ref_logps=ref, scorable=scorable)
    ratio, clip = choice.get("ratio", "sequence"), choice.get("clip")
    again, _ = reuse_loss(lp, lp.detach(), r, m, **kw, ref_logps=ref, scorable=scorable,
                          ratio=ratio, clip=clip)  # fmt: skip
    want, got = (torch.autograd.grad(v, lp)[0] for v in (first, again))
    torch.testing.assert_close(got, want)


def test_k_epochs_with_the_default_kl_train():
    """K = 2 with the default KL (β > 0): the reference log-probs reach the reuse step."""
    out = finetune(FinetuneConfig(**{**KW, "beta": 0.02}, max_updates=1, epochs_per_batch=2))
    row = out.history[-1]
    assert row["kl"] is not None and math.isfinite(row["loss"])
    assert row["ratio/max"] > row["ratio/min"]


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
    ],
)
def test_bad_settings_name_the_flag(kw, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        FinetuneConfig(**{**KW, **kw})
