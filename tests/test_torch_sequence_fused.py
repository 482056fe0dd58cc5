"""fused_linear_logprobs against materialising the logits, under any upstream gradient.

Truth: autograd through ``F.linear`` → ``log_softmax`` → ``gather`` in float64, and
``torch.autograd.gradcheck`` (finite differences) on a small case. The upstream gradients are
random per token (the case Liger-Kernel #968 got wrong), and change between two backwards.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from eligibility.torch import fused_linear_logprobs, sequence_reinforce_loss  # noqa: E402

D = torch.float64


def materialised(h, w, ids, b=None, tau=1.0, cap=None):
    z = torch.nn.functional.linear(h, w, b).to(D)
    if cap is not None:  # Gemma 2's final_logit_softcapping, as its forward writes it
        z = torch.tanh(z / cap) * cap
    lp = (z / tau).log_softmax(-1)
    logp = lp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    return logp, -(lp.exp() * lp).sum(-1)


def inputs(lead=(3, 5), hdim=6, v=13, dtype=D, seed=0, bias=True):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(*lead, hdim, generator=g, dtype=D).to(dtype).requires_grad_()
    w = (torch.randn(v, hdim, generator=g, dtype=D) / 2).to(dtype).requires_grad_()
    b = torch.randn(v, generator=g, dtype=D).to(dtype).requires_grad_() if bias else None
    ids = torch.randint(0, v, lead, generator=g)
    u = torch.randn(lead, generator=g, dtype=D)
    vv = torch.randn(lead, generator=g, dtype=D)
    return h, w, b, ids, u, vv


def grads(out, params, upstream):
    params = [p for p in params if p is not None]
    return torch.autograd.grad(out, params, upstream, retain_graph=True)


@pytest.mark.parametrize("entropy", [False, True])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("cap", [None, 0.8])
def test_values_and_gradients_match_materialising_float64(entropy, bias, cap):
    """Chunks of 1 and 4 rows and none in one test, a failure's message naming the chunk."""
    h, w, b, ids, u, v = inputs(bias=bias)
    tau = 0.7
    lp, ent = materialised(h, w, ids, b, tau, cap)
    for chunk in (1, 4, None):
        got = fused_linear_logprobs(
            h, w, ids, bias=b, temperature=tau, softcap=cap, entropy=entropy, chunk=chunk
        )
        got = got if entropy else (got, None)
        assert torch.allclose(got[0], lp, rtol=1e-12, atol=1e-12), chunk
        outs_got, outs_want, ups = [got[0]], [lp], [u]
        if entropy:
            assert torch.allclose(got[1], ent, rtol=1e-12, atol=1e-12), chunk
            outs_got.append(got[1])
            outs_want.append(ent)
            ups.append(v)
        for _ in range(2):  # two different per-token upstream gradients on the same forward
            g_got = grads(outs_got, (h, w, b), ups)
            g_want = grads(outs_want, (h, w, b), ups)
            for x, y in zip(g_got, g_want, strict=True):
                assert torch.allclose(x, y, rtol=1e-10, atol=1e-12), chunk
            ups = [x * torch.linspace(-2, 3, x.numel(), dtype=D).view(x.shape) for x in ups]


@pytest.mark.parametrize("entropy", [False, True])
@pytest.mark.parametrize("cap", [None, 1.5])
def test_gradcheck_float64(entropy, cap):
    h, w, b, ids, _, _ = inputs(lead=(2, 3), hdim=3, v=5)

    def f(h, w, b):
        return fused_linear_logprobs(
            h, w, ids, bias=b, temperature=1.3, softcap=cap, entropy=entropy, chunk=2
        )

    assert torch.autograd.gradcheck(f, (h, w, b))


