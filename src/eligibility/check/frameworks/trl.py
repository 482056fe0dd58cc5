r"""TRL's ``GRPOTrainer`` and ``RLOOTrainer``: built from their configs, scoring and loss unchanged.

The configuration is ``trainer: grpo`` and any ``GRPOConfig`` keys, or ``trainer: rloo`` and
any ``RLOOConfig`` keys (TRL's defaults fill the rest, ``bf16`` autocast and, for RLOO,
β = 0.05 included)::

    {"trainer": "grpo", "loss_type": "dr_grpo", "scale_rewards": "none", "beta": 0.0}
    {"trainer": "rloo", "beta": 0.1, "normalize_advantages": false}

On each batch the adapter hands the check's completions to a real trainer through TRL's
hooks and calls two of its methods as its training step does:

1. ``_generate_and_score_completions``: the batch's prompts and completions come in through
   ``rollout_func`` (TRL's own extension point for external generation), the batch's rewards
   through a reward function; TRL pads, masks, computes the group advantages
   (``scale_rewards``, ``multi_objective_aggregation``) and ``num_items_in_batch`` itself;
2. ``_compute_loss(model, inputs)`` on the check's model, seen through :class:`HFCausalLM`
   (a ``PreTrainedModel`` with ``config``, a backbone and ``lm_head``), after TRL's own
   ``add_fused_lm_head`` has patched it, so the log-probs are TRL's fused-head ones, under
   its ``bf16`` autocast when the config keeps it.

Three shims, each where TRL insists on something the check does not have:

- the trainer is built with ``beta = 0`` (with β ≠ 0 its ``__init__`` reloads a reference model
  from the policy's hub id), then given the configured β;
- its reference model is :class:`ReplayReference`, which returns the batch's own reference
  log-probs through TRL's fused head (the check's objective uses the problem's π_ref);
- ``current_gradient_accumulation_steps`` (set by ``Trainer``'s loop) is 1, one step.

``RLOOTrainer`` (TRL 1.16) has no ``rollout_func``, so two more, both for RLOO only:

- its ``_generate`` is replaced on the instance by one that returns the batch's prompt and
  completion ids (everything after it in ``_generate_and_score_completions`` is TRL's);
- its ``model`` is the check's model (through :class:`HFCausalLM` and TRL's fused head) on each
  batch, because RLOO recomputes the old log-probs with the model it trains (GRPO takes the
  rollout's), and its KL-in-the-reward term, β·Σₜ(log π_θ − log π_ref), is read from them.

RLOO's default β = 0.05 is a KL weight: where it differs from the problem's β the report
names both values (``kl-weight (config 0.05, objective β = 0.1)``); the fix is β = the
objective's (``batch.beta``).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any

VERSION = "1.16.0"


@dataclass(frozen=True)
class Trainer:
    """One TRL trainer the adapter builds.

    Attributes:
        config: its config class's name in ``trl``.
        trainer: its trainer class's name in ``trl``.
        rollout_hook: whether it takes ``rollout_func`` (else ``_generate`` is replaced).
    """

    config: str
    trainer: str
    rollout_hook: bool


TRAINERS: dict[str, Trainer] = {
    "grpo": Trainer("GRPOConfig", "GRPOTrainer", True),
    "rloo": Trainer("RLOOConfig", "RLOOTrainer", False),
}
"""``trainer:`` → its row."""


def _trl(name: str) -> Any:
    import trl

    return getattr(trl, name)


def _transformers() -> Any:
    import transformers

    return transformers


def hf_classes() -> tuple[type, type, type]:
    """(config class, :class:`HFCausalLM`, :class:`ReplayReference`), imported on first use."""
    from eligibility.check.frameworks import _hf_models as m

    return m.CheckLMConfig, m.HFCausalLM, m.ReplayReference


def hf_model(lm: Any) -> Any:
    """The check's model (:class:`TinyCausalLM`) as a Hugging Face causal LM sharing its tables."""
    config_class, HFCausalLM, _ = hf_classes()
    V = lm.vocab_size
    n = 0 if lm.position is None else lm.position.num_embeddings
    return HFCausalLM(config_class(vocab_size=V, hidden_size=2 * V + n), lm)


def _tokenizer(V: int, eos: int) -> Any:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    vocab = {f"t{v}": v for v in range(V)}
    tok = Tokenizer(WordLevel(vocab, unk_token=f"t{eos}"))
    tok.pre_tokenizer = WhitespaceSplit()
    t = _transformers().PreTrainedTokenizerFast(tokenizer_object=tok)
    t.eos_token = t.pad_token = f"t{eos}"
    return t


