"""Mistakes no framework ships but users write, each on top of the correct RLOO (``rloo.py``).

Each uses the shaped reward R̃ = R − β Σ_t (ℓ^old − ℓ^ref) as ``rloo.py`` does, so that on a
problem with β > 0 the KL is right and only the named mistake differs.

sign:            the objective returned as the loss (ascent and descent swapped)
detached:        log-probs detached before the loss: no gradient at all
group_mean:      A_i = R_i − mean_g R with R_i in its own mean: E[ĝ] = (G−1)/G · ∇J
padded_width:    Σ m l / (N · W) with W the batch's padded width (TRL pads to the longest
                 completion of the batch): a normaliser that depends on the batch
length_mean:     (1/N) Σ_i (1/L_i) Σ_t m l with the leave-one-out A: the gradient of (R − b)/L
"""

from __future__ import annotations


def _shaped(batch):
    m = batch.completion_mask
    shaped = batch.rewards - batch.beta * ((batch.old_logps - batch.ref_logps) * m).sum(1)
    return shaped.view(-1, batch.group_size)


def _rloo(batch):
    r = _shaped(batch)
    return (r - (r.sum(dim=1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1)


def _seq(logps, batch):
    return (logps * batch.completion_mask).sum(1)


def sign(logps, batch):
    """The objective returned as the loss."""
    return (_rloo(batch) * _seq(logps, batch)).mean()


def detached(logps, batch):
    """Log-probs detached: no gradient."""
    return -(_rloo(batch) * _seq(logps.detach(), batch)).mean()


def group_mean(logps, batch):
    """The group mean including the sample itself: (G − 1)/G."""
    r = _shaped(batch)
    a = (r - r.mean(dim=1, keepdim=True)).reshape(-1)
    return -(a * _seq(logps, batch)).mean()


def padded_width(logps, batch):
    """Normalised by N × the batch's padded width."""
    return -(_rloo(batch) * _seq(logps, batch)).sum() / logps.numel()


def length_mean(logps, batch):
    """Each sequence's token mean: the gradient of (R − b)/L."""
    return -(_rloo(batch) * _seq(logps, batch) / batch.completion_mask.sum(1)).mean()
