r"""The weights a run ends with, judged before they become its result; the last sound ones kept.

The wreck guard (:mod:`eligibility.lm.watches`) reads each update's metrics row, and update u's
batch is drawn from θᵤ₋₁, the weights before its step: the weights an update leaves are judged
by the next update's batch. The weights a run ends with, θ_N, have no next update, so when the
run ends (its budget, its target, a stop asked, a signal) they are looked at: w batches drawn
from θ_N as the next update would draw them (:func:`looks`; w = ``ENTROPY_WINDOW``, the guard's
own window), each measured as a row is, and the guard's rule judged on the rows with the looks
after them (:func:`~eligibility.lm.watches.wreck_at_the_end`). The looks are what two more
updates at a rate of 0 would have drawn, so they raise an alarm no more often than the guard does
on any two updates of a run; and where the final update's step wrecked the policy, both looks
are drawn from the wreck and the guard's two-in-a-row rule sees it, at any budget (one update
included). With the guard off (``--max-kl inf``: only a non-finite value counts) nothing is
looked at: a finite gradient's step leaves finite weights, Adam moving each by at most a few
times the rate.

A wreck is then a stop like any other: its update checkpointed for ``--resume``, and the run's
result (``model/``) the weights of the last update the guard judged sound, which
:class:`SoundWeights` keeps: a batch that raises no alarm on its own
(:func:`~eligibility.lm.watches.alarmed`) says the weights it was drawn from were sound, and they
are the kept ones from then on. Keeping them costs a copy of the trained tensors per update (the
adapters alone under LoRA) and two such copies in host memory; a run keeps them only where the
guard is on (``--max-kl`` finite) and the run has a directory to write them to, and a sharded
policy keeps none (no rank holds its whole weights).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from eligibility.lm.policy import Policy
from eligibility.lm.rollout import Run
from eligibility.lm.update import settings
from eligibility.lm.watches import ENTROPY_WINDOW

LOOK_STREAM = 4
"""The seed stream of the looks' draws (``SeedSequence(--seed, spawn_key=(4, N, k))``): apart
from the run's draws (streams 0 and 1), the defaults' measurement (2) and the epochs' shuffles
(3), so that looking never changes what the run draws, nor what its resume draws."""


def looks(run: Run, n: int = ENTROPY_WINDOW) -> list[dict[str, Any]]:
    """``n`` batches drawn from the weights now, each measured as an update's row is.

    The prompts are those update N + 1 would draw (N the updates made), the samples each from a
    stream of its own (:data:`LOOK_STREAM`), the same on every rank. A row holds what the guard
    reads of a batch: ``update`` (N), ``mean_reward``, ``min_reward``, ``accuracy``,
    ``mean_length``, ``entropy`` −(1/T) Σₜ ln π(oₜ) over the T sampled tokens (the sampler's
    log-probabilities, as an update without a scoring pass logs it) and ``kl``, k1 to the
    reference where the run keeps one (None: none).
    """
    c, config = run.counters, run.config
    out = []
    for k in range(n):
        stream = np.random.SeedSequence(config.seed, spawn_key=(LOOK_STREAM, c["updates"], k))
        rng = np.random.default_rng(stream)
        with torch.no_grad():
            _, batch, rewards, scorable = run.rollout.draw(run, rng, rng)
            mask = batch.completion_mask.bool()
            n_tokens = mask.sum().clamp(min=1)
            logps = batch.logps
            ref = settings(run, batch, scorable).ref_logps
        kl = None if ref is None else float(((logps - ref) * mask).sum() / n_tokens)
        correct = run.rollout.successes(batch, rewards)
        out.append(
            {
                "update": c["updates"],
                "mean_reward": float(rewards.mean()),
                "min_reward": float(rewards.min()),
                "accuracy": float(correct.float().mean()),
                "mean_length": float(batch.lengths.float().mean()),
                "entropy": float(-(logps * mask).sum() / n_tokens),
                "kl": kl,
            }
        )
    return out


class SoundWeights:
    """The trained tensors of the last weights the guard judged sound, kept in host memory.

    Two buffers: the weights now (``pending``, the update that made them) and the last sound
    ones (``kept``). After each update's row, :meth:`step` is told whether that row raised an
    alarm: if not, the weights it was drawn from (the pending ones) become the kept ones, and
    the weights now are copied into the other buffer. A resumed run keeps from its resume on.

    Args:
        policy: the run's policy (a sharded one keeps nothing: ``enabled`` is then False).
        update: the updates made before this run's first (0, or the resumed checkpoint's).
        enabled: whether to keep (the trainer's: the guard on, a directory to write to).
    """

    def __init__(self, policy: Policy, update: int, enabled: bool = True) -> None:
        self.policy = policy
        self.enabled = enabled and not policy.sharded
        self.start = update
        self.kept: tuple[dict[str, torch.Tensor], int] | None = None
        self.pending: tuple[dict[str, torch.Tensor], int] | None = None
        if self.enabled:
            self.pending = (self._copied(None), update)

    def _copied(self, into: dict[str, torch.Tensor] | None) -> dict[str, torch.Tensor]:
        now = self.policy.trained_state()
        if into is None:
            return {k: v.detach().to("cpu", copy=True) for k, v in now.items()}
        for k, v in now.items():
            into[k].copy_(v.detach())
        return into

    def step(self, alarm: bool, update: int) -> None:
        """After update ``update``'s row: its batch's weights kept if it raised no alarm."""
        if self.pending is None:
            return
        buffer = self.pending[0]
        if not alarm:  # the batch drawn from the pending weights was sound
            buffer, self.kept = (None if self.kept is None else self.kept[0]), self.pending
        self.pending = (self._copied(buffer), update)

    @property
    def kept_update(self) -> int | None:
        """The update whose weights are kept (0: the initial ones; None: none)."""
        return None if self.kept is None else self.kept[1]

    def restore(self) -> int | None:
        """The kept weights loaded into the policy; the update they are (None: none kept)."""
        if self.kept is None:
            return None
        self.policy.load_trained_state(self.kept[0])
        return self.kept[1]


__all__ = ["LOOK_STREAM", "SoundWeights", "looks"]
