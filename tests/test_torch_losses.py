"""reinforce_loss and fused_linear_reinforce_loss against autograd and the core."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from torch.distributions import Categorical  # noqa: E402

from _torch_reference import (  # noqa: E402
    CATEGORICAL_PATHS,
    force_categorical_path,
    reduce_reference,
)
from eligibility.distributions import categorical as core  # noqa: E402
from eligibility.torch import fused_linear_reinforce_loss, reinforce_loss  # noqa: E402

REDUCTIONS = ("mean", "sum", "none")
SHAPES = ((), (6,), (3, 4), (2, 3, 2))  # leading shapes L; logits are (*L, V)


@pytest.fixture(params=CATEGORICAL_PATHS)
def path(request, monkeypatch):
    """Each test that takes it runs once per path of reinforce_loss (native, lean, general)."""
    force_categorical_path(request.param, monkeypatch)
    return request.param


def _inputs(lead, v, dtype=torch.float64, masked=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(*lead, v, generator=g, dtype=torch.float64).to(dtype)
    a = torch.randint(0, v, lead, generator=g)
    adv = torch.randn(lead, generator=g, dtype=torch.float64).to(dtype)
    mask = None
    if masked:
        mask = torch.rand(lead, generator=g) > 0.35
        if mask.dim() > 0:
            mask.view(-1)[0] = True  # at least one real step
    return z, a, adv, mask


def _autograd_loss(z, a, adv, reduction, mask=None, beta=0.0):
    """The reference: autograd through torch.distributions.Categorical."""
    d = Categorical(logits=z)
    ell = -adv * d.log_prob(a)
    if beta:
        ell = ell - beta * d.entropy()
    return reduce_reference(ell, reduction, mask)


def _value_and_grad(fn, z, *args, g_out=None, **kw):
    z = z.detach().requires_grad_(True)
    out = fn(z, *args, **kw)
    if g_out is None:
        g_out = torch.ones_like(out)
    (gz,) = torch.autograd.grad(out, z, g_out)
    return out.detach(), gz


# --- against autograd of torch.distributions.Categorical ----------------------------------


# Two category counts: below 16 the softmax is the composite form, from 16 on torch's kernel.
# A mask needs a leading shape: a scalar loss (lead ()) is taken unmasked only. The four
# (dtype, V) pairs of a case are one test, each failure's message naming its pair.
@pytest.mark.parametrize(
    ("lead", "masked"),
    [(lead, masked) for lead in SHAPES for masked in (False, True) if lead or not masked],
    ids=lambda x: str(x) if isinstance(x, tuple) else ("mask" if x else "nomask"),
)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_matches_autograd_categorical(reduction, lead, masked, path):
    for dtype in (torch.float32, torch.float64):
        for v in (7, 40):
            z, a, adv, mask = _inputs(lead, v, dtype, masked)
            g_out = None
            if reduction == "none":
                g_out = torch.randn(lead, generator=torch.Generator().manual_seed(1)).to(dtype)
            got, g_got = _value_and_grad(
                reinforce_loss, z, a, adv, reduction=reduction, mask=mask, g_out=g_out
            )
            want, g_want = _value_and_grad(_autograd_loss, z, a, adv, reduction, mask, g_out=g_out)
            case = f"{dtype}, V = {v}"
            tol = (
                {"atol": 1e-6, "rtol": 1e-5}
                if dtype == torch.float32
                else {"atol": 1e-12, "rtol": 0}
            )
            assert got.shape == want.shape and got.dtype == dtype and g_got.dtype == dtype, case
            torch.testing.assert_close(got, want, **tol, msg=lambda m, c=case: f"{c}: {m}")
            torch.testing.assert_close(g_got, g_want, **tol, msg=lambda m, c=case: f"{c}: {m}")


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
def test_half_precision_close_to_float64(reduction, masked, path):
    """bfloat16 and float16 in one test, a failure's message naming the dtype."""
    z, a, adv, mask = _inputs((4, 5), 11, torch.float64, masked=masked)
    for dtype in (torch.bfloat16, torch.float16):
        got, g_got = _value_and_grad(
            reinforce_loss, z.to(dtype), a, adv.to(dtype), reduction=reduction, mask=mask
        )
        # The reference sees the same rounded inputs, in float64.
        want, g_want = _value_and_grad(
            _autograd_loss, z.to(dtype).double(), a, adv.to(dtype).double(), reduction, mask
        )
        msg = lambda m, c=dtype: f"{c}: {m}"  # noqa: E731
        assert got.dtype == dtype and g_got.dtype == dtype, dtype
        torch.testing.assert_close(got.double(), want, atol=3e-2, rtol=2e-2, msg=msg)
        torch.testing.assert_close(g_got.double(), g_want, atol=1e-2, rtol=2e-2, msg=msg)


