"""A plateau read from a run's last checkpoint: the prompts it gets wrong, and what moves them.

    OMP_NUM_THREADS=1 python bench/lm/lm_plateau.py RUN_DIR --samples 1024 --steps 100 \
        --json bench/results/lm_plateau.json

For each prompt whose greedy completion is wrong: that completion, its reward, π(greedy) and
each of its tokens' π; of ``--samples`` completions sampled at τ = 1, the share equal to the
greedy one, the share right, and the share of groups of G whose rewards all tie (Aᵢ = 0 for
the whole group). The gradient norm of one group's loss (the run's settings; a tied group's is
its KL term's alone) for a stuck prompt and for a solved one. Then, from the checkpoint, Adam
at the run's rate for ``--steps`` steps on the stuck prompts' groups alone, each step a fresh
group of each: once with their rewards tied (the KL term alone), once with their own rewards
(the run's loss): π(greedy) of each stuck prompt and the greedy accuracy after. Last, how
often each stuck prompt was drawn in the run's updates, under the epoch walk
(``lm.rollout.epoch_order``) and under a fresh draw each update without replacement (the run's
prompt stream, ``prompt_rng.choice``), and its longest wait between two draws.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch

from eligibility.lm.build import task_and_model
from eligibility.lm.objective import LossSettings, loss
from eligibility.lm.rollout import epoch_order
from eligibility.lm.runs import load
from eligibility.lm.sample import sample, token_logps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("run", help="a finetune run directory (its last checkpoint is read)")
    p.add_argument("--samples", type=int, default=1024)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--updates", type=int, default=400, help="the run's updates (the draws)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    config, model, task = load(args.run)
    out: dict = {"argv": sys.argv, "run": args.run, "seed": config.seed}
    ok, p_greedy, greedy = _greedy(model, task)
    stuck = [i for i, x in enumerate(ok) if not x]
    out["greedy_right"], out["prompts"] = sum(ok), len(ok)
    rng = np.random.default_rng(7)
    out["stuck"] = [
        _groups(model, task, i, greedy[i], config.group_size, args.samples, rng) for i in stuck
    ]
    out["group_gradient_norm"] = {
        "stuck": _norm(config, model, task, stuck[0], rng),
        "solved": _norm(config, model, task, next(i for i, x in enumerate(ok) if x), rng),
    }
    for name, tied in (("kl_alone", True), ("own_rewards", False)):
        _, moved, _ = load(args.run)
        _adam(config, moved, task, stuck, args.steps, tied, rng)
        ok2, p2, _ = _greedy(moved, task)
        out[name] = {"p_greedy": [float(p2[i]) for i in stuck], "greedy_right": sum(ok2)}
    out["p_greedy"] = [float(p_greedy[i]) for i in stuck]
    out["draws"] = _draws(config, len(task.prompts), stuck, args.updates)
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


def _greedy(model, task):
    """Each prompt's greedy completion: right or not, its probability, its tokens."""
    v, t_max = task.vocab_size, task.max_completion_length
    with torch.no_grad():
        g = sample(model, list(task.prompts), vocab_size=v, max_new_tokens=t_max, rng=None)
        lp = token_logps(model, g, vocab_size=v)
    comps, ended = g.completions(), g.ended.tolist()
    ok = [task.score(i, c, e) == 1 for i, (c, e) in enumerate(zip(comps, ended, strict=True))]
    tokens = [
        (c, e, lp[i][g.completion_mask[i].bool()].exp().tolist())
        for i, (c, e) in enumerate(zip(comps, ended, strict=True))
    ]
    return ok, lp.sum(1).exp(), tokens


