"""REINFORCE fine-tuning of causal language models on verifiable tasks.

``FinetuneConfig`` + ``finetune(config) -> FinetuneResult``, the same shape as
``eligibility.reinforce``'s ``Config`` + ``train``; ``eligibility finetune`` on the command
line. Importing this package imports torch (the config's option table holds torch formulas);
the command line imports it only for the commands that fine-tune or read a fine-tuning run.

>>> from eligibility.lm import FinetuneConfig, finetune
>>> config = FinetuneConfig("repeat", max_updates=2, eval_every=1, progress=False)
>>> result = finetune(config)  # out=None: nothing is written
>>> result.updates, len(result.history)
(2, 2)
"""

from __future__ import annotations

from typing import Any

from eligibility.lm.config import FinetuneConfig

__all__ = ["FinetuneConfig", "FinetuneResult", "finetune"]


def __getattr__(name: str) -> Any:
    if name in ("finetune", "FinetuneResult"):
        from eligibility.lm import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'eligibility.lm' has no attribute {name!r}")
