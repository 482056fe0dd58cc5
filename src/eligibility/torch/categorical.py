r"""REINFORCE loss for a categorical policy whose backward pass is the eligibility, in closed form.

For logits z ∈ ℝⱽ, π = softmax(z), a taken action a and its advantage A, the per-step loss is

    ℓ = −A ln π(a) − β H(π),     ln π(a) = z_a − logsumexp(z),     H(π) = −Σᵢ πᵢ ln πᵢ

and its gradient is the characteristic eligibility e = ∂ ln π(a)/∂z = onehot(a) − π (Williams,
1992, §4), scaled by −A, plus the entropy term:

    ∂ℓ/∂z = A (π − onehot(a)) + β π ⊙ (ln π + H).

These are the closed forms of the core,
:func:`eligibility.distributions.categorical.score_logits` (e) and
:func:`~eligibility.distributions.categorical.entropy_grad_logits` (∂H/∂z = −π ⊙ (ln π + H));
the tests hold this module to them. The core kernels build ``onehot(a)`` and several other
B×V arrays; here the same formulas run in one B×V buffer, in place: π (a fused ``softmax``),
then A π (``mul_``), then minus A at the taken index (``index_add_``). That buffer is the
gradient handed back to autograd, so a backward costs one B×V allocation where autograd's
backward of ``-(A * Categorical(logits=z).log_prob(a)).mean()`` costs several.
"""

from __future__ import annotations

import functools

import torch

from eligibility._array import first_index
from eligibility.torch import _common


def _rows(buf: torch.Tensor) -> torch.Tensor:
    """The buffer as (rows, V), a view (buffers made here are contiguous)."""
    return buf.view(-1, buf.shape[-1])


@functools.lru_cache(maxsize=64)
def _row_starts(rows: int, v: int, device: torch.device) -> torch.Tensor:
    """(0, V, 2V, …), one per row: the flat index of each row's first entry, cached.

    A training loop calls with the same shape every step, and the arange costs as much as a
    small op. Never written to: callers add to it out of place.
    """
    return torch.arange(0, rows * v, v, device=device)


