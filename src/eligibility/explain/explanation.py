"""The result of ``explain``: the core's numbers, the derivation, and its renderings."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eligibility.explain import render
from eligibility.explain.autograd import Autograd
from eligibility.explain.doc import Document, Part, Section


def _int_or_float(x: np.ndarray) -> Any:
    """JSON-ready: integral arrays (actions, counts, 0/1) as ints, the rest as floats."""
    x = np.asarray(x)
    if x.dtype.kind in "iub" or (np.all(np.isfinite(x)) and np.all(x == np.round(x))):
        return np.asarray(x, dtype=np.int64).tolist()
    return np.asarray(x, dtype=np.float64).tolist()


def _floats(x: object) -> Any:
    """JSON-ready floats; ±∞ (a masked logit) as the strings "inf" / "-inf" (strict JSON)."""
    a = np.asarray(x, dtype=np.float64)
    if np.all(np.isfinite(a)):
        return a.tolist()
    return np.where(np.isfinite(a), a, np.where(a > 0, "inf", "-inf")).astype(object).tolist()


@dataclass(frozen=True)
class Explanation:
    """A derived eligibility: the core's numbers and the derivation that connects them.

    Arrays are float64 NumPy arrays of the broadcast batch shape (the parameters as given).
    Render with :meth:`to_text`, :meth:`to_markdown`, :meth:`to_latex` or :meth:`to_json`.
    """

    dist: str
    form: str
    through: str
    parameters: dict[str, np.ndarray]
    total_count: int | None
    value: np.ndarray
    features: np.ndarray | None
    log_prob: np.ndarray
    prob: np.ndarray
    score: dict[str, np.ndarray]
    prob_gradient: dict[str, np.ndarray]
    other_view: dict[str, Any]
    linear: dict[str, np.ndarray] | None
    autograd: Autograd
    title: str
    parts: tuple[Part, ...]
    check_section: Section = field(repr=False, default=Section("", ()))
    continuous: bool = False
    """Whether the value is a real number (JSON keeps it a float) rather than a count."""

    @property
    def document(self) -> Document:
        """The derivation as a renderable :class:`~eligibility.explain.doc.Document`."""
        return Document(self.title, self.parts, self.check_section)

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract as a dict (full float precision; see :meth:`to_json`)."""
        out: dict[str, Any] = {
            "distribution": self.dist,
            "form": self.form,
            "through": self.through,
            "parameters": {k: _floats(v) for k, v in self.parameters.items()},
        }
        if self.total_count is not None:
            out["total_count"] = self.total_count
        out["value"] = _floats(self.value) if self.continuous else _int_or_float(self.value)
        out["log_prob"] = _floats(self.log_prob)
        out["prob"] = _floats(self.prob)
        out["score"] = {k: _floats(v) for k, v in self.score.items()}
        out["prob_gradient"] = {k: _floats(v) for k, v in self.prob_gradient.items()}
        out["upstream"] = {"log_prob.grad": _floats(self.prob), "prob.grad": 1.0}
        out["other_view"] = {
            k: ({kk: _floats(vv) for kk, vv in v.items()} if isinstance(v, dict) else _floats(v))
            for k, v in self.other_view.items()
        }
        out["linear"] = (
            None if self.linear is None else {k: _floats(v) for k, v in self.linear.items()}
        )
        out["autograd"] = {
            "available": self.autograd.available,
            "max_abs_diff": self.autograd.max_abs_diff,
            "torch_version": self.autograd.torch_version,
            "differences": self.autograd.differences,
            "reason": self.autograd.reason,
        }
        return out

    def to_json(self, indent: int | None = 2) -> str:
        """The JSON contract: distribution, parameters, value, log_prob, prob, score, ….

        Floats keep full precision (``--precision`` only shapes the human formats); an
        infinite entry (a masked logit) is the string ``"-inf"``, so the output is strict JSON.
        """
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)

    def to_text(self, precision: int = 4, width: int = 100, color: bool = False) -> str:
        """Aligned plain text with Unicode mathematics (ANSI colour only if ``color``)."""
        return render.text(self.document, precision=precision, width=width, color=color)

    def to_markdown(self, precision: int = 4) -> str:
        """Markdown: headings, paragraphs and tables, mathematics in Unicode."""
        return render.markdown(self.document, precision=precision)

    def to_latex(self, precision: int = 4) -> str:
        """A LaTeX fragment (needs ``amsmath``), pure ASCII."""
        return render.latex(self.document, precision=precision)

    def __str__(self) -> str:
        return self.to_text()

    def render(self, fmt_name: str, precision: int = 4) -> str:
        """Render by format name: ``text``, ``markdown``, ``latex`` or ``json``."""
        renderers = {
            "text": lambda: self.to_text(precision=precision),
            "markdown": lambda: self.to_markdown(precision=precision),
            "latex": lambda: self.to_latex(precision=precision),
            "json": lambda: self.to_json() + "\n",
        }
        if fmt_name not in renderers:
            raise ValueError(f"unknown format {fmt_name!r}; choose one of {', '.join(renderers)}")
        return renderers[fmt_name]()


__all__ = ["Explanation"]
