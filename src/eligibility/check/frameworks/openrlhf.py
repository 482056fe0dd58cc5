r"""OpenRLHF's advantage code, KL estimators and ``PolicyLoss``, called unchanged.

The configuration holds OpenRLHF's command-line keys (``train_ppo_ray``), with or without the
leading dashes: ``{"algo.advantage.estimator": "rloo", "algo.kl.init_coef": 0.01,
"actor.loss_agg_mode": "token-mean"}``; :data:`DEFAULTS` (read from OpenRLHF 0.11.2's parser)
fills the rest, and its post-parse rule ``eps_clip_low_high = (eps_clip, eps_clip)`` is applied.

On each batch, as OpenRLHF's trainer does:

1. without ``algo.kl.use_loss`` (and ``init_coef`` > 0), the per-token KL
   ``models.utils.compute_approx_kl(ℓ_old, ℓ_ref, kl_estimator)`` (``make_experience``'s call);
2. the advantages from ``RemoteExperienceMaker.compute_advantages_and_returns`` itself, on a
   maker built with its own ``__init__`` (no Ray groups: this method uses none) and
   ``FixedKLController(init_coef)``: the group baseline, ``compute_reward`` (R on the last token
   minus β·kl per token), the reward-to-go, the whitening;
3. the loss as ``PPOActor.training_step`` forms it: ``PolicyLoss`` built as the actor builds
   it, plus ``init_coef`` × ``aggregate_loss`` of ``compute_approx_kl`` with ``algo.kl.use_loss``.

In the off-policy family (``--off-policy``: θ away from θ_old, the completions drawn by a
sampler μ ≠ π_old) the batch's ``sampler_logps`` are handed to ``PolicyLoss`` as
``rollout_log_probs``, the vLLM engine's log-probs the actor receives, so that its sampler
correction (``algo.advantage.is_correction_level``, ``_mode``, ``_gating``, ``_threshold``:
TIS, icepop, seq-mask-tis) runs as configured.

In the episodes family (``--family episodes``) each episode is one sample as OpenRLHF's
``MultiTurnAgentExecutor`` and ``_process_response_into_experience`` build it: ``action_mask``
1 on the model's tokens only (its ``action_ranges``), the steps' rewards summed into one, placed
by ``compute_reward`` on the last action token.

OpenRLHF's package ``__init__`` files import deepspeed, peft and Ray's launcher, none of which
these functions use, so the four source files are loaded from the installed package by path
under their own names, with placeholders for ``deepspeed`` and ``openrlhf.trainer.ray.launcher``
(imported for one decorator-free helper and a type annotation); the placeholders are removed
from ``sys.modules`` once loaded.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

from eligibility._output import quoted
from eligibility.check.frameworks._types import Range, describe, fits, refuse_out_of_range

VERSION = "0.11.2"
FAMILIES = ("sequence", "off-policy", "episodes")
"""The check families whose batches this adapter takes (the off-policy one: its sampler's
log-probs go to ``PolicyLoss`` as the rollout's; the episodes one: each episode as its agent
executor hands it, :func:`~eligibility.check.frameworks.as_rollout`)."""

DEFAULTS: dict[str, Any] = {
    "algo.advantage.estimator": "gae",
    "algo.advantage.gamma": 1.0,
    "algo.advantage.no_std_norm": False,
    "algo.advantage.is_correction_level": "off",
    "algo.advantage.is_correction_mode": "mask",
    "algo.advantage.is_correction_gating": "ratio",
    "algo.advantage.is_correction_threshold": [0.5, 5.0],
    "algo.kl.init_coef": 0.01,
    "algo.kl.estimator": "k1",
    "algo.kl.use_loss": False,
    "algo.kl.unbiased_gradient": False,
    "actor.eps_clip": 0.2,
    "actor.eps_clip_low_high": None,
    "actor.dual_clip": None,
    "actor.policy_loss_type": "ppo",
    "actor.loss_agg_mode": "token-mean",
    "reward.clip_range": [-10.0, 10.0],
}
"""The keys the check uses and their defaults in OpenRLHF 0.11.2 (``cli/train_ppo_ray.py``)."""

TYPES: dict[str, Any] = {
    **{k: type(v) for k, v in DEFAULTS.items() if isinstance(v, bool | float | str)},
    "algo.advantage.is_correction_threshold": list[float],
    "actor.eps_clip_low_high": list[float] | None,
    "actor.dual_clip": float | None,
    "reward.clip_range": list[float],
}
"""What each key takes, as OpenRLHF 0.11.2's parser declares it (``type=float``, ``nargs=2``,
``action="store_true"``: a bool)."""

CHOICES: dict[str, tuple[str, ...]] = {
    "algo.advantage.is_correction_level": ("off", "token", "seq"),
    "algo.advantage.is_correction_mode": ("mask", "clip"),
    "algo.advantage.is_correction_gating": ("ratio", "binary_kl", "tv"),
    "actor.policy_loss_type": ("ppo", "gspo"),
    "actor.loss_agg_mode": ("token-mean", "seq-mean-token-mean"),
    "algo.kl.estimator": ("k1", "k2", "k3"),
}
"""The values OpenRLHF 0.11.2's parser takes for these keys (its ``choices=``)."""