def _taken_index(buf: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Flat indices of the taken entries (row i, column aᵢ) in ``buf.view(-1)``, shape (rows,).

    Reads and writes of the taken entries go through these (``take``, ``index_put_``,
    ``index_add_``) rather than ``gather``/``scatter`` along the last axis: on the CPU a
    ``scatter_add_`` into a bfloat16 buffer of 1024 × 50 000 took 58 ms where ``index_add_``
    took 0.06 ms (2 threads, median of 20 paired rounds).
    """
    return _row_starts(a.numel(), buf.shape[-1], buf.device).add(a.reshape(-1))


def _chunk_rows(p2: torch.Tensor) -> int:
    """Rows of a (rows, V) buffer per chunk, so a temporary stays near TEMP_ENTRIES entries."""
    return max(1, _common.TEMP_ENTRIES // max(p2.shape[1], 1))


def _xlogx_chunks(pi: torch.Tensor) -> torch.Tensor:
    """−Σᵢ πᵢ ln πᵢ per row (0 ln 0 = 0), through a temporary of a bounded number of rows."""
    p2 = _rows(pi)
    h = torch.empty(p2.shape[0], dtype=pi.dtype, device=pi.device)
    step = _chunk_rows(p2)
    for r0 in range(0, p2.shape[0], step):
        p = p2[r0 : r0 + step]
        h[r0 : r0 + step] = torch.special.xlogy(p, p).sum(-1).neg_()
    return h.view(pi.shape[:-1])


def _scale_in_place(
    pi: torch.Tensor,
    a: torch.Tensor,
    c: torch.Tensor,
    beta_s: torch.Tensor | None,
    h: torch.Tensor | None,
    pi_log_pi: torch.Tensor | None = None,
    *,
    pi_a: torch.Tensor | None = None,
    rest: torch.Tensor | None = None,
    use_rest: torch.Tensor | None = None,
) -> torch.Tensor:
    """π ↦ c (π − onehot(a)) + β s π ⊙ (ln π + H), row by row, overwriting π.

    c = s A per row; ``beta_s`` = β s per row (None when β = 0). With the entropy term the row is
    (c + β s H) π + β s π ln π. π ln π is ``pi_log_pi`` when the caller already holds it (it is
    then overwritten); otherwise it is formed here in bounded chunks, since it needs π itself.
    Where ``use_rest`` is True the taken entry's c π_a − c is formed as −c Σ_{j≠a} π_j from
    ``rest`` (see :func:`_rest`), ``pi_a`` being π_a before scaling.
    """
    if beta_s is None:
        pi.mul_(c.unsqueeze(-1))
    else:
        assert h is not None
        k = _rows((c + beta_s * h).unsqueeze(-1))
        bs = _rows(beta_s.unsqueeze(-1))
        p2 = _rows(pi)
        if pi_log_pi is not None:
            p2.mul_(k).add_(_rows(pi_log_pi).mul_(bs))
        else:
            step = _chunk_rows(p2)
            for r0 in range(0, p2.shape[0], step):
                p = p2[r0 : r0 + step]
                t = torch.special.xlogy(p, p).mul_(bs[r0 : r0 + step])
                p.mul_(k[r0 : r0 + step]).add_(t)
    flat = _taken_index(pi, a)
    if rest is None:
        pi.view(-1).index_add_(0, flat, c.reshape(-1), alpha=-1)
        return pi
    # Where 1 − π_a was summed exactly, the taken entry −c (1 − π_a) + β s π_a (ln π_a + H) is
    # formed from its parts, not as (c π_a + …) − c, which cancels when π_a ≈ 1.
    assert pi_a is not None and use_rest is not None
    taken = pi.take(flat).view(a.shape)
    exact = -c * rest
    if beta_s is not None:
        exact = exact + beta_s * torch.special.xlogy(pi_a, pi_a) + beta_s * h * pi_a
    fixed = torch.where(use_rest, exact, taken - c)
    pi.view(-1).index_put_((flat,), fixed.reshape(-1))
    return pi


def _softmax(z: torch.Tensor) -> torch.Tensor:
    """π = softmax(z) in a fresh contiguous buffer, exp shifted by max(z) so it cannot overflow.

    torch's fused softmax kernel is the fastest from V ≈ 16 on, but below that (V = 4: about 4×
    slower than the composite) its per-row overhead dominates; the composite form then wins.
    """
    if z.shape[-1] >= 16:
        pi = torch.softmax(z, dim=-1)
    else:
        pi = torch.sub(z, z.amax(dim=-1, keepdim=True)).exp_()
        pi = pi.div_(pi.sum(dim=-1, keepdim=True))
    return pi if pi.is_contiguous() else pi.contiguous()


def _log_pi(
    z: torch.Tensor,
    a: torch.Tensor,
    valid: torch.Tensor | None,
    adv: torch.Tensor,
    validate: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(π as a fresh buffer, ln π(a), π_a, the rows where π_a > ½ or None), checked.

    ln π(a) is read off the buffer as ln(π_a): one softmax pass serves both the loss and
    the backward, and π_a carries the same relative rounding as z_a − logsumexp(z). Only where
    π_a falls below the smallest normal float (ln π(a) ≲ −87 in float32), where that rounding
    would grow, are the few rows redone as z_a − logsumexp(z).

    With ``validate``, one host sync checks everything: an action outside 0…V−1, an all −∞ row
    (no category left), a NaN or +∞ logit, a non-finite advantage, and (in the rare slow path)
    a taken action of probability 0; it also learns whether any π_a > ½ (the rows whose
    backward needs 1 − π_a without cancellation). Padding steps are exempt. Without
    ``validate`` nothing is read back: ln π(a) = z_a − logsumexp(z) wherever π_a underflows
    (a second pass over z), and every row takes the cancellation-free path.
    """
    v = z.shape[-1]
    out_of_range = (a < 0) | (a >= v)
    if valid is not None:
        out_of_range &= valid
    a_safe = a.masked_fill(out_of_range if valid is None else out_of_range | ~valid, 0)
    pi = _softmax(z)  # the one B×V buffer
    pi_a = pi.gather(-1, a_safe.unsqueeze(-1)).squeeze(-1)
    small = pi_a < torch.finfo(pi.dtype).tiny
    if not validate:
        lse = torch.logsumexp(z, -1)
        exact = z.gather(-1, a_safe.unsqueeze(-1)).squeeze(-1) - lse
        return pi, torch.where(small, exact, pi_a.log()), pi_a, None
    bad = out_of_range | torch.isnan(pi_a) | ~torch.isfinite(adv)
    peaked = pi_a > 0.5
    if valid is not None:
        bad &= valid
        small &= valid
        peaked &= valid
    any_bad, any_small, any_peaked = torch.stack((bad.any(), small.any(), peaked.any())).tolist()
    if any_bad:
        _common.check_advantages(adv, valid)
        _raise_bad(z, a, bad, out_of_range)
    logp_a = pi_a.log()
    if any_small:
        rows = small.nonzero(as_tuple=True)
        z_r = z[rows]
        logp_r = z_r.gather(-1, a[rows].unsqueeze(-1)).squeeze(-1) - torch.logsumexp(z_r, -1)
        if not bool(torch.isfinite(logp_r).all()):
            _raise_bad(z, a, small & ~torch.isfinite(logp_a.index_put(rows, logp_r)), out_of_range)
        logp_a = logp_a.index_put(rows, logp_r)
    return pi, logp_a, pi_a, (peaked if any_peaked else None)


