"""The one configuration of a fine-tuning run: the command line, the logs, the saved run."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from eligibility.lm import device as devices
from eligibility.runs.resume import checked as _checked
from eligibility.runs.resume import flag
from eligibility.torch import options


def _help(text: str) -> dict[str, str]:
    return {"help": text}


# The choices are the option table's rows.
Baseline = Literal[options.names("baseline")]  # type: ignore[valid-type]
Scale = Literal[options.names("scale")]  # type: ignore[valid-type]
Aggregation = Literal[options.names("aggregation")]  # type: ignore[valid-type]
KL = Literal[options.names("kl")]  # type: ignore[valid-type]
Ratio = Literal[options.names("ratio")]  # type: ignore[valid-type]
DType = Literal["auto", "float32", "bfloat16"]
Device = Literal["cpu", "cuda", "auto"]


@dataclass
class FinetuneConfig:
    """Every setting of a REINFORCE fine-tuning run of a causal LM on a verifiable task."""

    task: str = field(
        metadata=_help(
            "repeat, reverse or sum (built in), or your reward functions in TRL's convention, "
            "FILE.py:fn or module:fn, several joined by commas, with --prompts"
        )
    )
    prompts: str | None = field(
        default=None,
        metadata={
            "help": "your task's prompts: JSONL, JSON, CSV, Parquet, a datasets save_to_disk "
            "directory, or .txt (one a line); a 'prompt' column, the others go to the rewards",
            "metavar": "FILE",
        },
    )
    eval_prompts: str | None = field(
        default=None,
        metadata={
            "help": "held-out prompts (the same formats): the greedy accuracy and the target "
            "are measured on them (None: on --prompts)",
            "metavar": "FILE",
        },
    )
    eval_limit: int | None = field(
        default=None, metadata=_help("evaluate on the first N held-out prompts only (None: all)")
    )
    eval_metric: str | None = field(
        default=None,
        metadata=_help(
            "a function in the rewards' convention whose mean is the accuracy (None: the "
            "fraction of completions whose reward is 1)"
        ),
    )
    reward_weights: tuple[float, ...] = field(
        default=(),
        metadata=_help("w_k, one per reward function: R = Σ_k w_k r_k over those not None"),
    )
    reward_timeout: float = field(
        default=60.0, metadata=_help("seconds one batch of your rewards may take")
    )
    completion_chars: str = field(
        default="",
        metadata=_help(
            "your task on the tiny model: characters a completion may use besides the prompts'"
        ),
    )
    model: str = field(
        default="tiny",
        metadata=_help(
            "tiny (the built-in transformer), a directory holding a Hugging Face causal LM and "
            "its tokenizer (from_pretrained, nothing downloaded), a GGUF file (path/model.gguf: "
            "dequantised to float32, its tokenizer and chat template with it), or "
            "module:factory returning one"
        ),
    )
    tokenizer: str | None = field(
        default=None,
        metadata={
            "help": "a directory holding the tokenizer (None: --model's own; the tiny model's "
            "is one token per character)",
            "metavar": "DIR",
        },
    )
    d_model: int = field(default=64, metadata=_help("tiny model: width"))
    n_layer: int = field(default=2, metadata=_help("tiny model: transformer blocks"))
    n_head: int = field(default=4, metadata=_help("tiny model: attention heads"))
    seed: int = field(default=0, metadata=_help("seed of the weights, prompts and samples"))
    group_size: int = field(
        default=None,  # type: ignore[assignment]
        metadata=_help("G, completions sampled per prompt (None: by the model, BY_MODEL)"),
    )
    prompts_per_batch: int = field(
        default=None,  # type: ignore[assignment]
        metadata=_help("prompts per update (None: by the model, BY_MODEL)"),
    )
    max_completion_length: int | None = field(
        default=None, metadata=_help("T_max, tokens per completion, EOS included (None: task's)")
    )
    temperature: float = field(
        default=1.0,
        metadata=_help("τ: completions are drawn from softmax(z/τ), the policy trained"),
    )
    lr: float = field(
        default=None,  # type: ignore[assignment]
        metadata=_help(
            "Adam learning rate (None: by the model: 1e-3 for the tiny one, 1e-5 for a "
            "pretrained one, which 1e-3 wrecks within two updates)"
        ),
    )
    baseline: Baseline = field(
        default="rloo", metadata=_help("group baseline: rloo (unbiased), mean (GRPO), none")
    )
    scale: Scale = field(
        default="none",
        metadata=_help("divide advantages by the group's or batch's std, or whiten (biased)"),
    )
    aggregation: Aggregation = field(
        default="sequence-sum",
        metadata=_help(
            "token terms → loss: sequence-sum (unbiased), constant (Dr. GRPO, 1/(N·T_max)), "
            "token-mean (DAPO), sequence-mean (GRPO, length-normalised), …"
        ),
    )
    kl: KL = field(
        default=None,  # type: ignore[assignment]
        metadata=_help(
            "KL to the frozen initial policy: reward-to-go (the exact gradient; None: this), "
            "none (no KL term: --beta unused), or k1/k2/k3/… in the loss"
        ),
    )
    beta: float = field(
        default=None,  # type: ignore[assignment]
        metadata=_help(
            "β, the KL's weight against the initial policy; 0: no KL term and no reference "
            "pass, as TRL's beta=0 (None: by the model, BY_MODEL: 0.02 tiny, 0 pretrained)"
        ),
    )
    epochs_per_batch: int = field(
        default=1,
        metadata={"min": 1}
        | _help(
            "K, optimiser steps on each generation batch (TRL num_iterations); steps after the "
            "first are off-policy, weighted by --ratio"
        ),
    )
    ratio: Ratio = field(
        default="sequence",
        metadata=_help(
            "with K > 1: the importance ratio π_θ/π_old of the whole sequence (unbiased), per "
            "token (TRL, verl), or its geometric mean (GSPO)"
        ),
    )
    clip: float | None = field(
        default=None,
        metadata=_help("with K > 1: PPO's clip ε of the ratio (None: no clip, unbiased)"),
    )
    max_grad_norm: float | None = field(
        default=1.0, metadata=_help("clip the gradient's global norm to this (None: off)")
    )
    lora_r: int | None = field(
        default=None,
        metadata=_help(
            "LoRA rank r (peft): train adapters W + (α/r) B A on --lora-target-modules, the "
            "model frozen; the KL's reference is the model with them off (None: every weight)"
        ),
    )
    lora_alpha: float = field(default=8.0, metadata=_help("LoRA α (peft's default 8)"))
    lora_dropout: float = field(
        default=0.0,
        metadata=_help(
            "LoRA dropout on the adapters' input in the gradient pass (peft's default 0; the "
            "sampler and the reference run without it)"
        ),
    )
    lora_target_modules: tuple[str, ...] = field(
        default=(),
        metadata=_help(
            "the modules given adapters, peft's names (e.g. q_proj v_proj, or all-linear; "
            "empty: peft's default for the architecture; the tiny model's: qkv proj)"
        ),
    )
    micro_batch_size: int | None = field(
        default=None,
        metadata=_help(
            "M: score and backpropagate an update's N sequences M at a time, the gradient "
            "accumulated (the same gradient: the loss's normaliser and advantages stay the "
            "batch's; lower peak memory) (None: all N at once)"
        ),
    )
    dtype: DType = field(
        default=None,  # type: ignore[assignment]
        metadata=_help(
            "auto: bfloat16 where --device computes it natively (a GPU with bf16, a CPU with "
            "AVX-512 BF16 or AMX: about 2x faster an update there), else float32 (emulated bf16 "
            "is slower), saved as the one chosen; float32; or bfloat16: the forward and backward "
            "passes under autocast, the weights and Adam's moments float32 (None: by the model, "
            "BY_MODEL: float32 tiny, auto pretrained)"
        ),
    )
    device: Device = field(
        default="auto",
        metadata=_help("where every tensor of the run lives: cpu, cuda, or auto (cuda if any)"),
    )
    max_updates: int = field(
        default=400,
        metadata=_help("stop after this many updates (generation batches, K optimiser steps each)"),
    )
    target_accuracy: float | None = field(
        default=0.95,
        metadata=_help("stop when the greedy accuracy on the task's prompts reaches this (none)"),
    )
    eval_every: int = field(
        default=None,  # type: ignore[assignment]
        metadata=_help("greedy evaluation every this many updates (0: never; None: BY_MODEL)"),
    )
    checkpoint_every: int = field(
        default=None,  # type: ignore[assignment]
        metadata=_help("write a checkpoint every this many updates (None: by the model)"),
    )
    max_kl: float = field(
        default=None,  # type: ignore[assignment]
        metadata=_help(
            "a policy this far from the initial one (nats per token) has diverged: a warning "
            "naming --lr, and a run with a --target-accuracy stops there (inf: never; None: "
            "by the model, 1.0 for a pretrained one)"
        ),
    )
    out: str | None = field(
        default=None,
        metadata={"help": "run directory (None from Python: write nothing)", "metavar": "DIR"},
    )
    progress: bool = field(default=True, metadata=_help("progress bar (TTY) or log lines"))
    data_sha256: dict[str, str] = field(
        default_factory=dict,
        metadata=_help("SHA-256 of each data file's contents (set by the run: its identity)"),
    )

    def __post_init__(self) -> None:
        """Check every value once; a bad one is a ValueError naming the option and its flag."""
        # a KL row asked for, with β left to a table that says 0, would be silently no KL
        kl_without_beta = self.kl not in (None, "none") and self.beta is None
        column = BY_MODEL[policy_kind(self.model, self.lora_r)]
        # the settings left to a default: resolved again by `with_changes` (another column)
        self._defaulted = frozenset(
            n for n in ("kl", *column) if getattr(self, n) is None
        )  # fmt: skip
        self.kl = "reward-to-go" if self.kl is None else self.kl
        for name, value in column.items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        for f in dataclasses.fields(self):
            if f.name not in ("reward_weights", "lora_target_modules"):
                value = getattr(self, f.name)
                setattr(self, f.name, _checked(f.name, value, FinetuneConfig, INFINITE))
        # auto → the precision this device computes natively, saved concrete: a resume keeps it
        self.dtype = devices.resolved_dtype(self.dtype, self.device)
        self.reward_weights = _weights(self.reward_weights)
        self.lora_target_modules = _names(self.lora_target_modules)
        for name in ("prompts", "eval_prompts", "tokenizer", "out"):
            if getattr(self, name) is not None:
                setattr(self, name, os.path.abspath(getattr(self, name)))
        if self.model != "tiny" and (
            os.path.isdir(self.model) or self.model.lower().endswith(".gguf")
        ):
            self.model = os.path.abspath(self.model)
        self.task = _absolute_files(self.task)
        if self.eval_metric is not None:
            self.eval_metric = _absolute_files(self.eval_metric)
        t_max = self.max_completion_length
        for ok, name, rule in (
            (self.task.strip() != "", "task", "a task name or module:function"),
            (self.d_model >= 1 and self.n_layer >= 1 and self.n_head >= 1, "d_model", ">= 1"),
            (self.seed >= 0, "seed", ">= 0"),
            (self.group_size >= 2, "group_size", ">= 2 (a baseline needs the others)"),
            (self.prompts_per_batch >= 1, "prompts_per_batch", ">= 1"),
            (t_max is None or t_max >= 1, "max_completion_length", ">= 1"),
            (self.temperature > 0, "temperature", "> 0"),
            (self.lr > 0, "lr", "> 0"),
            (self.beta >= 0, "beta", ">= 0"),
            (
                not (kl_without_beta and self.beta == 0),
                "beta",
                f"given with --kl {self.kl}: a pretrained model's default β is 0, no KL term "
                "(give --beta B > 0, or leave --kl out)",
            ),
            (self.max_grad_norm is None or self.max_grad_norm > 0, "max_grad_norm", "> 0"),
            (self.epochs_per_batch >= 1, "epochs_per_batch", ">= 1"),
            (self.clip is None or 0 < self.clip < 1, "clip", "in (0, 1) or none"),
            (
                self.clip is None or self.epochs_per_batch > 1,
                "clip",
                "none with --epochs-per-batch 1 (it clips the ratio of the steps after the "
                "first on a batch, and K = 1 has none; give --epochs-per-batch K > 1)",
            ),
            (
                self.ratio == "sequence" or self.epochs_per_batch > 1,
                "ratio",
                "sequence with --epochs-per-batch 1 (it weights the steps after the first on a "
                "batch, and K = 1 has none; give --epochs-per-batch K > 1)",
            ),
            (self.lora_r is None or self.lora_r >= 1, "lora_r", ">= 1 or none"),
            (self.lora_alpha > 0, "lora_alpha", "> 0"),
            (0 <= self.lora_dropout < 1, "lora_dropout", "in [0, 1)"),
            (
                self.micro_batch_size is None or self.micro_batch_size >= 1,
                "micro_batch_size",
                ">= 1 or none",
            ),
            (self.max_updates >= 1, "max_updates", ">= 1"),
            (
                self.target_accuracy is None or 0 < self.target_accuracy <= 1,
                "target_accuracy",
                "in (0, 1] or none",
            ),
            (self.eval_every >= 0, "eval_every", ">= 0 (0: never)"),
            (self.eval_limit is None or self.eval_limit >= 1, "eval_limit", ">= 1 or none"),
            (self.reward_timeout > 0, "reward_timeout", "> 0"),
            (
                self.eval_prompts is None or self.prompts is not None,
                "eval_prompts",
                "given with --prompts (the built-in tasks have no held-out set)",
            ),
            (self.checkpoint_every >= 1, "checkpoint_every", ">= 1"),
            (self.max_kl > 0, "max_kl", "> 0 (inf: never)"),
            (self.out is None or self.out.strip() != "", "out", "a directory path, not empty"),
        ):
            if not ok:
                raise ValueError(
                    f"{name} ({flag(name)}) must be {rule}, got {getattr(self, name)!r}"
                )

    @property
    def kl_term(self) -> str:
        """The KL row the loss uses: ``kl``, or ``none`` where β = 0 (no term, no reference)."""
        return "none" if self.beta == 0 else self.kl

    def with_changes(self, **changes: Any) -> FinetuneConfig:
        """This config with ``changes``, what it left to a default resolved anew.

        ``dataclasses.replace`` would keep every resolved value, as if the user had given it:
        a LoRA config given from Python (``peft_config=``) must also move ``lr`` to the LoRA
        column of :data:`BY_MODEL` where the user left it to the table.
        """
        given = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in self._defaulted
        }
        return FinetuneConfig(**{**given, **changes})

    def to_dict(self) -> dict[str, Any]:
        """The config as JSON-ready values (tuples as lists, as JSON reads them back)."""
        d = dataclasses.asdict(self)
        d["reward_weights"] = list(self.reward_weights)
        d["lora_target_modules"] = list(self.lora_target_modules)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> FinetuneConfig:
        """Inverse of :meth:`to_dict`; unknown keys or values of the wrong type are ValueErrors."""
        if not isinstance(d, dict):
            raise ValueError(f"a config is a JSON object of settings, not a {type(d).__name__}")
        unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown config keys {unknown}")
        if "task" not in d:
            raise ValueError("the config has no 'task'")
        return cls(**d)


INFINITE = frozenset({"max_kl"})
"""The float settings that take +inf (``--max-kl inf``: never)."""


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
    dtype="auto",  # bf16 where the device computes it natively (lm.device.native_bf16)
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
seed 0, the partial-credit reward, 30 updates, r 16) by ``bench/lm/lm_real_defaults.py``'s rule
among 1e-4, 3e-4, 1e-3 and 3e-3: no rate reached an exact match there, and 1e-3 had the best
mean held-out reward (0.36 at update 30, against 0.18 at 1e-4); 1e-5, the full fine-tune's,
moves adapters of this scale too little (docs/lm.md, *Defaults by model*)."""