def _groups(model, task, i, greedy, group_size, n, rng):
    """Prompt i's greedy answer and what n samples of it look like, in groups of G."""
    c, ended, token_p = greedy
    t_max = task.max_completion_length
    with torch.no_grad():
        b = sample(
            model, [task.prompts[i]] * n, vocab_size=task.vocab_size, max_new_tokens=t_max, rng=rng
        )
    cs, es = b.completions(), b.ended.tolist()
    r = np.array([task.score(i, x, e) for x, e in zip(cs, es, strict=True)])
    groups = r[: n // group_size * group_size].reshape(-1, group_size)
    return {
        "prompt": i,
        "text": "".join(task.vocab[t] for t in task.prompts[i][1:]),
        "greedy": "".join(task.vocab[t] for t in c) + ("<eos>" if ended else ""),
        "reward": task.score(i, c, ended),
        "p_greedy": float(np.prod(token_p)),
        "token_p": token_p,
        "sampled_as_greedy": float(np.mean([x == c for x in cs])),
        "sampled_right": float(np.mean(r == 1)),
        "groups_tied": float(np.mean((groups == groups[:, :1]).all(1))),
        "sampled_rewards": {f"{k:.3f}": int((r == k).sum()) for k in sorted(set(r.tolist()))},
    }


def _loss(config, model, ref, task, idx, rng, tied):
    """The run's loss on fresh groups of the prompts ``idx`` (their rewards tied: A = 0)."""
    v, t_max = task.vocab_size, task.max_completion_length
    with torch.no_grad():
        b = sample(
            model, [task.prompts[i] for i in idx], vocab_size=v, max_new_tokens=t_max, rng=rng
        )
        ref_lp = token_logps(ref, b, vocab_size=v)
    r = [
        task.score(i, c, e) for i, c, e in zip(idx, b.completions(), b.ended.tolist(), strict=True)
    ]
    r = torch.zeros(len(idx)) if tied else torch.tensor(r, dtype=torch.float32)
    s = LossSettings(
        group_size=config.group_size,
        baseline=config.baseline,
        scale=config.scale,
        aggregation=config.aggregation,
        max_completion_length=t_max,
        kl=config.kl_term,
        beta=config.beta,
        ref_logps=ref_lp,
    )
    return loss(token_logps(model, b, vocab_size=v), r, b.completion_mask, s)[0]


def _reference(config):
    """The run's initial policy (the KL's reference: a function of the seed)."""
    return task_and_model(config)[1]


def _norm(config, model, task, i, rng):
    """‖∇θ‖ of one group of prompt i's loss, as the run computes it (its own rewards)."""
    params = [q for q in model.parameters() if q.requires_grad]
    value = _loss(config, model, _reference(config), task, [i] * config.group_size, rng, False)
    grads = torch.autograd.grad(value, params)
    return float(torch.sqrt(sum((g**2).sum() for g in grads)))


def _adam(config, model, task, stuck, steps, tied, rng):
    """Adam at the run's rate on a fresh group of each stuck prompt a step."""
    ref, params = _reference(config), [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.Adam(params, lr=config.lr)
    idx = [i for i in stuck for _ in range(config.group_size)]
    for _ in range(steps):
        opt.zero_grad()
        _loss(config, model, ref, task, idx, rng, tied).backward()
        opt.step()


def _draws(config, n, stuck, updates):
    """Updates each stuck prompt is drawn in, and its longest wait, walked and drawn anew."""
    m = config.prompts_per_batch
    batches = n // m
    walk = [
        epoch_order(config.seed, u // batches, n)[(u % batches) * m : (u % batches + 1) * m]
        for u in range(updates)
    ]
    prompt_rng = np.random.default_rng(np.random.SeedSequence(config.seed).spawn(2)[0])
    anew = [prompt_rng.choice(n, m, replace=False) for _ in range(updates)]
    out = {}
    for name, drawn in (("walk", walk), ("anew", anew)):
        at = {i: [u for u, d in enumerate(drawn) if i in d] for i in stuck}
        out[name] = {
            str(i): {"drawn": len(u), "longest_wait": int(np.diff([-1, *u, updates]).max())}
            for i, u in at.items()
        }
    return out


if __name__ == "__main__":
    main()
