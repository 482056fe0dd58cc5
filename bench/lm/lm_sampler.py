"""The sampler and the scoring pass, before and after, paired: the cost of one update's model work.

    OMP_NUM_THREADS=1 python bench/lm/lm_sampler.py --pairs 30 [--before REV]

One update's model work is: sample G = 8 completions of 16 prompts (T_max = 8, temperature 1),
recompute their log-probs with gradients, and backpropagate a loss through them. ``before`` is
``lm/sample.py`` as of ``--before`` (read with ``git show``; default 78e7a99, the last sampler
that ran a ``transformers`` model through its own modules and every prompt of a group anew; the
first round of this bench compared against f5ba1cc), ``after`` the working tree's (the direct
Llama forward of ``lm/llama.py`` and each distinct prompt computed once). Both run on the same
model, batch and seed, one thread, alternating which goes first; printed per case: the median
of the pairwise ratios before/after of the seconds (wall and process CPU), with the 25th-75th
percentiles of the ratios.

Cases: the kit's Llama (``bench/lm/lm_kit.py``: 2 layers, width 64) on prompts of one length (no
pad: the case of the kit's tasks), the same model on prompts of mixed lengths (pads), and the
built-in ``TinyLM`` (whose forward is unchanged: the shared prompts alone). A last row is a
lever tried and not adopted: keeping the sampled tokens' log-probs with their graph (no scoring
pass), against the after-sampler.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import lm_kit
from eligibility.lm import sample as after
from eligibility.lm.edge.model import TinyLM

BEFORE = "78e7a99"
ROOT = Path(__file__).resolve().parents[2]


def before_module(rev: str = BEFORE):
    """``lm/sample.py`` as of commit ``rev``, imported as a module of its own."""
    text = subprocess.run(
        ["git", "show", f"{rev}:src/eligibility/lm/sample.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "sample_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("sample_before", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def update_work(mod, model, prompts, v: int, seed: int) -> tuple[float, float]:
    """Sample, score with gradients and backpropagate once; its (wall, CPU) seconds."""
    w, c = time.perf_counter(), time.process_time()
    batch = mod.sample(
        model, prompts, vocab_size=v, max_new_tokens=8, rng=np.random.default_rng(seed)
    )
    logps = mod.token_logps(model, batch, vocab_size=v)
    model.zero_grad(set_to_none=True)
    (-(logps.sum(1) * torch.randn(len(prompts)))).mean().backward()
    return time.perf_counter() - w, time.process_time() - c


def sampled_with_grad(model, prompts, v: int, seed: int) -> torch.Tensor:
    """Tried: the log-probs kept with their graph while sampling (no scoring pass after).

    The after-sampler's loop, unmasked (one prompt length, a ``transformers`` model), under
    autograd; returns [N, T] log-probs whose backward runs through the KV cache.
    """
    rng = np.random.default_rng(seed)
    ids = torch.tensor([list(p) for p in prompts])
    out = model(input_ids=ids, use_cache=True)
    past, z = out.past_key_values, out.logits[:, -1, :v]
    alive, logps = torch.ones(len(prompts), dtype=torch.bool), []
    for t in range(8):
        logp = torch.log_softmax(z.float(), dim=-1)
        tok = torch.where(alive, after._draw(logp.detach(), rng), 0)
        logps.append(torch.where(alive, logp.gather(1, tok[:, None])[:, 0], 0.0))
        alive = alive & (tok != 0)
        if not alive.any() or t == 7:
            break
        out = model(input_ids=tok[:, None], past_key_values=past, use_cache=True)
        past, z = out.past_key_values, out.logits[:, -1, :v]
    return torch.stack(logps, 1)


class _GradSampling:
    """The tried variant as a module-like pair for :func:`update_work`."""

    @staticmethod
    def sample(model, prompts, *, vocab_size, max_new_tokens, rng):
        return (model, prompts, vocab_size, int(rng.integers(1 << 30)))

    @staticmethod
    def token_logps(model, batch, *, vocab_size):
        return sampled_with_grad(batch[0], batch[1], vocab_size, batch[3])


def cases(v_kit: int):
    """(name, model, prompts, V) of each case."""
    tok = lm_kit.tokenizer("copy")
    llama = lm_kit.model(v_kit, 0, tok).eval()
    rng = np.random.default_rng(0)
    same = [(3, *rng.integers(7, 13, 3)) for _ in range(16)]
    mixed = [(3, *rng.integers(7, 13, int(rng.integers(1, 6)))) for _ in range(16)]
    torch.manual_seed(0)
    tiny = TinyLM(v_kit, max_positions=24).eval()
    g = 8
    return [
        ("kit Llama, one prompt length", llama, [p for p in same for _ in range(g)], v_kit),
        ("kit Llama, mixed lengths", llama, [p for p in mixed for _ in range(g)], v_kit),
        ("built-in TinyLM, one length", tiny, [p for p in same for _ in range(g)], v_kit),
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pairs", type=int, default=30)
    p.add_argument("--before", default=BEFORE, help="the commit whose sampler is 'before'")
    args = p.parse_args()
    torch.set_num_threads(1)
    old = before_module(args.before)
    print(f"load average at start: {os.getloadavg()[0]:.1f} (2 cores)")
    print("| case | before/after, wall (median, IQR) | before/after, CPU | after, ms wall |")
    print("|---|---|---|---|")
    runs = [(name, m, ps, v, old) for name, m, ps, v in cases(len(lm_kit.tokenizer("copy")))]
    name, m, ps, v, _ = runs[0]
    runs.append(
        (
            f"{name}: gradients kept while sampling, tried (its time / after)",
            m,
            ps,
            v,
            _GradSampling,
        )
    )
    for name, model, prompts, v, before in runs:
        for mod in (before, after):  # warm-up
            update_work(mod, model, prompts, v, 0)
        wall, cpu, t_after = [], [], []
        for k in range(args.pairs):
            order = (before, after) if k % 2 == 0 else (after, before)
            t = {id(x): update_work(x, model, prompts, v, k) for x in order}
            wall.append(t[id(before)][0] / t[id(after)][0])
            cpu.append(t[id(before)][1] / t[id(after)][1])
            t_after.append(t[id(after)][0])
        q = np.percentile(wall, [25, 50, 75])
        print(
            f"| {name} | {q[1]:.2f} ({q[0]:.2f}–{q[2]:.2f}) | {np.median(cpu):.2f} | "
            f"{np.median(t_after) * 1e3:.0f} |"
        )
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
