"""Where a pretrained model goes while a sparse reward waits: Adam's state, each step's size and
the policy's distance from the initial one on held-out prompts, per optimiser step, for
``eligibility finetune`` and TRL's ``GRPOTrainer`` on the same kit files.

    make kit peers
    OMP_NUM_THREADS=1 python bench/lm/lm_sparse_drift.py ours --task antonym --seed 6 \
        --updates 30 --json bench/results/lm_sparse_drift_ours.json
    OMP_NUM_THREADS=1 python bench/lm/lm_sparse_drift.py trl --task antonym --seed 6 \
        --updates 30 --json bench/results/lm_sparse_drift_trl.json
    python bench/lm/lm_sparse_drift.py report bench/results/lm_sparse_drift_*.json

Both sides are instrumented from the outside, with torch's global optimiser-step hooks (no
trainer is edited): before each ``optimizer.step()`` the gradient's norm as the optimiser sees it
(after any clipping) and whether it is zero, and a copy of the weights; after it, Adam's step
count t, ‖m‖ and ‖v‖ over every tensor, the bias corrections 1 − β₁ᵗ and 1 − β₂ᵗ, the norm of
Adam's direction ‖m̂ / (√v̂ + ε)‖ (the step over the rate), the step's size ‖Δθ‖, and the exact
KL(π_θ ‖ π₀) per token on 16 held-out prompts, each followed by one completion the initial model
sampled (the same fixed tokens at every step: the full next-token distributions of the current
and the initial policy compared at each completion position). Every batch's rewards are kept,
so the advantage each right answer got is computed both ways: leave-one-out (ours: Aᵢ = Rᵢ −
mean of the other G − 1) and group-standardised (TRL's ``scale_rewards="group"``: (Rᵢ − R̄) /
(std + 1e-4)), with each side's normaliser (ours: 1/N per sequence's sum; TRL's ``dapo``: 1 /
the batch's completion tokens). The greedy held-out accuracy every ``--eval-every`` updates;
the sampled tokens' entropy estimate and length per update as each trainer logs them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
KIT = Path(os.environ.get("ELIGIBILITY_KIT", Path.home() / ".cache" / "eligibility-kit"))


class HeldOutKL:
    """KL(π_θ ‖ π₀) per completion token on fixed held-out sequences (the initial model's samples).

    KL = (1/n) Σ_positions Σ_v π_θ(v | h) (ln π_θ(v | h) − ln π₀(v | h)), the exact KL of the
    two next-token distributions at each position of the completions, averaged.
    """

    def __init__(self, model, tok, rows: list[dict], t_max: int, n: int = 16) -> None:
        texts = [
            tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False)
            for r in rows[:n]
        ]
        self.seqs, self.starts = [], []
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for text in texts:
                ids = tok(text, return_tensors="pt").input_ids
                for _ in range(t_max):  # the initial model's own sample, τ = 1
                    logits = model(ids).logits[0, -1].float()
                    nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)
                    ids = torch.cat([ids, nxt[None]], 1)
                    if int(nxt) == tok.eos_token_id:
                        break
                self.seqs.append(ids)
                self.starts.append(len(tok(text).input_ids) - 1)
            self.ref = [self._logp(model, i) for i in range(len(self.seqs))]

    def _logp(self, model, i: int) -> torch.Tensor:
        logits = model(self.seqs[i]).logits[0, self.starts[i] : -1].float()
        return torch.log_softmax(logits, -1)

    @torch.no_grad()
    def __call__(self, model) -> float:
        was = model.training
        model.eval()
        total, count = 0.0, 0
        for i in range(len(self.seqs)):
            lp = self._logp(model, i)
            total += float((lp.exp() * (lp - self.ref[i])).sum())
            count += lp.shape[0]
        model.train(was)
        return total / count


class Recorder:
    """torch's global optimiser-step hooks: each step's gradient, Adam state, size and KL."""

    def __init__(self, model_of, probe_of) -> None:
        self.model_of, self.probe_of = model_of, probe_of  # resolved at the first step
        self.steps: list[dict] = []
        self.rewards: list[list[float]] = []
        self.before: list[torch.Tensor] = []
        self.clip_norms: list[float] = []
        register_optimizer_step_pre_hook(self.pre)
        register_optimizer_step_post_hook(self.post)
        clip = torch.nn.utils.clip_grad_norm_

        def recorded_clip(*a, **k):  # the gradient's norm before clipping, as either side clips
            total = clip(*a, **k)
            self.clip_norms.append(float(total))
            return total

        torch.nn.utils.clip_grad_norm_ = recorded_clip

    def params(self, opt) -> list[torch.Tensor]:
        return [p for g in opt.param_groups for p in g["params"]]

    def pre(self, opt, args, kwargs) -> None:
        ps = self.params(opt)
        grads = [p.grad for p in ps if p.grad is not None]
        g2 = sum(float(g.float().pow(2).sum()) for g in grads)
        self.pending = {"grad_norm_seen": math.sqrt(g2), "grad_zero": g2 == 0.0}
        self.before = [p.detach().clone() for p in ps]

    def post(self, opt, args, kwargs) -> None:
        ps = self.params(opt)
        dtheta = math.sqrt(
            sum(
                float((p.detach() - b).float().pow(2).sum())
                for p, b in zip(ps, self.before, strict=True)
            )
        )
        self.before = []
        group = opt.param_groups[0]
        b1, b2 = group["betas"]
        eps, lr = group["eps"], group["lr"]
        m2 = v2 = d2 = 0.0
        t = 0
        for p in ps:
            s = opt.state.get(p)
            if not s:
                continue
            t = int(s["step"])
            m, v = s["exp_avg"].float(), s["exp_avg_sq"].float()
            m2 += float(m.pow(2).sum())
            v2 += float(v.pow(2).sum())
            bc1, bc2 = 1 - b1**t, 1 - b2**t
            d2 += float(((m / bc1) / ((v / bc2).sqrt() + eps)).pow(2).sum())
        row = dict(self.pending)
        row.update(
            adam_t=t, m_norm=math.sqrt(m2), v_norm=math.sqrt(v2),
            bc1=1 - b1**t, bc2=1 - b2**t, direction_norm=math.sqrt(d2), lr=lr,
            dtheta=dtheta, kl_heldout=self.probe_of()(self.model_of()),
            clip_norm=self.clip_norms[-1] if self.clip_norms else None,
        )  # fmt: skip
        self.steps.append(row)
        print(
            json.dumps({k: row[k] for k in ("adam_t", "grad_zero", "dtheta", "kl_heldout")}),
            file=sys.stderr,
            flush=True,
        )


def advantages(rewards: list[float], g: int) -> dict:
    """The right answers' advantages in one batch, leave-one-out and group-standardised."""
    r = np.asarray(rewards, dtype=float).reshape(-1, g)
    loo, std = [], []
    for row in r:
        if row.std() == 0:
            continue
        for ri in row:
            if ri == 1:
                loo.append(ri - (row.sum() - ri) / (g - 1))
                std.append((ri - row.mean()) / (row.std(ddof=1) + 1e-4))
    return {"right": int((r == 1).sum()), "loo_adv_right": loo, "std_adv_right": std}


def run_ours(args: argparse.Namespace) -> dict:
    """``eligibility finetune`` in this process, its command as the race's (lm_real_race)."""
    import csv

    from transformers import AutoTokenizer

    import eligibility.lm.trainer as trainer
    from eligibility.cli import main
    from lm_real_race import finetune_argv

    state: dict = {}
    real_update = trainer.update

    def update(run, batch, rewards, loss_args):  # the batch's rewards, the model, once
        rec.rewards.append([float(x) for x in rewards])
        state["model"] = run.learner.model
        probe()  # built on the initial weights, before the first step
        return real_update(run, batch, rewards, loss_args)

    trainer.update = update

    def probe():
        if "probe" not in state:  # the policy's initial weights: no step taken yet
            rows = [
                json.loads(x)
                for x in (KIT / "tasks" / args.task / "heldout.jsonl").read_text().splitlines()
            ]
            tok = AutoTokenizer.from_pretrained(KIT / "models" / args.model, local_files_only=True)
            state["probe"] = HeldOutKL(state["model"], tok, rows, args.t_max)
        return state["probe"]

    rec = Recorder(lambda: state["model"], probe)
    with tempfile.TemporaryDirectory() as tmp:
        a = argparse.Namespace(
            model=args.model, lr=args.lr, g=args.g, prompts=args.prompts, t_max=args.t_max,
            eval_every=args.eval_every, updates=args.updates, reward="correct", dtype="float32",
            stop_at=None, extra=args.extra,
        )  # fmt: skip
        argv = finetune_argv(a, args.task, args.seed, False, Path(tmp) / "run")[3:]
        main([*argv, "--max-kl", "inf"])
        with open(Path(tmp) / "run" / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    per_update = [
        {"update": int(r["update"]), "entropy": float(r["entropy"]),
         "length": float(r["mean_length"]), "grad_norm": float(r["grad_norm"]),
         "eval": float(r["eval_accuracy"]) if r["eval_accuracy"] else None}
        for r in rows
    ]  # fmt: skip
    return {"steps": rec.steps, "rewards": rec.rewards, "per_update": per_update}


def run_trl(args: argparse.Namespace) -> dict:
    """``GRPOTrainer`` with the race's settings (lm_kit.trl_settings), every step logged."""
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import lm_kit

    t, rw = KIT / "tasks" / args.task, KIT / "tasks" / "rewards.py"
    model_dir = KIT / "models" / args.model
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    held = lm_kit.load_rows(t / "heldout.jsonl")
    correct = lm_kit.load_function(rw, "correct")
    state: dict = {"evals": []}

    def reward(completions, **kw):
        out = correct(completions, **kw)
        rec.rewards.append([float(x) for x in out])
        return out

    def probe():
        if "probe" not in state:
            raise RuntimeError("the probe is built at the start of training")
        return state["probe"]

    rec = Recorder(lambda: state["model"], probe)

    class Evals(TrainerCallback):
        def on_train_begin(self, a, st, control, model=None, **kw):
            state["model"] = model
            state["probe"] = HeldOutKL(model, tok, held, args.t_max)

        def on_step_end(self, a, st, control, model=None, **kw):
            if st.global_step % args.eval_every == 0:
                acc = lm_kit.greedy_accuracy(model, tok, held, correct, args.t_max)
                state["evals"].append((st.global_step, acc))

    with tempfile.TemporaryDirectory() as tmp:
        settings = lm_kit.trl_settings(args.lr, args.g, args.prompts, args.t_max, args.updates)
        settings["logging_steps"] = 1
        config = GRPOConfig(output_dir=tmp, use_cpu=True, seed=args.seed, bf16=False, **settings)
        trainer = GRPOTrainer(
            model=str(model_dir), reward_funcs=reward, args=config,
            train_dataset=Dataset.from_list(lm_kit.load_rows(t / "train.jsonl")),
            processing_class=tok, callbacks=[Evals()],
        )  # fmt: skip
        trainer.train()
        logs = [x for x in trainer.state.log_history if "step" in x and "entropy" in x]
    evals = dict(state["evals"])
    per_update = [
        {"update": x["step"], "entropy": x.get("entropy"),
         "length": x.get("completions/mean_length"),
         "grad_norm": x.get("grad_norm"), "eval": evals.get(x["step"])}
        for x in logs
    ]  # fmt: skip
    return {"steps": rec.steps, "rewards": rec.rewards, "per_update": per_update}


def run_lone(args: argparse.Namespace) -> dict:
    """One lone success, then silence: how far each optimiser rule moves the model.

    A batch of the real model on ``--task``: G completions of one training prompt sampled at
    τ = 1, the last replaced by the right answer (so one success in G), the other P − 1 groups
    tied (they add nothing to the gradient, only to the normalisers). Adam at ``--lr`` is
    given ``--wait`` silent updates first, then this batch's gradient, then ``--after`` silent
    updates, under each rule:

    - ``ours``: ``finetune``'s loss (RLOO, each sequence's sum over N), clipped at 1, Adam
      stepping on the zero gradient of every silent update (``main`` today);
    - ``trl``: GRPOTrainer's (group-standardised, ``dapo``: over the batch's tokens), clipped
      at 1, AdamW (weight decay 0) stepping on every silent update as the HF Trainer does;
    - ``skip``: ``finetune``'s loss, no optimiser step where the gradient is exactly zero.

    After each update: ‖θ − θ₀‖, the held-out KL (:class:`HeldOutKL`), and the log-probability
    the policy gives each held-out prompt's right answer, averaged (what the success teaches).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import lm_kit

    model_dir = KIT / "models" / args.model
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    rows = lm_kit.load_rows(KIT / "tasks" / args.task / "train.jsonl")
    held = lm_kit.load_rows(KIT / "tasks" / args.task / "heldout.jsonl")
    row = rows[args.seed % len(rows)]
    g, n = args.g, args.g * args.prompts

    def encode(prompt, text_ids):
        p = tok.apply_chat_template(prompt, add_generation_prompt=True, return_tensors="pt")
        p = p if isinstance(p, torch.Tensor) else p["input_ids"]
        return torch.cat([p[0], torch.as_tensor(text_ids, dtype=torch.long)]), p.shape[1]

    def answer_ids(answer):
        return [*tok(answer, add_special_tokens=False).input_ids, tok.eos_token_id]

    base = AutoModelForCausalLM.from_pretrained(
        model_dir, local_files_only=True, dtype=torch.float32
    )
    torch.manual_seed(args.seed)
    prompt_ids, p_len = encode(row["prompt"], [])
    with torch.no_grad():  # G − 1 of the model's own completions, τ = 1
        out = base.generate(prompt_ids[None].repeat(g - 1, 1), do_sample=True, temperature=1.0,
                            top_k=0, max_new_tokens=args.t_max,
                            pad_token_id=tok.eos_token_id)  # fmt: skip
    completions = []
    for seq in out[:, p_len:]:
        ids = seq.tolist()
        if tok.eos_token_id in ids:
            ids = ids[: ids.index(tok.eos_token_id) + 1]
        completions.append(ids)
    completions.append(answer_ids(row["answer"]))  # the lone success
    rewards = torch.zeros(g)
    rewards[-1] = 1.0
    lengths = torch.tensor([len(c) for c in completions], dtype=torch.float)
    seqs = [encode(row["prompt"], c)[0] for c in completions]
    targets = [encode(r["prompt"], answer_ids(r["answer"])) for r in held]
    state0 = {k: v.clone() for k, v in base.state_dict().items()}
    probe = HeldOutKL(base, tok, held, args.t_max)

    def answer_logp(model) -> float:
        with torch.no_grad():
            total = 0.0
            for ids, start in targets:
                lp = torch.log_softmax(model(ids[None]).logits[0, start - 1 : -1].float(), -1)
                total += float(lp.gather(1, ids[start:, None]).sum())
            return total / len(targets)

    def logps(model):
        out = []
        for ids in seqs:
            lp = torch.log_softmax(model(ids[None]).logits[0, p_len - 1 : -1].float(), -1)
            out.append(lp.gather(1, ids[p_len:, None]).sum())
        return torch.stack(out)

    results = {}
    for rule in args.rules:
        base.load_state_dict(state0)
        params = [p for p in base.parameters() if p.requires_grad]
        theta0 = [p.detach().clone() for p in params]
        opt = (torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0) if rule == "trl"
               else torch.optim.Adam(params, lr=args.lr))  # fmt: skip
        curve = []
        for u in range(args.wait + 1 + args.after):
            signal = u == args.wait
            opt.zero_grad(set_to_none=False)
            for p in params:
                p.grad = torch.zeros_like(p)
            grad_norm = 0.0
            if signal:
                ell = logps(base)  # Σₜ ℓᵢ,ₜ of each completion of the group
                if rule == "trl":
                    a = (rewards - rewards.mean()) / (rewards.std() + 1e-4)
                    tokens = lengths.sum() * args.prompts  # the batch's other groups alike
                    loss = -(a * ell).sum() / tokens
                else:
                    a = rewards - (rewards.sum() - rewards) / (g - 1)
                    loss = -(a * ell).sum() / n
                loss.backward()
                grad_norm = float(torch.nn.utils.clip_grad_norm_(params, 1.0))
            if signal or rule != "skip":
                opt.step()
            step = max((int(s["step"]) for s in opt.state.values()), default=0)
            dtheta = math.sqrt(
                sum(
                    float((p.detach() - q).pow(2).sum())
                    for p, q in zip(params, theta0, strict=True)
                )
            )
            kl = probe(base) if u >= args.wait else 0.0
            ans = answer_logp(base) if u >= args.wait else None
            curve.append(dict(update=u + 1, signal=signal, adam_t=step, grad_norm=grad_norm,
                              dtheta=dtheta, kl_heldout=kl, answer_logp=ans))  # fmt: skip
            print(rule, json.dumps(curve[-1]), file=sys.stderr, flush=True)
        results[rule] = curve
    base.load_state_dict(state0)
    return {"prompt": row["prompt"][-1]["content"], "answer": row["answer"],
            "answer_logp0": answer_logp(base), "lengths": lengths.tolist(),
            "rules": results}  # fmt: skip


def report(paths: list[str]) -> None:
    """Per update: right answers, their advantages, Adam's t, the step, the held-out KL."""
    for path in paths:
        d = json.loads(Path(path).read_text())
        print(f"\n{d['system']} {d['task']} seed {d['seed']} (commit {d.get('commit')})")
        print(
            "| update | right | A (LOO; std) | zero grad | Adam t | bc2 | ‖m‖ | ‖m̂/√v̂‖ | ‖Δθ‖ "
            "| KL held-out | entropy | length | held-out acc |"
        )
        print("|---" * 13 + "|")
        for i, (s, r) in enumerate(zip(d["steps"], d["rewards"], strict=False)):
            a = advantages(r, d["g"])
            u = d["per_update"][i] if i < len(d["per_update"]) else {}
            adv = "; ".join(f"{x:.2f}" for x in a["loo_adv_right"][:1] + a["std_adv_right"][:1])
            ev = u.get("eval")
            print(
                f"| {i + 1} | {a['right']} | {adv} | {s['grad_zero']} | {s['adam_t']} "
                f"| {s['bc2']:.4f} | {s['m_norm']:.2e} | {s['direction_norm']:.0f} "
                f"| {s['dtheta']:.4f} | {s['kl_heldout']:.4f} | "
                f"{u.get('entropy', float('nan')):.2f} | {u.get('length', float('nan')):.1f} | "
                f"{'' if ev is None else f'{ev:.2f}'} |"
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("system", choices=("ours", "trl", "lone", "report"))
    p.add_argument("files", nargs="*", help="report: the result files")
    p.add_argument("--task", default="antonym")
    p.add_argument("--seed", type=int, default=6)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--g", type=int, default=8)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--t-max", type=int, default=16)
    p.add_argument("--updates", type=int, default=30)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--json", default=None)
    p.add_argument("--wait", type=int, default=4, help="lone: silent updates before the success")
    p.add_argument("--after", type=int, default=20, help="lone: silent updates after it")
    p.add_argument("--rules", nargs="+", default=["ours", "skip", "trl"], help="lone: the rules")
    p.add_argument("--extra", nargs="*", default=[], help="ours: more finetune options")
    args = p.parse_args()
    if args.system == "report":
        report(args.files)
        return
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    t0 = time.time()
    out = {"ours": run_ours, "trl": run_trl, "lone": run_lone}[args.system](args)
    import subprocess

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE
    ).stdout.strip()
    res = {
        "argv": ["bench/lm/lm_sparse_drift.py", *sys.argv[1:]],
        "system": args.system, "task": args.task, "seed": args.seed, "g": args.g, "lr": args.lr,
        "prompts": args.prompts, "t_max": args.t_max, "extra": args.extra, "commit": commit,
        "date": time.strftime("%Y-%m-%d", time.gmtime()), "wall_s": time.time() - t0, **out,
    }  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(res) + "\n")
    if args.json and args.system != "lone":
        report([args.json])


if __name__ == "__main__":
    main()
