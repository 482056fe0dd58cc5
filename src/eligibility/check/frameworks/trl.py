r"""TRL's ``GRPOTrainer`` and ``RLOOTrainer``: built from their configs, their code unchanged.

The configuration is ``trainer: grpo`` (the default) or ``trainer: rloo`` and any of that
trainer's config keys (``GRPOConfig``, ``RLOOConfig``; TRL's defaults fill the rest, ``bf16``
autocast included)::

    {"trainer": "grpo", "loss_type": "dr_grpo", "scale_rewards": "none", "beta": 0.0}
    {"trainer": "rloo", "beta": 0.1, "normalize_advantages": False}

On each batch the adapter hands the check's completions to a real trainer and calls two of
its methods as its training step does:

1. ``_generate_and_score_completions``: the batch's prompts and completions come in through
   ``rollout_func`` (GRPO: TRL's own extension point for external generation) or through
   ``_generate`` (RLOO, which has no such hook: the one method replaced, so that the batch's
   completions are the ones scored), the batch's rewards through a reward function; TRL pads,
   masks, computes the group advantages (GRPO's ``scale_rewards``, RLOO's leave-one-out
   baseline, its KL in the reward, ``normalize_advantages``) itself;
2. ``_compute_loss(model, inputs)`` on the check's model, seen through :class:`HFCausalLM`
   (a ``PreTrainedModel`` with ``config``, a backbone and ``lm_head``), after TRL's own
   ``add_fused_lm_head`` has patched it, so the log-probs are TRL's fused-head ones, under
   its ``bf16`` autocast when the config keeps it.

Shims, each where TRL insists on something the check does not have:

- the trainer is built with ``beta = 0`` (with β ≠ 0 its ``__init__`` reloads a reference model
  from the policy's hub id), then given the configured β;
- its reference model is :class:`ReplayReference`, which returns the batch's own reference
  log-probs through TRL's fused head (the check's objective uses the problem's π_ref);
- ``current_gradient_accumulation_steps`` (set by ``Trainer``'s loop) is 1, one step;
- RLOO only: its policy (``trainer.model``, with which it scores the old log-probs and its KL)
  is the check's model at θ, and ``_generate`` returns the batch's completions.

In the off-policy family (``--off-policy``: θ some steps from θ_old, the completions drawn by
a sampler μ ≠ π_old) the batch comes in as a fast sampler's would: ``rollout_func`` returns
μ's log-probs (``batch.sampler_logps``) as its ``logprobs``, and GRPO's own
``vllm_importance_sampling_correction`` runs as configured (``_mode``, ``_clip_max``,
``_clip_min``). Two more shims: the switch that says a fast sampler is in use
(``trainer.use_vllm``) is set after ``__init__``, with a generation object whose weight sync
does nothing (:class:`_NoEngine`; ``__init__`` would start vLLM); and ``trainer.model``, with
which TRL scores the old log-probs when the batch is generated, replays θ_old's
(``batch.old_logps``, as :class:`ReplayReference` replays the reference's), since the model the
check hands the loss is at θ.

In the episodes family (``--family episodes``: the exact two-turn problems) each episode comes
in as a multi-turn rollout would: ``rollout_func`` returns every token after the prompt (the
model's replies and the world's answers between them) as the completion, with ``env_mask``, 1
on the model's tokens, which TRL treats as its tool mask (``_generate``: ``tool_mask =
extra_fields.pop("env_mask")``; its loss's mask is ``completion_mask * tool_mask``), and the
rewards come through reward functions. Two keys of the adapter's own (not ``GRPOConfig``'s,
:data:`ROLLOUT`) say how the user's rollout and rewards are written: ``env_mask``
(``model-tokens``, or ``every-token``: the world's tokens trained too) and ``rewards``
(``episode``: one reward function returning the episode's Σₖ rₖ; ``per-turn``: one reward
function per turn, combined by TRL's ``multi_objective_aggregation`` and ``reward_weights``).
``max_completion_length`` is the most tokens an episode holds after its prompt, the world's
included (the batch's ``max_completion_length``), as TRL's tool loop bounds them.
"""

from __future__ import annotations

import contextlib
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

