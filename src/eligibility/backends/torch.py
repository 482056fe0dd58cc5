r"""The torch backend: the same policy as an ``nn.Module``, gradients by autograd.

The policy loss is :func:`eligibility.torch.reinforce_loss` (and its Bernoulli and normal
siblings), whose backward is the characteristic eligibility in closed form:

    L(θ) = −Σᵢ ψᵢ ln π(aᵢ | sᵢ; θ) − (β/N) Σᵢ H(π(· | sᵢ; θ)),   ∇θ J ≈ −∇θ L

Autograd carries it through the network. With the same weights and the same batch the gradient
equals the NumPy backend's hand-written one (tested to 1e-8 relative in float64).

You can pass your own module (anything mapping states (N, obs_dim) to the head's z of width
``head.n_out``); for a Box head the state-independent s_σ = ln σ lives next to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from eligibility.backends import Array, Gradient, Mask, PolicyHead, act_with, diagnostics, substate
from eligibility.backends.numpy import init_mlp


class MLPModule(nn.Module):
    """z = W_L f(… f(W₀ s + b₀) …) + b_L, parameters named W0, b0, … like the NumPy MLP.

    Args:
        sizes: layer widths [in, hidden…, out].
        activation: ``"tanh"`` or ``"relu"``.
        rng: generator for the initial weights (the same init as the NumPy backend).
        out_scale: scale of the last layer's initial weights.
        dtype: parameter dtype.
        init: the weights' initialisation, a key of :data:`~eligibility.backends.numpy.INITS`.
    """

    def __init__(
        self,
        sizes: Sequence[int],
        activation: str = "tanh",
        *,
        rng: np.random.Generator,
        out_scale: float = 0.01,
        dtype: torch.dtype = torch.float64,
        init: str = "lecun",
    ) -> None:
        super().__init__()
        if activation not in ("tanh", "relu"):
            raise ValueError(f"activation must be 'tanh' or 'relu', got {activation!r}")
        self.n_layers = len(sizes) - 1
        self.activation = activation
        self.f = torch.tanh if activation == "tanh" else torch.relu
        for name, value in init_mlp(sizes, rng, out_scale=out_scale, init=init).items():
            self.register_parameter(name, nn.Parameter(torch.tensor(value, dtype=dtype)))

    def forward_numpy(self, s: np.ndarray) -> np.ndarray:
        """z for each row of s, in NumPy on views of the parameters (no autograd, no copies).

        The rollout asks for z at every env step; torch's per-call dispatch costs more than the
        arithmetic at these sizes, so acting goes through NumPy, as the NumPy backend does.
        """
        h = np.asarray(s, dtype=np.float64)
        for l in range(self.n_layers):  # noqa: E741
            W = getattr(self, f"W{l}").detach().numpy()
            u = h @ W.T + getattr(self, f"b{l}").detach().numpy()
            last = l == self.n_layers - 1
            h = u if last else (np.tanh(u) if self.activation == "tanh" else np.maximum(u, 0.0))
        return h

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        """z for each row of s."""
        h = s
        for l in range(self.n_layers):  # noqa: E741
            u = nn.functional.linear(h, getattr(self, f"W{l}"), getattr(self, f"b{l}"))
            h = u if l == self.n_layers - 1 else self.f(u)
        return h


class TorchPolicy:
    """π(a | s; θ) from a module's z and a :class:`PolicyHead`, with ``grad_log_prob`` by autograd.

    Args:
        module: maps states to z (width ``head.n_out``).
        head: the action distribution.
        init_log_std: initial s_σ = ln σ (Box heads).
    """

    def __init__(self, module: nn.Module, head: PolicyHead, *, init_log_std: float = 0.0) -> None:
        self.module = module
        self.head = head
        self.dtype = next(module.parameters()).dtype
        self.named: dict[str, nn.Parameter] = dict(module.named_parameters())
        # The default MLP in float64 on the CPU acts through NumPy (see MLPModule.forward_numpy).
        self._numpy_forward = (
            isinstance(module, MLPModule)
            and self.dtype == torch.float64
            and all(p.device.type == "cpu" for p in module.parameters())
        )
        if head.has_log_std:
            self.named["log_std"] = nn.Parameter(
                torch.full((head.n_out,), float(init_log_std), dtype=self.dtype)
            )

    @property
    def params(self) -> dict[str, np.ndarray]:
        """θ by name, as NumPy copies."""
        return {k: p.detach().cpu().numpy().copy() for k, p in self.named.items()}

    @params.setter
    def params(self, value: dict[str, np.ndarray]) -> None:
        with torch.no_grad():
            for k, p in self.named.items():
                p.copy_(torch.as_tensor(np.asarray(value[k]), dtype=p.dtype))

    def _z(self, s: np.ndarray) -> torch.Tensor:
        return self.module(torch.as_tensor(s, dtype=self.dtype))

    def _log_std_np(self) -> np.ndarray | None:
        p = self.named.get("log_std")
        return None if p is None else p.detach().cpu().numpy()

    def act(
        self, s: Array, rng: np.random.Generator | None, *, greedy: bool = False, mask: Mask = None
    ) -> Array:
        """a ~ π(· | s) (drawn in NumPy from z, as the NumPy backend does), or the mode."""
        if self._numpy_forward:
            z = self.module.forward_numpy(s)
        else:
            with torch.no_grad():
                z = np.asarray(self._z(s).cpu().numpy(), dtype=np.float64)  # no copy if float64
        return act_with(self.head, self.head.masked(z, mask), self._log_std_np(), rng, greedy)

    def grad_log_prob(
        self, s: Array, a: Array, psi: Array, *, entropy_coef: float = 0.0, mask: Mask = None
    ) -> Gradient:
        """g = −∇θ L = Σᵢ ψᵢ ∇θ ln π(aᵢ | sᵢ) + β ∇θ (1/N) Σᵢ Hᵢ, by autograd.

        L = −Σᵢ ψᵢ ln π(aᵢ | sᵢ) − (β/N) Σᵢ Hᵢ is the head's core loss on the masked z.

        Returns:
            The gradient (ascent direction) by name, and ``surrogate``/``entropy`` diagnostics.
        """
        z = self.head.masked(self._z(s), mask)
        adv = torch.as_tensor(psi, dtype=self.dtype)
        beta = entropy_coef / len(psi)
        loss = self.head.torch_loss(z, a, adv, beta, self.named.get("log_std"))
        params = list(self.named.values())
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        out = {
            k: (np.zeros(p.shape) if g is None else -g.detach().cpu().numpy().astype(np.float64))
            for (k, p), g in zip(self.named.items(), grads, strict=True)
        }
        z_np = np.asarray(z.detach().cpu().numpy(), dtype=np.float64)
        return out, diagnostics(self.head, z_np, self._log_std_np(), psi, a)


class _Optimizer:
    r"""Adam (Kingma & Ba, 2015) or plain SGD on tensors, descending their ``.grad``.

        m ← β₁ m + (1 − β₁) g,  v ← β₂ v + (1 − β₂) g²,  θ ← θ − α m̂ / (√v̂ + ε),

    m̂ = m / (1 − β₁ᵗ), v̂ = v / (1 − β₂ᵗ): ``torch.optim.Adam``'s update, with its state keys
    (``step``, ``exp_avg``, ``exp_avg_sq``), so checkpoints read either way. Written here
    because ``torch.optim``'s first optimiser imports ``torch._dynamo`` and doubles the start-up
    of a process (torch 2.13, CPU: ``python -c "import torch, torch.optim;
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])"`` against ``python -c "import
    torch"``, timed as whole processes in alternating order, median ratio 2.0 over 5 pairs;
    ``python -X importtime`` shows where), longer than a whole CartPole run.
    """

    def __init__(self, name: str, params: list[nn.Parameter], lr: float) -> None:
        if name not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be 'adam' or 'sgd', got {name!r}")
        self.adam = name == "adam"
        self.params = list(params)
        self.lr = lr
        self.betas, self.eps = (0.9, 0.999), 1e-8
        self.state: dict[nn.Parameter, dict[str, torch.Tensor]] = {}

    def zero_grad(self) -> None:
        """Drop every parameter's gradient."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One descent step of every parameter that has a gradient."""
        b1, b2 = self.betas
        for p in self.params:
            if p.grad is None:
                continue
            if not self.adam:
                p.add_(p.grad, alpha=-self.lr)
                continue
            st = self.state.setdefault(
                p,
                {
                    "step": torch.zeros(()),
                    "exp_avg": torch.zeros_like(p),
                    "exp_avg_sq": torch.zeros_like(p),
                },
            )
            st["step"] += 1
            t = float(st["step"])
            st["exp_avg"].mul_(b1).add_(p.grad, alpha=1 - b1)
            st["exp_avg_sq"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            denom = (st["exp_avg_sq"] / (1 - b2**t)).sqrt_().add_(self.eps)
            p.addcdiv_(st["exp_avg"], denom, value=-self.lr / (1 - b1**t))


def _opt_state(opt: _Optimizer, named: dict[str, nn.Parameter]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name, p in named.items():
        for k, v in opt.state.get(p, {}).items():
            arr = torch.as_tensor(v).detach().cpu().numpy()
            out[f"{name}.{k}"] = arr.reshape(arr.shape or (1,))
    return out


def _load_opt_state(
    opt: _Optimizer, named: dict[str, nn.Parameter], state: dict[str, np.ndarray]
) -> None:
    for name, p in named.items():
        entries = substate(state, name + ".")
        if not entries:
            continue
        st = {}
        for k, v in entries.items():
            t = torch.from_numpy(np.array(v))
            st[k] = t.reshape(()) if k == "step" else t.reshape(p.shape).to(p.dtype)
        opt.state[p] = st


class Agent:
    """Everything the trainer holds for the torch backend: policy, optional V, optimisers.

    Same arguments as :class:`eligibility.backends.numpy.Agent`, plus ``module``: your own
    ``nn.Module`` for the policy (default: :class:`MLPModule` with the NumPy backend's init).
    """

    def __init__(
        self,
        obs_dim: int,
        head: PolicyHead,
        *,
        hidden: Sequence[int],
        activation: str,
        optimizer: str,
        lr: float,
        value: bool,
        value_lr: float,
        rng: np.random.Generator,
        module: nn.Module | None = None,
        init: str = "lecun",
    ) -> None:
        if module is None:
            module = MLPModule([obs_dim, *hidden, head.n_out], activation, rng=rng, init=init)
        elif not isinstance(module, nn.Module):
            raise ValueError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        self.policy = TorchPolicy(module, head)
        self.opt = _Optimizer(optimizer, list(self.policy.named.values()), lr)
        self.value: Any = None
        if value:
            self.value = MLPModule(
                [obs_dim, *hidden, 1], activation, rng=rng, out_scale=1.0, init=init
            )
            self.value_opt = _Optimizer("adam", list(self.value.parameters()), value_lr)

    def values(self, s: np.ndarray) -> np.ndarray:
        """V(s), one per row."""
        with torch.no_grad():
            return self.value(torch.as_tensor(s, dtype=torch.float64))[:, 0].numpy()

    def apply(self, grads: dict[str, np.ndarray]) -> None:
        """One ascent step along ``grads`` (torch optimisers descend, so on −g)."""
        for k, p in self.policy.named.items():
            p.grad = -torch.as_tensor(grads[k], dtype=p.dtype)
        self.opt.step()

    def fit_value(self, s: np.ndarray, g: np.ndarray, epochs: int) -> float:
        """``epochs`` full-batch Adam steps on (1/2N) Σ (V(s) − G)²; returns the last loss."""
        s_t = torch.as_tensor(s, dtype=torch.float64)
        g_t = torch.as_tensor(g, dtype=torch.float64)
        loss = torch.zeros(())
        for _ in range(epochs):
            self.value_opt.zero_grad()
            loss = 0.5 * ((self.value(s_t)[:, 0] - g_t) ** 2).mean()
            loss.backward()
            self.value_opt.step()
        return float(loss.detach())

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every array of the agent by a flat name (for safetensors)."""
        out = {f"policy.{k}": v for k, v in self.policy.params.items()}
        out.update(
            {f"policy_opt.{k}": v for k, v in _opt_state(self.opt, self.policy.named).items()}
        )
        if self.value is not None:
            named = dict(self.value.named_parameters())
            out.update({f"value.{k}": p.detach().numpy().copy() for k, p in named.items()})
            out.update({f"value_opt.{k}": v for k, v in _opt_state(self.value_opt, named).items()})
        return out

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`state_dict` gave."""
        self.policy.params = {k: state[f"policy.{k}"] for k in self.policy.named}
        _load_opt_state(self.opt, self.policy.named, substate(state, "policy_opt."))
        if self.value is not None:
            named = dict(self.value.named_parameters())
            with torch.no_grad():
                for k, p in named.items():
                    p.copy_(torch.from_numpy(np.array(state[f"value.{k}"])))
            _load_opt_state(self.value_opt, named, substate(state, "value_opt."))
