"""Where an update's scoring pass goes: its forward, the log-prob head and its backward, profiled.

    python bench/lm/lm_score_profile.py --shape bench/lm/shapes/qwen2.5-0.5b --json $OUT/prof.json
    python bench/lm/lm_score_profile.py --device cpu --tiny   # the harness on a CPU

The shape's config with random weights (``lm_gpu.build``) in a :class:`Policy` in bf16
(autocast over float32 weights; float32 on a CPU), and a batch of random tokens as ``finetune``
samples one: ``--prompts`` distinct prompts of ``--prompt`` tokens, each ``--group`` times, and
completions of ``--t-max`` tokens (no EOS: every row runs to T_max). The scoring pass is
``finetune``'s with its defaults (``lm.update``): ``token_logps`` through the policy (each
distinct prompt computed once, the log-probs from the last hidden states by
``fused_linear_logprobs``), ``objective.loss`` of them, and its backward, in one chunk
(``--micro-batch-size`` unset).

Printed: the median seconds of ``--repeats`` passes (after one warm-up), each between two
synchronisations, split by CUDA events into the trunk's forward (``Forward.continued``), the
head's forward (``fused_linear_logprobs``), the loss, and the backward of all of them; then one
pass under ``torch.profiler`` (CPU and CUDA), its top ``--top`` ops by self device time (on a
CPU: by self CPU time) as a table, their total, the peak memory allocated, and the bytes one
pass keeps for its backward (distinct storages autograd saves, the weights left out).
``--json FILE`` writes the figures and the table's rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1] / "src"), str(HERE)]


def scoring_batch(vocab: int, prompts: int, group: int, prompt: int, t: int, where):  # type: ignore[no-untyped-def]
    """A batch as ``finetune`` samples one, its rewards and ``finetune``'s loss settings.

    ``prompts`` distinct prompts of ``prompt`` random tokens, each ``group`` times, completions
    of ``t`` random tokens (no EOS), rewards uniform in [0, 1), all drawn from seed 0, on
    ``where``; the loss of ``finetune``'s defaults (no KL).
    """
    import torch

    from eligibility.lm import objective
    from eligibility.lm.batch import Completions
    from eligibility.lm.config import FinetuneConfig
    from eligibility.lm.sample import distinct

    g = torch.Generator().manual_seed(0)
    n = prompts * group
    prompt_ids = torch.randint(3, vocab, (prompts, prompt), generator=g).repeat_interleave(group, 0)
    batch = Completions(
        prompt_ids=prompt_ids.to(where),
        prompt_mask=torch.ones(n, prompt, dtype=torch.long, device=where),
        completion_ids=torch.randint(3, vocab, (n, t), generator=g).to(where),
        completion_mask=torch.ones(n, t, dtype=torch.long, device=where),
        logps=torch.zeros(n, t, device=where),
        ended=torch.zeros(n, dtype=torch.bool, device=where),
        prefix=tuple(x.to(where) for x in distinct(prompt_ids.tolist())),
    )
    d = FinetuneConfig("reverse")
    settings = objective.LossSettings(
        group_size=group,
        baseline=d.baseline,
        scale=d.scale,
        aggregation=d.aggregation,
        max_completion_length=t,
        kl="none",
        beta=0.0,
        ref_logps=None,
    )
    return batch, torch.rand(n, generator=g).to(where), settings


def kept_by(f, model) -> int:  # type: ignore[no-untyped-def]
    """The bytes autograd keeps for the backward while ``f()`` runs: the distinct storages it
    saves, ``model``'s parameters left out."""
    import torch

    weights = {prm.untyped_storage().data_ptr() for prm in model.parameters()}
    storages: dict[int, int] = {}

    def keep(x):  # type: ignore[no-untyped-def]
        storage = x.untyped_storage()
        storages.setdefault(storage.data_ptr(), storage.nbytes())
        return x

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda x: x):
        f()
    return sum(size for ptr, size in storages.items() if ptr not in weights)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shape", default=str(HERE / "shapes" / "qwen2.5-0.5b"))
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--group", type=int, default=16)
    p.add_argument("--prompt", type=int, default=40)
    p.add_argument("--t-max", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--device", default="cuda", help="cpu (with --tiny): the harness on a CPU")
    p.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on a CPU")
    p.add_argument("--tiny", action="store_true", help="the shape shrunk (lm_gpu.build)")
    p.add_argument("--json", default=None)
    args = p.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function
    from transformers import AutoModelForCausalLM

    import eligibility.lm.edge.forward as fwd
    from eligibility.lm import objective
    from eligibility.lm.policy import Policy
    from eligibility.lm.sample import token_logps
    from lm_gpu import build

    where = torch.device(args.device)
    cuda = where.type == "cuda"
    dtype = args.dtype or ("bfloat16" if cuda else "float32")
    with tempfile.TemporaryDirectory() as tmp:
        model = AutoModelForCausalLM.from_pretrained(build(Path(args.shape), Path(tmp), args.tiny))
    model = model.float().eval()
    vocab = model.config.vocab_size
    policy = Policy(model, device=where, dtype=dtype)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    n, t = args.prompts * args.group, args.t_max
    batch, rewards, settings = scoring_batch(vocab, args.prompts, args.group, args.prompt, t, where)

    # the trunk's forward and the head's, each bracketed (profiler ranges and CUDA events)
    marks: dict[str, list] = {}

    def event():  # type: ignore[no-untyped-def]
        if cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def bracketed(name, f):  # type: ignore[no-untyped-def]
        def wrapped(*a, **kw):  # type: ignore[no-untyped-def]
            with record_function(name):
                t0 = event()
                out = f(*a, **kw)
                marks.setdefault(name, []).append((t0, event()))
                return out

        return wrapped

    fwd.Forward.continued = bracketed("score.trunk_forward", fwd.Forward.continued)
    fwd.fused_linear_logprobs = bracketed("score.head_forward", fwd.fused_linear_logprobs)

    def one_pass() -> dict[str, tuple]:
        marks.clear()
        for prm in policy.params:
            prm.grad = None
        with policy.precision(), policy.training():
            t0 = event()
            with record_function("score.forward"):
                lp = token_logps(policy, batch, vocab_size=vocab)
                t1 = event()
                value = objective.loss(lp, rewards, batch.completion_mask.bool(), settings)[0]
            t2 = event()
            with record_function("score.backward"):
                value.backward()
            t3 = event()
        return {"forward": (t0, t1), "loss": (t1, t2), "backward": (t2, t3), "total": (t0, t3)}

    def seconds(a, b) -> float:  # type: ignore[no-untyped-def]
        return a.elapsed_time(b) / 1e3 if cuda else b - a

    kept = kept_by(one_pass, model)  # what one pass keeps for its backward
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    parts: dict[str, list[float]] = {}
    walls = []
    for i in range(args.repeats + 1):
        sync()
        w0 = time.perf_counter()
        spans = one_pass()
        sync()
        if i == 0:
            continue  # the warm-up
        walls.append(time.perf_counter() - w0)
        spans |= {k: v[0] for k, v in marks.items()}  # one call each
        for k, (a, b) in spans.items():
            parts.setdefault(k, []).append(seconds(a, b))
    peak = torch.cuda.max_memory_allocated() if cuda else 0

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync()
    with profile(activities=activities) as prof:
        one_pass()
        sync()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    averages = prof.key_averages()
    # the ops alone: the ranges above (and their GPU annotations) are reported apart
    ops = [e for e in averages if not e.key.startswith("score.")]
    total_us = sum(getattr(e, key) for e in ops)
    rows = []
    for e in sorted(ops, key=lambda e: getattr(e, key), reverse=True)[: args.top]:
        rows.append({
            "op": e.key, "calls": e.count, "self_ms": getattr(e, key) / 1e3,
            "share": getattr(e, key) / max(total_us, 1e-9),
            "self_cpu_ms": e.self_cpu_time_total / 1e3,
        })  # fmt: skip
    ranges = {
        e.key: {"cpu_ms": e.cpu_time_total / 1e3,
                "device_ms": getattr(e, "device_time_total", 0) / 1e3}
        for e in averages if e.key.startswith("score.")
    }  # fmt: skip

    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    shape = Path(args.shape).name + (" (tiny)" if args.tiny else "")
    split = {k: statistics.median(v) for k, v in parts.items()}
    who = "device" if cuda else "CPU"
    print(f"one pass profiled: top {len(rows)} ops by self {who} time")
    print(f"| op | calls | self {who} ms | share | self CPU ms |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['op'][:70]} | {r['calls']} | {r['self_ms']:.3f} | {100 * r['share']:.1f}% | "
              f"{r['self_cpu_ms']:.3f} |")  # fmt: skip
    if cuda:  # the host's side too: where the CPU's time goes while it launches
        cpu_rows = sorted(ops, key=lambda e: e.self_cpu_time_total, reverse=True)[:10]
        print("\ntop 10 by self CPU time:")
        for e in cpu_rows:
            print(f"  {e.key[:70]:<70} {e.count:>5} {e.self_cpu_time_total / 1e3:9.3f} ms")
    print("\nranges:", json.dumps(ranges))
    # the summary last: the lines gpu_all.sh's tail shows
    print(f"{name}, {shape} (random weights), {dtype}: {n} rows ({args.prompts} prompts × G "
          f"{args.group}), prompt {args.prompt}, T {t}")  # fmt: skip
    print(f"profiled total of self {who} time {total_us / 1e3:.2f} ms; "
          f"peak memory allocated {peak / 2**30:.2f} GiB")  # fmt: skip
    layers = model.config.num_hidden_layers
    per_token = kept / (n * t * layers) / 1024
    print(f"kept for the backward: {kept / 2**30:.3f} GiB; {per_token:.2f} KiB a token and layer")
    print(
        f"median s of a scoring pass ({args.repeats} repeats): wall "
        f"{statistics.median(walls):.4f}; " + ", ".join(f"{k} {v:.4f}" for k, v in split.items())
    )
    result = {
        "argv": sys.argv, "device": name, "shape": shape, "dtype": dtype, "rows": n,
        "prompts": args.prompts, "group": args.group, "prompt": args.prompt, "t_max": t,
        "torch": torch.__version__,
        "wall_s": statistics.median(walls), "split_s": split, "peak_gib": peak / 2**30,
        "kept_gib": kept / 2**30, "kept_kib_per_token_layer": per_token,
        "profiled_total_ms": total_us / 1e3, "sorted_by": key, "top": rows, "ranges": ranges,
    }  # fmt: skip
    print(json.dumps({k: v for k, v in result.items() if k not in ("top", "ranges")}))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
