"""The one configuration of a fine-tuning run: the command line, the logs, the saved run."""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from eligibility._output import quoted
from eligibility.lm.defaults import CHOICES, resolve, still_defaulted
from eligibility.lm.importance import AUTO, MODES, TRL_CAP
from eligibility.lm.tasks import BUILTIN, SUCCESS_RETURN_HELP, TASK_HELP
from eligibility.runs import trackers
from eligibility.runs.resume import bad_value
from eligibility.runs.resume import checked as _checked
from eligibility.torch import options


def _help(text: str, **more: str) -> dict[str, str]:
    return {"help": text, **more}


# The choices are the option table's rows.
Baseline = Literal[options.names("baseline")]  # type: ignore[valid-type]
Scale = Literal[options.names("scale")]  # type: ignore[valid-type]
Aggregation = Literal[options.names("aggregation")]  # type: ignore[valid-type]
KL = Literal[options.names("kl")]  # type: ignore[valid-type]
Ratio = Literal[options.names("ratio")]  # type: ignore[valid-type]
DType = Literal["auto", "float32", "bfloat16"]
Defaults = Literal[CHOICES]  # type: ignore[valid-type]
Device = Literal["cpu", "cuda", "auto"]
ImportanceSampling = Literal[(AUTO, *MODES)]  # type: ignore[valid-type]
StaleBatches = Literal["wait", "drop"]