@pytest.mark.parametrize(
    ("dtype", "tol"), [(torch.float32, 2e-5), (torch.bfloat16, 3e-2), (torch.float16, 5e-3)]
)
def test_low_precision_against_float64(dtype, tol):
    h, w, b, ids, u, v = inputs(dtype=dtype, lead=(4, 8), hdim=16, v=50)
    lp, ent = fused_linear_logprobs(h, w, ids, bias=b, entropy=True, chunk=3)
    assert lp.dtype == dtype and ent.dtype == dtype
    h64, w64, b64 = (x.detach().to(D).requires_grad_() for x in (h, w, b))
    lp64, ent64 = materialised(h64, w64, ids, b64)
    assert torch.allclose(lp.to(D), lp64, rtol=tol, atol=tol)
    assert torch.allclose(ent.to(D), ent64, rtol=tol, atol=tol)
    g_got = grads([lp, ent], (h, w, b), [u.to(dtype), v.to(dtype)])
    g_want = grads([lp64, ent64], (h64, w64, b64), [u, v])
    for x, y in zip(g_got, g_want, strict=True):
        assert x.dtype == dtype
        assert (x.to(D) - y).abs().max() <= tol * (1 + y.abs().max())


def test_bfloat16_matches_the_same_materialised_computation():
    # "exact against materialising": the same bf16 matmul, then softmax in float32
    h, w, b, ids, _, _ = inputs(dtype=torch.bfloat16, lead=(4, 8), hdim=16, v=50)
    got = fused_linear_logprobs(h, w, ids, bias=b, chunk=32)
    z = torch.nn.functional.linear(h, w, b).float().log_softmax(-1)
    want = z.gather(-1, ids.unsqueeze(-1)).squeeze(-1).to(torch.bfloat16)
    assert torch.equal(got, want)


@pytest.mark.parametrize("native", [True, False], ids=["native", "emulated"])
@pytest.mark.parametrize("entropy", [False, True])
def test_under_autocast_the_backward_makes_the_forwards_products(entropy, native, monkeypatch):
    """A float32 layer under bfloat16 autocast (a ``--dtype bfloat16`` run's scoring): the
    backward recomputes the logits in bfloat16 as the forward made them, so the gradients are
    those of the plain layer under the same autocast (autograd's), not of float32 logits set
    against a bfloat16 logsumexp (2 % off before). Where the device makes bfloat16 products
    natively they are made in it; elsewhere in float32 from the values rounded to it, each
    product rounded (the same numbers, float32's products the fast ones there)."""
    from eligibility.torch import _linear_chunks

    monkeypatch.setattr(_linear_chunks, "natively", lambda low, device: native)
    h, w, b, ids, u, vv = inputs(dtype=torch.float32, lead=(8, 16), hdim=32, v=200)
    h, w, b = (x.detach().mul(2).requires_grad_() for x in (h, w, b))
    upstream = (u.float(), vv.float()) if entropy else u.float()

    def run(fn):
        with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
            out = fn()
        outs = out if entropy else (out,)
        return [o.detach() for o in outs], grads(outs, [h, w, b], upstream)

    def plain():
        lp = torch.nn.functional.linear(h, w, b).float().log_softmax(-1)
        logp = lp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        return (logp, -(lp.exp() * lp).sum(-1)) if entropy else logp

    want, g_want = run(plain)
    got, g_got = run(lambda: fused_linear_logprobs(h, w, ids, bias=b, entropy=entropy, chunk=24))
    for x, y in zip(got, want, strict=True):
        assert x.dtype == torch.float32
        torch.testing.assert_close(x, y, rtol=0, atol=1e-5)
    gh, gw, gb = g_got
    torch.testing.assert_close(gh, g_want[0], rtol=0, atol=1e-5 * float(g_want[0].abs().max()))
    for x, y in ((gw, g_want[1]), (gb, g_want[2])):  # bf16 products, summed in float32
        assert float((x - y).abs().max()) <= 1e-2 * float(y.abs().max())


