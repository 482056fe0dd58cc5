"""Second derivatives, torch.func, torch.compile, peaked-logit accuracy and advantage checks."""

from __future__ import annotations

import math

import mpmath
import pytest
import torch
import torch.nn.functional as F
from torch.func import grad, vmap

from _torch_reference import CATEGORICAL_PATHS, force_categorical_path
from eligibility.torch import (
    bernoulli_reinforce_loss,
    fused_linear_reinforce_loss,
    normal_reinforce_loss,
    reinforce_loss,
)

D = torch.float64


@pytest.fixture(params=CATEGORICAL_PATHS)
def path(request, monkeypatch):
    """Each test that takes it runs once per path of reinforce_loss (native, lean, general)."""
    force_categorical_path(request.param, monkeypatch)
    return request.param


def _cat(beta=0.0):
    torch.manual_seed(0)
    z = torch.randn(4, 5, dtype=D, requires_grad=True)
    a, A = torch.tensor([0, 1, 4, 2]), torch.randn(4, dtype=D)
    return (z,), lambda z: reinforce_loss(z, a, A, entropy_coef=beta)


def _bern(beta=0.0):
    torch.manual_seed(1)
    z = torch.randn(4, 3, dtype=D, requires_grad=True)
    y, A = torch.randint(0, 2, (4, 3)).to(D), torch.randn(4, dtype=D)
    return (z,), lambda z: bernoulli_reinforce_loss(z, y, A, event_dims=1, entropy_coef=beta)


def _normal(beta=0.0):
    torch.manual_seed(2)
    mu = torch.randn(4, 2, dtype=D, requires_grad=True)
    ls = (0.3 * torch.randn(2, dtype=D)).requires_grad_()
    y, A = torch.randn(4, 2, dtype=D), torch.randn(4, dtype=D)
    return (mu, ls), lambda mu, ls: normal_reinforce_loss(
        mu, y, A, log_scale=ls, event_dims=1, entropy_coef=beta
    )


# The categorical loss on each of its paths; the Bernoulli and normal losses have none (no
# categorical path in them: with the categorical table emptied they still run), so each runs once.
GRADCHECKED = [(_cat, p) for p in CATEGORICAL_PATHS] + [(_bern, None), (_normal, None)]


@pytest.mark.parametrize(
    ("make", "path"),
    GRADCHECKED,
    ids=[f"{m.__name__[1:]}-{p}" if p else m.__name__[1:] for m, p in GRADCHECKED],
)
@pytest.mark.parametrize("beta", [0.0, 0.3])
def test_gradcheck_and_gradgradcheck(make, path, beta, monkeypatch):
    if path is None:
        from eligibility.torch import categorical

        monkeypatch.setattr(categorical, "PATHS", ())
    else:
        force_categorical_path(path, monkeypatch)
    inputs, f = make(beta)
    assert torch.autograd.gradcheck(f, inputs)
    assert torch.autograd.gradgradcheck(f, inputs)


def _cat_A():
    torch.manual_seed(0)
    torch.randn(4, 5, dtype=D)
    return torch.randn(4, dtype=D)


def test_hessian_vector_product_through_the_loss_plus_an_l2_term(path):
    (z,), f = _cat()
    a, A = torch.tensor([0, 1, 4, 2]), _cat_A()
    v = torch.randn_like(z)
    (g,) = torch.autograd.grad(f(z) + 0.5 * (z**2).sum(), z, create_graph=True)
    (hv,) = torch.autograd.grad(g, z, v)

    def plain(z):
        return -(A * torch.log_softmax(z, -1).gather(-1, a[:, None])[:, 0]).mean()

    H = torch.autograd.functional.hessian(plain, z.detach()).reshape(z.numel(), -1)
    expected = (H @ v.reshape(-1)).reshape(z.shape) + v
    torch.testing.assert_close(hv, expected)
    assert not torch.allclose(hv, v)  # not the L2 term's contribution alone


