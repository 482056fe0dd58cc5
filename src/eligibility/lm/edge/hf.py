"""The user's Hugging Face world at the edge: their tokenizer, chat template, and export.

Everything that touches ``transformers`` tokenizers lives here and turns the user's prompts
into our token ids once; the sampler and the trainer only ever see ids.

- A standard prompt (text) is encoded as ``tokenizer(prompt)["input_ids"]``: the tokenizer's
  own special tokens are added as it adds them (a BOS, for a Llama tokenizer), as TRL does.
- A conversational prompt (a list of ``{"role", "content"}`` messages) goes through the
  tokenizer's chat template with ``add_generation_prompt=True``, tokenized by the template.
- A completion reaches the reward decoded with ``tokenizer.decode(ids,
  skip_special_tokens=True)``, where ``ids`` are its tokens up to and without its EOS: every
  special token (EOS, BOS, pad, and any token the tokenizer marks special) is dropped from the
  text, as TRL's ``batch_decode(..., skip_special_tokens=True)`` does. ``completion_ids`` keep
  the EOS when the completion stopped at one (TRL's convention too).
- A model saved in a directory (``--model DIR``) is loaded by ``from_pretrained``, nothing
  downloaded (:func:`load_directory_model`).
- A GGUF file (llama.cpp's and Ollama's format, ``--model path/model.gguf``) is read by
  transformers' GGUF loader: its tokenizer and chat template from the file's metadata, its
  weights dequantised to float32 (:func:`load_gguf_model`).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Prompt = str | list[dict[str, str]]
"""A prompt as the user's data holds it: text, or conversational messages."""


def hugging_face(library: str, where: str, need: str) -> Any:
    """The Hugging Face library ``library``, imported.

    Raises:
        ValueError: it is not installed (the text: ``where``: ``need``, and how to install it).
    """
    try:
        return importlib.import_module(library)
    except ModuleNotFoundError:
        raise ValueError(
            f"{where}: {need}; install it with pip install 'eligibility[lm]'"
        ) from None


def _transformers(option: str, path: str) -> Any:
    transformers = hugging_face(
        "transformers", f"{option} {path}", "a Hugging Face tokenizer needs transformers"
    )
    quiet()
    return transformers


def quiet() -> None:
    """transformers' info lines and progress bars off: stderr holds our progress alone."""
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


def is_gguf(spec: str) -> bool:
    """``spec`` names a GGUF file (a path ending in ``.gguf``), not a directory or a factory."""
    return spec.lower().endswith(".gguf")


def _gguf_file(path: str, option: str) -> dict[str, Any]:
    """``from_pretrained``'s arguments for the GGUF file at ``path`` (its folder and its name).

    Raises:
        ValueError: no such file, or the ``gguf``/``accelerate`` packages transformers' GGUF
            loader needs are missing.
    """
    import importlib.util

    file = Path(path)
    if not file.is_file():
        raise ValueError(f"{option} {path}: no such GGUF file")
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise ValueError(
            f"{option} {path}: reading a GGUF file needs the {' and '.join(missing)} "
            "package(s); install them with pip install 'eligibility[lm]'"
        )
    return {
        "pretrained_model_name_or_path": str(file.parent),
        "gguf_file": file.name,
        "local_files_only": True,
    }


def _whole(path: str, option: str) -> None:
    """After a load failed: a GGUF file cut short or corrupt is said so, as a ValueError.

    transformers' GGUF loader (and its tokenizer converter) fails on a file cut short, an
    interrupted download or copy, with whatever its parser met first (a ``reshape`` of too few
    bytes, an ``unpack_from`` past the end), which reads as a missing tokenizer or an
    unsupported model. The ``gguf`` package's reader lays the header, the metadata and every
    tensor's bytes over the file: where it cannot, the file is not whole, and the user is told
    so. Asked only after a load failed: the reader walks every metadata entry (a tokenizer's
    vocabulary, 10⁵ strings) and would double a good file's load time.
    """
    if not is_gguf(path):
        return
    import gguf

    try:
        gguf.GGUFReader(path, "r")
    except Exception as err:  # its parser raises ValueError, struct.error, IndexError, …
        raise ValueError(
            f"{option} {path}: the file is truncated or corrupt ({os.path.getsize(path)} bytes, "
            f"and the gguf reader stops: {_first_line(err)[:160]}); download or convert it again"
        ) from None


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:200]


