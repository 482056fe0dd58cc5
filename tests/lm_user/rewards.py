"""Reward functions and model factories that the finetune tests name as module:function."""

from __future__ import annotations

import math


def echo(prompts, completions, completion_ids, answer=None, **kw):
    """1 when a completion is its record's answer (or the prompt itself), else 0 (TRL's form)."""
    answer = answer or [None] * len(prompts)
    return [float(c == (a or p)) for p, c, a in zip(prompts, completions, answer, strict=True)]


def stop_at_once(prompts, completions, **kw):
    """1 for the empty completion (EOS first), less the longer it runs: learnt in a few updates."""
    return [1.0 / (1 + len(c)) for c in completions]


def zero(prompts, completions, **kw):
    """0 whatever the completion: every group's rewards tie."""
    return [0.0] * len(completions)


def one(prompts, completions, **kw):
    """1 whatever the completion: every completion correct, a solved task."""
    return [1.0] * len(completions)


def raises(prompts, completions, **kw):
    raise KeyError("no such answer")


def nan(prompts, completions, **kw):
    return [math.nan] * len(completions)


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(
        GPT2Config(
            vocab_size=24,
            n_positions=32,
            n_embd=32,
            n_layer=2,
            n_head=2,
            bos_token_id=1,
            eos_token_id=0,
        )
    )


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=24,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=32,
            bos_token_id=1,
            eos_token_id=0,
        )
    )


def small_vocab_model():
    from eligibility.lm.edge.model import TinyLM

    return TinyLM(vocab_size=4)


_later = [0]


def raises_later(prompts, completions, **kw):
    """Scores the run's first batch, then the grader is down."""
    _later[0] += 1
    if _later[0] > 1:
        raise RuntimeError("the grader is down")
    return [1.0] * len(completions)


_calls = [0]


def fails_on_the_fourth_call(prompts, completions, **kw):
    """Scores three calls, then the grader is down."""
    _calls[0] += 1
    if _calls[0] >= 4:
        raise RuntimeError("the grader is down")
    return [float(len(c) % 2) for c in completions]
