"""The math: one module per policy distribution, each a set of pure kernels over arrays.

Every kernel is written once against the array API standard, so it runs on NumPy arrays and
torch tensors alike. Kernels trust their inputs; :mod:`eligibility.api` checks them once at
the public boundary and dispatches here.
"""

from eligibility.distributions import bernoulli, categorical, multinomial, normal

__all__ = ["bernoulli", "categorical", "multinomial", "normal"]