def load_tokenizer(path: str, option: str = "--model") -> Any:
    """``AutoTokenizer.from_pretrained(path, local_files_only=True)``, with an EOS.

    ``path`` is a directory, or a GGUF file whose metadata holds the tokenizer (its vocabulary,
    merges, special tokens and chat template; transformers converts it to a fast tokenizer).

    Raises:
        ValueError: ``path`` holds no tokenizer, or one without an EOS token.
    """
    transformers = _transformers(option, path)
    if is_gguf(path):
        where = _gguf_file(path, option)
    elif Path(path).is_dir():
        where = {"pretrained_model_name_or_path": path, "local_files_only": True}
    else:
        raise ValueError(f"{option} {path}: no such directory")
    try:
        tok = transformers.AutoTokenizer.from_pretrained(**where)
    except Exception as err:  # transformers raises OSError, ValueError, KeyError, TypeError …
        _whole(path, option)
        raise ValueError(
            f"{option} {path} holds no tokenizer that loads ({_first_line(err)}); save one "
            "there with tokenizer.save_pretrained, or give --tokenizer DIR"
        ) from None
    if tok.eos_token_id is None:
        raise ValueError(
            f"{option} {path}: its tokenizer has no EOS token (eos_token); set one and save it "
            "again, since a completion ends at EOS"
        )
    return tok


def load_directory_model(path: str) -> Any:
    """The causal LM saved in the directory ``path``, in float32 (nothing downloaded).

    Raises:
        ValueError: transformers is not installed, or the directory does not load as a causal
            LM (a corrupt or truncated file), naming the error.
    """
    import torch

    transformers = hugging_face(
        "transformers", f"--model {path}", "loading a Hugging Face model needs transformers"
    )
    quiet()
    try:
        return transformers.AutoModelForCausalLM.from_pretrained(
            path, local_files_only=True, dtype=torch.float32
        )
    except Exception as err:  # a corrupt or truncated file raises many types
        msg = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise ValueError(
            f"--model {path}: not a loadable causal LM ({type(err).__name__}: {msg}); give a "
            "directory that AutoModelForCausalLM.from_pretrained loads"
        ) from None


def load_gguf_model(path: str, option: str = "--model") -> Any:
    """The causal LM in the GGUF file at ``path``, dequantised to float32, saveable as any model.

    transformers' GGUF loader (``from_pretrained(…, gguf_file=…)``) maps the file's metadata to
    the architecture's config and dequantises every tensor (Q4_K, Q8_0, … → float32) with the
    ``gguf`` package; it then marks the model quantized (``quantization_config``) and refuses
    ``save_pretrained``, though its weights are plain float32. The model returned is built from
    that config less its ``quantization_config``, holding the same tensors (no copy), so it
    trains and exports as a model loaded from a directory does.

    Raises:
        ValueError: no such file, a missing package, or a file transformers cannot load (an
            architecture its GGUF loader does not map, a truncated file), naming the error.
    """
    import contextlib
    import io

    import torch

    transformers = _transformers(option, path)
    where = _gguf_file(path, option)
    try:  # its dequantising loop draws a tqdm bar that transformers' switch does not reach
        with contextlib.redirect_stderr(io.StringIO()):
            loaded = transformers.AutoModelForCausalLM.from_pretrained(**where, dtype=torch.float32)
    except Exception as err:  # a truncated file or an unmapped architecture raises many types
        _whole(path, option)
        raise ValueError(
            f"{option} {path}: not a GGUF causal LM that transformers loads "
            f"({type(err).__name__}: {_first_line(err)})"
        ) from None
    return _unquantized(loaded)


