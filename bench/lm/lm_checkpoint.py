"""The memory a fine-tuning checkpoint costs at a real model's size: streamed against copied.

Each measurement is a fresh process that builds a Llama of SmolLM2-135M-Instruct's shape from
its config (random weights: the sizes are what matter, nothing is downloaded), takes one Adam
step so that both moments exist, and writes one checkpoint through the run layer
(``RunDir.checkpoint``, as ``finetune`` does) or through the writer it replaced (every tensor
copied into NumPy, the whole file serialised in memory, then written). The figure is the rise
of the process's peak resident memory (``ru_maxrss``) across the write, and the file's size; the
two writers alternate, ``--repeats`` times each, and the median is reported.

    OMP_NUM_THREADS=1 python bench/lm/lm_checkpoint.py --repeats 2 \
        --json bench/results/lm_checkpoint.json

Memory, not time: a peak does not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SMOLLM2_135M = dict(  # SmolLM2-135M-Instruct's config.json (Llama)
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=8192,
    tie_word_embeddings=True,
    rms_norm_eps=1e-5,
)


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(writer: str, directory: Path) -> dict[str, float]:
    """One process's figures: build, one Adam step, one checkpoint by ``writer``."""
    import numpy as np
    import torch
    import transformers

    from eligibility._io import atomic_write_bytes
    from eligibility.lm.config import IDENTITY, FinetuneConfig
    from eligibility.lm.learner import Learner
    from eligibility.lm.metrics import SCHEMA
    from eligibility.runs import CHECKPOINT, RunDir

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMOLLM2_135M))
    learner = Learner(model, 1e-5)
    ids = torch.randint(0, 49152, (1, 8))
    model(input_ids=ids).logits[0, -1, :8].sum().backward()
    learner.optimizer.step()
    learner.optimizer.zero_grad(set_to_none=True)
    config = FinetuneConfig("repeat", model="bench:smollm2-shape", out=str(directory / "run"))
    rngs = [np.random.default_rng(0)]
    counters = {"updates": 1, "tokens": 8, "completions": 1}
    with RunDir.open(config, SCHEMA, IDENTITY, resume=False) as files:
        before = _peak_mib()
        if writer == "streamed":
            files.checkpoint(learner.state_dict(), counters, rngs)
        else:  # the writer it replaced: NumPy copies, the file serialised whole in memory
            from safetensors.numpy import save

            state = {k: v.detach().numpy().copy() for k, v in learner.state_dict().items()}
            atomic_write_bytes(files.path / CHECKPOINT, save(state, metadata={"x": "1"}))
        after = _peak_mib()
        size = (files.path / CHECKPOINT).stat().st_size / 2**20
    params = sum(p.numel() for p in model.parameters())
    return {
        "peak_before_mib": before,
        "peak_rise_mib": after - before,
        "file_mib": size,
        "params": params,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--one", choices=("streamed", "copied"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(measure(args.one, Path(tmp))))
        return 0
    runs: dict[str, list[dict[str, float]]] = {"streamed": [], "copied": []}
    for _ in range(args.repeats):
        for writer in ("copied", "streamed"):  # alternating, each in a fresh process
            out = (
                subprocess.run(
                    [sys.executable, __file__, "--one", writer],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                .stdout.strip()
                .splitlines()[-1]
            )
            runs[writer].append(json.loads(out))
    summary = {w: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for w, rs in runs.items()}
    for w, s in summary.items():
        print(
            f"{w:9s} params {s['params'] / 1e6:.1f}M  file {s['file_mib']:.0f} MiB  "
            f"peak before {s['peak_before_mib']:.0f} MiB  rise during the write "
            f"{s['peak_rise_mib']:.0f} MiB (median of {args.repeats})"
        )
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "median": summary}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
