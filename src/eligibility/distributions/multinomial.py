r"""Multinomial distribution: counts x ∈ ℕᴷ with Σᵢ xᵢ = n, from n independent categorical draws.

Parametrised like ``torch.distributions.Multinomial``: ``total_count`` n (an integer) and
``probs`` w (relative weights, π = w / Σw) or ``logits`` z (π = softmax(z)).

    P(x) = n! / ∏ᵢ xᵢ! · ∏ᵢ πᵢ^xᵢ

Characteristic eligibility: the count vector is the sum of n one-hot categorical draws, and
ln P(x) = const + Σᵢ xᵢ ln πᵢ, so the eligibility is the sum of the n categorical ones:

* probs:  eᵢ = xᵢ / wᵢ − n / Σⱼ wⱼ   (xᵢ / wᵢ read as 0 when xᵢ = wᵢ = 0);
* logits: e = x − n softmax(z).

With n = 1 both reduce to the categorical eligibility. Kernels trust their inputs; checks
live in :mod:`eligibility.api`.
"""

from __future__ import annotations

import array_api_compat

from eligibility._array import Array, safe_log, xlogx
from eligibility.distributions import categorical

_xp = array_api_compat.array_namespace


def log_factorial_table(n: int, like: Array) -> Array:
    """Table [ln 0!, ln 1!, …, ln n!], a cumulative sum of ln k."""
    xp = _xp(like)
    dev = array_api_compat.device(like)
    k = xp.arange(1, n + 1, dtype=like.dtype, device=dev)
    zero = xp.zeros((1,), dtype=like.dtype, device=dev)
    return xp.concat([zero, xp.cumulative_sum(xp.log(k))])


def log_factorial(x: Array, table: Array) -> Array:
    """Log-factorial ln x! for integral float counts x, looked up in ``table``."""
    xp = _xp(x)
    idx = xp.reshape(xp.astype(x, xp.int64), (-1,))
    return xp.reshape(xp.take(table, idx), x.shape)


def _log_prob(n: int, log_pi: Array, x: Array) -> Array:
    xp = _xp(x)
    table = log_factorial_table(n, x)
    n_arr = xp.asarray(float(n), dtype=x.dtype, device=array_api_compat.device(x))
    coef = log_factorial(n_arr, table) - xp.sum(log_factorial(x, table), axis=-1)
    return coef + xp.sum(xp.where(x > 0, x * log_pi, xp.zeros_like(x)), axis=-1)


def log_prob_probs(n: int, w: Array, x: Array) -> Array:
    """Log-probability ln P(x) = ln n! − Σᵢ ln xᵢ! + Σᵢ xᵢ ln(wᵢ / Σw)."""
    xp = _xp(w)
    return _log_prob(n, safe_log(xp, categorical.normalise(w)), x)


def log_prob_logits(n: int, z: Array, x: Array) -> Array:
    """Log-probability ln P(x) = ln n! − Σᵢ ln xᵢ! + Σᵢ xᵢ (zᵢ − logsumexp z)."""
    pi = categorical.softmax(z)
    return _log_prob(n, categorical._masked_log_softmax(z, pi), x)


def score_probs(n: int, w: Array, x: Array) -> Array:
    """Eligibility eᵢ = ∂ ln P(x) / ∂wᵢ = xᵢ / wᵢ − n / Σⱼ wⱼ."""
    xp = _xp(w)
    ratio = xp.where(x > 0, x / xp.where(w > 0, w, xp.ones_like(w)), xp.zeros_like(w))
    return ratio - n / xp.sum(w, axis=-1, keepdims=True)


def score_logits(n: int, z: Array, x: Array) -> Array:
    """Eligibility e = ∂ ln P(x) / ∂z = x − n softmax(z)."""
    return x - n * categorical.softmax(z)


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


def _entropy_pi(n: int, pi: Array) -> Array:
    """Entropy H = −ln n! + Σᵢ E[ln Xᵢ!] − n Σᵢ πᵢ ln πᵢ, with Xᵢ ~ Binomial(n, πᵢ) (exact sum)."""
    xp = _xp(pi)
    table = log_factorial_table(n, pi)
    expected_log_fact = xp.sum(_binomial_pmf(n, pi) * table, axis=-1)
    return -table[n] + xp.sum(expected_log_fact, axis=-1) - n * xp.sum(xlogx(xp, pi), axis=-1)


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
    return _entropy_pi(n, categorical.normalise(w))


def entropy_logits(n: int, z: Array) -> Array:
    """Entropy of Multinomial(n, softmax(z)), by exact summation."""
    return _entropy_pi(n, categorical.softmax(z))


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
