"""Runs ``finetune guess`` (episodes of several turns) per config, in float64, alone or as a rank.

``python episodes_ranks_worker.py OUT`` (one process) or ``torchrun --nproc-per-node 2
episodes_ranks_worker.py OUT``: each config's trained weights and history go to
``OUT/<name>.pt`` (rank 0 writes). The built-in tiny model cast to float64, so that the only
difference between world sizes is the order of the gradient's sums
(tests/test_episodes_ranks.py).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import torch
import torch.distributed as dist

import eligibility.lm.build as build
from eligibility.lm import FinetuneConfig, finetune
from ranks_worker import left, saved, weights_of

BASE = dict(
    task="guess",
    d_model=16,
    n_layer=1,
    n_head=2,
    group_size=4,
    prompts_per_batch=3,  # 12 episodes: on 2 ranks a group is split between them
    max_updates=3,
    eval_every=1,  # the greedy evaluation, each rank its share
    lr=3e-2,
    seed=3,
    progress=False,
)

CONFIGS: dict[str, dict] = {
    "reward-to-go": {},
    "uneven": {"group_size": 3},  # 9 episodes: 5 and 4
    "kl per turn": {"kl": "sequence-reward", "beta": 0.05},
    "kl token": {"kl": "k3", "beta": 0.05, "aggregation": "token-mean"},
    "micro-batches": {"micro_batch_size": 2, "kl": "sequence-reward", "beta": 0.05},
    "recomputed contexts": {"_cache": "0"},  # each turn's contexts whole, not the kept cache
    "top-p": {"top_p": 0.9, "repetition_penalty": 1.2},  # the kept sets gathered and scored
    "top-p contexts": {"top_p": 0.9, "min_p": 0.05, "_cache": "0"},
    "importance sampling": {"top_k": 6, "importance_sampling": "token-truncate"},
    "k2": {"epochs_per_batch": 2, "kl": "sequence-reward", "beta": 0.05},
    "fsdp": {"fsdp": True, "top_p": 0.9},
    # one episode a rank: a rank whose episode has ended samples idle, in step with the other's
    "fsdp idle": {"fsdp": True, "prompts_per_batch": 1, "group_size": 2, "max_updates": 4},
}


@contextlib.contextmanager
def idled(name: str) -> Iterator[None]:
    """On 2 ranks under --fsdp, count the idle samplings of ``name``'s run (one must be)."""
    import eligibility.lm.episodes.play as play

    sample = play.sample
    count = [0]

    def counted(*args, **kwargs):
        count[0] += bool(kwargs.get("idle"))
        return sample(*args, **kwargs)

    play.sample = counted
    yield
    play.sample = sample
    if dist.is_initialized() and name == "fsdp idle":
        total = torch.tensor(count[0])
        dist.all_reduce(total)
        assert int(total) > 0, "no rank sampled idle: the test does not reach the idle path"


def main(out: str) -> None:
    torch.set_num_threads(1)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")  # one group for every config (finetune leaves it)
    made = build.load
    build.load = lambda *a, **k: (lambda m, d: (m.double(), d))(*made(*a, **k))
    for name, changes in CONFIGS.items():
        changes = dict(changes)
        os.environ["ELIGIBILITY_EPISODE_CACHE"] = changes.pop("_cache", "1")
        with idled(name):
            result = finetune(FinetuneConfig(**{**BASE, **changes}))
        saved(out, name, weights_of(result.model, changes.get("fsdp", False)), result.history)
    left()


if __name__ == "__main__":
    main(sys.argv[1])
