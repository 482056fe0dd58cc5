r"""Multinomial distribution: counts x ∈ ℕᴷ with Σᵢ xᵢ = n, from n independent categorical draws.

Parametrised like ``torch.distributions.Multinomial``: ``total_count`` n (an integer) and
``probs`` w (relative weights, π = w / Σw) or ``logits`` z (π = softmax(z)).

    P(x) = n! / ∏ᵢ xᵢ! · ∏ᵢ πᵢ^xᵢ

Characteristic eligibility: the count vector is the sum of n one-hot categorical draws, and
ln P(x) = const + Σᵢ xᵢ ln πᵢ, so the eligibility is the sum of the n categorical ones:

* probs:  eᵢ = xᵢ / wᵢ − n / Σⱼ wⱼ   (xᵢ / wᵢ read as 0 when xᵢ = wᵢ = 0);
* logits: e = x − n softmax(z).

With n = 1 both reduce to the categorical eligibility.

Log-factorials are ln Γ(x + 1) (``lgamma``), never a running sum of ln k, and the kernels run
in float64 (``min_compute_dtype``): ln n! and Σ E[ln Xᵢ!] cancel to a small entropy, so their
rounding error would grow with n. ln πᵢ is ln wᵢ − ln Σw, never ln(wᵢ / Σw), which underflows.

Kernels trust their inputs; the spec at the bottom declares the checks the dispatcher runs.
"""

from __future__ import annotations

from typing import Any

import array_api_compat
import numpy as np

from eligibility._array import Array, array_namespace, lgamma, safe_log, xlogx
from eligibility.distributions import categorical
from eligibility.distributions._spec import (
    WEIGHTS_OR_LOGITS,
    CheckedLike,
    DistributionSpec,
    Flag,
    check_integral,
    check_no_zero_weight,
    check_weights_or_logits,
    fmt,
    one_of,
    probs_and_logits,
    reject,
)

_xp = array_namespace


def log_factorial_table(n: int, like: Array) -> Array:
    """Table [ln 0!, ln 1!, …, ln n!] = ln Γ(k + 1), k = 0, …, n."""
    xp = _xp(like)
    k = xp.arange(n + 1, dtype=like.dtype, device=array_api_compat.device(like))
    return lgamma(xp, k + 1.0)


def log_factorial(x: Array) -> Array:
    """Log-factorial ln x! = ln Γ(x + 1) of integral float counts."""
    return lgamma(_xp(x), x + 1.0)


def _log_prob(n: int, log_pi: Array, x: Array) -> Array:
    xp = _xp(x)
    n_arr = xp.asarray(float(n), dtype=x.dtype, device=array_api_compat.device(x))
    coef = log_factorial(n_arr) - xp.sum(log_factorial(x), axis=-1)
    return coef + xp.sum(xp.where(x > 0, x * log_pi, xp.zeros_like(x)), axis=-1)


def log_prob_probs(n: int, w: Array, x: Array) -> Array:
    """Log-probability ln P(x) = ln n! − Σᵢ ln xᵢ! + Σᵢ xᵢ (ln wᵢ − ln Σw)."""
    xp = _xp(w)
    return _log_prob(n, safe_log(xp, w) - xp.log(xp.sum(w, axis=-1, keepdims=True)), x)


def log_prob_logits(n: int, z: Array, x: Array) -> Array:
    """Log-probability ln P(x) = ln n! − Σᵢ ln xᵢ! + Σᵢ xᵢ (zᵢ − logsumexp z)."""
    pi = categorical.softmax(z)
    return _log_prob(n, categorical.masked_log_softmax(z, pi), x)


def score_probs(n: int, w: Array, x: Array) -> Array:
    """Eligibility eᵢ = ∂ ln P(x) / ∂wᵢ = xᵢ / wᵢ − n / Σⱼ wⱼ."""
    xp = _xp(w)
    ratio = xp.where(x > 0, x / xp.where(w > 0, w, xp.ones_like(w)), xp.zeros_like(w))
    return ratio - n / xp.sum(w, axis=-1, keepdims=True)


def score_logits(n: int, z: Array, x: Array) -> Array:
    """Eligibility e = ∂ ln P(x) / ∂z = x − n softmax(z).

    Evaluated as xᵢ (1 − πᵢ) − πᵢ (n − xᵢ), 1 − πᵢ from :func:`categorical.complement`: at
    z = [40, 0] with x = [n, 0], x₀ − n π₀ subtracts two equal floats.
    """
    pi = categorical.softmax(z)
    return x * categorical.complement(z) - pi * (n - x)


