"""``eligibility explain``: derive an eligibility for given numbers and show every step.

    >>> import eligibility
    >>> x = eligibility.explain("categorical", 0, probs=[0.69, 0.1, 0.2, 0.01])
    >>> x.to_text().splitlines()[0]
    'categorical with probs w (relative weights), action a = 0'
    >>> [round(float(e), 4) for e in x.score["probs"]]
    [0.4493, -1.0, -1.0, -1.0]

The numbers come from the core (:mod:`eligibility.api`, :mod:`eligibility.distributions`);
this package builds the derivation around them, one module per distribution over a shared
outline (:mod:`~eligibility.explain.outline`, table in :mod:`~eligibility.explain.derivation`),
as a document (:mod:`~eligibility.explain.doc`) rendered as text, Markdown or LaTeX
(:mod:`~eligibility.explain.render`) or JSON (:meth:`Explanation.to_json`).
"""

from __future__ import annotations

from eligibility.explain.derivation import DERIVATIONS, THROUGH, explain
from eligibility.explain.explanation import Explanation

__all__ = ["DERIVATIONS", "THROUGH", "Explanation", "explain"]
