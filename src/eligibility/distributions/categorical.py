r"""Categorical distribution: one draw a ∈ {0, …, K−1}.

Two views of one distribution, as in ``torch.distributions.Categorical``:

* ``probs`` w: non-negative *relative weights*, renormalised by their sum, π = w / Σⱼ wⱼ;
* ``logits`` z: π = softmax(z); an entry of −∞ masks its category out.

Every function here is a pure kernel over arrays of the array API standard: it trusts its
inputs (they are checked once, at the public boundary in :mod:`eligibility.api`). The last
axis indexes categories; leading axes are batch axes and broadcast.

Characteristic eligibility (Williams, 1992, §4), e = ∂ ln π_a / ∂θ:

* probs:  ln π_a = ln w_a − ln Σⱼ wⱼ, so eᵢ = δᵢₐ / w_a − 1 / Σⱼ wⱼ;
* logits: ln π_a = z_a − logsumexp(z), so e = onehot(a) − softmax(z).
"""

from __future__ import annotations

import array_api_compat

from eligibility._array import Array, array_namespace, eye, xlogx
from eligibility.distributions._spec import (
    WEIGHTS_OR_LOGITS,
    CheckedLike,
    DistributionSpec,
    check_integral,
    check_no_zero_weight,
    check_weights_or_logits,
    one_of,
    probs_and_logits,
    reject,
)

_xp = array_namespace


def onehot(a: Array, k: int, like: Array) -> Array:
    """One-hot vector with entries δᵢₐ.

    Shape ``a.shape + (k,)``, in the dtype and device of ``like``.
    """
    xp = _xp(like)
    hit = a[..., None] == xp.arange(k, device=array_api_compat.device(like))
    return xp.astype(hit, like.dtype)


def _pick(x: Array, a: Array) -> Array:
    """Pick x_a: the entry of the last axis at index a (broadcasting a against the batch axes)."""
    xp = _xp(x)
    hit = a[..., None] == xp.arange(x.shape[-1], device=array_api_compat.device(x))
    return xp.sum(xp.where(hit, x, xp.zeros_like(x)), axis=-1)


def normalise(w: Array) -> Array:
    """Normalised weights π = w / Σⱼ wⱼ."""
    xp = _xp(w)
    return w / xp.sum(w, axis=-1, keepdims=True)


def log_softmax(z: Array) -> Array:
    """Log-softmax ln softmax(z) = z − logsumexp(z), with logsumexp(z) = m + log1p(Σⱼ≠top e^{zⱼ−m}).

    m = max(z) keeps exp from overflowing; leaving the top entry's e⁰ = 1 out of the sum and
    adding it back through log1p keeps ln π_top exact when it is close to 0 (z = [40, 0]:
    ln π₀ = −4.25e-18, where ln(1 + 4.25e-18) would read 0).
    """
    xp = _xp(z)
    m = xp.max(z, axis=-1, keepdims=True)
    top = _first_argmax(z)
    u = xp.exp(z - m)
    rest = xp.sum(xp.where(top, xp.zeros_like(u), u), axis=-1, keepdims=True)
    return z - m - xp.log1p(rest)


def _first_argmax(z: Array) -> Array:
    """Boolean mask of the first largest entry of the last axis."""
    xp = _xp(z)
    idx = xp.argmax(z, axis=-1, keepdims=True)
    return idx == xp.arange(z.shape[-1], device=array_api_compat.device(z))


def complement(z: Array) -> Array:
    """1 − πᵢ = −expm1(ln πᵢ), exact even where πᵢ is within an ulp of 1."""
    xp = _xp(z)
    return -xp.expm1(log_softmax(z))


def masked_log_softmax(z: Array, pi: Array) -> Array:
    """Log-softmax ln π with 0 in place of −∞ at masked categories, where a factor π = 0 follows."""
    xp = _xp(z)
    return xp.where(pi > 0, log_softmax(z), xp.zeros_like(z))


def softmax(z: Array) -> Array:
    """Softmax πᵢ = exp(zᵢ) / Σⱼ exp(zⱼ), shifted by max(z) so that exp cannot overflow."""
    xp = _xp(z)
    u = xp.exp(z - xp.max(z, axis=-1, keepdims=True))
    return u / xp.sum(u, axis=-1, keepdims=True)


# probs (relative weights) ---------------------------------------------------------------


