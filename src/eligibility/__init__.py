"""eligibility: REINFORCE with every gradient readable.

Williams (1992) calls e = ∂ ln π(a; θ) / ∂θ the *characteristic eligibility* of a policy
distribution; the REINFORCE update is Δθ = α (r − b) e. This package gives it in closed form
for bernoulli, beta, categorical, multinomial and normal policies
(:mod:`eligibility.distributions`), checked against autograd, on NumPy arrays and torch
tensors alike.

    >>> import eligibility
    >>> e = eligibility.score("categorical", 0, probs=[0.69, 0.1, 0.2, 0.01])["probs"]
    >>> [round(float(x), 4) for x in e]
    [0.4493, -1.0, -1.0, -1.0]
"""

# check is its package, callable as its function (so eligibility.check.frameworks.trl imports);
# sweep is imported eagerly: the name stays the function once eligibility.sweep.* is imported.
from eligibility import check
from eligibility.api import (
    DISTRIBUTIONS,
    entropy,
    entropy_grad,
    fisher,
    log_prob,
    score,
)
from eligibility.explain import explain
from eligibility.objects import Bernoulli, Beta, Categorical, Multinomial, Normal
from eligibility.reinforce.runs import load
from eligibility.sweep.run import sweep

__version__ = "0.1.0"


__all__ = [
    "DISTRIBUTIONS",
    "Bernoulli",
    "Beta",
    "Categorical",
    "Multinomial",
    "Normal",
    "__version__",
    "check",
    "entropy",
    "entropy_grad",
    "explain",
    "fisher",
    "load",
    "log_prob",
    "score",
    "sweep",
]
