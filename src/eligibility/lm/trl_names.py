"""TRL's names for ``finetune``'s settings: the flags a TRL user already types.

``--learning_rate``, ``--num_generations``, ``--max_steps``, ``--gradient_accumulation_steps``
and the rest, each with the setting it sets and what the value means here; the command line
and ``--config recipe.yaml`` read them from this one table.
"""

from __future__ import annotations

from eligibility._output import quoted
from eligibility.lm.importance import MODES

TRL_ALIASES: dict[str, tuple[str, dict[str, str] | None, str]] = {
    "num_generations": ("group_size", None, ""),
    "learning_rate": (
        "lr",
        None,
        "Adam at a constant rate here; TRL's AdamW (weight decay 0) decays it linearly to 0",
    ),
    "max_steps": (
        "max_updates",
        None,
        "TRL's optimiser steps: each update is one generation batch and its K optimiser steps "
        "(--epochs-per-batch K, TRL's num_iterations), so N steps are N/K updates",
    ),
    "num_iterations": ("epochs_per_batch", None, ""),
    "save_steps": ("checkpoint_every", None, ""),
    "scale_rewards": (
        "scale",
        {
            "group": "group-std",
            "batch": "batch-std",
            "none": "none",
            "true": "group-std",
            "false": "none",
        },
        "",
    ),
    "loss_type": (
        "aggregation",
        {
            "grpo": "sequence-mean",
            "dr_grpo": "constant",
            "dapo": "token-mean",
            "bnpo": "token-mean",
        },
        "the aggregation only: on-policy TRL's clipped ratio is 1, so its gradient is ours",
    ),
    "bf16": (
        "dtype",
        {"true": "bfloat16", "false": "float32"},
        "autocast: bf16 products, float32 weights and Adam state (TRL: mixed precision too)",
    ),
    "per_device_train_batch_size": (
        "micro_batch_size",
        None,
        "the sequences scored and backpropagated at once; the update is still one per batch "
        "of --prompts-per-batch × G, its gradient the whole batch's",
    ),
    "gradient_accumulation_steps": (
        "prompts_per_batch",
        None,
        "TRL's batch of per_device_train_batch_size × gradient_accumulation_steps "
        "completions is --prompts-per-batch of them ÷ G; one update per batch",
    ),
    "vllm_importance_sampling_mode": (
        "importance_sampling",
        {row[2]: ours for ours, row in MODES.items() if row is not None and row[2]},
        "the full policy trained on finetune's own sampler, weighted so; TRL weights its vLLM "
        "sampler's completions only (use_vllm, with vllm_importance_sampling_correction)",
    ),
    "vllm_importance_sampling_clip_max": ("importance_sampling_cap", None, ""),
    "vllm_importance_sampling_correction": (
        "importance_sampling",
        {"true": "", "false": "none"},
        "TRL weights its vLLM sampler's completions only: true sets nothing here "
        "(vllm_importance_sampling_mode does)",
    ),
    "top_p": ("top_p", None, ""),
    "top_k": ("top_k", None, ""),
    "min_p": ("min_p", None, ""),
    "repetition_penalty": ("repetition_penalty", None, ""),
    "use_vllm": (
        None,
        {"false": ""},
        "finetune samples with its own sampler, as TRL does without vLLM",
    ),
    "lr_scheduler_type": (
        None,
        {"constant": ""},
        "Adam's rate is constant here; TRL's default schedule is linear",
    ),
    "num_train_epochs": (
        None,
        None,
        "TRL's passes over the prompts, which its max_steps overrides: taken beside "
        "max_steps or --max-updates only, which count the run here",
    ),
}
"""TRL's GRPOConfig names → (our field, TRL value → ours, a note where not one to one).

A row with no field of ours sets nothing: its note says why, and its values (where given) are
the only ones taken. A value mapped to ``""`` sets nothing either.
"""

NEEDS_STEPS = "num_train_epochs"
"""The TRL name taken only beside ``max_steps`` (or ``--max-updates``), which overrides it."""


def trl_batch(accumulation: int, micro_batch_size: int | None, group_size: int) -> int:
    """``--prompts-per-batch`` of TRL's ``gradient_accumulation_steps`` K: M · K / G.

    Raises:
        ValueError: no ``per_device_train_batch_size`` M given, or M · K not a multiple of G.
    """
    if micro_batch_size is None:
        raise ValueError(
            "--gradient_accumulation_steps needs --per_device_train_batch_size (TRL's batch is "
            "their product), or give --prompts-per-batch"
        )
    completions = micro_batch_size * accumulation
    if accumulation < 1 or completions % group_size:
        raise ValueError(
            f"--gradient_accumulation_steps {accumulation}: TRL's batch of {completions} "
            f"completions is not a whole number of groups of G = {group_size}"
        )
    return completions // group_size


def from_trl(name: str, value: str) -> tuple[str | None, str, str]:
    """(our field, our value, note) for TRL option ``name`` given ``value``.

    The field is None, or the value ``""``, where the option sets nothing here (the note says
    why). ``True``/``False`` read as ``true``/``false``, as TRL's parser reads them.

    Raises:
        ValueError: an unknown name, or a value the mapping has no row for.
    """
    key = name.lstrip("-").replace("-", "_")
    if key not in TRL_ALIASES:
        raise ValueError(f"--{key} is not a TRL option finetune knows ({', '.join(TRL_ALIASES)})")
    field_name, values, note = TRL_ALIASES[key]
    if values is None:
        return field_name, value, note
    text = value.lower() if value in ("True", "False") else value
    if text not in values:
        why = f" ({note})" if field_name is None else ""
        raise ValueError(f"--{key} {quoted(value)}: TRL's values here are {', '.join(values)}{why}")
    return field_name, values[text], note