def log_prob_probs(w: Array, a: Array) -> Array:
    """Log-probability ln π_a = ln w_a − ln Σⱼ wⱼ."""
    xp = _xp(w)
    return xp.log(_pick(w, a)) - xp.log(xp.sum(w, axis=-1))


def score_probs(w: Array, a: Array) -> Array:
    """Eligibility w.r.t. the weights: eᵢ = ∂ ln π_a / ∂wᵢ = δᵢₐ / w_a − 1 / Σⱼ wⱼ.

    Every weight appears in the normaliser Σⱼ wⱼ, so the categories that were not drawn get
    −1/Σw, not 0. The weights are scale-free (π(cw) = π(w)), hence Σᵢ wᵢ eᵢ = 0: weights ×100
    give eligibilities ÷100.
    """
    xp = _xp(w)
    k = w.shape[-1]
    w_a = _pick(w, a)[..., None]
    s = xp.sum(w, axis=-1, keepdims=True)
    return onehot(a, k, w) / w_a - 1.0 / s


def entropy_probs(w: Array) -> Array:
    """Entropy H = −Σᵢ πᵢ ln πᵢ with π = w / Σw (0 ln 0 = 0)."""
    xp = _xp(w)
    return -xp.sum(xlogx(xp, normalise(w)), axis=-1)


def entropy_grad_probs(w: Array) -> Array:
    """Entropy gradient ∂H/∂wⱼ = −(ln πⱼ + H) / Σw.

    Unbounded (+∞) at a zero weight; checked at the boundary.
    """
    xp = _xp(w)
    pi = normalise(w)
    h = entropy_probs(w)[..., None]
    return (-xp.log(pi) - h) / xp.sum(w, axis=-1, keepdims=True)


def fisher_probs(w: Array) -> Array:
    """Fisher information F = E[e eᵀ] = diag(u / (S w)) − (u uᵀ − ū ūᵀ) / S².

    Here S = Σw, u = [w > 0] and ū = 1 − u.

    With every weight positive this is diag(1 / (S w)) − 1/S². A zero-weight category is never
    drawn, so its eligibility is always −1/S: it is uncorrelated with the others (those
    entries vanish) and its own second moment is 1/S².
    """
    xp = _xp(w)
    s = xp.sum(w, axis=-1, keepdims=True)
    u = xp.astype(w > 0, w.dtype)
    d = u / (s * xp.where(w > 0, w, xp.ones_like(w)))
    ubar = 1.0 - u
    outer = u[..., :, None] * u[..., None, :] - ubar[..., :, None] * ubar[..., None, :]
    return d[..., :, None] * eye(xp, w.shape[-1], w) - outer / (s[..., None] ** 2)


# logits ----------------------------------------------------------------------------------


def log_prob_logits(z: Array, a: Array) -> Array:
    """Log-probability ln π_a = z_a − logsumexp(z)."""
    return _pick(log_softmax(z), a)


def score_logits(z: Array, a: Array) -> Array:
    """Eligibility w.r.t. the logits: e = ∂ ln π_a / ∂z = onehot(a) − softmax(z).

    A masked category (zᵢ = −∞) has πᵢ = 0 and eᵢ = 0 exactly. Σᵢ eᵢ = 0, because adding a
    constant to every logit leaves π unchanged. The taken entry 1 − π_a is evaluated as
    Σⱼ≠ₐ πⱼ: subtracting from 1 would lose every digit of it when π_a is close to 1.
    """
    xp = _xp(z)
    pi = softmax(z)
    hit = onehot(a, z.shape[-1], z) > 0
    zero = xp.zeros_like(pi)
    rest = xp.sum(xp.where(hit, zero, pi), axis=-1, keepdims=True)
    return xp.where(hit, rest, zero - pi)  # 0 − π keeps a masked entry +0, not −0


def entropy_logits(z: Array) -> Array:
    """Entropy H = −Σᵢ πᵢ ln πᵢ, π = softmax(z), masked categories contributing 0."""
    xp = _xp(z)
    pi = softmax(z)
    return -xp.sum(pi * masked_log_softmax(z, pi), axis=-1)


def entropy_grad_logits(z: Array) -> Array:
    """Entropy gradient ∂H/∂zⱼ = −πⱼ (ln πⱼ + H); exactly 0 for a masked category."""
    xp = _xp(z)
    pi = softmax(z)
    h = -xp.sum(pi * masked_log_softmax(z, pi), axis=-1, keepdims=True)
    return xp.where(pi > 0, -pi * (masked_log_softmax(z, pi) + h), xp.zeros_like(z))


