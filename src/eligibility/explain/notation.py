r"""One spelling of the mathematics, two renderings: Unicode as written, LaTeX derived from it.

Every formula of a derivation is written once, in Unicode (``ln πₐ = zₐ − ln Σⱼ exp zⱼ``);
:func:`to_tex` spells it in LaTeX for the ``latex`` renderer, and the same table spells the
mathematics that prose carries (:mod:`~eligibility.explain.render`). This is the one TeX table:
Σ is always a sum here (Σⱼ wⱼ, Σᵢ xᵢ ln πᵢ), so it is ``\sum``, never the letter ``\Sigma``.
A distribution adds the symbols and words only its derivation writes through its spec's
``tex`` (the normal's density N is ``\mathcal{N}``).

    >>> to_tex("ln πₐ = zₐ − ln Σⱼ exp zⱼ")
    '\\ln \\pi_{a} = z_{a} - \\ln \\sum_{j} \\exp z_{j}'
    >>> to_tex("e_z,ᵢ = δᵢₐ − πᵢ")
    'e_{z,i} = \\delta_{ia} - \\pi_{i}'
    >>> to_tex("P(y) = pʸ (1 − p)¹⁻ʸ   ⇒   σ²")
    'P(y) = p^{y} (1 - p)^{1-y}\\quad \\;\\Rightarrow\\;\\quad \\sigma^{2}'
"""

from __future__ import annotations

import re

from eligibility.distributions import REGISTRY

SUBSCRIPTS = {"ₐ": "a", "ᵢ": "i", "ⱼ": "j", "₀": "0", "₁": "1", "₂": "2", "₃": "3", "₄": "4"}
SUBSCRIPTS |= {"₅": "5", "₆": "6", "₇": "7", "₈": "8", "₉": "9"}
"""Unicode subscript characters and the characters they lower."""

SUPERSCRIPTS = {"ᵀ": r"\top", "²": "2", "³": "3", "ʸ": "y", "¹": "1", "⁻": "-", "ᶻ": "z", "ᴷ": "K"}
"""Unicode superscript characters and what they raise (LaTeX)."""

SYMBOLS = {
    "π": r"\pi",
    "σ": r"\sigma",
    "μ": r"\mu",
    "α": r"\alpha",
    "β": r"\beta",
    "δ": r"\delta",
    "θ": r"\theta",
    "ψ": r"\psi",
    "Γ": r"\Gamma",
    "Β": r"\mathrm{B}",
    "Σ": r"\sum",
    "Δ": r"\Delta",
    "∂": r"\partial",
    "−": "-",
    "×": r"\times",
    "÷": r"\div",
    "·": r"\cdot",
    "⊙": r"\odot",
    "≠": r"\neq",
    "≤": r"\leq",
    "≥": r"\geq",
    "→": r"\to",
    "⇒": r"\;\Rightarrow\;",
    "∈": r"\in",
    "∞": r"\infty",
    "½": r"\tfrac12",
    "…": r"\ldots",
    "′": "'",
    "{": r"\{",
    "}": r"\}",
    "ℕ": r"\mathbb{N}",
}
"""Unicode mathematics spelt in LaTeX (inside maths)."""

FUNCTIONS = {"ln": r"\ln", "exp": r"\exp"}
"""Words with a LaTeX operator; other words of three or more letters are set upright."""

for _spec in REGISTRY.values():
    for _name, _tex in _spec.tex.items():
        (FUNCTIONS if _name.isalpha() and _name.isascii() else SYMBOLS)[_name] = _tex

_SUB = "".join(SUBSCRIPTS)
_SUP = "".join(SUPERSCRIPTS)
_TOKEN = re.compile(
    rf"(?P<spaces> {{3,}})|(?P<sub>[{_SUB}]+)|(?P<sup>[{_SUP}]+)"
    rf"|(?P<index>_[A-Za-z{''.join(SYMBOLS)},{_SUB}]+)|(?P<word>[A-Za-z]+)|(?P<other>.)",
    re.DOTALL,
)


def _index(chars: str) -> str:
    """A ``_…`` index as one LaTeX subscript group (``e_z,ᵢ`` → ``e_{z,i}``)."""
    return "_{" + "".join(to_tex(SUBSCRIPTS.get(c, c)) for c in chars) + "}"


def _token(m: re.Match[str]) -> str:
    kind, s = m.lastgroup, m.group()
    if kind == "spaces":
        return r"\quad "
    if kind == "sub":
        return "_{" + "".join(SUBSCRIPTS[c] for c in s) + "}"
    if kind == "sup":
        return "^{" + "".join(SUPERSCRIPTS[c] for c in s) + "}"
    if kind == "index":
        return _index(s[1:])
    if kind == "word":
        if s in FUNCTIONS:
            return FUNCTIONS[s]
        return rf"\mathrm{{{s}}}" if len(s) >= 3 else s
    return SYMBOLS.get(s, s)


def to_tex(text: str) -> str:
    r"""LaTeX (for maths mode) of the Unicode mathematics ``text``.

    Greek letters and operators map through :data:`SYMBOLS`, runs of sub- and superscript
    characters become one ``_{…}`` / ``^{…}`` group, ``ln`` and ``exp`` become operators, three
    spaces a ``\quad``; a control word is followed by a space where a letter comes next.
    """
    out: list[str] = []
    for m in _TOKEN.finditer(text):
        piece = _token(m)
        if out and re.search(r"\\[A-Za-z]+$", out[-1]) and re.match(r"[A-Za-z0-9]", piece):
            piece = " " + piece
        out.append(piece)
    return "".join(out)


__all__ = ["FUNCTIONS", "SUBSCRIPTS", "SUPERSCRIPTS", "SYMBOLS", "to_tex"]
