"""Distribution objects over the public functions, for those who think in torch's classes.

    >>> from eligibility import Categorical
    >>> pi = Categorical(probs=[0.69, 0.1, 0.2, 0.01])
    >>> [round(float(x), 4) for x in pi.score(0)["probs"]]
    [0.4493, -1.0, -1.0, -1.0]

Each class checks its parameters once, at construction (:func:`eligibility.api.check`), and
every method delegates to the checked distribution that returns, which runs the kernels of
the distribution's spec in :data:`eligibility.distributions.REGISTRY`; the math lives in
:mod:`eligibility.distributions` alone. The value passed to a method is checked on each call.
Parameter names and the probs/logits rule (exactly one, keyword-only) follow
``torch.distributions``.
"""

from __future__ import annotations

from eligibility._array import Array
from eligibility.api import Checked, check


class _Distribution:
    """Shared delegation: a checked parameter set and the five evaluations."""

    _checked: Checked

    @property
    def params(self) -> dict[str, Array]:
        """The checked parameters, by torch's names, as arrays of one library and dtype."""
        return dict(self._checked.params)

    def log_prob(self, value: object) -> Array:
        """Log-probability ln π(value; θ), of the broadcast batch shape."""
        return self._checked.log_prob(value)

    def score(self, value: object) -> dict[str, Array]:
        """Characteristic eligibility e = ∂ ln π(value; θ) / ∂θ, one array per parameter.

        Raises:
            ValueError: the value is outside the support or has probability zero.
        """
        return self._checked.score(value)

    def entropy(self) -> Array:
        """Entropy H(π) = −E[ln π(a)]."""
        return self._checked.entropy()

    def entropy_grad(self) -> dict[str, Array]:
        """Entropy gradient ∂H/∂θ, one array per parameter.

        Raises:
            ValueError: the gradient is unbounded (a zero weight, a Bernoulli p of 0 or 1).
        """
        return self._checked.entropy_grad()

    def fisher(self) -> Array:
        """Fisher information F = E[e eᵀ] (see :func:`eligibility.fisher` for its shape)."""
        return self._checked.fisher()

    @property
    def support(self) -> str:
        """The support, in words, from the distribution's spec."""
        return self._checked.spec.support

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._checked.params.items())
        count = self._checked.spec.count_param
        if count is not None:
            args = f"{count}={self._checked.total_count}, " + args
        return f"{type(self).__name__}({args})"


class Bernoulli(_Distribution):
    """Bernoulli y ∈ {0, 1} with p = P(y = 1): ``probs`` p ∈ [0, 1] or ``logits`` z, p = σ(z).

    Eligibility: (y − p) / (p (1 − p)) w.r.t. p, y − σ(z) w.r.t. z.

    Raises:
        ValueError: both or neither of probs/logits, or a parameter outside its domain.
    """

    def __init__(self, *, probs: object = None, logits: object = None) -> None:
        self._checked = check("bernoulli", {"probs": probs, "logits": logits})


class Categorical(_Distribution):
    """Categorical a ∈ {0, …, K−1}: ``probs`` w (relative weights) or ``logits`` z.

    π = w / Σw or π = softmax(z). Eligibility: eᵢ = δᵢₐ / w_a − 1/Σw w.r.t. w,
    onehot(a) − softmax(z) w.r.t. z.

    Raises:
        ValueError: both or neither of probs/logits, or a parameter outside its domain.
    """

    def __init__(self, *, probs: object = None, logits: object = None) -> None:
        self._checked = check("categorical", {"probs": probs, "logits": logits})


class Multinomial(_Distribution):
    """Multinomial counts x with Σx = n: ``total_count`` n, ``probs`` w or ``logits`` z.

    Eligibility: eᵢ = xᵢ / wᵢ − n / Σw w.r.t. w, x − n softmax(z) w.r.t. z.

    Raises:
        ValueError: both or neither of probs/logits, a total_count that is not an integer
            ≥ 0, or a parameter outside its domain.
    """

    def __init__(
        self, total_count: int = 1, *, probs: object = None, logits: object = None
    ) -> None:
        params = {"total_count": total_count, "probs": probs, "logits": logits}
        self._checked = check("multinomial", params)

    @property
    def total_count(self) -> int:
        """The number of draws n."""
        n = self._checked.total_count
        assert n is not None  # check() sets it for every multinomial
        return n


class Beta(_Distribution):
    """Beta y ∈ (0, 1) with ``concentration1`` α > 0 and ``concentration0`` β > 0 (torch's names).

    Eligibility: e_α = ln y − ψ(α) + ψ(α + β), e_β = ln(1 − y) − ψ(β) + ψ(α + β).

    Raises:
        ValueError: a missing concentration, or one that is not finite and > 0.
    """

    def __init__(self, concentration1: object, concentration0: object) -> None:
        params = {"concentration1": concentration1, "concentration0": concentration0}
        self._checked = check("beta", params)


class Normal(_Distribution):
    """Normal y ∈ ℝ with mean ``loc`` μ and standard deviation ``scale`` σ > 0.

    Eligibility: e_μ = (y − μ) / σ², e_σ = ((y − μ)² − σ²) / σ³.

    Raises:
        ValueError: a missing, non-finite loc or a scale that is not finite and > 0.
    """

    def __init__(self, loc: object, scale: object) -> None:
        self._checked = check("normal", {"loc": loc, "scale": scale})


__all__ = ["Bernoulli", "Beta", "Categorical", "Multinomial", "Normal"]
