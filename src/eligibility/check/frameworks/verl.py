r"""verl's advantage and PPO loss, called unchanged on the check's batches.

The configuration holds verl's own two sections, nested as in its YAML
(``verl/trainer/config/ppo_trainer.yaml``)::

    algorithm: {adv_estimator: grpo, norm_adv_by_std_in_grpo: true, use_kl_in_reward: false,
                kl_penalty: kl, kl_ctrl: {type: fixed, kl_coef: 0.001}}
    actor: {loss_agg_mode: token-mean, use_kl_loss: true, kl_loss_coef: 0.001,
            kl_loss_type: low_var_kl, clip_ratio: 0.2, policy_loss: {loss_mode: vanilla}}

verl's defaults fill every key left out. On each batch the loss is what verl's trainer computes:

1. the token-level scores, the outcome R on each completion's last real token;
2. with ``algorithm.use_kl_in_reward``, rₜ = scoreₜ − β·klₜ with klₜ from verl's
   ``core_algos.kl_penalty`` on the rollout's log-probs (the three lines of
   ``ray_trainer.apply_kl_penalty``, whose module needs ``torchdata`` and ray to import);
3. the advantages from ``core_algos.get_adv_estimator_fn(adv_estimator)`` with the arguments
   ``ray_trainer.compute_advantage`` passes (the group index is ``batch.group_ids``);
4. the loss from ``verl.workers.utils.losses.ppo_loss`` itself: the policy loss of
   ``actor.policy_loss.loss_mode``, aggregated by ``loss_agg_mode``, plus the KL loss. Its
   log-probs arrive packed as verl's engines pack them (prompt and response of each sequence
   back to back), so its own unpadding runs too.

In the off-policy family (``--off-policy``: θ away from θ_old, the completions drawn by a
sampler μ ≠ π_old) the batch's ``sampler_logps`` are the rollout's log-probs
(``rollout_log_probs``), and ``algorithm.rollout_correction`` runs as ``ray_trainer`` runs it,
after the KL penalty and before the advantages: verl's own
``rollout_corr_helper.compute_rollout_correction_and_add_to_batch`` on a ``DataProto`` of the
batch, its ``rollout_is_weights`` and ``response_mask`` handed to ``ppo_loss``.

In the episodes family (``--family episodes``) each episode is one response as verl's agent
loop (``experimental/agent_loop``) builds it: every token after the prompt attended and packed
(``attention``, the world's included), ``response_mask`` 1 on the model's tokens only (0 on
the tool's and the world's), the episode's reward on its last token; the rest as above.
"""

from __future__ import annotations

import importlib
from dataclasses import fields
from typing import Any

from eligibility.check.frameworks._types import Range, refuse_mistyped, refuse_out_of_range

VERSION = "0.9.1"
FAMILIES = ("sequence", "off-policy", "episodes")
"""The check families whose batches this adapter takes (the off-policy one: its sampler's
log-probs are the rollout's, for ``algorithm.rollout_correction``; the episodes one: each
episode as its agent loop hands it, :func:`~eligibility.check.frameworks.as_rollout`)."""
SECTIONS = ("algorithm", "actor")
RANGES: dict[str, dict[str, Range]] = {
    "actor": {"clip_ratio": (0.0, False), "ppo_epochs": (1, False), "kl_loss_coef": (0.0, False)},
    "algorithm.kl_ctrl": {"kl_coef": (0.0, False)},
}
"""The keys, by section, whose values the loss's math needs in a range (a clip and a KL weight
≥ 0, one epoch at least)."""
SET_BY_CHECK = {
    "actor.rollout_n": "each problem's G",
    "actor.ppo_mini_batch_size": "each problem's batch",
    "actor.ppo_micro_batch_size_per_gpu": "each problem's batch",
    "actor.strategy": "fsdp",
    "actor.use_torch_compile": "false",
}
"""The keys the check sets itself, whatever the configuration says (its problems' shapes)."""


