r"""A group whose rewards all tie, drawn again from a hotter sampler and weighed back to π.

A group of G completions of one prompt whose rewards all tie has every advantage 0: its policy
term is 0 and only the KL moves it. A prompt answered wrong and saturated (π(greedy) ≈ 0.995,
the right answer about once in 1,000 samples) ties in most of its groups, and the few that do
not hold the rare samples, most of them worse than the wrong answer: the right answer's pull,
E_π[(R − b) ∇ ln π] ∝ π(right), comes as a rare spike that Adam's normaliser swallows. For each
tied group of an update, G more completions of its prompt are drawn from q = π_{τ′}
(``--tied-temperature`` τ′ > τ), where the right answer is far more often sampled, and weighed
back to π by the whole sequence's weight, the option table's ``correction`` row ``exact``:

    ĝ_q = (1/N) Σⱼ wⱼ (Rⱼ − b₋ⱼ) Σₜ ∇ℓⱼ,ₜ,   wⱼ = π_τ(oⱼ)/q(oⱼ),   E_q[ĝ_q] = E_π[ĝ]

(N the update's rows; b₋ⱼ the run's baseline over the G draws, independent of oⱼ). A prompt's
on-policy group adds its own term when it does not tie, and ĝ_q when it does, whose term was 0:
E[ĝ] = Σ_prompts (1 + P(tie)) ∇J_prompt, each prompt's gradient in its own direction, weighed
up to 2× where its groups tie (as DAPO's dynamic sampling weighs a prompt by 1/P(no tie));
the KL term is the on-policy rows' alone. The draws are keyed by the seed and the update
(:data:`TIED_STREAM`), so a resumed run draws the same.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from eligibility.lm import objective
from eligibility.lm.batch import Completions
from eligibility.lm.config import FinetuneConfig
from eligibility.lm.objective import LossSettings
from eligibility.lm.rewards import fill_unscorable
from eligibility.lm.rollout import Run, trainer_state
from eligibility.lm.sample import sample, token_logps

TIED_STREAM = 4
"""The seed stream of the tied groups' draws (``SeedSequence(--seed, spawn_key=(4, update))``):
apart from the run's draws (0, 1), the defaults' measurement (2) and the epochs' shuffles (3)."""


def tied_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """[M] bool: the groups of ``group_size`` consecutive rewards that all tie (Aᵢ = 0 for each).

    >>> tied_groups(torch.tensor([0.4, 0.4, 1.0, 0.4, 1.0, 1.0]), 2).tolist()
    [True, False, True]
    """
    r = rewards.reshape(-1, group_size)
    return (r == r[:, :1]).all(dim=1)


def tied_loss(
    logps: torch.Tensor,
    sampler_logps: torch.Tensor,
    rewards: torch.Tensor,
    completion_mask: torch.Tensor,
    settings: LossSettings,
    rows: int,
) -> torch.Tensor:
    """The loss of the draws from q, ĝ_q's: −(N_q/N) · the run's loss of them, weighted by w.

    The run's loss (its baseline, scale and aggregation; no KL term) with the sequence weight
    w = π(o)/q(o) (``importance_sampling="exact"``), over the N_q draws, times N_q/N (``rows``:
    N, the update's on-policy rows): with ``sequence-sum``, (1/N) Σⱼ wⱼ Aⱼ Σₜ ℓⱼ,ₜ.

    Args:
        logps: [N_q, T] ℓ = ln π_τ of the draws (differentiable).
        sampler_logps: [N_q, T] ln q, as the hotter sampler drew them.
        rewards: [N_q] their rewards (groups of ``settings.group_size``).
        completion_mask: [N_q, T] 1 on a completion's tokens.
        settings: the run's loss settings (its KL ignored here).
        rows: N.
    """
    weighted = dataclasses.replace(
        settings,
        kl="none",
        beta=0.0,
        ref_logps=None,
        scorable=None,
        importance_sampling="exact",
        sampler_logps=sampler_logps,
    )
    value, _ = objective.loss(logps, rewards, completion_mask, weighted)
    return value * (len(rewards) / rows)