@dataclass
class FinetuneConfig:
    """Every setting of a REINFORCE fine-tuning run of a causal LM on a verifiable task."""

    task: str = field(metadata=_help(TASK_HELP))
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
    tools: str = field(
        default="",
        metadata=_help("tools the model may call, module:fn or FILE.py:fn,...", metavar="SPECS"),
    )
    environment_factory: str | None = field(
        default=None,
        metadata=_help(
            "TRL's environment_factory: module:Factory (one instance an episode: "
            "reset(**row), its public methods tools, get_reward() a reward), or "
            "name=module:Factory,... chosen by each row's environment field",
            flag="--env",
            metavar="FACTORY",
        ),
    )
    max_tool_calls: int = field(
        default=4,
        metadata=_help(
            "rounds of tool calls an episode may make (TRL's max_tool_calling_iterations)"
        ),
    )
    max_turns: int | None = field(
        default=None,
        metadata=_help(
            "replies an episode may have, tool calls or not (None: with tools --max-tool-calls "
            "+ 1; a Gymnasium environment runs to its own end, its max_episode_steps, else 100 "
            "replies against a world that never ends; guess: its game of 3 guesses)"
        ),
    )
    tool_timeout: float = field(
        default=60.0, metadata=_help("seconds one tool call, reset or get_reward may take")
    )
    max_env_workers: int | None = field(
        default=None,
        metadata=_help(
            "how many episodes' tool calls (or Gymnasium steps) of a turn run at once, each "
            "episode's in order (SkyRL's environment.skyrl_gym.max_env_workers; None: every "
            "live episode's; 1: one after another)"
        ),
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
    defaults: Defaults = field(
        default="auto",
        metadata=_help(
            "the column of per-model defaults (lr, G, prompts a batch, β, max KL, dtype): auto "
            "measures the model at load (its samples' entropy near ln V, as a model never "
            "trained: scratch; else pretrained; the tiny model: scratch), saved with the run; "
            "or pretrained, or scratch"
        ),
    )
    d_model: int = field(default=64, metadata=_help("tiny model: width"))
    n_layer: int = field(default=2, metadata=_help("tiny model: transformer blocks"))
    n_head: int = field(default=4, metadata=_help("tiny model: attention heads"))
    seed: int = field(default=0, metadata=_help("seed of the weights, prompts and samples"))
    group_size: int = field(
        default=None,  # type: ignore[assignment]
        metadata=_help(
            "G, completions sampled per prompt (None: by the model: 16 tiny, 8 pretrained)"
        ),
    )
    prompts_per_batch: int = field(
        default=None,  # type: ignore[assignment]
        metadata=_help("prompts per update (None: by the model: 8 tiny, 4 pretrained)"),
    )
    max_completion_length: int | None = field(
        default=None, metadata=_help("T_max, tokens per completion, EOS included (None: task's)")
    )
    temperature: float = field(
        default=1.0,
        metadata=_help("τ: completions are drawn from softmax(z/τ), the policy trained"),
    )
    top_k: int = field(
        default=0,
        metadata=_help(
            "sample among the k most probable tokens, renormalised (0: all); the policy trained "
            "is the distribution sampled (docs/sampling-and-guard.md)"
        ),
    )
    top_p: float = field(
        default=1.0,
        metadata=_help("sample among the fewest most probable tokens holding mass p (1: all)"),
    )
    min_p: float | None = field(
        default=None,
        metadata=_help("sample among the tokens of probability >= min_p x the top one's (none)"),
    )
    repetition_penalty: float = field(
        default=1.0,
        metadata=_help(
            "θ: a seen token's logit z becomes z/θ (z > 0) or z·θ before sampling (1: none)"
        ),
    )
    importance_sampling: ImportanceSampling = field(
        default=AUTO,
        metadata=_help(
            "none: train the distribution sampled; or train the full policy π on the sampler's "
            "q with TRL's weight w = π/q per token or sequence, truncated or masked at the cap; "
            "auto: sequence-mask where the run computes in bfloat16 and samples π_τ uncut "
            "(its sampler and scoring pass round apart), exact with --max-staleness k >= 1, "
            "else none; saved as the one chosen; "
            "exact: w = π(o)/q(o) unbounded (unbiased: the one for --max-staleness); "
            "token-icepop / geometric-mask: wₜ, or w by its geometric mean, kept in [1/C, C]"
        ),
    )
    importance_sampling_cap: float = field(
        default=TRL_CAP,
        metadata={"metavar": "C"}
        | _help("C of --importance-sampling: min(w, C) or w·1[w <= C] (inf: no bound)"),
    )
    max_staleness: int | None = field(
        default=None,
        metadata={"metavar": "K"}
        | _help(
            "k >= 0: a sampler process draws the next batches while the learner steps, each "
            "batch at most k updates older than the policy it trains (TRL's AsyncGRPOConfig "
            "max_staleness); 0: the alternating loop's rows through the two processes (None: "
            "one process alternates)"
        ),
    )
    stale_batches: StaleBatches = field(
        default="wait",
        metadata=_help(
            "with --max-staleness: wait (the sampler waits for the weights that keep a batch "
            "within k: deterministic, resumes exactly) or drop (it samples with the weights it "
            "holds; the learner drops a batch older than k, counted in async/dropped)"
        ),
    )
    weight_sync_timeout: float = field(
        default=600.0,
        metadata=_help(
            "with --max-staleness: seconds any wait between the sampler and the learner may "
            "take (its start, a batch, the weights); past it the run stops, the wait named"
        ),
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
            "pass, as TRL's beta=0 (None: by the model: 0.02 tiny, 0 pretrained)"
        ),
    )
    epochs_per_batch: int = field(
        default=None,  # type: ignore[assignment]
        metadata={"min": 1}
        | _help(
            "K, optimiser steps on each generation batch (TRL num_iterations); steps after the "
            "first are off-policy, weighted by --ratio (None: by the model: 2 pretrained, 1 "
            "from scratch or under LoRA)"
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
            "float32 tiny, auto pretrained)"
        ),
    )
    device: Device = field(
        default="auto",
        metadata=_help("where every tensor of the run lives: cpu, cuda, or auto (cuda if any)"),
    )
    compile_decode: bool = field(
        default=False,
        metadata=_help(
            "compile the sampler's captured decode step with torch.compile (inductor's fused "
            "kernels inside its CUDA graph): fewer kernels a token, paid for by a compile once "
            "a run (and once more at a new prompt length). The captured step is held back "
            "until a GPU shows it exact (on an H200 it ended rows early): today this does "
            "nothing, and says so"
        ),
    )
    fsdp: bool = field(
        default=False,
        metadata=_help(
            "under a launcher (torchrun), shard the weights, gradients and Adam's moments over "
            "the ranks with FSDP2 (torch.distributed.fsdp.fully_shard): a model too large for one "
            "device; the same updates as without"
        ),
    )
    max_updates: int = field(
        default=400,
        metadata=_help("stop after this many updates (generation batches, K optimiser steps each)"),
    )
    target_accuracy: float | None = field(
        default=0.95,
        metadata=_help("stop when the greedy accuracy on the task's prompts reaches this (none)"),
    )
    success_return: float | None = field(default=None, metadata=_help(SUCCESS_RETURN_HELP))
    eval_every: int = field(
        default=None,  # type: ignore[assignment]
        metadata=_help(
            "greedy evaluation every this many updates (0: never; None: by the model, 10)"
        ),
    )
    eval_on_start: bool = field(
        default=False,
        metadata=_help(
            "a greedy evaluation before the first update too (TRL's eval_on_start): the "
            "starting accuracy, on stderr and in the result"
        ),
    )
    checkpoint_every: int = field(
        default=None,  # type: ignore[assignment]
        metadata=_help("write a checkpoint every this many updates (None: by the model)"),
    )
    max_kl: float = field(
        default=None,  # type: ignore[assignment]
        metadata=_help(
            "past this distance from the initial policy (nats per token) a fallen held-out "
            "score, a collapsed batch reward or entropy is a wreck: a warning, and a run with a "
            "--target-accuracy stops, checkpointed (inf: never; None: by the model, 1.0 for a "
            "pretrained one)"
        ),
    )
    out: str | None = field(
        default=None,
        metadata={"help": "run directory (None from Python: write nothing)", "metavar": "DIR"},
    )
    progress: bool = field(default=True, metadata=_help("progress bar (TTY) or log lines"))
    report_to: tuple[str, ...] = field(
        default=("tensorboard",),
        metadata=_help("the scalars' trackers: tensorboard, wandb, trackio, several or none"),
    )
    data_sha256: dict[str, str] = field(
        default_factory=dict,
        metadata=_help("SHA-256 of each data file's contents (set by the run: its identity)"),
    )
    model_entropy: dict[str, float] = field(
        default_factory=dict,
        metadata=_help(
            "set by the run where --defaults auto measured the model: the entropy of its "
            "samples and ln V, nats per token (lm.defaults.measured_column)"
        ),
    )
    defaulted: tuple[str, ...] = field(
        default=(),
        metadata=_help(
            "set by the config: the settings left to the model's column, resolved anew when "
            "the column changes (with_changes)"
        ),
    )

    def __post_init__(self) -> None:
        """Resolve what was left to the model's column, then check every value once.

        A bad value is a ValueError naming the option and its flag.
        """
        kl_without_beta = self.kl not in (None, "none") and self.beta is None
        carried = self.defaulted  # a copy's (dataclasses.replace, a saved run's)
        left = resolve(self)  # the settings left to a default, filled
        _normalise(self)
        _check(self, kl_without_beta)
        still = still_defaulted(self, carried)
        self.defaulted = tuple(sorted(left | still))

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
            if f.name not in (*self.defaulted, "defaulted")
        }
        return FinetuneConfig(**{**given, **changes})

    def given(self) -> dict[str, Any]:
        """The settings the user gave: what a resume holds against the run's.

        Every field but those left to the model's column, ``--defaults auto``, ``--dtype
        auto`` and ``--importance-sampling auto`` (the run's measured or resolved choice
        stands), and what the run sets itself
        (``out``, the data's SHA-256, the measured entropy, this list).
        """
        record = {"out", "data_sha256", "model_entropy", "defaulted", *self.defaulted}
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in record
            and not (
                f.name in ("defaults", "dtype", "importance_sampling")
                and getattr(self, f.name) == "auto"
            )
        }

    def to_dict(self) -> dict[str, Any]:
        """The config as JSON-ready values (tuples as lists, as JSON reads them back)."""
        d = dataclasses.asdict(self)
        d["reward_weights"] = list(self.reward_weights)
        d["lora_target_modules"] = list(self.lora_target_modules)
        d["report_to"] = list(self.report_to)
        d["defaulted"] = list(self.defaulted)
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


