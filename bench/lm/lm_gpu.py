"""One ``finetune`` update on a GPU beside one ``GRPOTrainer`` step, at a real model's shape.

    python bench/lm/lm_gpu.py --json bench/results/lm_gpu_h100.json
    python bench/lm/lm_gpu.py --shape bench/lm/shapes/qwen2.5-0.5b --g 16 --prompts 16 \
        --t-max 128 --only eligibility:bfloat16:0 trl:bfloat16:0 --json $OUT/qwen.json
    python bench/lm/lm_gpu.py --device cpu --tiny --only eligibility:float32:0 --updates 2 \
        --warmup 0 --g 2 --prompts 2 --t-max 4   # the harness on a CPU, a tiny model

The shapes carried in the repository: ``bench/lm/shapes/smollm2-135m`` (the default) and
``bench/lm/shapes/qwen2.5-0.5b``, each a ``config.json`` alone; a folder with a tokenizer uses
it, one without gets a byte-level tokenizer of the config's vocabulary with a ChatML template.
Without ``--prompts-file`` the prompts are 64 conversational multiplication questions.

Run on a machine with CUDA (``device`` tool: an H100 here). The model: SmolLM2-135M-Instruct's
own ``config.json``, tokenizer and chat template (the files of ``--shape DIR`` but its weights:
by default the kit's model directory; on the GPU machine, a folder of just those files) with
random weights (seed 0): the shape and vocabulary of the real model, without carrying its
0.5 GB of weights to the GPU machine. Random weights never say EOS, so every completion runs
to T_max, on both sides alike. The prompts: the kit's ``multiply`` training split
(``--prompts-file``, conversational); the reward: a deterministic function of the completion's
text that varies within a group (so no update is skipped for zero advantages).

Each mode runs in a process of its own, the systems alternating: ``--updates`` updates of
G × P completions of T_max tokens, the first ``--warmup`` left out; printed per mode: the
median seconds per update, the peak GPU memory allocated (``torch.cuda.max_memory_allocated``)
and the ratio of TRL's seconds per update to ours at the same dtype and adapters.

``--compiled``: two more systems, ``captured``: ours with the decode step captured as a CUDA
graph (``lm.edge.decoding.fixed_shapes`` turned on in its process: the library holds it back
until a GPU shows it exact; the tokens a completion say whether it did the work the others
did), and ``compiled``: the same with ``--compile-decode`` (the model's step through
``torch.compile`` inside that graph; the compile falls in the first update, left out with the
warm-up: ``compile_s`` says how long that update took beyond the median).

Ours also reports the median seconds of each phase of its loop (``phases_s``: the run's own
``time/<phase>`` columns, ``lm.phases``: sample, reward, score, step, ...), each ending in a CUDA
synchronisation, and ``ms_per_decode_step``: the median over updates
of the sampler's decode loop (``lm.sample._decode``, the prompts' pass excluded) divided by
its steps.

Modes: ``eligibility`` (``finetune`` with its defaults for a pretrained model but the shared
rate, G, P and T_max) and ``trl`` (``GRPOTrainer``, TRL 1.16's loss defaults, gradient
checkpointing off), each in float32 and bfloat16 (ours: ``--dtype bfloat16``, autocast over
float32 weights; TRL: ``bf16=True``, the same) and with full weights or LoRA r = 16.
"""

from __future__ import annotations

import argparse
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

SRC = str(Path(__file__).resolve().parents[2] / "src")
REWARD = '''
def _text(c):
    return c[-1]["content"] if isinstance(c, list) else c


def reward(completions, **kwargs):
    """A deterministic score that differs between completions: no group is all equal."""
    return [(sum(map(ord, _text(c))) % 97) / 97 for c in completions]
'''


