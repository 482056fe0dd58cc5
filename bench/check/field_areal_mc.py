"""How far AReaL's parent and fix (tests/field, ``areal-seq-advantage``) are from c ∇J.

Both sides weight reply i by Rᵢ·f(Lᵢ) ÷ the batch's tokens (f = 1 at the fix, 1 + 1/Lᵢ at the
parent: tests/test_check_field.py holds that against autograd). This draws B batches from the
lab's enumeration (G completions per prompt from π_θ), forms ĝ = Σᵢ Rᵢ f(Lᵢ) Sᵢ / Σⱼ Lⱼ with
Sᵢ = Σₜ ∇ℓₜ the row's score, and reports the best c of E[ĝ] ≈ c ∇J and the largest residual
component in standard errors of a mean of N batches (the check's N: 800 on length, 2 249 on
difficulty) and of the B batches drawn. Nothing of the check is used.

    PYTHONPATH=src python bench/check/field_areal_mc.py --batches 100000
"""

from __future__ import annotations

import argparse

import numpy as np

from eligibility.lab.sequence.builtin import PROBLEMS

CHECK_N = {"length": 800, "difficulty": 2249}


def _largest(x: np.ndarray, se: np.ndarray) -> float:
    """max |x| / se over the components that vary (se > 0)."""
    moving = se > 0
    return float(np.max(np.abs(x[moving]) / se[moving]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    for name, n in CHECK_N.items():
        problem = PROBLEMS[name]()
        table = problem.table
        scores = np.asarray(problem.scores)
        reward, length = np.asarray(table.reward), np.asarray(table.mask).sum(1)
        prompt, prob = np.asarray(table.prompt), np.asarray(table.prob)
        rows = []
        for q in range(len(problem.prompts)):
            idx = np.flatnonzero(prompt == q)
            rows.append(
                rng.choice(
                    idx, size=(args.batches, problem.group_size), p=prob[idx] / prob[idx].sum()
                )
            )
        rows = np.concatenate(rows, axis=1)
        tokens = length[rows].sum(1, keepdims=True)
        exact = np.asarray(problem.exact)
        for side, factor in (("fix", np.ones_like(length)), ("parent", 1 + 1 / length)):
            w = reward[rows] * factor[rows] / tokens
            g = sum(w[:, i, None] * scores[rows[:, i]] for i in range(rows.shape[1]))
            mean, sd = g.mean(0), g.std(0)
            c = float(mean @ exact / (exact @ exact))
            resid = mean - c * exact
            print(
                f"{name} {side}: c = {c:.3f}; largest residual from c ∇J "
                f"{_largest(resid, sd / np.sqrt(n)):.2f} SE at N = {n} "
                f"({_largest(resid, sd / np.sqrt(args.batches)):.1f} SE of the {args.batches})"
            )


if __name__ == "__main__":
    main()
