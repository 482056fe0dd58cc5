r"""Finite episodic MDPs given as arrays, solved exactly for J(θ) and ∇J(θ).

An MDP is (P, R, ρ₀, γ, terminal, φ): P[s, a, s'] the transition probabilities, R[s, a] the
mean reward for taking a in s, ρ₀ the start distribution, γ ∈ [0, 1] the discount, a set of
absorbing terminal states (an episode ends on entering one; they pay nothing after), and a
feature vector φ(s) ∈ ℝᵈ per state. The policy is linear-softmax in the features,

    π(a | s) = softmax(W φ(s) + b)_a,      θ = (W ∈ ℝ^{A×d}, b ∈ ℝ^A),

which is exactly the trainer's NumPy ``MLPPolicy`` with ``hidden=()`` (logits z = W₀ s + b₀)
fed the observation φ(s). Two states with the same φ share their action probabilities: the
policy cannot tell aliased states apart.

Exact solution over the non-terminal states N (V = 0 on terminal states):

    P_π[s, s'] = Σ_a π(a|s) P[s, a, s'],   r_π[s] = Σ_a π(a|s) R[s, a]
    V = (I − γ P_π)⁻¹ r_π,                  J(θ) = ρ₀ᵀ V
    Q[s, a] = R[s, a] + γ Σ_{s'} P[s, a, s'] V[s']
    dᵀ = ρ₀ᵀ (I − γ P_π)⁻¹                  (discounted visitation: d(s) = Σ_t γᵗ Pr(s_t = s))

and the policy-gradient theorem (Sutton et al., 2000) gives the gradient exactly:

    ∇_θ J = Σ_s d(s) Σ_a π(a|s) Q(s, a) e(a | s),   e = ∂ ln π(a|s)/∂θ,

where, for the logits z(s) = W φ(s) + b, e_z = onehot(a) − softmax(z) (the core's
categorical eligibility), ∂/∂W = e_z φ(s)ᵀ and ∂/∂b = e_z.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import array_api_compat
import numpy as np

from eligibility._array import array_namespace
from eligibility.distributions import categorical

_ROW_TOL = 1e-9
"""How far a row of P (or ρ₀) may sum from 1 (float round-off of hand-written tables)."""

_MAX_COND = 1e12
"""Condition number of I − γP_π above which the linear solve is refused as singular."""


def _index(idx: tuple[int, ...]) -> str:
    return ", ".join(str(int(i)) for i in idx)


def _float_array(name: str, x: object, ndim: int) -> np.ndarray:
    try:
        arr = np.array(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be an array of numbers, got {x!r}") from err
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} axes, got shape {arr.shape}")
    bad = ~np.isfinite(arr)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise ValueError(f"{name}[{_index(i)}] is {arr[i]}; every entry must be finite")
    arr.flags.writeable = False
    return arr


def _terminal_mask(terminal: object, n_states: int) -> np.ndarray:
    t = np.asarray(terminal)
    if t.dtype == np.bool_:
        if t.shape != (n_states,):
            raise ValueError(
                f"terminal must be a bool mask of shape (S,) = ({n_states},) or a list of "
                f"state indices, got a mask of shape {t.shape}"
            )
        mask = t.copy()
    else:
        idx = t.reshape(-1)
        if idx.size and (
            not np.issubdtype(idx.dtype, np.integer) or idx.min() < 0 or idx.max() >= n_states
        ):
            raise ValueError(
                f"terminal must list state indices in 0..{n_states - 1} (or be a bool mask), "
                f"got {terminal!r}"
            )
        mask = np.zeros(n_states, dtype=bool)
        mask[idx.astype(np.int64)] = True
    mask.flags.writeable = False
    return mask


def _reaches_terminal(P: np.ndarray, terminal: np.ndarray) -> np.ndarray:
    """Which states can reach a terminal state, under some action sequence.

    A softmax policy with finite θ gives every action positive probability, so this is also
    the set from which the episode ends with probability 1 under every such policy.
    """
    edge = (P > 0).any(axis=1)  # edge[s, s']: some action moves s to s'
    reach = terminal.copy()
    while True:
        grown = reach | (edge & reach[None, :]).any(axis=1)
        if (grown == reach).all():
            return reach
        reach = grown


@dataclass(frozen=True)
class FiniteMDP:
    """A finite episodic MDP with features; checked on construction.

    Attributes:
        P: transition probabilities P[s, a, s'], shape (S, A, S); each row sums to 1.
        R: mean rewards R[s, a], shape (S, A).
        rho0: start distribution ρ₀, shape (S,); no mass on terminal states.
        gamma: discount γ ∈ [0, 1].
        terminal: bool mask of shape (S,) or a list of state indices; absorbing, reward 0.
        phi: features φ(s), shape (S, d): the observation the policy sees.
        name: a label for tables and errors.

    Raises:
        ValueError: naming the array at fault: a shape mismatch, a negative or non-finite
            probability, a row of P (or ρ₀) that does not sum to 1, γ outside [0, 1], no
            terminal state, start mass on a terminal state, or a non-terminal state from which
            no terminal state can be reached (its episodes would never end; with γ = 1,
            I − P_π would be singular).
    """

    P: Any
    R: Any
    rho0: Any
    gamma: float
    terminal: Any
    phi: Any
    name: str = "mdp"

    def __post_init__(self) -> None:
        P = _float_array("P", self.P, 3)
        S, A, S2 = P.shape
        if S != S2 or S == 0 or A == 0:
            raise ValueError(f"P must have shape (S, A, S) with S, A ≥ 1, got {P.shape}")
        R = _float_array("R", self.R, 2)
        if R.shape != (S, A):
            raise ValueError(f"R must have shape (S, A) = ({S}, {A}) to match P, got {R.shape}")
        rho0 = _float_array("rho0", self.rho0, 1)
        if rho0.shape != (S,):
            raise ValueError(f"rho0 must have shape (S,) = ({S},) to match P, got {rho0.shape}")
        phi = _float_array("phi", self.phi, 2)
        if phi.shape[0] != S or phi.shape[1] == 0:
            raise ValueError(
                f"phi must have shape (S, d) = ({S}, d ≥ 1), one feature row per state of P, "
                f"got {phi.shape}"
            )
        gamma = float(self.gamma)
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must lie in [0, 1], got {gamma}")
        for name, arr in (("P", P), ("rho0", rho0)):
            if (arr < 0).any():
                i = tuple(np.argwhere(arr < 0)[0])
                raise ValueError(
                    f"{name}[{_index(i)}] = {arr[i]:g} is a negative probability; "
                    "probabilities must be ≥ 0"
                )
        rows = P.sum(axis=2)
        off = np.abs(rows - 1.0) > _ROW_TOL
        if off.any():
            s, a = np.argwhere(off)[0]
            raise ValueError(
                f"P[{s}, {a}, :] sums to {rows[s, a]:.12g}; each row P[s, a, :] is a "
                "distribution over next states and must sum to 1"
            )
        if abs(rho0.sum() - 1.0) > _ROW_TOL:
            raise ValueError(f"rho0 sums to {rho0.sum():.12g}; a start distribution sums to 1")
        terminal = _terminal_mask(self.terminal, S)
        if not terminal.any():
            raise ValueError("terminal is empty; an episodic MDP needs at least one terminal state")
        if (rho0[terminal] > 0).any():
            s = int(np.argwhere(terminal & (rho0 > 0))[0, 0])
            raise ValueError(
                f"rho0[{s}] = {rho0[s]:g} starts episodes in terminal state {s}; "
                "put the start mass on non-terminal states"
            )
        stuck = ~_reaches_terminal(P, terminal)
        if stuck.any():
            s = int(np.argwhere(stuck)[0, 0])
            raise ValueError(
                f"P: no terminal state is reachable from state {s}, so its episodes never "
                f"end (with gamma = 1, I − P_π is singular); add a path to a terminal state"
            )
        for field, value in (("P", P), ("R", R), ("rho0", rho0), ("phi", phi)):
            object.__setattr__(self, field, value)
        object.__setattr__(self, "gamma", gamma)
        object.__setattr__(self, "terminal", terminal)

    @property
    def n_states(self) -> int:
        """S, the number of states (terminal ones included)."""
        return self.P.shape[0]

    @property
    def n_actions(self) -> int:
        """A, the number of actions."""
        return self.P.shape[1]

    @property
    def n_features(self) -> int:
        """d, the length of φ(s)."""
        return self.phi.shape[1]

    @property
    def nonterminal(self) -> np.ndarray:
        """The indices of the non-terminal states N."""
        return np.flatnonzero(~self.terminal)


def check_theta(mdp: FiniteMDP, W: object, b: object) -> tuple[np.ndarray, np.ndarray]:
    """Check the policy parameters against the MDP: W of shape (A, d), b of shape (A,)."""
    A, d = mdp.n_actions, mdp.n_features
    W = _float_array("W", W, 2)
    b = _float_array("b", b, 1)
    if W.shape != (A, d):
        raise ValueError(f"W must have shape (A, d) = ({A}, {d}), got {W.shape}")
    if b.shape != (A,):
        raise ValueError(f"b must have shape (A,) = ({A},), got {b.shape}")
    return W, b


def policy_logits(mdp: FiniteMDP, W: Any, b: Any) -> Any:
    """z(s) = W φ(s) + b for every state, shape (S, A) (NumPy or torch, as W is)."""
    xp = array_namespace(W, b)
    phi = mdp.phi if array_api_compat.is_numpy_namespace(xp) else np.array(mdp.phi)
    phi = xp.asarray(phi, dtype=W.dtype, device=array_api_compat.device(W))
    return phi @ xp.matrix_transpose(W) + b


def policy_probs(mdp: FiniteMDP, W: Any, b: Any) -> Any:
    """π(a|s) = softmax(W φ(s) + b)_a, shape (S, A)."""
    return categorical.softmax(policy_logits(mdp, W, b))


def objective(mdp: FiniteMDP, W: Any, b: Any) -> Any:
    """J(θ) = ρ₀ᵀ (I − γ P_π)⁻¹ r_π over the non-terminal states, by one linear solve.

    Written against the array API standard: with torch tensors (``requires_grad``) autograd
    differentiates it, which is how the tests check :func:`gradient`.
    """
    xp = array_namespace(W, b)
    dev = array_api_compat.device(W)

    numpy = array_api_compat.is_numpy_namespace(xp)

    def arr(x: np.ndarray) -> Any:
        # torch warns on read-only NumPy buffers (the MDP's arrays are frozen): hand it a copy.
        return xp.asarray(x if numpy else np.array(x), dtype=W.dtype, device=dev)

    n = xp.asarray(mdp.nonterminal if numpy else np.array(mdp.nonterminal), device=dev)
    pi = policy_probs(mdp, W, b)
    P_pi = xp.sum(pi[:, :, None] * arr(mdp.P), axis=1)
    r_pi = xp.sum(pi * arr(mdp.R), axis=1)
    P_nn = xp.take(xp.take(P_pi, n, axis=0), n, axis=1)
    eye = xp.eye(P_nn.shape[0], dtype=W.dtype, device=dev)
    V = xp.linalg.solve(eye - mdp.gamma * P_nn, xp.take(r_pi, n, axis=0)[:, None])[:, 0]
    return xp.sum(xp.take(arr(mdp.rho0), n, axis=0) * V)


class Solution(NamedTuple):
    """The exact quantities of one policy on one MDP (all over every state; 0 on terminals)."""

    pi: np.ndarray
    """π(a|s), (S, A)."""
    V: np.ndarray
    """V^π(s), (S,)."""
    Q: np.ndarray
    """Q^π(s, a), (S, A)."""
    d: np.ndarray
    """Discounted visitation d(s) = Σ_t γᵗ Pr(s_t = s), (S,)."""
    J: float
    """J(θ) = ρ₀ᵀ V."""
    expected_length: float
    """E[T], the mean number of steps per episode (undiscounted visitation summed)."""


def _nonsingular(M: np.ndarray, what: str) -> np.ndarray:
    """M itself, or a ValueError when I − ``what`` (that is, M) is numerically singular."""
    cond = np.linalg.cond(M)
    if not np.isfinite(cond) or cond > _MAX_COND:
        raise ValueError(
            f"I − {what} is singular (condition number {cond:.3g}) for these parameters: the "
            "policy (almost) never reaches a terminal state; use smaller logits"
        )
    return M


def solve(mdp: FiniteMDP, W: object, b: object) -> Solution:
    """V^π, Q^π, the discounted visitation d and J for the policy softmax(W φ + b).

    Raises:
        ValueError: bad shapes of W or b, or I − γP_π numerically singular (a policy that
            almost never leaves a set of non-terminal states when γ = 1).
    """
    W, b = check_theta(mdp, W, b)
    S = mdp.n_states
    n = mdp.nonterminal
    pi = policy_probs(mdp, W, b)
    P_pi = np.einsum("sa,sat->st", pi, mdp.P)
    r_pi = np.sum(pi * mdp.R, axis=1)
    P_nn = P_pi[np.ix_(n, n)]
    I_nn = np.eye(n.size)
    M = _nonsingular(I_nn - mdp.gamma * P_nn, "γP_π")
    V = np.zeros(S)
    V[n] = np.linalg.solve(M, r_pi[n])
    d = np.zeros(S)
    d[n] = np.linalg.solve(M.T, mdp.rho0[n])
    Q = mdp.R + mdp.gamma * np.einsum("sat,t->sa", mdp.P, V)
    Q[mdp.terminal] = 0.0
    M1 = _nonsingular(I_nn - P_nn, "P_π")
    length = float(np.linalg.solve(M1.T, mdp.rho0[n]).sum())
    return Solution(pi=pi, V=V, Q=Q, d=d, J=float(mdp.rho0 @ V), expected_length=length)


def gradient(mdp: FiniteMDP, W: object, b: object) -> dict[str, np.ndarray]:
    """∇J(θ) = Σ_s d(s) Σ_a π(a|s) Q(s, a) e(a|s), exactly (policy-gradient theorem).

    With g_z(s) = d(s) Σ_a π(a|s) Q(s, a) (onehot(a) − softmax(z(s))), the gradient with
    respect to the logits at s, the chain rule through z(s) = W φ(s) + b gives
    ∇_W J = Σ_s g_z(s) φ(s)ᵀ and ∇_b J = Σ_s g_z(s).

    Returns:
        ``{"W": (A, d), "b": (A,)}``.
    """
    W, b = check_theta(mdp, W, b)
    sol = solve(mdp, W, b)
    A = mdp.n_actions
    z = policy_logits(mdp, W, b)
    # e[s, a, :] = eligibility of action a in state s with respect to z(s).
    e = categorical.score_logits(z[:, None, :], np.arange(A)[None, :])
    g_z = sol.d[:, None] * np.einsum("sa,sak->sk", sol.pi * sol.Q, e)
    return {"W": g_z.T @ mdp.phi, "b": g_z.sum(axis=0)}


def gradient_without_discount_weighting(
    mdp: FiniteMDP, W: object, b: object
) -> dict[str, np.ndarray]:
    """E[ĝ] of REINFORCE with the γᵗ factor dropped: Σ_s d₁(s) Σ_a π(a|s) Q(s, a) e(a|s).

    The estimator ĝ = Σ_t G_t ∇ ln π(a_t|s_t) (G_t the discounted return-to-go, no γᵗ in front)
    has, by the same steps as the policy-gradient theorem, the expectation of :func:`gradient`
    with the discounted visitation d replaced by the undiscounted one,

        d₁ᵀ = ρ₀ᵀ (I − P_π)⁻¹,   d₁(s) = Σ_t Pr(s_t = s),

    which differs from ∇J unless γ = 1 (Thomas, 2014). Q is the discounted Q^π as before.

    Returns:
        ``{"W": (A, d), "b": (A,)}``.
    """
    W, b = check_theta(mdp, W, b)
    sol = solve(mdp, W, b)
    n = mdp.nonterminal
    P_pi = np.einsum("sa,sat->st", sol.pi, mdp.P)
    d1 = np.zeros(mdp.n_states)
    M1 = _nonsingular(np.eye(n.size) - P_pi[np.ix_(n, n)], "P_π")
    d1[n] = np.linalg.solve(M1.T, mdp.rho0[n])
    z = policy_logits(mdp, W, b)
    e = categorical.score_logits(z[:, None, :], np.arange(mdp.n_actions)[None, :])
    g_z = d1[:, None] * np.einsum("sa,sak->sk", sol.pi * sol.Q, e)
    return {"W": g_z.T @ mdp.phi, "b": g_z.sum(axis=0)}


__all__ = [
    "FiniteMDP",
    "Solution",
    "check_theta",
    "gradient",
    "gradient_without_discount_weighting",
    "objective",
    "policy_logits",
    "policy_probs",
    "solve",
]
