"""A correct RLOO: leave-one-out baseline, sequence-summed log-probs, a constant normaliser.

Ours, from the REINFORCE estimator (Williams 1992) with the leave-one-out baseline of
Kool et al. (2019) and Ahmadian et al. (2024); the KL of the objective enters as the shaped
reward R̃ = R − β Σ_t (ℓ^old − ℓ^ref), since ∇KL(π‖π_ref) = E[∇log π(o) (log π(o) − log π_ref(o))]:

    A_i = R̃_i − mean_{j≠i} R̃_j,      loss = −(1/N) Σ_i A_i Σ_t m_it ℓ_it

E[−∇loss] = ∇J exactly: b_{−i} does not depend on o_i, and N is fixed by the batch's shape.
"""

from __future__ import annotations


def _advantages(batch):
    """Leave-one-out advantages of the shaped reward, [N] (no gradient flows through them)."""
    m = batch.completion_mask
    shaped = batch.rewards - batch.beta * ((batch.old_logps - batch.ref_logps) * m).sum(1)
    r = shaped.view(-1, batch.group_size)
    baseline = (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)
    return (r - baseline).reshape(-1)


def loss(logps, batch):
    """Unbiased: the normaliser is N, the number of completions."""
    return -(_advantages(batch) * (logps * batch.completion_mask).sum(1)).mean()


def loss_token_budget(logps, batch):
    """Divided by N · max_completion_length instead (Dr. GRPO's constant): ∇J / T, a step size."""
    return loss(logps, batch) / batch.max_completion_length


def no_kl(logps, batch):
    """RLOO of the reward alone, no KL term: unbiased for J = E[R] (``--kl none``).

    On the ``kl`` problem (β = 0.1) its KL part is missing, ``kl-no-gradient``: declare the
    objective without a KL, ``check rloo.py:no_kl --sequence --kl none``, and it passes.
    """
    r = batch.rewards.view(-1, batch.group_size)
    advantages = (r - (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1)
    return -(advantages * (logps * batch.completion_mask).sum(1)).mean()