def test_categorical_hessian_equals_autograd_of_the_plain_formula():
    (z,), f = _cat(beta=0.2)
    a, A = torch.tensor([0, 1, 4, 2]), _cat_A()

    def plain(z):
        d = torch.distributions.Categorical(logits=z)
        return -(A * d.log_prob(a)).mean() - 0.2 * d.entropy().mean()

    H1 = torch.autograd.functional.hessian(f, z.detach())
    H2 = torch.autograd.functional.hessian(plain, z.detach())
    torch.testing.assert_close(H1, H2, rtol=1e-9, atol=1e-12)


def test_fused_says_it_has_no_second_derivative():
    torch.manual_seed(3)
    h = torch.randn(6, 4, dtype=D, requires_grad=True)
    W = torch.randn(7, 4, dtype=D, requires_grad=True)
    a, A = torch.randint(0, 7, (6,)), torch.randn(6, dtype=D)
    assert torch.autograd.gradcheck(lambda h, W: fused_linear_reinforce_loss(h, W, a, A), (h, W))
    loss = fused_linear_reinforce_loss(h, W, a, A)
    with pytest.raises(RuntimeError, match="no second derivative"):
        torch.autograd.grad(loss, h, create_graph=True)


# -- torch.func ---------------------------------------------------------------------------------


def test_func_grad_and_vmap_match_autograd():
    torch.manual_seed(4)
    z = torch.randn(3, 6, 5, dtype=D)
    a = torch.randint(0, 5, (3, 6))
    A = torch.randn(3, 6, dtype=D)
    per = vmap(grad(lambda z, a, A: reinforce_loss(z, a, A, entropy_coef=0.1)))(z, a, A)
    for i in range(3):
        zi = z[i].clone().requires_grad_()
        (ref,) = torch.autograd.grad(reinforce_loss(zi, a[i], A[i], entropy_coef=0.1), zi)
        torch.testing.assert_close(per[i], ref)

    y = torch.randint(0, 2, (3, 6, 2)).to(D)
    gb = vmap(grad(lambda z, y, A: bernoulli_reinforce_loss(z, y, A, event_dims=1)))(
        torch.randn(3, 6, 2, dtype=D), y, A
    )
    assert gb.shape == (3, 6, 2) and torch.isfinite(gb).all()

    mu, ls, yn = torch.randn(6, 2, dtype=D), torch.zeros(2, dtype=D), torch.randn(6, 2, dtype=D)
    g_mu = grad(lambda m: normal_reinforce_loss(m, yn, A[0], log_scale=ls, event_dims=1))(mu)
    m2 = mu.clone().requires_grad_()
    (ref,) = torch.autograd.grad(
        normal_reinforce_loss(m2, yn, A[0], log_scale=ls, event_dims=1), m2
    )
    torch.testing.assert_close(g_mu, ref)

    h, W = torch.randn(6, 4, dtype=D), torch.randn(5, 4, dtype=D)
    g_h = grad(lambda h: fused_linear_reinforce_loss(h, W, a[0], A[0]))(h)
    h2 = h.clone().requires_grad_()
    (ref,) = torch.autograd.grad(fused_linear_reinforce_loss(h2, W, a[0], A[0]), h2)
    torch.testing.assert_close(g_h, ref)


# "eager": dynamo captures the whole graph (fullgraph: no graph break) and autograd runs it.
# "aot_eager" (slow: its first use sets up AOTAutograd, seconds) traces the backward too; its
# fast cover, the capture and the values and gradients against eager, is the "eager" case.
@pytest.mark.parametrize("backend", ["eager", pytest.param("aot_eager", marks=pytest.mark.slow)])
def test_compile_fullgraph_matches_eager(backend):
    torch.manual_seed(5)
    z = torch.randn(8, 6, requires_grad=True)
    a, A = torch.randint(0, 6, (8,)), torch.randn(8)

    def step(z, a, A):
        return reinforce_loss(z, a, A, entropy_coef=0.05)

    compiled = torch.compile(step, fullgraph=True, backend=backend)
    l1 = compiled(z, a, A)
    (g1,) = torch.autograd.grad(l1, z)
    l2 = step(z, a, A)
    (g2,) = torch.autograd.grad(l2, z)
    torch.testing.assert_close(l1, l2)
    torch.testing.assert_close(g1, g2)