from eligibility.check.frameworks._types import Range, refuse_mistyped, refuse_out_of_range

VERSION = "1.16.0"
FAMILIES = ("sequence", "off-policy", "episodes")
"""The check families whose batches this adapter takes (GRPO's in the off-policy and episodes
ones)."""
ROLLOUT: dict[str, tuple[str, ...]] = {
    "env_mask": ("model-tokens", "every-token"),
    "rewards": ("episode", "per-turn"),
}
"""The adapter's own keys for ``--family episodes`` (the first value each key's default): what
the user's ``rollout_func`` returns as ``env_mask`` (1 on the model's tokens, or on every
token: the world's trained too) and how the reward functions are written (one returning the
episode's Σₖ rₖ, or one per turn returning rₖ)."""
TRAINERS = {"grpo": ("GRPOConfig", "GRPOTrainer"), "rloo": ("RLOOConfig", "RLOOTrainer")}
"""``trainer:`` → (its config class, its trainer class) in ``trl``."""
RANGES: dict[str, Range] = {
    "temperature": (0.0, True),
    "beta": (0.0, False),
    "epsilon": (0.0, False),
    "num_iterations": (1, False),
    "num_generations": (2, False),
}
"""The keys whose values TRL's math needs in a range (``lm``'s τ > 0 divides the logits; a KL
weight and a clip ≥ 0; one optimiser step a batch at least; two generations for a group)."""
SET_BY_CHECK = {
    "num_generations": "each problem's G",
    "per_device_train_batch_size": "each problem's batch",
    "max_completion_length": "each problem's T",
    "output_dir": "a temporary directory",
    "report_to": "none",
    "use_cpu": "true",
}
"""The keys the check sets itself, whatever the configuration says (its problems' shapes)."""


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


def _classes(trainer: str) -> tuple[Any, Any]:
    import trl

    config_name, trainer_name = TRAINERS[trainer]
    return getattr(trl, config_name), getattr(trl, trainer_name)


def rollout_keys(config: dict[str, Any]) -> dict[str, str]:
    """The adapter's own :data:`ROLLOUT` keys of ``config``, their defaults filled in.

    Raises:
        ValueError: a value that is not one of the key's choices.
    """
    out = {}
    for key, choices in ROLLOUT.items():
        value = config.get(key, choices[0])
        if value not in choices:
            raise ValueError(
                f"the adapter's {key} must be one of {', '.join(choices)} (how your rollout_func "
                f"and reward functions are written), got {value!r}"
            )
        out[key] = value
    return out


def family_keys(config: dict[str, Any], family: str) -> None:
    """Refuse the adapter's :data:`ROLLOUT` keys outside ``--family episodes``.

    Raises:
        ValueError: a rollout key given to a family of single completions, a bad value, or
            ``trainer: rloo`` on episodes (no ``rollout_func``).
    """
    rollout_keys(config)
    given = sorted(k for k in ROLLOUT if k in config)
    if given and family != "episodes":
        raise ValueError(
            f"{', '.join(given)} describe a multi-turn rollout (--family episodes); the "
            f"{family} check's completions are single turns: remove them"
        )
    if family == "episodes" and config.get("trainer", "grpo") != "grpo":
        raise ValueError(
            "the episodes check hands each episode to GRPOTrainer's rollout_func with "
            "env_mask; RLOOTrainer has no rollout_func: use trainer: grpo"
        )


