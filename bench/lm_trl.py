"""``eligibility finetune`` against TRL's ``GRPOTrainer``: same model, task and budget, on CPU.

    OMP_NUM_THREADS=1 python bench/lm_trl.py --seeds 0 1 2 --json bench/results/lm_trl.json

One process per (system, seed), one thread each, the systems alternating in order from seed to
seed. The model: a 2-layer GPT-2 (``tiny_gpt2``: width 64, 4 heads, dropout 0) over the task's
vocabulary, built from its config with the seed; the task: ``repeat`` (16 prompts of one
length, so no padding enters either side); the budget: at most ``--max-updates`` updates of 8
prompts × G = 16 completions, T_max = 12, temperature 1, Adam(W) at lr 1e-3 (constant), gradient
norm clipped at 1, KL weight β = 0.02 to the initial model. What differs is each system's own
loss: ours its defaults (RLOO, sequence sum, the KL as a reward-to-go), TRL its defaults
(``loss_type="dapo"``, ``scale_rewards="group"``, the k3 KL in the loss); a third system,
``eligibility-trl-loss``, is our loop with TRL's loss (``--baseline mean --scale group-std
--aggregation token-mean --kl k3``): the same math, so its time against TRL's is the loops'
difference. All are stopped by one
evaluator: the greedy accuracy over the 16 prompts (this project's sampler, on the system's
own model), every 10 updates, target 0.95. Reported: whether the target was reached, updates,
wall time to it (evaluation included, model building and imports not), and the process's peak
resident memory (``ru_maxrss``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

TASK, G, PROMPTS, T_MAX, LR, BETA, EVAL_EVERY, TARGET = "repeat", 16, 8, 12, 1e-3, 0.02, 10, 0.95


def tiny_gpt2():
    """The shared model (the seed is set by the caller before building it)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from eligibility.lm.tasks import make_task

    v = make_task(TASK).vocab_size
    cfg = GPT2Config(
        vocab_size=v,
        n_positions=32,
        n_embd=64,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=1,
        eos_token_id=0,
        pad_token_id=0,
    )
    return GPT2LMHeadModel(cfg)


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def save_model(seed: int, path: Path) -> None:
    """The shared initial model of ``seed``, saved where both systems load it from."""
    import torch

    torch.manual_seed(seed)
    tiny_gpt2().save_pretrained(path)


def run_ours(seed: int, max_updates: int, model_dir: str, **loss: Any) -> dict:
    import torch

    from eligibility.lm import FinetuneConfig, finetune

    torch.set_num_threads(1)
    cfg = FinetuneConfig(
        TASK,
        model=model_dir,
        seed=seed,
        group_size=G,
        prompts_per_batch=PROMPTS,
        max_completion_length=T_MAX,
        lr=LR,
        beta=BETA,
        max_updates=max_updates,
        eval_every=EVAL_EVERY,
        target_accuracy=TARGET,
        progress=False,
        **loss,
    )
    r = finetune(cfg)
    wall = r.history[-1]["wall_s"] if r.history else 0.0
    return {
        "solved": r.solved,
        "updates": r.updates,
        "wall_s": wall,
        "final_accuracy": r.final_eval_return,
        "peak_mib": _peak_mib(),
    }


