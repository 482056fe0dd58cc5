r"""When to run the greedy test, and how to stop it as soon as its verdict is certain.

The test: N greedy episodes; solved ⇔ Ḡ = (1/N) Σᵢ Gᵢ ≥ target. Played side by side, the
episodes end at different steps. After any vector step, episode i has earned Gᵢ in tᵢ steps
(dᵢ = 1 once it has ended). When every reward lies in [r_lo, r_hi] and no episode runs past T
steps (the env's time limit), its final return lies in

    Gᵢ + (1 − dᵢ) (T − tᵢ) min(r_lo, 0)  ≤  Gᵢᶠⁱⁿᵃˡ  ≤  Gᵢ + (1 − dᵢ) (T − tᵢ) max(r_hi, 0),

so Ḡ lies between the means of the two bounds, Ḡ_lo and Ḡ_hi. The sequential test stops with

* **fail** once Ḡ_hi < target: even the best rewards on every remaining step cannot lift the
  mean to the target;
* **pass** once Ḡ_lo ≥ target: even the worst cannot pull it below.

Both verdicts are certain, not statistical: the stopped test gives the verdict the full test
would have given (``tests/test_stopping.py`` checks this against playing all N episodes). For
CartPole-v1 (r = 1 per step, T = 500, target 475) the test fails as soon as the episodes have
lost more than N·25 steps to the time limit between them; for InvertedPendulum-v5 (r ∈ [0, 1],
T = 1000, target 950), more than N·50.

The rewards' range is a row of :data:`REWARD_RANGE` (an env without a row plays all N).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["REWARD_RANGE", "crossed", "mean_bounds", "reward_range", "verdict"]

REWARD_RANGE: dict[str, tuple[float, float]] = {
    "CartPole-v0": (1.0, 1.0),
    "CartPole-v1": (1.0, 1.0),
    "Acrobot-v1": (-1.0, 0.0),
    "MountainCar-v0": (-1.0, -1.0),
    "Pendulum-v1": (-(math.pi**2 + 0.1 * 8.0**2 + 0.001 * 2.0**2), 0.0),
    # v5: 1 while the pole is up, 0 on the step that ends the episode (v4 paid 1 on every step).
    "InvertedPendulum-v5": (0.0, 1.0),
}
"""Per-step reward range [r_lo, r_hi] of the envs whose range is known from their source."""


def reward_range(env_id: str) -> tuple[float, float] | None:
    """The env's row of :data:`REWARD_RANGE` (a ``module:Id`` id takes its Id's), or None."""
    return REWARD_RANGE.get(env_id.rpartition(":")[2])


def mean_bounds(
    g: np.ndarray, t: np.ndarray, ended: np.ndarray, r_range: tuple[float, float], horizon: float
) -> tuple[float, float]:
    r"""Ḡ_lo, Ḡ_hi: the least and greatest final mean return the episodes can still reach.

        Ḡ_lo = (1/N) Σᵢ [Gᵢ + (1 − dᵢ)(T − tᵢ) min(r_lo, 0)]
        Ḡ_hi = (1/N) Σᵢ [Gᵢ + (1 − dᵢ)(T − tᵢ) max(r_hi, 0)]

    Args:
        g: Gᵢ, the return earned so far by each of the N episodes, (N,).
        t: tᵢ, the steps each has taken, (N,) (0 for one not started).
        ended: dᵢ, True where the episode has ended, (N,).
        r_range: (r_lo, r_hi), bounds of every reward.
        horizon: T, the most steps an episode can take (``math.inf``: no time limit).

    Returns:
        (Ḡ_lo, Ḡ_hi); an unbounded side is ∓inf.
    """
    left = np.where(ended, 0.0, horizon - t)

    def gain(r: float) -> np.ndarray:  # a zero bound gains nothing, even with T = inf
        return np.zeros_like(left) if r == 0.0 else left * r

    n = len(g)
    lo, hi = gain(min(r_range[0], 0.0)), gain(max(r_range[1], 0.0))
    return float(np.sum(g + lo)) / n, float(np.sum(g + hi)) / n


def verdict(
    g: np.ndarray,
    t: np.ndarray,
    ended: np.ndarray,
    target: float,
    r_range: tuple[float, float] | None,
    horizon: float,
) -> bool | None:
    """The greedy test's verdict if it is already certain: True (pass), False (fail) or None.

    When every episode has ended it is Ḡ ≥ target, the mean computed as the full test does
    (``g.mean()``). Before that: False once Ḡ_hi < target, True once Ḡ_lo ≥ target (see
    :func:`mean_bounds`), None while either can still happen or the rewards' range is unknown
    (``r_range`` None).
    """
    if ended.all():
        return bool(float(g.mean()) >= target)
    if r_range is None:
        return None
    lo, hi = mean_bounds(g, t, ended, r_range, horizon)
    if hi < target:
        return False
    if lo >= target:
        return True
    return None


def crossed(previous: float | None, now: float, target: float | None) -> bool:
    """True when the training returns' mean crosses the target from below: prev < target ≤ now.

    ``previous`` is the mean of the update before (None: this is the first update). The
    greedy test runs on this trigger as well as on the ``eval_every`` cadence.
    """
    if target is None:
        return False
    return now >= target and (previous is None or previous < target)