def _split(config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    keys = {k: v for k, v in config.items() if k not in ROLLOUT}
    trainer = keys.pop("trainer", "grpo")
    if not isinstance(trainer, str) or trainer not in TRAINERS:
        raise ValueError(f"trainer must be one of {', '.join(TRAINERS)}, got {trainer!r}")
    config_class, _ = _classes(trainer)
    unknown = sorted(set(keys) - set(config_class.__dataclass_fields__))
    if unknown:
        raise ValueError(
            f"{config_class.__name__} (TRL {VERSION}) has no key "
            f"{', '.join(map(repr, unknown))}; remove it or fix its spelling"
        )
    refuse_mistyped(keys, config_class, f"{config_class.__name__} (TRL {VERSION})")
    refuse_out_of_range(keys, RANGES, f"{config_class.__name__} (TRL {VERSION})")
    return trainer, keys


def _as_trl_builds(trainer: str, keys: dict[str, Any]) -> None:
    """Build the trainer's config from the keys as given, so TRL's own checks judge them.

    ``__post_init__``'s rules (``num_generations`` ≥ 2, a generation batch it divides, …) are
    TRL's word on the configuration as the user wrote it, said in one line before the check
    replaces the batch's shape with its problems' own (:data:`SET_BY_CHECK`).

    Raises:
        ValueError: TRL's own refusal, first line.
    """
    config_class, _ = _classes(trainer)
    with quiet(), tempfile.TemporaryDirectory(prefix="eligibility-trl-") as out:
        try:
            config_class(**{**keys, "output_dir": out, "report_to": [], "use_cpu": True})
        except (TypeError, ValueError) as err:
            first = (str(err).splitlines() or [type(err).__name__])[0]
            raise ValueError(
                f"{config_class.__name__} (TRL {VERSION}) refuses the configuration: {first}"
            ) from None


def _beta(trainer: str, keys: dict[str, Any]) -> float:
    config_class, _ = _classes(trainer)
    beta = keys.get("beta", config_class.__dataclass_fields__["beta"].default)
    try:
        return float(beta)
    except (TypeError, ValueError):
        raise ValueError(
            f"the config's beta ({config_class.__name__}'s KL coefficient) must be a number; "
            f"got {beta!r}"
        ) from None


def kl_coefficient(config: dict[str, Any]) -> float | None:
    """β of the configuration (its trainer's default where absent); None when 0.

    TRL 1.16's defaults: ``GRPOConfig.beta`` 0.0, ``RLOOConfig.beta`` 0.05.
    """
    return _beta(*_split(config)) or None


def kl_estimator(config: dict[str, Any]) -> str | None:
    """Where the configured trainer puts its KL, and which estimator (None: no KL term)."""
    trainer, _ = _split(config)
    if kl_coefficient(config) is None:
        return None
    if trainer == "rloo":
        return "k1 of the whole sequence in the reward (RLOOTrainer)"
    return "k3 per token in the loss (GRPOTrainer's per_token_kl)"


SAMPLER_DEFAULTS: dict[str, Any] = {
    "top_p": 1.0,
    "top_k": 0,
    "min_p": None,
    "repetition_penalty": 1.0,
    "generation_kwargs": None,
}
"""The sampling keys of TRL's configs besides ``temperature``, at the values that leave the
policy's distribution as it is (TRL 1.16's defaults): another value samples from a truncated
or reweighted distribution, which the on-policy check a framework runs in does not draw from (a
cut sampler is the off-policy check's, ``--off-policy --top-p``), and is refused by name."""


def sampler(config: dict[str, Any]) -> dict[str, Any]:
    """The check's sampler settings for the configuration: ``{"temperature": τ}``.

    TRL samples at ``temperature`` and scores the log-probs at the same τ (its fused head
    divides the logits by it), so the check draws its completions at τ too.

    Raises:
        ValueError: a sampling key the check cannot reproduce (``top_p`` < 1, ``top_k``,
            ``min_p``, ``repetition_penalty`` ≠ 1, ``generation_kwargs``), named.
    """
    trainer, keys = _split(config)
    config_class, _ = _classes(trainer)
    for key, neutral in SAMPLER_DEFAULTS.items():
        value = keys.get(key, neutral)
        if value != neutral and not (key == "top_k" and value is None):
            raise ValueError(
                f"the config's {key}: {value!r} samples from another distribution than the "
                "policy's, which the on-policy check does not draw from (a cut sampler is "
                "checked with --off-policy --top-p/--top-k/--min-p on your own loss); remove "
                f"it (or set {neutral!r}) to check the rest of the configuration"
            )
    tau = keys.get("temperature", config_class.__dataclass_fields__["temperature"].default)
    try:
        return {"temperature": float(tau)}
    except (TypeError, ValueError):
        raise ValueError(f"the config's temperature must be a number, got {tau!r}") from None


def trainer_name(config: dict[str, Any]) -> str:
    """The trainer class the configuration builds (``GRPOTrainer`` or ``RLOOTrainer``)."""
    return TRAINERS[_split(config)[0]][1]


class _NoEngine:
    """TRL's vLLM generation object where none runs: its weight sync does nothing."""

    def sync_weights(self) -> None:
        """Nothing to sync: the completions come in through ``rollout_func``."""


def _replayed_generate(self: Any, prompts: list[Any]) -> tuple[Any, Any, Any]:
    """RLOO's ``_generate``, replaced: the batch's (prompt ids, completion ids, completions)."""
    s = self._check_stash
    return s["rollout"]["prompt_ids"], s["rollout"]["completion_ids"], s["completions"]


def _trainer_args(config_class: Any, keys: dict[str, Any], G: int, N: int, T: int) -> Any:
    """The trainer's config: the user's keys, the check's batch shape, no logging, on the CPU.

    β is 0 while the trainer is built (:func:`build_trainer` sets the keys' own after
    ``__init__``, which would load a reference model for β ≠ 0).
    """
    return config_class(
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


def build_trainer(
    keys: dict[str, Any],
    V: int,
    eos: int,
    G: int,
    N: int,
    T: int,
    trainer_class: Any = None,
    trainer: str = "grpo",
    rewards: int = 1,
) -> Any:
    """A real ``GRPOTrainer`` or ``RLOOTrainer`` (or ``trainer_class``, a subclass) from ``keys``.

    Args:
        keys: the trainer's config keys.
        V: the vocabulary size.
        eos: the EOS (and padding) token.
        G: ``num_generations``.
        N: ``per_device_train_batch_size``, the completions of a micro-batch.
        T: ``max_completion_length``.
        trainer_class: your subclass of the trainer (default TRL's own).
        trainer: ``grpo`` or ``rloo``.
        rewards: the reward functions, ``turn_k_reward`` each where there are several (the
            stash's ``rewards`` holds one column of the batch's rewards per function).
    """
    from datasets import Dataset

    from eligibility.lab.sequence.model import TinyCausalLM

    config_class, base = _classes(trainer)
    config_class_, HFCausalLM, ReplayReference = hf_classes()
    stash: dict[str, Any] = {}

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        return stash["rollout"]

    def reward_function(k: int) -> Any:
        def reward(prompts: list[Any], completions: list[Any], **_: Any) -> list[float]:
            return stash["rewards"][k]

        reward.__name__ = "reward" if rewards == 1 else f"turn_{k + 1}_reward"  # TRL logs it
        return reward

    args = _trainer_args(config_class, keys, G, N, T)
    cls = trainer_class or base
    hook: dict[str, Any] = {"rollout_func": rollout}
    if trainer == "rloo":  # no rollout hook: the batch's completions come in through _generate
        cls, hook = type(f"Replayed{cls.__name__}", (cls,), {"_generate": _replayed_generate}), {}
    policy = HFCausalLM(config_class_(vocab_size=V, hidden_size=2 * V), TinyCausalLM(V))
    built = cls(
        model=policy,
        reward_funcs=[reward_function(k) for k in range(rewards)],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["t1"] * N}),
        processing_class=_tokenizer(V, eos),
        **hook,
    )
    beta = _beta(trainer, keys)
    built.beta = beta  # after __init__, which would reload a reference with β ≠ 0
    built.args.beta = beta
    ref = ReplayReference(config_class_(vocab_size=V, hidden_size=V))
    from trl.trainer.utils import add_fused_lm_head

    add_fused_lm_head(ref, temperature=built.temperature)
    built.ref_model = ref  # the batch's reference, through TRL's head
    old = ReplayReference(config_class_(vocab_size=V, hidden_size=V))
    add_fused_lm_head(old, temperature=built.temperature)
    built.model.train()
    built._check_stash, built._check_ref, built._check_old = stash, ref, old
    return built


