"""The defaults that depend on the model a run brings: one table, one resolver, one rule.

:data:`BY_MODEL` holds a column per kind of policy (a model from random weights, the built-in
tiny one or a directory never trained; a pretrained model; a pretrained model under LoRA);
:func:`defaults` picks a run's column and :func:`resolve` fills what a config left to it. The
config, the command line and the watches read the column here and nowhere else.

Which column a model directory takes is measured, not assumed from how it was passed
(``--defaults auto``): :func:`measured_column` reads the entropy of the model's own samples on the
run's prompts, which an untrained model's near-uniform next-token distribution keeps near
ln V (``lm.measure`` measures it once, at load, and keeps it; the run saves it).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

CHOICES = ("auto", "pretrained", "scratch")
"""``--defaults``: measured at load (``auto``), or the column named."""


def policy_kind(model: str, lora_r: int | None, choice: str = "auto") -> str:
    """The column of :data:`BY_MODEL` a run's defaults come from.

    ``choice``: ``scratch`` or ``pretrained`` (``--defaults``, or what ``auto`` measured); for
    ``auto`` before the measurement, the built-in tiny model is ``scratch`` and any other model
    ``pretrained`` (the set-up measures it, ``lm.measure``, and resolves the column anew,
    ``lm.build``).
    """
    if choice == "scratch" or (choice == "auto" and model == "tiny"):
        return "scratch"
    return "pretrained" if lora_r is None else "pretrained, LoRA"


_PRETRAINED: dict[str, Any] = dict(
    lr=1e-5,
    group_size=8,
    prompts_per_batch=4,
    eval_every=10,
    checkpoint_every=25,
    max_kl=1.0,
    beta=0.0,  # TRL's: with 0.02 the first right samples of a sparse reward went unlearned
    epochs_per_batch=2,  # a second, off-policy step on each batch that has a signal
    dtype="auto",  # bf16 where the device computes it natively (lm.edge.device.native_bf16)
)
BY_MODEL: dict[str, dict[str, Any]] = {
    "scratch": dict(
        lr=1e-3,
        group_size=16,
        prompts_per_batch=8,
        eval_every=10,
        checkpoint_every=10,
        max_kl=math.inf,  # from random weights, moving far is the point
        beta=0.02,  # keeps the nearly uniform initial policy's exploration (docs/lm.md)
        epochs_per_batch=1,
        dtype="float32",  # bf16's casts outweigh its products at 105 k parameters
    ),
    "pretrained": _PRETRAINED,
    "pretrained, LoRA": {**_PRETRAINED, "lr": 1e-3, "epochs_per_batch": 1},  # only A, B move
}
"""The defaults that depend on the policy: a model from random weights (the built-in tiny one,
tuned on the built-in tasks, or a directory never trained: the ``scratch`` column) or a
pretrained one (``--model DIR``, a GGUF file or ``module:factory``), whose weights already
speak: 1e-3 drove SmolLM2-135M-Instruct 2.89 nats per token from itself
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
or ``float32`` it chose) and shown in the logs. A bf16 run's update is weighted by
default against its sampler's rounding (``--importance-sampling auto``, ``lm.importance``:
TRL's own default correction), so the choice of bf16 here asks for no warning.

Two optimiser steps on each batch (``--epochs-per-batch 2``) for a full pretrained fine-tune:
the second is off-policy, weighted by the sequence's importance ratio (unbiased), and scores
only the rows whose advantage is not 0, so a sparse reward's batch of no signal costs nothing
more. On the sparse kit tasks' tuning seeds (``json`` 51–55, ``antonym`` 46, 48, 50) it reached
the target in fewer updates and less time than one step on every seed (docs/lm.md, *Defaults
by model*); one step from scratch (the built-in tasks' tuning) and under LoRA (not measured).

A pretrained model with LoRA (``--lora-r``) takes the ``pretrained, LoRA`` column: Adam's rate
1e-3, the rest as without. Chosen on the kit's tuning tasks (``add``, ``date``, ``capital``,
seed 0, the partial-credit reward, 30 updates, r 16) by ``bench/lm/lm_real_defaults.py``'s rule
among 1e-4, 3e-4, 1e-3 and 3e-3: no rate reached an exact match there, and 1e-3 had the best
mean held-out reward (0.36 at update 30, against 0.18 at 1e-4); 1e-5, the full fine-tune's,
moves adapters of this scale too little (docs/lm.md, *Defaults by model*)."""


def defaults(model: str, lora_r: int | None, choice: str = "auto") -> dict[str, Any]:
    """The column of :data:`BY_MODEL` that a run of ``model`` (with LoRA or not) defaults to.

    The one resolver of the per-model defaults: the config, the command line (TRL's
    ``--gradient_accumulation_steps`` needs G before the config exists) and the watches
    (which name the default rate) all read the column here. ``choice``: ``--defaults``.
    """
    return BY_MODEL[policy_kind(model, lora_r, choice)]


def resolve(config: Any) -> frozenset[str]:
    """Fill each setting left to ``None`` from the model's column (:func:`defaults`).

    Returns:
        The names that were left to a default (``with_changes`` resolves them anew when the
        column changes: a LoRA config given from Python, the column measured at load).
    """
    defaulted = set()
    if config.defaults == "auto" and config.model == "tiny":  # random weights: nothing to measure
        config.defaults, defaulted = "scratch", {"defaults"}
    column = defaults(config.model, config.lora_r, config.defaults)
    defaulted |= {n for n in ("kl", *column) if getattr(config, n) is None}
    if config.kl is None:
        config.kl = "reward-to-go"
    for name, value in column.items():
        if getattr(config, name) is None:
            setattr(config, name, value)
    return frozenset(defaulted)


def still_defaulted(config: Any, carried: Iterable[str]) -> frozenset[str]:
    """The names in ``carried`` whose value is still the one the model's column gives.

    A copy made with ``dataclasses.replace`` carries the ``defaulted`` list of the config it
    copied; a setting it changed is the user's now, not the table's. A column's ``dtype
    auto`` stays the table's once the run has resolved it on its device (``bfloat16`` or
    ``float32``, saved with the run).

    Args:
        config: the resolved config.
        carried: the names the copy carried (a ValueError names one that is not a setting).
    """
    names = frozenset(str(n) for n in carried)
    if isinstance(carried, str) or names - {f.name for f in dataclasses.fields(config)}:
        raise ValueError(f"defaulted must be names of settings, got {carried!r}")
    column = defaults(config.model, config.lora_r, config.defaults)
    table = {
        **column,
        "kl": "reward-to-go",
        "defaults": "scratch" if config.model == "tiny" else None,
    }

    def kept(name: str) -> bool:
        if name == "dtype" and column["dtype"] == "auto":  # resolved where the run starts
            return True
        return getattr(config, name) == table[name]

    return frozenset(n for n in names if n in table and kept(n))


UNTRAINED = 0.9
"""ρ: a model whose samples' entropy is at least ρ ln V looks untrained (:func:`measured_column`).