RANGES: dict[str, Range] = {
    "actor.eps_clip": (0.0, False),
    "algo.kl.init_coef": (0.0, False),
    "algo.advantage.gamma": (0.0, False),
}
"""The keys whose values the loss's math needs in a range (a clip, a KL weight, a discount
≥ 0)."""

COUNTS: dict[str, tuple[int, ...]] = {
    "actor.eps_clip_low_high": (2,),
    "reward.clip_range": (2,),
    "algo.advantage.is_correction_threshold": (1, 2),
}
"""How many numbers a list key takes (the parser's ``nargs=2``; the threshold's ``nargs="+"``
and its post-parse rule: HIGH, or LOW HIGH)."""

SET_BY_CHECK = {"rollout.n_samples_per_prompt": "each problem's G"}
"""The keys the check sets itself, whatever the configuration says (its problems' shapes)."""

CRITIC_FREE = ("reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo")
"""The estimators without a critic (``gae`` needs a value network; ``flash_reinforce`` has no
group, one completion a prompt)."""

_FILES = {
    "openrlhf.utils.logging_utils": "utils/logging_utils.py",
    "openrlhf.utils.seqlen_balancing": "utils/seqlen_balancing.py",
    "openrlhf.utils.utils": "utils/utils.py",
    "openrlhf.models.utils": "models/utils.py",
    "openrlhf.models.loss": "models/loss.py",
    "openrlhf.trainer.ppo_utils.experience": "trainer/ppo_utils/experience.py",
    "openrlhf.trainer.ppo_utils.length_penalty": "trainer/ppo_utils/length_penalty.py",
    "openrlhf.trainer.ppo_utils.kl_controller": "trainer/ppo_utils/kl_controller.py",
    "openrlhf.trainer.ppo_utils.experience_maker": "trainer/ppo_utils/experience_maker.py",
}


def arguments(config: dict[str, Any]) -> Any:
    """OpenRLHF's nested ``args`` (``args.algo.kl.init_coef``) from its command-line keys.

    Raises:
        ValueError: a key the check does not know, or an estimator that needs a critic.
    """
    values = dict(DEFAULTS)
    for key, value in config.items():
        if not isinstance(key, str):
            raise ValueError(f"OpenRLHF key {quoted(key)} is not text: name a key of its parser")
        name = key.lstrip("-").replace("-", "_") if key.startswith("--") else key
        if name not in DEFAULTS:
            raise ValueError(
                f"OpenRLHF key {key!r} is not one the check reads; it reads "
                f"{', '.join(sorted(DEFAULTS))}"
            )
        if fits(value, TYPES[name]) is False:
            raise ValueError(
                f"OpenRLHF key {key!r}: {quoted(value)} is not {describe(TYPES[name])} "
                f"(OpenRLHF {VERSION}'s parser takes {describe(TYPES[name])})"
            )
        if isinstance(value, list | tuple) and len(value) not in COUNTS.get(name, (len(value),)):
            raise ValueError(
                f"OpenRLHF key {key!r}: {quoted(value)} has {len(value)} numbers; OpenRLHF "
                f"{VERSION} takes {' or '.join(map(str, COUNTS[name]))}"
            )
        if name in CHOICES and value not in CHOICES[name]:
            raise ValueError(
                f"OpenRLHF key {key!r}: {quoted(value)} is not one of "
                f"{', '.join(CHOICES[name])} (its parser's choices)"
            )
        values[name] = value
    refuse_out_of_range(values, RANGES, "OpenRLHF")
    if values["actor.eps_clip_low_high"] is None:  # train_ppo_ray's post-parse rules
        values["actor.eps_clip_low_high"] = (values["actor.eps_clip"], values["actor.eps_clip"])
    if len(values["algo.advantage.is_correction_threshold"]) == 1:  # HIGH alone: LOW is 0
        values["algo.advantage.is_correction_threshold"] = [
            0.0,
            *values["algo.advantage.is_correction_threshold"],
        ]
    if values["algo.advantage.estimator"] not in CRITIC_FREE:
        raise ValueError(
            f"algo.advantage.estimator {values['algo.advantage.estimator']!r}: the check runs "
            f"the critic-free estimators with groups, {', '.join(CRITIC_FREE)}"
        )
    args = types.SimpleNamespace()
    for key, value in values.items():
        node = args
        *path, leaf = key.split(".")
        for part in path:
            node = node.__dict__.setdefault(part, types.SimpleNamespace())
        setattr(node, leaf, value)
    return args