def _split(config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    keys = dict(config)
    trainer = keys.pop("trainer", "grpo")
    if trainer not in TRAINERS:
        raise ValueError(f"trainer must be one of {', '.join(TRAINERS)}, got {trainer!r}")
    name = TRAINERS[trainer].config
    unknown = sorted(set(keys) - set(_trl(name).__dataclass_fields__))
    if unknown:
        raise ValueError(
            f"{name} (TRL {VERSION}) has no key {', '.join(map(repr, unknown))}; remove it "
            "or fix its spelling"
        )
    return trainer, keys


def _beta(trainer: str, keys: dict[str, Any]) -> float:
    fields = _trl(TRAINERS[trainer].config).__dataclass_fields__
    return float(keys.get("beta", fields["beta"].default))


def kl_coefficient(config: dict[str, Any]) -> float | None:
    """β of the configuration (TRL's default where absent: 0 for GRPO, 0.05 for RLOO); None at 0."""
    trainer, keys = _split(config)
    return _beta(trainer, keys) or None


def build_trainer(
    keys: dict[str, Any],
    V: int,
    eos: int,
    G: int,
    N: int,
    T: int,
    trainer_class: Any = None,
    trainer: str = "grpo",
) -> Any:
    """A real TRL trainer (or ``trainer_class``, a subclass) from ``keys`` (the module's shims).

    Args:
        keys: the ``trainer``'s config keys (``GRPOConfig`` or ``RLOOConfig``).
        V: the vocabulary size.
        eos: the EOS (and padding) token.
        G: ``num_generations``.
        N: the batch's completions, ``per_device_train_batch_size``.
        T: ``max_completion_length``.
        trainer_class: your trainer subclass (default TRL's ``GRPOTrainer`` / ``RLOOTrainer``).
        trainer: ``grpo`` or ``rloo`` (:data:`TRAINERS`).
    """
    from datasets import Dataset

    from eligibility.lab.sequence.model import TinyCausalLM

    config_class, HFCausalLM, _ = hf_classes()
    stash: dict[str, Any] = {}

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        return stash["rollout"]

    def reward(prompts: list[Any], completions: list[Any], **_: Any) -> list[float]:
        return stash["rewards"]

    kind = TRAINERS[trainer]
    beta = _beta(trainer, keys)
    args = _trl(kind.config)(
        **{
            **keys,
            "beta": 0.0,
            "output_dir": tempfile.mkdtemp(prefix="eligibility-trl-"),
            "num_generations": G,
            "per_device_train_batch_size": N,
            "max_completion_length": T,
            "report_to": [],
            "use_cpu": True,
        }
    )
    policy = HFCausalLM(config_class(vocab_size=V, hidden_size=2 * V), TinyCausalLM(V))
    hook = {"rollout_func": rollout} if kind.rollout_hook else {}
    built = (trainer_class or _trl(kind.trainer))(
        model=policy,
        reward_funcs=reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["t1"] * N}),
        processing_class=_tokenizer(V, eos),
        **hook,
    )
    if not kind.rollout_hook:  # RLOO: the batch's ids in place of generation
        built._generate = lambda prompts: _replay(stash["rollout"], len(prompts))
    return _shim(built, beta, V, stash)


def _replay(rollout: dict[str, Any], n: int) -> tuple[list[Any], list[Any], list[str]]:
    """``_generate``'s (prompt ids, completion ids, completions) for RLOO, from the batch."""
    return rollout["prompt_ids"], rollout["completion_ids"], ["t1"] * n


def _shim(trainer: Any, beta: float, V: int, stash: dict[str, Any]) -> Any:
    config_class, _, ReplayReference = hf_classes()
    trainer.beta = beta  # shim 1: after __init__, which would reload a reference with β ≠ 0
    trainer.args.beta = beta
    ref = ReplayReference(config_class(vocab_size=V, hidden_size=V))
    from trl.trainer.utils import add_fused_lm_head

    add_fused_lm_head(ref, temperature=trainer.temperature)
    trainer.ref_model = ref  # shim 2: the batch's reference, through TRL's head
    trainer.current_gradient_accumulation_steps = 1  # shim 3: one step, no accumulation
    trainer.model.train()
    trainer._check_stash, trainer._check_ref = stash, ref
    return trainer


def _eos(batch: Any) -> int:
    lengths = batch.completion_mask.sum(1).long()
    ended = (lengths < batch.max_completion_length).nonzero()
    if len(ended) == 0:
        return 0
    i = int(ended[0])
    return int(batch.completion_ids[i, int(lengths[i]) - 1])


def loss_function(config: dict[str, Any], trainer_class: Any = None) -> Any:
    """``loss(model, batch)``: TRL's scoring and ``_compute_loss`` for ``config`` (see module).

    Args:
        config: ``trainer: grpo`` and ``GRPOConfig`` keys, or ``trainer: rloo`` and
            ``RLOOConfig`` keys.
        trainer_class: your ``GRPOTrainer`` / ``RLOOTrainer`` subclass, whose overrides then
            run (default TRL's); check it with ``check(loss, sequence=True, form="model")``.
    """
    kind, keys = _split(config)
    built: dict[tuple[int, ...], Any] = {}

    def loss(model: Any, batch: Any) -> Any:
        from trl.trainer.utils import add_fused_lm_head

        N, G = len(batch.rewards), batch.group_size
        key = (model.vocab_size, _eos(batch), G, N, batch.max_completion_length)
        if key not in built:
            built[key] = build_trainer(keys, *key, trainer_class, kind)
        trainer = built[key]
        lengths = batch.completion_mask.sum(1).long().tolist()
        ids, old = batch.completion_ids.tolist(), batch.old_logps.tolist()
        trainer._check_stash["rollout"] = {
            "prompt_ids": batch.prompt_ids.tolist(),
            "completion_ids": [r[:L] for r, L in zip(ids, lengths, strict=True)],
            "logprobs": [r[:L] for r, L in zip(old, lengths, strict=True)],
        }
        trainer._check_stash["rewards"] = batch.rewards.tolist()
        trainer._check_ref.backbone.ref_logps = batch.ref_logps
        hf = hf_model(model)
        add_fused_lm_head(hf, temperature=trainer.temperature, outputs=("log_probs", "entropy"))
        if not TRAINERS[kind].rollout_hook:  # RLOO: its old log-probs come from its model
            hf.training = True  # the wrapper only: TRL reads its mode from it
            trainer.model = hf
        inputs = trainer._generate_and_score_completions([{"prompt": "t1"}] * N)
        return trainer._compute_loss(hf, inputs)

    return loss


__all__ = [
    "TRAINERS",
    "VERSION",
    "Trainer",
    "build_trainer",
    "hf_model",
    "kl_coefficient",
    "loss_function",
]
