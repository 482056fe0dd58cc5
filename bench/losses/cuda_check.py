"""The torch losses on a CUDA device: values and gradients against autograd, errors, compile.

CI has no GPU, so this is run by hand on a machine that has one (it exits 2 where none is):

    python bench/losses/cuda_check.py

It checks, on ``cuda``, in float32 and bfloat16: ``reinforce_loss`` and
``fused_linear_reinforce_loss`` against autograd of the cross_entropy form (loss and every
gradient); the taken entry's gradient at peaked logits against a float64 truth; that a bad
action is a ``ValueError`` (not a device-side assert, which would end the CUDA context); and
``torch.compile(fullgraph=True)`` parity. It prints one line per check and exits 1 on a failure.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from eligibility.torch import fused_linear_reinforce_loss, reinforce_loss

FAILED: list[str] = []


def report(name: str, ok: bool, detail: str = "") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}", flush=True)
    if not ok:
        FAILED.append(name)


def close(x: torch.Tensor, y: torch.Tensor, dtype: torch.dtype) -> tuple[bool, float]:
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    x, y = x.detach().double(), y.detach().double()
    err = float((x - y).abs().max() / y.abs().max().clamp_min(1e-30))
    return err <= tol, err


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    dev = "cuda"
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype)[6:]
        z0 = torch.randn(512, 3000, generator=g) * 3
        a = torch.randint(0, 3000, (512,), generator=g).to(dev)
        adv = torch.randn(512, generator=g).to(dev, dtype)
        z1 = z0.to(dev, dtype).requires_grad_()
        z2 = z0.to(dev, dtype).requires_grad_()
        l1 = reinforce_loss(z1, a, adv, entropy_coef=0.01)
        l1.backward()
        logp = torch.log_softmax(z2.float(), -1)
        ent = -(logp.exp() * logp).sum(-1)
        ref = (-(adv.float() * logp.gather(-1, a[:, None]).squeeze(-1)) - 0.01 * ent).mean()
        ref.backward()
        report(f"reinforce_loss value {name}", *close(l1.float(), ref, dtype))
        report(f"reinforce_loss grad {name}", *close(z1.grad, z2.grad, dtype))

        h0 = torch.randn(300, 64, generator=g)
        w0 = torch.randn(5000, 64, generator=g) / 8
        b0 = torch.randn(5000, generator=g)
        a2 = torch.randint(0, 5000, (300,), generator=g).to(dev)
        adv2 = torch.randn(300, generator=g).to(dev, dtype)
        p1 = [t.to(dev, dtype).requires_grad_() for t in (h0, w0, b0)]
        p2 = [t.to(dev, torch.float64).requires_grad_() for t in (h0, w0, b0)]
        f1 = fused_linear_reinforce_loss(p1[0], p1[1], a2, adv2, bias=p1[2], chunk_size=64)
        f1.backward()
        zz = F.linear(p2[0], p2[1], p2[2])
        f2 = (adv2.double() * F.cross_entropy(zz, a2, reduction="none")).mean()
        f2.backward()
        report(f"fused value {name}", *close(f1.float(), f2, dtype))
        for label, x, y in zip(("h", "W", "b"), p1, p2, strict=True):
            report(f"fused grad {label} {name}", *close(x.grad, y.grad, dtype))

        # Peaked logits: the taken entry −A (1 − π_a) = −A Σ_{j≠a} π_j, truth in float64.
        zp = torch.tensor([[20.0, 0.0], [16.0, -3.0]], device=dev)
        ap = torch.tensor([0, 0], device=dev)
        zq = zp.to(dtype).requires_grad_()
        reinforce_loss(zq, ap, 1.0, reduction="sum").backward()
        truth = torch.softmax(zp.to(dtype).double(), -1)[:, 1]
        got = -zq.grad[:, 0].double()
        rel = float(((got - truth).abs() / truth).max())
        report(f"peaked taken entry {name}", rel < 2**-7, f"rel err {rel:.2e}")

    z = torch.randn(8, 5, device=dev)
    try:
        reinforce_loss(z, torch.tensor([0, 1, 2, 3, 4, 5, 0, 1], device=dev), 1.0)
        report("out-of-range action is a ValueError", False, "no error")
    except ValueError as err:
        report("out-of-range action is a ValueError", "outside 0…4" in str(err), str(err)[:60])
    torch.cuda.synchronize()  # the context is still usable (no device-side assert fired)
    report("CUDA context alive after the error", True)

    zc = torch.randn(64, 100, device=dev, requires_grad=True)
    ac = torch.randint(0, 100, (64,), device=dev)
    ad = torch.randn(64, device=dev)
    fn = torch.compile(lambda z: reinforce_loss(z, ac, ad, entropy_coef=0.1), fullgraph=True)
    (gc,) = torch.autograd.grad(fn(zc), zc)
    (ge,) = torch.autograd.grad(reinforce_loss(zc, ac, ad, entropy_coef=0.1), zc)
    report("compile(fullgraph=True) parity", *close(gc, ge, torch.float32))
    print(f"{len(FAILED)} failed", flush=True)
    return 1 if FAILED else 0


if __name__ == "__main__":
    raise SystemExit(main())
