"""eligibility.torch bernoulli_reinforce_loss and normal_reinforce_loss against autograd."""

from __future__ import annotations

import itertools
import math

import pytest

torch = pytest.importorskip("torch")

from torch.distributions import Bernoulli, Normal  # noqa: E402

from _torch_reference import reduce_reference  # noqa: E402
from eligibility.distributions import bernoulli as core_bernoulli  # noqa: E402
from eligibility.distributions import normal as core_normal  # noqa: E402
from eligibility.torch import bernoulli_reinforce_loss, normal_reinforce_loss  # noqa: E402

REDUCTIONS = ("mean", "sum", "none")


def _event_sum(x, k):
    return x.sum(dim=tuple(range(-k, 0))) if k else x


def _grads(out, leaves, g_out):
    return torch.autograd.grad(out, leaves, torch.ones_like(out) if g_out is None else g_out)


# --- bernoulli ------------------------------------------------------------------------------


def _bernoulli_inputs(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = (2 * torch.randn(shape, generator=g, dtype=torch.float64)).requires_grad_(True)
    y = (torch.rand(shape, generator=g, dtype=torch.float64) < 0.5).to(torch.float64)
    return z, y, g


@pytest.mark.parametrize("event_dims", [0, 1])
@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bernoulli_matches_autograd(reduction, masked, event_dims):
    """Both entropy coefficients in one test, a failure's message naming its β."""
    for beta in (0.0, 0.3):
        z, y, g = _bernoulli_inputs((4, 3))
        lead = (4, 3)[: 2 - event_dims]
        adv = torch.randn(lead, generator=g, dtype=torch.float64)
        mask = torch.rand(lead, generator=g) > 0.3 if masked else None
        g_out = torch.randn(lead, generator=g, dtype=torch.float64) if reduction == "none" else None
        kw = {"reduction": reduction, "mask": mask, "entropy_coef": beta, "event_dims": event_dims}
        got = bernoulli_reinforce_loss(z, y, adv, **kw)
        (g_got,) = _grads(got, [z], g_out)
        d = Bernoulli(logits=z)
        ell = -adv * _event_sum(d.log_prob(y), event_dims)
        ell = ell - beta * _event_sum(d.entropy(), event_dims)
        want = reduce_reference(ell, reduction, mask)
        (g_want,) = _grads(want, [z], g_out)
        torch.testing.assert_close(
            got, want, atol=1e-12, rtol=0, msg=lambda m, c=beta: f"β = {c}: {m}"
        )
        torch.testing.assert_close(
            g_got, g_want, atol=1e-12, rtol=0, msg=lambda m, c=beta: f"β = {c}: {m}"
        )


def test_bernoulli_backward_is_the_core_eligibility_and_passes_gradcheck():
    z, y, g = _bernoulli_inputs((6,), seed=1)
    adv = torch.randn(6, generator=g, dtype=torch.float64)
    out = bernoulli_reinforce_loss(z, y, adv, reduction="sum", entropy_coef=0.2)
    (gz,) = torch.autograd.grad(out, z)
    zd = z.detach()
    want = -adv * core_bernoulli.score_logits(zd, y) - 0.2 * core_bernoulli.entropy_grad_logits(zd)
    torch.testing.assert_close(gz, want, atol=1e-14, rtol=0)
    mask = torch.tensor([True, False, True, True, False, True])

    def f(z):
        return bernoulli_reinforce_loss(z, y, adv, reduction="none", mask=mask, entropy_coef=0.2)

    assert torch.autograd.gradcheck(f, (z,))


def test_bernoulli_bad_inputs_raise():
    z, y, _ = _bernoulli_inputs((2, 3))
    y2 = y.clone()
    y2[1, 0] = 0.5
    with pytest.raises(ValueError, match=r"actions\[1, 0\] = 0.5 is not 0 or 1"):
        bernoulli_reinforce_loss(z, y2, 1.0)
    with pytest.raises(ValueError, match="must have the shape of logits"):
        bernoulli_reinforce_loss(z, y[0], 1.0)
    with pytest.raises(ValueError, match="event_dims must lie in 0…2"):
        bernoulli_reinforce_loss(z, y, 1.0, event_dims=3)
    zi = z.detach().clone()
    zi[0, 2] = -math.inf if y[0, 2] == 1 else math.inf
    with pytest.raises(ValueError, match=r"step \[0, 2\] give a non-finite"):
        bernoulli_reinforce_loss(zi, y, 1.0)
    # Padding may hold anything.
    pad = torch.ones(2, 3, dtype=torch.bool)
    pad[0, 2] = pad[1, 0] = False
    zi[1, 0] = math.nan
    out = bernoulli_reinforce_loss(zi.requires_grad_(True), y2, 1.0, mask=pad)
    (gz,) = torch.autograd.grad(out, zi)
    assert torch.isfinite(out) and torch.isfinite(gz).all() and (gz[~pad] == 0).all()


# --- normal ---------------------------------------------------------------------------------


@pytest.mark.parametrize("event_dims", [0, 1])
@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_normal_matches_autograd(reduction, masked, event_dims):
    """Both entropy coefficients and both parametrisations of the scale in one test, a
    failure's message naming its case."""
    for beta, param in itertools.product((0.0, 0.3), ("scale", "log_scale")):
        case = f"β = {beta}, {param}"
        g = torch.Generator().manual_seed(2)
        mu = torch.randn(5, 3, generator=g, dtype=torch.float64).requires_grad_(True)
        # A state-independent log-std of shape (D,), as policies often have: gradients sum
        # over steps.
        s_raw = 0.3 * torch.randn(3, generator=g, dtype=torch.float64)
        sig = (s_raw if param == "log_scale" else s_raw.exp()).requires_grad_(True)
        y = torch.randn(5, 3, generator=g, dtype=torch.float64)
        lead = (5, 3)[: 2 - event_dims]
        adv = torch.randn(lead, generator=g, dtype=torch.float64)
        mask = torch.rand(lead, generator=g) > 0.3 if masked else None
        g_out = torch.randn(lead, generator=g, dtype=torch.float64) if reduction == "none" else None
        kw = {"reduction": reduction, "mask": mask, "entropy_coef": beta, "event_dims": event_dims}
        got = normal_reinforce_loss(mu, y, adv, **{param: sig}, **kw)
        g_got = _grads(got, [mu, sig], g_out)
        sigma = sig.exp() if param == "log_scale" else sig
        d = Normal(mu, sigma)
        ell = -adv * _event_sum(d.log_prob(y), event_dims)
        ell = ell - beta * _event_sum(d.entropy(), event_dims)
        want = reduce_reference(ell, reduction, mask)
        g_want = _grads(want, [mu, sig], g_out)
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0, msg=lambda m, c=case: f"{c}: {m}")
        for x, w in zip(g_got, g_want, strict=True):
            assert x.shape == w.shape, case
            torch.testing.assert_close(x, w, atol=1e-12, rtol=0, msg=lambda m, c=case: f"{c}: {m}")


