r"""The credit audit: the weight a loss gives each token, held against the token's exact credit.

Every loss ``eligibility check`` takes is a function of the tokens' log-probs ℓₜ, so
wₜ = ∂L/∂ℓₜ, the weight it puts on token t's score, is exact on every batch and costs nothing
beyond the backward pass the check already makes (:mod:`~eligibility.check.audit.tap`). The
exact credit of a token is known (:mod:`~eligibility.check.audit.credit`): 0 on every token the
model did not write, and on the model's, its turn's reward-to-go less a baseline that does not
depend on it. Where the two differ is the mistake, and how they differ is read, not matched:
tokens scored that should not be and entries read that are not the token's
(:mod:`~eligibility.check.audit.relations`); the model's tokens left without weight or weighted
against their reply's sign, described by the simplest rule of their features
(:mod:`~eligibility.check.audit.tokens`); a factor per token (π, π/μ, γᵗ); and the map of the
rest from the credit, a relation of the table or one found by a search over a small grammar
(:mod:`~eligibility.check.audit.maps`), with the KL's part read apart where β > 0
(:mod:`~eligibility.check.audit.kl`) and the ratios split off-policy
(:mod:`~eligibility.check.audit.sampler`). The statistical verdict stays the judge of
E[ĝ] = ∇J (:mod:`~eligibility.check.audit.judge`); every name the audit gives is a mistake of
the check's one registry, :mod:`eligibility.check.mistakes`, carried by a
:class:`~eligibility.check.audit.names.Finding`.

The pieces: :mod:`~eligibility.check.audit.seen` (a batch as the audit reads it),
:mod:`~eligibility.check.audit.record` (a family's draw taps its first batches).
"""

from __future__ import annotations

from eligibility.check.audit.judge import Audit, audit, judge
from eligibility.check.audit.record import AUDITED, SUMMARY_KEY, Recorder

__all__ = ["AUDITED", "SUMMARY_KEY", "Audit", "Recorder", "audit", "judge"]
