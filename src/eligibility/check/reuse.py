r"""Data reuse without an importance ratio: several gradient steps on one batch of episodes.

A trainer that takes k gradient steps on each batch (Tianshou's REINFORCE with ``repeat``)
estimates ∇J(θ) correctly only at its first step. From the second on, the batch was drawn by
π_θ but the gradient is taken at θ', where the policy no longer is:

    θ₀ = θ,   θⱼ = θⱼ₋₁ + α ĝ_B(θⱼ₋₁)   (j = 1 … k−1),   ĝ_reuse = ĝ_B(θₖ₋₁),

    ĝ_B(θ') = (1/E) Σ_e Σ_t γᵗ G_et ∇θ' ln π_θ'(a_et | s_et),

with the batch B's returns G_et held fixed and no ratio π_θ'/π_θ. Its expectation is not
∇J(θ): to first order in α, E[ĝ_reuse] = ∇J + (k−1) α E[Ĥ_B ĝ_B], where Ĥ_B is the Hessian of
the batch's surrogate, and E[Ĥ_B ĝ_B] ≠ 0 in general (a batch's own gradient steps move the
policy toward that batch's actions; an importance ratio would undo it).

What the check sees: the user's function, called on a batch at θ, returns ĝ_reuse for that
batch. The check cannot know k nor α, so it computes the variant on the very batches the user
saw (common random numbers), exactly, for k = 2, 3, 4 over a geometric grid of α
(:data:`STEPS`), and names ``data-reuse`` when one of them matches the user's mean. The inner
steps are plain gradient steps of size α; a reuse through Adam's steps reads ``other``.

For the linear-softmax policy of the episodic problems a batch enters only through its
per-(action, state) weights C[a, s] = (1/E) Σ_{e,t: s_et = s, a_et = a} γᵗ G_et:

    ĝ_B(θ')_W = Σ_s (C[·, s] − (Σ_a C[a, s]) π_θ'(·|s)) φ(s)ᵀ,   ĝ_B(θ')_b the same without φ.
"""

from __future__ import annotations

import numpy as np

STEPS = tuple(
    sorted(
        {float(a) for a in np.geomspace(1e-3, 4.0, 38)}
        | {m * 10.0**j for m in (1, 2, 2.5, 3, 5) for j in range(-3, 1)}
    )
)
"""The inner step sizes α the check tries: a geometric grid (ratio 1.25) from 10⁻³ to 4, and
the round values a learning rate is given (1, 2, 2.5, 3, 5 × 10⁻³ … 10⁰), at which the
variant is the user's estimator batch by batch, where a rescaling fits the mean as well."""

REPEATS = (2, 3, 4)
"""The numbers of gradient steps k on one batch the check tries (k = 1 is REINFORCE)."""


def batch_weights(
    states: np.ndarray, actions: np.ndarray, psi: np.ndarray, per_call: int, n_states: int, A: int
) -> np.ndarray:
    """C[k, a, s] = (1/E) Σ over batch k's steps at (s, a) of ψ = γᵗ G_t, shape (N, A, S).

    Args:
        states: s_t of each episode, (M, T), with the padding's steps at ψ = 0.
        actions: a_t, (M, T).
        psi: γᵗ G_t, 0 after an episode's end, (M, T).
        per_call: E, episodes per batch (batch k holds episodes kE … kE + E − 1).
        n_states: S.
        A: the number of actions.
    """
    n = states.shape[0] // per_call
    k = n * per_call
    batch = (np.arange(k) // per_call)[:, None]
    cell = ((batch * A + actions[:k]) * n_states + states[:k]).ravel()  # (k, a, s), flat
    C = np.bincount(cell, weights=psi[:k].ravel(), minlength=n * A * n_states)
    return C.reshape(n, A, n_states) / per_call


def batch_gradient(C: np.ndarray, phi: np.ndarray, W: np.ndarray, b: np.ndarray) -> tuple:
    """ĝ_B(θ') of every batch at its own θ' = (W, b): (∂W (N, A, d), ∂b (N, A)).

    ĝ_B(θ')_W = Σ_s (C[·, s] − (Σ_a C[a, s]) π_θ'(·|s)) φ(s)ᵀ, π_θ'(·|s) = softmax(W φ(s) + b).
    W (N, A, d) and b (N, A) are per batch; C is (N, A, S) (:func:`batch_weights`).
    """
    n, A, d = W.shape
    z = (W.reshape(n * A, d) @ phi.T).reshape(n, A, -1) + b[:, :, None]  # one matmul: fast
    z -= z.max(axis=1, keepdims=True)  # a softmax's shift invariance, for exp's range
    pi = np.exp(z)
    pi /= pi.sum(axis=1, keepdims=True)
    e = C - C.sum(axis=1, keepdims=True) * pi  # (N, A, S)
    return e @ phi, e.sum(axis=2)


def reuse_estimates(
    C: np.ndarray, phi: np.ndarray, W: np.ndarray, b: np.ndarray, alpha: float, k: int
) -> np.ndarray:
    """ĝ_reuse of every batch: the gradient after k − 1 steps of size α on it, (N, p).

    θ₀ = θ, θⱼ = θⱼ₋₁ + α ĝ_B(θⱼ₋₁), ĝ_reuse = ĝ_B(θₖ₋₁), flattened as (weight, bias).
    """
    n = C.shape[0]
    Wn = np.broadcast_to(W, (n, *W.shape)).copy()
    bn = np.broadcast_to(b, (n, *b.shape)).copy()
    for _ in range(k - 1):
        gW, gb = batch_gradient(C, phi, Wn, bn)
        Wn += alpha * gW
        bn += alpha * gb
    gW, gb = batch_gradient(C, phi, Wn, bn)
    return np.concatenate([gW.reshape(n, -1), gb], axis=1)


def variants(C: np.ndarray, phi: np.ndarray, W: np.ndarray, b: np.ndarray) -> list:
    """("data-reuse", its estimates) for every (k, α) of :data:`REPEATS` × :data:`STEPS`.

    Each is :func:`reuse_estimates`'s, to the bit: the walk θ₀ → θ₁ → … of one α is the same
    for every k, and ĝ_B(θ₀) the same for every α, so each α's walk is taken once, to
    θ_{max k − 1}, and ĝ_B read at each iterate (a third of the gradients computed).
    """
    n = C.shape[0]
    W0 = np.broadcast_to(W, (n, *W.shape)).copy()
    b0 = np.broadcast_to(b, (n, *b.shape)).copy()
    g0 = batch_gradient(C, phi, W0, b0)  # at θ₀: the first step of every α
    at: dict[tuple[int, float], np.ndarray] = {}
    for alpha in STEPS:
        Wn, bn = W0.copy(), b0.copy()
        gW, gb = g0
        for k in range(1, max(REPEATS) + 1):  # ĝ_B(θ_{k−1}), θ_{k−1} = θ_{k−2} + α ĝ_B(θ_{k−2})
            if k > 1:
                Wn += alpha * gW
                bn += alpha * gb
                gW, gb = batch_gradient(C, phi, Wn, bn)
            if k in REPEATS:
                at[k, alpha] = np.concatenate([gW.reshape(n, -1), gb], axis=1)
    return [("data-reuse", at[k, alpha]) for k in REPEATS for alpha in STEPS]


__all__ = [
    "REPEATS",
    "STEPS",
    "batch_gradient",
    "batch_weights",
    "reuse_estimates",
    "variants",
]