@pytest.mark.parametrize("v", [6, 30])
@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_entropy_coef_matches_autograd(reduction, masked, v):
    z, a, adv, mask = _inputs((3, 5), v, masked=masked)
    g_out = torch.randn(3, 5, dtype=torch.float64) if reduction == "none" else None
    kw = {"reduction": reduction, "mask": mask, "entropy_coef": 0.37}
    got, g_got = _value_and_grad(reinforce_loss, z, a, adv, g_out=g_out, **kw)
    want, g_want = _value_and_grad(_autograd_loss, z, a, adv, reduction, mask, 0.37, g_out=g_out)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    torch.testing.assert_close(g_got, g_want, atol=1e-12, rtol=0)


@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_gradcheck_float64(reduction, masked, path):
    """Both entropy coefficients in one test, a failure's message naming β."""
    z, a, adv, mask = _inputs((3, 2), 5, masked=masked, seed=3)
    z = z.requires_grad_(True)
    for beta in (0.0, 0.5):

        def f(z, beta=beta):
            return reinforce_loss(z, a, adv, reduction=reduction, mask=mask, entropy_coef=beta)

        # Fast mode checks random projections vᵀ J u of the Jacobian against finite
        # differences; the full Jacobian is checked once below.
        assert torch.autograd.gradcheck(f, (z,), fast_mode=True), f"β = {beta}"


def test_gradcheck_float64_full_jacobian():
    z, a, adv, mask = _inputs((3, 2), 5, masked=True, seed=3)
    z = z.requires_grad_(True)

    def f(z):
        return reinforce_loss(z, a, adv, reduction="none", mask=mask, entropy_coef=0.5)

    assert torch.autograd.gradcheck(f, (z,))


# --- against the core's closed forms and a plain loop -------------------------------------


def test_backward_is_the_core_eligibility():
    """∂ℓ/∂z = −(A/N) e − (β/N) ∂H/∂z, e = score_logits, ∂H/∂z = entropy_grad_logits (the core)."""
    z, a, adv, _ = _inputs((8,), 9, seed=5)
    beta = 0.2
    _, gz = _value_and_grad(reinforce_loss, z, a, adv, entropy_coef=beta)
    e = core.score_logits(z, a)
    dh = core.entropy_grad_logits(z)
    want = (-adv[:, None] * e - beta * dh) / 8
    torch.testing.assert_close(gz, want, atol=1e-14, rtol=0)


@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
def test_matches_a_plain_loop(masked, path):
    """Per row, with math.exp: ℓ = −A (z_a − ln Σ e^z), ∂ℓ/∂zᵢ = A (πᵢ − [i = a]), summed."""
    z, a, adv, mask = _inputs((5,), 4, masked=True, seed=6)
    mask = mask if masked else torch.ones(5, dtype=torch.bool)
    kw = {"mask": mask} if masked else {}
    got, gz = _value_and_grad(reinforce_loss, z, a, adv, reduction="sum", **kw)
    loss, grad = 0.0, [[0.0] * 4 for _ in range(5)]
    for t in range(5):
        if not mask[t]:
            continue
        row = [float(x) for x in z[t]]
        lse = math.log(sum(math.exp(x) for x in row))
        a_t, adv_t = int(a[t]), float(adv[t])
        loss += -adv_t * (row[a_t] - lse)
        for i in range(4):
            grad[t][i] = adv_t * (math.exp(row[i] - lse) - (i == a_t))
    assert float(got) == pytest.approx(loss, abs=1e-12)
    torch.testing.assert_close(gz, torch.tensor(grad, dtype=torch.float64), atol=1e-12, rtol=0)


