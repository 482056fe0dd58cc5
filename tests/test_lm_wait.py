"""A sparse reward's wait: a policy given no signal does not move, and learns when one comes.

Before a signal, and after a lone success, every group ties and every advantage is 0 (β = 0):
the gradient is exactly 0, and ``finetune`` takes no optimiser step (``lm.update._step``). Adam
stepped on zeros, as TRL's trainer steps it, carries a lone success's step on through the wait,
every weight by the sign of one sample's gradient, about six times over; in paired runs on the
kit's sparse tasks it reached no target that no step missed, and on one seed it took the policy
where no right reply was drawn again (docs/measurements/lm.md, *A sparse reward's wait*).
"""

from __future__ import annotations

import pytest
import torch

from _user_code_here import rewards_here
from eligibility.lm import FinetuneConfig, finetune
from eligibility.lm import trainer as lm_trainer

WAIT, SUCCESS, AFTER = 3, 4, 12
"""Updates 1–3 tied at 0, one success in update 4, updates 5–12 tied again, a signal after."""


def _scheduled():
    """A reward of the schedule :data:`WAIT`, :data:`SUCCESS`, :data:`AFTER` (called per batch).

    After the wait the completions are told apart (the shorter the better, ``stop_at_once``'s
    reward): a signal in every group, which the tiny model learns within a few updates.
    """
    calls = []

    def scheduled(prompts, completions, **kw):
        calls.append(None)
        if len(calls) == SUCCESS:
            return [1.0] + [0.0] * (len(completions) - 1)
        if len(calls) <= AFTER:
            return [0.0] * len(completions)
        return [1.0 / (1 + len(c)) for c in completions]

    return scheduled


def _kl(logits: torch.Tensor, ref: torch.Tensor) -> float:
    """KL(π ‖ π_ref) per position, nats, from next-token logits [T, V]."""
    lp, lq = torch.log_softmax(logits, -1), torch.log_softmax(ref, -1)
    return float((lp.exp() * (lp - lq)).sum(-1).mean())


def test_a_wait_moves_nothing_before_a_signal_nor_after_a_lone_success(tmp_path, monkeypatch):
    """KL from the initial policy is exactly 0 through the first wait; the lone success moves
    it; the 8 tied updates after it leave it exactly there, Adam's t, m and v untouched (stepped
    on zeros, its momentum would carry the success on at each); then the signal is learned."""
    prompts = tmp_path / "p.txt"
    prompts.write_text("a\nb\n")
    learners = []

    class Kept(lm_trainer.Learner):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            learners.append(self)

    monkeypatch.setattr(lm_trainer, "Learner", Kept)
    probe = torch.tensor([[1, 2, 3, 1, 2, 3, 1, 2]])  # fixed tokens: the policy's next-token laws
    seen: list[torch.Tensor] = []  # the logits on them: initial, then after each update
    moments: list[list[torch.Tensor]] = []  # Adam's m and v after each update

    def logits() -> torch.Tensor:
        with torch.no_grad():
            return learners[0].model(probe).logits[0].float().clone()

    def adam() -> list[torch.Tensor]:
        state = learners[0].optimizer.state.values()
        return [s[k].clone() for s in state for k in ("exp_avg", "exp_avg_sq") if k in s]

    def update(*a, **kw):  # the initial policy, read before the first update changes it
        if not seen:
            seen.append(logits())
        return real_update(*a, **kw)

    def after(row):
        seen.append(logits())
        moments.append(adam())

    real_update = lm_trainer.update
    monkeypatch.setattr(lm_trainer, "update", update)
    config = FinetuneConfig(
        "scheduled", prompts=str(prompts), d_model=8, n_head=2, n_layer=1, group_size=4,
        prompts_per_batch=2, max_completion_length=6, max_updates=AFTER + 6, lr=3e-2,
        beta=0.0, eval_every=0, target_accuracy=None, progress=False, seed=0,
    )  # fmt: skip
    with rewards_here(), pytest.warns(RuntimeWarning, match="the policy did not move"):
        result = finetune(config, reward_funcs=[_scheduled()], callback=after)
    initial = seen[0]
    kl = [_kl(x, initial) for x in seen]  # kl[u]: after update u (kl[0]: the initial policy)
    assert kl[1 : WAIT + 1] == [0.0] * WAIT  # the first wait: not a weight moved
    assert kl[SUCCESS] > 1e-4  # the lone success moved it
    held = [_kl(seen[u], seen[SUCCESS]) for u in range(SUCCESS + 1, AFTER + 1)]
    assert held == [0.0] * (AFTER - SUCCESS), held  # and the wait after it left it there
    kept = moments[SUCCESS - 1]  # moments[u - 1]: Adam's m and v after update u
    assert kept and all(
        torch.equal(a, b)
        for u in range(SUCCESS + 1, AFTER + 1)
        for a, b in zip(moments[u - 1], kept, strict=True)
    )
    norms = [r["grad_norm"] for r in result.history]
    assert norms[:WAIT] + norms[SUCCESS:AFTER] == [0.0] * (WAIT + AFTER - SUCCESS)
    assert learners[0].steps == sum(n > 0 for n in norms)  # Adam's t counts the signals only
    rewards = [r["mean_reward"] for r in result.history]
    assert max(rewards[AFTER:]) > rewards[AFTER] + 0.1  # then the signal is learned


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])