def _dataclass(cls: type, values: dict[str, Any], where: str, **fixed: Any) -> Any:
    """verl's dataclass ``cls`` of the section ``where``, each key known and of its type.

    Raises:
        ValueError: a key ``cls`` does not have, a value of another type than it declares
            (``_types.refuse_mistyped``), or verl's own ``__post_init__`` refusing a value.
    """
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(
            f"verl {where} has no key {', '.join(map(repr, unknown))} (verl {VERSION}: see "
            f"{cls.__name__}); remove it or fix its spelling"
        )
    refuse_mistyped(values, cls, f"verl {where}")
    refuse_out_of_range(values, RANGES.get(where, {}), f"verl {where}")
    try:
        return cls(**{**values, **fixed})  # the check's shape: its problems' own
    except (TypeError, ValueError, AssertionError) as err:
        first = (str(err).splitlines() or [type(err).__name__])[0]
        raise ValueError(f"verl {VERSION} refuses {where}: {first}") from None


def _section(value: Any, where: str) -> dict[str, Any]:
    """A section of the configuration as a mapping (absent: empty), else a ValueError."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"verl {where} is a mapping of keys, not {type(value).__name__}")
    return dict(value)


def configs(config: dict[str, Any], group_size: int, rows: int) -> tuple[Any, Any]:
    """verl's ``AlgoConfig`` and ``FSDPActorConfig`` from the two sections of ``config``.

    Args:
        config: ``{"algorithm": {...}, "actor": {...}}`` in verl's keys.
        group_size: G, verl's ``rollout_n``.
        rows: N, the completions of a batch: verl's mini- and micro-batch sizes (one step).

    Raises:
        ValueError: a section or a key verl does not have.
    """
    from verl.trainer.config import AlgoConfig
    from verl.trainer.config.algorithm import KLControlConfig
    from verl.workers.config import FSDPActorConfig, PolicyLossConfig

    unknown = sorted(set(config) - set(SECTIONS))
    if unknown:
        raise ValueError(
            f"a verl configuration holds the sections {SECTIONS}, not {', '.join(unknown)}"
        )
    algorithm = _section(config.get("algorithm"), "algorithm")
    algorithm["kl_ctrl"] = _dataclass(
        KLControlConfig,
        _section(algorithm.get("kl_ctrl"), "algorithm.kl_ctrl"),
        "algorithm.kl_ctrl",
    )
    algo = _dataclass(AlgoConfig, algorithm, "algorithm")
    actor = _section(config.get("actor"), "actor")
    actor["policy_loss"] = _dataclass(
        PolicyLossConfig,
        _section(actor.get("policy_loss"), "actor.policy_loss"),
        "actor.policy_loss",
    )
    act = _dataclass(
        FSDPActorConfig,
        actor,
        "actor",
        strategy="fsdp",
        rollout_n=group_size,
        ppo_mini_batch_size=rows,
        ppo_micro_batch_size_per_gpu=rows,
        use_torch_compile=False,
    )
    return algo, act


def kl_coefficient(config: dict[str, Any]) -> float | None:
    """The KL weight the configuration applies (None: no KL term), verl's defaults filled in."""
    from verl.trainer.config import AlgoConfig
    from verl.trainer.config.algorithm import KLControlConfig
    from verl.workers.config import FSDPActorConfig

    algorithm = config.get("algorithm") or {}
    actor = config.get("actor") or {}
    if algorithm.get("use_kl_in_reward", _default(AlgoConfig, "use_kl_in_reward")):
        ctrl = algorithm.get("kl_ctrl") or {}
        return float(ctrl.get("kl_coef", _default(KLControlConfig, "kl_coef")))
    if actor.get("use_kl_loss", _default(FSDPActorConfig, "use_kl_loss")):
        return float(actor.get("kl_loss_coef", _default(FSDPActorConfig, "kl_loss_coef")))
    return None


def trainer_name(config: dict[str, Any]) -> str:
    """What the check runs: verl's advantage estimator and ``ppo_loss`` with its loss mode."""
    algorithm = config.get("algorithm") or {}
    mode = ((config.get("actor") or {}).get("policy_loss") or {}).get("loss_mode", "vanilla")
    return f"adv_estimator {algorithm.get('adv_estimator', 'gae')}, ppo_loss {mode}"


def _default(cls: type, name: str) -> Any:
    return next(f.default for f in fields(cls) if f.name == name)


