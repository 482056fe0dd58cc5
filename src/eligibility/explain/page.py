"""The rule to move: ``eligibility explain categorical … --html FILE``.

One self-contained HTML file (its style, its script and its numbers inline; no server, no
network, no external script; a Content-Security-Policy that forbids any fetch): a slider and a
field per weight or logit, the sampled action, and the constant c of the ×c check. As they
move, the page recomputes the closed forms itself (``page.js``, the formulas of
:mod:`eligibility.distributions.categorical` written again in JavaScript) and redraws the rule
with the numbers put in, a table of every category, the picture of :mod:`.plot` as SVG, and
the weights ×c: π, ln πₐ and the logits gradient unchanged, the weights gradient ÷c.

Every number the page shows carries its full value (``data-value``); the tests hold them
against the Python closed forms in node and in a real headless browser.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from eligibility import _io
from eligibility.explain.explanation import Explanation

HERE = Path(__file__).parent
SCALE = 100.0
"""The constant c the ×c check starts with (the question's ×100)."""


def _number(v: float) -> float | str:
    """A parameter for the page's JSON: ±∞ (a masked logit) as the string ``"-inf"``."""
    return float(v) if np.isfinite(v) else ("inf" if v > 0 else "-inf")


def initial_state(x: Explanation) -> dict[str, object]:
    """The page's starting point: the form (``probs`` or ``logits``), θ, the action and c."""
    theta = np.asarray(x.parameters[x.form], dtype=np.float64)
    return {"form": x.form, "theta": [_number(v) for v in theta], "a": int(x.value), "c": SCALE}


def html(x: Explanation) -> str:
    """The page for a categorical explanation of one row.

    Raises:
        ValueError: ``x`` is not a categorical, or holds a batch of rows.
    """
    if x.dist != "categorical":
        raise ValueError(
            f"--html draws a categorical unit (probs or logits), not {x.dist}; use --plot for "
            "a picture of the other distributions"
        )
    if np.ndim(x.log_prob) != 0:
        raise ValueError("--html shows one row of parameters; give a single row, not a batch")
    # "</" would end the inline script early; JSON allows "<\/" for it.
    state = json.dumps(initial_state(x)).replace("</", "<\\/")
    template = (HERE / "page.html").read_text(encoding="utf-8")
    return (
        template.replace("/*INITIAL*/", state)
        .replace("/*PAGE_JS*/", (HERE / "page.js").read_text(encoding="utf-8"))
        .replace("/*PAGE_UI_JS*/", (HERE / "page_ui.js").read_text(encoding="utf-8"))
    )


def save(x: Explanation, path: str | os.PathLike[str]) -> Path:
    """Write the page for ``x`` to ``path`` atomically (checked first: a file, not a folder)."""
    out = _io.output_file(path, option="--html")
    _io.atomic_write_text(out, html(x))
    return out


__all__ = ["html", "initial_state", "save"]
