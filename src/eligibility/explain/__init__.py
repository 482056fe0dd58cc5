"""``eligibility explain``: derive an eligibility for given numbers and show every step.

    >>> import eligibility
    >>> x = eligibility.explain("categorical", 0, probs=[0.69, 0.1, 0.2, 0.01])
    >>> print(x.to_text())  # doctest: +SKIP

The numbers come from the core (:mod:`eligibility.api`, :mod:`eligibility.distributions`);
this package builds the derivation around them (:mod:`~eligibility.explain.derivation`) and
renders it as text, Markdown, LaTeX or JSON (:mod:`~eligibility.explain.render`).
"""

from __future__ import annotations

from eligibility.explain.derivation import THROUGH, Explanation, explain

__all__ = ["THROUGH", "Explanation", "explain"]
