r"""Problems with an exact gradient: built-in ones, and constructors for your own.

A :class:`Problem` is an environment plus a point θ at which J(θ) and ∇J(θ) are known exactly,
plus the map between the lab's names for θ and the trainer's policy parameters:

=====================  ==========================  =========================================
problem kind           lab parameters θ            trainer policy (obs = φ(s), or [1])
=====================  ==========================  =========================================
finite MDP             W (A×d), b (A)              ``MLPPolicy(hidden=())``: W₀ = W, b₀ = b
categorical, logits    logits z (K)                W₀[:, 0] = z, b₀ = 0 held fixed
categorical, probs     probs w (K)                 a probs policy (core ``score_probs``)
Bernoulli units        logits z (n)                W₀[:, 0] = z, b₀ = 0 held fixed
Gaussian               loc μ (d), log_scale ln σ   W₀[:, 0] = μ, b₀ = 0, log_std = ln σ
=====================  ==========================  =========================================

A bandit's observation is the constant [1], so the trainer's logits are z = W₀·1 + b₀; with b₀
held at 0, the estimate of ∂J/∂z is the estimate of ∂J/∂W₀[:, 0] (that of ∂J/∂b₀ is the same
number, read once). The MDP policy z(s) = W φ(s) + b is the trainer's linear-softmax policy as
it stands: the bias b is a parameter of the lab's policy too, with its own exact gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from eligibility import api
from eligibility.lab import bandits
from eligibility.lab import mdp as mdp_
from eligibility.lab.mdp import FiniteMDP

Params = dict[str, np.ndarray]


@dataclass(frozen=True)
class Problem:
    """One exact problem at one parameter point θ.

    Attributes:
        name: the key of ``--problem``.
        description: one line for tables and docs.
        gamma: the discount γ of the objective J = E[Σ_t γᵗ r_t].
        theta: θ by the lab's parameter names.
        objective: J(θ) for any θ of the same layout (used by the finite-difference checks).
        gradient: ∇J(θ), exactly, same layout.
        make_env: a fresh Gymnasium environment of the problem.
        policy: ``"mlp"`` (the trainer's ``MLPPolicy``) or ``"probs"`` (a categorical policy
            in the probs parametrisation, whose eligibility is the core's ``score_probs``).
        to_policy: θ → the trainer policy's parameters (``W0``, ``b0``, ``log_std``).
        from_policy: the trainer's gradient dict → the lab's names.
        value: the exact V^π as a function of the observation, (N, obs_dim) → (N,): the oracle
            for the ``value`` baseline (see :func:`observation_values`).
        expected_length: E[T], steps per episode under π (1 for bandits).
        aliased: whether some distinct states share their features.
    """

    name: str
    description: str
    gamma: float
    theta: Params
    objective: Callable[[Params], float]
    gradient: Callable[[Params], Params]
    make_env: Callable[[], Any]
    policy: Literal["mlp", "probs"]
    to_policy: Callable[[Params], Params]
    from_policy: Callable[[Params], Params]
    value: Callable[[np.ndarray], np.ndarray]
    expected_length: float = 1.0
    aliased: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def J(self) -> float:
        """The objective at the problem's point θ."""
        return self.objective(self.theta)

    @property
    def exact(self) -> Params:
        """∇J(θ) at the problem's θ."""
        return self.gradient(self.theta)

    def labels(self) -> list[str]:
        """One label per component of :meth:`flatten`'s vector, e.g. ``W[1,0]``, ``logits[2]``."""
        out = []
        for k in sorted(self.theta):
            for idx in np.ndindex(*self.theta[k].shape):
                out.append(f"{k}[{','.join(str(i) for i in idx)}]")
        return out

    def flatten(self, params: Params) -> np.ndarray:
        """The lab's parameters (or a gradient of them) as one vector, keys in sorted order."""
        return np.concatenate([np.ravel(params[k]) for k in sorted(self.theta)])


def _const(value: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda obs: np.full(np.shape(obs)[0], value)


def _column(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).reshape(-1, 1)


def _vector(name: str, x: object) -> np.ndarray:
    arr = np.array(x, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0 or not np.isfinite(arr).all():
        raise ValueError(f"{name} must be a non-empty 1-d array of finite numbers, got {x!r}")
    return arr


def _reward_std(reward_std: float) -> float:
    if not (np.isfinite(reward_std) and reward_std >= 0):
        raise ValueError(f"reward_std must be finite and ≥ 0, got {reward_std}")
    return float(reward_std)


# bandits -------------------------------------------------------------------------------------


def categorical_bandit(
    r: object,
    *,
    logits: object = None,
    probs: object = None,
    reward_std: float = 0.0,
    name: str = "categorical-bandit",
    description: str = "",
) -> Problem:
    """A K-armed bandit, arm a paying r_a + σ_r ε, with a categorical policy.

    J = Σ_a π_a r_a; ∇J = Σ_a π_a r_a e(a) with the core's eligibility in the given form.

    Args:
        r: the arms' mean rewards, shape (K,).
        logits: z, shape (K,), π = softmax(z); or
        probs: relative weights w, shape (K,), π = w / Σw (exactly one of the two).
        reward_std: σ_r, the reward noise.
        name: the problem's name.
        description: one line.

    Raises:
        ValueError: both or neither of logits/probs, bad values (the core's checks), or a
            shape mismatch with r.
    """
    from gymnasium import spaces

    from eligibility.lab.envs import BanditEnv

    r = _vector("r", r)
    form = api.check("categorical", {"logits": logits, "probs": probs}).form
    theta = _vector(form, logits if form == "logits" else probs)
    if theta.shape != r.shape:
        raise ValueError(f"{form} has shape {theta.shape} but r has shape {r.shape}; one per arm")
    if form == "logits" and np.isinf(theta).any():
        raise ValueError("logits must be finite here (a masked arm has no gradient to test)")
    if form == "probs" and (theta <= 0).any():
        raise ValueError("probs must all be > 0 here (a zero-weight arm is never drawn)")
    sd = _reward_std(reward_std)
    k = r.shape[0]

    def objective(p: Params) -> float:
        return bandits.categorical_objective(r, **{form: p[form]})

    def gradient(p: Params) -> Params:
        return bandits.categorical_gradient(r, **{form: p[form]})

    if form == "logits":

        def to_policy(p: Params) -> Params:
            return {"W0": _column(p["logits"]), "b0": np.zeros(k)}

        def from_policy(g: Params) -> Params:
            return {"logits": g["W0"][:, 0].copy()}
    else:

        def to_policy(p: Params) -> Params:
            return {"probs": np.array(p["probs"], dtype=np.float64)}

        def from_policy(g: Params) -> Params:
            return {"probs": g["probs"].copy()}

    J = bandits.categorical_objective(r, **{form: theta})
    return Problem(
        name=name,
        description=description or f"{k}-armed bandit, categorical policy ({form})",
        gamma=1.0,
        theta={form: theta},
        objective=objective,
        gradient=gradient,
        make_env=lambda: BanditEnv(spaces.Discrete(k), lambda a: r[int(a)], sd),
        policy="mlp" if form == "logits" else "probs",
        to_policy=to_policy,
        from_policy=from_policy,
        value=_const(J),
        extra={"r": r, "reward_std": sd},
    )


def bernoulli_bandit(
    table: object,
    *,
    logits: object,
    reward_std: float = 0.0,
    name: str = "bernoulli-bandit",
    description: str = "",
) -> Problem:
    """A bandit of n independent Bernoulli units (p = σ(z)), outcome y paying R(y) + σ_r ε.

    J = Σ_y P(y) R(y); ∇J = Σ_y P(y) R(y) e(y), eᵢ = yᵢ − σ(zᵢ) (the core's eligibility).

    Args:
        table: R(y), shape (2,)*n.
        logits: z, shape (n,).
        reward_std: σ_r, the reward noise.
        name: the problem's name.
        description: one line.
    """
    from gymnasium import spaces

    from eligibility.lab.envs import BanditEnv

    z = _vector("logits", logits)
    n = z.shape[0]
    R = np.array(table, dtype=np.float64)
    if R.shape != (2,) * n or not np.isfinite(R).all():
        raise ValueError(
            f"table must be finite with shape (2,)*n = {(2,) * n} (one mean reward per joint "
            f"outcome of the {n} units), got shape {R.shape}"
        )
    sd = _reward_std(reward_std)
    J = bandits.bernoulli_objective(R, logits=z)
    return Problem(
        name=name,
        description=description or f"{n} Bernoulli units, joint reward table",
        gamma=1.0,
        theta={"logits": z},
        objective=lambda p: bandits.bernoulli_objective(R, logits=p["logits"]),
        gradient=lambda p: bandits.bernoulli_gradient(R, logits=p["logits"]),
        make_env=lambda: BanditEnv(
            spaces.MultiBinary(n), lambda y: R[tuple(np.asarray(y, dtype=np.int64))], sd
        ),
        policy="mlp",
        to_policy=lambda p: {"W0": _column(p["logits"]), "b0": np.zeros(n)},
        from_policy=lambda g: {"logits": g["W0"][:, 0].copy()},
        value=_const(J),
        extra={"table": R, "reward_std": sd},
    )


def gaussian_bandit(
    c: object,
    *,
    loc: object,
    scale: object,
    name: str = "gaussian-bandit",
    description: str = "",
) -> Problem:
    """A Gaussian policy a ~ N(μ, diag σ²) in ℝᵈ with reward −‖a − c‖², solved in closed form.

    J = −Σᵢ ((μᵢ − cᵢ)² + σᵢ²).

    θ = (loc μ, log_scale ln σ), the trainer's parametrisation of a Box policy;
    ∂J/∂μ = −2(μ − c), ∂J/∂ ln σ = −2σ².
    """
    from gymnasium import spaces

    from eligibility.lab.envs import BanditEnv

    c = _vector("c", c)
    checked = api.check("normal", {"loc": loc, "scale": scale})
    mu = np.broadcast_to(np.asarray(checked.params["loc"]), c.shape).astype(np.float64)
    sigma = np.broadcast_to(np.asarray(checked.params["scale"]), c.shape).astype(np.float64)
    d = c.shape[0]

    def objective(p: Params) -> float:
        return bandits.gaussian_objective(c, p["loc"], np.exp(p["log_scale"]))

    def gradient(p: Params) -> Params:
        g = bandits.gaussian_gradient(c, p["loc"], np.exp(p["log_scale"]))
        return {"loc": g["loc"], "log_scale": g["log_scale"]}

    J = bandits.gaussian_objective(c, mu, sigma)
    return Problem(
        name=name,
        description=description or f"Gaussian policy in ℝ^{d}, reward −‖a − c‖²",
        gamma=1.0,
        theta={"loc": mu, "log_scale": np.log(sigma)},
        objective=objective,
        gradient=gradient,
        make_env=lambda: BanditEnv(
            spaces.Box(-np.inf, np.inf, (d,), dtype=np.float64),
            lambda a: -float(np.sum((a - c) ** 2)),
            0.0,
        ),
        policy="mlp",
        to_policy=lambda p: {
            "W0": _column(p["loc"]),
            "b0": np.zeros(d),
            "log_std": np.array(p["log_scale"], dtype=np.float64),
        },
        from_policy=lambda g: {"loc": g["W0"][:, 0].copy(), "log_scale": g["log_std"].copy()},
        value=_const(J),
        extra={"c": c},
    )


# finite MDPs ---------------------------------------------------------------------------------


def observation_values(m: FiniteMDP, sol: mdp_.Solution) -> Callable[[np.ndarray], np.ndarray]:
    """V̄(o) = Σ_{s: φ(s)=o} d(s) V^π(s) / Σ_{s: φ(s)=o} d(s), the exact value seen through φ.

    For a state whose features are its own this is V^π(s); aliased states get their values
    averaged by discounted visitation. It is a function of the observation alone, never of the
    action, so as a baseline it leaves the gradient estimate unbiased. Terminal observations
    (which no action is taken from) map to 0.
    """
    table: dict[bytes, float] = {}
    n = m.nonterminal
    keys = [m.phi[s].tobytes() for s in n]
    for key in set(keys):
        idx = [s for s, k in zip(n, keys, strict=True) if k == key]
        w = sol.d[idx]
        table[key] = float(w @ sol.V[idx] / w.sum()) if w.sum() > 0 else float(sol.V[idx].mean())

    def value(obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs, dtype=np.float64)
        return np.array([table.get(o.tobytes(), 0.0) for o in obs.reshape(len(obs), -1)])

    return value


def mdp_problem(
    m: FiniteMDP,
    *,
    W: object,
    b: object,
    name: str | None = None,
    description: str = "",
) -> Problem:
    """A finite MDP with the linear-softmax policy π(a|s) = softmax(W φ(s) + b) at (W, b).

    Raises:
        ValueError: W not (A, d), b not (A,), or I − γP_π singular at this θ.
    """
    from eligibility.lab.envs import MDPEnv

    W, b = mdp_.check_theta(m, W, b)
    sol = mdp_.solve(m, W, b)
    n = m.nonterminal
    rows = m.phi[n]
    aliased = len({r.tobytes() for r in rows}) < len(rows)
    return Problem(
        name=name or m.name,
        description=description or f"finite MDP, {m.n_states} states, {m.n_actions} actions",
        gamma=m.gamma,
        theta={"W": W, "b": b},
        objective=lambda p: float(mdp_.objective(m, np.asarray(p["W"]), np.asarray(p["b"]))),
        gradient=lambda p: mdp_.gradient(m, p["W"], p["b"]),
        make_env=lambda: MDPEnv(m),
        policy="mlp",
        to_policy=lambda p: {"W0": np.array(p["W"]), "b0": np.array(p["b"])},
        from_policy=lambda g: {"W": g["W0"].copy(), "b": g["b0"].copy()},
        value=observation_values(m, sol),
        expected_length=sol.expected_length,
        aliased=aliased,
        extra={"mdp": m, "solution": sol},
    )


def chain_mdp(n: int = 5, slip: float = 0.1, gamma: float = 1.0) -> FiniteMDP:
    """A corridor 0 … n−1 with left/right moves; J = −E[steps to the end].

    Each move slips the other way w.p. ``slip``; reward −1 per step; start at 0, terminal at
    n−1; one-hot features of the non-terminal states.
    """
    S, A = n, 2
    P = np.zeros((S, A, S))
    for s in range(S):
        left, right = max(s - 1, 0), min(s + 1, S - 1)
        P[s, 0, left] += 1.0 - slip
        P[s, 0, right] += slip
        P[s, 1, right] += 1.0 - slip
        P[s, 1, left] += slip
    R = -np.ones((S, A))
    rho0 = np.eye(S)[0]
    # The terminal state gets φ = 0: no action is ever taken there, so it needs no weights.
    return FiniteMDP(P, R, rho0, gamma, [S - 1], np.eye(S)[:, : S - 1], name="chain")


_MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))
"""up, down, left, right as (row, column) steps."""


def gridworld_mdp(
    rows: int = 3, cols: int = 3, slip: float = 0.1, gamma: float = 0.9, goal_reward: float = 10.0
) -> FiniteMDP:
    """A rows×cols grid, start top-left, goal bottom-right (terminal).

    Entering the goal pays ``goal_reward``, every other step −1, walls bump; the intended move
    happens w.p. 1 − slip, else one of the four moves uniformly. R[s, a] is the mean reward of
    the move (the env pays that mean). One-hot features of the non-terminal cells (the goal's
    φ is 0).
    """
    S, A = rows * cols, 4
    goal = S - 1
    P = np.zeros((S, A, S))
    R = np.zeros((S, A))
    for s in range(S):
        r, c = divmod(s, cols)
        for a in range(A):
            for m, (dr, dc) in enumerate(_MOVES):
                prob = (1.0 - slip) * (m == a) + slip / A
                r2 = min(max(r + dr, 0), rows - 1)
                c2 = min(max(c + dc, 0), cols - 1)
                s2 = r2 * cols + c2
                P[s, a, s2] += prob
                R[s, a] += prob * (goal_reward if s2 == goal else -1.0)
    rho0 = np.eye(S)[0]
    return FiniteMDP(P, R, rho0, gamma, [goal], np.eye(S)[:, :goal], name="gridworld")


def short_corridor_mdp() -> FiniteMDP:
    """Sutton & Barto (2018), Example 13.1: the short corridor with switched actions.

    States 0, 1, 2 and the terminal 3; left/right move as labelled except in state 1, where
    they are swapped; −1 per step; γ = 1. Every state has the same feature φ = [1], so the
    policy must act the same everywhere (aliased states): the best it can do is a stochastic
    policy, P(right) ≈ 0.59.
    """
    S, A = 4, 2
    P = np.zeros((S, A, S))
    P[0, 0, 0] = P[0, 1, 1] = 1.0
    P[1, 0, 2] = P[1, 1, 0] = 1.0
    P[2, 0, 1] = P[2, 1, 3] = 1.0
    P[3, :, 3] = 1.0
    R = -np.ones((S, A))
    R[3] = 0.0
    return FiniteMDP(P, R, np.eye(S)[0], 1.0, [3], np.ones((S, 1)), name="short-corridor")


# the built-in problems -----------------------------------------------------------------------

BANDIT_REWARDS = np.array([6.0, 6.5, 5.5, 7.0])
"""Arm means with a common offset of ~6: the regime in which a baseline pays off."""


def _bandit_logits() -> Problem:
    return categorical_bandit(
        BANDIT_REWARDS,
        logits=[0.5, 0.0, -0.5, 0.2],
        reward_std=1.0,
        name="bandit-logits",
        description="4-armed bandit, categorical policy in logits, r ≈ 6 ± 1",
    )


def _bandit_probs() -> Problem:
    return categorical_bandit(
        BANDIT_REWARDS,
        probs=[0.4, 0.3, 0.2, 0.1],
        reward_std=1.0,
        name="bandit-probs",
        description="the same bandit, categorical policy in probs (π = w / Σw)",
    )


def _bandit_bernoulli() -> Problem:
    return bernoulli_bandit(
        [[2.0, 3.0], [3.0, 6.0]],
        logits=[0.3, -0.4],
        reward_std=0.5,
        name="bandit-bernoulli",
        description="2 Bernoulli units, reward 2 + y₁ + y₂ + 2·y₁y₂",
    )


def _bandit_gaussian() -> Problem:
    return gaussian_bandit(
        [1.0, -0.5],
        loc=[0.0, 0.0],
        scale=[1.0, 0.5],
        name="bandit-gaussian",
        description="Gaussian policy in ℝ², reward −‖a − c‖²",
    )


def _chain() -> Problem:
    m = chain_mdp()
    W = np.zeros((2, 4))
    W[1] = [0.5, 0.8, 1.0, 1.2]
    return mdp_problem(
        m,
        W=W,
        b=[0.0, 0.3],
        name="chain",
        description="5-state corridor, slip 0.1, −1 per step, γ = 1, one-hot φ",
    )


def _gridworld() -> Problem:
    m = gridworld_mdp()
    W = np.zeros((4, 8))
    W[1, :] = 1.0  # lean down
    W[3, :] = 1.0  # lean right
    return mdp_problem(
        m,
        W=W,
        b=[0.0, 0.2, -0.2, 0.2],
        name="gridworld",
        description="3×3 grid, slip 0.1, −1 per step, +10 at the goal, γ = 0.9, one-hot φ",
    )


def _short_corridor() -> Problem:
    return mdp_problem(
        short_corridor_mdp(),
        W=[[0.0], [0.2]],
        b=[0.0, 0.0],
        name="short-corridor",
        description="Sutton & Barto Ex. 13.1: 3 aliased states (one φ), γ = 1",
    )


PROBLEMS: dict[str, Callable[[], Problem]] = {
    "bandit-logits": _bandit_logits,
    "bandit-probs": _bandit_probs,
    "bandit-bernoulli": _bandit_bernoulli,
    "bandit-gaussian": _bandit_gaussian,
    "chain": _chain,
    "gridworld": _gridworld,
    "short-corridor": _short_corridor,
}
"""The built-in problems by name (the choices of ``eligibility lab --problem``)."""


def get_problem(name: str) -> Problem:
    """The built-in problem called ``name``.

    Raises:
        ValueError: an unknown name; the message lists the known ones.
    """
    if name not in PROBLEMS:
        raise ValueError(f"unknown problem {name!r}; choose one of {', '.join(PROBLEMS)} or all")
    return PROBLEMS[name]()


__all__ = [
    "PROBLEMS",
    "Problem",
    "bernoulli_bandit",
    "categorical_bandit",
    "chain_mdp",
    "gaussian_bandit",
    "get_problem",
    "gridworld_mdp",
    "mdp_problem",
    "observation_values",
    "short_corridor_mdp",
]