@dataclass(frozen=True)
class Tied:
    """An update's draws from q = π_{τ′} of its tied groups' prompts.

    Attributes:
        batch: G completions of each tied group's prompt, their ``logps`` ln q.
        rewards: [N_q] their rewards.
        groups: how many groups tied.
    """

    batch: Completions
    rewards: torch.Tensor
    groups: int

    def backward(self, run: Run, settings: LossSettings, rows: int) -> torch.Tensor:
        """ĝ_q's loss backpropagated into the policy's ``.grad`` (added to what is there)."""
        v, tau = run.task.vocab_size, run.config.temperature
        ell = token_logps(run.learner.policy, self.batch, vocab_size=v, temperature=tau)
        value = tied_loss(
            ell, self.batch.logps, self.rewards, self.batch.completion_mask, settings, rows
        )
        value.backward()
        return value.detach()


def resolved(config: FinetuneConfig, episodes: bool, world: int) -> FinetuneConfig:
    """``config`` with ``--tied-temperature`` as the run can take it; a ValueError where it can't.

    The draws are sampled and scored by the learner, in one process, from π_τ′ uncut: not
    beside a sampler process, on a task of turns, on several ranks or under a truncating
    sampler. There the model's default (2 for the tiny one) resolves to 0, and a τ′ the user
    gave is refused.
    """
    if not config.tied_temperature:
        return config
    clash = [
        (config.max_staleness is not None, "--max-staleness"),
        (episodes, "a task of turns"),
        (world > 1, "several ranks"),
        (
            (config.top_k, config.top_p, config.min_p, config.repetition_penalty)
            != (0, 1.0, None, 1.0),
            "--top-k/--top-p/--min-p/--repetition-penalty",
        ),
    ]
    said = [name for bad, name in clash if bad]
    if not said:
        return config
    if "tied_temperature" in config.defaulted:
        return dataclasses.replace(config, tied_temperature=0.0)
    raise ValueError(
        f"tied_temperature (--tied-temperature) draws a tied group again in the learner, from "
        f"π_τ′ uncut: it does not run with {', '.join(said)}; give --tied-temperature 0"
    )


def draw(run: Run, prompts: np.ndarray, rewards: torch.Tensor) -> Tied | None:
    """G completions at τ′ of each prompt whose group tied in this update (None: none tied, or off).

    Args:
        run: the run (its config, task, policy and update counter).
        prompts: [N] each on-policy row's prompt index (groups of G).
        rewards: [N] their rewards.
    """
    config, task = run.config, run.task
    tau, g = config.tied_temperature, config.group_size
    if not tau:
        return None
    which = tied_groups(rewards.cpu(), g).numpy()
    if not which.any():
        return None
    chosen = np.repeat(prompts.reshape(-1, g)[which, 0], g)
    stream = np.random.SeedSequence(config.seed, spawn_key=(TIED_STREAM, run.counters["updates"]))
    with run.phase("sample"), torch.no_grad():
        batch = sample(
            run.learner.policy,
            [task.prompts[i] for i in chosen],
            vocab_size=task.vocab_size,
            max_new_tokens=run.t_max,
            temperature=tau,
            rng=np.random.default_rng(stream),
            eos_id=task.eos_id,
        )
    with run.phase("reward"):
        state = trainer_state(run)
        scored = task.rewards(chosen.tolist(), batch.completions(), batch.ended.tolist(), state)
        r = fill_unscorable(np.asarray(scored.rewards), np.asarray(scored.scorable), g)
    device = batch.completion_ids.device
    return Tied(batch, torch.tensor(r, dtype=torch.float32, device=device), int(which.sum()))


__all__ = ["TIED_STREAM", "Tied", "draw", "resolved", "tied_groups", "tied_loss"]
