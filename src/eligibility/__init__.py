"""eligibility: REINFORCE with every gradient readable.

Williams (1992) calls e = ∂ ln π(a; θ) / ∂θ the *characteristic eligibility* of a policy
distribution; the REINFORCE update is Δθ = α (r − b) e. This package gives it in closed form
for bernoulli, categorical, multinomial and normal policies (:mod:`eligibility.distributions`),
checked against autograd, on NumPy arrays and torch tensors alike.

    >>> import eligibility
    >>> e = eligibility.score("categorical", 0, probs=[0.69, 0.1, 0.2, 0.01])["probs"]
    >>> [round(float(x), 4) for x in e]
    [0.4493, -1.0, -1.0, -1.0]
"""

from eligibility.api import (
    DISTRIBUTIONS,
    entropy,
    entropy_grad,
    fisher,
    log_prob,
    score,
)
from eligibility.explain import explain
from eligibility.objects import Bernoulli, Categorical, Multinomial, Normal

__version__ = "0.1.0"


def check(fn, config=None, **options):
    """Hold your REINFORCE against the exact policy gradient: :func:`eligibility.check.check`.

    Imported on first use, since it needs torch.
    """
    from eligibility.check import check as _check

    return _check(fn, config, **options)


def load(run_dir, *, seed=0):
    """The trained policy of a run: ``eligibility.load(run).predict(obs)``.

    See :func:`eligibility.reinforce.runs.load`; imported on first use.
    """
    from eligibility.reinforce.runs import load as _load

    return _load(run_dir, seed=seed)


__all__ = [
    "DISTRIBUTIONS",
    "Bernoulli",
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
]
