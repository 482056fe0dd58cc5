"""The model sampled once at load: measured, and probed with the sampler's call, by one batch.

Under ``--defaults auto`` the set-up (``lm.build.resolve``) measures Ĥ, the entropy of the
model's own samples on the run's first prompts (:func:`sample_entropy`), and the column it
points to (the rule is ``lm.defaults.measured_column``), then resolves the config anew from
that column itself. A measurement is kept under a key of everything it is computed from
(:func:`measurement_key`, :func:`remembered`, :func:`remember`), so the same start samples only
a two-token probe the next time; a run whose column is named samples that probe alone. That
one sampling (:func:`sampled`) shows that the model takes the causal-LM call the sampler gives
it, its forward chosen and held there (``lm.edge.forward``), or one ValueError names it; the
policy the run places later (LoRA's wrapper, shards) holds its own forward where it is placed
(``lm.policy.Policy``), with no second sampling.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from eligibility._io import atomic_write_text
from eligibility.lm.defaults import measured_column
from eligibility.lm.edge import device as devices
from eligibility.lm.sample import sample

if TYPE_CHECKING:
    from eligibility.lm.tasks import Task

MEASURED_ROWS, MEASURED_TOKENS = 16, 16
"""The measurement's samples: this many rows (the first prompts, cycled), at most this many
tokens each (T_max if fewer)."""

MEASURED_SEED = 0
"""The seed of the measurement's draws: one stream for every run of a model on a task, so the
column taken does not hang on ``--seed``, and a measurement kept serves each seed after it."""


def sample_entropy(
    model: torch.nn.Module,
    prompts: list[list[int]],
    *,
    vocab_size: int,
    eos_id: int,
    max_new_tokens: int = MEASURED_TOKENS,
    seed: int = 0,
    n_rows: int = MEASURED_ROWS,
) -> float:
    """Ĥ, the mean entropy of ``model``'s next-token distributions along its own samples.

        Ĥ = −(1/n) Σᵢ,ₜ ln π(oᵢ,ₜ | qᵢ, oᵢ,<ₜ),   oᵢ,ₜ ~ π   (τ = 1, the first V logits)

    over the n tokens of one completion of each of ``n_rows`` rows (``prompts`` cycled), EOS
    included: E[−ln π(oₜ)] given the prefix is that position's entropy, so Ĥ is
    unbiased for the mean entropy at the positions the model reaches, ln V at most. Each row
    is left-padded by one token at least (a mask and positions, as a run's batches have), so
    this one sampling also shows that the model takes the sampler's call (:func:`sampled`).

    Args:
        model: a causal LM (``lm.sample``'s call), on the device it runs on.
        prompts: token ids; the first ``n_rows`` are used (cycled if fewer).
        vocab_size: V.
        eos_id: the token that ends a completion.
        max_new_tokens: at most this many tokens a completion.
        seed: the draws' seed.
        n_rows: the rows sampled (:data:`MEASURED_ROWS` for the measurement).
    """
    rows = [list(prompts[i % len(prompts)]) for i in range(n_rows)]
    width = 1 + max(len(r) for r in rows)  # every row padded: the batch the sampler sees
    batch = sample(
        model,
        rows,
        vocab_size=vocab_size,
        max_new_tokens=max_new_tokens,
        rng=np.random.default_rng(seed),
        eos_id=eos_id,
        share=(slice(0, len(rows)), len(rows), width),
        prefix=True,  # the chat template's system turn, say, computed once
    )
    mask = batch.completion_mask
    return float(-(batch.logps * mask).sum() / mask.sum())


def sampled(
    spec: str,
    model: torch.nn.Module,
    task: Task,
    where: torch.device,
    t_max: int,
    precision: str,
    *,
    measure: bool,
) -> dict[str, Any]:
    """The set-up's one sampling of the model: its measurement, or a two-token probe.

    ``measure`` (``--defaults auto``): Ĥ (:func:`sample_entropy`) on the task's first prompts,
    at most T_max tokens each, drawn from a stream of its own (:data:`MEASURED_SEED`: a property
    of the model and the task, the same column for every ``--seed``), and the column it points
    to, ``scratch`` where Ĥ ≥ ρ ln V (``lm.defaults.measured_column``); measured before on the
    same files, prompts, precision and libraries, the Ĥ kept then (:func:`remembered`) and the
    model sampled only for :func:`probe_rows`' two tokens; not ``measure`` (a column named),
    the probe alone. Either way the one padded batch shows that the model takes the causal-LM
    call the sampler gives it, with a cache, and holds the forward it chose
    (``lm.edge.forward``), or one ValueError names the model. The model is moved to the run's
    device, ``where``, and sampled in the run's precision (``float32`` or ``bfloat16``, as
    ``--dtype`` resolved on ``where``).

    Returns:
        ``defaults`` (the column) and ``model_entropy`` (Ĥ and ln V) where measured, else
        nothing: the set-up resolves the settings left to the table anew from them
        (``lm.build.resolve``, ``with_changes``) and the run saves both, so a resume does not
        measure again.
    """
    v = task.vocab_size
    model.to(where)
    drawn = {
        "prompts": list(task.prompts[:MEASURED_ROWS]),
        "vocab_size": v,
        "eos_id": task.eos_id,
        "max_new_tokens": min(t_max, MEASURED_TOKENS),
        "seed": MEASURED_SEED,
    }
    on = {"device": where.type, "dtype": next(model.parameters()).dtype, "run": precision}
    key = measurement_key(spec, **drawn, **on, rows=MEASURED_ROWS) if measure else None
    kept = remembered(key)
    size: dict[str, Any] = {}
    if not measure or kept is not None:  # the probe: two short rows, two tokens, Ĥ not used
        size = {"prompts": probe_rows(task), "max_new_tokens": 2, "n_rows": 2}
    # in the run's precision: bf16's passes take about half float32's
    with _causal(spec), devices.precision(precision, where):
        entropy = sample_entropy(model, **{**drawn, **size})
    if not measure:
        return {}
    if kept is None:
        remember(key, entropy)
    entropy = entropy if kept is None else kept
    return {
        "defaults": measured_column(entropy, v),
        "model_entropy": {"entropy": entropy, "ln_v": math.log(v)},
    }


PROBED = 4
"""The tokens of the probe's longer row (:func:`probe_rows`)."""


def probe_rows(task: Task) -> list[list[int]]:
    """The probe's batch: the first prompt's last :data:`PROBED` tokens and its last one.

    A padded batch, as the run samples, of a few tokens: the call, its mask, positions and
    cache are what is probed, not the prompt, so its whole length (each token a product with
    every weight) would only cost time.
    """
    first = list(task.prompts[0])
    return [first[-PROBED:], first[-1:]]


@contextlib.contextmanager
def _causal(spec: str) -> Iterator[None]:
    """A call of the model as a causal LM: its warnings silenced, its failure one ValueError."""
    try:
        with warnings.catch_warnings():  # a model's warnings about this call: the error says it
            warnings.simplefilter("ignore")
            yield
    except Exception as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        raise ValueError(
            f"--model {spec}: it does not run as a causal LM with a KV cache "
            f"({type(err).__name__}: {first}); give a decoder-only causal LM"
        ) from None


CACHE_DIR = "ELIGIBILITY_CACHE_DIR"
"""The environment variable naming the directory the measurements are kept in
(:func:`cache_dir`)."""

MEASUREMENT = 2
"""The measurement's version: a change to what ``lm.defaults.measured_column``'s Ĥ is computed
from (the rows, the tokens, the draws, their precision) takes a new number, so no kept
measurement is read for it."""


_COMPUTED_BY = ("eligibility", "torch", "transformers")
"""The libraries a measurement is computed by: their versions are in its key (those imported)."""


def cache_dir() -> Path:
    """Where measurements are kept (``measured/``, a small JSON file each).

    ``$ELIGIBILITY_CACHE_DIR``, else ``$XDG_CACHE_HOME/eligibility`` or ``~/.cache/eligibility``.
    """
    if given := os.environ.get(CACHE_DIR):
        return Path(given)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "eligibility"


def measurement_key(model: str, **inputs: object) -> str | None:
    """The SHA-256 that names one measurement of ``model`` (None: nothing to name it by).

    It covers the model's files (each one's name, size and modification time: a file written
    anew, or changed in place, gives another key), everything else the measurement is computed
    from (``inputs``: the prompts measured, the tokens, the draws' seed, V, the device, the
    dtype), :data:`MEASUREMENT` and the versions of the libraries that compute it. A model that is
    not a path (``module:factory``) has none: it is measured every time.
    """
    path = Path(model)
    if not path.exists():
        return None
    files = sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]
    versions = {p: getattr(sys.modules.get(p), "__version__", None) for p in _COMPUTED_BY}
    h = hashlib.sha256(
        json.dumps([MEASUREMENT, versions, inputs], sort_keys=True, default=str).encode()
    )
    for f in files:
        st = f.stat()
        name = f.relative_to(path) if path.is_dir() else f.name
        h.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def remembered(key: str | None) -> float | None:
    """The Ĥ kept under ``key`` (None: none kept, or a file that does not read as one)."""
    if key is None:
        return None
    try:
        entropy = json.loads((cache_dir() / "measured" / f"{key}.json").read_text())["entropy"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return float(entropy) if isinstance(entropy, int | float) and math.isfinite(entropy) else None


def remember(key: str | None, entropy: float) -> None:
    """Keep Ĥ under ``key`` (atomically; a directory that cannot be written keeps nothing)."""
    if key is None:
        return
    try:
        where = cache_dir() / "measured"
        where.mkdir(parents=True, exist_ok=True)
        atomic_write_text(where / f"{key}.json", json.dumps({"entropy": entropy}) + "\n")
    except OSError:
        pass


__all__ = [
    "CACHE_DIR",
    "MEASURED_ROWS",
    "MEASURED_TOKENS",
    "MEASUREMENT",
    "cache_dir",
    "measurement_key",
    "probe_rows",
    "remember",
    "remembered",
    "sample_entropy",
    "sampled",
]
