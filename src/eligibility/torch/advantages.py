r"""Group advantages for sequence REINFORCE: the baseline and scale of each completion's reward.

G completions per prompt, group-major (the G completions of one prompt are contiguous, as TRL
and verl order them). Aᵢ = (Rᵢ − bᵢ)/s: the leave-one-out baseline b₋ᵢ = mean_{j≠i} Rⱼ keeps the
REINFORCE estimator unbiased; a self-including mean scales it by (G−1)/G; a per-group σ̂
reweights each prompt by a number that depends on Rᵢ itself (biased). Each option's docstring
says what the sequence ``eligibility check`` reports for it. The losses that take these
advantages are in :mod:`eligibility.torch.sequence`.
"""

from __future__ import annotations

import torch

from eligibility.torch import _common

_INTS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)

BASELINES = ("rloo", "mean", "none")
SCALES = (None, "group-std", "batch-std")

# ----------------------------------------------------------------------------------------------
# Advantages
# ----------------------------------------------------------------------------------------------


def _raise_nonfinite(name: str, x: torch.Tensor, m: torch.Tensor | None) -> None:
    """Raise a ValueError naming the first real entry of x that is NaN or ±∞ (one host sync)."""
    idx = _common.nonfinite_step(x, m)
    if idx is not None:
        raise ValueError(
            f"{name}{list(idx)} = {float(x[idx])} is not finite on a real entry; the loss and "
            "its gradient would be too: fix it upstream (or mark the entry as padding)"
        )


def _check_rewards(rewards: object) -> torch.Tensor:
    r = _common.check_tensor("rewards", rewards)
    _common.check_float("rewards", r)
    if r.dim() != 1:
        raise ValueError(
            f"rewards must be one-dimensional, one reward per completion (shape (N,)); got "
            f"shape {tuple(r.shape)}"
        )
    _raise_nonfinite("rewards", r, None)
    return r


def _check_group_size(group_size: object, n: int) -> int:
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive int (G); got {group_size!r}")
    if n % group_size:
        raise ValueError(
            f"{n} rewards do not split into groups of group_size = {group_size}: pass the G "
            "completions of each prompt contiguously (group-major), N = prompts × G"
        )
    return group_size


def _sample_std(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """σ̂ with Bessel's correction (torch.std), and σ̂ := 1 where there is a single value."""
    count = x.numel() if dim is None else x.shape[dim]
    if count < 2:
        shape = () if dim is None else x.shape[:dim] + x.shape[dim + 1 :]
        return torch.ones(shape, dtype=x.dtype, device=x.device)
    return x.std() if dim is None else x.std(dim=dim)


def group_advantages(
    rewards: torch.Tensor,
    group_size: int,
    *,
    baseline: str = "rloo",
    scale: str | None = None,
    eps: float = 1e-4,
) -> torch.Tensor:
    r"""Aᵢ = (Rᵢ − bᵢ) / s: the advantage of each completion from the rewards of its group.

    Baselines bᵢ (the group of i holds G completions, group-major):

    * ``"rloo"`` (default; RLOO): bᵢ = (1/(G−1)) Σ_{j≠i} Rⱼ, the mean of the others. It does not
      depend on oᵢ, so E[ĝ] = ∇J: ``unbiased``. A group of one has no others: bᵢ = 0, A = R
      (still unbiased, no variance reduction).
    * ``"mean"`` (GRPO, Dr. GRPO): bᵢ = (1/G) Σⱼ Rⱼ, which includes Rᵢ. Since
      Rᵢ − mean = (G−1)/G · (Rᵢ − b₋ᵢ), E[ĝ] = (G−1)/G · ∇J: ``scaled`` with c = (G−1)/G. A
      group of one gets A = 0 (c = 0: that prompt teaches nothing).
    * ``"none"``: bᵢ = 0 (plain REINFORCE): ``unbiased``, with the variance of the raw rewards.

    Scales s:

    * ``None`` (default): s = 1.
    * ``"group-std"`` (GRPO; TRL ``scale_rewards="group"``): s = σ̂_q + ε, the sample standard
      deviation (Bessel-corrected, as ``torch.std``) of the group's rewards. Each prompt is
      reweighted by 1/σ̂_q, and σ̂_q depends on Rᵢ itself: ``std-normalised`` (biased; hard and
      easy prompts, whose σ̂ is small, are upweighted).
    * ``"batch-std"`` (TRL ``scale_rewards="batch"``): s = σ̂ + ε over all N rewards: one number
      per batch, so nearly a step size; its dependence on the batch is a bias that vanishes as
      the batch grows.

    NaN-safe by rule: a group of one (or a batch of one, for ``"batch-std"``) has σ̂ := 1 (verl's
    convention) instead of NaN; a group whose rewards are all equal has A = 0 exactly under
    ``"rloo"`` and ``"mean"`` (every baseline equals R there), whatever the scale, instead of
    0/ε rounding noise. With ``baseline="none"`` and a std scale, a group of equal rewards is
    divided by ε (that combination has no baseline to make it 0).

    Args:
        rewards: R, shape (N,), floating, finite; N = prompts × G, group-major.
        group_size: G, a positive int dividing N.
        baseline: ``"rloo"``, ``"mean"`` or ``"none"``.
        scale: None, ``"group-std"`` or ``"batch-std"``.
        eps: ε added to σ̂ (TRL uses 1e-4, verl 1e-6).

    Returns:
        A, shape (N,), in the dtype and device of ``rewards``; a constant (no gradient).

    Raises:
        ValueError: rewards not a 1-D floating tensor, non-finite, or not a multiple of G; an
            unknown baseline or scale.
    """
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}; got {baseline!r}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}; got {scale!r}")
    if not (eps >= 0 and eps != float("inf")):
        raise ValueError(f"eps must be a finite number ≥ 0; got {eps!r}")
    r_flat = _check_rewards(rewards).detach()
    g = _check_group_size(group_size, r_flat.numel())
    r = r_flat.view(-1, g)
    if baseline == "rloo":
        b = (r.sum(1, keepdim=True) - r) / (g - 1) if g > 1 else torch.zeros_like(r)
    elif baseline == "mean":
        b = r.mean(1, keepdim=True)
    else:
        b = torch.zeros_like(r)
    a = r - b
    if scale == "group-std":
        a = a / (_sample_std(r, dim=1).unsqueeze(1) + eps)
    elif scale == "batch-std":
        a = a / (_sample_std(r_flat) + eps)
    if baseline != "none" and g > 1:
        equal = (r == r[:, :1]).all(1, keepdim=True)
        a = torch.where(equal, torch.zeros((), dtype=a.dtype, device=a.device), a)
    return a.reshape(-1)