# --- masks: −inf logits and padding --------------------------------------------------------


@pytest.mark.parametrize("v", [8, 24])
def test_minus_inf_logits_have_exactly_zero_gradient(v, path):
    z, a, adv, _ = _inputs((6,), v, seed=7)
    banned = torch.zeros(6, v, dtype=torch.bool)
    banned[:, 5:] = True
    banned[torch.arange(6), a] = False
    z = z.masked_fill(banned, -math.inf)
    for beta in (0.0, 0.3):
        got, gz = _value_and_grad(reinforce_loss, z, a, adv, entropy_coef=beta)
        assert torch.isfinite(got) and torch.isfinite(gz).all()
        assert (gz[banned] == 0).all()
        d_ref = -(adv[:, None] * core.score_logits(z, a)) - beta * core.entropy_grad_logits(z)
        torch.testing.assert_close(gz, d_ref / 6, atol=1e-14, rtol=0)
    # And the value and gradient autograd gets through Categorical.
    want, g_want = _value_and_grad(_autograd_loss, z, a, adv, "mean")
    got, gz = _value_and_grad(reinforce_loss, z, a, adv)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    torch.testing.assert_close(gz, g_want, atol=1e-12, rtol=0)


def test_padding_steps_may_hold_anything():
    """Padded steps: all −inf rows, NaN logits, out-of-range actions; no effect, no error."""
    z, a, adv, _ = _inputs((4, 3), 5, seed=8)
    mask = torch.ones(4, 3, dtype=torch.bool)
    mask[1, 2] = mask[3, 0] = mask[0, 1] = False
    z[1, 2] = -math.inf
    z[3, 0, 2] = math.nan
    a[0, 1] = 99
    for beta in (0.0, 0.4):
        got, gz = _value_and_grad(reinforce_loss, z, a, adv, mask=mask, entropy_coef=beta)
        assert torch.isfinite(got) and torch.isfinite(gz).all()
        assert (gz[~mask] == 0).all()
        zc, ac = z.clone(), a.clone()
        zc[~mask], ac[~mask] = 0.0, 0
        want, g_want = _value_and_grad(_autograd_loss, zc, ac, adv, "mean", mask, beta)
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
        torch.testing.assert_close(gz, g_want, atol=1e-12, rtol=0)


def test_all_padding_gives_zero():
    z, a, adv, _ = _inputs((2, 3), 4)
    mask = torch.zeros(2, 3, dtype=torch.bool)
    for reduction in REDUCTIONS:
        got, gz = _value_and_grad(reinforce_loss, z, a, adv, reduction=reduction, mask=mask)
        assert (got == 0).all() and (gz == 0).all()


def test_mask_broadcasts_over_leading_axes():
    z, a, adv, _ = _inputs((3, 4), 5)
    time_mask = torch.tensor([True, True, False, True])
    got = reinforce_loss(z, a, adv, mask=time_mask)
    want = reinforce_loss(z, a, adv, mask=time_mask.expand(3, 4))
    assert got == want


