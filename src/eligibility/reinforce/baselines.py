r"""Baselines b_et subtracted from the return: Δθ ∝ Σ_t (G_et − b_et) ∇ ln π(a_et | s_et).

Any b_et that does not depend on the action a_et or on anything after it leaves the expected
gradient unchanged, since E[∇ ln π(a | s)] = Σ_a ∇π(a | s) = ∇1 = 0 (Williams, 1992, §4).

* ``none``: b = 0.
* ``moving-average``: Williams' *reinforcement comparison*, b̄ ← λ b̄ + (1 − λ) Ḡ, kept per
  time step t over past batches (Ḡ_t: the batch's mean return-to-go at t). It uses only
  earlier batches, so it is unbiased.
* ``batch-mean``: b_et = mean of G_e′t over the episodes e′ of this batch still running at t.
  It includes episode e itself, so it is biased by O(1/E) (the term (1/Eₜ) G_et correlates
  with a_et); it is the common practice.
* ``rloo``: leave-one-out, b_et = mean of G_e′t over the *other* episodes e′ ≠ e still running at
  t (0 when there is none). The episodes are independent, so it is unbiased.
* ``value``: b_et = V(s_et), a learned state-value network. The fit used is the one from *before*
  this batch, so b does not depend on this batch's actions: unbiased.
"""

from __future__ import annotations

import numpy as np

BASELINES = ("none", "moving-average", "batch-mean", "rloo", "value")


def per_step_mean(g: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ḡ_t = (1/Eₜ) Σ_e G_et over the Eₜ episodes running at t, and Eₜ; (T,) each."""
    n_t = mask.sum(axis=0)
    total = np.where(mask, g, 0.0).sum(axis=0)
    return total / np.maximum(n_t, 1), n_t


def baseline(
    kind: str,
    g: np.ndarray,
    mask: np.ndarray,
    state: dict[str, np.ndarray] | None = None,
    *,
    values: np.ndarray | None = None,
    decay: float = 0.9,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """b_et for the baseline ``kind``, and the baseline state for the next batch.

    Args:
        kind: one of :data:`BASELINES`.
        g: returns G_et, (E, T), zero where ``mask`` is False.
        mask: (E, T).
        state: what the previous call returned (moving-average keeps its b̄_t here).
        values: V(s_et), (E, T), required by ``value``.
        decay: λ of the moving average.

    Returns:
        b, (E, T), zero where ``mask`` is False; the new state.

    Raises:
        ValueError: unknown ``kind``, or ``value`` without ``values``.
    """
    state = dict(state or {})
    horizon = g.shape[1]
    if kind == "none":
        b = np.zeros_like(g)
    elif kind == "batch-mean":
        mean_t, _ = per_step_mean(g, mask)
        b = np.broadcast_to(mean_t, g.shape).copy()
    elif kind == "rloo":
        total = np.where(mask, g, 0.0).sum(axis=0)
        n_t = mask.sum(axis=0)
        others = np.maximum(n_t - 1, 1)
        b = np.where(n_t > 1, (total - g) / others, 0.0)
    elif kind == "moving-average":
        b_bar = state.get("b_bar", np.zeros(0))
        seen = state.get("seen", np.zeros(0))
        if len(b_bar) < horizon:  # grow to this batch's horizon; new steps not yet seen
            b_bar = np.concatenate([b_bar, np.zeros(horizon - len(b_bar))])
            seen = np.concatenate([seen, np.zeros(horizon - len(seen))])
        b = np.broadcast_to(b_bar[:horizon], g.shape).copy()
        mean_t, n_t = per_step_mean(g, mask)
        upd = n_t > 0
        blended = np.where(
            seen[:horizon] > 0, decay * b_bar[:horizon] + (1 - decay) * mean_t, mean_t
        )
        b_bar = b_bar.copy()
        seen = seen.copy()
        b_bar[:horizon] = np.where(upd, blended, b_bar[:horizon])
        seen[:horizon] = np.where(upd, 1.0, seen[:horizon])
        state = {"b_bar": b_bar, "seen": seen}
    elif kind == "value":
        if values is None:
            raise ValueError("baseline 'value' needs values=V(s) for the batch")
        b = np.asarray(values, dtype=np.float64)
    else:
        raise ValueError(f"baseline must be one of {BASELINES}, got {kind!r}")
    return np.where(mask, b, 0.0), state