def _eos(batch: Any) -> int:
    lengths = batch.completion_mask.sum(1).long()
    ended = (lengths < batch.max_completion_length).nonzero()
    if len(ended) == 0:
        return 0
    i = int(ended[0])
    return int(batch.completion_ids[i, int(lengths[i]) - 1])


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """TRL's and transformers' own warnings and log lines silenced (they are not the check's).

    Their deprecation notes and TRL's "experimental feature" line say nothing about the
    gradient; left on, they would reach the report's stderr on every run.
    """
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.set_verbosity(level)


def accumulation(keys: dict[str, Any], N: int) -> tuple[int, int, int]:
    """(GAS, steps per generation, per-device batch) of one optimiser step of N completions.

    An optimiser step is ``gradient_accumulation_steps`` micro-batches; a generation is
    ``steps_per_generation`` of them (TRL's default: as many). The check's batch is one
    optimiser step where a generation is at most one step (N / GAS rows a micro-batch, the
    step's generations consecutive groups of the batch), and one generation where it spans
    several steps (N / steps_per_generation a micro-batch; the check holds the first step).

    Raises:
        ValueError: N not divisible into the micro-batches, or a step that is not a whole
            number of generations.
    """
    gas = int(keys.get("gradient_accumulation_steps", 1))
    spg = keys.get("steps_per_generation") or gas
    if keys.get("generation_batch_size") is not None:
        raise ValueError(
            "give steps_per_generation, not generation_batch_size: the check's batch sets "
            "the batch sizes (N completions a step or a generation)"
        )
    if spg < gas and gas % spg:
        raise ValueError(
            f"gradient_accumulation_steps {gas} is not a multiple of steps_per_generation "
            f"{spg}: an optimiser step must hold whole generations"
        )
    micro, left = divmod(N, max(gas, spg))
    if left or not micro:
        raise ValueError(
            f"the check's batch of {N} completions does not split into "
            f"{max(gas, spg)} micro-batches (gradient_accumulation_steps, "
            "steps_per_generation); use a divisor of it"
        )
    return gas, spg, micro


