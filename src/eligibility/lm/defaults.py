"""The defaults that depend on the model a run brings: one table, one resolver.

:data:`BY_MODEL` holds a column per kind of policy (the built-in tiny model from random
weights, a pretrained model, a pretrained model under LoRA); :func:`defaults` picks a run's
column and :func:`resolve` fills what a config left to it. The config, the command line and the
watches read the column here and nowhere else.
"""

from __future__ import annotations

import math
from typing import Any


def policy_kind(model: str, lora_r: int | None) -> str:
    """The column of :data:`BY_MODEL` a run's defaults come from."""
    if model == "tiny":
        return "tiny"
    return "pretrained" if lora_r is None else "pretrained, LoRA"


_PRETRAINED: dict[str, Any] = dict(
    lr=1e-5,
    group_size=8,
    prompts_per_batch=4,
    eval_every=10,
    checkpoint_every=25,
    max_kl=1.0,
    beta=0.0,  # TRL's: with 0.02 the first right samples of a sparse reward went unlearned
    dtype="auto",  # bf16 where the device computes it natively (lm.edge.device.native_bf16)
)
BY_MODEL: dict[str, dict[str, Any]] = {
    "tiny": dict(
        lr=1e-3,
        group_size=16,
        prompts_per_batch=8,
        eval_every=10,
        checkpoint_every=10,
        max_kl=math.inf,  # from random weights, moving far is the point
        beta=0.02,  # keeps the nearly uniform initial policy's exploration (docs/lm.md)
        dtype="float32",  # bf16's casts outweigh its products at 105 k parameters
    ),
    "pretrained": _PRETRAINED,
    "pretrained, LoRA": {**_PRETRAINED, "lr": 1e-3},  # only A, B move
}
"""The defaults that depend on the policy: the built-in tiny model (random weights, tuned on
the built-in tasks) or a pretrained one (``--model DIR``, a GGUF file or ``module:factory``),
whose weights already speak: 1e-3 drove SmolLM2-135M-Instruct 2.89 nats per token from itself
in two updates and its rewards to 0; 1e-5 kept it within 0.23 over 30. β = 0 for a pretrained
model (TRL's default): on the kit's tuning task ``capital`` with an exact-match reward, the same
first right sample (update 18, seed 0) was learned from without the KL (held-out exact match 0 →
0.26 by update 30) and not with β = 0.02 (0 throughout); docs/lm.md, *Defaults by model*.
``--dtype auto`` for a pretrained model (TRL's ``GRPOTrainer`` defaults to bf16 on any
hardware, ``bf16=True`` unless ``fp16``, TRL 1.16): on a CPU with AVX-512 BF16,
SmolLM2-135M-Instruct's update on ``antonym`` took 2.16 s under bf16 against 4.49 s in float32
(a probe of 4 updates), a wait's update on ``multiply`` (the sampling, a step) 1.59 s against 2.84 s
(1.69×), and whole runs ended alike (held-out exact match at update 30, two seeds: 0.76 / 0.47
in bf16, 0.82 / 0.35 in float32); ``float32`` on a device without native bf16, whose emulated
products cost more than float32's (not measured here), and for the tiny model, where casting
each weight for each product outweighs the bf16 arithmetic (docs/lm.md, *Sizes*). The values an
option resolves to are the run's: they are saved in config.json (``auto`` as the ``bfloat16``
or ``float32`` it chose) and shown in the logs.

A pretrained model with LoRA (``--lora-r``) takes the ``pretrained, LoRA`` column: Adam's rate
1e-3, the rest as without. Chosen on the kit's tuning tasks (``add``, ``date``, ``capital``,
seed 0, the partial-credit reward, 30 updates, r 16) by ``bench/lm_real_defaults.py``'s rule
among 1e-4, 3e-4, 1e-3 and 3e-3: no rate reached an exact match there, and 1e-3 had the best
mean held-out reward (0.36 at update 30, against 0.18 at 1e-4); 1e-5, the full fine-tune's,
moves adapters of this scale too little (docs/lm.md, *Defaults by model*)."""


def defaults(model: str, lora_r: int | None) -> dict[str, Any]:
    """The column of :data:`BY_MODEL` that a run of ``model`` (with LoRA or not) defaults to.

    The one resolver of the per-model defaults: the config, the command line (TRL's
    ``--gradient_accumulation_steps`` needs G before the config exists) and the watches
    (which name the default rate) all read the column here.
    """
    return BY_MODEL[policy_kind(model, lora_r)]


def resolve(config: Any) -> frozenset[str]:
    """Fill each setting left to ``None`` from the model's column (:func:`defaults`).

    Returns:
        The names that were left to a default (``with_changes`` resolves them anew when the
        column changes, say a LoRA config given from Python).
    """
    column = defaults(config.model, config.lora_r)
    defaulted = frozenset(n for n in ("kl", *column) if getattr(config, n) is None)
    if config.kl is None:
        config.kl = "reward-to-go"
    for name, value in column.items():
        if getattr(config, name) is None:
            setattr(config, name, value)
    return defaulted


__all__ = ["BY_MODEL", "defaults", "policy_kind", "resolve"]
