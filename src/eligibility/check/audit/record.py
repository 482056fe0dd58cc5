r"""The audit's side of a family's draw: the first batches' calls tapped and recorded.

A family's ``step(k)`` taps its calls (a :class:`~eligibility.check.audit.tap.Tap`) on the
first :data:`AUDITED` batches (:meth:`Recorder.wants`), calls the user's function through it
(the weights come from the call's own backward pass), and hands the tapped calls to
:meth:`Recorder.completions` or :meth:`Recorder.episodes`, which lay them out as a
:class:`~eligibility.check.audit.seen.Seen`.
:meth:`Recorder.summary` runs in the worker after the calls: the audit's findings, for the
report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eligibility.check.audit.judge import Audit, audit
from eligibility.check.audit.seen import (
    MODEL,
    PADDING,
    Seen,
    from_logits,
    from_logps,
    layout,
)
from eligibility.check.audit.tap import Tap

AUDITED = 24
"""The batches whose every token's weight is read (a leak shows on one; the relations are
fitted across them)."""

SUMMARY_KEY = "_audit"
"""The key of the summary that carries the :class:`Audit` to the engine."""


@dataclass
class Recorder:
    """The tapped calls of the first batches, and the audit of them.

    Attributes:
        scales: the constants the family knows by name (``named_scales``), for a constant.
        sign: +1 where the user's function returns an objective, −1 a loss.
        seen: the batches recorded.
        limit: how many batches to record.
    """

    scales: list[tuple[str, float]] = field(default_factory=list)
    sign: float = -1.0
    seen: list[Seen] = field(default_factory=list)
    limit: int = AUDITED

    def wants(self, k: int) -> bool:
        """Whether batch ``k`` is audited (its calls tapped)."""
        return k < self.limit

    def completions(self, calls: list[tuple[Any, Tap, float]], k: int, **facts: Any) -> None:
        """Batch ``k``'s single-completion calls: (its batch, its tap, its weight's factor).

        ``facts``: ``truncated`` [N] (the whole batch's rows), ``beta``, ``tau``.
        """
        parts = []
        for j, (batch, tap, factor) in enumerate(calls):
            mask = np.asarray(batch.completion_mask.detach().cpu())
            eos = np.asarray(batch.completion_ids.cpu()) == int(batch.eos_token_id)
            if tap.logps is not None:
                w, ell = from_logps(tap, batch.completion_mask)
                kind, world_at, turn = layout(1, mask)
                entry, ids, unmatched = np.zeros(w.shape, int), None, False
                eos_at = eos & (mask > 0)
            else:
                w, entry, ell, unmatched = from_logits(tap, batch.input_ids, facts.get("tau", 1.0))
                P = batch.prompt_ids.shape[1]
                kind, world_at, turn = layout(P, mask)
                ids = np.asarray(batch.input_ids.cpu())
                eos_at = np.concatenate([np.zeros((len(w), P - 1), bool), eos & (mask > 0)], 1)
            rewards = np.asarray(batch.rewards.detach().cpu(), dtype=np.float64)[:, None]
            parts.append(
                (
                    w * factor * self.sign,
                    entry,
                    kind,
                    world_at,
                    turn,
                    eos_at,
                    ell,
                    ids,
                    rewards,
                    unmatched,
                    j,
                )
            )
        self.seen.append(_joined(parts, calls[0][0].group_size, facts, k))

    def episodes(self, batch: Any, tap: Tap, k: int, truncated: np.ndarray, beta: float) -> None:
        """Batch ``k``'s call of the episodes family (one call a batch)."""
        ids = np.asarray(_ids(batch).cpu())
        w, entry, ell, unmatched = from_logits(tap, _ids(batch))
        P = batch.prompt_ids.shape[1]
        mask = np.asarray(batch.completion_mask.cpu())
        kind, world_at, turn = layout(P, mask, np.asarray(batch.turn.cpu()))
        eos = (ids[:, 1:] == int(batch.eos_id)) & (kind == MODEL)
        self.seen.append(
            Seen(
                w=w * self.sign,
                entry=entry,
                kind=kind,
                world_at=world_at,
                turn=turn,
                eos=eos,
                ell=ell,
                sampler=ell,
                rewards=np.asarray(batch.turn_rewards.cpu(), dtype=np.float64),
                group_size=int(batch.group_size),
                truncated=np.asarray(truncated, bool),
                part=np.zeros(len(w), int),
                beta=beta,
                index=k,
                unmatched=unmatched,
                ids=ids,
            )
        )

    def summary(self) -> dict[str, Any]:
        """The audit of the recorded batches, under :data:`SUMMARY_KEY` (run in the worker)."""
        try:
            found = audit(self.seen, self.scales)
        except Exception as err:  # the audit must never take the check down: it says why
            found = Audit(len(self.seen), covers=f"not audited ({type(err).__name__}: {err})")
        return {SUMMARY_KEY: found}


def _ids(batch: Any) -> Any:
    import torch

    return torch.cat([batch.prompt_ids, batch.completion_ids], 1)


def _joined(parts: list[tuple[Any, ...]], G: int, facts: dict[str, Any], k: int) -> Seen:
    """The calls of one batch (its rank shares and micro-batches) as one :class:`Seen`."""
    width = max(p[0].shape[1] for p in parts)

    def pad(a: np.ndarray, value: Any) -> np.ndarray:
        return np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=value)

    cols = list(zip(*parts, strict=True))
    ids = None
    if cols[7][0] is not None:
        ids = np.concatenate(
            [np.pad(a, ((0, 0), (0, width + 1 - a.shape[1])), constant_values=-1) for a in cols[7]]
        )
    w = np.concatenate([pad(a, 0.0) for a in cols[0]])
    return Seen(
        w=w,
        entry=np.concatenate([pad(a, -1) for a in cols[1]]),
        kind=np.concatenate([pad(a, PADDING) for a in cols[2]]),
        world_at=np.concatenate([pad(a, -1) for a in cols[3]]),
        turn=np.concatenate([pad(a, -1) for a in cols[4]]),
        eos=np.concatenate([pad(a, False) for a in cols[5]]),
        ell=np.concatenate([pad(a, 0.0) for a in cols[6]]),
        sampler=np.concatenate([pad(a, 0.0) for a in cols[6]]),
        rewards=np.concatenate(cols[8]),
        group_size=G,
        truncated=np.asarray(facts.get("truncated", np.zeros(len(w), bool)), bool),
        part=np.concatenate([np.full(len(a), j) for a, j in zip(cols[0], cols[10], strict=True)]),
        beta=float(facts.get("beta", 0.0)),
        index=k,
        unmatched=any(cols[9]),
        ids=ids,
    )


__all__ = ["AUDITED", "SUMMARY_KEY", "Recorder"]
