"""Loading a fine-tuning run: its config, its task, its model with the last checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from eligibility.lm.config import IDENTITY, FinetuneConfig
from eligibility.lm.tasks import Task
from eligibility.runs import load_config, read_checkpoint


def load(run_dir: str | Path) -> tuple[FinetuneConfig, Any, Task]:
    """The run's config, its model with the last checkpoint's weights, and its task.

    Raises:
        ValueError: no run or no checkpoint there, or one that does not fit the config.
    """
    from eligibility.lm.build import task_and_model
    from eligibility.lm.learner import Learner

    config = load_config(run_dir, FinetuneConfig)
    task, model, _ = task_and_model(config)
    learner = Learner(model, config.lr)
    expected = learner.state_dict()
    tensors, _ = read_checkpoint(
        Path(run_dir), expected, config.to_dict(), IDENTITY, framework="pt"
    )
    learner.load_state_dict(tensors, optimizer=False)
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
    from eligibility.lm.evaluation import evaluate_policy

    config, model, task = load(run_dir)
    try:
        t_max = config.max_completion_length or task.max_completion_length
        result = evaluate_policy(  # the evaluation training runs, in the batches it uses
            model,
            task,
            t_max,
            config.prompts_per_batch * config.group_size,
            samples=1 if greedy else samples,
            temperature=config.temperature,
            rng=None if greedy else np.random.default_rng(seed),
            keep=5,
        )
    finally:
        task.close()
    ev = task.evaluation
    return {
        "task": config.task,
        "policy": "greedy" if greedy else "sample",
        "completions": result.completions,
        "accuracy": result.accuracy,
        "mean_reward": result.mean_reward,
        "mean_length": result.mean_length,
        "examples": [
            {
                "prompt": ev.text(ev.prompts[p][0 if ev.decode else 1 :]),
                "completion": ev.text(completion),
                "reward": reward,
            }
            for p, completion, reward in result.examples
        ],
    }