def _binomial_pmf(n: int, p: Array) -> Array:
    """Binomial pmf P(Y = k) for Y ~ Binomial(n, p), k = 0, …, n, on a new last axis."""
    xp = _xp(p)
    dev = array_api_compat.device(p)
    table = log_factorial_table(n, p)
    k = xp.arange(n + 1, dtype=p.dtype, device=dev)
    p_ = p[..., None]
    log_c = table[n] - table - xp.flip(table)
    log_pmf = log_c + k * safe_log(xp, p_) + (n - k) * safe_log(xp, 1.0 - p_)
    impossible = ((k > 0) & (p_ <= 0)) | ((k < n) & (p_ >= 1))
    return xp.where(impossible, xp.zeros_like(log_pmf), xp.exp(log_pmf))


def _expected_log_factorials(n: int, pi: Array) -> Array:
    """Σᵢ E[ln Xᵢ!] with Xᵢ ~ Binomial(n, πᵢ), by exact summation over k = 0, …, n.

    The pmf is renormalised by its sum, which removes the rounding error every term shares
    (that of ln n!), and ln k! is centred on ln m! at m = ⌊n/2⌋ before weighting: the sum then
    carries the small differences ln k! − ln m!, not ln k! itself (82 109 at n = 10⁴), so
    its rounding error does not swamp the small entropy left after the cancellation.
    """
    xp = _xp(pi)
    table = log_factorial_table(n, pi)
    pmf = _binomial_pmf(n, pi)
    pmf = pmf / xp.sum(pmf, axis=-1, keepdims=True)
    centre = table[n // 2]
    return xp.sum(xp.sum(pmf * (table - centre), axis=-1) + centre, axis=-1)


def _entropy(n: int, pi: Array, sum_pi_log_pi: Array) -> Array:
    """Entropy H = −ln n! + Σᵢ E[ln Xᵢ!] − n Σᵢ πᵢ ln πᵢ, with Xᵢ ~ Binomial(n, πᵢ) (exact sum)."""
    xp = _xp(pi)
    ln_n_fact = lgamma(xp, xp.asarray(n + 1.0, dtype=pi.dtype, device=array_api_compat.device(pi)))
    return -ln_n_fact + _expected_log_factorials(n, pi) - n * sum_pi_log_pi


def _entropy_grad_pi(n: int, pi: Array) -> Array:
    """Entropy gradient ∂H/∂πᵢ = n E[ln(Yᵢ + 1)] − n (ln πᵢ + 1), Yᵢ ~ Binomial(n − 1, πᵢ).

    Uses d/dp E_{Bin(n,p)}[f(X)] = n E_{Bin(n−1,p)}[f(Y + 1) − f(Y)] with f(k) = ln k!.
    """
    xp = _xp(pi)
    if n == 0:
        return xp.zeros_like(pi)
    dev = array_api_compat.device(pi)
    log_k1 = xp.log(xp.arange(1, n + 1, dtype=pi.dtype, device=dev))
    e_log = xp.sum(_binomial_pmf(n - 1, pi) * log_k1, axis=-1)
    return n * e_log - n * (xp.log(pi) + 1.0)


def entropy_probs(n: int, w: Array) -> Array:
    """Entropy of Multinomial(n, w / Σw), by exact summation over each count's binomial law."""
    xp = _xp(w)
    pi = categorical.normalise(w)
    return _entropy(n, pi, xp.sum(xlogx(xp, pi), axis=-1))


def entropy_logits(n: int, z: Array) -> Array:
    """Entropy of Multinomial(n, softmax(z)), by exact summation; Σ π ln π through log-softmax."""
    xp = _xp(z)
    pi = categorical.softmax(z)
    return _entropy(n, pi, xp.sum(pi * categorical.masked_log_softmax(z, pi), axis=-1))


def entropy_grad_probs(n: int, w: Array) -> Array:
    """Entropy gradient ∂H/∂w = (g − ⟨π, g⟩) / Σw with g = ∂H/∂π (unbounded at a zero weight)."""
    return categorical.chain_probs(w, _entropy_grad_pi(n, categorical.normalise(w)))


def entropy_grad_logits(n: int, z: Array) -> Array:
    """Entropy gradient ∂H/∂z = π ⊙ (g − ⟨π, g⟩) with g = ∂H/∂π; exactly 0 for a masked category."""
    xp = _xp(z)
    pi = categorical.softmax(z)
    g = xp.where(pi > 0, _entropy_grad_pi(n, xp.where(pi > 0, pi, xp.ones_like(pi))), 0.0)
    return categorical.chain_logits(z, g)


def fisher_probs(n: int, w: Array) -> Array:
    """Fisher information F = E[e eᵀ] = n F_categorical(w) + (n² − n) ū ūᵀ / S².

    Here S = Σw and ū = [w = 0]. The count vector sums n independent draws, so e sums their
    eligibilities and E[e eᵀ] = n E[e₁ e₁ᵀ] + n(n − 1) E[e₁] E[e₁]ᵀ. E[e₁] is 0 on the positive
    weights but −1/S on a zero weight (that category is never drawn, so its eligibility is
    always −1/S), hence the second term, on the zero-weight block only: there eᵢ = −n/S always
    and E[eᵢ eⱼ] = n²/S². With every weight positive, F = n F_categorical(w).
    """
    xp = _xp(w)
    s = xp.sum(w, axis=-1, keepdims=True)
    ubar = xp.astype(w <= 0, w.dtype)
    zero_block = ubar[..., :, None] * ubar[..., None, :] / (s[..., None] ** 2)
    return n * categorical.fisher_probs(w) + (n * n - n) * zero_block


def fisher_logits(n: int, z: Array) -> Array:
    """Fisher information F = n (diag(π) − π πᵀ)."""
    return n * categorical.fisher_logits(z)


# the spec -----------------------------------------------------------------------------------

_MANTISSA_BITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}