def _normalise(config: FinetuneConfig) -> None:
    """Each value in its one form: types checked, paths absolute."""
    for f in dataclasses.fields(config):
        if f.name not in ("reward_weights", "lora_target_modules", "report_to", "defaulted"):
            value = getattr(config, f.name)
            setattr(config, f.name, _checked(f.name, value, FinetuneConfig, INFINITE))
    config.reward_weights = _weights(config.reward_weights)
    config.lora_target_modules = _names(config.lora_target_modules)
    config.report_to = trackers.names(config.report_to)
    for name in ("prompts", "eval_prompts", "tokenizer", "out"):
        if getattr(config, name) is not None:
            setattr(config, name, os.path.abspath(getattr(config, name)))
    if config.model != "tiny" and (
        os.path.isdir(config.model) or config.model.lower().endswith(".gguf")
    ):
        config.model = os.path.abspath(config.model)
    config.task = _absolute_files(config.task)
    config.tools = _absolute_files(config.tools)
    if config.environment_factory is not None:
        config.environment_factory = _absolute_files(config.environment_factory)
    if config.eval_metric is not None:
        config.eval_metric = _absolute_files(config.eval_metric)


def _check(config: FinetuneConfig, kl_without_beta: bool) -> None:
    """A ValueError naming the first setting out of its range, its flag and the rule.

    ``kl_without_beta``: a KL row was asked for with β left to a column that says 0 (it would
    silently be no KL).
    """
    for ok, name, rule in (*_sampling_rules(config, kl_without_beta), *_run_rules(config)):
        if not ok:
            raise ValueError(bad_value(name, rule, getattr(config, name), FinetuneConfig))


