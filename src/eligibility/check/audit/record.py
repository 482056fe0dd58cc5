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
    detached_on,
    from_logits,
    from_logps,
    layout,
)
from eligibility.check.audit.tap import Tap

AUDITED = 24
"""The batches whose every token's weight is read (a leak shows on one; the relations are
fitted across them)."""

COVERED = 4
"""The batches on which the part of ĝ the tap reads is held against ĝ (a second backward)."""

SUMMARY_KEY = "_audit"
"""The key of the summary that carries the :class:`Audit` to the engine."""

WRITTEN_KEY = "written_in_place"
"""The key of the problem's details that lists the batch's fields the loss wrote (the audit
read the batch as it was handed; the report says so)."""


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
    failed: str = ""
    written: set[str] = field(default_factory=set)
    """The batch's fields a call wrote (the audit read the batch as handed, and says so)."""

    def wants(self, k: int) -> bool:
        """Whether batch ``k`` is audited (its calls tapped)."""
        return k < self.limit

    def tap(self, k: int, model: Any = None, logps: Any = None, batch: Any = None) -> Tap:
        """The tap of batch ``k``'s calls, handed ``batch`` (copied: what the audit reads).

        What it covers is held against ĝ on the first :data:`COVERED` batches (a path the tap
        does not read is taken on every batch).
        """
        return Tap(model=model, logps=logps, cover=k < COVERED, batch=batch)

    def _handed(self, batch: Any, tap: Tap) -> Any:
        """The batch as it was handed to the call (before the loss could write to it)."""
        self.written.update(tap.written)
        if tap.unread and not self.failed:
            self.failed = tap.unread
        return batch if tap.held is None else tap.held

    def completions(self, calls: list[tuple[Any, Tap, float]], k: int, **facts: Any) -> None:
        """Batch ``k``'s single-completion calls: (its batch, its tap, its weight's factor).

        ``facts``: ``truncated`` [N] (the whole batch's rows), ``beta``, ``tau``.
        """
        parts = []
        for j, (given, tap, factor) in enumerate(calls):
            batch = self._handed(given, tap)
            mask = np.asarray(batch.completion_mask.detach().cpu())
            eos = np.asarray(batch.completion_ids.cpu()) == int(batch.eos_token_id)
            part: dict[str, Any] = {
                "unmatched": False,
                "ids": None,
                "uncovered": tap.uncovered,
                "ratio_read": tap.ratio_read,
            }
            if tap.logps is not None:
                w, part["ell"] = from_logps(tap, batch.completion_mask)
                P, part["entry"] = 1, np.zeros(w.shape, int)
                cut = tap.detached[0] if tap.detached else None
                part["detached"] = _on_grid(np.zeros(w.shape) if cut is None else cut, mask, 0)
            else:
                w, part["entry"], part["ell"], part["unmatched"] = from_logits(
                    tap, batch.input_ids, facts.get("tau", 1.0), batch.attention_mask
                )
                P, part["ids"] = batch.prompt_ids.shape[1], np.asarray(batch.input_ids.cpu())
                cut = detached_on(tap, batch.input_ids, batch.attention_mask)
                part["detached"] = np.zeros(w.shape) if cut is None else cut
            part["kind"], part["world_at"], part["turn"] = layout(P, mask)
            part["eos"] = _on_grid(eos & (mask > 0), mask, P - 1).astype(bool)
            part["w"] = w * factor * self.sign
            for key, x in (
                ("sampler", getattr(batch, "sampler_logps", None)),
                ("old", batch.old_logps),
            ):
                part[key] = part["ell"] if x is None else _on_grid(x, mask, P - 1)
            ref = getattr(batch, "ref_logps", None)  # the KL's reference, where β > 0
            part["ref"] = (
                None if ref is None or not facts.get("beta") else _on_grid(ref, mask, P - 1)
            )
            top = getattr(batch, "sampler_top_logps", None)
            part["sampler_top"] = None if top is None else _on_grid(top[..., 0], mask, P - 1)
            part["rewards"] = np.asarray(batch.rewards.detach().cpu(), dtype=np.float64)[:, None]
            part["part"] = np.full(len(w), j)
            parts.append(part)
        self.seen.append(_joined(parts, calls[0][0].group_size, facts, k))

    def episodes(self, batch: Any, tap: Tap, k: int, truncated: np.ndarray, beta: float) -> None:
        """Batch ``k``'s call of the episodes family (one call a batch)."""
        import torch

        batch = self._handed(batch, tap)
        ids = np.asarray(_ids(batch).cpu())
        real = torch.cat([torch.ones_like(batch.prompt_ids), (batch.turn >= 0).long()], 1)
        w, entry, ell, unmatched = from_logits(tap, _ids(batch), 1.0, real)
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
                unmatched=unmatched,
                uncovered=tap.uncovered,
                ids=ids,
                detached=detached_on(tap, _ids(batch), real),
            )
        )

    def summary(self) -> dict[str, Any]:
        """The audit of the recorded batches, under :data:`SUMMARY_KEY` (run in the worker)."""
        written = {WRITTEN_KEY: sorted(self.written)} if self.written else {}
        if self.failed:
            found = Audit(len(self.seen), covers=f"not audited ({self.failed})")
            return {SUMMARY_KEY: found, **written}
        try:
            found = audit(self.seen, self.scales)
        except Exception as err:  # the audit must never take the check down: it says why
            found = Audit(len(self.seen), covers=f"not audited ({type(err).__name__}: {err})")
        return {SUMMARY_KEY: found, **written}

    def record(self, lay_out: Any, *args: Any, **kwargs: Any) -> None:
        """Lay out a batch (:meth:`completions`, :meth:`episodes`), never failing the check.

        A batch the audit cannot read (a shape it does not know) leaves the audit saying why,
        and the check's verdict as it is.
        """
        if self.failed:
            return
        try:
            lay_out(*args, **kwargs)
        except Exception as err:
            self.failed = f"{type(err).__name__}: {err}"