@pytest.mark.parametrize("v", [4, 20])
def test_all_masked_row_raises(v, path):
    z, a, adv, _ = _inputs((2, 3), v)
    z[1, 2] = -math.inf
    with pytest.raises(ValueError, match=r"logits\[1, 2\] are all −inf"):
        reinforce_loss(z, a, adv)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda z, a, v: a.__setitem__((0, 1), v), r"actions\[0, 1\] = {v} is outside 0…{w}"),
        (lambda z, a, v: a.__setitem__((1, 0), -1), r"actions\[1, 0\] = -1 is outside"),
        (
            lambda z, a, v: z[1, 1].__setitem__(int(a[1, 1]), -math.inf),
            r"actions\[1, 1\].*logit −inf",
        ),
        (lambda z, a, v: z[0, 2].__setitem__(0, math.nan), r"logits\[0, 2\] contain NaN"),
        (lambda z, a, v: z[0, 0].__setitem__(3, math.inf), r"logits\[0, 0\] contain NaN or \+inf"),
    ],
    ids=["too-big", "negative", "impossible-action", "nan", "posinf"],
)
def test_bad_values_raise(edit, match, path):
    for v in (4, 20):  # below 16 and from 16 on: both softmax forms (a failure names V)
        z, a, adv, _ = _inputs((2, 3), v)
        edit(z, a, v)
        with pytest.raises(ValueError, match=match.format(v=v, w=v - 1)):
            reinforce_loss(z, a, adv)
            pytest.fail(f"V = {v}: no ValueError")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"reduction": "avg"}, "reduction must be one of"),
        ({"logits": torch.zeros(3, 0)}, "last axis of categories"),
        ({"logits": torch.zeros(3, 4, dtype=torch.int64)}, "logits must be a floating"),
        ({"actions": torch.zeros(3, 1, dtype=torch.int64)}, "leading shape of logits"),
        ({"actions": torch.zeros(3)}, "actions must be an integer tensor"),
        ({"advantages": torch.zeros(2)}, "do not broadcast to the leading shape"),
        ({"mask": torch.ones(3)}, "mask must be a bool tensor"),
        ({"mask": torch.ones(2, dtype=torch.bool)}, "mask of shape"),
        ({"entropy_coef": math.nan}, "entropy_coef must be finite"),
        ({"logits": [[0.0, 1.0]] * 3}, "logits must be a torch.Tensor"),
    ],
)
def test_bad_arguments_raise(kwargs, match):
    args = {"logits": torch.zeros(3, 4), "actions": torch.zeros(3, dtype=torch.int64)}
    args |= {"advantages": torch.ones(3)}
    args |= kwargs
    with pytest.raises(ValueError, match=match):
        reinforce_loss(args.pop("logits"), args.pop("actions"), args.pop("advantages"), **args)


# --- conventions ---------------------------------------------------------------------------


def test_advantages_are_constants(path):
    z, a, adv, _ = _inputs((5,), 3)
    z.requires_grad_(True)
    adv.requires_grad_(True)
    out = reinforce_loss(z, a, adv)
    gz, g_adv = torch.autograd.grad(out, (z, adv), allow_unused=True)
    assert g_adv is None and gz is not None


def test_scalar_advantage_and_single_step(path):
    z = torch.tensor([0.1, -0.3, 2.0], dtype=torch.float64)
    got, gz = _value_and_grad(reinforce_loss, z, torch.tensor(2), 1.5)
    want, g_want = _value_and_grad(_autograd_loss, z, torch.tensor(2), 1.5, "mean")
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(gz, g_want)


@pytest.mark.parametrize("masked", [False, True], ids=["nomask-nobeta", "mask-beta"])
def test_second_backward_recomputes_the_same_gradient(masked, path):
    z, a, adv, mask = _inputs((4, 3), 6, masked=True)
    z.requires_grad_(True)
    kw = {"mask": mask, "entropy_coef": 0.1} if masked else {}
    out = reinforce_loss(z, a, adv, **kw)
    (g1,) = torch.autograd.grad(out, z, retain_graph=True)
    (g2,) = torch.autograd.grad(out, z)
    assert torch.equal(g1, g2)


def test_non_contiguous_logits_and_no_grad(path):
    z, a, adv, _ = _inputs((5,), 4)
    zt = z.t().contiguous().t()  # same values, column-major
    assert not zt.is_contiguous()
    got, gz = _value_and_grad(reinforce_loss, zt, a, adv)
    want, g_want = _value_and_grad(reinforce_loss, z, a, adv)
    torch.testing.assert_close(got, want, atol=1e-15, rtol=0)
    torch.testing.assert_close(gz, g_want, atol=1e-15, rtol=0)
    with torch.no_grad():
        assert reinforce_loss(z, a, adv) == want


