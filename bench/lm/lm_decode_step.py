"""A decode step on a GPU split in two: the captured model step alone and the rest (sampling).

    python bench/lm/lm_decode_step.py --shape bench/lm/shapes/smollm2-135m --rows 256 --t-max 128

The shape's config with random weights (``lm_gpu.build``), the sampler of ``finetune`` on it
in bf16 (autocast over float32 weights) on CUDA: G·P rows of one prompt each of ``--prompt``
tokens, T_max tokens each. Printed as JSON: ms per decode step of a whole sampling (the median
of ``--repeats`` samplings, the prompts' pass and the capture included), and ms per replay of
the model step alone (the last sampling's decoding, its step at the last position captured
by the decoding itself, replayed ``--replays`` times between two synchronisations). Their
difference is the step's sampling, its bookkeeping and its launches. ``--compile``: the same
samplings with the step compiled (``--compile-decode``: inductor's kernels in the captured
graph) alternating with the eager step's, in the same process; ``compile_s``: the first
compiled sampling's seconds beyond the median one's (the compile, paid once a run). On a CPU
(``--device cpu --tiny``, the harness checked before a GPU's minutes are spent) the decoding is
given the fixed shapes it takes on CUDA (there too: the library holds the captured step back),
and its step runs eagerly where CUDA would replay a graph.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1] / "src"), str(HERE)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shape", default=str(HERE / "shapes" / "smollm2-135m"))
    p.add_argument("--rows", type=int, default=256)
    p.add_argument("--group", type=int, default=16)
    p.add_argument("--prompt", type=int, default=40)
    p.add_argument("--t-max", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--replays", type=int, default=200)
    p.add_argument("--device", default="cuda", help="cpu (with --tiny): the harness on a CPU")
    p.add_argument("--tiny", action="store_true", help="the shape shrunk (lm_gpu.build)")
    p.add_argument("--compile", action="store_true", help="also the step compiled, alternating")
    args = p.parse_args()

    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    from eligibility.lm.edge import decoding, device
    from eligibility.lm.edge.forward import Forward
    from eligibility.lm.sample import sample
    from lm_gpu import build

    with tempfile.TemporaryDirectory() as tmp:
        model = AutoModelForCausalLM.from_pretrained(build(Path(args.shape), Path(tmp), args.tiny))
    where = torch.device(args.device)
    model = model.float().to(where).eval()
    sync = torch.cuda.synchronize if where.type == "cuda" else (lambda: None)
    vocab = model.config.vocab_size
    rng = np.random.default_rng(0)
    distinct = [
        list(map(int, rng.integers(3, vocab, args.prompt))) for _ in range(args.rows // args.group)
    ]
    prompts = [p for p in distinct for _ in range(args.group)]
    # the captured step, which the library holds back (lm.edge.decoding.fixed_shapes); on a CPU
    # its fixed shapes run eagerly
    decoding.fixed_shapes = lambda device: True
    made = []  # each eager sampling's decoding, as Forward.decoding makes it
    make, compiled = Forward.decoding, [False]

    def decoding(forward, *a, **kw):
        made.append(make(dataclasses.replace(forward, compiled=compiled[0]), *a, **kw))
        return made[-1]

    Forward.decoding = decoding
    per_step: dict[bool, list[float]] = {False: [], True: []}
    seconds: dict[bool, list[float]] = {False: [], True: []}  # each sampling's
    outs: dict[bool, list] = {False: [], True: []}
    failed = None  # the compiled step's error, if it fails: the eager figures still reported
    with device.precision("bfloat16", where):
        for _ in range(args.repeats + 1):
            for compiled[0] in (False, True) if args.compile and not failed else (False,):
                sync()
                t0 = time.perf_counter()
                try:
                    out = sample(model, prompts, vocab_size=vocab, max_new_tokens=args.t_max,
                                 rng=np.random.default_rng(1), eos_id=-1)  # fmt: skip
                except Exception as e:  # reported; the eager step measured on
                    if not compiled[0]:
                        raise
                    failed = f"{type(e).__name__}: {e}"[-3000:]
                    continue
                sync()
                seconds[compiled[0]].append(time.perf_counter() - t0)
                per_step[compiled[0]].append(seconds[compiled[0]][-1] / out.completion_ids.shape[1])
                outs[compiled[0]].append(out)
        same = None if not failed else {"error": failed}
        if (
            args.compile and not failed
        ):  # the compiled step's tokens and log-probs against the eager one's
            a, b = outs[False][-1], outs[True][-1]
            same = {
                "tokens_equal": float((a.completion_ids == b.completion_ids).float().mean()),
                "max_abs_logp_diff": float((a.logps - b.logps).abs().max()),
            }
        last, replay = [d for d in made if not d.forward.compiled][-1], None
        if last.fixed:  # the last sampling's model step alone, at its last position, captured
            t = torch.full((1,), args.t_max - 2, dtype=torch.long, device=where)
            tok = torch.zeros(len(prompts), dtype=torch.long, device=where)
            live = torch.ones(len(prompts), dtype=torch.bool, device=where)
            step = last.captured(lambda: last.step_at(t, tok, live), [t, tok, live])
            step()
            sync()
            t0 = time.perf_counter()
            for _ in range(args.replays):
                step()
            sync()
            replay = (time.perf_counter() - t0) / args.replays
    name = torch.cuda.get_device_name(0) if where.type == "cuda" else "cpu"
    print(json.dumps({
        "argv": sys.argv, "device": name, "shape": Path(args.shape).name,
        "decoding": type(last).__name__, "rows": args.rows, "t_max": args.t_max,
        "ms_per_step": 1e3 * statistics.median(per_step[False][1:]),
        "ms_per_replay": None if replay is None else 1e3 * replay,
        **({} if not args.compile or failed else {
            "ms_per_step_compiled": 1e3 * statistics.median(per_step[True][1:]),
            "compile_s": seconds[True][0] - statistics.median(seconds[True][1:]),
        }),
        **({"compiled_vs_eager": same} if args.compile else {}),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
