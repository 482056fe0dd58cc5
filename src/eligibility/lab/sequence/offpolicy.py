r"""Exact off-policy sequence problems: θ_old, θ some steps later, and a sampler μ ≠ π_old.

A sequence problem (:class:`~eligibility.lab.sequence.problem.SequenceProblem`) at θ_old is the
policy that generated the batch. The loss is evaluated at θ, K exact gradient-ascent steps
later (:func:`ascend`), and the completions are drawn by a sampler μ (:class:`Sampler`): π_old's
logits at another temperature, cut to the top k, or perturbed, as a rollout engine's numerics and
settings make them. Everything is enumerated, in float64:

    J(θ) = (1/Q) Σ_q Σₒ π_θ(o|q) [R(q, o) − β (ln π_θ(o|q) − ln π_ref(o|q))],
    ∇J(θ) by autograd through that sum (never through a loss formula),

and the exact expectation, under sampling from μ, of an estimator that puts weight
c(o, t) on ∇ℓₜ(θ):

    E_μ[ĝ] = (1/Q) Σ_q Σ_{o: μ(o|q) > 0} μ(o|q) Σₜ c(o, t) ∇ℓₜ(θ)   (:meth:`expected_score`).

The named estimators (:meth:`OffPolicyProblem.variant_weights`) are written here from their
definitions, in numpy, and share nothing with :mod:`eligibility.torch.offpolicy`; with the
advantage A = R̃_θ − E_μ[R̃_θ | q] (R̃_θ = R − β (ln π_θ − ln π_ref), and E_μ[R̃ | q] the
expectation of a leave-one-out group baseline under sampling from μ) they are:

=================== ======================================== ===============================
name                c(o, t) / A(o)                           E_μ[ĝ] against ∇J(θ)
=================== ======================================== ===============================
``product``         π_θ(o)/μ(o) = w s                        ∇J(θ) (unbiased where μ covers
                                                             π_θ's support)
``token-ratio``     w rₜ                                     drops the prefix and suffix
                                                             ratios Π_{u≠t} rᵤ
``geometric-mean``  w s^{1/L}                                not an importance weight
``sequence-mean``   w s / L                                  the length-normalised gradient
``clipped``         w rₜ 1{token t not clipped (PPO)}        the token ratio, clipped tokens
                                                             dropped
``truncated``       min(w, C) s                              −E_μ[(w − C)₊ s A Σ∇ℓ]
``masked``          w 1{w ≤ C} s                             −E_μ[1{w > C} w s A Σ∇ℓ]
``uncorrected``     s (the sampler weight w left out)        E_μ[s A ∇ln π_θ] ≠ ∇J
``stale``           w (ratio ≡ 1: old log-probs taken at θ)  ∇ at θ of the objective at θ_old
=================== ======================================== ===============================

with s = π_θ(o)/π_old(o), rₜ = π_θ(oₜ|·)/π_old(oₜ|·), w = π_old(o)/μ(o) and L the length.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any

import numpy as np
import torch

from eligibility.lab.sequence.problem import Draw, SequenceBatch, SequenceProblem, token_logps

TOP_K = 2
"""How many of μ's most probable tokens a batch carries at each position (``sampler_top_*``)."""


@dataclass(frozen=True)
class OffPolicyBatch(SequenceBatch):
    """A batch of the off-policy contract: the sequence batch, drawn from μ, plus μ's log-probs.

    ``old_logps`` are π_old's (θ_old's) per-token log-probs, float32 [N, W], as the trainer
    recomputes them when the batch is generated; ``sampler_logps`` are μ's of the sampled
    tokens, as a rollout engine reports them, and ``sampler_top_ids`` / ``sampler_top_logps``
    [N, W, k] μ's k most probable tokens at each position and their log-probs, largest first,
    as a fast sampler returns its top-k log-probs beside the sampled token's (0 on padding).
    The loss gets ``logps`` at θ (or the model at θ).
    """

    sampler_logps: torch.Tensor | None = None
    sampler_top_ids: torch.Tensor | None = None
    sampler_top_logps: torch.Tensor | None = None