@pytest.mark.parametrize("v", [3, 20])
def test_far_tail_log_prob_is_exact(v, path):
    """ln π(a) ≈ −200 in float32: π_a underflows, and the slow path keeps it exact."""
    z = torch.zeros(2, v, dtype=torch.float32)
    z[0, :3] = torch.tensor([0.0, -95.0, 3.0])
    z[1, :3] = torch.tensor([0.0, -200.0, 1.0])
    a = torch.tensor([1, 1])
    got = reinforce_loss(z, a, torch.ones(2), reduction="none")
    want = -Categorical(logits=z.double()).log_prob(a)
    torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-6)


# --- the fused linear variant ---------------------------------------------------------------


def _linear_inputs(lead, h, v, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    hid = torch.randn(*lead, h, generator=g, dtype=torch.float64).to(dtype)
    w = (torch.randn(v, h, generator=g, dtype=torch.float64) / math.sqrt(h)).to(dtype)
    b = (0.1 * torch.randn(v, generator=g, dtype=torch.float64)).to(dtype)
    return hid, w, b


def _grads(fn, hid, w, b, g_out):
    leaves = [x.detach().requires_grad_(True) for x in (hid, w, b)]
    out = fn(*leaves)
    grads = torch.autograd.grad(out, leaves, torch.ones_like(out) if g_out is None else g_out)
    return out.detach(), grads


@pytest.mark.parametrize("beta", [0.0, 0.25])
@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_fused_matches_unfused(reduction, masked, beta):
    """Chunks of 1 and 4 rows and none in one test, a failure's message naming the chunk."""
    lead = (3, 5)
    hid, w, b = _linear_inputs(lead, 6, 9)
    _, a, adv, mask = _inputs(lead, 9, masked=masked, seed=2)
    g_out = torch.randn(lead, dtype=torch.float64) if reduction == "none" else None
    kw = {"reduction": reduction, "mask": mask, "entropy_coef": beta}

    def unfused(h, w, b):
        return reinforce_loss(h @ w.T + b, a, adv, **kw)

    want, g_want = _grads(unfused, hid, w, b, g_out)
    for chunk in (1, 4, None):

        def fused(h, w, b, chunk=chunk):
            return fused_linear_reinforce_loss(h, w, a, adv, bias=b, chunk_size=chunk, **kw)

        got, g_got = _grads(fused, hid, w, b, g_out)
        msg = lambda m, c=chunk: f"chunk_size={c}: {m}"  # noqa: E731
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0, msg=msg)
        for x, y in zip(g_got, g_want, strict=True):
            torch.testing.assert_close(x, y, atol=1e-12, rtol=0, msg=msg)


@pytest.mark.parametrize("native", [True, False], ids=["native", "emulated"])
@pytest.mark.parametrize("beta", [0.0, 0.25])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_fused_under_autocast_makes_the_plain_layers_products(reduction, beta, native, monkeypatch):
    """Float32 inputs under bfloat16 autocast: the logits' products made in bfloat16 (as
    autocast makes the plain layer's) in the forward and again in the backward of
    ``reduction="none"`` (which runs outside autocast), the softmax in float32: the loss and
    ∂h of the plain layer under the same autocast, ∂W and ∂b within bfloat16's products; made
    natively or, where the device emulates bfloat16, in float32 from the rounded values."""
    from eligibility.torch import _linear_chunks

    monkeypatch.setattr(_linear_chunks, "natively", lambda low, device: native)
    lead = (8, 12)
    hid, w, b = (x.float() for x in _linear_inputs(lead, 32, 150, seed=3))
    hid = hid * 2
    _, a, adv, _ = _inputs(lead, 150, dtype=torch.float32, seed=4)
    g_out = (
        torch.randn(lead, generator=torch.Generator().manual_seed(0))
        if reduction == "none"
        else None
    )
    kw = {"reduction": reduction, "entropy_coef": beta}

    def autocast(fn):
        def run(*leaves):
            with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
                return fn(*leaves)

        return run

    def plain(h, w, b):
        return reinforce_loss(torch.nn.functional.linear(h, w, b).float(), a, adv, **kw)

    want, g_want = _grads(autocast(plain), hid, w, b, g_out)
    got, g_got = _grads(
        autocast(lambda h, w, b: fused_linear_reinforce_loss(h, w, a, adv, bias=b, **kw)),
        hid,
        w,
        b,
        g_out,
    )
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=1e-5 * (1 + float(want.abs().max())), rtol=0)
    gh, gw, gb = g_got
    torch.testing.assert_close(gh, g_want[0], rtol=0, atol=1e-5 * float(g_want[0].abs().max()))
    for x, y in ((gw, g_want[1]), (gb, g_want[2])):  # bf16 products, summed in float32
        assert float((x - y).abs().max()) <= 1e-2 * float(y.abs().max())


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_fused_gradcheck_float64(reduction):
    hid, w, b = (x.requires_grad_(True) for x in _linear_inputs((4,), 3, 5, seed=4))
    _, a, adv, mask = _inputs((4,), 5, masked=True, seed=4)

    def f(h, w, b):
        return fused_linear_reinforce_loss(
            h, w, a, adv, bias=b, chunk_size=3, reduction=reduction, mask=mask, entropy_coef=0.1
        )

    # The first backward scales gradients formed in the forward, a repeat recomputes them:
    # equal up to rounding, hence a non-zero tolerance for "non-determinism".
    assert torch.autograd.gradcheck(f, (hid, w, b), nondet_tol=1e-12)


