"""How often a kit model *samples* the exactly right reply, before any update.

    OMP_NUM_THREADS=2 python bench/lm/lm_real_samples.py --tasks capital antonym multiply \
        --prompts 16 --g 32 --json bench/results/lm_real_samples.json

REINFORCE learns the asked form only from completions that have it, so a task whose greedy
accuracy is 0 is learnable in a short run exactly when the sampler finds right replies often
enough. For each task, ``--g`` completions of each of the first ``--prompts`` training prompts
(never the held-out ones) at temperature 1, full vocabulary (no top-k, no top-p), at most
``--t-max`` tokens, through Hugging Face ``generate``, decoded as TRL decodes; each scored by the
kit's ``correct`` (the asked form) and ``reward`` (partial credit). Prints, per task, the right
replies found, the mean reward, and the most common first words of the replies.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from lm_kit import load_function, load_rows  # noqa: E402
from lm_real_kit import DEFAULT_DIR, load_dir  # noqa: E402


def sampled(model, tok, root: Path, task: str, prompts: int, g: int, t_max: int, seed: int):
    """One task's counts: right replies, their texts, mean reward, the replies' first words."""
    import torch

    rewards = root / "tasks" / "rewards.py"
    correct, reward = (load_function(rewards, m) for m in ("correct", "reward"))
    rows = load_rows(root / "tasks" / task / "train.jsonl")[:prompts]
    torch.manual_seed(seed)
    right, total, rewarded, firsts, hits = 0.0, 0, 0.0, collections.Counter(), []
    for row in rows:
        text = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        enc = tok(text, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **enc,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=t_max,
                num_return_sequences=g,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
            )
        texts = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        completions = [[{"role": "assistant", "content": t}] for t in texts]
        columns = {k: [row[k]] * g for k in row if k != "prompt"}
        exact = correct(completions=completions, **columns)
        right += sum(exact)
        rewarded += sum(reward(completions=completions, **columns))
        total += g
        hits += [t for t, c in zip(texts, exact, strict=True) if c]
        firsts.update((t.split() or [""])[0][:16] for t in texts)
    return {
        "task": task, "prompts": len(rows), "g": g, "t_max": t_max,
        "seed": seed, "samples": total, "right": int(right), "right_texts": hits,
        "mean_reward": rewarded / total, "first_words": firsts.most_common(8),
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dir", default=str(DEFAULT_DIR))
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--tasks", nargs="+", default=["capital", "antonym", "multiply"])
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--g", type=int, default=32)
    p.add_argument("--t-max", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    root = Path(args.dir).expanduser().resolve()
    model, tok = load_dir(root / "models" / args.model)  # one model, every task
    rows = []
    for task in args.tasks:
        rows.append(sampled(model, tok, root, task, args.prompts, args.g, args.t_max, args.seed))
        rows[-1] = {"model": args.model, **rows[-1]}
        r = rows[-1]
        print(f"{task}: {r['right']} of {r['samples']} sampled replies exactly right "
              f"{r['right_texts']}, mean reward {r['mean_reward']:.3f}, first words "
              f"{r['first_words']}")  # fmt: skip
    if args.json:
        out = Path(args.json)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps({"argv": sys.argv, "rows": rows}, indent=1) + "\n")
        os.replace(tmp, out)


if __name__ == "__main__":
    main()
