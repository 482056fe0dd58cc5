"""What each sampler-weight cap costs: the exact bias of a truncated or masked weight.

For each off-policy problem (``ratio-one``, ``near``, ``far``) and each cap C, the exact
expected update of the product-weight estimator with the sampler weight w = π_old/μ truncated
at C (TIS, TRL's ``sequence_truncate``) or masked above C (MIS, TRL's ``sequence_mask``), held
against ∇J: ‖E[ĝ] − ∇J‖ / ‖∇J‖, by enumeration (exact arithmetic: no sampling, no timing), with
the unweighted (``uncorrected``) estimator beside it.

    python bench/check/sampler_caps.py            # a Markdown table on stdout
"""

from __future__ import annotations

import numpy as np

from eligibility.check.offpolicy_sampler import build_problem

CAPS = (1.0, 1.5, 2.0, 3.0, 5.0)


def _relative(expected: np.ndarray, exact: np.ndarray) -> str:
    return f"{float(np.linalg.norm(expected - exact) / np.linalg.norm(exact)):.3f}"


def main() -> None:
    """Print the table."""
    print(
        "| problem | uncorrected | "
        + " | ".join(f"TIS C = {c:g} | MIS C = {c:g}" for c in CAPS)
        + " |"
    )
    print("|---|---|" + "---|---|" * len(CAPS))
    for name in ("ratio-one", "near", "far"):
        p = build_problem(name)
        cells = [_relative(p.variants()["uncorrected"], p.exact)]
        for c in CAPS:
            v = p.variants(cap=c)
            cells += [_relative(v["truncated"], p.exact), _relative(v["masked"], p.exact)]
        print(f"| `{name}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