def _dtype_name(dtype: Any) -> str:
    """``float64`` for NumPy's float64 class or dtype and for torch.float64 alike."""
    if isinstance(dtype, type):
        return np.dtype(dtype).name
    return str(dtype).rsplit(".", 1)[-1]


def _exact_below(dtype: Any) -> float:
    """2^(mantissa bits): every integer up to it is exact in ``dtype``."""
    return 2.0 ** _MANTISSA_BITS[_dtype_name(dtype)]


def choose_form(params: dict[str, object]) -> str:
    """``probs`` or ``logits`` (exactly one), and ``total_count`` given."""
    if params.get("total_count") is None:
        raise ValueError("multinomial needs total_count= (the number of draws n, an integer ≥ 0)")
    return one_of("multinomial", ("probs", "logits"))(params)


def _check_value(c: CheckedLike, v: Array) -> Array:
    xp = c.xp
    w = c.params[c.form]
    k = w.shape[-1]
    if v.ndim == 0 or v.shape[-1] != k:
        raise ValueError(
            f"value must be a count vector of length {k} (one count per category), got shape "
            f"{tuple(v.shape)}"
        )
    x = check_integral(xp, v, "an integer count ≥ 0")
    reject(xp, x < 0, x, lambda i, q: f"value: count {q} at index {i} is not an integer ≥ 0")
    total = xp.sum(x, axis=-1)
    n = c.total_count
    reject(
        xp,
        total != n,
        total,
        lambda i, q: (
            f"value: counts sum to {q} at batch index {i}, but total_count is {n}; "
            "the counts must sum to total_count"
        ),
    )
    impossible = (x > 0) & ((w <= 0) if c.form == "probs" else (w == -xp.inf))
    reject(
        xp,
        impossible,
        xp.broadcast_to(x, impossible.shape),
        lambda i, q: (
            f"value: count {q} at index {i} falls on a category of probability zero, "
            "so ln P is −∞ and its eligibility does not exist"
        ),
    )
    return xp.astype(x, c.compute_dtype)


def check_total_count(n: object, dtype: Any) -> int:
    """``total_count`` as a Python int ≥ 0, exact in the float ``dtype`` the kernels run in."""
    from eligibility._array import to_numpy

    arr = to_numpy(n)
    if arr.ndim != 0:
        raise ValueError(f"total_count must be a single integer, got shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"total_count must be an integer ≥ 0, got {n!r}")
    if not np.isfinite(arr) or arr != np.floor(arr) or arr < 0:
        raise ValueError(f"total_count must be an integer ≥ 0, got {fmt(arr)}")
    if float(arr) > _exact_below(dtype):
        raise ValueError(
            f"total_count: {fmt(arr)} is not exactly representable in {_dtype_name(dtype)}, the "
            "dtype the counts are evaluated in"
        )
    return int(arr)


SPEC = DistributionSpec(
    name="multinomial",
    parameters=("total_count", "probs", "logits"),
    forms=probs_and_logits(
        (log_prob_probs, score_probs, entropy_probs, entropy_grad_probs, fisher_probs),
        (log_prob_logits, score_logits, entropy_logits, entropy_grad_logits, fisher_logits),
        views=("probs w (relative weights)", "logits z"),
    ),
    choose_form=choose_form,
    param_event_dims=1,
    value_event_dims=1,
    support="x ∈ ℕᴷ with Σᵢ xᵢ = n",
    check_params=check_weights_or_logits,
    check_value=_check_value,
    check_entropy_grad=check_no_zero_weight,
    count_param="total_count",
    check_count=check_total_count,
    min_compute_dtype="float64",
    flags={
        "total_count": Flag("N", "the number of draws n"),
        **WEIGHTS_OR_LOGITS,
    },
    torch_name="Multinomial",
    examples=("--total-count 3 --probs 0.5 0.3 0.2 --value 2 0 1",),
)
