"""The policy network named by ``--model``, loaded in float32 with dropout off.

The built-in one, a Hugging Face directory, a GGUF file or a factory, checked against the task
and the machine.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import torch
from torch import nn

from eligibility._isolate import UserCodeError, Worker, load_function
from eligibility.lm import limits
from eligibility.lm.edge.hf import is_gguf, load_gguf_model, quiet
from eligibility.lm.model import TinyLM


def _factory_checked(spec: str) -> None:
    """In a worker: the factory imports, takes no argument and returns an ``nn.Module``."""
    factory = load_function(spec, example="mymodel.py:build")
    model = factory()
    if not isinstance(model, nn.Module):
        raise ValueError(
            f"--model {spec}: the factory returned {type(model).__name__}, not a torch nn.Module"
        )


def _from_factory(spec: str) -> nn.Module:
    """``factory()``, first tried in a protected worker, then called here (prints to stderr)."""
    worker = Worker(lambda _: None, setup=lambda: _factory_checked(spec))
    try:
        worker.start(timeout=600)
    except UserCodeError as err:
        raise ValueError(
            f"--model {spec}: the factory {err.text}; it must take no arguments and return a "
            "torch nn.Module"
        ) from None
    except ValueError as err:
        text = str(err) if str(err).startswith("--model") else f"--model {spec}: {err}"
        raise ValueError(text) from None
    finally:
        worker.close()
    with contextlib.redirect_stdout(sys.stderr):
        return load_function(spec)()


def _from_directory(path: str) -> nn.Module:
    try:
        from transformers import AutoModelForCausalLM
    except ModuleNotFoundError:
        raise ValueError(
            f"--model {path}: loading a Hugging Face model needs transformers; install it with "
            "pip install 'eligibility[lm]'"
        ) from None
    quiet()
    try:
        return AutoModelForCausalLM.from_pretrained(
            path, local_files_only=True, dtype=torch.float32
        )
    except Exception as err:  # a corrupt or truncated file raises many types
        msg = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise ValueError(
            f"--model {path}: not a loadable causal LM ({type(err).__name__}: {msg}); give a "
            "directory that AutoModelForCausalLM.from_pretrained loads"
        ) from None


def vocab_of(model: nn.Module) -> int:
    """The number of logits the model gives per position."""
    if isinstance(model, TinyLM):
        return model.vocab_size
    emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if emb is not None and hasattr(emb, "weight"):
        return int(emb.weight.shape[0])
    return int(model.config.vocab_size)


def build_model(
    spec: str,
    vocab_size: int,
    seed: int,
    *,
    d_model: int,
    n_layer: int,
    n_head: int,
    max_positions: int,
) -> nn.Module:
    """The policy network named by ``spec``, in float32, dropout off, initialised from ``seed``.

    ``tiny``: :class:`TinyLM` sized by the other arguments. A directory: Hugging Face
    ``from_pretrained`` on it (nothing downloaded). A ``.gguf`` file: transformers' GGUF loader,
    dequantised to float32 (:func:`eligibility.lm.edge.hf.load_gguf_model`). ``module:factory``:
    ``factory()`` returns the model (any ``nn.Module`` with the Hugging Face call convention).

    Raises:
        ValueError: the model cannot be built, or has fewer than ``vocab_size`` logits.
    """
    with torch.random.fork_rng(devices=[]):  # the caller's global RNG is left as it was
        torch.manual_seed(seed)
        if spec == "tiny":
            model: nn.Module = TinyLM(vocab_size, d_model, n_layer, n_head, max_positions)
        elif is_gguf(spec):
            model = load_gguf_model(spec)
        elif Path(spec).is_dir():
            model = _from_directory(spec)
        elif ":" in spec:
            model = _from_factory(spec)
        else:
            raise ValueError(
                f"--model {spec!r}: give tiny (the built-in transformer), a directory holding a "
                "Hugging Face causal LM, a GGUF file (path/model.gguf), or module:factory"
            )
    model = model.float()
    model.eval()  # dropout off: the sampler's and the trainer's log-probs must agree
    v = vocab_of(model)
    if v < vocab_size:
        raise ValueError(
            f"--model {spec}: its vocabulary has {v} tokens, the task needs {vocab_size}; give a "
            "model whose vocabulary holds the task's"
        )
    return model


def check_model_fits(model: torch.nn.Module, length: int, n: int, what: str, **sizes: int) -> None:
    """The model's positions hold prompt + completion, and one update fits the machine.

    ``n``: the sequences scored at once; ``sizes``: ``limits.update_bytes``'s ``copies`` and
    ``activation_bytes``.

    Raises:
        ValueError: too few positions, or an update of ``n`` sequences of ``length`` tokens
            needs more memory than the machine has (naming how much).
    """
    cfg = getattr(model, "config", None)
    positions = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    if isinstance(positions, int) and length > positions:
        raise ValueError(
            f"the model has {positions} positions, fewer than the {length} that the longest "
            "prompt + --max-completion-length need: shorten the prompts or lower "
            "--max-completion-length"
        )
    dims = {
        "d_model": int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "n_embd", 0) or 1),
        "n_layer": int(getattr(cfg, "num_hidden_layers", 0) or getattr(cfg, "n_layer", 0) or 1),
        "n_head": int(getattr(cfg, "num_attention_heads", 0) or getattr(cfg, "n_head", 0) or 1),
    }
    params = sum(p.numel() for p in model.parameters())
    whole = limits.gathered(*_root_and_blocks(model)) if sizes.get("shards", 1) > 1 else 0
    need = limits.update_bytes(
        n, length, **dims, vocab=vocab_of(model), params=params, gathered=whole, **sizes
    )
    limits.check_fits(need, what)


def _root_and_blocks(model: torch.nn.Module) -> tuple[int, list[int]]:
    """The parameters outside the blocks, and each block's, as ``ranks.shard`` shards them.

    A block is an item of one of the model's ``nn.ModuleList``s (each is sharded apart).
    """
    blocks = [b for m in model.modules() if isinstance(m, nn.ModuleList) for b in m]
    inside = {id(p) for b in blocks for p in b.parameters()}
    root = sum(p.numel() for p in model.parameters() if id(p) not in inside)
    return root, [sum(p.numel() for p in b.parameters()) for b in blocks]
