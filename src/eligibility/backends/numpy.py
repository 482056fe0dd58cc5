r"""The NumPy backend: an MLP whose forward and backward passes are written out by hand.

Forward, for layers l = 0 … L (h₀ = s, the state; f = tanh or ReLU):

    uₗ = Wₗ hₗ + bₗ,   hₗ₊₁ = f(uₗ)   (l < L),   z = W_L h_L + b_L

Backward (backpropagation, Rumelhart, Hinton & Williams, 1986) from δ_L = ∂J/∂z:

    ∂J/∂Wₗ = Σᵢ δₗ,ᵢ hₗ,ᵢᵀ,   ∂J/∂bₗ = Σᵢ δₗ,ᵢ,   δₗ₋₁ = (Wₗᵀ δₗ) ⊙ f′(uₗ₋₁)

REINFORCE enters in one place only: at the top, δ_L,ᵢ = ψᵢ eᵢ, the weight ψᵢ (the return minus
the baseline, divided by the number of episodes) times Williams' characteristic eligibility
eᵢ = ∂ ln π(aᵢ | sᵢ) / ∂zᵢ, which the head takes from the core's kernels
(e.g. ``categorical.score_logits``: onehot(a) − softmax(z)). Everything below it is the chain rule.

Rows are states (a batch), so in code uₗ = hₗ Wₗᵀ + bₗ with Wₗ of shape (out, in), the layout of
``torch.nn.Linear``: the weights of both backends are the same arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from eligibility.backends import Array, Gradient, Mask, PolicyHead, act_with, diagnostics, substate

Activation = Literal["tanh", "relu"]


def lecun_weight(
    fan_out: int, fan_in: int, rng: np.random.Generator, last: bool, out_scale: float
) -> np.ndarray:
    """W ~ c · N(0, 1/fan_in) (LeCun), c = 1, or ``out_scale`` for the last layer.

    1/fan_in keeps tanh units out of saturation.
    """
    scale = (out_scale if last else 1.0) / np.sqrt(fan_in)
    return scale * rng.standard_normal((fan_out, fan_in))


def orthogonal_weight(
    fan_out: int, fan_in: int, rng: np.random.Generator, last: bool, out_scale: float
) -> np.ndarray:
    """W = c · Q, Q with orthonormal rows or columns (Saxe et al. 2014), c = √2 or ``out_scale``.

    Q is the Q of the QR factorisation of a Gaussian matrix, its signs fixed by diag(R) so that
    it is uniform (Haar) over the orthogonal matrices, as ``torch.nn.init.orthogonal_`` draws
    it; √2 is the hidden layers' gain of the PPO/A2C implementations (CleanRL, SB3).
    """
    a = rng.standard_normal((max(fan_out, fan_in), min(fan_out, fan_in)))
    q, r = np.linalg.qr(a)
    q = q * np.sign(np.diag(r))
    w = q if fan_out >= fan_in else q.T
    return (out_scale if last else np.sqrt(2.0)) * w


INITS = {"lecun": lecun_weight, "orthogonal": orthogonal_weight}
"""The initialisations of a layer's weights by ``--init`` name (biases start at 0)."""


def init_mlp(
    sizes: Sequence[int],
    rng: np.random.Generator,
    *,
    out_scale: float = 0.01,
    init: str = "lecun",
) -> dict[str, np.ndarray]:
    """Weights Wₗ from ``INITS[init]``, biases 0; the last layer scaled by ``out_scale``.

    A small last layer starts the policy near uniform (maximal entropy), which REINFORCE needs
    to explore.
    """
    params: dict[str, np.ndarray] = {}
    n_layers = len(sizes) - 1
    for l in range(n_layers):  # noqa: E741 (l is the layer index of the derivation)
        fan_in, fan_out = sizes[l], sizes[l + 1]
        params[f"W{l}"] = INITS[init](fan_out, fan_in, rng, l == n_layers - 1, out_scale)
        params[f"b{l}"] = np.zeros(fan_out)
    return params


