"""The loss ``finetune --max-staleness k`` steps on, in ``eligibility check``'s contract.

``fn(logps, batch)``: the first step's loss of ``lm.objective`` (RLOO, a sum over each
sequence's tokens, no KL: finetune's defaults), each token's term weighted by
``--importance-sampling MODE`` at C = 2 against the sampler's log-probs ``batch.sampler_logps``
(μ: the stale policy that drew the batch). One function per mode, by its name with ``_`` for
``-``; ``none`` is the uncorrected loss.
"""

from __future__ import annotations

import functools

from eligibility.lm import objective

CAP = 2.0
"""C of every mode here (IcePop's band is [1/2, 2])."""

MODES = ("none", "exact", "token-truncate", "token-icepop", "geometric-mask", "sequence-mask",
         "sequence-truncate")  # fmt: skip


def _loss(logps, batch, mode):
    value, _ = objective.loss(
        logps,
        batch.rewards.to(logps.dtype),
        batch.completion_mask > 0,
        group_size=batch.group_size,
        baseline="rloo",
        scale="none",
        aggregation="sequence-sum",
        max_completion_length=batch.max_completion_length,
        kl="none",
        beta=0.0,
        ref_logps=None,
        importance_sampling=mode,
        importance_sampling_cap=CAP,
        sampler_logps=batch.sampler_logps.to(logps.dtype),
    )
    return value


for _mode in MODES:
    globals()[_mode.replace("-", "_")] = functools.partial(_loss, mode=_mode)
