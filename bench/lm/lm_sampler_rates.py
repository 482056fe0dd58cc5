"""How often the untrained model's samples are right, drawn by ``finetune``'s sampler and by
Hugging Face ``generate`` as TRL's ``GRPOTrainer`` calls it: the same prompts, per prompt.

    make kit
    OMP_NUM_THREADS=2 python bench/lm/lm_sampler_rates.py --task antonym --n 32 \
        --json bench/results/lm_sampler_rates_antonym.json

Every training prompt of the kit's task, rendered once (``apply_chat_template`` with the
generation prompt, as both trainers render it), is sampled ``--n`` times by each sampler at
temperature 1 over the whole vocabulary, at most T_max tokens (the race's), and each completion
judged by the kit's ``correct``:

- ``eligibility``: ``eligibility.lm.sample.sample`` on the model as ``finetune`` loads it, the
  run's float32;
- ``generate``: ``model.generate`` with the arguments TRL 1.16's ``GRPOTrainer`` builds its
  ``GenerationConfig`` from (``do_sample``, ``temperature`` 1, ``top_p`` 1, ``top_k`` 0,
  ``min_p`` None, ``repetition_penalty`` 1, its pad, BOS and EOS ids), the prompts left-padded.

The two samplers alternate by prompt; each prompt's draws of a sampler are one batch. If both
draw from the same distribution, the per-prompt counts differ only by chance: the record gives
the totals, the prompts each found a right reply on, and a two-sided exact test of the totals
(the binomial of one sampler's share of all right replies, 1/2 under the same distribution).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
T_MAX = {"antonym": 16, "json": 16, "multiply": 8}


def two_sided(k: int, n: int) -> float:
    """P(a Binomial(n, 1/2) is at least as far from n/2 as k is), the exact two-sided test."""
    far = abs(k - n / 2)
    return min(1.0, sum(math.comb(n, i) for i in range(n + 1) if abs(i - n / 2) >= far) / 2**n)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="antonym", choices=sorted(T_MAX))
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--n", type=int, default=32, help="samples a prompt, each sampler")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    args = p.parse_args()

    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from eligibility.lm.edge.hf import decode, encode_prompt
    from eligibility.lm.sample import sample

    kit = Path.home() / ".cache" / "eligibility-kit"
    model_dir = kit / "models" / args.model
    task_dir = kit / "tasks" / args.task
    spec = importlib.util.spec_from_file_location("kit_rewards", kit / "tasks" / "rewards.py")
    rewards = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rewards)  # type: ignore[union-attr]

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    rows = [json.loads(line) for line in (task_dir / "train.jsonl").read_text().splitlines()]
    t_max, n = T_MAX[args.task], args.n
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)

    def judged(texts: list[str], row: dict) -> int:
        scores = rewards.correct(texts, [row["answer"]] * len(texts), [row["task"]] * len(texts))
        return int(sum(scores))

    def ours(ids: list[int]) -> list[str]:
        batch = sample(
            model,
            [list(ids)] * n,
            vocab_size=model.config.vocab_size,  # every logit, as generate draws
            max_new_tokens=t_max,
            rng=rng,
            eos_id=tok.eos_token_id,
        )
        out = []
        for c, m in zip(batch.completion_ids.tolist(), batch.completion_mask.tolist(), strict=True):
            kept = [t for t, k in zip(c, m, strict=True) if k and t != tok.eos_token_id]
            out.append(decode(tok, kept))
        return out

    def generate(ids: list[int]) -> list[str]:
        x = torch.tensor([ids] * n)
        with torch.no_grad():
            y = model.generate(
                input_ids=x,
                attention_mask=torch.ones_like(x),
                max_new_tokens=t_max,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                min_p=None,
                repetition_penalty=1.0,
                pad_token_id=tok.pad_token_id,
                bos_token_id=tok.bos_token_id,
                eos_token_id=tok.eos_token_id,
            )
        return [str(t) for t in tok.batch_decode(y[:, x.shape[1] :], skip_special_tokens=True)]

    samplers = {"eligibility": ours, "generate": generate}
    per = []
    seconds = dict.fromkeys(samplers, 0.0)
    for i, row in enumerate(rows):
        ids = encode_prompt(tok, row["prompt"])
        counts = {}
        for name in list(samplers) if i % 2 == 0 else list(samplers)[::-1]:
            t0 = time.perf_counter()
            counts[name] = judged(samplers[name](ids), row)
            seconds[name] += time.perf_counter() - t0
        per.append({"prompt": i, "answer": row["answer"], **counts})
        print(i, row["answer"], counts, flush=True)
    total = {s: sum(r[s] for r in per) for s in samplers}
    found = {s: sum(1 for r in per if r[s]) for s in samplers}
    both = total["eligibility"] + total["generate"]
    out = {
        "argv": ["bench/lm/lm_sampler_rates.py", *sys.argv[1:]],
        "note": f"{len(rows)} training prompts x {n} samples a sampler, T_max {t_max}, float32, "
        "temperature 1, the kit's correct; seconds are each sampler's, not a benchmark",
        "right": total,
        "samples": len(rows) * n,
        "prompts_with_a_right_reply": found,
        "p_two_sided": two_sided(total["eligibility"], both) if both else None,
        "seconds": seconds,
        "per_prompt": per,
    }
    print(json.dumps({k: v for k, v in out.items() if k != "per_prompt"}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
