"""The captured decode step against the eager one, on the two models of ``make gpu``'s test.

    python bench/lm/lm_capture_check.py                 # on CUDA
    python bench/lm/lm_capture_check.py --device cpu    # the harness on a CPU

``tests/test_lm_decode.py``'s ``test_the_captured_cuda_step_gives_the_eager_steps_tokens``
asserts that a sampling whose step is captured once as a CUDA graph and replayed gives the
tokens of the eager step; where it fails, this says how. For each model of that test (a
direct Llama, Qwen3 through ``transformers``' ``StaticCache``), with and without a truncation,
in float32 and in bfloat16, the same sampling (16 rows, T_max 24, the same uniforms) is run
three times: captured, eager, captured again. Printed per case (one line each): the
completions' shapes, row 0's tokens and log-probs each way, the rows that differ and the
first column where each does, the largest log-prob difference before it, and whether the
two captured samplings agree. On a CPU the captured path's fixed shapes run eagerly (no graph),
so every case agrees there. ``--trace``: after each replay, a synchronisation and a reading
of the step index and the rows going. ``--clobber``: what the fault found did, stood in for on
any device: the step index, freed once the capture returned (a CUDA graph holds none of its
tensors), its memory handed to the host check's flag, so each check overwrote its low byte.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument(
        "--trace",
        action="store_true",
        help="after each replay: synchronise, read the step index and the rows going",
    )
    p.add_argument(
        "--clobber",
        action="store_true",
        help="stand in for the fault found: the step index overwritten at each host check",
    )
    args = p.parse_args()

    import numpy as np
    import torch

    import test_lm_decode as t
    from eligibility.lm import sample as sampler
    from eligibility.lm.edge import decoding, device
    from eligibility.lm.sample import sample

    where = torch.device(args.device)
    trace: list[tuple[int, int]] = []  # (the step index after a replay, the rows going)
    if args.trace:
        own = decoding._FixedShapes.captured

        def captured(self, step, state):
            replay = own(self, step, state)  # state: [t, tokens, mask, logps, alive, ...]

            def traced():
                replay()
                if where.type == "cuda":
                    torch.cuda.synchronize()
                trace.append((int(state[0]), int(state[4].sum())))

            return traced

        decoding._FixedShapes.captured = captured
    if args.clobber:  # the step index's memory handed to the host check's flag, as on CUDA
        held: dict[str, torch.Tensor] = {}
        replayed = decoding.replayed

        def keeping(step, where_, state):
            held["t"] = state[0]
            return replayed(step, where_, state)

        def check(n: int) -> int:
            if "t" in held:
                held["t"].copy_((held["t"] & ~0xFF) | (int(n) & 0xFF))
            return n

        decoding.replayed = keeping
        sampler.largest_in_lockstep = lambda model: check
    for family in ("llama", "qwen3"):
        for truncation in ("penalty", None):
            for dtype in ("float32", "bfloat16"):
                model = (t._llama(4) if family == "llama" else t._qwen3()).to(where)
                runs, trace[:] = [], []
                for fixed in (True, False, True):
                    decoding.fixed_shapes = lambda d, fixed=fixed: fixed
                    with device.precision(dtype, where):
                        runs.append(
                            sample(
                                model,
                                t._groups(4),
                                vocab_size=t.V - 2,
                                max_new_tokens=24,
                                temperature=t.TAU,
                                rng=np.random.default_rng(6),
                                sampling=t.TRUNCATIONS[truncation] if truncation else None,
                            )
                        )
                graph, eager, again = runs
                if args.trace:  # the first captured sampling's steps beside the eager one's
                    first = trace[: len(trace) // 2]
                    going = eager.completion_mask.sum(0).tolist()
                    print(
                        f"{family} {truncation} {dtype} trace (t after replay, rows going; "
                        "eager rows going at t)",
                        first,
                        going[1:],
                        flush=True,
                    )
                case = f"{family} {truncation} {dtype}"
                print(
                    case,
                    "shapes",
                    *(tuple(r.completion_ids.shape) for r in runs),
                    "captured row 0",
                    graph.completion_ids[0].tolist(),
                    [round(x, 3) for x in graph.logps[0].tolist()],
                    "eager row 0",
                    eager.completion_ids[0].tolist(),
                    [round(x, 3) for x in eager.logps[0].tolist()],
                    flush=True,
                )
                if graph.completion_ids.shape != eager.completion_ids.shape:
                    continue
                differ = graph.completion_ids != eager.completion_ids
                first = [int(row.nonzero()[0]) if row.any() else -1 for row in differ]
                gap = (graph.logps - eager.logps).abs()
                before = [float(gap[i, :f].max()) for i, f in enumerate(first) if f > 0]
                print(
                    case,
                    "rows differing",
                    sum(f >= 0 for f in first),
                    "of",
                    len(first),
                    "first columns",
                    first,
                    "largest |Δ ln π| before",
                    f"{max(before, default=0.0):.2e}",
                    "captured twice equal",
                    torch.equal(graph.completion_ids, again.completion_ids),
                    flush=True,
                )


if __name__ == "__main__":
    main()
