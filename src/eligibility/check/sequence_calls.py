"""How the sequence check hands a batch to your function: ranks, micro-batches, advantages.

A batch is shared among R ranks (``--world-size``) and each share split into M micro-batches
(``--micro-batches``), consecutive rows; where your own function computes the advantages
(``--advantages``), it is called once on the whole batch and each call's batch carries its
slice (``batch.advantages``), so a micro-batch may split a group.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from eligibility.check import user
from eligibility.check.audit import Recorder
from eligibility.check.audit.tap import Tap

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


@dataclass
class Calls:
    """The user's function on the batches of one draw, in the worker: ĝ of batch k (:meth:`step`).

    Attributes:
        fn: the user's function.
        config: the check's settings (the form, τ, M micro-batches, R ranks, ``advantages``).
        checked: the problem the batches are drawn from (at τ).
        rows: the enumeration rows of each batch, [n, N].
        advantages: the user's advantage function, or None.
        model: the model the model and step forms get (None in the logps form).
        params: θ's parameters, reset to ``theta`` before each call.
        theta: their values.
        record: what the step form's step did (None in the other forms).
        recorder: the credit audit's taps (its ``sign``: +1 an objective, −1 a loss).
    """

    fn: Callable[..., Any]
    config: Any
    checked: SequenceProblem
    rows: np.ndarray
    advantages: Callable[..., Any] | None
    model: Any
    params: list[Any]
    theta: list[Any]
    record: Any
    recorder: Recorder

    def call(self, batch: Any, audited: bool, k: int) -> tuple[np.ndarray | None, Tap | None]:
        """ĝ of one call (a micro-batch of one rank's share of batch k), and its tap.

        The logps form's ĝ is ∇_θ = ∇_{θ/τ} / τ (it gets the tempered model's log-probs); the
        model form scores θ's own model.
        """
        from eligibility.check.step import stepped

        user.reset_policy(self.params, self.theta)
        form = self.config.form
        if form == "step":
            return stepped(self.fn, self.model, batch, self.params, self.theta, self.record), None
        tap_of = functools.partial(self.recorder.tap, k) if audited else None
        g, tap = user.call_in_form(
            self.fn,
            form,
            self.model,
            self.checked.on_policy,
            batch,
            self.params,
            self.recorder.sign,
            self.theta,
            tap_of,
        )
        if form == "model":
            return g, tap
        return (None if g is None else g * (1.0 / self.config.temperature)), tap

    def step(self, k: int) -> np.ndarray | None:
        """ĝ of batch k: (1/R) Σ over R ranks' shares of Σ over M micro-batches.

        Consecutive rows; DDP averages the ranks' gradients, accumulation sums. The first
        batches' calls are tapped for the credit audit (not in the step form).
        """
        config, checked, rows = self.config, self.checked, self.rows
        tau, R, M = config.temperature, config.world_size, config.micro_batches
        a = with_advantages(checked, self.advantages, rows[k], tau, str(config.advantages))
        audited = self.recorder.wants(k) and config.form != "step"
        batches = [
            batch_of(checked, rows[k][i], tau, None if a is None else a[i])
            for i in np.split(np.arange(rows.shape[1]), R * M)
        ]
        parts = [self.call(b, audited, k) for b in batches]
        if audited:
            calls = [(b, tap, 1.0 / R) for b, (_, tap) in zip(batches, parts, strict=True)]
            truncated = checked.table.truncated[rows[k]]
            self.recorder.record(
                self.recorder.completions, calls, k, truncated=truncated, beta=checked.beta, tau=tau
            )
        if any(g is None for g, _ in parts):
            return None
        return np.sum([g for g, _ in parts], axis=0) / R

    def setup(self, seed: int) -> None:
        """Run once in the worker: torch's seed; in the step form, what ``clip_grad_norm_`` does."""
        import torch

        torch.manual_seed(seed)
        if self.record is not None:
            self.record.watch()

    def summary(self) -> dict[str, Any]:
        """What the step did (the step form) and the credit audit, for the problem's details."""
        return {
            **(self.record.summary() if self.record is not None else {}),
            **self.recorder.summary(),
        }


__all__ = ["Calls", "batch_note", "batch_of", "with_advantages"]
