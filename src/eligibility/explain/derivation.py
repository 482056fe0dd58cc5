r"""``explain``: check the input once, pick the distribution's derivation from a table, finish.

Every number shown is computed by :mod:`eligibility.api` (checked ``log_prob`` and ``score``)
or by a kernel of :mod:`eligibility.distributions`; each distribution's module
(:mod:`~eligibility.explain.categorical`, :mod:`~eligibility.explain.bernoulli`, …) adds the
story over the shared outline of :mod:`~eligibility.explain.outline`. Adding a distribution to
``explain`` is one module, ``eligibility.explain.<name>`` with a ``derive`` function, for a
``<name>`` of :data:`eligibility.distributions.REGISTRY`; :data:`DERIVATIONS` finds it there.

    >>> from eligibility.explain import explain
    >>> x = explain("categorical", 0, probs=[0.69, 0.1, 0.2, 0.01])
    >>> [round(v, 4) for v in x.score["probs"].tolist()]
    [0.4493, -1.0, -1.0, -1.0]
    >>> [round(v, 4) for v in x.prob_gradient["probs"].tolist()]
    [0.31, -0.69, -0.69, -0.69]
"""

from __future__ import annotations

import importlib

import numpy as np

from eligibility import api
from eligibility._array import to_numpy
from eligibility.distributions import REGISTRY
from eligibility.explain.explanation import Explanation
from eligibility.explain.outline import (
    THROUGH,
    Derive,
    Given,
    as_float64,
    checked_features,
    finish,
)


def _derivations() -> dict[str, Derive]:
    """The ``derive`` of ``eligibility.explain.<name>`` for every registered name that has one."""
    found = {}
    for name in REGISTRY:
        module_name = f"{__package__}.{name}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name != module_name:  # the module exists but fails to import
                raise
            continue
        found[name] = module.derive
    return found


DERIVATIONS: dict[str, Derive] = _derivations()
"""Distribution name → the function that derives its eligibility (see :class:`outline.Derive`)."""


def explain(
    dist: str,
    value: object,
    *,
    through: str = "both",
    features: object = None,
    autograd: bool = False,
    **params: object,
) -> Explanation:
    """Derive e = ∂ ln π(value; θ)/∂θ for the given numbers and show every step.

    Args:
        dist: a name of :data:`DERIVATIONS` (``"categorical"``, ``"bernoulli"``, …).
        value: the action taken (category index, 0/1, count vector or real number); leading
            axes are batch axes, explained row by row.
        through: ``"log"`` (differentiate ln π), ``"exp"`` (differentiate π = exp(ln π), as
            ``prob.backward()`` does) or ``"both"``.
        features: optional inputs x of a linear unit (z = W x + b for the logits, μ = W x + b
            for a normal's loc); carries the rule into W and b. Shape ``(d,)`` or batch + ``(d,)``.
        autograd: also replay every number in ``torch.distributions`` and hold it against
            autograd, in float64 (imports torch; the document's last section either way).
        **params: the distribution's parameters with torch's names (``probs`` | ``logits``,
            ``total_count``, ``loc`` and ``scale``, …); NumPy, torch or lists.

    Returns:
        An :class:`Explanation` (float64 NumPy numbers; render it with ``to_text()`` …).

    Raises:
        ValueError: bad parameters or value (the core's checks), an unknown ``through``, a
            distribution without a derivation, or features whose batch shape does not match.
    """
    if through not in THROUGH:
        raise ValueError(f"through must be one of {', '.join(THROUGH)}, got {through!r}")
    checked = api.check(dist, params)
    if checked.dist not in DERIVATIONS:
        raise ValueError(
            f"explain has no derivation for {dist!r}; choose one of {', '.join(DERIVATIONS)}"
        )
    checked_value = api.check_value(checked, value)
    theta = {name: as_float64(v) for name, v in checked.params.items()}
    v = np.asarray(to_numpy(checked_value))
    x = None if features is None else checked_features(features)
    given = Given(checked.form, theta, v, checked.total_count, x, through)
    derived = DERIVATIONS[checked.dist](given)
    return finish(checked, theta, v, x, through, derived, autograd)


__all__ = ["DERIVATIONS", "THROUGH", "explain"]
