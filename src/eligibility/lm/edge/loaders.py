"""The policy network named by ``--model``, loaded in float32 with dropout off.

The built-in one, a Hugging Face directory, a GGUF file or a factory, checked against the task
and the machine.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from eligibility._isolate import UserCodeError, Worker, load_function
from eligibility._output import quoted
from eligibility.lm.edge.hf import is_gguf, load_directory_model, load_gguf_model
from eligibility.lm.edge.model import TinyLM, tiny_params


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


def vocab_of(model: nn.Module) -> int:
    """The number of logits the model gives per position.

    Read from its output embedding (``get_output_embeddings()``), else ``config.vocab_size``,
    as a Hugging Face causal LM declares both.

    Raises:
        ValueError: a model that declares neither (a factory's own ``nn.Module``).
    """
    if isinstance(model, TinyLM):
        return model.vocab_size
    emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if emb is not None and hasattr(emb, "weight"):
        return int(emb.weight.shape[0])
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    if isinstance(size, int) and not isinstance(size, bool):
        return size
    raise ValueError(
        f"the model ({type(model).__name__}) declares no vocabulary (no "
        "get_output_embeddings(), no config.vocab_size): a factory must return a Hugging Face "
        "causal LM, as a transformers PreTrainedModel is"
    )


def model_kind(spec: str) -> str:
    """What ``--model`` names: ``tiny``, ``gguf`` (a file), ``directory`` or ``factory``.

    Read from the spec alone (nothing is loaded), so that a command can refuse a model that
    cannot be one before it says anything else.

    Raises:
        ValueError: a spec that is none of them (a file that is not GGUF, a missing path).
    """
    if spec == "tiny":
        return "tiny"
    if is_gguf(spec):
        return "gguf"
    if Path(spec).is_dir():
        return "directory"
    if ":" in spec:
        return "factory"
    path = Path(spec)
    what = (
        "a file that is not GGUF"
        if path.exists()
        else "no such directory"
        if path.parent != Path() or spec.startswith(".")  # written as a path
        else "not a model"
    )
    raise ValueError(
        f"--model {quoted(spec)}: {what}; give tiny (the built-in transformer), a directory "
        "holding a Hugging Face causal LM, a GGUF file (path/model.gguf), or module:factory"
    )


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
        kind = model_kind(spec)
        if kind == "tiny":
            model: nn.Module = TinyLM(vocab_size, d_model, n_layer, n_head, max_positions)
        elif kind == "factory":
            model = _from_factory(spec)
        elif kind == "gguf":
            model = load_gguf_model(spec)
        else:  # a Hugging Face directory
            model = load_directory_model(spec)
    model = model.float()
    model.eval()  # dropout off: the sampler's and the trainer's log-probs must agree
    try:
        v = vocab_of(model)
    except ValueError as err:
        raise ValueError(f"--model {spec}: {err}") from None
    if v < vocab_size:
        raise ValueError(
            f"--model {spec}: its vocabulary has {v} tokens, the task needs {vocab_size}; give a "
            "model whose vocabulary holds the task's"
        )
    return model


@dataclass(frozen=True)
class Dims:
    """A model's sizes as the estimate reads them (``lm.limits.Sizes`` says what each is).

    Read off a built model (:func:`dims_of`) or, before it is built, the built-in one's config.
    """

    vocab: int
    d_model: int
    n_layer: int
    n_head: int
    params: int
    positions: int | None = None
    root: int = 0
    blocks: tuple[int, ...] = ()

    @classmethod
    def tiny(cls, vocab: int, positions: int, *, d_model: int, n_layer: int, n_head: int) -> Dims:
        """The built-in transformer's, before it is built (:func:`tiny_params`)."""
        block = 12 * d_model**2 + 13 * d_model
        params = tiny_params(vocab, positions, d_model=d_model, n_layer=n_layer)
        return cls(
            vocab,
            d_model,
            n_layer,
            n_head,
            params,
            positions,
            params - n_layer * block,
            (block,) * n_layer,
        )


def load(spec: str, vocab_size: int, seed: int, **sizes: int) -> tuple[nn.Module, Dims]:
    """:func:`build_model` and its sizes (:func:`dims_of`): the set-up's one call here.

    Raises:
        ValueError: as :func:`build_model`, or a model with fewer positions than
            ``max_positions``, the longest prompt + T_max.
    """
    model = build_model(spec, vocab_size, seed, **sizes)
    dims, length = dims_of(model), sizes["max_positions"]
    if dims.positions is not None and length > dims.positions:
        raise ValueError(
            f"the model has {dims.positions} positions, fewer than the {length} that the "
            "longest prompt + --max-completion-length need: shorten the prompts or lower "
            "--max-completion-length"
        )
    return model, dims


def dims_of(model: nn.Module) -> Dims:
    """The sizes ``lm.limits`` reads, from a built model (its config where it has one).

    The blocks are the items of the model's ``nn.ModuleList``s, as ``ranks.shard`` shards
    them; the root is every parameter outside them.
    """
    cfg = getattr(model, "config", None)
    positions = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    blocks = [b for m in model.modules() if isinstance(m, nn.ModuleList) for b in m]
    inside = {id(p) for b in blocks for p in b.parameters()}
    if isinstance(model, TinyLM):
        heads = [b.n_head for b in model.blocks][:1] or [1]
        shape = (model.tok.embedding_dim, len(model.blocks), heads[0])
        positions = model.max_positions
    else:
        shape = tuple(
            int(getattr(cfg, a, 0) or getattr(cfg, b, 0) or 1)
            for a, b in (
                ("hidden_size", "n_embd"),
                ("num_hidden_layers", "n_layer"),
                ("num_attention_heads", "n_head"),
            )
        )
    return Dims(
        vocab_of(model),
        *shape,
        params=sum(p.numel() for p in model.parameters()),
        positions=positions if isinstance(positions, int) else None,
        root=sum(p.numel() for p in model.parameters() if id(p) not in inside),
        blocks=tuple(sum(p.numel() for p in b.parameters()) for b in blocks),
    )