def run_trl(seed: int, max_updates: int, model_dir: str) -> dict:
    import tempfile

    import numpy as np
    import torch
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from eligibility.lm.sample import sample
    from eligibility.lm.tasks import EOS, make_task

    torch.set_num_threads(1)
    task = make_task(TASK)
    ids = {t: i for i, t in enumerate(task.vocab)}
    tok = Tokenizer(models.WordLevel(ids, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>", bos_token="<bos>"
    )
    tokenizer.padding_side = "left"
    data = Dataset.from_list(
        [
            {"prompt": " ".join(task.vocab[t] for t in p), "index": i}
            for i, p in enumerate(task.prompts)
        ]
    )
    assert tokenizer(data[0]["prompt"])["input_ids"] == list(task.prompts[0])

    def reward(prompts, completions, completion_ids, index, **kw):
        out = []
        for c, i in zip(completion_ids, index, strict=True):
            ended = bool(c) and c[-1] == EOS
            out.append(task.score(i, c[:-1] if ended else c, ended))
        return out

    state = {"solved": False, "acc": None, "t0": None, "wall": None}

    class Stop(TrainerCallback):
        def on_train_begin(self, args, st, control, **kw):
            state["t0"] = time.perf_counter()

        def on_step_end(self, args, st, control, model=None, **kw):
            if st.global_step % EVAL_EVERY == 0:
                was = model.training
                model.eval()
                b = sample(model, task.prompts, vocab_size=task.vocab_size, max_new_tokens=T_MAX)
                model.train(was)
                acc = float(
                    np.mean(
                        [
                            task.score(i, b.completion(i), bool(b.ended[i])) == 1.0
                            for i in range(len(task.prompts))
                        ]
                    )
                )
                state["acc"], state["wall"] = acc, time.perf_counter() - state["t0"]
                if acc >= TARGET:
                    state["solved"] = True
                    control.should_training_stop = True
            state["wall"] = time.perf_counter() - state["t0"]
            state["updates"] = st.global_step

    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(
            output_dir=tmp,
            use_cpu=True,
            seed=seed,
            learning_rate=LR,
            lr_scheduler_type="constant",
            per_device_train_batch_size=G * PROMPTS,
            num_generations=G,
            max_completion_length=T_MAX,
            temperature=1.0,
            beta=BETA,
            max_steps=max_updates,
            logging_steps=10**6,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            bf16=False,
            max_grad_norm=1.0,
        )
        args.model_init_kwargs = {"dtype": torch.float32}
        trainer = GRPOTrainer(
            model=model_dir,
            reward_funcs=reward,
            args=args,
            train_dataset=data,
            processing_class=tokenizer,
            callbacks=[Stop()],
        )
        trainer.train()
    return {
        "solved": state["solved"],
        "updates": state.get("updates"),
        "wall_s": state["wall"],
        "final_accuracy": state["acc"],
        "peak_mib": _peak_mib(),
    }


def run_ours_trl_loss(seed: int, max_updates: int, model_dir: str) -> dict:
    """This project's trainer with TRL's default loss: the same math as TRL, our loop."""
    return run_ours(
        seed,
        max_updates,
        model_dir,
        baseline="mean",
        scale="group-std",
        aggregation="token-mean",
        kl="k3",
    )


SYSTEMS = {"eligibility": run_ours, "trl": run_trl, "eligibility-trl-loss": run_ours_trl_loss}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--max-updates", type=int, default=300)
    p.add_argument("--json", default=None)
    p.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    p.add_argument("--report", nargs="+", metavar="JSON", help="print the table of these files")
    p.add_argument("--one", nargs=3, metavar=("SYSTEM", "SEED", "DIR"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.report:
        report([r for f in args.report for r in json.load(open(f))["runs"]])
        return
    if args.one:  # a child: one run, RESULT on the last line
        sys.path.insert(0, str(Path(__file__).parent))
        res = SYSTEMS[args.one[0]](int(args.one[1]), args.max_updates, args.one[2])
        print("RESULT " + json.dumps(res))
        return
    runs = []
    names = args.systems
    import tempfile

    tmp = tempfile.TemporaryDirectory()
    for k, seed in enumerate(args.seeds):
        model_dir = Path(tmp.name) / f"init-{seed}"
        save_model(seed, model_dir)
        for name in names if k % 2 == 0 else names[::-1]:
            env = {
                **os.environ,
                "OMP_NUM_THREADS": "1",
                "PYTHONPATH": os.pathsep.join(
                    [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
                ),
            }
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--one",
                    name,
                    str(seed),
                    str(model_dir),
                    "--max-updates",
                    str(args.max_updates),
                ],
                env=env,
                capture_output=True,
                text=True,
            )
            last = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            res = json.loads(last[-1][7:]) if last else {"error": out.stderr[-2000:]}
            res.update(system=name, seed=seed)
            runs.append(res)
            print(json.dumps(res), file=sys.stderr, flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"runs": runs, "max_updates": args.max_updates}, f, indent=1)
    report(runs)


def report(runs: list[dict]) -> None:
    """The table: per system, runs that reached the target, updates and wall to it, seconds
    per update (every run), peak memory; and, per seed, TRL's seconds per update over ours."""
    import numpy as np

    names = [n for n in SYSTEMS if any(r.get("system") == n for r in runs)]
    print(
        "| system | reached 0.95 | updates to target (median) | wall s to target (median) "
        "| s per update (median) | peak MiB (median) |"
    )
    print("|---|---|---|---|---|---|")

    def med(key: str, xs: list[dict]) -> str:
        return f"{np.median([r[key] for r in xs]):.0f}" if xs else "–"

    def per_update(r: dict) -> float:
        return r["wall_s"] / r["updates"]

    for name in names:
        rs = [r for r in runs if r.get("system") == name and "error" not in r]
        ok = [r for r in rs if r["solved"]]
        spu = np.median([per_update(r) for r in rs])
        print(
            f"| {name} | {len(ok)}/{len(rs)} | {med('updates', ok)} | {med('wall_s', ok)} | "
            f"{spu:.2f} | {med('peak_mib', rs)} |"
        )
    by = {(r["system"], r["seed"]): r for r in runs if "error" not in r}
    for ours in ("eligibility", "eligibility-trl-loss"):
        ratios = [
            per_update(by[("trl", s)]) / per_update(by[(ours, s)])
            for (n, s) in by
            if n == ours and ("trl", s) in by
        ]
        if ratios:
            print(
                f"\nTRL's seconds per update over {ours}'s, per seed: "
                f"{', '.join(f'{x:.2f}' for x in ratios)} (median {np.median(ratios):.2f})"
            )


if __name__ == "__main__":
    main()
