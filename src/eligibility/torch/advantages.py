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

from eligibility.torch import _common, formulas, options

BASELINES = options.names("baseline")
SCALES = options.names("scale")

# ----------------------------------------------------------------------------------------------
# Advantages
# ----------------------------------------------------------------------------------------------


def _check_rewards(rewards: object) -> torch.Tensor:
    r = _common.float_tensor(
        "rewards", rewards, 1, "one-dimensional, one reward per completion (shape (N,))"
    )
    _common.raise_nonfinite("rewards", r, None)
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


def group_advantages(
    rewards: torch.Tensor,
    group_size: int,
    *,
    baseline: str = "rloo",
    scale: str | None = "none",
    eps: float | None = None,
) -> torch.Tensor:
    r"""Aᵢ = (Rᵢ − bᵢ) / s: the advantage of each completion from the rewards of its group.

    The baseline and the scale are rows of :mod:`eligibility.torch.options` (their formulas
    and verdicts are there): baselines ``"rloo"`` (default, unbiased), ``"mean"`` (GRPO: a
    step size (G − 1)/G) and ``"none"``; scales ``"none"`` (default), ``"group-std"``,
    ``"batch-std"`` (biased: ``std-normalised``) and ``"whiten"`` (``batch-whitened``).

    NaN-safe by rule: a group of one (or a batch of one, for ``"batch-std"``) has σ̂ := 1 (verl's
    convention) instead of NaN; a group whose rewards are all equal has A = 0 exactly under
    ``"rloo"`` and ``"mean"`` (every baseline equals R there), whatever the scale, instead of
    0/ε rounding noise. With ``baseline="none"`` and a std scale, a group of equal rewards is
    divided by ε (that combination has no baseline to make it 0).

    Args:
        rewards: R, shape (N,), floating, finite; N = prompts × G, group-major.
        group_size: G, a positive int dividing N.
        baseline: a baseline row's name.
        scale: a scale row's name (None is ``"none"``).
        eps: ε of the scale (None: the row's own, 1e-4 under a std as TRL, 1e-8 in the
            whitening as OpenRLHF; verl uses 1e-6).

    Returns:
        A, shape (N,), in the dtype and device of ``rewards``; a constant (no gradient).

    Raises:
        ValueError: rewards not a 1-D floating tensor, non-finite, or not a multiple of G; an
            unknown baseline or scale.
    """
    b_row = options.row("baseline", baseline)
    s_row = options.row("scale", "none" if scale is None else scale)
    if eps is not None and not (eps >= 0 and eps != float("inf")):
        raise ValueError(f"eps must be a finite number ≥ 0; got {eps!r}")
    r = _check_rewards(rewards).detach()
    g = _check_group_size(group_size, r.numel())
    a = b_row.fn(r, g)  # type: ignore[misc]
    if baseline != "none" and g > 1:  # every baseline equals R in a group of equal rewards
        equal = (r.view(-1, g) == r.view(-1, g)[:, :1]).all(1, keepdim=True)
        a = torch.where(equal, torch.zeros((), dtype=a.dtype, device=a.device), a.view(-1, g))
    a = a.reshape(-1)
    return s_row.fn(a, r, g) if eps is None else s_row.fn(a, r, g, eps)  # type: ignore[misc]


def kl_penalised_rewards(
    rewards: torch.Tensor,
    logps: torch.Tensor,
    ref_logps: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    beta: float,
) -> torch.Tensor:
    r"""R̃ᵢ = Rᵢ − β Dᵢ: the KL row ``sequence-reward``, placed in the reward before the baseline.

    Dᵢ = Σₜ mᵢ,ₜ (ℓᵢ,ₜ − ℓ^ref_ᵢ,ₜ) (:func:`~eligibility.torch.formulas.kl_sequence`, detached).
    E[D ∇ln π(o)] = ∇KL(π_θ ‖ π_ref) over whole sequences, so :func:`group_advantages` of R̃
    with a leave-one-out baseline is unbiased for ∇(E[R] − β KL); the loss then takes
    ``kl="none"`` (TRL's RLOOTrainer, verl's ``use_kl_in_reward``).

    Args:
        rewards: R, shape (N,), floating, finite.
        logps: ℓ, (N, T), the policy's per-token log-probs of the completions.
        ref_logps: ℓ^ref, the reference policy's, like ``logps``.
        completion_mask: m, bool or 0/1, (N, T).
        beta: β ≥ 0.

    Returns:
        R̃, shape (N,), a constant (no gradient).
    """
    r = _check_rewards(rewards)
    lp = _common.check_tensor("logps", logps)
    ref = _common.check_tensor("ref_logps", ref_logps)
    if lp.dim() != 2 or lp.shape[0] != r.numel() or ref.shape != lp.shape:
        raise ValueError(
            f"logps and ref_logps must be (N, T) with N = {r.numel()} rewards; got "
            f"{tuple(lp.shape)} and {tuple(ref.shape)}"
        )
    m = _common.check_mask(completion_mask, lp.shape)
    d = formulas.kl_sequence(lp, ref, m.to(lp.device))
    return r.detach() - _common.check_coef(beta) * d.to(r.dtype)


def whiten_advantages(
    advantages: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    eps: float = 1e-8,
    unbiased: bool = False,
) -> torch.Tensor:
    r"""The whitening of REINFORCE++ over every real entry of the batch.

    The formula is :func:`eligibility.torch.formulas.whiten`'s. Over every token of every
    completion for per-token advantages (N, T) with a mask, every sequence for (N,).
    REINFORCE++ (Hu, arXiv:2501.03262; OpenRLHF ``reinforce``, verl ``reinforce_plus_plus``)
    applies it to the returns-to-go or to group-centred rewards; on group advantages it is
    the scale row ``"whiten"`` (``batch-whitened`` in the check).

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
    a = _common.float_tensor("advantages", advantages).detach()
    m = torch.ones_like(a, dtype=torch.bool) if mask is None else _common.check_mask(mask, a.shape)
    _common.raise_nonfinite("advantages", a, m)
    return formulas.whiten(a, m, tuple(range(a.dim())), eps, unbiased)