IDENTITY = frozenset(
    f.name
    for f in dataclasses.fields(FinetuneConfig)
    if f.name
    not in {
        "max_updates",
        "target_accuracy",
        "eval_every",
        "checkpoint_every",
        "progress",
        "out",
        "reward_timeout",
        "micro_batch_size",  # the same gradient at any M: a resume may change it
        "device",
    }
)
"""The fields that make a run what it is: a resume that gives another value is refused."""


def _weights(value: Any) -> tuple[float, ...]:
    """The reward weights as finite floats, or a ValueError naming --reward-weights."""
    try:
        out = tuple(float(w) for w in value)
    except (TypeError, ValueError):
        raise ValueError(
            f"reward_weights (--reward-weights) must be numbers, got {value!r}"
        ) from None
    if not all(math.isfinite(w) for w in out):
        raise ValueError(f"reward_weights (--reward-weights) must be finite, got {value!r}")
    return out


def _names(value: Any) -> tuple[str, ...]:
    """Module names as a tuple of strings (one string: split on commas and spaces)."""
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    try:
        out = tuple(str(v).strip() for v in value)
    except TypeError:
        raise ValueError(
            f"lora_target_modules (--lora-target-modules) must be module names, got {value!r}"
        ) from None
    if not all(out):
        raise ValueError(
            f"lora_target_modules (--lora-target-modules) has an empty name: {value!r}"
        )
    return out