def build(shape: Path, tmp: Path, tiny: bool = False) -> Path:
    """A shape's config (and tokenizer) with random weights, saved as a model directory.

    ``tiny``: the config's sizes shrunk (2 layers of width 64, a vocabulary of 512) for a run
    of the harness on a CPU.
    """
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out = tmp / "model"
    out.mkdir()
    for f in shape.iterdir():  # the config and tokenizer files; never the weights
        if f.is_file() and not f.name.endswith((".safetensors", ".bin", ".gguf", ".md")):
            shutil.copy(f, out / f.name)
    config = AutoConfig.from_pretrained(out)
    if tiny:
        config.update(dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                           vocab_size=512))  # fmt: skip
        if getattr(config, "layer_types", None):
            config.layer_types = config.layer_types[:2]
    if not (out / "tokenizer_config.json").exists():
        tokenizer = byte_tokenizer(config.vocab_size)
        tokenizer.save_pretrained(out)
        ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
        config.update(dict(ids, pad_token_id=tokenizer.eos_token_id))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.update(
        **{k: getattr(config, k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    )
    model.save_pretrained(out)
    (tmp / "reward.py").write_text(REWARD)
    return out


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_tokenizer(vocab_size: int):  # type: ignore[no-untyped-def]
    """A byte-level tokenizer of ``vocab_size`` ids: 3 specials, 256 bytes, fillers; ChatML.

    ``<|endoftext|>`` 0, ``<|im_start|>`` 1 (BOS), ``<|im_end|>`` 2 (EOS): a byte a token, no
    merges, so a prompt's length is its bytes'. The fillers make the vocabulary the config's.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    names = specials + sorted(alphabet)
    names += [f"<|x{i}|>" for i in range(vocab_size - len(names))]
    core = Tokenizer(models.BPE({n: i for i, n in enumerate(names)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(specials)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=specials[1],
                                  eos_token=specials[2], pad_token=specials[2])  # fmt: skip
    tok.chat_template = CHATML
    return tok


def prompts_file(tmp: Path, n: int = 64) -> str:
    """``n`` conversational multiplication questions, as a prompts file (``prompt`` column)."""
    import random

    rng = random.Random(0)
    rows = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        text = f"What is {a} times {b}? Answer with the number alone."
        rows.append({"prompt": [{"role": "user", "content": text}]})
    path = tmp / "prompts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def ours(
    args: argparse.Namespace,
    tmp: Path,
    dtype: str,
    lora: bool,
    compiled: bool = False,
    captured: bool = False,
) -> dict:
    """``finetune`` in this process on CUDA: seconds per update and peak GPU memory."""
    import torch

    sys.path.insert(0, SRC)
    from eligibility.lm import FinetuneConfig, finetune
    from eligibility.lm import sample as sampler
    from eligibility.lm.edge import decoding

    if captured or compiled:  # the step captured as a CUDA graph, where the library would not
        decoding.fixed_shapes = lambda device: device.type == "cuda"

    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    steps: list[float] = []  # each sampling's decode loop, seconds a step
    decode = sampler._decode

    def timed(*a, **kw):  # the decode loop, between two synchronisations
        sync()
        t0 = time.perf_counter()
        n = decode(*a, **kw)
        sync()
        steps.append((time.perf_counter() - t0) / n)
        return n

    sampler._decode = timed
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    config = FinetuneConfig(
        f"{tmp / 'reward.py'}:reward",
        model=str(tmp / "model"),
        prompts=args.prompts_file,
        lr=args.lr,
        group_size=args.g,
        prompts_per_batch=args.prompts,
        max_completion_length=args.t_max,
        max_updates=args.updates,
        eval_every=0,
        target_accuracy=None,
        max_kl=float("inf"),
        progress=False,
        dtype=dtype,
        device=args.device,
        lora_r=16 if lora else None,
        compile_decode=compiled,
    )
    result = finetune(config)
    walls = [0.0] + [float(r["wall_s"]) for r in result.history]
    row = _row(walls, args.warmup, torch.cuda.max_memory_allocated() if cuda else 0)
    rows = result.history[args.warmup :]  # the loop's own phases (lm.phases), each synchronised
    row["phases_s"] = {
        k[5:]: statistics.median(float(r[k]) for r in rows)
        for k in rows[0]
        if k.startswith("time/") and k != "time/start"
    }
    # the timed updates' samplings: the last ones (the run's start samples the model too, to
    # measure whether it is untrained: that sampling and the warm-up's are left out)
    row["ms_per_decode_step"] = 1e3 * statistics.median(steps[-(args.updates - args.warmup) :])
    # the tokens a completion holds (random weights: T_max on both sides unless a sampler ends
    # rows early): the two systems did the same work only where these agree
    row["mean_length"] = statistics.median(float(r["mean_length"]) for r in rows)
    row["compile_s"] = walls[1] - walls[0] - row["s_per_update"] if compiled else None
    return row


def trl(args: argparse.Namespace, tmp: Path, dtype: str, lora: bool) -> dict:
    """One ``GRPOTrainer`` run on CUDA: seconds per step and peak GPU memory."""
    import importlib.util

    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    spec = importlib.util.spec_from_file_location("reward", tmp / "reward.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = [json.loads(x) for x in Path(args.prompts_file).read_text().splitlines()]
    walls: list[float] = []
    lengths: list[float] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, a, st, control, **kw):
            torch.cuda.synchronize()
            walls.append(time.perf_counter())

        def on_step_end(self, a, st, control, **kw):
            torch.cuda.synchronize()
            walls.append(time.perf_counter())
            # this step's completions (TRL 1.16 keeps each step's until it logs, which the
            # settings put off to the end: on_log would see one mean over every step)
            made = trainer._metrics["train"]["completions/mean_length"]
            lengths.append(float(made[-1]) if made else math.nan)

    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=16, task_type="CAUSAL_LM")
    torch.cuda.reset_peak_memory_stats()
    from lm_kit import trl_settings

    settings = trl_settings(args.lr, args.g, args.prompts, args.t_max, args.updates)
    config = GRPOConfig(output_dir=str(tmp / "trl"), bf16=dtype == "bfloat16", **settings)
    trainer = GRPOTrainer(
        model=str(tmp / "model"),
        reward_funcs=module.reward,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=AutoTokenizer.from_pretrained(tmp / "model"),
        callbacks=[Clock()],
        peft_config=peft_config,
    )
    trainer.train()
    row = _row([w - walls[0] for w in walls], args.warmup, torch.cuda.max_memory_allocated())
    row["mean_length"] = statistics.median(lengths[args.warmup :])
    return row


def _row(walls: list[float], warmup: int, peak: int) -> dict:
    steps = [b - a for a, b in itertools.pairwise(walls)][warmup:]
    return {"s_per_update": statistics.median(steps), "steps": steps, "peak_gib": peak / 2**30}


SHAPES = Path(__file__).resolve().parent / "shapes"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shape", default=str(SHAPES / "smollm2-135m"))
    p.add_argument("--prompts-file", default=None, help="default: generated multiplications")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--g", type=int, default=16)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--t-max", type=int, default=128)
    p.add_argument("--updates", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--dtypes", nargs="+", default=["bfloat16"])
    p.add_argument("--only", nargs="*", default=None, help="system:dtype:lora, e.g. trl:float32:0")
    p.add_argument("--device", default="cuda", help="cuda; cpu to try the harness (ours only)")
    p.add_argument("--tiny", action="store_true", help="the shape shrunk: the harness on a CPU")
    p.add_argument("--json", default=None)
    p.add_argument(
        "--compiled", action="store_true", help="also ours captured, and with --compile-decode"
    )
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:  # one mode, in a process of its own
        system, dtype, lora, tmp = args.child.split(",")
        if system == "trl":
            row = trl(args, Path(tmp), dtype, lora == "1")
        else:
            row = ours(
                args,
                Path(tmp),
                dtype,
                lora == "1",
                compiled=system == "compiled",
                captured=system == "captured",
            )
        print(json.dumps(row))
        return
    import torch

    cuda = args.device == "cuda"
    rows, device = [], torch.cuda.get_device_name(0) if cuda else "cpu"
    systems = ("eligibility", "trl") + (("captured", "compiled") if args.compiled else ())
    modes = [(s, d, lora) for lora in (False, True) for d in args.dtypes for s in systems]
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(args.shape), Path(tmp), args.tiny)
        prompts = args.prompts_file or prompts_file(Path(tmp))
        for system, dtype, lora in modes:
            key = f"{system}:{dtype}:{int(lora)}"
            if args.only and key not in args.only:
                continue
            argv = [sys.executable, __file__, *sys.argv[1:], "--prompts-file", prompts, "--child"]
            argv.append(f"{system},{dtype},{int(lora)},{tmp}")
            t0 = time.perf_counter()
            proc = subprocess.run(argv, capture_output=True, text=True)
            if proc.returncode:
                rows.append({"mode": key, "error": proc.stderr[-2000:]})
            else:
                res = json.loads(proc.stdout.strip().splitlines()[-1])
                rows.append({"mode": key, "process_s": time.perf_counter() - t0, **res})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    _table(args, device, rows)
    if args.json:
        meta = {"argv": sys.argv, "device": device, "torch": torch.__version__}
        Path(args.json).write_text(json.dumps({**meta, "rows": rows}, indent=1))
    if any("error" in r for r in rows):
        sys.exit(1)  # a mode that failed fails the measurement


def _table(args: argparse.Namespace, device: str, rows: list[dict]) -> None:
    size = f"G {args.g} × {args.prompts} prompts, T_max {args.t_max}"
    shape = Path(args.shape).name + (" (tiny)" if args.tiny else "")
    print(f"\n{device}, {shape} shape (random weights), {size}, lr {args.lr:g}")
    heads = "system|dtype|LoRA|s/update|tokens a completion|ms/decode step|peak GPU GiB|TRL ÷ ours"
    heads = heads.split("|")
    print("| " + " | ".join(heads) + " |\n" + "|---" * len(heads) + "|")
    by = {r["mode"]: r for r in rows if "error" not in r}
    for r in rows:
        system, dtype, lora = r["mode"].split(":")
        if "error" in r:
            print(f"| {system} | {dtype} | {lora} | error: {r['error'][-200:]!r} | | | | |")
            continue
        other = by.get(f"trl:{dtype}:{lora}") if system != "trl" else None
        ratio = f"{other['s_per_update'] / r['s_per_update']:.2f}" if other else ""
        step = f"{r['ms_per_decode_step']:.2f}" if "ms_per_decode_step" in r else ""
        length = f"{r['mean_length']:.1f}" if "mean_length" in r else ""
        print(f"| {system} | {dtype} | {lora} | {r['s_per_update']:.3f} | {length} | {step} | "
              f"{r['peak_gib']:.2f} | {ratio} |")  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
