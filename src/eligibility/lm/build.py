"""A run's task and policy, built and checked before anything is written: the model's set-up.

The sizes are checked against the machine before the model is built (``lm.limits``: the
sequences scored at once, LoRA's and bfloat16's footprints), ``--lora-r`` puts adapters on it
(``lm.edge.lora``), it is placed on ``--device`` in ``--dtype`` as a
:class:`~eligibility.lm.policy.Policy`, and a Hugging Face model is probed with the causal-LM
call the sampler gives it (its forward chosen and held there, once).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import torch

from eligibility.lm import limits
from eligibility.lm.config import FinetuneConfig
from eligibility.lm.edge import device as devices
from eligibility.lm.edge import lora
from eligibility.lm.edge.loaders import build_model, check_model_fits, vocab_of
from eligibility.lm.edge.ranks import Ranks
from eligibility.lm.policy import Policy
from eligibility.lm.sample import sample
from eligibility.lm.tasks import Task
from eligibility.lm.usertask import make_task


def task_and_model(config: FinetuneConfig, **user: Any) -> tuple[Task, torch.nn.Module, int]:
    """The run's task, its freshly initialised model and T_max (ValueErrors for bad input).

    ``user``: ``reward_funcs`` and ``records`` from Python (see ``usertask.make_task``). Sizes
    that cannot fit the machine are refused before the model is built (``lm.limits``).
    """
    task = make_task(config, **user)
    try:
        t_max = config.max_completion_length or task.max_completion_length
        longest = max(len(p) for p in (*task.prompts, *task.evaluation.prompts))
        n, length = config.prompts_per_batch * config.group_size, longest + t_max
        what = (
            f"a batch of N = {n} sequences of {length} tokens (the longest prompt, {longest}, "
            f"+ T_max {t_max})"
        )
        # -- sizes: M sequences scored at once, LoRA's and bf16's footprints (lm.limits) --
        at_once = min(n, config.micro_batch_size or n)
        sizes = limits.sizes(
            lora=config.lora_r is not None,
            dtype=config.dtype,
            reference=config.kl_term != "none",
        )
        if config.model == "tiny":
            dims = {"d_model": config.d_model, "n_layer": config.n_layer}
            params = limits.tiny_params(task.vocab_size, length, **dims)
            need = limits.update_bytes(
                at_once,
                length,
                **dims,
                **sizes,
                n_head=config.n_head,
                vocab=task.vocab_size,
                params=params,
            )
            limits.check_fits(need, f"--d-model {config.d_model} with {what}")
        model = build_model(
            config.model,
            task.vocab_size,
            config.seed,
            d_model=config.d_model,
            n_layer=config.n_layer,
            n_head=config.n_head,
            max_positions=length,
        )
        if config.model != "tiny":
            check_model_fits(model, length, at_once, what, **sizes)
        if task.tokenizer is not None:  # the whole vocabulary of the model (no first-V slice)
            v = vocab_of(model)
            held = task.held_out and dataclasses.replace(task.held_out, n_tokens=v)
            task = dataclasses.replace(task, n_tokens=v, held_out=held)
        if config.lora_r is not None:  # -- LoRA adapters on the frozen model (lm.edge.lora) --
            model = lora.wrap(
                model,
                r=config.lora_r,
                alpha=config.lora_alpha,
                dropout=config.lora_dropout,
                targets=config.lora_target_modules,
                seed=config.seed,
            )
    except BaseException:
        task.close()
        raise
    return task, model, t_max


def task_and_policy(config: FinetuneConfig, **user: Any) -> tuple[Task, Policy, int]:
    """The run's task, its policy on ``--device`` in ``--dtype``, and T_max (ValueErrors).

    A model that is not the built-in one is probed with the sampler's call here, so its
    forward (``lm.edge.forward``) is chosen and held once, on the adapters as wrapped.
    """
    task, model, t_max = task_and_model(config, **user)
    try:
        where = devices.resolve(config.device)
        ranks = Ranks.from_env(where.type)  # the launcher's ranks, or this process alone
        n = config.prompts_per_batch * config.group_size
        if n < ranks.world or (config.fsdp and n % ranks.world):
            need = "a multiple of" if config.fsdp else "at least"
            raise ValueError(
                f"a batch of {n} sequences (--prompts-per-batch x --group-size) cannot be "
                f"shared by {ranks.world} ranks: give {need} {ranks.world} sequences"
                + (" (--fsdp: every rank runs the same passes)" if config.fsdp else "")
            )
        if where.type == "cuda" and ranks.world > 1:
            where = torch.device("cuda", ranks.local)  # one device a local rank
        keep = config.kl_term != "none"  # the KL's frozen initial policy
        policy = Policy(model, where, config.dtype, ranks, config.fsdp, reference=keep)
        if config.model != "tiny":
            _probe(policy, task, config.model)
    except BaseException:
        task.close()
        raise
    return task, policy, t_max


def check_task(config: FinetuneConfig) -> None:
    """A sweep's check of a ``finetune`` config: its task and model are built once, here.

    An unknown task, a prompt file that does not parse, a reward that cannot score, or a model
    that cannot be built is one error before any run starts, not one per run later.

    Raises:
        ValueError: naming the task or the model.
    """
    task_and_policy(config)[0].close()  # a user's task holds reward workers


def _probe(policy: Policy, task: Task, spec: str) -> None:
    """Two greedy tokens of a padded batch: the model takes the causal-LM call (and cache).

    Raises:
        ValueError: it does not (a model that ``AutoModelForCausalLM`` loads yet is not a
            decoder, say BERT's LM head), naming the model and the error.
    """
    try:
        first = task.prompts[0]  # and a shorter one: a padded batch, as the run samples
        with warnings.catch_warnings():  # a model's warnings about this call: the error says it
            warnings.simplefilter("ignore")
            with policy.precision():
                sample(policy, [first, first[-1:]], vocab_size=task.vocab_size, max_new_tokens=2)
    except Exception as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        raise ValueError(
            f"--model {spec}: it does not run as a causal LM with a KV cache "
            f"({type(err).__name__}: {first}); give a decoder-only causal LM"
        ) from None