def _rows(batch: Any, rollout: dict[str, str] | None) -> tuple[dict[str, list[Any]], list[Any]]:
    """Each row of ``batch`` as TRL's ``rollout_func`` returns it, and the rewards' columns.

    A batch of completions: each completion's own tokens, the sampler's log-probs of them
    (θ_old's on-policy), one column of rewards. A batch of episodes (``rollout``: its
    :data:`ROLLOUT` keys): every token after the prompt, the world's included, with
    ``env_mask``; the episode's Σₖ rₖ as one column, or rₖ as column k.
    """
    sampler = getattr(batch, "sampler_logps", None)  # the off-policy family's μ
    if rollout is None:
        lengths = batch.completion_mask.sum(1).long().tolist()
        drawn = batch.old_logps if sampler is None else sampler
        columns = [batch.rewards.tolist()]
        mask = None
    else:
        lengths = (batch.turn >= 0).sum(1).long().tolist()  # the world's tokens too
        drawn = batch.logps
        r = batch.turn_rewards
        columns = [r.sum(1).tolist()] if rollout["rewards"] == "episode" else r.T.tolist()
        m = batch.completion_mask if rollout["env_mask"] == "model-tokens" else batch.turn >= 0
        mask = m.long().tolist()
    ids, logps = batch.completion_ids.tolist(), drawn.tolist()
    out = {
        "prompt_ids": batch.prompt_ids.tolist(),
        "completion_ids": [r[:L] for r, L in zip(ids, lengths, strict=True)],
        "logprobs": [r[:L] for r, L in zip(logps, lengths, strict=True)],
    }
    if mask is not None:  # TRL's extension point for the world's tokens: its tool mask
        out["env_mask"] = [r[:L] for r, L in zip(mask, lengths, strict=True)]
    return out, columns