def _rest(pi: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
    """1 − π_a as Σ_{j≠a} π_j, summed without π_a (no cancellation), per row (shape (rows,)).

    In float32, π_a = 1 − 2e-9 rounds to 1, so 1 − π_a is 0 where the truth is 2e-9; the sum
    of the other probabilities keeps every digit (the core's ``score_logits`` does the same).
    ``flat`` are the taken entries (:func:`_taken_index`); they are set to 0 in place for the
    sum and put back: no copy of the buffer.
    """
    p1 = pi.view(-1)
    saved = p1.take(flat)
    p1.index_fill_(0, flat, 0.0)
    others = _rows(pi).sum(-1)
    p1.index_put_((flat,), saved)
    return others


def _raise_bad(z: torch.Tensor, a: torch.Tensor, bad: torch.Tensor, oor: torch.Tensor) -> None:
    """Name the first step that has no valid ln π(a), and say how to fix it."""
    i = first_index(bad)
    idx = "[" + ", ".join(str(j) for j in i) + "]"
    v = z.shape[-1]
    a_i = int(a[i])
    row = z[i]
    if bool(oor[i]):
        raise ValueError(
            f"actions{idx} = {a_i} is outside 0…{v - 1} (logits have {v} categories on their "
            "last axis); pass a valid action, or mark the step as padding with mask"
        )
    if bool(torch.isnan(row).any()) or bool(torch.isposinf(row).any()):
        raise ValueError(f"logits{idx} contain NaN or +inf; pass finite logits (−inf masks)")
    if bool(torch.isneginf(row).all()):
        raise ValueError(
            f"logits{idx} are all −inf: every category is masked, so no action has a "
            "probability; unmask at least one category, or mark the step as padding with mask"
        )
    raise ValueError(
        f"actions{idx} = {a_i} has logit −inf (probability 0), so ln π(a) = −∞; the action "
        "cannot have been drawn from this policy: check the action mask and the actions"
    )


class _CategoricalReinforce(torch.autograd.Function):
    """Autograd node: forward ℓ (reduced), backward the eligibility in one in-place buffer.

    Under ``create_graph=True`` the backward is written with differentiable ops instead (the
    same closed form), so second derivatives are exact rather than silently zero.
    """

    @staticmethod
    def forward(
        ctx,
        z: torch.Tensor,
        a: torch.Tensor,
        adv: torch.Tensor,
        valid: torch.Tensor | None,
        w: torch.Tensor,
        beta: float,
        reduction: str,
        keep: bool,
        validate: bool,
    ) -> torch.Tensor:
        # keep: a backward will follow (grad mode on and z requires grad), so π is kept for it.
        pi, logp_a, pi_a, peaked = _log_pi(z, a, valid, adv, validate)
        if valid is not None:
            # Padding rows may be all −inf (NaN after softmax); zero them so that the
            # backward's per-row scale of 0 leaves 0 there, not NaN.
            pi[~valid] = 0.0
        h = _xlogx_chunks(pi) if beta != 0.0 else None
        ell = -adv * logp_a
        if h is not None:
            ell = ell - beta * h
        ell = _common.zero_padding(ell, valid)
        ctx.beta, ctx.validate = beta, validate
        ctx.save_for_backward(z, a, adv, w, valid, h)
        ctx.pi = pi if keep else None
        ctx.pi_a, ctx.peaked = pi_a, peaked
        return _common.reduce(ell, w, reduction)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        z, a, adv, w, valid, h = ctx.saved_tensors
        a_safe = a if valid is None else a.masked_fill(~valid, 0)
        s = g * w
        c = s * adv
        if torch.is_grad_enabled():  # create_graph=True: a graph of the gradient itself
            grad = _differentiable_grad(z, a_safe, c, ctx.beta * s if ctx.beta else None, valid)
            return grad, None, None, None, None, None, None, None, None
        pi, ctx.pi = ctx.pi, None  # used (and overwritten) once; a second backward recomputes
        if pi is None:
            pi = _softmax(z)
            if valid is not None:
                pi[~valid] = 0.0
        flat = _taken_index(pi, a_safe)
        pi_a = pi.take(flat).view(a_safe.shape)
        rows = ctx.peaked
        rest = use_rest = None
        if rows is not None or not ctx.validate:
            rest = _rest(pi, flat).view(a_safe.shape)
            use_rest = torch.ones_like(a_safe, dtype=torch.bool) if rows is None else rows
        beta_s = ctx.beta * s if h is not None else None
        grad = _scale_in_place(pi, a_safe, c, beta_s, h, pi_a=pi_a, rest=rest, use_rest=use_rest)
        return grad, None, None, None, None, None, None, None, None


def _differentiable_grad(
    z: torch.Tensor,
    a: torch.Tensor,
    c: torch.Tensor,
    beta_s: torch.Tensor,
    valid: torch.Tensor | None,
) -> torch.Tensor:
    """∂ℓ/∂z = c (π − onehot(a)) + β s π ⊙ (ln π + H), out of place, every op differentiable."""
    logp = torch.log_softmax(z, dim=-1)
    pi = logp.exp()
    onehot = torch.nn.functional.one_hot(a, z.shape[-1]).to(z.dtype)
    grad = c.unsqueeze(-1) * (pi - onehot)
    if beta_s is not None:
        plogp = torch.where(pi > 0, pi * logp, torch.zeros((), dtype=z.dtype))
        H = -plogp.sum(-1, keepdim=True)
        grad = grad + beta_s.unsqueeze(-1) * (plogp + pi * H)
    if valid is not None:
        grad = torch.where(valid.unsqueeze(-1), grad, torch.zeros((), dtype=z.dtype))
    return grad


def _plain_loss(
    z: torch.Tensor,
    a: torch.Tensor,
    adv: torch.Tensor,
    valid: torch.Tensor | None,
    w: torch.Tensor,
    beta: float,
    reduction: str,
) -> torch.Tensor:
    """The same loss in plain differentiable ops, for torch.compile and torch.func transforms.

    ln π(a) = z_a − logsumexp(z), H = −Σ π ln π; autograd's own backward is then the closed
    form, and every transform (grad, vmap, jvp, compile) applies. No input checks (they need
    host syncs that a traced graph cannot hold).
    """
    a_safe = a if valid is None else a.masked_fill(~valid, 0)
    logp = torch.log_softmax(z, dim=-1)
    ell = -adv * logp.gather(-1, a_safe.unsqueeze(-1)).squeeze(-1)
    if beta != 0.0:
        pi = logp.exp()
        ell = ell + beta * torch.where(pi > 0, pi * logp, torch.zeros((), dtype=z.dtype)).sum(-1)
    return _common.reduce(_common.zero_padding(ell, valid), w, reduction)


# Which path a call takes (CPU, no padding, β = 0, checked), from the measured crossovers of
# bench/reinforce_loss.py and docs/torch-losses.md. At these sizes a call costs tens of
# microseconds to a millisecond, an autograd.Function's Python forward and backward cost more
# than they save, and torch's own C++ nodes are the fastest: the native path. Below V = 16,
# torch's log_softmax takes a slow per-row kernel (≈ 150 µs at 4096 × 4, where logsumexp takes
# ≈ 55 µs), so from SMALL_V_LSE_ROWS rows on, at one thread, the native path is written with
# logsumexp instead. With more threads log_softmax splits the rows among them while the
# composite's small ops stay on one (below torch's parallel grain), and cross_entropy wins again.
# Beyond the native limits the lean node wins: it holds one B×V buffer where cross_entropy's
# backward allocates several, whose first-touch page faults dominate at these sizes.
SMALL_V = 16
NATIVE_ENTRIES = 1 << 20  # V ≥ SMALL_V
NATIVE_SMALL_V_ENTRIES = 1 << 15  # V < SMALL_V
SMALL_V_LSE_ROWS = 4096
SMALL_V_LSE_MAX_THREADS = 1

# The native path's backward forms the taken entry as c (π_a − 1), as F.cross_entropy does: its
# relative error is about 2⁻²⁴ / (1 − π_a) in float32. Where some step has −ln π_a < this (π_a
# above 1 − 2⁻¹⁰, where it would exceed 2⁻¹⁴), the lean path is taken instead.
NATIVE_MIN_NLL = 2.0**-10


def _native(z: torch.Tensor) -> bool:
    """Whether a checked, unpadded, β = 0 call on ``z`` takes the native path (see above)."""
    n = z.numel()
    return z.is_cpu and n <= (NATIVE_ENTRIES if z.shape[-1] >= SMALL_V else NATIVE_SMALL_V_ENTRIES)


@functools.lru_cache(maxsize=256)
def _reciprocal(n: int) -> torch.Tensor:
    """1/n as a 0-d float64 CPU tensor, cached.

    A product of a tensor with it keeps the tensor's dtype, and costs half of a product with a
    python float (which wraps the number in a new tensor).
    """
    return torch.tensor(1.0 / n, dtype=torch.float64)


def _native_loss(
    z: torch.Tensor, a: torch.Tensor, adv: torch.Tensor, reduction: str
) -> torch.Tensor | None:
    r"""ℓ = −A ln π(a) in torch's native ops (no padding, no entropy term), checked.

    −ln π(a) is ``cross_entropy``, or logsumexp(z′) − z′_a with z′ = z − max z (the max
    detached, so the gradient is unchanged) below V = 16 from :data:`SMALL_V_LSE_ROWS` rows on
    at one thread;
    autograd's backward of either is the same closed form, A (π − onehot(a)), in C++ nodes, as
    accurate as cross_entropy's (the shift keeps z′ − logsumexp z′ exact near the max, where
    z − logsumexp z would lose |z| ε). The mean is a dot product with A/N (one node fewer than
    ``(A * ce).mean()``). Two scalar reads check the result (on the CPU, where this path
    runs, they wait on nothing); None (the caller takes the checked path, which also names the
    problem) where anything is off: the loss is not finite (NaN or ±∞ in the logits or the
    advantages, a taken action of probability 0), ``cross_entropy`` ignored a −100 action
    (ℓ = 0), or some step is so peaked that c (π_a − 1) would lose digits
    (−ln π_a < :data:`NATIVE_MIN_NLL`). Any other out-of-range action makes the native ops
    raise, which the caller catches.
    """
    v = z.shape[-1]
    z2, a1 = (z, a) if z.dim() == 2 else (z.reshape(-1, v), a.reshape(-1))
    if (
        v >= SMALL_V
        or z2.shape[0] < SMALL_V_LSE_ROWS
        or torch.get_num_threads() > SMALL_V_LSE_MAX_THREADS
    ):
        nll = torch.nn.functional.cross_entropy(z2, a1, reduction="none")
    else:
        zs = z2 - z2.detach().amax(-1, keepdim=True)
        nll = torch.logsumexp(zs, -1) - zs.gather(-1, a1.unsqueeze(-1)).squeeze(-1)
    a_w = adv if adv.dim() == 1 else adv.reshape(-1)
    if reduction == "none":
        out = nll * a_w
        total = out.detach().sum().item()
        out = out if out.shape == a.shape else out.view(a.shape)
    else:
        out = torch.dot(nll, a_w * _reciprocal(nll.numel()) if reduction == "mean" else a_w)
        total = out.item()
    # NaN or ±∞ in the loss; then NaN or a peaked step
    if total - total != 0.0 or not nll.detach().min().item() >= NATIVE_MIN_NLL:
        return None
    return out


def _native_first(
    logits: object, actions: object, advantages: object, reduction: str, entropy_coef: object
) -> torch.Tensor | None:
    """The native path tried before any other check, for the calls it can serve; else None.

    At the smallest sizes the input checks cost as much as the saving of the native path, so
    this runs first, guarded by attribute reads only (types, dtypes, shapes, device): anything
    malformed that slips past them makes the native ops raise, and None sends the call to the
    checked path, which names the problem. None also where the native check finds a bad or
    peaked step (see :func:`_native_loss`).
    """
    if not (
        type(logits) is torch.Tensor
        and type(actions) is torch.Tensor
        and type(advantages) is torch.Tensor
        and type(entropy_coef) in (float, int)
        and entropy_coef == 0
        and reduction in _common.REDUCTIONS
        and logits.is_floating_point()
        and logits.dim() >= 1
        and logits.numel() > 0
        and actions.dtype == torch.int64
        and actions.shape == logits.shape[:-1]
        and advantages.shape == actions.shape
        and advantages.dtype == logits.dtype
        and not advantages.requires_grad
        and _native(logits)
        and not _common.transformed(logits)
    ):
        return None
    try:
        return _native_loss(logits, actions, advantages, reduction)
    except (IndexError, RuntimeError):  # malformed past the guards: the checked path names it
        return None


class _Lean(torch.autograd.Function):
    """Autograd node of the common case (no padding, β = 0, checked), its forward done outside.

    :func:`_lean_loss` has already formed π in one buffer, the flat indices of the taken
    entries, ln π(a) and the loss, and checked them with one host sync; this node only hands
    the loss to autograd and, in the backward, turns the buffer into the gradient in place:
    c π (``mul_``), then the taken entries, −c at each (``index_add_``) or, where some π_a > ½,
    −c Σ_{j≠a} π_j (``index_put_``), which keeps every digit where 1 − π_a would cancel.
    """

    @staticmethod
    def forward(ctx, z, loss, pi, flat, adv, scale, peaked):
        ctx.save_for_backward(z, adv)
        ctx.pi, ctx.flat, ctx.scale, ctx.peaked = pi, flat, scale, peaked
        return loss  # formed outside; autograd returns it as a view whose grad_fn is this node

    @staticmethod
    def backward(ctx, g):
        z, adv = ctx.saved_tensors
        c = (adv * g).reshape(-1)
        if ctx.scale is not None:
            c.mul_(ctx.scale)  # in place: c keeps the logits' dtype
        if torch.is_grad_enabled():  # create_graph=True: a graph of the gradient itself
            a = ctx.flat - _row_starts(c.numel(), z.shape[-1], z.device)
            grad = _differentiable_grad(z, a.view(z.shape[:-1]), c.view(z.shape[:-1]), None, None)
            return grad, None, None, None, None, None, None
        pi, ctx.pi = ctx.pi, None  # used (and overwritten) once; a second backward recomputes
        if pi is None:
            pi = _softmax(z.detach())
        flat = ctx.flat
        rest = _rest(pi, flat) if ctx.peaked else None
        _rows(pi).mul_(c.unsqueeze(-1))
        if rest is None:
            pi.view(-1).index_add_(0, flat, c, alpha=-1)
        else:
            pi.view(-1).index_put_((flat,), rest.mul_(c).neg_())
        return pi, None, None, None, None, None, None


def _lean_loss(
    z: torch.Tensor, a: torch.Tensor, adv: torch.Tensor, reduction: str
) -> torch.Tensor | None:
    """The common case's loss, checked with one host sync; None where the general path must act.

    π = softmax(z) fills the one buffer; ln π(a) = ln π_a off it; an action outside 0…V−1 makes
    its ln π(a) NaN. One read of (the loss, max π_a) then tells everything: a non-finite loss
    (a bad action, NaN or ±∞ logits or advantages, a taken action whose π_a underflowed below
    the smallest normal float) returns None, and the general path names the problem or, for an
    underflow, recomputes those rows as z_a − logsumexp(z); max π_a > ½ says whether the
    backward must form 1 − π_a without cancellation.
    """
    v = z.shape[-1]
    zd = z.detach()
    pi = _softmax(zd)  # the one B×V buffer
    a1 = a.reshape(-1)
    a_safe = a1.clamp(0, v - 1)
    flat = _taken_index(pi, a_safe)
    pi_a = pi.view(-1).take(flat)
    logp_a = pi_a.log().masked_fill_(a_safe != a1, float("nan"))
    adv1 = adv.reshape(-1)
    if reduction == "none":
        loss = (logp_a * adv1).neg_()
        check = loss.sum()
        scale = None
    else:
        scale = _reciprocal(a1.numel()) if reduction == "mean" else None
        loss = torch.dot(logp_a, adv1).neg_()
        if scale is not None:
            loss.mul_(scale)  # in place: the loss keeps the logits' dtype
        check = loss
    total, top = torch.stack((check, pi_a.amax())).tolist()
    if total - total != 0.0:  # NaN or ±∞
        return None
    loss = loss.view(a.shape) if reduction == "none" else loss
    return _Lean.apply(z, loss, pi, flat, adv, scale, top > 0.5)


def reinforce_loss(
    logits: torch.Tensor,
    actions: torch.Tensor,
    advantages: torch.Tensor | float,
    *,
    reduction: str = "mean",
    mask: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    validate: bool = True,
) -> torch.Tensor:
    r"""REINFORCE loss ℓ = −A ln π(a) − β H(π), π = softmax(z); backward e in closed form.

    Per step: ℓ = −A (z_a − logsumexp z) − β H, and ∂ℓ/∂z = A (π − onehot(a)) + β π ⊙ (ln π + H),
    i.e. −A times the characteristic eligibility onehot(a) − π (Williams, 1992) plus β times
    −∂H/∂z. The backward runs in one buffer of the logits' shape, in place, with no autograd
    graph: it is the same number as the autograd of
    ``-(A * Categorical(logits=z).log_prob(a)).mean() - β Categorical(logits=z).entropy().mean()``,
    at a fraction of the time and memory for large V.

    Categories masked with a logit of −∞ have π = 0 and a gradient of exactly 0. Steps marked
    as padding (``mask`` False) contribute 0 to the loss and to every gradient, and their
    logits and actions are not looked at, so they may hold anything (even all −∞ rows).

    The advantages are constants: they are detached, and no gradient reaches them (train a
    learned baseline with its own loss). The actions are indices, with no gradient either.
    Checking the inputs costs one host sync per call (a device → host read of one flag).

    Args:
        logits: z, shape (*L, V): any leading shape L (batch, time, …), V categories last.
            Floating (float64, float32, bfloat16, float16), on any device.
        actions: a, integer tensor of shape L, 0 ≤ a < V on every real step.
        advantages: A, broadcastable to L (a number, or one per step), cast to the logits'
            dtype.
        reduction: "mean" (Σ ℓ over the real steps divided by their count N; 0 when N = 0),
            "sum" (Σ ℓ over the real steps), or "none" (ℓ of shape L, 0 on padding).
        mask: optional bool tensor broadcastable to L: True for a real step, False for padding.
        entropy_coef: β ≥ 0 typically, a python float; the loss subtracts β H(π) per step.
        validate: check the values (actions in range, logits, finite advantages) at the cost
            of one host sync per call; False skips every value check and the sync (for users
            who must avoid it, e.g. in a CUDA graph), and then a bad value gives NaN or ±∞.

    Returns:
        The loss: a scalar for "mean" and "sum", shape L for "none"; in the logits' dtype.

    Second derivatives (``create_graph=True``, Hessian-vector products) are exact. Under
    ``torch.compile`` and the ``torch.func`` transforms (grad, vmap, jvp) the loss is written in
    plain differentiable ops, without the value checks.

    Raises:
        ValueError: bad shapes or dtypes; an action outside 0…V−1; on a real step, logits that
            are all −∞, contain NaN or +∞, or give the taken action probability 0, or a
            non-finite advantage (the value checks only with ``validate``).
    """
    if validate and mask is None:
        loss = _native_first(logits, actions, advantages, reduction, entropy_coef)
        if loss is not None:
            return loss
    _common.check_reduction(reduction)
    beta = _common.check_coef(entropy_coef)
    z = _common.check_tensor("logits", logits)
    _common.check_float("logits", z)
    if z.dim() < 1 or z.shape[-1] == 0:
        raise ValueError(
            "logits must have a last axis of categories (shape (*L, V), V ≥ 1); "
            f"got {tuple(z.shape)}"
        )
    lead = z.shape[:-1]
    a = _common.index_actions(actions, lead, "logits", z.shape)
    if a.dtype != torch.int64 or a.device != z.device:
        a = a.to(device=z.device, dtype=torch.int64)
    adv = _common.advantages_like(advantages, lead, z)
    valid = None if mask is None else _common.valid_mask(mask, lead, z.device)
    if _common.transformed(z):
        w = _common.element_weights(valid, lead, reduction, z)
        return _plain_loss(z, a, adv, valid, w, beta, reduction)
    # The native path, where it applies, was tried first (above).
    if validate and beta == 0.0 and valid is None and z.numel() > 0:
        if (loss := _lean_loss(z, a, adv, reduction)) is not None:
            return loss
    w = _common.element_weights(valid, lead, reduction, z)
    keep = torch.is_grad_enabled() and z.requires_grad
    return _CategoricalReinforce.apply(z, a, adv, valid, w, beta, reduction, keep, validate)