class MLP:
    """z = W_L f(… f(W₀ s + b₀) …) + b_L with a hand-written backward pass.

    Args:
        sizes: layer widths [in, hidden…, out]; ``[in, out]`` is a linear map.
        activation: ``"tanh"`` or ``"relu"``.
        rng: generator for the initial weights.
        out_scale: scale of the last layer's initial weights.
        init: the weights' initialisation, a key of :data:`INITS`.
    """

    def __init__(
        self,
        sizes: Sequence[int],
        activation: Activation = "tanh",
        *,
        rng: np.random.Generator,
        out_scale: float = 0.01,
        init: str = "lecun",
    ) -> None:
        if activation not in ("tanh", "relu"):
            raise ValueError(f"activation must be 'tanh' or 'relu', got {activation!r}")
        self.sizes = tuple(int(s) for s in sizes)
        self.activation = activation
        self.n_layers = len(self.sizes) - 1
        self.params = init_mlp(self.sizes, rng, out_scale=out_scale, init=init)

    def forward(self, s: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """z for each row of s, and the cache [h₀, h₁, …, h_L] the backward pass needs."""
        h = s
        hs = [h]
        for l in range(self.n_layers):  # noqa: E741
            u = h @ self.params[f"W{l}"].T + self.params[f"b{l}"]
            if l == self.n_layers - 1:
                return u, hs
            h = np.tanh(u) if self.activation == "tanh" else np.maximum(u, 0.0)
            hs.append(h)
        raise AssertionError("unreachable")  # pragma: no cover

    def backward(self, hs: list[np.ndarray], delta: np.ndarray) -> dict[str, np.ndarray]:
        """∂J/∂θ from δ_L = ∂J/∂z (one row per state), summed over rows.

        ∂J/∂Wₗ = δₗᵀ hₗ, ∂J/∂bₗ = Σᵢ δₗ,ᵢ, δₗ₋₁ = (δₗ Wₗ) ⊙ f′(uₗ₋₁), where
        f′(u) = 1 − h² for tanh (h = tanh u) and [u > 0] = [h > 0] for ReLU.
        """
        grads: dict[str, np.ndarray] = {}
        for l in reversed(range(self.n_layers)):  # noqa: E741
            grads[f"W{l}"] = delta.T @ hs[l]
            grads[f"b{l}"] = delta.sum(axis=0)
            if l > 0:
                h = hs[l]
                f_prime = 1.0 - h * h if self.activation == "tanh" else (h > 0.0)
                delta = (delta @ self.params[f"W{l}"]) * f_prime
        return grads


class MLPPolicy:
    """π(a | s; θ): an :class:`MLP` producing z, read by a :class:`PolicyHead` as a distribution.

    ``params`` holds every parameter by name ("W0", "b0", …, and "log_std" for a Box head); it is
    a plain dict of arrays, so θ can be read and set exactly. ``hidden=()`` gives the
    linear-softmax policy z = W₀ s + b₀.

    Args:
        obs_dim: width of the (flattened) state.
        head: the action distribution, from :func:`eligibility.reinforce.spaces.head_for_space`.
        hidden: hidden layer widths.
        activation: ``"tanh"`` or ``"relu"``.
        rng: generator for the initial weights.
        init_log_std: initial s_σ = ln σ of a normal head.
        init: the weights' initialisation, a key of :data:`INITS`.
    """

    def __init__(
        self,
        obs_dim: int,
        head: PolicyHead,
        hidden: Sequence[int] = (),
        activation: Activation = "tanh",
        *,
        rng: np.random.Generator,
        init_log_std: float = 0.0,
        init: str = "lecun",
    ) -> None:
        self.head = head
        self.net = MLP([obs_dim, *hidden, head.n_out], activation, rng=rng, init=init)
        if head.has_log_std:
            self.net.params["log_std"] = np.full(head.n_out, float(init_log_std))

    @property
    def params(self) -> dict[str, np.ndarray]:
        """θ by name, as copies (as the torch backend gives them); set θ by assigning this."""
        return {k: v.copy() for k, v in self.net.params.items()}

    @params.setter
    def params(self, value: dict[str, np.ndarray]) -> None:
        missing = set(self.net.params) ^ set(value)
        if missing:
            raise ValueError(f"params must have exactly the keys {sorted(self.net.params)}")
        for k, v in value.items():  # in place: optimisers keep a reference to this dict
            v = np.asarray(v, dtype=np.float64)
            if v.shape != self.net.params[k].shape:
                raise ValueError(f"params[{k!r}] must have shape {self.net.params[k].shape}")
            self.net.params[k] = v.copy()

    @property
    def log_std(self) -> np.ndarray | None:
        """s_σ = ln σ of a normal head, else None."""
        return self.net.params.get("log_std")

    def act(
        self, s: Array, rng: np.random.Generator | None, *, greedy: bool = False, mask: Mask = None
    ) -> Array:
        """a ~ π(· | s) (or the mode when ``greedy``), one row per state; masked logits −∞."""
        z = self.head.masked(self.net.forward(s)[0], mask)
        return act_with(self.head, z, self.log_std, rng, greedy)

    def grad_log_prob(
        self, s: Array, a: Array, psi: Array, *, entropy_coef: float = 0.0, mask: Mask = None
    ) -> Gradient:
        """g = Σᵢ ψᵢ ∇θ ln π(aᵢ | sᵢ) + β ∇θ (1/N) Σᵢ H(π(· | sᵢ)), by backpropagation.

        The top of the backward pass is δ_L,ᵢ = ψᵢ eᵢ with eᵢ the characteristic eligibility
        at the head (the core's kernel), plus β/N ∂H/∂z when an entropy bonus is asked for.

        Args:
            s: states, shape (N, obs_dim).
            a: actions taken in them, shape (N, …).
            psi: per-step weights ψᵢ, shape (N,).
            entropy_coef: β.
            mask: valid actions (N, k) or None; masked logits are −∞, their eᵢ exactly 0.

        Returns:
            The gradient (an ascent direction) by parameter name, and diagnostics:
            ``surrogate`` Σ ψᵢ ln π(aᵢ | sᵢ) and ``entropy`` (1/N) Σ Hᵢ.
        """
        z, hs = self.net.forward(s)
        z = self.head.masked(z, mask)
        log_std = self.log_std
        e_z, e_s = self.head.score(z, log_std, a)
        delta = psi[:, None] * e_z
        d_log_std = None if e_s is None else psi @ e_s
        if entropy_coef:
            dh_z, dh_s = self.head.entropy_grad(z, log_std)
            delta = delta + (entropy_coef / len(psi)) * dh_z
            if dh_s is not None:
                d_log_std = d_log_std + (entropy_coef / len(psi)) * dh_s.sum(axis=0)
        grads = self.net.backward(hs, delta)
        if d_log_std is not None:
            grads["log_std"] = d_log_std
        return grads, diagnostics(self.head, z, log_std, psi, a)


class ValueMLP:
    """V(s; φ): an :class:`MLP` with one output, fitted by least squares on the returns.

    L(φ) = (1/2N) Σᵢ (V(sᵢ) − Gᵢ)², so δ_L,ᵢ = (V(sᵢ) − Gᵢ)/N and the same backward pass
    gives ∇φ L.
    """

    def __init__(
        self,
        obs_dim: int,
        hidden: Sequence[int] = (),
        activation: Activation = "tanh",
        *,
        rng: np.random.Generator,
        init: str = "lecun",
    ) -> None:
        self.net = MLP([obs_dim, *hidden, 1], activation, rng=rng, out_scale=1.0, init=init)

    @property
    def params(self) -> dict[str, np.ndarray]:
        """φ by name, as copies."""
        return {k: v.copy() for k, v in self.net.params.items()}

    def __call__(self, s: np.ndarray) -> np.ndarray:
        """V(s), one value per row."""
        return self.net.forward(s)[0][:, 0]

    def loss_grad(self, s: np.ndarray, g: np.ndarray) -> tuple[dict[str, np.ndarray], float]:
        """∇φ L and L for L = (1/2N) Σᵢ (V(sᵢ) − Gᵢ)² (a descent gradient)."""
        v, hs = self.net.forward(s)
        r = v[:, 0] - g
        grads = self.net.backward(hs, r[:, None] / len(g))
        return grads, float(0.5 * np.mean(r * r))


class Adam:
    r"""Adam (Kingma & Ba, 2015) on a dict of arrays, as ascent or descent.

    m ← β₁ m + (1 − β₁) g,  v ← β₂ v + (1 − β₂) g²,
    θ ← θ ± α m̂ / (√v̂ + ε) with m̂ = m / (1 − β₁ᵗ), v̂ = v / (1 − β₂ᵗ).
    """

    def __init__(
        self,
        params: dict[str, np.ndarray],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.params = params
        self.lr = lr
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.t = 0
        self.m = {k: np.zeros_like(p) for k, p in params.items()}
        self.v = {k: np.zeros_like(p) for k, p in params.items()}

    def step(self, grads: dict[str, np.ndarray], *, ascent: bool = True) -> None:
        """One update of every parameter in place, along +g (ascent) or −g (descent)."""
        self.t += 1
        c1 = 1.0 - self.beta1**self.t
        c2 = 1.0 - self.beta2**self.t
        sign = 1.0 if ascent else -1.0
        for k, g in grads.items():
            m, v = self.m[k], self.v[k]
            m *= self.beta1
            m += (1.0 - self.beta1) * g
            v *= self.beta2
            v += (1.0 - self.beta2) * (g * g)
            self.params[k] += sign * self.lr * (m / c1) / (np.sqrt(v / c2) + self.eps)

    def state_dict(self) -> dict[str, np.ndarray]:
        """The moments and the step count, as flat named arrays."""
        out = {f"m.{k}": v for k, v in self.m.items()}
        out.update({f"v.{k}": v for k, v in self.v.items()})
        out["t"] = np.asarray([self.t], dtype=np.int64)
        return out

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`state_dict` gave."""
        for k in self.m:
            self.m[k][...] = state[f"m.{k}"]
            self.v[k][...] = state[f"v.{k}"]
        self.t = int(state["t"][0])


class SGD:
    """Plain stochastic gradient: θ ← θ ± α g."""

    def __init__(self, params: dict[str, np.ndarray], lr: float) -> None:
        self.params = params
        self.lr = lr

    def step(self, grads: dict[str, np.ndarray], *, ascent: bool = True) -> None:
        """One update of every parameter in place."""
        sign = 1.0 if ascent else -1.0
        for k, g in grads.items():
            self.params[k] += sign * self.lr * g

    def state_dict(self) -> dict[str, np.ndarray]:
        """SGD keeps no state."""
        return {}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Nothing to restore."""


def make_optimizer(name: str, params: dict[str, np.ndarray], lr: float) -> Adam | SGD:
    """``"adam"`` or ``"sgd"`` over ``params``."""
    if name == "adam":
        return Adam(params, lr)
    if name == "sgd":
        return SGD(params, lr)
    raise ValueError(f"optimizer must be 'adam' or 'sgd', got {name!r}")


class Agent:
    """Everything the trainer holds for the NumPy backend: policy, optional V, optimisers.

    Args:
        obs_dim: width of the state.
        head: the action distribution.
        hidden: hidden layer widths (policy and value network alike).
        activation: ``"tanh"`` or ``"relu"``.
        optimizer: ``"adam"`` or ``"sgd"``.
        lr: policy learning rate.
        value: whether to build a value network V(s).
        value_lr: its learning rate (Adam).
        rng: generator for the initial weights.
        init: the weights' initialisation, a key of :data:`INITS`.
    """

    def __init__(
        self,
        obs_dim: int,
        head: PolicyHead,
        *,
        hidden: Sequence[int],
        activation: Activation,
        optimizer: str,
        lr: float,
        value: bool,
        value_lr: float,
        rng: np.random.Generator,
        init: str = "lecun",
    ) -> None:
        self.policy = MLPPolicy(obs_dim, head, hidden, activation, rng=rng, init=init)
        self.opt = make_optimizer(optimizer, self.policy.net.params, lr)
        self.value = None
        if value:
            self.value = ValueMLP(obs_dim, hidden, activation, rng=rng, init=init)
        self.value_opt = Adam(self.value.net.params, value_lr) if self.value is not None else None

    def values(self, s: np.ndarray) -> np.ndarray:
        """V(s), one per row (the value network must exist)."""
        assert self.value is not None
        return self.value(s)

    def apply(self, grads: dict[str, np.ndarray]) -> None:
        """One ascent step of the policy along ``grads``."""
        self.opt.step(grads, ascent=True)

    def fit_value(self, s: np.ndarray, g: np.ndarray, epochs: int) -> float:
        """``epochs`` full-batch Adam steps on (1/2N) Σ (V(s) − G)²; returns the last loss."""
        assert self.value is not None and self.value_opt is not None
        loss = 0.0
        for _ in range(epochs):
            grads, loss = self.value.loss_grad(s, g)
            self.value_opt.step(grads, ascent=False)
        return loss

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every array of the agent by a flat name (for safetensors)."""
        out = {f"policy.{k}": v for k, v in self.policy.net.params.items()}
        out.update({f"policy_opt.{k}": v for k, v in self.opt.state_dict().items()})
        if self.value is not None and self.value_opt is not None:
            out.update({f"value.{k}": v for k, v in self.value.net.params.items()})
            out.update({f"value_opt.{k}": v for k, v in self.value_opt.state_dict().items()})
        return out

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`state_dict` gave."""
        for k, v in self.policy.net.params.items():
            v[...] = state[f"policy.{k}"]
        self.opt.load_state_dict(substate(state, "policy_opt."))
        if self.value is not None and self.value_opt is not None:
            for k, v in self.value.net.params.items():
                v[...] = state[f"value.{k}"]
            self.value_opt.load_state_dict(substate(state, "value_opt."))