def test_a_sequence_loss_on_top_equals_materialising():
    h, w, b, ids, _, _ = inputs(lead=(4, 6))
    mask = torch.arange(6) < torch.tensor([[6], [2], [4], [1]])
    adv = torch.tensor([1.0, -0.5, 0.25, -1.0], dtype=D)
    ref = torch.randn(4, 6, generator=torch.Generator().manual_seed(3), dtype=D) - 2
    kw = dict(aggregation="sequence-mean", kl="k3", beta=0.1, ref_logps=ref)
    fused = sequence_reinforce_loss(
        fused_linear_logprobs(h, w, ids, bias=b, chunk=5), adv, mask, **kw
    )
    plain = sequence_reinforce_loss(materialised(h, w, ids, b)[0], adv, mask, **kw)
    assert fused.item() == pytest.approx(plain.item(), rel=1e-12)
    for x, y in zip(grads(fused, (h, w, b), None), grads(plain, (h, w, b), None), strict=True):
        assert torch.allclose(x, y, rtol=1e-10, atol=1e-13)


def test_only_the_entropy_used_and_frozen_inputs():
    h, w, b, ids, _, v = inputs()
    _, ent = fused_linear_logprobs(h, w, ids, bias=b, entropy=True)
    (gw,) = torch.autograd.grad(ent, w, v)
    (gw_want,) = torch.autograd.grad(materialised(h, w, ids, b)[1], w, v)
    assert torch.allclose(gw, gw_want, rtol=1e-10, atol=1e-12)
    out = fused_linear_logprobs(h.detach(), w, ids)
    (gw,) = torch.autograd.grad(out.sum(), w)
    assert gw.shape == w.shape


def test_no_second_derivative():
    h, w, b, ids, _, _ = inputs()
    out = fused_linear_logprobs(h, w, ids, bias=b)
    with pytest.raises(RuntimeError, match="no second derivative"):
        torch.autograd.grad(out.sum(), h, create_graph=True)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(token_ids=torch.full((3, 5), 13)), r"token_ids\[0, 0\] = 13 is outside"),
        (dict(token_ids=torch.zeros(3, 4, dtype=torch.long)), "token_ids of shape"),
        (dict(token_ids=torch.zeros(3, 5)), "integer"),
        (dict(temperature=0.0), "temperature"),
        (dict(temperature=float("inf")), "temperature"),
        (dict(chunk=0), "chunk must be a positive int"),
        (dict(softcap=0.0), "softcap must be a positive finite"),
        (dict(softcap=float("inf")), "softcap must be a positive finite"),
        (dict(softcap="30"), "softcap must be a positive finite"),
        (dict(weight=torch.zeros(13, 7, dtype=D)), "must share H"),
        (dict(weight=torch.zeros(13, 6)), "dtype"),
        (dict(bias=torch.zeros(12, dtype=D)), "bias must have shape"),
    ],
)
def test_errors(kw, match):
    h, w, b, ids, _, _ = inputs()
    args = dict(hidden=h, weight=w, token_ids=ids, bias=b)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        fused_linear_logprobs(**args)


def test_fused_reinforce_loss_still_matches_its_logprobs():
    # the two fused functions share the chunk machinery: −mean A ln π(a) either way
    from eligibility.torch import fused_linear_reinforce_loss

    h, w, b, ids, u, _ = inputs()
    a = fused_linear_reinforce_loss(h, w, ids, u, bias=b, chunk_size=4)
    c = -(u * fused_linear_logprobs(h, w, ids, bias=b, chunk=4)).mean()
    assert a.item() == pytest.approx(c.item(), rel=1e-12)
    for x, y in zip(grads(a, (h, w, b), None), grads(c, (h, w, b), None), strict=True):
        assert torch.allclose(x, y, rtol=1e-10, atol=1e-13)


@pytest.mark.slow
def test_under_torch_func_and_compile_the_values_agree():
    h, w, b, ids, _, _ = inputs()
    eager = fused_linear_logprobs(h, w, ids, bias=b, entropy=True)

    def f(h, w, b):
        return fused_linear_logprobs(h, w, ids, bias=b, entropy=True)

    compiled = torch.compile(f, fullgraph=True, backend="eager")(h, w, b)
    for x, y in zip(eager, compiled, strict=True):
        assert torch.allclose(x, y, rtol=1e-12)
    g = torch.func.grad(lambda w: f(h.detach(), w, b.detach())[0].sum())(w.detach())
    (g_want,) = torch.autograd.grad(eager[0].sum(), w)
    assert torch.allclose(g, g_want, rtol=1e-10)
