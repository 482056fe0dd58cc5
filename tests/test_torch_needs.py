"""Every row's declared needs, read by one check for both sequence losses; one composer for both.

Truth: the option table's own declarations (``Option.needs``/``takes``), the two public losses
called as a user calls them, and autograd for the on-policy equality (float64).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from eligibility.torch import (  # noqa: E402
    group_advantages,
    kl_penalised_rewards,
    off_policy_loss,
    options,
    sequence_reinforce_loss,
)
from eligibility.torch._compose import KL_PLACEMENTS  # noqa: E402

N, T = 4, 3
ARGUMENT = {
    "max_completion_length": "max_completion_length",
    "even_rows": "logps",
    "ref_logps": "ref_logps",
}


def _batch(n: int = N):
    g = torch.Generator().manual_seed(n)
    lp = (-torch.rand(n, T, generator=g, dtype=torch.float64) - 0.1).requires_grad_(True)
    ref = -torch.rand(n, T, generator=g, dtype=torch.float64) - 0.1
    m = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1], [1, 1, 0]][:n], dtype=torch.bool)
    a = torch.linspace(-1.0, 1.0, n, dtype=torch.float64)
    return lp, ref, m, a


def _both(lp, ref, m, a, **kw):
    """Both public losses on one batch (off-policy at θ = θ_old)."""
    return (
        sequence_reinforce_loss(lp, a, m, ref_logps=ref, **kw),
        off_policy_loss(lp, lp.detach(), a, m, ref_logps=ref, **kw),
    )


def _met(row: options.Option) -> dict:
    """Arguments that meet every need of ``row`` (and its ``takes``)."""
    kw: dict = {"aggregation": row.name} if row.kind == "aggregation" else {"kl": row.name}
    if "max_completion_length" in row.needs:
        kw["max_completion_length"] = T
    if "normaliser" in row.takes:
        kw["normaliser"] = 5.0
    if row.kind == "kl":
        kw["beta"] = 0.1
    return kw


AGGREGATIONS = list(options.rows("aggregation").values())


@pytest.mark.parametrize("row", AGGREGATIONS, ids=lambda r: r.name)
def test_every_aggregation_through_both_losses_with_its_needs_met(row):
    lp, ref, m, a = _batch()
    for value in _both(lp, ref, m, a, **_met(row)):
        assert torch.isfinite(value)


NEEDY = [(r, need) for r in (*AGGREGATIONS, *options.rows("kl").values()) for need in r.needs]


@pytest.mark.parametrize("row, need", NEEDY, ids=lambda x: getattr(x, "name", x))
@pytest.mark.parametrize("loss", ["sequence_reinforce_loss", "off_policy_loss"])
def test_a_missing_need_is_one_value_error_naming_the_argument(row, need, loss):
    lp, ref, m, a = _batch(n=N + 1 if need == "even_rows" else N)
    kw = _met(row)
    if need == "ref_logps":
        ref = None
    elif need == "max_completion_length":
        del kw["max_completion_length"]
    if row.kind == "kl" and row.placement == "reward":
        with pytest.raises(ValueError, match="kl_penalised_rewards"):
            _both(lp, ref, m, a, **kw)
        return
    call = {
        "sequence_reinforce_loss": lambda: sequence_reinforce_loss(lp, a, m, ref_logps=ref, **kw),
        "off_policy_loss": lambda: off_policy_loss(lp, lp.detach(), a, m, ref_logps=ref, **kw),
    }[loss]
    with pytest.raises(ValueError, match=ARGUMENT[need]) as err:
        call()
    assert f"{row.kind}={row.name!r} needs" in str(err.value)


def test_off_policy_constant_sum_without_t_max_names_it_not_a_type_error():
    lp, _, m, a = _batch()
    with pytest.raises(ValueError, match="max_completion_length"):
        off_policy_loss(lp, lp.detach(), a, m, aggregation="constant-sum")


@pytest.mark.parametrize("loss", ["sequence", "off"])
def test_a_normaliser_only_the_rows_that_read_it_take(loss):
    lp, _, m, a = _batch()
    readers = [r.name for r in AGGREGATIONS if "normaliser" in r.takes]
    assert readers == ["token-mean", "token-sum-norm"]
    with pytest.raises(ValueError, match="normaliser is the divisor of"):
        if loss == "sequence":
            sequence_reinforce_loss(lp, a, m, aggregation="sequence-sum", normaliser=4.0)
        else:
            off_policy_loss(lp, lp.detach(), a, m, aggregation="sequence-sum", normaliser=4.0)


@pytest.mark.parametrize("kl", KL_PLACEMENTS)
def test_on_policy_off_policy_loss_is_sequence_reinforce_loss_for_every_kl_row(kl):
    """At θ = θ_old the off-policy loss (the product ratio, unclipped) has the value and the
    gradient of the on-policy loss in its ratio form, KL included wherever it is placed (three
    aggregations in one test, a failure naming the aggregation)."""
    lp, ref, m, a = _batch()
    for aggregation in ("sequence-sum", "token-mean", "sequence-mean"):
        kw = dict(aggregation=aggregation, kl=kl, beta=0.3, ref_logps=ref)
        on = sequence_reinforce_loss(lp, a, m, old_logps=lp.detach(), **kw)
        off = off_policy_loss(lp, lp.detach(), a, m, **kw)
        (g_on,) = torch.autograd.grad(on, lp)
        (g_off,) = torch.autograd.grad(off, lp)
        assert off.item() == pytest.approx(on.item(), rel=1e-12, abs=1e-15), aggregation
        msg = lambda text, g=aggregation: f"{g}: {text}"  # noqa: E731
        torch.testing.assert_close(g_off, g_on, rtol=1e-12, atol=1e-15, msg=msg)


def test_the_reward_placement_is_the_function_beside_group_advantages():
    """R̃ = R − β Σₜ m (ℓ − ℓ_ref), by a plain loop; then both losses take kl='none'."""
    lp, ref, m, _ = _batch()
    r = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    got = kl_penalised_rewards(r, lp, ref, m, beta=0.5)
    want = [
        float(r[i]) - 0.5 * sum(float(lp[i, t].detach() - ref[i, t]) for t in range(T) if m[i, t])
        for i in range(N)
    ]
    assert got.tolist() == pytest.approx(want, rel=1e-12)
    assert not got.requires_grad
    a = group_advantages(got, 2)
    on = sequence_reinforce_loss(lp, a, m, old_logps=lp.detach(), kl="none", beta=0.5)
    off = off_policy_loss(lp, lp.detach(), a, m, kl="none", beta=0.5)
    (g_on,) = torch.autograd.grad(on, lp)
    (g_off,) = torch.autograd.grad(off, lp)
    torch.testing.assert_close(g_off, g_on, rtol=1e-12, atol=1e-15)