def kl_coefficient(config: dict[str, Any]) -> float | None:
    """The KL weight OpenRLHF applies (``algo.kl.init_coef``; None where it is 0)."""
    coef = float(arguments(config).algo.kl.init_coef)
    return coef if coef > 0 else None


def trainer_name(config: dict[str, Any]) -> str:
    """What the check runs: OpenRLHF's advantage estimator and ``PolicyLoss``."""
    return f"advantage {arguments(config).algo.advantage.estimator}, PolicyLoss"


def modules() -> dict[str, Any]:
    """OpenRLHF's pure-torch modules, loaded by path from the installed package (see module)."""
    spec = importlib.util.find_spec("openrlhf")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("No module named 'openrlhf'")
    root = Path(next(iter(spec.submodule_search_locations)))
    packages = ("openrlhf", "openrlhf.utils", "openrlhf.models", "openrlhf.trainer")
    more = ("openrlhf.trainer.ppo_utils", "openrlhf.trainer.ray", "openrlhf.trainer.ray.launcher")
    placeholders = {name: types.ModuleType(name) for name in (*packages, *more)}
    for name, module in placeholders.items():
        module.__path__ = [str(root / name.partition(".")[2].replace(".", "/"))]
    placeholders["openrlhf.trainer.ray.launcher"].RayActorGroup = object  # a type annotation
    if importlib.util.find_spec("deepspeed") is None:
        placeholders["deepspeed"] = types.ModuleType("deepspeed")  # set_z3_leaf_modules only
    saved = {name: sys.modules.get(name) for name in [*placeholders, *_FILES]}
    loaded: dict[str, Any] = {}
    try:
        sys.modules.update(placeholders)
        for name, path in _FILES.items():
            spec = importlib.util.spec_from_file_location(name, root / path)
            module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            sys.modules[name] = module
            spec.loader.exec_module(module)  # type: ignore[union-attr]
            loaded[name.rpartition(".")[2]] = module
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return loaded


def loss_function(config: dict[str, Any]) -> Any:
    """``loss(logps, batch)``: OpenRLHF's advantages and actor loss for ``config``."""
    import torch

    args = arguments(config)
    m = modules()
    utils, maker_module = m["utils"], m["experience_maker"]
    beta = args.algo.kl.init_coef
    maker = maker_module.RemoteExperienceMaker(
        None, None, None, None, m["kl_controller"].FixedKLController(beta),
        types.SimpleNamespace(args=args), None,
    )  # fmt: skip
    low, high = args.actor.eps_clip_low_high
    policy_loss = m["loss"].PolicyLoss(
        clip_eps_low=low,
        clip_eps_high=high,
        dual_clip=args.actor.dual_clip,
        token_level_loss=args.actor.loss_agg_mode == "token-mean",
        policy_loss_type=args.actor.policy_loss_type,
        is_correction_level=args.algo.advantage.is_correction_level,
        is_correction_mode=args.algo.advantage.is_correction_mode,
        is_correction_gating=args.algo.advantage.is_correction_gating,
        is_correction_threshold=args.algo.advantage.is_correction_threshold,
    )

    def loss(logps: Any, batch: Any) -> Any:
        args.rollout = types.SimpleNamespace(n_samples_per_prompt=batch.group_size)
        mask = batch.completion_mask.bool()
        if beta > 0 and not args.algo.kl.use_loss:  # make_experience's KL
            kl = utils.compute_approx_kl(
                batch.old_logps, batch.ref_logps, kl_estimator=args.algo.kl.estimator
            )
        else:
            kl = torch.zeros_like(batch.old_logps)
        experience = m["experience"].Experience(
            action_mask=mask,
            action_log_probs=batch.old_logps,
            rewards=batch.rewards.clone(),
            kl=kl,
            index=list(range(len(batch.rewards))),
            info={},
        )
        (experience,) = maker.compute_advantages_and_returns([experience])
        value, *_ = policy_loss(
            logps,
            batch.old_logps,
            experience.advantages,
            action_mask=mask,
            rollout_log_probs=getattr(batch, "sampler_logps", None),
        )
        if args.algo.kl.use_loss and beta > 0:  # PPOActor.training_step's KL loss
            kl = utils.compute_approx_kl(
                logps,
                batch.ref_logps,
                log_probs_old=batch.old_logps,
                kl_estimator=args.algo.kl.estimator,
                unbiased_gradient=args.algo.kl.unbiased_gradient,
            )
            token_level = args.actor.loss_agg_mode == "token-mean"
            value = value + beta * m["loss"].aggregate_loss(kl, mask, token_level_loss=token_level)
        return value

    return loss


__all__ = [
    "CRITIC_FREE",
    "DEFAULTS",
    "FAMILIES",
    "VERSION",
    "arguments",
    "kl_coefficient",
    "loss_function",
    "trainer_name",
]
