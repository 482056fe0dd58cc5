"""How near uniform a model's own samples are, random-init and trained: ``--defaults auto``'s rule.

    OMP_NUM_THREADS=1 python bench/lm/lm_untrained.py --json bench/results/lm_untrained.json
    python bench/lm/lm_untrained.py --report bench/results/lm_untrained.json

measures Ĥ, the mean entropy of a model's next-token distributions along its own samples
(``eligibility.lm.measure.sample_entropy``: 16 rows, at most 16 tokens each, τ = 1), against
ln V, on:

- ``random``: models as ``from_config`` initialises them (seeds 0 and 1), each family at a toy
  size (width 64, 2 layers, V = 64) and at the head shapes of real models (their width and
  vocabulary, 2 layers: the final norm and the head set how far from uniform the logits start);
  prompts of 8 random tokens.
- ``trained``: toy models trained by cross-entropy (Adam 3e-3, 32 sequences a step) for 0 to
  1000 steps: a 2-layer Llama (width 64) on the ``copy`` task's word-level sequences
  (``<bos> copy x y z : x y z <eos>``, V = 12; prompts up to ``:``), and a 2-layer GPT-2
  (width 64) on the bytes of this repository's docs/*.md (V = 256; prompts: 32-byte slices).
- ``real`` (with ``--kit DIR``, ``make kit``'s directory): the kit's two pretrained models on
  each task's training prompts, through ``finetune``'s own set-up (``task_and_policy``: the
  tokenizer, the chat template, T_max 16).

Not a timing: the figures are entropies, the same on any machine (the machine only sets how long
it takes, minutes on one core).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[2]
TOY = {"hidden_size": 64, "layers": 2, "vocab": 64}
REAL_HEADS = [  # (family, the model whose head shape it is, width, vocabulary, tied)
    ("llama", "SmolLM2-135M", 576, 49152, True),
    ("qwen2", "Qwen2.5-0.5B", 896, 151936, True),
    ("gemma3_text", "Gemma-3-270M", 640, 262144, True),
    ("gpt2", "GPT-2", 768, 50257, True),
    ("phi3", "Phi-3-mini", 3072, 32064, False),
    ("llama", "Llama-3.2-1B", 2048, 128256, True),
    ("llama", "Llama-2-7B", 4096, 32000, False),
]
FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "gpt2", "phi3", "cohere"]


def random_model(family: str, width: int, vocab: int, tied: bool, seed: int):
    """A 2-layer ``family`` model, ``width`` wide, V = ``vocab``, as ``from_config`` makes it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    heads = max(1, width // 64)
    if family == "gpt2":
        kw = dict(n_embd=width, n_layer=2, n_head=heads, n_positions=64)
    else:
        kw = dict(
            hidden_size=width,
            intermediate_size=width,
            num_hidden_layers=2,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            head_dim=64 if width >= 64 else width,
            max_position_embeddings=64,
        )
    cfg = AutoConfig.for_model(
        family,
        vocab_size=vocab,
        tie_word_embeddings=tied,
        eos_token_id=0,
        pad_token_id=0,
        bos_token_id=1,
        **kw,
    )
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(cfg).float().eval()


def measure(model, prompts: list[list[int]], vocab: int, eos: int) -> float:
    """Ĥ of ``model`` on ``prompts`` (``finetune``'s measurement)."""
    import torch

    from eligibility.lm.measure import sample_entropy

    with torch.no_grad():
        return sample_entropy(model, prompts, vocab_size=vocab, eos_id=eos, seed=0)


def row(kind: str, name: str, vocab: int, entropy: float, **extra) -> dict:
    """One result: Ĥ, ln V, their ratio and the column ``measured_column`` gives."""
    from eligibility.lm.defaults import measured_column

    ln_v = math.log(vocab)
    out = {"kind": kind, "model": name, "vocab": vocab, "entropy": entropy, "ln_v": ln_v}
    out |= {"ratio": entropy / ln_v, "column": measured_column(entropy, vocab), **extra}
    print(json.dumps(out), file=sys.stderr, flush=True)
    return out


def random_rows() -> list[dict]:
    """Every family at the toy size, and the real models' head shapes, seeds 0 and 1."""
    import numpy as np

    rows = []
    shapes = [(f, f"{f} toy", TOY["hidden_size"], TOY["vocab"], True) for f in FAMILIES]
    shapes += [(f, f"{f} at {name}'s head", w, v, t) for f, name, w, v, t in REAL_HEADS]
    for family, name, width, vocab, tied in shapes:
        for seed in (0, 1):
            model = random_model(family, width, vocab, tied, seed)
            prompts = np.random.default_rng(seed).integers(1, min(vocab, 1000), (16, 8)).tolist()
            rows.append(row("random", name, vocab, measure(model, prompts, vocab, 0), seed=seed))
            del model
    return rows


def copy_corpus(rng) -> tuple[list[list[int]], list[list[int]], int, int]:
    """The ``copy`` task's sequences as token ids: (sequences, prompts, V, EOS)."""
    words = ["<eos>", "<bos>", "copy", ":", *"abcdefgh"]
    ids = {w: i for i, w in enumerate(words)}
    seqs, prompts = [], []
    for _ in range(512):
        xs = [str(c) for c in rng.choice(list("abcdefgh"), 3)]
        prompt = [ids["<bos>"], ids["copy"], *(ids[x] for x in xs), ids[":"]]
        prompts.append(prompt)
        seqs.append([*prompt, *(ids[x] for x in xs), ids["<eos>"]])
    return seqs, prompts, len(words), ids["<eos>"]


def text_corpus(rng) -> tuple[list[list[int]], list[list[int]], int, int]:
    """Byte slices of docs/*.md: (64-byte sequences, 32-byte prompts, V = 256, EOS 0)."""
    data = b"".join(p.read_bytes() for p in sorted((ROOT / "docs").glob("*.md")))
    starts = rng.integers(0, len(data) - 65, 4096)
    seqs = [list(data[s : s + 64]) for s in starts]
    return seqs, [s[:32] for s in seqs[:16]], 256, 0


def trained_rows(steps: list[int]) -> list[dict]:
    """Toy models trained by cross-entropy, measured after each of ``steps`` (cumulative)."""
    import numpy as np
    import torch

    rows = []
    for name, family, corpus in (
        ("llama on copy (V 12)", "llama", copy_corpus),
        ("gpt2 on docs bytes (V 256)", "gpt2", text_corpus),
    ):
        rng = np.random.default_rng(0)
        seqs, prompts, vocab, eos = corpus(rng)
        model = random_model(family, 64, vocab, True, 0)
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        done = 0
        for target in steps:
            model.train()
            for _ in range(target - done):
                batch = torch.tensor([seqs[i] for i in rng.integers(0, len(seqs), 32)])
                loss = model(input_ids=batch, labels=batch).loss
                opt.zero_grad()
                loss.backward()
                opt.step()
            done = target
            model.eval()
            with torch.no_grad():
                batch = torch.tensor([seqs[i] for i in range(64)])
                ce = float(model(input_ids=batch, labels=batch).loss)
            entropy = measure(model, prompts, vocab, eos)
            rows.append(row("trained", name, vocab, entropy, steps=target, cross_entropy=ce))
    return rows


def real_rows(kit: Path) -> list[dict]:
    """The kit's pretrained models on each task's prompts, through ``finetune``'s set-up."""
    from eligibility.lm.build import task_and_policy
    from eligibility.lm.config import FinetuneConfig

    rows = []
    for model in sorted((kit / "models").iterdir()):
        for task in sorted(p for p in (kit / "tasks").iterdir() if p.is_dir()):
            config = FinetuneConfig(
                f"{kit / 'tasks' / 'rewards.py'}:reward",
                prompts=str(task / "train.jsonl"),
                model=str(model),
                max_completion_length=16,
                device="cpu",
            )
            config, t, _policy, _ = task_and_policy(config)
            t.close()
            m = config.model_entropy
            rows.append(row("real", f"{model.name} on {task.name}", t.vocab_size, m["entropy"]))
    return rows


def report(rows: list[dict]) -> None:
    """The markdown table: per model, Ĥ, ln V, their ratio and the column it takes."""
    print("| kind | model | V | steps | Ĥ (nats/token) | ln V | Ĥ / ln V | column |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        steps = r.get("steps", "")
        print(
            f"| {r['kind']} | {r['model']}{' s' + str(r['seed']) if 'seed' in r else ''} | "
            f"{r['vocab']} | {steps} | {r['entropy']:.2f} | {r['ln_v']:.2f} | {r['ratio']:.3f} | "
            f"{r['column']} |"
        )
    for kind in dict.fromkeys(r["kind"] for r in rows):
        ratios = [r["ratio"] for r in rows if r["kind"] == kind]
        print(f"\n{kind}: Ĥ / ln V from {min(ratios):.3f} to {max(ratios):.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--json", default=None, help="write the rows here")
    p.add_argument("--kit", default=None, help="the real-model kit's directory (make kit)")
    p.add_argument("--steps", nargs="+", type=int, default=[0, 10, 30, 100, 300, 1000])
    p.add_argument("--skip-random", action="store_true")
    p.add_argument("--report", nargs="+", default=None, help="print the table of these files")
    args = p.parse_args()
    if args.report:
        report([r for f in args.report for r in json.loads(Path(f).read_text())["rows"]])
        return
    import torch

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    rows = [] if args.skip_random else random_rows()
    rows += trained_rows(args.steps)
    if args.kit:
        rows += real_rows(Path(args.kit).expanduser())
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    meta = {"argv": sys.argv, "commit": commit, "date": time.strftime("%Y-%m-%d")}
    if args.json:
        Path(args.json).write_text(json.dumps({**meta, "rows": rows}, indent=1))
    report(rows)
    print(f"\n{time.perf_counter() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
