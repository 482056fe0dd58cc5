r"""Exact sequence problems: J(θ) and ∇J(θ) of a causal LM by enumerating every completion.

A problem is a causal LM π_θ over a vocabulary with an EOS token, a reference LM π_ref, Q
prompts q (each P tokens), completions o of at most T tokens, and a verifiable reward R(q, o).
A completion ends at its first EOS (kept in it, length L ≤ T) or is cut at T tokens
(truncated, no EOS). Every completion is enumerated, (V−1)ᴸ⁻¹ of each length L ≤ T and (V−1)ᵀ
truncated ones, so with π(o|q) = Πₜ π_θ(oₜ | q, o_{<t}) the objective is an exact finite sum:

    J(θ) = (1/Q) Σ_q Σ_o π(o|q) [R(q, o) − β (log π(o|q) − log π_ref(o|q))]
         = E_q E_o[R] − β E_q KL(π_θ(·|q) ‖ π_ref(·|q)),

with the KL over whole sequences. ∇J is torch autograd through that sum, in float64 (the
model's float32 θ copied exactly into a float64 twin). Equivalently (the likelihood ratio,
E[∇log π] = 0), with the shaped reward R̃ = R − β (log π − log π_ref),

    ∇J = E_q E_o[(R̃(q, o) − b_q) ∇log π(o|q)]   for any b_q independent of o.

Exact expectations of other estimators are the same sum with another weight:
:meth:`SequenceProblem.expected_score` gives (1/Q) Σ_q Σ_o π(o|q) Σₜ w(q, o, t) ∇ℓₜ for any
per-completion or per-token weight w, and :meth:`SequenceProblem.expected_group_gradient` the
exact E[ĝ] of a group advantage A(R₁ … R_G) (the other G−1 rewards enumerated).

Batches are drawn from the enumeration itself (one inverse-CDF draw per completion over
π(·|q), which is autoregressive sampling done at once), with the fields of the sequence
contract of ``eligibility check`` (:class:`SequenceBatch`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import cached_property
from typing import Any

import numpy as np
import torch

from eligibility.lab.sequence.enumeration import (
    MAX_GROUP_OUTCOMES,
    Draw,
    Enumeration,
    SequenceBatch,
    _Bound,
    _multisets,
    completion_mask,
    completions,
    n_completions,
    token_logps,
)

Reward = Callable[[tuple[int, ...], tuple[int, ...]], float]
"""R(prompt tokens, completion tokens): the completion without padding, its EOS included."""

Advantage = Callable[[np.ndarray], np.ndarray]
"""A group advantage: rewards [B, G] → advantages [B, G] (each row one group)."""

MAX_COMPLETIONS = 20_000
"""The most completions per prompt the enumeration accepts."""


def _flat(grads: Sequence[torch.Tensor]) -> np.ndarray:
    return torch.cat([g.reshape(-1) for g in grads]).detach().numpy().astype(np.float64)


class SequenceProblem:
    """A causal LM at a fixed θ with Q prompts and a reward: exact J, ∇J and batches.

    The same protocol as the episodic problems (:class:`eligibility.check.problems.
    CheckProblem`): ``name``, ``description``, ``exact`` (∇J flattened), ``labels()``,
    ``sample(n, rng)``, ``mistakes`` (exact E[ĝ] of named mistakes) and ``blind_to``.

    Args:
        model: the policy π_θ, a causal LM called as ``model(input_ids).logits`` → [N, L, V];
            its current parameters are θ (kept, and put back by :meth:`reset`).
        ref_model: the reference π_ref (same calling convention and vocabulary).
        prompts: Q prompts of P tokens each, [Q, P].
        reward: R(q, o) (see :data:`Reward`).
        max_completion_length: T.
        eos_token_id: the EOS token (also the padding).
        beta: β ≥ 0, the KL coefficient of J.
        group_size: G, the default completions per prompt of a batch.
        name: the key of ``--problem``.
        description: one line.
        shows: the mistakes this problem is built to expose (for the docs and the report).
        blind_to: what it cannot see, and which problem can.

    Raises:
        ValueError: bad shapes, a reward that is not finite, β < 0, G < 2, or more completions
            per prompt than :data:`MAX_COMPLETIONS`.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        ref_model: torch.nn.Module,
        prompts: Any,
        reward: Reward,
        *,
        max_completion_length: int,
        eos_token_id: int = 0,
        beta: float = 0.0,
        group_size: int = 4,
        name: str = "sequence",
        description: str = "",
        shows: tuple[str, ...] = (),
        blind_to: tuple[str, ...] = (),
    ) -> None:
        prompts = np.asarray(prompts, dtype=np.int64)
        if prompts.ndim != 2 or prompts.shape[0] == 0 or prompts.shape[1] == 0:
            raise ValueError(f"prompts must be [Q, P] token ids, got shape {prompts.shape}")
        T = int(max_completion_length)
        if T < 1:
            raise ValueError(f"max_completion_length must be ≥ 1, got {max_completion_length}")
        if not (beta >= 0 and math.isfinite(beta)):
            raise ValueError(f"beta must be finite and ≥ 0, got {beta}")
        if group_size < 2:
            raise ValueError(f"group_size must be ≥ 2 (a baseline needs another), got {group_size}")
        with torch.no_grad():
            V = model(torch.as_tensor(prompts[:1])).logits.shape[-1]
        if not (0 <= eos_token_id < V) or prompts.min() < 0 or prompts.max() >= V:
            raise ValueError(f"eos_token_id and the prompt tokens must lie in 0..{V - 1}")
        if n_completions(V, T) > MAX_COMPLETIONS:
            raise ValueError(
                f"{n_completions(V, T)} completions per prompt (V = {V}, T = {T}) is more than "
                f"{MAX_COMPLETIONS}; lower max_completion_length or the vocabulary"
            )
        self.model, self.ref_model = model, ref_model
        self.prompts, self.reward_fn, self.vocab_size = prompts, reward, V
        self.max_completion_length, self.eos_token_id = T, eos_token_id
        self.beta, self.group_size = float(beta), int(group_size)
        self.name, self.description = name, description or f"{len(prompts)} prompts, T = {T}"
        self.shows, self.blind_to = tuple(shows), tuple(blind_to)
        self.theta = {k: p.detach().clone() for k, p in model.named_parameters()}
        self._model64 = copy.deepcopy(model).double()
        self._ref64 = copy.deepcopy(ref_model).double()
        self._build_enumeration()

    # θ and its names -------------------------------------------------------------------------

    def reset(self) -> None:
        """Put θ back into ``model`` and clear its gradients (before every call of a loss)."""
        with torch.no_grad():
            for k, p in self.model.named_parameters():
                p.copy_(self.theta[k])
                p.grad = None

    def labels(self) -> list[str]:
        """A name per component of ∇J, in ``named_parameters()`` order: ``token.weight[1,0]``."""
        return [
            f"{k}[{','.join(str(i) for i in idx)}]"
            for k, v in self.theta.items()
            for idx in np.ndindex(*v.shape)
        ]

    # the episodic lab's Problem protocol (for its report): γ, E[T], aliasing, flat vectors
    gamma = 1.0
    aliased = False

    @property
    def expected_length(self) -> float:
        """E_q E_o[L], completion tokens (the report's E[T])."""
        return float(self.table.mean(self.table.length).mean())

    def flatten(self, x: np.ndarray) -> np.ndarray:
        """Vectors here are flat already (``named_parameters()`` order)."""
        return np.asarray(x, dtype=np.float64).reshape(-1)

    @property
    def n_params(self) -> int:
        """p, the number of components of θ."""
        return sum(v.numel() for v in self.theta.values())

    def params64(self, flat: np.ndarray | None = None) -> dict[str, torch.Tensor]:
        """θ (or a flat vector of the same layout) as fresh float64 leaves requiring grad."""
        out, i = {}, 0
        for k, v in self.theta.items():
            if flat is None:
                t = v.to(torch.float64)
            else:
                t = torch.as_tensor(np.asarray(flat[i : i + v.numel()]), dtype=torch.float64)
                t = t.reshape(v.shape)
            out[k] = t.clone().requires_grad_(True)
            i += v.numel()
        return out

    # the enumeration -------------------------------------------------------------------------

    def _build_enumeration(self) -> None:
        Q = len(self.prompts)
        C = completions(self.vocab_size, self.eos_token_id, self.max_completion_length)
        M = len(C)
        self._ids = torch.as_tensor(np.tile(C, (Q, 1)))
        mask = np.tile(completion_mask(C, self.eos_token_id), (Q, 1))
        self._mask = torch.as_tensor(mask)
        self._prompt_rows = torch.as_tensor(np.repeat(self.prompts, M, axis=0))
        length = mask.sum(axis=1).astype(np.int64)
        truncated = (self._ids.numpy() != self.eos_token_id).all(axis=1)
        reward = np.empty(Q * M)
        for q in range(Q):
            prompt = tuple(int(x) for x in self.prompts[q])
            for m in range(M):
                L = length[m]
                reward[q * M + m] = self.reward_fn(prompt, tuple(int(x) for x in C[m, :L]))
        if not np.isfinite(reward).all():
            raise ValueError(f"reward must be finite on every completion of {self.name}")
        with torch.no_grad():
            lp = self._token_logps64(self.params64())
            ref = token_logps(self._ref64, self._prompt_rows, self._ids, self._mask)
        self.table = Enumeration(
            prompt=np.repeat(np.arange(Q), M),
            completion_ids=self._ids.numpy(),
            mask=mask,
            length=length,
            truncated=truncated,
            reward=reward,
            token_logp=lp.numpy(),
            ref_token_logp=ref.numpy(),
            start=np.arange(Q + 1) * M,
        )
        cdf = np.cumsum(self.table.prob.reshape(Q, M), axis=1)
        cdf /= cdf[:, -1:]  # exactly 1 at the end of each prompt
        self._cdf = (cdf + np.arange(Q)[:, None]).reshape(-1)  # prompt q's CDF on [q, q + 1]
        self._ref32 = torch.as_tensor(self.table.ref_token_logp, dtype=torch.float32)
        self._old32 = torch.as_tensor(self.table.token_logp, dtype=torch.float32)
        self._mask32 = self._mask.to(torch.float32)
        self._reward32 = torch.as_tensor(reward, dtype=torch.float32)
        self._prompts_t = torch.as_tensor(self.prompts)
        self._prompt_of_row = torch.as_tensor(self.table.prompt)

    def _token_logps64(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        return token_logps(_Bound(self._model64, params), self._prompt_rows, self._ids, self._mask)

    # exact J and gradients -------------------------------------------------------------------

    def _objective64(self, params: dict[str, torch.Tensor], *, reward: bool, kl: bool):
        """(1/Q) Σ_q Σ_o π(o|q) [R·reward − β (log π − log π_ref)·kl], as a torch scalar."""
        logp = self._token_logps64(params).sum(dim=1)
        prob = torch.exp(logp)
        value = torch.zeros((), dtype=torch.float64)
        if reward:
            value = value + (prob * torch.as_tensor(self.table.reward)).sum()
        if kl and self.beta:
            ref = torch.as_tensor(self.table.ref_logp)
            value = value - self.beta * (prob * (logp - ref)).sum()
        return value / len(self.prompts)

    def objective(self, flat: np.ndarray | None = None) -> float:
        """J at θ, or at the flat parameter vector ``flat`` (same layout as :meth:`labels`)."""
        with torch.no_grad():
            return float(self._objective64(self.params64(flat), reward=True, kl=True))

    def _grad(self, *, reward: bool, kl: bool) -> np.ndarray:
        params = self.params64()
        value = self._objective64(params, reward=reward, kl=kl)
        return _flat(torch.autograd.grad(value, list(params.values()), allow_unused=False))

    @cached_property
    def J(self) -> float:
        """J(θ) = E_q E_o[R] − β E_q KL(π_θ ‖ π_ref)."""
        return self.objective()

    @cached_property
    def exact(self) -> np.ndarray:
        """∇J(θ), flattened in ``named_parameters()`` order (autograd of the exact sum)."""
        return self._grad(reward=True, kl=True)

    @cached_property
    def reward_gradient(self) -> np.ndarray:
        """∇ E_q E_o[R], flattened."""
        return self._grad(reward=True, kl=False)

    @cached_property
    def kl_gradient(self) -> np.ndarray:
        """∇ E_q KL(π_θ(·|q) ‖ π_ref(·|q)) over whole sequences, flattened (0 when β = 0).

        = E_q E_o[∇log π(o|q) (log π(o|q) − log π_ref(o|q))]: the k1 estimator as a
        reward-to-go penalty, in expectation.
        """
        if not self.beta:
            return np.zeros(self.n_params)
        return -self._grad(reward=False, kl=True) / self.beta

    @cached_property
    def kl(self) -> np.ndarray:
        """KL(π_θ(·|q) ‖ π_ref(·|q)) per prompt, [Q]."""
        return self.table.mean(self.table.logp - self.table.ref_logp)

    @property
    def shaped_reward(self) -> np.ndarray:
        """R̃ = R − β (log π − log π_ref) per row, [M]: ∇J = E[(R̃ − b) ∇log π]."""
        t = self.table
        return t.reward - self.beta * (t.logp - t.ref_logp)

    def expected_score(self, weight: Any) -> np.ndarray:
        """(1/Q) Σ_q Σ_o π(o|q) Σₜ w(q, o, t) mₜ ∇ℓₜ, exactly; flattened.

        Args:
            weight: per row of :attr:`table`, [M] (one weight per completion, on every
                token) or [M, T] (per token); or a function of the :class:`Enumeration`
                returning one. w = R̃ − E_q R̃ gives ∇J; w = (R − E_q R)/L the length-
                normalised estimator's expectation.
        """
        t = self.table
        w = np.asarray(weight(t) if callable(weight) else weight, dtype=np.float64)
        if w.shape == t.length.shape:
            w = np.broadcast_to(w[:, None], t.mask.shape)
        if w.shape != t.mask.shape or not np.isfinite(w).all():
            raise ValueError(
                f"weight must be finite with shape [M] = {t.length.shape} or [M, T] = "
                f"{t.mask.shape}, got {w.shape}"
            )
        params = self.params64()
        coef = torch.as_tensor(t.prob[:, None] * t.mask * w / len(self.prompts))
        value = (coef * self._token_logps64(params)).sum()
        return _flat(torch.autograd.grad(value, list(params.values())))

    def expected_group_gradient(
        self, advantage: Advantage, *, group_size: int | None = None, weight: Any = 1.0
    ) -> np.ndarray:
        """E[ĝ] of ĝ = (1/N) Σᵢ Aᵢ cᵢ ∇log π(oᵢ|q) with A = advantage(R₁ … R_G), exactly.

        The other G − 1 completions of a group are independent of oᵢ, so

            E[ĝ] = (1/Q) Σ_q Σ_o π(o|q) ā_q(R(q, o)) c(o) ∇log π(o|q),
            ā_q(r) = E[A₁ | R₁ = r] over R₂ … R_G drawn iid from the rewards of prompt q,

        enumerated over the multisets of the distinct reward values of q that the other G − 1
        rewards can form (binary rewards: G of them), each with its multinomial probability.
        ``advantage`` must be permutation-equivariant (every group statistic is).

        Args:
            advantage: rewards [B, G] → advantages [B, G] (numpy).
            group_size: G (default the problem's).
            weight: c, per row [M] or per token [M, T] (as :meth:`expected_score`), e.g. 1/L.
        """
        G = group_size or self.group_size
        t = self.table
        a_bar = np.empty(len(t.reward))
        for q in range(len(self.prompts)):
            rows = slice(t.start[q], t.start[q + 1])
            values, inverse = np.unique(t.reward[rows], return_inverse=True)
            p = np.bincount(inverse, weights=t.prob[rows], minlength=len(values))
            others, p_others = _multisets(p, G - 1)
            k = len(values)
            groups = np.concatenate(
                [np.repeat(np.arange(k), len(others))[:, None], np.tile(others, (k, 1))], axis=1
            )
            A = np.asarray(advantage(values[groups]), dtype=np.float64)[:, 0].reshape(k, -1)
            a_bar[rows] = (A @ p_others)[inverse]
        w = np.asarray(weight(t) if callable(weight) else weight, dtype=np.float64)
        if w.ndim == 2:
            return self.expected_score(a_bar[:, None] * w)
        return self.expected_score(a_bar * np.broadcast_to(w, a_bar.shape))

    def jacobian(self, fn: Callable[[torch.nn.Module], torch.Tensor]) -> np.ndarray:
        """∂fn/∂θ at θ for any function of the model, [*fn's shape, p], float64.

        ``fn(model)`` gets the float64 twin of the model, bound to θ, and returns a tensor
        (e.g. per-token log-probs of the enumeration read another way: no shift, prompt
        tokens, padding). Column j is the Jacobian-vector product J eⱼ, the gradient with
        respect to u of ⟨u, J eⱼ⟩ (the double-backward trick): p backward passes, no
        forward-mode decompositions to compile.
        """
        params = self.params64()
        leaves = list(params.values())
        out = fn(_Bound(self._model64, params))
        u = torch.zeros_like(out, requires_grad=True)
        vjp = torch.cat(
            # ⟨u, out⟩ rather than grad_outputs=u: the latter imports torch.fx's shape machinery
            [
                g.reshape(-1)
                for g in torch.autograd.grad(
                    (u * out).sum(),
                    leaves,
                    create_graph=True,
                    allow_unused=True,
                    materialize_grads=True,
                )
            ]
        )
        columns = [
            torch.autograd.grad(
                vjp[j], u, retain_graph=True, allow_unused=True, materialize_grads=True
            )[0]
            for j in range(len(vjp))
        ]
        return torch.stack(columns, dim=-1).detach().numpy()

    @cached_property
    def token_scores(self) -> np.ndarray:
        """∇ℓₜ of every completion token, [M, T, p] (0 on padding): :meth:`jacobian`."""
        return self.jacobian(
            lambda model: token_logps(model, self._prompt_rows, self._ids, self._mask)
        )

    @property
    def model64(self) -> torch.nn.Module:
        """A float64 copy of the policy at θ (for exact computations of other views)."""
        return self._model64

    @property
    def ref_model64(self) -> torch.nn.Module:
        """A float64 copy of the reference policy."""
        return self._ref64

    @property
    def scores(self) -> np.ndarray:
        """∇log π(o|q) of every completion, [M, p]."""
        return self.token_scores.sum(axis=1)

    # named mistakes --------------------------------------------------------------------------

    @cached_property
    def mistakes(self) -> dict[str, np.ndarray]:
        """The exact E[ĝ] of each named mistake this problem can tell from ∇J, flattened.

        Each is ∇J with one part replaced (G = the problem's group size):

        * ``length-normalised``: the reward part E[(R − E_q R)/L ∇log π] (the gradient of the
          reshaped reward (R − b)/L: a per-sequence mean of token means, with a leave-one-out
          baseline; the group mean including the sample scales it by (G − 1)/G);
        * ``std-normalised``: the reward part with GRPO's group advantage, the option table's
          rows ``mean`` and ``group-std`` applied to every group of rewards (exact over the
          other G − 1 rewards);
        * ``kl-no-gradient``: the KL part 0 (k1 in the loss: E[∇ℓ] = 0);
        * ``kl-forward``: the KL part −β E[Σₜ (1 − ρₜ) ∇ℓₜ], ρ = π_ref/π (k3 in the loss);
        * ``kl-token-local``: the KL part −β E[Σₜ (ℓₜ − ℓ_ref,ₜ) ∇ℓₜ] (k2 in the loss, or k1
          as a per-token reward without its reward-to-go).

        Mistakes equal to ∇J here (within 10⁻⁹) are left out: the problem is blind to them.
        """
        t = self.table
        centred = t.reward - t.per_row(t.mean(t.reward))
        kl_part = -self.beta * self.kl_gradient
        local = t.token_logp - t.ref_token_logp
        out = {
            "length-normalised": self.expected_score(centred / t.length) + kl_part,
            "std-normalised": self.expected_group_gradient(advantage_of("mean", "group-std"))
            + kl_part,
        }
        if self.beta:
            out["kl-no-gradient"] = self.reward_gradient
            out["kl-forward"] = self.reward_gradient - self.beta * self.expected_score(
                1.0 - np.exp(-local)
            )
            out["kl-token-local"] = self.reward_gradient - self.beta * self.expected_score(local)
        return {
            k: v for k, v in out.items() if not np.allclose(v, self.exact, rtol=1e-9, atol=1e-12)
        }

    # batches ---------------------------------------------------------------------------------

    def draw(self, n_groups: int, rng: np.random.Generator, *, group_size: int | None = None):
        """Which prompts and completions a batch of ``n_groups`` groups holds (a :class:`Draw`).

        Prompts are stratified: with n_groups = kQ + r, every prompt appears k times and r
        distinct ones once more (chosen uniformly), in random order, so each prompt's expected
        count is n_groups/Q and E_q stays uniform for any estimator that sums over groups.
        Each completion is one inverse-CDF draw over π(·|q).
        """
        G = group_size or self.group_size
        if n_groups < 1 or G < 1:
            raise ValueError(f"n_groups and group_size must be ≥ 1, got {n_groups} and {G}")
        Q = len(self.prompts)
        k, r = divmod(n_groups, Q)
        prompts = np.concatenate([np.tile(np.arange(Q), k), rng.permutation(Q)[:r]])
        prompts = rng.permutation(prompts)
        q = np.repeat(prompts, G)
        rows = np.searchsorted(self._cdf, q + rng.random(len(q)), side="right")
        return Draw(prompts=prompts, rows=np.minimum(rows, len(self._cdf) - 1), group_size=G)

    def batch(self, draw: Draw) -> SequenceBatch:
        """The contract's batch of a :class:`Draw` (old_logps: θ's log-probs in float32).

        Completions are right-padded with the pad id V (not EOS) to the longest one in the
        batch, W ≤ T columns (as TRL pads a generation batch), so a normaliser counted over
        the padded width varies from batch to batch while ``max_completion_length`` stays T.
        """
        rows = torch.from_numpy(draw.rows)
        W = int(self.table.length[draw.rows].max())
        mask = self._mask32[rows, :W]
        ids = torch.where(mask > 0, self._ids[rows, :W], self.vocab_size)  # pad V, not EOS
        prompt_ids = self._prompts_t[self._prompt_of_row[rows]]
        return SequenceBatch(
            completion_ids=ids,
            completion_mask=mask,
            prompt_ids=prompt_ids,
            rewards=self._reward32[rows],
            group_ids=torch.arange(len(rows)) // draw.group_size,
            group_size=draw.group_size,
            old_logps=self._old32[rows, :W],
            ref_logps=self._ref32[rows, :W],
            beta=self.beta,
            max_completion_length=self.max_completion_length,
            input_ids=torch.cat([prompt_ids, ids], dim=1),
            attention_mask=torch.cat([torch.ones_like(prompt_ids), mask.long()], dim=1),
            eos_token_id=self.eos_token_id,
            pad_id=self.vocab_size,
        )

    def sample(
        self, n_groups: int, rng: np.random.Generator, *, group_size: int | None = None
    ) -> SequenceBatch:
        """A batch of ``n_groups`` prompts × G completions drawn from π_θ (see :meth:`draw`)."""
        return self.batch(self.draw(n_groups, rng, group_size=group_size))

    def logps(self, batch: SequenceBatch) -> torch.Tensor:
        """The model's per-token log-probs of the batch, float32 [N, T], differentiable in θ."""
        return token_logps(
            self.model, batch.prompt_ids, batch.completion_ids, batch.completion_mask
        )

    def on_policy(self, batch: SequenceBatch) -> tuple[torch.Tensor, SequenceBatch]:
        """(logps, the batch with ``old_logps = logps.detach()``): what a loss is called with."""
        lp = self.logps(batch)
        return lp, replace(batch, old_logps=lp.detach())

    # summaries -------------------------------------------------------------------------------

    def stats(self) -> list[dict[str, Any]]:
        """Per prompt: E[R], sd(R), E[L], P(truncated), corr(R, L), KL(π_θ ‖ π_ref)."""
        t = self.table
        ER, EL = t.mean(t.reward), t.mean(t.length)
        sdR = np.sqrt(np.maximum(t.mean(t.reward**2) - ER**2, 0.0))
        sdL = np.sqrt(np.maximum(t.mean(t.length**2.0) - EL**2, 0.0))
        cov = t.mean(t.reward * t.length) - ER * EL
        with np.errstate(invalid="ignore", divide="ignore"):
            corr = np.where(sdR * sdL > 0, cov / (sdR * sdL), np.nan)
        return [
            {
                "prompt": [int(x) for x in self.prompts[q]],
                "mean_reward": float(ER[q]),
                "sd_reward": float(sdR[q]),
                "mean_length": float(EL[q]),
                "p_truncated": float(t.mean(t.truncated)[q]),
                "corr_reward_length": float(corr[q]),
                "kl": float(self.kl[q]),
            }
            for q in range(len(self.prompts))
        ]


def advantage_of(baseline: str, scale: str = "none") -> Advantage:
    """The group advantage of two rows of the option table, on groups of rewards [B, G] (numpy).

    Used for the exact expectations of named estimators (:meth:`expected_group_gradient`);
    J and ∇J themselves never call the table.
    """
    from eligibility.torch import options

    b, s = options.row("baseline", baseline).fn, options.row("scale", scale).fn

    def advantage(rewards: np.ndarray) -> np.ndarray:
        r = torch.as_tensor(np.asarray(rewards, dtype=np.float64))
        G = r.shape[-1]
        return s(b(r, G), r, G).numpy()  # type: ignore[misc]

    return advantage


__all__ = [
    "MAX_GROUP_OUTCOMES",
    "Draw",
    "Enumeration",
    "SequenceBatch",
    "SequenceProblem",
    "advantage_of",
    "completion_mask",
    "completions",
    "n_completions",
    "token_logps",
]