Measured with ``bench/lm/lm_untrained.py`` (docs/defaults.md): random-init models of nine families
at a toy size and at real models' head shapes (widths 64 to 4096, V 64 to 262 k) gave 0.91 to
1.00 ln V, the widest lowest (0.91 at Llama-2-7B's 4096 × 32 k: a logit's spread grows as
√width); toy models trained by cross-entropy 0.64 ln V or below after 30 steps (0.83 after 10
on bytes), 0.53 or below after 100. ρ sits at the random side's edge because the two mistakes
cost unlike amounts: a trained model called untrained gets lr 1e-3 and no drift watch (1e-3
drove SmolLM2-135M-Instruct 2.89 nats a token from itself in two updates), a random one called
trained learns about a hundred times slower, and the run's first line says which it took."""


def measured_column(entropy: float, vocab_size: int) -> str:
    """The column a measured model takes: ``scratch`` when Ĥ ≥ ρ ln V, else ``pretrained``.

        Ĥ = −(1/n) Σₜ ln π(oₜ | q, o<ₜ),   oₜ ~ π   (the model's own samples, τ = 1)

    estimates the mean entropy of its next-token distributions along its samples, at most
    ln V (uniform over the V tokens it samples from). A model never trained puts nearly equal
    mass on every token (Ĥ near ln V); one trained puts most on a few (``UNTRAINED``: ρ).

    Args:
        entropy: Ĥ, nats per token.
        vocab_size: V.
    """
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2 for an entropy to tell, got {vocab_size}")
    return "scratch" if entropy >= UNTRAINED * math.log(vocab_size) else "pretrained"


_SHOWN = (
    ("lr", "lr {:g}"),
    ("group_size", "G {}"),
    ("prompts_per_batch", "{} prompts a batch"),
    ("beta", "β {:g}"),
    ("epochs_per_batch", "epochs per batch {}"),
    ("max_kl", "max KL {:g}"),
    ("dtype", "{}"),
)
"""The settings the line names where they came from the column, as it writes them."""


def column_line(config: Any) -> str:
    """The line a run starts with: which column, why, and the settings it gave.

    ``config``: a resolved ``FinetuneConfig`` (its ``defaults`` concrete, ``model_entropy``
    what ``auto`` measured, empty when it did not measure).
    """
    kind = policy_kind(config.model, config.lora_r, config.defaults)
    column = {"scratch": "from-scratch defaults", "pretrained": "pretrained defaults"}
    name = column.get(kind, "pretrained defaults with LoRA")
    m = config.model_entropy
    if m:
        looks = "untrained" if config.defaults == "scratch" else "trained"
        why = (
            f"model looks {looks} (entropy {m['entropy']:.2f} of ln V = {m['ln_v']:.2f} nats a "
            f"token on its own samples; untrained from {UNTRAINED:g} ln V)"
        )
        other = "pretrained" if config.defaults == "scratch" else "scratch"
        hint = f"; --defaults {other} for the other column"
    elif "defaults" in config.defaulted:
        why, hint = "the built-in tiny model (random weights)", ""
    else:
        why, hint = f"--defaults {config.defaults}", ""
    shown = [
        f.format(getattr(config, n)).replace("e-0", "e-")  # 1e-05 as 1e-5
        for n, f in _SHOWN
        if n in config.defaulted
    ]
    settings = ", ".join(shown) if shown else "every one of its settings given"
    return f"{why}: {name}, {settings}{hint}"


__all__ = [
    "BY_MODEL",
    "CHOICES",
    "UNTRAINED",
    "column_line",
    "defaults",
    "measured_column",
    "policy_kind",
    "resolve",
    "still_defaulted",
]