def _ids(batch: Any) -> Any:
    import torch

    return torch.cat([batch.prompt_ids, batch.completion_ids], 1)


def _on_grid(x: Any, mask: np.ndarray, front: int) -> np.ndarray:
    """A [N, W] completion-grid array on the positions' grid (``front`` prompt columns first)."""
    a = np.asarray(x.detach().double().cpu()) if hasattr(x, "detach") else np.asarray(x)
    return np.pad(np.where(mask > 0, a, 0), ((0, 0), (front, 0)))


PADS = {
    "w": 0.0,
    "entry": -1,
    "kind": PADDING,
    "world_at": -1,
    "turn": -1,
    "eos": False,
    "ell": 0.0,
    "sampler": 0.0,
    "old": 0.0,
    "detached": False,
}
"""Each position field and the value of a position past a call's own width."""


def _joined(parts: list[dict[str, Any]], G: int, facts: dict[str, Any], k: int) -> Seen:
    """The calls of one batch (its rank shares and micro-batches) as one :class:`Seen`."""
    width = max(p["w"].shape[1] for p in parts)

    def joined(key: str, value: Any, extra: int = 0) -> np.ndarray:
        cols = [np.asarray(p[key]) for p in parts]
        return np.concatenate(
            [
                np.pad(a, ((0, 0), (0, width + extra - a.shape[1])), constant_values=value)
                for a in cols
            ]
        )

    fields = {key: joined(key, value) for key, value in PADS.items()}
    fields["detached"] = fields["detached"] > 0 if fields["detached"].any() else None
    n = len(fields["w"])
    return Seen(
        **fields,
        rewards=np.concatenate([p["rewards"] for p in parts]),
        group_size=G,
        truncated=np.asarray(facts.get("truncated", np.zeros(n, bool)), bool),
        part=np.concatenate([p["part"] for p in parts]),
        beta=float(facts.get("beta", 0.0)),
        unmatched=any(p["unmatched"] for p in parts),
        uncovered=max(p["uncovered"] for p in parts),
        ratio_read=all(p["ratio_read"] for p in parts),
        ids=None if parts[0]["ids"] is None else joined("ids", -1, 1),
        sampler_top=None if parts[0]["sampler_top"] is None else joined("sampler_top", 0.0),
        ref=None if any(p["ref"] is None for p in parts) else joined("ref", 0.0),
    )


__all__ = ["AUDITED", "COVERED", "SUMMARY_KEY", "WRITTEN_KEY", "Recorder"]
