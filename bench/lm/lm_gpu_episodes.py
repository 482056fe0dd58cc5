"""Episodes on a GPU: ``finetune guess``, an environment with a tool, and single turns beside it.

    python bench/lm/lm_gpu_episodes.py --json $OUT/episodes.json
    python bench/lm/lm_gpu_episodes.py --device cpu --tiny   # the harness on a CPU

Three runs of ``python -m eligibility finetune``, each a process of its own (a run that fails
or outlasts ``--limit`` is recorded with its error's tail, and the next one runs), in this order
(``tools`` and ``single`` are the pair compared; ``guess`` last):

- ``guess``: the built-in game of several turns (replies of one token, at most 3 guesses) on
  its own model, ``finetune``'s defaults but the device, dtype and updates.
- ``tools``: a TRL environment class with a tool (``bench/lm/counter.py``'s ``Counter``:
  ``reset`` says where the counter starts, ``increment(a)`` is its tool; the rows' target 3)
  with ``--env`` at the
  SmolLM2-135M shape (``lm_gpu.build``: random weights, a byte-level tokenizer, its chat
  template one that renders tools and tool calls), ``--prompts`` P rows of G episodes, a
  reply of at most ``--t-max`` tokens. Random weights never write a parsable call nor an EOS:
  an episode is mostly one reply of T_max tokens, so the run measures the episodes' loop
  (the environments' worker, the chat's rendering, the credit per turn) around the tokens.
- ``single``: the same model, prompts, reward function and T_max, as single completions: the
  same tokens per update without the episodes' machinery.

Each: ``--dtype bfloat16`` on CUDA (float32 on a CPU), no evaluation, ``--updates`` updates.
Reported per run (one JSON line on stdout, and ``--json FILE``): the median seconds per update
over the updates after the first (the run's ``wall_s`` column differenced) and of each
``time/<phase>`` column, the tokens per update (``tokens`` differenced), the mean reply
length, turns and tool calls, and the process's own seconds; then each run's s/update over
``single``'s.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
sys.path[:0] = [str(SRC), str(HERE)]

TOOL_CHAT = (
    "{% if tools %}<|im_start|>system\nYou may call these tools:{% for t in tools %} "
    "{{ t.function.name }}{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>"
    "{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}</tool_call>"
    "{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>{{ m.content }}"
    "</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A chat template in Qwen's shape that renders tools, tool calls and tool results."""