def _unquantized(loaded: Any) -> Any:
    """``loaded``'s weights and buffers in a model of its class built from its config alone."""
    import copy

    import torch

    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):  # no random initialisation: every tensor is assigned below
        model = type(loaded)(config)
    state = loaded.state_dict()
    model.load_state_dict(state, strict=True, assign=True)
    for name, buf in loaded.named_buffers():  # non-persistent ones (rotary frequencies, scales)
        if name not in state:
            owner, _, leaf = name.rpartition(".")
            model.get_submodule(owner).register_buffer(leaf, buf, persistent=False)
    model.tie_weights()  # the state dict gives tied matrices as two tensors
    model.generation_config = loaded.generation_config
    return model.eval()


def special_ids(tokenizer: Any) -> tuple[int, int | None, int]:
    """(EOS, BOS or None, pad) ids of the tokenizer; pad is EOS when it has none."""
    eos = int(tokenizer.eos_token_id)
    bos = tokenizer.bos_token_id
    pad = tokenizer.pad_token_id
    return eos, None if bos is None else int(bos), eos if pad is None else int(pad)


def is_conversational(prompt: Any) -> bool:
    """A list of ``{"role": …, "content": …}`` messages (TRL's conversational format)."""
    return (
        isinstance(prompt, list)
        and len(prompt) > 0
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m
            for m in prompt
        )
    )


def shown(prompt: Prompt) -> str:
    """A prompt as its user wrote it: its text, or its conversation's last message's content.

    What is left out (a system prompt, the chat template's markup) every prompt shares.
    """
    return str(prompt[-1]["content"]) if is_conversational(prompt) else str(prompt)


def encode_prompt(tokenizer: Any, prompt: Prompt) -> list[int]:
    """Token ids of one prompt (see the module docstring).

    Raises:
        ValueError: a conversational prompt and a tokenizer without a chat template.
    """
    if isinstance(prompt, str):
        return [int(i) for i in tokenizer(prompt)["input_ids"]]
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "the prompts are conversational but the tokenizer has no chat template: give "
            "--tokenizer DIR with one (tokenizer.chat_template = ...; save_pretrained), or "
            "standard text prompts"
        )
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def decode(tokenizer: Any, ids: Sequence[int]) -> str:
    """A completion's text: its ids (EOS already cut) with every special token skipped."""
    return str(tokenizer.decode(list(ids), skip_special_tokens=True))


def tool_schema(fn: Any) -> dict[str, Any]:
    """A tool's JSON schema, as chat templates' ``tools=`` take it and TRL reads a tool.

    transformers' reading of its signature and Google-style docstring.

    Raises:
        ValueError: a tool transformers cannot describe (no type hints, no docstring).
    """
    from transformers.utils import get_json_schema

    try:
        return dict(get_json_schema(fn))
    except Exception as err:  # transformers' DocstringParsingException and TypeError
        name = getattr(fn, "__qualname__", repr(fn))
        raise ValueError(
            f"tool {name} cannot be described to the model ({err}): give it type hints and a "
            "Google-style docstring with an Args: section"
        ) from None


def positions_of(path: str) -> int | None:
    """The positions a Hugging Face model directory's ``config.json`` says it holds (or None)."""
    import json

    try:
        cfg = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(cfg, dict):
        return None
    n = cfg.get("max_position_embeddings") or cfg.get("n_positions")
    return n if isinstance(n, int) and n > 0 else None


