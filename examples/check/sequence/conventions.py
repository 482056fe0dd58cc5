"""GRPO's group advantage under the conventions real code uses: population std, another ε.

Ours, written from the formula of GRPO's advantage (Shao et al. 2024) with the std that
``np.std`` and ``torch.std(unbiased=False)`` compute (n in the denominator, not n − 1):

    Aᵢ = (Rᵢ − mean_g R) / (σ̂_pop + ε),   σ̂_pop = √((1/G) Σⱼ (Rⱼ − mean_g R)²),
    loss = −(1/N) Σᵢ Aᵢ Σₜ mᵢₜ ℓᵢₜ.

σ̂_pop = σ̂ √((G − 1)/G), so on every batch this is the sample-std GRPO (the check's
``std-normalised`` variant) times √(G/(G − 1)) = 1.07 at G = 8, up to ε: the check names
``std-normalised × 1.1`` on every problem.
"""

from __future__ import annotations


def _grpo(logps, batch, correction: int, eps: float):
    r = batch.rewards.view(-1, batch.group_size)
    centred = r - r.mean(dim=1, keepdim=True)
    sd = r.std(dim=1, keepdim=True, correction=correction)
    a = (centred / (sd + eps)).reshape(-1)
    return -(a * (logps * batch.completion_mask).sum(1)).mean()


def population_std(logps, batch):
    """GRPO with the population std (``torch.std(unbiased=False)``), ε = 10⁻⁴."""
    return _grpo(logps, batch, correction=0, eps=1e-4)


def sample_std(logps, batch):
    """GRPO with the sample std (Bessel's correction), ε = 10⁻⁴: ``std-normalised`` as it is."""
    return _grpo(logps, batch, correction=1, eps=1e-4)


def rloo_kl_005_token_means(logps, batch):
    """RLOO with β = 0.05 written in (the KL in the reward) and each sequence's token mean.

    ``kl-weight`` (against the objective's β) beside ``length-normalised``, named when the
    loss's weight is declared (``--loss-beta 0.05``).
    """
    m = batch.completion_mask
    shaped = batch.rewards - 0.05 * ((batch.old_logps - batch.ref_logps) * m).sum(1)
    r = shaped.view(-1, batch.group_size)
    a = (r - (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1)
    return -(a * (logps * m).sum(1) / m.sum(1)).mean()