def fisher_logits(z: Array) -> Array:
    """Fisher information F = E[e eᵀ] = diag(π) − π πᵀ, π = softmax(z).

    The diagonal πᵢ − πᵢ² is evaluated as πᵢ (1 − πᵢ) with 1 − πᵢ from :func:`complement`:
    at z = [40, 0] the subtraction gives 0 (a singular F) instead of 4.25e-18.
    """
    xp = _xp(z)
    pi = softmax(z)
    e = eye(xp, z.shape[-1], z)
    diag = (pi * complement(z))[..., :, None] * e
    return diag - pi[..., :, None] * pi[..., None, :] * (1.0 - e)


def chain_probs(w: Array, g: Array) -> Array:
    """Chain rule through π = w / Σw: ∂f/∂w = (g − ⟨π, g⟩) / Σw from g = ∂f/∂π."""
    xp = _xp(w)
    pi = normalise(w)
    return (g - xp.sum(pi * g, axis=-1, keepdims=True)) / xp.sum(w, axis=-1, keepdims=True)


def chain_logits(z: Array, g: Array) -> Array:
    """Chain rule through π = softmax(z): ∂f/∂z = π ⊙ (g − ⟨π, g⟩) from g = ∂f/∂π.

    Exactly 0 where π = 0.
    """
    xp = _xp(z)
    pi = softmax(z)
    inner = xp.sum(xp.where(pi > 0, pi * g, xp.zeros_like(z)), axis=-1, keepdims=True)
    return xp.where(pi > 0, pi * (g - inner), xp.zeros_like(z))


# the spec -----------------------------------------------------------------------------------


def _check_value(c: CheckedLike, v: Array) -> Array:
    xp = c.xp
    w = c.params[c.form]
    k = w.shape[-1]
    a = check_integral(xp, v, "an integer category index")
    reject(
        xp,
        (a < 0) | (a >= k),
        a,
        lambda i, x: f"value: category {x} at index {i} is outside {{0, …, {k - 1}}}",
    )
    w_a = _pick(w, a)
    zero = (w_a <= 0) if c.form == "probs" else (w_a == -xp.inf)
    what = "weight 0" if c.form == "probs" else "logit −inf"
    torch_does = (
        "torch clamps π to eps instead and returns a zero gradient"
        if c.form == "probs"
        else "torch returns ln π = −∞ with a finite gradient instead"
    )
    reject(
        xp,
        zero,
        xp.broadcast_to(a, zero.shape),
        lambda i, x: (
            f"value: category {x} at index {i} has probability zero ({what}), so ln π "
            f"is −∞ and its eligibility does not exist ({torch_does})"
        ),
    )
    return a


SPEC = DistributionSpec(
    name="categorical",
    picture="categories",
    parameters=("probs", "logits"),
    forms=probs_and_logits(
        (log_prob_probs, score_probs, entropy_probs, entropy_grad_probs, fisher_probs),
        (log_prob_logits, score_logits, entropy_logits, entropy_grad_logits, fisher_logits),
        views=("probs w (relative weights)", "logits z"),
    ),
    choose_form=one_of("categorical", ("probs", "logits")),
    param_event_dims=1,
    value_event_dims=0,
    support="a ∈ {0, …, K−1}",
    check_params=check_weights_or_logits,
    check_value=_check_value,
    check_entropy_grad=check_no_zero_weight,
    flags=WEIGHTS_OR_LOGITS,
    torch_name="Categorical",
    value_is_index=True,
    examples=(
        "--probs 0.69 0.1 0.2 0.01 --action 0",
        "--probs 69 10 20 1 --action 0          # ×100: e ÷100",
        "--logits 1.2 -0.3 0.5 --action 2 --features 1.0 -2.0",
        '--probs "0.69 0.1 0.2 0.01" "0.5 0.5 0 0" --action 0 1',
    ),
)


__all__ = [
    "SPEC",
    "chain_logits",
    "chain_probs",
    "complement",
    "entropy_grad_logits",
    "entropy_grad_probs",
    "entropy_logits",
    "entropy_probs",
    "fisher_logits",
    "fisher_probs",
    "log_prob_logits",
    "log_prob_probs",
    "log_softmax",
    "masked_log_softmax",
    "normalise",
    "onehot",
    "score_logits",
    "score_probs",
    "softmax",
]