def _sampling_rules(config: FinetuneConfig, kl_without_beta: bool) -> list[tuple[bool, str, str]]:
    """(holds, setting, rule) of the model, the sampler and the loss."""
    t_max = config.max_completion_length
    return [
        (config.task.strip() != "", "task", "a task name or module:function"),
        (config.d_model >= 1 and config.n_layer >= 1 and config.n_head >= 1, "d_model", ">= 1"),
        (config.seed >= 0, "seed", ">= 0"),
        (config.group_size >= 2, "group_size", ">= 2 (a baseline needs the others)"),
        (config.prompts_per_batch >= 1, "prompts_per_batch", ">= 1"),
        (t_max is None or t_max >= 1, "max_completion_length", ">= 1"),
        (config.temperature > 0, "temperature", "> 0"),
        (config.top_k >= 0, "top_k", ">= 0 (0: off)"),
        (0 < config.top_p <= 1, "top_p", "in (0, 1] (1: off)"),
        (
            config.min_p is None or 0 <= config.min_p < 1,
            "min_p",
            "in [0, 1) or none (1 keeps the most probable token only: a greedy sampler, whose "
            "kept sets hold one token and whose scores are 0)",
        ),
        (config.repetition_penalty > 0, "repetition_penalty", "> 0 (1: off)"),
        (config.importance_sampling_cap > 0, "importance_sampling_cap", "> 0 (inf: no bound)"),
        (config.lr > 0, "lr", "> 0"),
        (config.beta >= 0, "beta", ">= 0"),
        (
            not (kl_without_beta and config.beta == 0),
            "beta",
            f"given with --kl {config.kl}: a pretrained model's default β is 0, no KL term "
            "(give --beta B > 0, or leave --kl out)",
        ),
        (config.max_grad_norm is None or config.max_grad_norm > 0, "max_grad_norm", "> 0"),
        (config.epochs_per_batch >= 1, "epochs_per_batch", ">= 1"),
        (config.clip is None or 0 < config.clip < 1, "clip", "in (0, 1) or none"),
        (
            config.clip is None or config.epochs_per_batch > 1,
            "clip",
            "none with --epochs-per-batch 1 (it clips the ratio of the steps after the "
            "first on a batch, and K = 1 has none; give --epochs-per-batch K > 1)",
        ),
        (
            config.ratio == "sequence" or config.epochs_per_batch > 1,
            "ratio",
            "sequence with --epochs-per-batch 1 (it weights the steps after the first on a "
            "batch, and K = 1 has none; give --epochs-per-batch K > 1)",
        ),
    ]


def _run_rules(config: FinetuneConfig) -> list[tuple[bool, str, str]]:
    """(holds, setting, rule) of the adapters, the batch, the budget and the run's files."""
    return [
        (config.lora_r is None or config.lora_r >= 1, "lora_r", ">= 1 or none"),
        (config.lora_alpha > 0, "lora_alpha", "> 0"),
        (0 <= config.lora_dropout < 1, "lora_dropout", "in [0, 1)"),
        (
            config.micro_batch_size is None or config.micro_batch_size >= 1,
            "micro_batch_size",
            ">= 1 or none",
        ),
        (config.max_updates >= 1, "max_updates", ">= 1"),
        (config.max_staleness is None or config.max_staleness >= 0, "max_staleness", ">= 0"),
        (
            0 < config.weight_sync_timeout <= MAX_TIMEOUT_S,
            "weight_sync_timeout",
            "> 0 and at most 1e7 s",
        ),
        (
            config.target_accuracy is None or 0 < config.target_accuracy <= 1,
            "target_accuracy",
            "in (0, 1] or none",
        ),
        (config.eval_every >= 0, "eval_every", ">= 0 (0: never)"),
        (config.eval_limit is None or config.eval_limit >= 1, "eval_limit", ">= 1 or none"),
        # at most MAX_TIMEOUT_S: past the platform's time_t, a thread's wait overflowed (90)
        (0 < config.reward_timeout <= MAX_TIMEOUT_S, "reward_timeout", "> 0 and at most 1e7 s"),
        (0 < config.tool_timeout <= MAX_TIMEOUT_S, "tool_timeout", "> 0 and at most 1e7 s"),
        (config.max_tool_calls >= 0, "max_tool_calls", ">= 0"),
        (
            config.max_env_workers is None or config.max_env_workers >= 1,
            "max_env_workers",
            ">= 1 or none",
        ),
        (config.max_turns is None or config.max_turns >= 1, "max_turns", ">= 1"),
        (
            config.eval_prompts is None or config.prompts is not None,
            "eval_prompts",
            "given with --prompts (the built-in tasks have no held-out set)",
        ),
        (
            config.tokenizer is None or config.task not in BUILTIN,
            "tokenizer",
            f"none with the built-in task {config.task} (its tokens are its characters: it reads "
            "no tokenizer); leave --tokenizer out, or give your own task with --prompts",
        ),
        (config.checkpoint_every >= 1, "checkpoint_every", ">= 1"),
        (config.max_kl > 0, "max_kl", "> 0 (inf: never)"),
        (config.out is None or config.out.strip() != "", "out", "a directory path, not empty"),
    ]