def _absolute_files(specs: str) -> str:
    """``FILE.py:fn`` specs (comma-separated) with FILE made absolute: a resume elsewhere works."""
    out = []
    for spec in specs.split(","):
        where, sep, name = spec.strip().rpartition(":")
        if sep and (where.endswith(".py") or "/" in where):
            spec = f"{os.path.abspath(where)}:{name}"
        out.append(spec.strip())
    return ",".join(out)


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
        {"group": "group-std", "batch": "batch-std", "none": "none"},
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
        {"true": "bfloat16", "false": "float32", "True": "bfloat16", "False": "float32"},
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
}
"""TRL's GRPOConfig names → (our field, TRL value → ours, a note where not one to one)."""


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


def from_trl(name: str, value: str) -> tuple[str, str, str]:
    """(our field, our value, note) for TRL option ``name`` given ``value``.

    Raises:
        ValueError: an unknown name, or a value the mapping has no row for.
    """
    key = name.lstrip("-").replace("-", "_")
    if key not in TRL_ALIASES:
        raise ValueError(f"--{key} is not a TRL option finetune knows ({', '.join(TRL_ALIASES)})")
    field_name, values, note = TRL_ALIASES[key]
    if values is None:
        return field_name, value, note
    if value not in values:
        raise ValueError(f"--{key} {value!r}: TRL's values here are {', '.join(values)}")
    return field_name, values[value], note