@dataclass(frozen=True)
class Sampler:
    r"""μ: π_old's logits z turned into a rollout engine's: softmax((z + σ εₚ,ₓ)/τ), top k kept.

    The perturbation σ εₚ,ₓ depends on the context only through the position p and the current
    token x (ε a fixed standard-normal table drawn from ``seed``), so μ is a proper
    autoregressive policy. A top-k cut gives the tokens outside the k largest logits μ = 0: a
    support mismatch no importance weight repairs.

    The cuts are applied per step in the order engines apply them (Hugging Face's logits
    processors, vLLM's sampler): τ, then top k, then top p (the smallest set of the most
    probable tokens whose probability reaches p, renormalised), then min p (the tokens whose
    probability is at least p_min times the largest), each renormalising what is left.

    Attributes:
        temperature: τ > 0.
        top_k: k (None: every token).
        noise: σ ≥ 0, the scale of the logit perturbation.
        seed: the seed of ε.
        top_p: p in (0, 1] (None: every token).
        min_p: p_min in [0, 1) (None: every token).
    """

    temperature: float = 1.0
    top_k: int | None = None
    noise: float = 0.0
    seed: int = 0
    top_p: float | None = None
    min_p: float | None = None

    def __post_init__(self) -> None:
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be finite and > 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be ≥ 1 or None, got {self.top_k}")
        if not (self.noise >= 0 and math.isfinite(self.noise)):
            raise ValueError(f"noise must be finite and ≥ 0, got {self.noise}")
        if self.top_p is not None and not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1] or None, got {self.top_p}")
        if self.min_p is not None and not (0.0 <= self.min_p < 1.0):
            raise ValueError(f"min_p must be in [0, 1) or None, got {self.min_p}")

    @property
    def truncates(self) -> bool:
        """Whether a cut can leave a token of π_old out (μ's support smaller than π_old's)."""
        return bool(self.top_k or (self.top_p or 1.0) < 1.0 or self.min_p)

    def log_probs(self, logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        """ln μ(· | context) from the logits [N, L, V] of ``input_ids`` [N, L]."""
        z = logits
        if self.noise:
            n_pos, V = logits.shape[1], logits.shape[2]
            g = torch.Generator().manual_seed(self.seed)
            eps = torch.randn(n_pos, V, V, generator=g, dtype=torch.float64).to(logits.dtype)
            z = z + self.noise * eps[torch.arange(n_pos)[None, :], input_ids]
        z = z / self.temperature
        if self.top_k is not None and self.top_k < z.shape[-1]:
            kth = z.topk(self.top_k, dim=-1).values[..., -1:]
            z = torch.where(z >= kth, z, -torch.inf)
        if self.top_p is not None and self.top_p < 1.0:
            with torch.no_grad():  # which tokens: a set, not a function of θ
                p = torch.softmax(z, dim=-1)
                ordered, order = p.sort(dim=-1, descending=True, stable=True)
                before = ordered.cumsum(-1) - ordered  # the mass of the more probable ones
                keep = torch.zeros_like(p, dtype=torch.bool)
                keep.scatter_(-1, order, before < self.top_p)  # the top token always stays
            z = torch.where(keep, z, -torch.inf)
        if self.min_p:
            with torch.no_grad():
                p = torch.softmax(z, dim=-1)
                keep = p >= self.min_p * p.max(dim=-1, keepdim=True).values
            z = torch.where(keep, z, -torch.inf)
        return torch.log_softmax(z, dim=-1)


class _At(torch.nn.Module):
    """A model called with the parameters ``params`` (a functional call), same interface."""

    def __init__(self, model: torch.nn.Module, params: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self._inner, self._params = [model], params

    def forward(self, input_ids: torch.Tensor, attention_mask: Any = None) -> Any:
        return torch.func.functional_call(self._inner[0], self._params, (input_ids,))


def _objective(base: SequenceProblem, params: dict[str, torch.Tensor]) -> torch.Tensor:
    """J at ``params``, enumerated: (1/Q) Σ π(o|q) [R − β (ln π − ln π_ref)], a torch scalar."""
    t = base.table
    ids, mask = torch.as_tensor(t.completion_ids), torch.as_tensor(t.mask)
    prompts = torch.as_tensor(base.prompts[t.prompt])
    logp = token_logps(_At(base.model64, params), prompts, ids, mask).sum(1)
    shaped = torch.as_tensor(t.reward) - base.beta * (logp - torch.as_tensor(t.ref_logp))
    return (torch.exp(logp) * shaped).sum() / len(base.prompts)


def ascend(base: SequenceProblem, steps: int, lr: float) -> np.ndarray:
    """θ after ``steps`` exact gradient-ascent steps of size ``lr`` on J from θ_old (flat).

    θ_{k+1} = θ_k + η ∇J(θ_k), ∇J by autograd of the enumerated J: the inner optimiser steps
    of a trainer that reuses one generation batch, made exact.
    """
    if steps < 0 or not (lr >= 0 and math.isfinite(lr)):
        raise ValueError(f"steps must be ≥ 0 and lr finite and ≥ 0, got {steps} and {lr}")
    flat = np.concatenate([v.reshape(-1).numpy() for v in base.theta.values()]).astype(float)
    for _ in range(steps):
        params = base.params64(flat)
        grads = torch.autograd.grad(_objective(base, params), list(params.values()))
        flat = flat + lr * torch.cat([g.reshape(-1) for g in grads]).numpy()
    return flat


class OffPolicyProblem:
    """A sequence problem sampled by μ from θ_old's logits, its loss evaluated at θ.

    Args:
        base: the problem at θ_old (its model's parameters), with its prompts, reward, β.
        theta: θ, a flat parameter vector in ``base.labels()`` order (e.g. :func:`ascend`).
        sampler: μ (default: π_old itself).
        name: a name for reports.

    Raises:
        ValueError: θ of the wrong size or not finite.
    """

    def __init__(
        self,
        base: SequenceProblem,
        theta: Any,
        sampler: Sampler | None = None,
        *,
        name: str | None = None,
    ) -> None:
        flat = np.asarray(theta, dtype=np.float64).reshape(-1)
        if flat.shape != (base.n_params,) or not np.isfinite(flat).all():
            raise ValueError(f"theta must be {base.n_params} finite numbers, got {flat.shape}")
        self.base, self.theta_flat = base, flat
        self.sampler = sampler or Sampler()
        self.name = name or f"{base.name}-off-policy"
        t = base.table
        self._ids, self._mask = torch.as_tensor(t.completion_ids), torch.as_tensor(t.mask)
        self._prompts = torch.as_tensor(base.prompts[t.prompt])
        with torch.no_grad():
            self.token_logp = self._token_logps(base.params64(flat)).numpy()
            self.old_token_logp = t.token_logp
            self.sampler_token_logp = self._sampler_logps().numpy()
        sampler_logp = self.sampler_token_logp.sum(1)
        self.sampler_prob = np.exp(sampler_logp)
        self.covered = self.sampler_prob > 0
        Q, M = len(base.prompts), len(t.reward) // len(base.prompts)
        cdf = np.cumsum(self.sampler_prob.reshape(Q, M), axis=1)
        cdf /= cdf[:, -1:]
        self._cdf = (cdf + np.arange(Q)[:, None]).reshape(-1)

    @property
    def group_size(self) -> int:
        """G, the base problem's completions per prompt."""
        return self.base.group_size

    @property
    def n_params(self) -> int:
        """p, the number of components of θ."""
        return self.base.n_params

    # the log-probs of the enumeration under θ, θ_old and μ -------------------------------------

    def _token_logps(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        return token_logps(_At(self.base.model64, params), self._prompts, self._ids, self._mask)

    def _sampler_logps(self, model: torch.nn.Module | None = None) -> torch.Tensor:
        """ln μ per token of every row, [M, T]: the sampler on ``model``'s logits.

        ``model`` defaults to π_old's; −inf off μ's support, its cuts held where they fall.
        """
        input_ids = torch.cat([self._prompts, self._ids], dim=1)
        P = self._prompts.shape[1]
        logits = (model or self.base.model64)(input_ids).logits
        log_mu = self.sampler.log_probs(logits, input_ids)[:, P - 1 : -1]
        lp = log_mu.gather(-1, self._ids.unsqueeze(-1)).squeeze(-1)
        return torch.where(self._mask > 0, lp, torch.zeros_like(lp))

    def _mean(self, x: np.ndarray, prob: np.ndarray) -> np.ndarray:
        """Σₒ p(o|q) x(o) per prompt, [Q]."""
        x = np.where(prob > 0, np.asarray(x, dtype=np.float64), 0.0)
        return np.add.reduceat(prob * x, self.base.table.start[:-1])

    # exact values ------------------------------------------------------------------------------

    @cached_property
    def J(self) -> float:
        """J(θ)."""
        with torch.no_grad():
            return float(_objective(self.base, self.base.params64(self.theta_flat)))

    @cached_property
    def exact(self) -> np.ndarray:
        """∇J(θ), flat in ``base.labels()`` order (autograd of the enumerated J)."""
        params = self.base.params64(self.theta_flat)
        grads = torch.autograd.grad(_objective(self.base, params), list(params.values()))
        return torch.cat([g.reshape(-1) for g in grads]).numpy()

    def sampler_objective(self, flat: np.ndarray | None = None, *, grad: bool = False) -> Any:
        """J_μ(θ) = (1/Q) Σ_q Σ_{o: μ_θ(o) > 0} μ_θ(o|q) [R − β (ln μ_θ − ln π_ref)].

        The objective of the sampler's own distribution μ_θ (π_θ cut and renormalised as the
        sampler cuts it): what a loss that treats the sampler's draws and log-probs as the
        policy's ascends. With ``grad``: (J_μ, ∇J_μ flat) by autograd, the cuts held fixed.
        """
        params = self.base.params64(self.theta_flat if flat is None else flat)
        with torch.set_grad_enabled(grad):
            lmu = self._sampler_logps(_At(self.base.model64, params)).sum(1)
            on = torch.isfinite(lmu)
            safe = torch.where(on, lmu, torch.zeros_like(lmu))
            prob = torch.where(on, torch.exp(safe), torch.zeros_like(safe))
            t = self.base.table
            ref = torch.as_tensor(t.ref_logp)
            value = (prob * (torch.as_tensor(t.reward) - self.base.beta * (safe - ref))).sum()
            value = value / len(self.base.prompts)
        if not grad:
            return float(value)
        grads = torch.autograd.grad(value, list(params.values()))
        return float(value.detach()), torch.cat([g.reshape(-1) for g in grads]).numpy()

    @cached_property
    def sampler_exact(self) -> np.ndarray:
        """∇J_μ(θ): the gradient of the sampler's own objective (:meth:`sampler_objective`)."""
        return self.sampler_objective(grad=True)[1]

    @cached_property
    def shaped_reward(self) -> np.ndarray:
        """R̃_θ = R − β (ln π_θ − ln π_ref) per row, [M]."""
        t = self.base.table
        return t.reward - self.base.beta * (self.token_logp.sum(1) - t.ref_logp)

    @cached_property
    def advantage(self) -> np.ndarray:
        """A = R̃_θ − E_μ[R̃_θ | q] per row, [M] (0 where μ(o) = 0: never drawn)."""
        b = self._mean(self.shaped_reward, self.sampler_prob)[self.base.table.prompt]
        return np.where(self.covered, self.shaped_reward - b, 0.0)

    def expected_score(self, weight: Any) -> np.ndarray:
        """(1/Q) Σ_q Σ_{o: μ(o) > 0} μ(o|q) Σₜ c(o, t) mₜ ∇ℓₜ(θ), exactly; flat.

        Args:
            weight: c per row [M] or per token [M, T] (non-finite values are allowed where
                μ(o) = 0, and ignored).
        """
        t = self.base.table
        c = np.asarray(weight, dtype=np.float64)
        if c.shape == t.length.shape:
            c = np.broadcast_to(c[:, None], t.mask.shape)
        if c.shape != t.mask.shape:
            raise ValueError(f"weight must be [M] or [M, T] = {t.mask.shape}, got {c.shape}")
        c = np.where(self.covered[:, None], c, 0.0)
        if not np.isfinite(c).all():
            raise ValueError("weight must be finite wherever μ(o) > 0")
        params = self.base.params64(self.theta_flat)
        coef = torch.as_tensor(self.sampler_prob[:, None] * t.mask * c / len(self.base.prompts))
        value = (coef * self._token_logps(params)).sum()
        grads = torch.autograd.grad(value, list(params.values()))
        return torch.cat([g.reshape(-1) for g in grads]).numpy()

    def expected_loss_gradient(self, loss: Any) -> np.ndarray:
        """E_μ[−∇loss] of a per-sequence loss, exactly, by one call on the whole enumeration.

        ``loss(logps, old_logps, sampler_logps, advantages, mask)`` (torch, float64; logps [N, T]
        differentiable in θ; advantages [N]; mask bool) must be (1/N) Σᵢ lᵢ with lᵢ positively
        homogeneous of degree 1 in Aᵢ (every surrogate of :mod:`eligibility.torch.offpolicy` with
        a per-sequence aggregation is). It is called on the N rows μ covers with
        Aᵢ' = Aᵢ μ(oᵢ|q) N / Q, so −∇loss = (1/Q) Σ μ(o|q) (−∇lᵢ(Aᵢ)) = E_μ[−∇l].
        """
        rows = np.flatnonzero(self.covered)
        params = self.base.params64(self.theta_flat)
        lp = self._token_logps(params)[rows]
        scale = self.sampler_prob[rows] * len(rows) / len(self.base.prompts)
        value = loss(
            lp,
            torch.as_tensor(self.old_token_logp[rows]),
            torch.as_tensor(self.sampler_token_logp[rows]),
            torch.as_tensor(self.advantage[rows] * scale),
            self._mask[rows] > 0,
        )
        grads = torch.autograd.grad(-value, list(params.values()))
        return torch.cat([g.reshape(-1) for g in grads]).numpy()

    # the named estimators ------------------------------------------------------------------------

    def variant_coefficients(
        self, *, eps_low: float = 0.2, eps_high: float = 0.2, cap: float = 3.0
    ) -> dict[str, np.ndarray]:
        """c(o, t)/A(o) of each named estimator (the module docstring's table), [M, T] each.

        Written from the definitions, per row of the enumeration: s = π_θ(o)/π_old(o),
        rₜ = π_θ(oₜ|·)/π_old(oₜ|·), w = π_old(o)/μ(o); 0 on the rows μ never draws. The
        ``clipped`` coefficient depends on the sign of A (:attr:`advantage`'s here).
        """
        mask = self.base.table.mask
        log_r = (self.token_logp - self.old_token_logp) * mask
        log_s = log_r.sum(1)
        log_w = self.old_token_logp.sum(1) - self.sampler_token_logp.sum(1)
        w = np.exp(np.where(self.covered, log_w, 0.0)) * self.covered  # rows μ never draws: 0
        s, r = np.exp(log_s), np.exp(log_r)
        length = mask.sum(1)
        active = np.where(self.advantage[:, None] > 0, r <= 1 + eps_high, r >= 1 - eps_low)
        col = np.ones_like(mask)
        per_row = {
            "product": w * s,
            "geometric-mean": w * np.exp(log_s / length),
            "sequence-mean": w * s / length,
            "truncated": np.minimum(w, cap) * s,
            "masked": np.where(w <= cap, w, 0.0) * s,
            "uncorrected": s * self.covered,
            "stale": w,
        }
        out = {k: v[:, None] * col for k, v in per_row.items()}
        out["token-ratio"] = w[:, None] * r
        out["clipped"] = w[:, None] * r * active
        return out

    def variant_weights(self, **options: float) -> dict[str, np.ndarray]:
        """c(o, t) = A(o) · :meth:`variant_coefficients`, [M, T] each."""
        A = self.advantage[:, None]
        return {k: c * A for k, c in self.variant_coefficients(**options).items()}

    def variants(self, **options: float) -> dict[str, np.ndarray]:
        """E_μ[ĝ] of each named estimator, flat (``options``: see :meth:`variant_weights`)."""
        return {k: self.expected_score(c) for k, c in self.variant_weights(**options).items()}

    # how far θ is from θ_old, and from μ -------------------------------------------------------

    def kl_old(self) -> float:
        """E_q KL(π_old(·|q) ‖ π_θ(·|q)) over whole completions, in nats."""
        t = self.base.table
        gap = self.old_token_logp.sum(1) - self.token_logp.sum(1)
        return float(self._mean(gap, t.prob).mean())

    def clipped_share(self, eps_low: float = 0.2, eps_high: float = 0.2) -> float:
        """E_μ[clipped tokens] / E_μ[L], the share of tokens PPO-clip cuts.

        A token is clipped where rₜ > 1 + ε_high and A > 0, or rₜ < 1 − ε_low and A < 0.
        """
        mask = self.base.table.mask
        r = np.exp((self.token_logp - self.old_token_logp) * mask)
        A = self.advantage[:, None]
        clipped = ((A > 0) & (r > 1 + eps_high)) | ((A < 0) & (r < 1 - eps_low))
        n = self._mean((clipped * mask).sum(1), self.sampler_prob).sum()
        return float(n / self._mean(mask.sum(1), self.sampler_prob).sum())

    # draws from μ, and the batches of the contract ----------------------------------------------

    def draw_groups(self, n_groups: int, rng: np.random.Generator, group_size: int) -> Draw:
        """``n_groups`` groups of G completions drawn from μ, prompts stratified as the base's."""
        Q = len(self.base.prompts)
        k, rest = divmod(n_groups, Q)
        prompts = np.concatenate([np.tile(np.arange(Q), k), rng.permutation(Q)[:rest]])
        prompts = rng.permutation(prompts)
        q = np.repeat(prompts, group_size)
        rows = np.searchsorted(self._cdf, q + rng.random(len(q)), side="right")
        rows = np.minimum(rows, len(self._cdf) - 1)
        return Draw(prompts=prompts, rows=rows, group_size=group_size)

    def batch(self, draw: Draw) -> OffPolicyBatch:
        """The contract's batch: the base's fields (``old_logps`` θ_old's) and ``sampler_logps``."""
        b = self.base.batch(draw)
        W = b.completion_ids.shape[1]
        mu = torch.as_tensor(self.sampler_token_logp[draw.rows, :W], dtype=torch.float32)
        top_ids, top_logps = (x[draw.rows, :W] for x in self.sampler_top)
        return OffPolicyBatch(
            **{f.name: getattr(b, f.name) for f in fields(b)},
            sampler_logps=mu,
            sampler_top_ids=top_ids,
            sampler_top_logps=top_logps.to(torch.float32),
        )

    @cached_property
    def sampler_top(self) -> tuple[torch.Tensor, torch.Tensor]:
        """μ's :data:`TOP_K` most probable tokens at each completion position, and their ln μ.

        [M, T, k] each, largest first (0 on padding), from the sampler on π_old's logits.
        """
        input_ids = torch.cat([self._prompts, self._ids], dim=1)
        P = self._prompts.shape[1]
        with torch.no_grad():
            logits = self.base.model64(input_ids).logits
            log_mu = self.sampler.log_probs(logits, input_ids)[:, P - 1 : -1]
        k = min(TOP_K, log_mu.shape[-1])
        top = log_mu.topk(k, dim=-1)
        on = self._mask[..., None] > 0
        return torch.where(on, top.indices, 0), torch.where(on, top.values, 0.0)

    @cached_property
    def model(self) -> torch.nn.Module:
        """A float32 copy of the policy with θ loaded (what the loss is evaluated with)."""
        model = copy.deepcopy(self.base.model)
        flat, i = torch.as_tensor(self.theta_flat), 0
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(flat[i : i + p.numel()].reshape(p.shape))
                i += p.numel()
        return model

    def logps(self, batch: SequenceBatch) -> torch.Tensor:
        """ℓ at θ of the batch's tokens, float32 [N, W], differentiable in :attr:`model`'s θ."""
        return token_logps(
            self.model, batch.prompt_ids, batch.completion_ids, batch.completion_mask
        )

    @cached_property
    def token_scores(self) -> np.ndarray:
        """∇ℓₜ(θ) of every row and token, [M, T, p] (0 on padding).

        One backward pass per parameter: the Jacobian column J eⱼ is the gradient in u of
        ⟨u, J eⱼ⟩.
        """
        params = self.base.params64(self.theta_flat)
        leaves = list(params.values())
        out = self._token_logps(params)
        u = torch.zeros_like(out, requires_grad=True)
        grads = torch.autograd.grad((u * out).sum(), leaves, create_graph=True)
        vjp = torch.cat([g.reshape(-1) for g in grads])
        cols = [torch.autograd.grad(vjp[j], u, retain_graph=True)[0] for j in range(len(vjp))]
        return torch.stack(cols, dim=-1).detach().numpy()

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Enumeration rows of ``n`` completions of each prompt drawn from μ(·|q), [Q, n]."""
        Q = len(self.base.prompts)
        u = np.arange(Q)[:, None] + rng.random((Q, n))
        rows = np.searchsorted(self._cdf, u, side="right")
        return np.minimum(rows, len(self._cdf) - 1)


__all__ = ["OffPolicyBatch", "OffPolicyProblem", "Sampler", "ascend"]