def _packed(logps: Any, mask: Any, prompt_length: int) -> Any:
    """The response log-probs packed as verl's engines hand them to ``ppo_loss``.

    Each sequence's P + Lᵢ positions back to back; response token t's log-prob at P − 1 + t.
    """
    import torch

    rows = []
    for row, m in zip(logps, mask, strict=True):
        L = int(m.sum())
        rows += [row.new_zeros(prompt_length - 1), row[:L], row.new_zeros(1)]
    return torch.cat(rows)


def loss_function(config: dict[str, Any]) -> Any:
    """``loss(logps, batch)``: verl's advantage and ``ppo_loss`` for ``config`` (see module).

    Raises:
        ValueError: a key verl does not have, or an advantage estimator it does not register.
    """
    import numpy as np
    import torch
    from tensordict import TensorDict

    core_algos = importlib.import_module("verl.trainer.ppo.core_algos")
    losses = importlib.import_module("verl.workers.utils.losses")
    tu = importlib.import_module("verl.utils.tensordict_utils")
    algo, checked = configs(config, 2, 2)  # the keys, checked once at the boundary
    try:
        estimator = core_algos.get_adv_estimator_fn(algo.adv_estimator)
        core_algos.get_policy_loss_fn(checked.policy_loss.loss_mode)
    except (ValueError, KeyError, NotImplementedError) as err:
        raise ValueError(f"verl {VERSION}: {err}") from None
    built: dict[tuple[int, int], Any] = {}

    def loss(logps: Any, batch: Any) -> Any:
        key = (batch.group_size, len(batch.rewards))
        if key not in built:
            built[key] = configs(config, *key)[1]
        actor = built[key]
        mask = batch.completion_mask
        every = getattr(batch, "attention", mask)  # an episode's: the world's tokens too
        last = (every.sum(1).long() - 1).unsqueeze(1)
        scores = torch.zeros_like(mask).scatter(1, last, batch.rewards.unsqueeze(1))
        if algo.use_kl_in_reward:  # ray_trainer.apply_kl_penalty
            kld = core_algos.kl_penalty(
                batch.old_logps, batch.ref_logps, kl_penalty=algo.kl_penalty
            )
            scores = scores - algo.kl_ctrl.kl_coef * (kld * mask)
        corrected = _rollout_correction(algo, batch, mask)
        loss_mask = mask if corrected is None else corrected["response_mask"]
        index = np.array([str(g) for g in batch.group_ids.tolist()], dtype=object)
        kwargs: dict[str, Any] = {"token_level_rewards": scores, "response_mask": loss_mask}
        if algo.adv_estimator == "grpo":  # ray_trainer.compute_advantage's own branch
            kwargs.update(index=index, norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo)
        else:
            kwargs.update(index=index, config=algo)
        advantages, _ = estimator(**kwargs)
        N, P = batch.prompt_ids.shape
        data = TensorDict(
            {
                "prompts": batch.prompt_ids,
                "responses": batch.completion_ids,
                "attention_mask": torch.cat([torch.ones_like(batch.prompt_ids), every.long()], 1),
                "response_mask": loss_mask,
                "old_log_probs": batch.old_logps,
                "advantages": advantages,
                "ref_log_prob": batch.ref_logps,
            },
            batch_size=[N],
        )
        if corrected is not None and "rollout_is_weights" in corrected:
            data["rollout_is_weights"] = corrected["rollout_is_weights"]
        tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=N)
        output = {"log_probs": _packed(logps, every, P)}
        value, _ = losses.ppo_loss(actor, output, data)
        return value

    return loss


def _rollout_correction(algo: Any, batch: Any, mask: Any) -> Any:
    """verl's rollout correction of the batch (its fields by name), or None where none runs.

    None without ``algorithm.rollout_correction`` or without a sampler's log-probs (the
    on-policy family, where the rollout's are the old ones).
    """
    sampler = getattr(batch, "sampler_logps", None)
    if sampler is None or not algo.rollout_correction:
        return None
    from verl.protocol import DataProto
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

    proto = DataProto.from_dict(
        tensors={
            "old_log_probs": batch.old_logps,
            "rollout_log_probs": sampler,
            "response_mask": mask,
        }
    )
    proto, _ = compute_rollout_correction_and_add_to_batch(proto, algo.rollout_correction)
    return proto.batch


__all__ = ["FAMILIES", "VERSION", "configs", "kl_coefficient", "loss_function", "trainer_name"]
