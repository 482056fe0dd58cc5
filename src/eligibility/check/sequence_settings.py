"""A sequence problem at the check's settings: the declared β, the sampler's τ, micro-batches.

:mod:`eligibility.check.sequence` checks a loss on the lab's problem as these functions set
it up: the objective's β (``--beta``), the policy sampled at τ (``--temperature``), and
whether ``--micro-batches`` can split its batches at all (asked before any work).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eligibility.lab.sequence.problem import SequenceProblem


def rebuilt(
    problem: SequenceProblem, *, model: Any = None, beta: float | None = None
) -> SequenceProblem:
    """The same problem with another policy model (θ) or another objective's β.

    The prompts, reward, reference, T, G, EOS and the notes are ``problem``'s; J, ∇J and the
    enumeration are computed afresh.
    """
    from eligibility.lab.sequence.problem import SequenceProblem

    return SequenceProblem(
        problem.model if model is None else model, problem.ref_model, problem.prompts,
        problem.reward_fn, max_completion_length=problem.max_completion_length,
        eos_token_id=problem.eos_token_id, beta=problem.beta if beta is None else beta,
        group_size=problem.group_size, name=problem.name, description=problem.description,
        shows=problem.shows, blind_to=problem.blind_to,
    )  # fmt: skip


def with_beta(problem: SequenceProblem, beta: float | None) -> SequenceProblem:
    """The problem whose objective is J = E[R] − β·KL at the declared β (None: its own)."""
    if beta is None or float(beta) == problem.beta:
        return problem
    out = rebuilt(problem, beta=float(beta))
    if problem.beta and not beta:
        out.blind_to = (*out.blind_to, "β = 0 declared: the KL placements are not told apart")
    return out


def tempered(problem: SequenceProblem, tau: float) -> SequenceProblem:
    """The problem whose policy is softmax(logits / τ): the same problem at θ/τ.

    The check's model's logits are linear in θ (sums of embedding rows), so z_θ / τ = z_{θ/τ}:
    J_τ(θ) = J(θ/τ) and ∇_θ J_τ = ∇J(θ/τ) / τ. The linearity is asserted on the prompts.

    Raises:
        ValueError: a model whose logits are not linear in its parameters.
    """
    import copy

    import torch

    model = copy.deepcopy(problem.model).double()  # θ/τ in float64: the enumeration's
    with torch.no_grad():
        for p in model.parameters():
            p.div_(tau)
        ids = torch.as_tensor(problem.prompts)
        here = problem.model(ids).logits.double()
        if not torch.allclose(model(ids).logits * tau, here, rtol=1e-6, atol=1e-6):
            raise ValueError("--temperature needs a model whose logits are linear in θ")
    out = rebuilt(problem, model=model)
    out.model = model.float()  # the contract's float32 log-probs (the logps form's)
    return out


def unfit(problem: SequenceProblem, config: Any) -> str | None:
    """Why ``problem`` cannot be checked with ``config`` (None: it can).

    ``--world-size R`` gives each of R ranks a share and ``--micro-batches M`` splits each
    share into M micro-batches, of whole groups: R·M must divide the problem's groups (one per
    prompt); with ``--advantages`` (computed on the whole batch) of completions.
    """
    groups, G = len(problem.prompts), problem.group_size
    M, R = config.micro_batches, config.world_size
    what = " and ".join(
        f
        for f in (f"--micro-batches {M}" if M > 1 else "", f"--world-size {R}" if R > 1 else "")
        if f
    )
    if config.advantages is not None:  # advantages of the whole batch: a split group is fine
        if (groups * G) % (M * R):
            return f"{what} does not divide the {groups * G} completions of problem {problem.name}"
    elif groups % (M * R):
        return f"{what} does not divide the {groups} groups of problem {problem.name}"
    return None


__all__ = ["rebuilt", "tempered", "unfit", "with_beta"]
