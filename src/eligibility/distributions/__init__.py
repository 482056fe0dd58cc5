"""The math: one module per policy distribution, each its pure kernels and its spec.

Every kernel is written once against the array API standard, so it runs on NumPy arrays and
torch tensors alike. Kernels trust their inputs; each module's ``SPEC`` declares its
parameters, their constraints, its support and the checks of its values, and
:mod:`eligibility.api` runs those checks once at the public boundary, then the kernels.

Adding a distribution: one module with its kernels and ``SPEC``, and one line below.
"""

from __future__ import annotations

from eligibility.distributions import bernoulli, beta, categorical, multinomial, normal
from eligibility.distributions._spec import DistributionSpec, Flag, Form, reject

REGISTRY: dict[str, DistributionSpec] = {
    "bernoulli": bernoulli.SPEC,
    "beta": beta.SPEC,
    "categorical": categorical.SPEC,
    "multinomial": multinomial.SPEC,
    "normal": normal.SPEC,
}
"""Every distribution the public functions take, by name."""

__all__ = [
    "REGISTRY",
    "DistributionSpec",
    "Flag",
    "Form",
    "bernoulli",
    "beta",
    "categorical",
    "multinomial",
    "normal",
    "reject",
]
