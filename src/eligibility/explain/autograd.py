"""The cross-check: the same quantities from ``torch.distributions`` and autograd, in float64.

It runs when asked (``explain(..., autograd=True)``, ``eligibility explain --autograd``):
importing torch makes the command 1.46 s against 0.27 s (``bench/classic/cli_wall.py``). torch is
optional: when it cannot be imported the check is reported as unavailable (never an error).
The closed forms stand on their own either way, and the tests hold them against autograd.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eligibility.distributions import REGISTRY


@dataclass(frozen=True)
class Autograd:
    """The outcome of the cross-check: per quantity, max |closed form − autograd|."""

    available: bool
    differences: dict[str, float] = field(default_factory=dict)
    torch_version: str | None = None
    reason: str | None = None

    @property
    def max_abs_diff(self) -> float | None:
        """The largest absolute difference over every compared quantity (None if unavailable)."""
        if not self.available:
            return None
        return max(self.differences.values(), default=0.0)


@dataclass(frozen=True)
class Case:
    """One evaluation to replay in torch: a distribution, its parameters and a value."""

    dist: str
    params: dict[str, np.ndarray]
    value: np.ndarray
    total_count: int | None = None
    features: np.ndarray | None = None
    """With features x, ``params[linear]`` is replaced by the unit W x + b at W = 0, b = it;
    the gradients are then those w.r.t. W and b."""
    linear: str | None = None


NOT_ASKED = Autograd(
    available=False,
    reason=(
        "Not run: it replays every number above in torch.distributions and differentiates it "
        "by autograd, in float64. Ask for it with --autograd (explain(..., autograd=True) from "
        "Python); it imports torch, about a second more."
    ),
)
"""The cross-check when it was not asked for, with the way to ask."""


def import_torch() -> Any | None:
    """torch, or None when it cannot be imported (absent, or blocked in ``sys.modules``)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def _torch_eval(torch: Any, case: Case, through: str) -> tuple[Any, dict[str, np.ndarray]]:
    """Ln π (or π) summed over the batch, and the gradient w.r.t. every parameter."""
    if case.features is None:
        leaves = {
            k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
            for k, v in case.params.items()
        }
        kwargs: dict[str, Any] = dict(leaves)
    else:
        # At W = 0 the unit's output is b = the given parameter, and ∂/∂W is the chain rule.
        x = torch.tensor(case.features, dtype=torch.float64)
        pre = case.params[case.linear]
        leaves = {
            "W": torch.zeros(pre.shape + x.shape[-1:], dtype=torch.float64, requires_grad=True),
            "b": torch.tensor(pre, dtype=torch.float64, requires_grad=True),
        }
        kwargs = {k: torch.tensor(v, dtype=torch.float64) for k, v in case.params.items()}
        kwargs[case.linear] = (leaves["W"] * x[..., None, :]).sum(-1) + leaves["b"]
    if case.total_count is not None:
        kwargs["total_count"] = case.total_count
    spec = REGISTRY[case.dist]
    dist = getattr(torch.distributions, spec.torch_name)(**kwargs, validate_args=False)
    dtype = torch.int64 if spec.value_is_index else torch.float64
    value = torch.tensor(case.value, dtype=dtype)
    lp = dist.log_prob(value)
    out = torch.exp(lp) if through == "exp" else lp
    out.sum().backward()
    grads = {k: t.grad.detach().numpy() for k, t in leaves.items()}
    return lp.detach().numpy(), grads


def _diff(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.broadcast_arrays(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
    both_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    d = np.where(both_inf, 0.0, np.abs(a - b))
    return float(np.max(d, initial=0.0))


def cross_check(
    case: Case,
    log_prob: np.ndarray,
    score: dict[str, np.ndarray],
    prob_gradient: dict[str, np.ndarray],
    extra: list[tuple[str, Case, dict[str, np.ndarray]]],
) -> Autograd:
    """Replay ``case`` (and the ``extra`` views) in torch and compare with the closed forms.

    Args:
        case: the distribution, parameters (broadcast to the full batch shape) and value.
        log_prob: the closed-form ln π of ``case``.
        score: the closed-form eligibility per parameter (compared with ``log_prob.backward()``).
        prob_gradient: the closed-form ∂π/∂θ per parameter (compared with ``prob.backward()``).
        extra: ``(label, case, score)`` triples: further views of the same unit whose
            eligibilities are compared with autograd of their own log-probability.

    Returns:
        The differences, or an unavailable result when torch cannot be imported.
    """
    torch = import_torch()
    if torch is None:
        return Autograd(
            available=False,
            reason=(
                "torch is not importable here, so the cross-check against torch.distributions "
                "was skipped; the closed forms above come from the eligibility core alone "
                "(install torch to run it)."
            ),
        )
    diffs: dict[str, float] = {}
    lp_t, g_log = _torch_eval(torch, case, "log")
    _, g_exp = _torch_eval(torch, case, "exp")
    diffs["log_prob"] = _diff(log_prob, lp_t)
    diffs["prob"] = _diff(np.exp(log_prob), np.exp(lp_t))
    for k, e in score.items():
        diffs[f"score.{k}"] = _diff(e, g_log[k])
    for k, g in prob_gradient.items():
        diffs[f"prob_gradient.{k}"] = _diff(g, g_exp[k])
    for label, c, s in extra:
        _, g = _torch_eval(torch, c, "log")
        for k, e in s.items():
            diffs[f"{label}.{k}"] = _diff(e, g[k])
    return Autograd(available=True, differences=diffs, torch_version=str(torch.__version__))