MAX_TIMEOUT_S = 1e7
"""The longest ``--reward-timeout`` and ``--tool-timeout`` taken (some four months): a call's
thread cannot wait 1e308 s (``OverflowError``), and a call that takes longer has hung."""

INFINITE = frozenset({"max_kl", "importance_sampling_cap"})
"""The float settings that take +inf (``--max-kl inf``: never; a cap of none)."""


IDENTITY = frozenset(
    f.name
    for f in dataclasses.fields(FinetuneConfig)
    if f.name
    not in {
        "max_updates",
        "target_accuracy",
        "success_return",  # what the accuracy counts, as the target is: no update changes
        "eval_every",
        "eval_on_start",
        "checkpoint_every",
        "progress",
        "out",
        "reward_timeout",
        "tool_timeout",
        "max_env_workers",  # how many calls at once, not which: a resume may change it
        "weight_sync_timeout",  # how long a wait may take, not what is learned
        "micro_batch_size",  # the same gradient at any M: a resume may change it
        "report_to",
        "lr",  # a run the guard stopped goes on with another rate (Adam's moments kept)
        "max_kl",  # or with the guard moved
        "device",
        "fsdp",  # the same updates sharded or not: a resume may change it
        "compile_decode",  # the same step's kernels fused: a resume may change it
        "model_entropy",  # the run's record of its measurement (``defaults`` holds the choice)
        "defaulted",
    }
)
"""The fields that make a run what it is: a resume that gives another value is refused."""


def _weights(value: Any) -> tuple[float, ...]:
    """The reward weights as finite floats, or a ValueError naming --reward-weights."""
    try:
        out = tuple(float(w) for w in value)
    except (TypeError, ValueError):
        raise ValueError(
            f"reward_weights (--reward-weights) must be numbers, got {quoted(value)}"
        ) from None
    if not all(math.isfinite(w) for w in out):
        raise ValueError(f"reward_weights (--reward-weights) must be finite, got {quoted(value)}")
    return out


def _names(value: Any) -> tuple[str, ...]:
    """Module names as a tuple of strings (one string: split on commas and spaces)."""
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    try:
        out = tuple(str(v).strip() for v in value)
    except TypeError:
        raise ValueError(
            f"lora_target_modules (--lora-target-modules) must be module names, got {quoted(value)}"
        ) from None
    if not all(out):
        raise ValueError(
            f"lora_target_modules (--lora-target-modules) has an empty name: {quoted(value)}"
        )
    bad = [n for n in out if not _MODULE_NAME.fullmatch(n)]
    if bad:  # peft matches each name against the end of the model's dotted module names
        raise ValueError(
            f"lora_target_modules (--lora-target-modules) must be module names (letters, digits, "
            f"_ and - between dots: q_proj, layers.0.mlp, all-linear), got {quoted(bad[0])}: "
            "peft takes each as the end of a module's name, never a pattern"
        )
    return out


_MODULE_NAME = re.compile(r"[\w-]+(?:\.[\w-]+)*")


def _absolute_files(specs: str) -> str:
    """``FILE.py:fn`` specs (comma-separated) with FILE made absolute: a resume elsewhere works."""
    out = []
    for spec in specs.split(","):
        key, eq, spec = spec.strip().rpartition("=")  # --env's name=module:Factory kept
        where, sep, name = spec.rpartition(":")
        if sep and (where.endswith(".py") or "/" in where):
            spec = f"{os.path.abspath(where)}:{name}"
        out.append(key + eq + spec.strip())
    return ",".join(out)