def save_pretrained(
    model: Any,
    tokenizer: Any | None,
    directory: str | Path,
    *,
    overwrite: bool = False,
    state_dict: dict[str, Any] | None = None,
) -> Path:
    """The model (and its tokenizer) as a Hugging Face directory ``from_pretrained`` loads.

    Written into a temporary sibling and renamed into place, so a directory there is whole
    (``overwrite``: the one there is replaced only once the new one is complete).
    ``state_dict``: the weights to write in place of the model's own (a sharded model's,
    gathered).

    Raises:
        ValueError: the model is not a Hugging Face ``PreTrainedModel`` (the built-in tiny
            transformer and a factory's plain ``nn.Module`` have no such format), or
            ``directory`` exists (without ``overwrite``).
    """
    if not hasattr(model, "save_pretrained"):
        raise ValueError(
            f"the policy is a {type(model).__name__}, not a Hugging Face PreTrainedModel: only a "
            "--model DIR (or a factory returning a PreTrainedModel) can be exported"
        )
    quiet()
    target = Path(directory)
    if target.exists() and not overwrite:
        raise ValueError(f"{target} exists: give a new directory to export into")

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)

    return _written(target, tokenizer, fill)


def save_cloned(model_dir: Path, tokenizer: Any | None, directory: Path) -> Path:
    """``model_dir`` (``save_pretrained``'s) and the tokenizer in ``directory``, as clones.

    Each file of ``model_dir`` a copy-on-write clone where the file system makes them (no byte
    written twice), else a copy (``_io.clone_file``); never a hard link, which a write in place
    to the exported weights would carry into the checkpoint's. Whole or not at all, as
    :func:`save_pretrained` writes (the directory there replaced once the new one is complete).
    """
    from eligibility._io import clone_file

    def fill(tmp: Path) -> None:
        for file in model_dir.iterdir():
            clone_file(file, tmp / file.name)

    return _written(Path(directory), tokenizer, fill)


WRITTEN = ".written-by-eligibility"
"""The list, in a directory the run writes whole (``RUN/model/``), of the names it wrote there:
any other entry there is the user's, and is kept when the directory is written again."""


def _written(target: Path, tokenizer: Any | None, fill: Any) -> Path:
    """``target`` as a directory that ``fill(tmp)`` and the tokenizer write, swapped in whole.

    What the user put in a ``target`` written before (an entry that the last write did not
    make, by its :data:`WRITTEN` list) is moved into the new directory before the swap and
    said on stderr: a file saved beside the weights (notes, an evaluation) is never removed.
    A directory without the list (written elsewhere) keeps every entry the new write does not
    make.
    """
    import os
    import shutil
    import tempfile

    from eligibility._io import os_errors

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        with os_errors(tmp):  # safetensors' and tokenizers' failed writes are OSErrors here
            fill(tmp)
            if tokenizer is not None:
                tokenizer.save_pretrained(tmp)
            made = sorted(p.name for p in tmp.iterdir())
            (tmp / WRITTEN).write_text("".join(f"{name}\n" for name in made))
        _follow_umask(tmp)
        if target.exists():
            _keep_foreign(target, tmp, set(made))
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _keep_foreign(old: Path, new: Path, made: set[str]) -> None:
    """Move the user's entries of ``old`` (not the run's, :data:`WRITTEN`) into ``new``."""
    import os

    from eligibility._output import note, speaker

    listed = old / WRITTEN
    ours = set(listed.read_text().splitlines()) if listed.is_file() else set()
    for entry in sorted(old.iterdir()):
        if entry.name in made or entry.name in ours or entry.name == WRITTEN:
            continue
        os.replace(entry, new / entry.name)
        note(speaker("finetune"), f"kept {entry} (not the run's) in the new {old.name}/")


def _follow_umask(directory: Path) -> None:
    """Give ``directory`` and all in it the modes that ``mkdir`` and ``open`` would give.

    Under umask 022: 0755 and 0644, not ``mkdtemp``'s 0700 or a temporary file's 0600.
    """
    import os

    from eligibility._io import current_umask

    mask = current_umask()
    for path in [directory, *directory.rglob("*")]:
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


__all__ = [
    "Prompt",
    "decode",
    "encode_prompt",
    "is_conversational",
    "is_gguf",
    "load_directory_model",
    "load_gguf_model",
    "load_tokenizer",
    "positions_of",
    "save_cloned",
    "save_pretrained",
    "shown",
    "special_ids",
    "tool_schema",
]