def test_fused_without_bias_and_frozen_hidden():
    hid, w, _ = _linear_inputs((7,), 4, 6)
    _, a, adv, _ = _inputs((7,), 6)
    w1 = w.clone().requires_grad_(True)
    fused = fused_linear_reinforce_loss(hid, w1, a, adv, chunk_size=2)
    (g1,) = torch.autograd.grad(fused, w1)
    w2 = w.clone().requires_grad_(True)
    (g2,) = torch.autograd.grad(reinforce_loss(hid @ w2.T, a, adv), w2)
    torch.testing.assert_close(g1, g2, atol=1e-12, rtol=0)


def test_fused_bfloat16_close_to_float64():
    hid, w, b = _linear_inputs((6,), 8, 10, dtype=torch.bfloat16)
    _, a, adv, _ = _inputs((6,), 10)
    adv = adv.to(torch.bfloat16)

    def fused(h, w, b):
        return fused_linear_reinforce_loss(h, w, a, adv, bias=b, chunk_size=4)

    def unfused(h, w, b):
        return reinforce_loss(h @ w.T + b, a, adv)

    got, g_got = _grads(fused, hid, w, b, None)
    want, g_want = _grads(unfused, *(x.double() for x in (hid, w, b)), None)
    assert got.dtype == torch.bfloat16 and all(x.dtype == torch.bfloat16 for x in g_got)
    torch.testing.assert_close(got.double(), want, atol=2e-2, rtol=2e-2)
    for x, y in zip(g_got, g_want, strict=True):
        torch.testing.assert_close(x.double(), y, atol=1e-2, rtol=3e-2)


def test_fused_second_backward_and_all_padding():
    hid, w, b = (x.requires_grad_(True) for x in _linear_inputs((2, 3), 4, 5))
    _, a, adv, _ = _inputs((2, 3), 5)
    out = fused_linear_reinforce_loss(hid, w, a, adv, bias=b, chunk_size=2)
    g1 = torch.autograd.grad(out, (hid, w, b), retain_graph=True)
    g2 = torch.autograd.grad(out, (hid, w, b))
    for x, y in zip(g1, g2, strict=True):
        torch.testing.assert_close(x, y, atol=1e-14, rtol=0)
    nothing = torch.zeros(2, 3, dtype=torch.bool)
    out = fused_linear_reinforce_loss(hid, w, a, adv, bias=b, mask=nothing)
    assert out == 0
    assert all((g == 0).all() for g in torch.autograd.grad(out, (hid, w, b)))