# -- accuracy at peaked logits --------------------------------------------------------------------


def _truth(z: list[float], a: int) -> list[float]:
    """∂(−ln π_a)/∂z = π − onehot(a), at 50 digits, the taken entry as −Σ_{j≠a} π_j."""
    with mpmath.workdps(50):  # not mp.dps =: other modules set their own precision
        e = [mpmath.exp(mpmath.mpf(x)) for x in z]
        s = mpmath.fsum(e)
        out = [e[j] / s for j in range(len(z))]
        out[a] = -mpmath.fsum(e[j] for j in range(len(z)) if j != a) / s
        return [float(x) for x in out]


def _relative_errors(grad: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    return (grad.double() - truth).abs() / truth.abs()


PEAKED = [[20.0, 0.0], [12.0, -3.0, 1.0, 0.5], [30.0, 29.0, -5.0]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("z", PEAKED)
def test_peaked_logits_are_as_accurate_as_cross_entropy_or_better(dtype, z, path):
    """Against a 50-digit truth, every entry, on every path: never worse than cross_entropy.

    The taken entry is always within a few ulps (a step with π_a close to 1 leaves the native
    path). The other entries: the lean and general paths form π with softmax (a few ulps); the
    native path is cross_entropy's own backward, exp(log_softmax(z)), whose relative error
    grows as |ln πⱼ| ε, exactly as cross_entropy's does (πⱼ ≈ e⁻³⁵ in the third case).
    """
    truth = torch.tensor(_truth(z, 0), dtype=torch.float64)
    ours = torch.tensor([z], dtype=dtype, requires_grad=True)
    reinforce_loss(ours, torch.tensor([0]), torch.tensor([1.0], dtype=dtype)).backward()
    ce = torch.tensor([z], dtype=dtype, requires_grad=True)
    F.cross_entropy(ce, torch.tensor([0])).backward()
    err_ours = _relative_errors(ours.grad[0], truth)
    err_ce = _relative_errors(ce.grad[0], truth)
    eps = torch.finfo(dtype).eps
    assert (err_ours <= torch.clamp(err_ce, min=4 * eps)).all(), (err_ours, err_ce)
    assert err_ours[0] <= 4 * eps  # the taken entry
    if not path.startswith("native"):
        assert (err_ours <= 4 * eps).all()  # every entry to a few ulps


def test_the_taken_entry_keeps_its_digits_where_one_minus_pi_cancels():
    z = torch.tensor([[20.0, 0.0]], requires_grad=True)
    reinforce_loss(z, torch.tensor([0]), torch.tensor([1.0])).backward()
    assert z.grad[0, 0].item() == pytest.approx(-1 / (1 + math.exp(20)), rel=1e-6)
    ce = torch.tensor([[20.0, 0.0]], requires_grad=True)
    F.cross_entropy(ce, torch.tensor([0])).backward()
    assert ce.grad[0, 0].item() == 0.0  # what 1 − π_a gives in float32


# -- advantages ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_advantages_raise_and_validate_false_skips_the_check(bad, path):
    A = torch.tensor([1.0, bad, 2.0])
    z, a = torch.randn(3, 4), torch.tensor([0, 1, 2])
    calls = [
        lambda v: reinforce_loss(z, a, A, validate=v),
        lambda v: bernoulli_reinforce_loss(
            torch.randn(3), torch.tensor([0.0, 1.0, 1.0]), A, validate=v
        ),
        lambda v: normal_reinforce_loss(
            torch.randn(3), torch.randn(3), A, scale=torch.ones(3), validate=v
        ),
        lambda v: fused_linear_reinforce_loss(
            torch.randn(3, 2), torch.randn(4, 2), a, A, validate=v
        ),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=r"advantages\[1\] = .* is not finite"):
            call(True)
        assert not torch.isfinite(call(False))


def test_padding_steps_may_hold_non_finite_advantages():
    z, a = torch.randn(3, 4), torch.tensor([0, 1, 2])
    A = torch.tensor([1.0, float("nan"), 2.0])
    mask = torch.tensor([True, False, True])
    assert torch.isfinite(reinforce_loss(z, a, A, mask=mask))
