"""The model measured at load, and probed with the sampler's call: one sampling serves both.

Under ``--defaults auto`` the set-up (``lm.build.resolve``) measures Ĥ, the entropy of the
model's own samples on the run's first prompts (:func:`sample_entropy`), and the column it
points to (:func:`measured`; the rule is ``lm.defaults.measured_column``), then resolves the
config anew from that column itself. A measurement is kept under a key of everything it is
computed from (:func:`measurement_key`, :func:`remembered`, :func:`remember`), so the same
start samples only a two-token probe the next time. A model that was not measured, or that
the policy runs as another model (LoRA's wrapper, shards), is probed once placed
(:func:`probe`): it takes the causal-LM call the sampler gives it, its forward chosen and held
there (``lm.edge.forward``), or one ValueError names it.
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
    from eligibility.lm.policy import Policy
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
) -> float:
    """Ĥ, the mean entropy of ``model``'s next-token distributions along its own samples.

        Ĥ = −(1/n) Σᵢ,ₜ ln π(oᵢ,ₜ | qᵢ, oᵢ,<ₜ),   oᵢ,ₜ ~ π   (τ = 1, the first V logits)

    over the n tokens of one completion of each of :data:`MEASURED_ROWS` rows (``prompts``
    cycled), EOS included: E[−ln π(oₜ)] given the prefix is that position's entropy, so Ĥ is
    unbiased for the mean entropy at the positions the model reaches, ln V at most. Each row
    is left-padded by one token at least (a mask and positions, as a run's batches have), so
    this one sampling also shows that the model takes the sampler's call (:func:`probe`'s test).

    Args:
        model: a causal LM (``lm.sample``'s call), on the device it runs on.
        prompts: token ids; the first :data:`MEASURED_ROWS` are used (cycled if fewer).
        vocab_size: V.
        eos_id: the token that ends a completion.
        max_new_tokens: at most this many tokens a completion.
        seed: the draws' seed.
    """
    rows = [list(prompts[i % len(prompts)]) for i in range(MEASURED_ROWS)]
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


def measured(
    spec: str,
    model: torch.nn.Module,
    task: Task,
    where: torch.device,
    t_max: int,
    precision: str,
) -> dict[str, Any]:
    """The column ``--model spec`` takes under ``--defaults auto``, measured, as config fields.

    Ĥ (:func:`sample_entropy`) on the task's first prompts, at most T_max tokens each, in the
    run's precision, drawn from a stream of its own (:data:`MEASURED_SEED`: a property of the
    model and the task, the same column for every ``--seed``; or, measured before on the same
    files, prompts, precision and libraries, as kept then: :func:`remembered`, the model then
    probed with two tokens); ``scratch`` where Ĥ ≥ ρ ln V (``lm.defaults.measured_column``).
    Returns ``defaults`` (the column) and ``model_entropy`` (Ĥ and ln V): the set-up resolves
    the settings left to the table anew from them (``lm.build.resolve``, ``with_changes``) and
    the run saves both, so a resume does not measure again. The model is moved to the run's
    device, ``where``, for it (the policy is placed there next); a completion has at most
    ``t_max`` tokens; ``precision``: the run's ``--dtype`` as resolved on ``where``
    (``float32`` or ``bfloat16``).
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
    key = measurement_key(spec, **drawn, **on, rows=MEASURED_ROWS)
    # in the run's precision: bf16's passes take about half float32's
    with _causal(spec), devices.precision(precision, where):
        if (entropy := remembered(key)) is None:
            entropy = sample_entropy(model, **drawn)
            remember(key, entropy)
        else:  # the probe that the measurement's sampling is: the call taken, the forward held
            sample(model, probe_rows(task), vocab_size=v, max_new_tokens=2, eos_id=task.eos_id)
    return {
        "defaults": measured_column(entropy, v),
        "model_entropy": {"entropy": entropy, "ln_v": math.log(v)},
    }


def probe(policy: Policy, task: Task, spec: str) -> None:
    """Two greedy tokens of a padded batch: the model takes the causal-LM call (and cache).

    Raises:
        ValueError: it does not (a model that ``AutoModelForCausalLM`` loads yet is not a
            decoder, say BERT's LM head), naming the model and the error.
    """
    with _causal(spec), policy.precision():
        sample(policy, probe_rows(task), vocab_size=task.vocab_size, max_new_tokens=2)


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
    "measured",
    "measurement_key",
    "probe",
    "probe_rows",
    "remember",
    "remembered",
    "sample_entropy",
]