def test_fused_bad_inputs_raise():
    hid, w, b = _linear_inputs((2, 3), 4, 5)
    _, a, adv, _ = _inputs((2, 3), 5)
    a[1, 2] = 5
    with pytest.raises(ValueError, match=r"actions\[1, 2\] = 5 is outside 0…4"):
        fused_linear_reinforce_loss(hid, w, a, adv, bias=b)
    a[1, 2] = 0
    with pytest.raises(ValueError, match="must share H"):
        fused_linear_reinforce_loss(hid, w.T, a, adv)
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        fused_linear_reinforce_loss(hid, w, a, adv, chunk_size=0)
    with pytest.raises(ValueError, match="bias must have shape"):
        fused_linear_reinforce_loss(hid, w, a, adv, bias=b[:3])
    hid[0, 1, 0] = math.nan
    with pytest.raises(ValueError, match="non-finite log-probability"):
        fused_linear_reinforce_loss(hid, w, a, adv, bias=b)


def test_fused_under_no_grad_gives_the_same_value():
    hid, w, b = (x.requires_grad_(True) for x in _linear_inputs((5,), 4, 6))
    _, a, adv, _ = _inputs((5,), 6)
    for reduction in REDUCTIONS:
        want = fused_linear_reinforce_loss(hid, w, a, adv, bias=b, reduction=reduction)
        with torch.no_grad():
            got = fused_linear_reinforce_loss(hid, w, a, adv, bias=b, reduction=reduction)
        assert got.grad_fn is None
        torch.testing.assert_close(got, want.detach(), atol=0, rtol=0)


# --- which path a call takes ----------------------------------------------------------------


def _node(loss: torch.Tensor) -> str:
    return type(loss.grad_fn).__name__


@pytest.mark.parametrize(
    ("size", "kw", "node"),
    [
        ((64, 2), {}, "DotBackward0"),  # native: cross_entropy, then a dot with A/N
        ((64, 2), {"reduction": "none"}, "MulBackward0"),
        ((256, 40), {}, "DotBackward0"),
        ((4096, 4), {}, "DotBackward0"),  # V < 16, many rows: logsumexp − z_a at one thread
        ((65536, 4), {}, "_LeanBackward"),  # beyond the native limits
        ((4096, 1000), {}, "_LeanBackward"),
        ((64, 2), {"validate": False}, "_CategoricalReinforceBackward"),
        ((64, 2), {"entropy_coef": 0.1}, "_CategoricalReinforceBackward"),
        ((64, 2), {"mask": torch.ones(64, dtype=torch.bool)}, "_CategoricalReinforceBackward"),
    ],
    ids=[
        "tiny",
        "tiny-none",
        "small-V40",
        "V4",
        "V4-large",
        "large",
        "no-validate",
        "entropy",
        "mask",
    ],
)
def test_each_call_takes_its_path(size, kw, node):
    z = torch.randn(*size, requires_grad=True)
    a = torch.randint(0, size[-1], size[:1])
    assert _node(reinforce_loss(z, a, torch.randn(size[0]), **kw)) == node


def test_a_peaked_step_leaves_the_native_path_for_the_exact_taken_entry():
    z = torch.zeros(64, 2)
    z[5] = torch.tensor([20.0, 0.0])  # π_a = 1 − 2e-9: c (π_a − 1) would round to 0
    a = torch.zeros(64, dtype=torch.int64)
    z.requires_grad_(True)
    loss = reinforce_loss(z, a, torch.ones(64))
    assert _node(loss) == "_LeanBackward"
    loss.backward()
    assert z.grad[5, 0].item() == pytest.approx(-1 / (1 + math.exp(20)) / 64, rel=1e-6)


def test_bad_values_on_every_path_raise_the_same_error():
    """A bad action in a tiny call (native) and a large one (lean): both name the step."""
    for size in ((64, 2), (4096, 4), (1024, 40), (65536, 4), (4096, 1000)):
        z, a = torch.randn(*size), torch.randint(0, size[-1], size[:1])
        a[7] = size[-1]
        with pytest.raises(ValueError, match=rf"actions\[7\] = {size[-1]} is outside"):
            reinforce_loss(z, a, torch.ones(size[0]))


def test_fused_chunk_log_softmax_in_place_is_bit_identical():
    """The fused loss writes log_softmax over its chunk of logits on the CPU: same bits."""
    z = torch.randn(37, 1000) * 4
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        x = z.to(dtype)
        want = torch.log_softmax(x, -1)
        got = x.clone()
        torch._log_softmax(got, -1, False, out=got)
        assert torch.equal(got, want)
