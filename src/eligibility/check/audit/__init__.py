r"""The credit audit: the weight a loss gives each token, held against the token's exact credit.

Every loss ``eligibility check`` takes is a function of the tokens' log-probs ℓₜ, so
wₜ = ∂L/∂ℓₜ, the weight it puts on token t's score, is exact on every batch and costs nothing
beyond the backward pass the check already makes (:mod:`~eligibility.check.audit.tap`). The
exact credit of a token is known (:mod:`~eligibility.check.audit.credit`): 0 on every token the
model did not write, and on the model's, its turn's reward-to-go less a baseline that does not
depend on it. Where the two differ is the mistake, and how they differ names it
(:mod:`~eligibility.check.audit.relations`): tokens scored that should not be, entries read
that are not the token's, the model's tokens left without weight, and the relation of the rest
to the credit (a constant, a length, a batch's normaliser, a whitening, a turn's credit). The
statistical verdict stays the judge of E[ĝ] = ∇J (:mod:`~eligibility.check.audit.judge`).

The pieces: :mod:`~eligibility.check.audit.seen` (a batch as the audit reads it),
:mod:`~eligibility.check.audit.record` (a family's draw taps its first batches).
"""

from __future__ import annotations

from eligibility.check.audit.judge import Audit, audit, judge
from eligibility.check.audit.record import AUDITED, SUMMARY_KEY, Recorder

__all__ = ["AUDITED", "SUMMARY_KEY", "Audit", "Recorder", "audit", "judge"]
