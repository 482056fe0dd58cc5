r"""The exact problems ``eligibility check`` holds a user's estimator against.

Each is a finite MDP of the lab (a one-step bandit is an MDP with one state) with the
linear-softmax policy π(a|s) = softmax(W φ(s) + b), which is ``torch.nn.Linear(d, A)``:
``weight`` = W (A×d), ``bias`` = b (A). At a fixed θ the lab gives, by one linear solve,

    ∇J(θ) = Σ_s d(s) Σ_a π(a|s) Q(s, a) e(a|s),   d(s) = Σ_t γᵗ Pr(s_t = s),

and the exact expectation of common mistakes, computed the same way (see ``MISTAKES``).
Episodes are drawn from the model itself, all at once in NumPy, and handed to the user's code
as tensors; the same draws feed the reference estimators (common random numbers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eligibility.check import reuse, user
from eligibility.check.family import Draw, Family, Trial
from eligibility.check.mistakes import meanings
from eligibility.lab import mdp as mdp_
from eligibility.lab import problems as lab

MISTAKES: dict[str, Callable[[mdp_.FiniteMDP, np.ndarray, np.ndarray], dict[str, np.ndarray]]] = {
    "missing-discount-weighting": mdp_.gradient_without_discount_weighting,
}
"""Diagnoses recognised by their exact expectation E[ĝ] (besides ``sign`` and ``scale``)."""


@dataclass(frozen=True)
class CheckProblem:
    """One exact problem at one θ, in ``torch.nn.Linear`` layout.

    Attributes:
        name: the key of ``--problem``.
        description: one line.
        mdp: the finite MDP (a bandit is one state and a terminal one).
        W: the policy's weight, (A, d).
        b: the policy's bias, (A,).
        reward_std: standard deviation of the Gaussian noise added to each reward.
        exact: ∇J(θ), flattened as (weight, bias).
        mistakes: the exact E[ĝ] of each mistake this problem can tell from ∇J, flattened.
        blind_to: what this problem cannot show, and which problem can (for the report).
    """

    name: str
    description: str
    mdp: mdp_.FiniteMDP
    W: np.ndarray
    b: np.ndarray
    reward_std: float
    exact: np.ndarray
    mistakes: dict[str, np.ndarray]
    blind_to: tuple[str, ...] = ()
    solution: Any = field(default=None, repr=False)

    @property
    def gamma(self) -> float:
        """The discount γ of J = E[Σ_t γᵗ r_t]."""
        return self.mdp.gamma

    @property
    def obs_dim(self) -> int:
        """d, the length of an observation φ(s)."""
        return self.mdp.n_features

    @property
    def n_actions(self) -> int:
        """A, the number of actions."""
        return self.mdp.n_actions

    def labels(self) -> list[str]:
        """A name per gradient component: ``weight[a,i]`` then ``bias[a]``."""
        A, d = self.W.shape
        return [f"weight[{a},{i}]" for a in range(A) for i in range(d)] + [
            f"bias[{a}]" for a in range(A)
        ]

    def sample(self, n_episodes: int, rng: np.random.Generator) -> Episodes:
        """Draw complete episodes from the model under π(·|s) = softmax(W φ(s) + b)."""
        return sample_episodes(self, n_episodes, rng)

    def make_env(self) -> Any:
        """A Gymnasium env of the problem with float32 observations (the update form's)."""
        from eligibility.lab.envs import MDPEnv

        return MDPEnv(self.mdp, reward_std=self.reward_std, dtype=np.float32)


def _flat(g: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([np.ravel(g["W"]), np.ravel(g["b"])])


def from_mdp(
    m: mdp_.FiniteMDP,
    W: Any,
    b: Any,
    *,
    name: str,
    description: str,
    reward_std: float = 0.0,
    blind_to: tuple[str, ...] = (),
) -> CheckProblem:
    """A :class:`CheckProblem` of the MDP ``m`` at θ = (W, b), with its exact vectors."""
    W, b = mdp_.check_theta(m, W, b)
    exact = _flat(mdp_.gradient(m, W, b))
    mistakes = {}
    for key, expectation in MISTAKES.items():
        v = _flat(expectation(m, W, b))
        if not np.allclose(v, exact, rtol=1e-9, atol=1e-12):  # else: this problem is blind to it
            mistakes[key] = v
    return CheckProblem(
        name=name,
        description=description,
        mdp=m,
        W=W,
        b=b,
        reward_std=reward_std,
        exact=exact,
        mistakes=mistakes,
        blind_to=blind_to,
        solution=mdp_.solve(m, W, b),
    )


def bandit_mdp(r: np.ndarray) -> mdp_.FiniteMDP:
    """A K-armed bandit as an MDP: one state (φ = [1]) and a terminal one; R[0, a] = r_a."""
    k = len(r)
    P = np.zeros((2, k, 2))
    P[:, :, 1] = 1.0
    R = np.zeros((2, k))
    R[0] = r
    return mdp_.FiniteMDP(P, R, [1.0, 0.0], 1.0, [1], [[1.0], [0.0]], name="bandit")


_GAMMA_1 = "γ = 1 here, so a dropped γᵗ changes nothing; gridworld (γ = 0.9) shows it"


def _bandit() -> CheckProblem:
    z = np.array([0.5, 0.0, -0.5, 0.2])
    return from_mdp(
        bandit_mdp(lab.BANDIT_REWARDS),
        z[:, None],
        np.zeros(4),
        name="bandit",
        description="4-armed bandit, r ≈ 6 ± 1 (one step, obs [1])",
        reward_std=1.0,
        blind_to=(
            "one step: a wrong return-to-go or a per-step mean looks right here; chain, "
            "gridworld and short-corridor show them",
            _GAMMA_1,
        ),
    )


def _from_lab(name: str) -> CheckProblem:
    p = lab.get_problem(name)
    blind = () if p.gamma < 1 else (_GAMMA_1,)
    return from_mdp(
        p.extra["mdp"],
        p.theta["W"],
        p.theta["b"],
        name=name,
        description=p.description,
        blind_to=blind,
    )


def _short_corridor() -> CheckProblem:
    # The lab's θ sits near the optimum, P(right) ≈ 0.55, where ∇J is small against the noise
    # (catching a 2× scale there needs ~15 000 calls); at P(right) = 0.80 about 300 do.
    return from_mdp(
        lab.short_corridor_mdp(),
        [[0.0], [1.4]],
        [0.0, 0.0],
        name="short-corridor",
        description="Sutton & Barto Ex. 13.1: 3 aliased states (one φ), γ = 1, P(right) = 0.80",
        blind_to=(
            "one feature and two actions: every gradient here is a multiple of one vector, so "
            "a bias shows only as a scale c ≠ 1",
            _GAMMA_1,
        ),
    )


PROBLEMS: dict[str, Callable[[], CheckProblem]] = {
    "bandit": _bandit,
    "chain": lambda: _from_lab("chain"),
    "gridworld": lambda: _from_lab("gridworld"),
    "short-corridor": _short_corridor,
}
"""The problems of ``eligibility check --problem`` (``all``: every one)."""


@dataclass(frozen=True)
class Episodes:
    """M complete episodes, padded to the longest: step t of episode m is ``[m, t]``.

    Attributes:
        states: the true states s_t, (M, T), −1 after the episode's end.
        actions: a_t, (M, T), 0 after the end.
        rewards: r_{t+1}, (M, T), 0 after the end.
        lengths: the number of steps of each episode, (M,).
    """

    states: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    lengths: np.ndarray

    @property
    def mask(self) -> np.ndarray:
        """True on the steps that happened, (M, T)."""
        return np.arange(self.states.shape[1])[None, :] < self.lengths[:, None]


MAX_STEPS = 100_000
"""A bound on an episode's length; the MDP's check guarantees that episodes end w.p. 1."""


def _count_below(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The entries of each row of ``cdf`` below that row's ``u``: the inverse-CDF draw."""
    return (cdf < u[:, None]).sum(axis=1)


def sample_episodes(problem: CheckProblem, n: int, rng: np.random.Generator) -> Episodes:
    """n episodes of ``problem`` under its policy, drawn by inverse CDF, all at once.

    Each step draws for the episodes still running only; the steps are laid out as (T, n)
    rows once every episode has ended, then transposed (no full-width column per step: the
    long episodes of a few leave most of the batch ended).
    """
    m, pi = problem.mdp, problem.solution.pi
    cdf_pi = np.cumsum(pi, axis=1)
    cdf_next = np.cumsum(m.P, axis=2)
    s = np.minimum(np.searchsorted(np.cumsum(m.rho0), rng.random(n), side="right"), len(m.rho0) - 1)
    alive = np.flatnonzero(~m.terminal[s])
    steps = []
    for _ in range(MAX_STEPS):
        if alive.size == 0:
            break
        st = s[alive]
        a = np.minimum(_count_below(cdf_pi[st], rng.random(alive.size)), m.n_actions - 1)
        r = m.R[st, a]
        if problem.reward_std:
            r = r + problem.reward_std * rng.standard_normal(alive.size)
        nxt = np.minimum(_count_below(cdf_next[st, a], rng.random(alive.size)), m.n_states - 1)
        steps.append((alive, st, a, r))
        s[alive] = nxt
        alive = alive[~m.terminal[nxt]]
    else:
        raise RuntimeError(f"an episode of {problem.name} ran past {MAX_STEPS} steps")
    states = np.full((len(steps), n), -1)
    actions = np.zeros((len(steps), n), dtype=np.int64)
    rewards = np.zeros((len(steps), n))
    lengths = np.zeros(n, dtype=np.int64)
    for t, (running, st, a, r) in enumerate(steps):
        states[t, running], actions[t, running], rewards[t, running] = st, a, r
        lengths[running] += 1
    return Episodes(
        states=np.ascontiguousarray(states.T),
        actions=np.ascontiguousarray(actions.T),
        rewards=np.ascontiguousarray(rewards.T),
        lengths=lengths,
    )


def returns_to_go(problem: CheckProblem, eps: Episodes) -> tuple[np.ndarray, np.ndarray]:
    """The states (0 after an episode's end) and G_t = r_{t+1} + γ G_{t+1}, each (M, T)."""
    mask = eps.mask
    G = np.zeros_like(eps.rewards)
    acc = np.zeros(eps.rewards.shape[0])
    for t in range(eps.states.shape[1] - 1, -1, -1):  # within each episode
        acc = eps.rewards[:, t] + problem.gamma * acc * mask[:, t]
        G[:, t] = acc
    return np.where(mask, eps.states, 0), G


def reuse_variants(problem: CheckProblem, eps: Episodes, per_call: int) -> list:
    """The data-reuse variants (:mod:`eligibility.check.reuse`) on the batches of ``eps``."""
    s, G = returns_to_go(problem, eps)
    psi = np.where(eps.mask, problem.gamma ** np.arange(G.shape[1])[None, :] * G, 0.0)
    m = problem.mdp
    C = reuse.batch_weights(s, eps.actions, psi, per_call, m.n_states, m.n_actions)
    return reuse.variants(C, m.phi, problem.W, problem.b)


def reference_estimates(
    problem: CheckProblem, eps: Episodes, per_call: int, *, baseline: bool = False
) -> np.ndarray:
    """REINFORCE on the same episodes, one estimate per ``per_call`` episodes: (N, p).

        ĝ = (1/E) Σ_e Σ_t γᵗ (G_et − b(s_et)) ∇θ ln π(a_et | s_et),

    with G the discounted return-to-go, b = 0 or (``baseline``) the exact V^π(s), and, for
    the linear-softmax policy, ∇_W ln π = (onehot(a) − π(s)) φ(s)ᵀ, ∇_b ln π = onehot(a) − π(s).
    The steps are summed by (batch, action, state) first (:func:`reuse.batch_weights`), then
    ĝ = Σ_s (C[·, s] − (Σ_a C[a, s]) π(·|s)) φ(s)ᵀ: no (M, T, A, d) array (a fifth to a half
    of the per-step product's time on the check's problems; tests/test_check.py holds it
    against a plain loop over the steps).
    """
    m, sol = problem.mdp, problem.solution
    s, G = returns_to_go(problem, eps)
    T = eps.states.shape[1]
    psi = problem.gamma ** np.arange(T)[None, :] * (G - (sol.V[s] if baseline else 0.0))
    psi = np.where(eps.mask, psi, 0.0)
    C = reuse.batch_weights(s, eps.actions, psi, per_call, m.n_states, m.n_actions)  # (N, A, S)
    e = C - C.sum(axis=1, keepdims=True) * sol.pi.T[None]
    return np.concatenate([(e @ m.phi).reshape(len(e), -1), e.sum(axis=2)], axis=1)


def trial(problem: CheckProblem, fn: Callable[..., Any], config: Any, seed: int) -> Trial:
    """The episodic problem as the engine sees it.

    A pilot of plain REINFORCE gives σ; then N calls on E episodes each (loss form), or on the
    env (update form).
    """
    rng = np.random.default_rng(seed)
    E = config.episodes
    sigma = reference_estimates(problem, problem.sample(400 * E, rng), E).std(axis=0, ddof=1)
    sign = 1.0 if config.objective else -1.0

    def draw(n: int) -> Draw:
        import torch

        policy, params = user.make_policy(problem.W, problem.b, config.policy)
        theta = [p.detach().clone() for p in params]
        if config.form == "update":
            env = problem.make_env()

            def setup_env() -> None:
                torch.manual_seed(seed)
                env.reset(seed=seed)

            def rollout(k: int) -> np.ndarray | None:
                user.reset_policy(params, theta)
                return user.call(fn, (policy, env, problem.gamma), params, sign, theta)

            return Draw(step=rollout, setup=setup_env)
        eps = problem.sample(n * E, rng)
        references = {
            "variance_ratio": reference_estimates(problem, eps, E),
            "variance_ratio_value_baseline": reference_estimates(problem, eps, E, baseline=True),
        }
        episodes = _as_episodes(problem, eps)

        def step(k: int) -> np.ndarray | None:
            user.reset_policy(params, theta)
            batch = episodes[k * E : (k + 1) * E]
            return user.call(fn, (policy, batch, problem.gamma), params, sign, theta)

        return Draw(
            step=step,
            setup=lambda: torch.manual_seed(seed),
            references=references,
            variants=reuse_variants(problem, eps, E),
        )

    return Trial(
        name=problem.name,
        exact=problem.exact,
        sigma=sigma,
        draw=draw,
        expectations=problem.mistakes,
        blind_to=problem.blind_to,
    )


def _as_episodes(problem: CheckProblem, eps: Episodes) -> list[user.Episode]:
    """Each episode as the user's function gets it (:func:`user.to_tensors`'s dtypes).

    Every field of the whole draw is converted once, its steps episode after episode, and
    split by the episodes' lengths: one tensor of each field per episode (a view; no two
    overlap), not three conversions per episode.
    """
    import torch

    steps, lengths = eps.mask, eps.lengths.tolist()
    fields = (
        torch.as_tensor(problem.mdp.phi[eps.states[steps]], dtype=torch.float32),
        torch.as_tensor(eps.actions[steps], dtype=torch.int64),
        torch.as_tensor(eps.rewards[steps], dtype=torch.float32),
    )
    return [user.Episode(*each) for each in zip(*(f.split(lengths) for f in fields), strict=True)]


FAMILY = Family(
    name="episodic",
    problems=PROBLEMS,
    forms=("loss", "update"),
    arguments={"loss": ("policy", "episodes", "gamma"), "update": ("policy", "env", "gamma")},
    trial=trial,
    diagnoses=meanings("episodic"),
    reference="plain REINFORCE's (γᵗ G_t, no baseline)",
    batch=lambda report: f"policy gives {report.policy}, E = {report.episodes} episodes per call",
)
"""The episodic family of ``eligibility check``."""


__all__ = [
    "FAMILY",
    "MISTAKES",
    "PROBLEMS",
    "CheckProblem",
    "Episodes",
    "bandit_mdp",
    "from_mdp",
    "reference_estimates",
    "returns_to_go",
    "reuse_variants",
    "sample_episodes",
    "trial",
]
