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

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

# check is its package, callable as its function (so eligibility.check.frameworks.trl imports);
# its own names are imported on first use, so this costs nothing.
from eligibility import check
from eligibility._lazy import names_on_first_use

if TYPE_CHECKING:
    from eligibility.api import DISTRIBUTIONS, entropy, entropy_grad, fisher, log_prob, score
    from eligibility.explain import explain
    from eligibility.objects import Bernoulli, Beta, Categorical, Multinomial, Normal
    from eligibility.reinforce.runs import load
    from eligibility.sweep.run import sweep

__version__ = "0.1.0"

_WHERE = {
    **dict.fromkeys(
        ("DISTRIBUTIONS", "entropy", "entropy_grad", "fisher", "log_prob", "score"), "api"
    ),
    **dict.fromkeys(("Bernoulli", "Beta", "Categorical", "Multinomial", "Normal"), "objects"),
    "load": "reinforce.runs",
}
"""Where each public name lives: imported on first use, so that ``import eligibility`` (every
command line's first import, ``finetune --help`` included) does not import NumPy, the
explainer and the trainer for a command that needs none of them."""


__getattr__ = names_on_first_use(__name__, _WHERE)


def _function_of(package: str) -> property:
    """``eligibility.<package>`` read as the function of that name in it (imported then).

    The import system binds a subpackage to its parent's attribute when it is first imported
    (``import eligibility.sweep.grid`` would make ``eligibility.sweep`` the package); the
    property's setter takes no notice, so the name stays the function however it is reached.
    """
    return property(
        lambda self: getattr(importlib.import_module(f"{__name__}.{package}"), package),
        lambda self, value: None,
    )


class _Package(types.ModuleType):
    """This package, whose ``explain`` and ``sweep`` are the functions, not their packages."""

    explain = _function_of("explain")
    sweep = _function_of("sweep")


sys.modules[__name__].__class__ = _Package

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
