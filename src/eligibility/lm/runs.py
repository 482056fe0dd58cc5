"""Loading a fine-tuning run: its config, its task, its model with the last checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from eligibility._io import read_json
from eligibility.lm.config import IDENTITY, FinetuneConfig
from eligibility.lm.tasks import Task
from eligibility.runs import load_config, read_checkpoint


def is_finetune_run(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` holds a run of ``eligibility finetune`` (its config names a task)."""
    try:
        d = read_json(Path(run_dir) / "config.json")
    except (OSError, ValueError):
        return False
    return isinstance(d, dict) and "task" in d and "env_id" not in d


def load(run_dir: str | Path) -> tuple[FinetuneConfig, Any, Task]:
    """The run's config, its model with the last checkpoint's weights, and its task.

    Raises:
        ValueError: no run or no checkpoint there, or one that does not fit the config.
    """
    from eligibility.lm.trainer import _Learner, task_and_model

    config = load_config(run_dir, FinetuneConfig)
    task, model, _ = task_and_model(config)
    learner = _Learner(model, config.lr)
    expected = learner.state_dict()
    tensors, _ = read_checkpoint(Path(run_dir), expected, config.to_dict(), IDENTITY)
    learner.load_state_dict({k: v for k, v in tensors.items() if k.startswith("policy.")})
    return config, model, task


def evaluate_run(
    run_dir: str | Path, *, greedy: bool = True, samples: int = 1, seed: int = 0
) -> dict[str, Any]:
    """Accuracy and mean reward of a run's policy on its task's prompts.

    Args:
        run_dir: a directory written by ``eligibility finetune``.
        greedy: the mode at every step (one completion per prompt), or samples from π_τ.
        samples: sampled completions per prompt (``greedy=False`` only).
        seed: seed of the samples.
    """
    from eligibility.lm.sample import sample

    config, model, task = load(run_dir)
    try:
        t_max = config.max_completion_length or task.max_completion_length
        ev = task.evaluation
        n = 1 if greedy else samples
        index = np.repeat(np.arange(len(ev.prompts)), n)
        batch = sample(
            model,
            [ev.prompts[i] for i in index],
            vocab_size=ev.vocab_size,
            max_new_tokens=t_max,
            temperature=config.temperature,
            rng=None if greedy else np.random.default_rng(seed),
            eos_id=ev.eos_id,
        )
        completions = batch.completions()
        ended = batch.ended.tolist()
        r, _ok = ev.rewards(index.tolist(), completions, ended)
        correct = ev.correct(index.tolist(), completions, ended, r)
    finally:
        task.close()
    lengths = batch.lengths.cpu().numpy()
    return {
        "task": config.task,
        "policy": "greedy" if greedy else "sample",
        "completions": len(index),
        "accuracy": float(np.nanmean(correct)),
        "mean_reward": float(r.mean()),
        "mean_length": float(lengths.mean()),
        "examples": [
            {
                "prompt": ev.text(ev.prompts[int(p)][0 if ev.decode else 1 :]),
                "completion": ev.text(completions[i]),
                "reward": float(r[i]),
            }
            for i, p in list(enumerate(index))[:5]
        ],
    }