def test_normal_backward_is_the_core_eligibility_and_passes_gradcheck():
    g = torch.Generator().manual_seed(3)
    mu = torch.randn(6, generator=g, dtype=torch.float64).requires_grad_(True)
    sigma = (0.5 + torch.rand(6, generator=g, dtype=torch.float64)).requires_grad_(True)
    y = torch.randn(6, generator=g, dtype=torch.float64)
    adv = torch.randn(6, generator=g, dtype=torch.float64)
    out = normal_reinforce_loss(mu, y, adv, scale=sigma, reduction="sum", entropy_coef=0.1)
    g_mu, g_sigma = torch.autograd.grad(out, (mu, sigma))
    m, s = mu.detach(), sigma.detach()
    torch.testing.assert_close(g_mu, -adv * core_normal.score_loc(m, s, y), atol=1e-14, rtol=0)
    want = -adv * core_normal.score_scale(m, s, y) - 0.1 * core_normal.entropy_grad_scale(s)
    torch.testing.assert_close(g_sigma, want, atol=1e-14, rtol=0)
    mask = torch.tensor([True, True, False, True, False, True])
    log_s = sigma.detach().log().requires_grad_(True)

    def f(mu, log_s):
        return normal_reinforce_loss(
            mu, y, adv, log_scale=log_s, reduction="none", mask=mask, entropy_coef=0.1
        )

    assert torch.autograd.gradcheck(f, (mu, log_s))


def test_normal_actions_and_advantages_get_no_gradient():
    mu = torch.zeros(3, requires_grad=True)
    y = torch.randn(3, requires_grad=True)
    adv = torch.ones(3, requires_grad=True)
    out = normal_reinforce_loss(mu, y, adv, scale=torch.ones(3))
    g_mu, g_y, g_adv = torch.autograd.grad(out, (mu, y, adv), allow_unused=True)
    assert g_mu is not None and g_y is None and g_adv is None


def test_normal_bad_inputs_raise():
    mu, y = torch.zeros(2, 3), torch.zeros(2, 3)
    with pytest.raises(ValueError, match="exactly one of scale"):
        normal_reinforce_loss(mu, y, 1.0)
    with pytest.raises(ValueError, match="exactly one of scale"):
        normal_reinforce_loss(mu, y, 1.0, scale=torch.ones(3), log_scale=torch.zeros(3))
    with pytest.raises(ValueError, match="broadcast to the actions' shape"):
        normal_reinforce_loss(torch.zeros(4, 2, 3), y, 1.0, scale=torch.ones(3))
    sigma = torch.ones(2, 3)
    sigma[1, 1] = 0.0
    with pytest.raises(ValueError, match=r"step \[1, 1\] has a non-finite"):
        normal_reinforce_loss(mu, y, 1.0, scale=sigma)
    with pytest.raises(ValueError, match=r"step \[1\] has a non-finite"):
        normal_reinforce_loss(
            mu, y, 1.0, scale=-sigma.abs(), event_dims=1, mask=torch.tensor([False, True])
        )
