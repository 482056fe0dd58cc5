"""The examples of examples/check/sequence/ written from formulas against the options they are.

``kl_placements.py`` and ``rloo.py`` write their losses out by hand; here each one that an
option of ``eligibility.torch`` names is called on the same on-policy batch as that option, and
the loss values and the gradients with respect to the log-probs must agree. (The frameworks'
own configurations are checked through their own code: ``check --framework``,
tests/test_check_frameworks_peers.py.)
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eligibility.torch import (  # noqa: E402
    group_advantages,
    sequence_reinforce_loss,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "check" / "sequence"


def example(name: str):
    spec = importlib.util.spec_from_file_location(f"seq_example_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def synthetic_batch(seed: int = 0, groups: int = 3, g: int = 4, width: int = 6):
    """An on-policy batch of the sequence contract with random rewards and a reference."""
    gen = torch.Generator().manual_seed(seed)
    n = groups * g
    lengths = torch.randint(1, width + 1, (n, 1), generator=gen)
    mask = (torch.arange(width) < lengths).float()
    logps = (-2 * torch.rand(n, width, generator=gen)) * mask
    ref = (logps + 0.3 * torch.randn(n, width, generator=gen)) * mask
    batch = SimpleNamespace(
        completion_mask=mask,
        rewards=torch.rand(n, generator=gen).round(decimals=1),
        group_size=g,
        old_logps=logps.clone(),
        ref_logps=ref,
        beta=0.1,
        max_completion_length=width + 2,
    )
    return logps, batch


def lab_batch():
    from eligibility.lab.sequence import get_problem

    p = get_problem("kl")
    lp, batch = p.on_policy(p.sample(3, np.random.default_rng(1)))
    return lp.detach(), batch


def ours(
    logps, batch, *, aggregation, baseline="mean", scale=None, eps=1e-4, kl="k3", ratio=True,
    normaliser=None, advantages=None,
):  # fmt: skip
    a = advantages
    if a is None:
        a = group_advantages(
            batch.rewards, batch.group_size, baseline=baseline, scale=scale, eps=eps
        )
    return sequence_reinforce_loss(
        logps, a, batch.completion_mask, aggregation=aggregation,
        max_completion_length=batch.max_completion_length, normaliser=normaliser, kl=kl,
        beta=batch.beta, ref_logps=batch.ref_logps,
        old_logps=batch.old_logps if ratio else None,
    )  # fmt: skip


def shaped_rloo(batch):
    m = batch.completion_mask
    kl = ((batch.old_logps - batch.ref_logps) * m).sum(1)
    return group_advantages(batch.rewards - batch.beta * kl, batch.group_size)


CASES = {
    **{
        f"kl_placements:{k}_in_loss": (lambda lp, b, k=k: ours(
            lp, b, aggregation="sequence-sum", baseline="rloo", kl=k, ratio=False))
        for k in ("k1", "k2", "k3")
    },
    "kl_placements:k1_reward_to_go": lambda lp, b: ours(
        lp, b, aggregation="sequence-sum", baseline="rloo", kl="reward-to-go", ratio=False),
    "rloo:loss": lambda lp, b: ours(
        lp, b, aggregation="sequence-sum", advantages=shaped_rloo(b), kl="none", ratio=False),
    "rloo:loss_token_budget": lambda lp, b: ours(
        lp, b, aggregation="constant", advantages=shaped_rloo(b), kl="none", ratio=False),
    "rloo:no_kl": lambda lp, b: ours(
        lp, b, aggregation="sequence-sum", baseline="rloo", kl="none", ratio=False),
}  # fmt: skip


def _value_and_grad(fn, logps, batch):
    x = logps.detach().clone().requires_grad_()
    value = fn(x, batch)
    (g,) = torch.autograd.grad(value, x)
    return value.item(), g


@pytest.mark.parametrize("make", [synthetic_batch, lab_batch], ids=["synthetic", "lab-kl"])
def test_every_framework_configuration_equals_our_option(make):
    logps, batch = make()
    modules = {}
    for name, our_fn in CASES.items():
        file, fn_name = name.split(":")
        mod = modules.setdefault(file, example(file))
        theirs = getattr(mod, fn_name)
        v_theirs, g_theirs = _value_and_grad(theirs, logps, batch)
        v_ours, g_ours = _value_and_grad(our_fn, logps, batch)
        assert v_ours == pytest.approx(v_theirs, rel=2e-5, abs=1e-6), name
        assert torch.allclose(g_ours, g_theirs, rtol=2e-5, atol=1e-6), name


def test_the_table_covers_every_configuration_with_a_claim():
    # every public loss of the framework files is either claimed here or has no option of ours
    unclaimed = {
        "kl_placements:k1_per_token_reward",  # k1 as a per-token reward without the to-go sum
    }
    for file in ("kl_placements", "rloo"):
        mod = example(file)
        for fn in dir(mod):
            if fn.startswith("_") or not callable(getattr(mod, fn)) or fn[0].isupper():
                continue
            if getattr(getattr(mod, fn), "__module__", None) != mod.__name__:
                continue
            name = f"{file}:{fn}"
            assert name in CASES or name in unclaimed, name