def setup(tmp: Path, shape: Path, tiny: bool, prompts: int) -> Path:
    """The model (``lm_gpu.build``, its template one of tools), the environment, the rows."""
    from transformers import AutoTokenizer

    from lm_gpu import build

    model = build(shape, tmp, tiny)  # writes tmp/reward.py too
    tok = AutoTokenizer.from_pretrained(model)
    tok.chat_template = TOOL_CHAT
    tok.save_pretrained(model)
    rows = []
    for k in range(prompts):
        text = "Call increment until the counter reaches 3, then say done."
        rows.append({"prompt": [{"role": "user", "content": text}], "start": k % 3, "target": 3})
    (tmp / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return model


def argvs(args: argparse.Namespace, tmp: Path, model: Path) -> dict[str, list[str]]:
    dtype = "bfloat16" if args.device == "cuda" else "float32"
    common = ["--device", args.device, "--dtype", dtype, "--max-updates", str(args.updates),
              "--eval-every", "0", "--target-accuracy", "none", "--no-progress"]  # fmt: skip
    sized = ["--model", str(model), "--prompts", str(tmp / "rows.jsonl"),
             "--group-size", str(args.g), "--prompts-per-batch", str(args.prompts),
             "--max-completion-length", str(args.t_max)]  # fmt: skip
    reward = f"{tmp / 'reward.py'}:reward"
    env = ["--env", f"{HERE / 'counter.py'}:Counter", "--max-tool-calls", "2"]
    return {
        "tools": [reward, *sized, *env, *common],
        "single": [reward, *sized, *common],
        "guess": ["guess", *common],
    }


def run(name: str, argv: list[str], out: Path, limit: float) -> dict:
    """One ``finetune`` in a process of its own; its figures from metrics.csv, or its error."""
    cmd = [sys.executable, "-m", "eligibility", "finetune", *argv, "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=env)
    except subprocess.TimeoutExpired as e:
        tail = (e.stderr or b"")[-1500:]
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return {"run": name, "error": f"timed out after {limit:.0f} s: {tail}"}
    row: dict = {"run": name, "process_s": time.perf_counter() - t0}
    if proc.returncode:
        return row | {"error": f"exit {proc.returncode}: {(proc.stdout + proc.stderr)[-1500:]}"}
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    later = rows[1:] or rows  # the updates after the first (the first compiles and warms up)

    def num(r: dict, k: str) -> float:
        return float(r[k]) if r.get(k) not in (None, "") else float("nan")

    def median(k: str) -> float | None:  # None: the column is empty (no turns on single ones)
        values = [num(r, k) for r in later]
        return None if any(math.isnan(v) for v in values) else statistics.median(values)

    walls = [num(r, "wall_s") for r in rows]
    tokens = [num(r, "tokens") for r in rows]
    steps = [b - a for a, b in itertools.pairwise(walls)] or walls
    per = [b - a for a, b in itertools.pairwise(tokens)] or tokens
    phases = {k[5:]: median(k) for k in rows[0] if k.startswith("time/") and k != "time/start"}
    return row | {
        "updates": len(rows), "s_per_update": statistics.median(steps), "steps_s": steps,
        "tokens_per_update": statistics.median(per), "completions": num(rows[0], "completions"),
        "mean_length": median("mean_length"), "turns": median("turns"),
        "tool_calls": median("tool_calls"), "tool_failures": median("tool_failures"),
        "phases_s": phases, "last_line": proc.stdout.strip().splitlines()[-1:],
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shape", default=str(HERE / "shapes" / "smollm2-135m"))
    p.add_argument("--g", type=int, default=8)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--t-max", type=int, default=64)
    p.add_argument("--updates", type=int, default=4)
    p.add_argument("--limit", type=float, default=40, help="seconds a run may take")
    p.add_argument("--only", nargs="*", default=None, help="guess, tools, single")
    p.add_argument("--device", default="cuda", help="cpu (with --tiny): the harness on a CPU")
    p.add_argument("--tiny", action="store_true", help="the shape shrunk (lm_gpu.build)")
    p.add_argument("--json", default=None)
    args = p.parse_args()

    import torch

    cuda = args.device == "cuda"
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    meta = {"argv": sys.argv, "device": name, "torch": torch.__version__, "g": args.g,
            "prompts": args.prompts, "t_max": args.t_max}  # fmt: skip
    results: list[dict] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        model = setup(tmp, Path(args.shape), args.tiny, args.prompts)
        for key, argv in argvs(args, tmp, model).items():
            if args.only and key not in args.only:
                continue
            results.append(run(key, argv, tmp / f"run_{key}", args.limit))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
            if args.json:  # each run's figures kept as they come, should a later one hang
                Path(args.json).write_text(json.dumps({**meta, "runs": results}, indent=1))
    by = {r["run"]: r for r in results if "error" not in r}
    single = by.get("single")
    shape = Path(args.shape).name + (" (tiny)" if args.tiny else "")
    size = f"G {args.g} × {args.prompts} prompts, T_max {args.t_max}"
    print(f"\n{name}; tools and single at the {shape} shape (random weights), {size}; "
          "guess on its own model")  # fmt: skip
    print("| run | s/update | tokens/update | turns | tool calls | ÷ single |")
    print("|---|---|---|---|---|---|")
    for r in results:
        if "error" in r:
            print(f"| {r['run']} | error: {r['error'][-300:]!r} | | | | |")
            continue
        ratio = f"{r['s_per_update'] / single['s_per_update']:.2f}" if single else ""
        turns, calls = (f"{r[k]:.2f}" if r[k] is not None else "" for k in ("turns", "tool_calls"))
        print(f"| {r['run']} | {r['s_per_update']:.3f} | {r['tokens_per_update']:.0f} | "
              f"{turns} | {calls} | {ratio} |")  # fmt: skip
    summary = {**meta, "runs": results}
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    if len(by) < len(results):
        sys.exit(1)  # a run that failed fails the measurement (its error is in the JSON)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