def _one_step(
    trainer: Any, hf: Any, batch: Any, gas: int, micro: int, rollout: dict[str, str] | None
) -> Any:
    """Σ over one optimiser step's micro-batches of the loss that ``Trainer`` backpropagates.

    TRL's own ``_prepare_inputs`` buffers, shuffles and splits each generation and computes
    the old log-probs (with ``trainer.model``, the checked model) where its steps call for
    them; ``Trainer.training_step`` divides a loss by the accumulation steps unless the
    trainer says it has (``loss_is_scaled_for_ga``): summing those is the step's gradient.
    """
    rows = micro * trainer.args.steps_per_generation  # one generation
    every_row, columns = _rows(batch, rollout)
    lengths = [len(r) for r in every_row["completion_ids"]]
    sampler = getattr(batch, "sampler_logps", None)
    every = trainer.args.steps_per_generation * trainer.num_iterations
    scaled = trainer.loss_is_scaled_for_ga
    trainer._step, trainer._buffered_inputs = 0, None
    trainer.current_gradient_accumulation_steps = gas
    total = None
    for step in range(gas):
        g = slice(step // every * rows, (step // every + 1) * rows)  # this step's generation
        trainer._check_stash["rollout"] = {k: v[g] for k, v in every_row.items()}
        trainer._check_stash["completions"] = [""] * rows  # the reward reads the rewards
        trainer._check_stash["rewards"] = [c[g] for c in columns]
        replay = trainer._check_ref.backbone
        replay.ref_logps, replay.cursor = batch.ref_logps[g, : max(lengths[g])], 0
        if sampler is not None:  # θ_old's log-probs, scored as the batch is generated
            before = trainer._check_old.backbone
            before.ref_logps, before.cursor = batch.old_logps[g, : max(lengths[g])], 0
        inputs = trainer._prepare_inputs([{"prompt": "t1"}] * rows)
        value = trainer._compute_loss(hf, inputs)
        value = value if scaled else value / gas
        total = value if total is None else total + value
        trainer._step += 1
    return total


def loss_function(config: dict[str, Any], trainer_class: Any = None) -> Any:
    """``loss(model, batch)``: one optimiser step of TRL for ``config`` (see the module).

    Args:
        config: ``trainer: grpo`` or ``trainer: rloo`` and that trainer's config keys.
        trainer_class: your subclass of that trainer, whose overrides then run (default TRL's
            own); check it with ``check(loss, sequence=True, form="model")``.
    """
    trainer_name, keys = _split(config)
    given = rollout_keys(config)
    _as_trl_builds(trainer_name, keys)
    built: dict[tuple[int, ...], Any] = {}

    def loss(model: Any, batch: Any) -> Any:
        from trl.trainer.utils import add_fused_lm_head

        model = getattr(model, "lm", model)  # the model form's Hugging Face model: its policy
        episodes = hasattr(batch, "turn_rewards")  # a batch of multi-turn episodes
        if episodes and trainer_name != "grpo":
            raise ValueError(
                "the episodes check hands the episodes to GRPOTrainer's rollout_func with "
                "env_mask; RLOOTrainer has no rollout_func: use trainer: grpo"
            )
        rollout = given if episodes else None
        N, G = len(batch.completion_ids), batch.group_size
        gas, _, micro = accumulation(keys, N)
        eos = batch.eos_id if episodes else _eos(batch)
        rewards = batch.turn_rewards.shape[1] if episodes and given["rewards"] == "per-turn" else 1
        key = (model.vocab_size, eos, G, micro, batch.max_completion_length)
        with quiet():
            if (*key, rewards) not in built:
                built[(*key, rewards)] = build_trainer(
                    keys, *key, trainer_class, trainer_name, rewards
                )
            trainer = built[(*key, rewards)]
            hf = hf_model(model)
            add_fused_lm_head(hf, temperature=trainer.temperature, outputs=("log_probs", "entropy"))
            trainer.model = hf.train()  # TRL scores old log-probs (and RLOO its KL) with it
            if getattr(batch, "sampler_logps", None) is not None:  # a fast sampler's batch
                if trainer_name != "grpo":
                    raise ValueError(
                        "the off-policy check runs GRPOTrainer's vLLM importance-sampling "
                        "correction; RLOOTrainer has no rollout_func to hand it a sampler's "
                        "log-probs: use trainer: grpo"
                    )
                trainer.use_vllm, trainer.vllm_generation = True, _NoEngine()
                trainer._last_loaded_step = trainer.state.global_step
                trainer.model = trainer._check_old  # θ_old, where the batch was generated
            return _one_step(trainer, hf, batch, gas, micro, rollout)

    return loss


__all__ = [
    "FAMILIES",
    "ROLLOUT",
    "TRAINERS",
    "VERSION",
    "build_trainer",
    "family_keys",
    "hf_model",
    "kl_coefficient",
    "kl_estimator",
    "loss_function",
    "rollout_keys",
    "sampler",
    "trainer_name",
]