def whiten_advantages(
    advantages: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    eps: float = 1e-8,
    unbiased: bool = False,
) -> torch.Tensor:
    r"""Â = (A − μ) / √(σ² + ε) over the whole batch: the global whitening of REINFORCE++.

    μ and σ² are the mean and variance of A over every real entry of the batch (every token of
    every completion for per-token advantages (N, T) with a mask; every sequence for (N,)),
    σ² with n − 1 in the denominator if ``unbiased`` (verl's ``masked_whiten``) and n otherwise
    (OpenRLHF). REINFORCE++ (Hu, arXiv:2501.03262; OpenRLHF ``reinforce``, verl
    ``reinforce_plus_plus``) applies it to the returns-to-go or to group-centred rewards.

    Effect on the gradient: subtracting μ is a baseline shared by the batch (it depends on
    oᵢ through its 1/n share: a bias of order 1/n); dividing by σ is one number per batch.
    Both vanish as the batch grows, so for a large batch it is ``scaled``, and for a small one
    the check may see the difference.

    NaN-safe: a single real entry (σ² from n − 1 = 0 entries) or zero variance gives Â = 0
    on every real entry. Padding entries are 0 in the output.

    Args:
        advantages: A, shape (N,) or (N, T), floating, finite on real entries.
        mask: None (every entry is real) or a bool / 0-1 float tensor of A's shape.
        eps: ε under the square root.
        unbiased: Bessel's correction for σ² (verl) or not (OpenRLHF, the default).

    Returns:
        Â, the shape, dtype and device of A; a constant (no gradient).
    """
    a = _common.check_tensor("advantages", advantages).detach()
    _common.check_float("advantages", a)
    m = torch.ones_like(a, dtype=torch.bool) if mask is None else _check_mask(mask, a.shape)
    _raise_nonfinite("advantages", a, m)
    mf = m.to(a.dtype)
    n = mf.sum()
    mu = (a * mf).sum() / n.clamp_min(1)
    dev = torch.where(m, a - mu, torch.zeros((), dtype=a.dtype, device=a.device))
    denom = (n - 1) if unbiased else n
    var = (dev * dev).sum() / denom.clamp_min(1)
    return dev * torch.rsqrt(var + eps)


def _check_mask(mask: object, shape: torch.Size) -> torch.Tensor:
    m = _common.check_tensor("completion_mask", mask)
    if m.shape != shape:
        raise ValueError(
            f"completion_mask of shape {tuple(m.shape)} does not match {tuple(shape)}: pass one "
            "flag per completion token (1/True on real tokens, EOS included; 0/False on padding)"
        )
    if m.dtype == torch.bool:
        return m
    if m.is_complex() or not (m.is_floating_point() or m.dtype in _INTS):
        raise ValueError(f"completion_mask must be bool or 0/1 numbers; got {m.dtype}")
    if bool(((m != 0) & (m != 1)).any()):
        raise ValueError(
            "completion_mask must hold only 0 and 1 (True/False); got other values: a weight "
            "is not a mask, multiply the advantages instead"
        )
    return m != 0
