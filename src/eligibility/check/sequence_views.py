"""The views of a sequence problem's enumeration: which log-probs a loss sums, and their scores.

A view is a gather of log softmax(z) at every position of every completion (one float64
forward pass) and of its Jacobian in θ (:meth:`SequenceProblem.jacobian`): the right shift,
or the logits at the token's own position, the prompt's tokens left in, the padding left in.
:mod:`eligibility.check.sequence` builds its variants on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eligibility.check.mistakes import named

if TYPE_CHECKING:
    from eligibility.lab.sequence.problem import SequenceProblem

VIEWS: dict[str, str | None] = {
    "logps": None,
    "no-shift": named("no-shift"),
    "prompt-in-loss": named("prompt-in-loss"),
    "padding-in-loss": named("padding-in-loss"),
    "temperature-mismatch": named("temperature-mismatch"),
}
"""The log-probs the loss sums (model form): the right ones, or the logits at the token's own
position (no shift), the prompt's tokens left in, the padding left in (the pad token's
log-probs after the end: the batch's pad id is not EOS), or (with a sampler's
τ ≠ 1) the logits not divided by τ."""

SAMPLER_VIEWS = (named("temperature-mismatch"),)
"""The views that exist only where the sampler's τ ≠ 1 (taken from the untempered model)."""


# -- per-token scores of every completion, per view ----------------------------------------------


@dataclass(frozen=True)
class View:
    """One view of the enumeration's log-probs: values, masks and scores, per row.

    Attributes:
        logp: ℓ̃, [M, K] (float64).
        on: the loss mask before the batch's width is applied, [M, K].
        completion: 1 on the real completion tokens among the K columns, [M, K].
        column: the completion position of each column (−1 for a prompt column), [K].
        ref: ℓ_ref on the completion columns, [M, K].
        scores: ∇θ ℓ̃, [M, K, p].
        eos: 1 on the completion's EOS token (none on a truncated one), [M, K].
    """

    logp: Any
    on: Any
    completion: Any
    column: Any
    ref: Any
    scores: Any
    eos: Any = None


def views(problem: SequenceProblem, names: tuple[str, ...]) -> dict[str, View]:
    """The named views of ``problem``'s enumeration, with their scores (float64 autograd).

    One forward pass of the float64 model gives log softmax(z) at every position of every
    completion, [M, P+T, V], and the lab's :meth:`SequenceProblem.jacobian` its Jacobian in θ;
    each view is a gather of the table and of its Jacobian.
    """
    import torch

    from eligibility.lab.sequence.model import PAD_LOGIT

    t = problem.table
    P, T = problem.prompts.shape[1], problem.max_completion_length
    prompt_ids = torch.as_tensor(problem.prompts[t.prompt])
    ids = torch.cat([prompt_ids, torch.as_tensor(t.completion_ids)], dim=1)  # [M, P + T]

    def log_softmax(model: Any) -> Any:  # the pad token V appended, as the model form's
        z = model(ids).logits
        z = torch.cat([z, torch.full_like(z[..., :1], PAD_LOGIT)], dim=-1)
        return torch.log_softmax(z, dim=-1)  # [M, P + T, V + 1]

    with torch.no_grad():
        out = log_softmax(problem.model64)
    jac = torch.as_tensor(problem.jacobian(log_softmax))  # [M, P + T, V, p]
    m = torch.as_tensor(t.mask)
    ref = torch.as_tensor(t.ref_token_logp)
    comp = torch.as_tensor(t.completion_ids)
    padded = torch.where(m > 0, comp, problem.vocab_size)  # the batch's pad id after the end
    eos = ((comp == problem.eos_token_id) & (m > 0)).to(m.dtype)

    def gather(positions: Any, targets: Any) -> tuple[Any, Any]:
        idx = targets[:, :, None]
        value = out[:, positions].gather(-1, idx).squeeze(-1)
        score = jac[:, positions].gather(2, idx[..., None].expand(-1, -1, 1, jac.shape[-1]))
        return value, score.squeeze(2)

    right = torch.arange(P - 1, P + T - 1)
    built: dict[str, View] = {}
    for name in names:
        column = torch.arange(T)
        if name == "no-shift":
            value, score = gather(right + 1, comp)
            on = m
        elif name == "prompt-in-loss":
            value, score = gather(torch.arange(P + T - 1), ids[:, 1:])
            on = torch.cat([torch.ones(len(m), P - 1, dtype=m.dtype), m], dim=1)
            column = torch.cat([torch.full((P - 1,), -1), column])
        elif name == "padding-in-loss":  # the pad token's log-prob after the end
            value, score = gather(right, padded)
            on = torch.ones_like(m)
        else:
            value, score = gather(right, comp)
            on = m
        completion = torch.cat([torch.zeros(len(m), on.shape[1] - T, dtype=m.dtype), m], 1)
        ref_cols = torch.cat([torch.zeros(len(m), on.shape[1] - T, dtype=m.dtype), ref], 1)
        eos_cols = torch.cat([torch.zeros(len(m), on.shape[1] - T, dtype=m.dtype), eos], 1)
        built[name] = View(
            logp=value * (on > 0),
            on=on,
            completion=completion,
            column=column,
            ref=ref_cols,
            scores=score,
            eos=eos_cols,
        )
    return built


__all__ = ["SAMPLER_VIEWS", "VIEWS", "View", "views"]
