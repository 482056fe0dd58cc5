"""How the sequence check hands a batch to your function: ranks, micro-batches, advantages.

A batch is shared among R ranks (``--world-size``) and each share split into M micro-batches
(``--micro-batches``), consecutive rows; where your own function computes the advantages
(``--advantages``), it is called once on the whole batch and each call's batch carries its
slice (``batch.advantages``), so a micro-batch may split a group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from eligibility.check import user

if TYPE_CHECKING:
    from eligibility.lab.sequence.problem import SequenceProblem


def with_advantages(
    problem: SequenceProblem,
    advantages: Callable[..., Any] | None,
    rows: np.ndarray,
    tau: float,
    name: str = "--advantages",
) -> Any:
    """The whole batch's advantages by the user's ``advantages(batch)``, or None without one.

    Computed once on the whole batch (as a generation worker does), then sliced for each
    share and micro-batch, so that a micro-batch may split a group. What goes wrong is said
    as the advantages function's (``name``, its ``FILE.py:FUNCTION``), not the loss's.

    Raises:
        UserError: the advantages function raised (named).
        ValueError: a result that is not a finite tensor of one value per completion.
    """
    import torch

    if advantages is None:
        return None
    batch = batch_of(problem, rows, tau)
    where = f"the --advantages function {name}"
    try:
        with torch.no_grad():
            a = advantages(batch)
    except Exception as err:
        said = f"{type(err).__name__}: {err}".rstrip(": ")
        raise user.UserError(f"{where} raised {said}\n{user.user_error(err).text}") from None
    if not isinstance(a, torch.Tensor) or a.shape != batch.rewards.shape:
        raise ValueError(
            f"{where} must return a tensor of shape {tuple(batch.rewards.shape)} (one "
            f"per completion), got {getattr(a, 'shape', type(a).__name__)}"
        )
    if not torch.isfinite(a).all():
        raise ValueError(f"{where} returned a value that is not finite")
    return a.detach().to(torch.float32)


def batch_of(problem: SequenceProblem, rows: np.ndarray, tau: float, advantages: Any = None) -> Any:
    """The contract's batch of ``rows`` at τ, with their advantages (``batch.advantages``).

    The advantages are the user's, where they compute them (None otherwise).
    """
    from eligibility.lab.sequence.problem import Draw as Rows

    G = problem.group_size
    batch = problem.batch(Rows(prompts=problem.table.prompt[rows[::G]], rows=rows, group_size=G))
    return replace(batch, temperature=tau, advantages=advantages)


def batch_note(report: Any) -> str:
    """What one call of the user's function is handed (the report's note)."""
    M, R = report.micro_batches, report.world_size
    parts = []
    if R > 1:
        parts.append(f"each batch in {R} ranks' shares, gradients averaged (as DDP)")
    if M > 1:
        whole = "each share" if R > 1 else "each batch"
        parts.append(f"{whole} in {M} micro-batches, a call each, gradients summed")
    if not parts:
        parts.append("one group-major batch per call")
    if report.advantages:
        parts.append(f"advantages from {report.advantages} on the whole batch")
    return "; ".join(parts)


__all__ = ["batch_note", "batch_of", "with_advantages"]
