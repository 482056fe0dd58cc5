r"""The enumeration of a sequence problem: every completion, its tokens and masks, and batches.

Every completion of at most T tokens over a vocabulary with an EOS token is listed, (V−1)ᴸ⁻¹ of
each length L ≤ T and (V−1)ᵀ truncated ones; :class:`Enumeration` holds, per prompt, their
rewards, log-probabilities and probabilities, and :class:`SequenceBatch` is the contract's
batch of ``eligibility check``. The problem that uses them is
:class:`~eligibility.lab.sequence.problem.SequenceProblem`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

MAX_GROUP_OUTCOMES = 200_000
"""The most multisets of other rewards that `expected_group_gradient` enumerates."""

# the enumeration -----------------------------------------------------------------------------


def n_completions(vocab_size: int, max_completion_length: int) -> int:
    """M = Σ_{L=1}^{T} (V−1)^{L−1} + (V−1)^T: every completion ending in EOS, and the truncated."""
    k, T = vocab_size - 1, max_completion_length
    return sum(k ** (L - 1) for L in range(1, T + 1)) + k**T


def completions(vocab_size: int, eos_token_id: int, max_completion_length: int) -> np.ndarray:
    """Every completion as a row of token ids, [M, T], padded with EOS after the first EOS.

    Rows are ordered by length, then lexicographically: c₁…c_{L−1} EOS for L = 1 … T, then the
    truncated c₁…c_T; the c are the V − 1 tokens other than EOS.
    """
    T = max_completion_length
    content = [v for v in range(vocab_size) if v != eos_token_id]
    rows = []
    for L in range(1, T + 1):
        for body in itertools.product(content, repeat=L - 1):
            rows.append(list(body) + [eos_token_id] * (T - L + 1))
    rows.extend(list(body) for body in itertools.product(content, repeat=T))
    return np.array(rows, dtype=np.int64).reshape(-1, T)


def completion_mask(completion_ids: np.ndarray, eos_token_id: int) -> np.ndarray:
    """mₜ = 1 up to and including the first EOS (everything for a truncated completion)."""
    is_eos = completion_ids == eos_token_id
    before = np.cumsum(is_eos, axis=1) - is_eos  # EOS seen strictly before t
    return (before == 0).astype(np.float64)


def token_logps(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
) -> torch.Tensor:
    """ℓ_{i,t} = log softmax(z_{i, P−1+t})[o_{i,t}] on real tokens, 0 on padding; [N, T].

    z = ``model(prompt ⊕ completion).logits``: the logits at position P − 1 + t predict the
    completion's token t (the causal shift). Differentiable in the model's parameters; this is
    the one computation of log-probs, for the enumeration (float64) and for a batch (float32).
    """
    P = prompt_ids.shape[1]
    completion_ids = torch.where(completion_mask > 0, completion_ids, 0)  # any pad id: masked
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    logits = model(input_ids).logits[:, P - 1 : -1]
    lp = torch.log_softmax(logits, dim=-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    return torch.where(completion_mask > 0, lp, torch.zeros_like(lp))


@dataclass(frozen=True)
class Enumeration:
    """Every completion of every prompt at θ: rows of prompt 0, then prompt 1, …; all float64.

    Attributes:
        prompt: the prompt index of each row, [M].
        completion_ids: the completion's tokens (EOS-padded), [M, T].
        mask: 1.0 on real tokens (EOS included), [M, T].
        length: L, the number of real tokens, [M].
        truncated: no EOS within T tokens, [M].
        reward: R(q, o), [M].
        token_logp: ℓₜ = log π_θ(oₜ | q, o_{<t}), 0 on padding, [M, T].
        ref_token_logp: the same under π_ref, [M, T].
        start: the first row of each prompt, [Q + 1] (``start[Q] = M``).
    """

    prompt: np.ndarray
    completion_ids: np.ndarray
    mask: np.ndarray
    length: np.ndarray
    truncated: np.ndarray
    reward: np.ndarray
    token_logp: np.ndarray
    ref_token_logp: np.ndarray
    start: np.ndarray

    @property
    def logp(self) -> np.ndarray:
        """log π(o|q) = Σₜ ℓₜ, [M]."""
        return self.token_logp.sum(axis=1)

    @property
    def ref_logp(self) -> np.ndarray:
        """log π_ref(o|q), [M]."""
        return self.ref_token_logp.sum(axis=1)

    @property
    def prob(self) -> np.ndarray:
        """π(o|q), [M] (sums to 1 within each prompt)."""
        return np.exp(self.logp)

    def mean(self, x: np.ndarray) -> np.ndarray:
        """E_o[x | q] = Σ_o π(o|q) x(q, o) for each prompt, [Q]."""
        return np.add.reduceat(self.prob * np.asarray(x, dtype=np.float64), self.start[:-1])

    def per_row(self, x: np.ndarray) -> np.ndarray:
        """A per-prompt quantity [Q] repeated on each of the prompt's rows, [M]."""
        return np.asarray(x)[self.prompt]


# the batch of the contract -------------------------------------------------------------------


ALIASES: dict[str, str] = {
    # TRL (GRPOTrainer's inputs and config)
    "old_per_token_logps": "old_logps",
    "ref_per_token_logps": "ref_logps",
    "num_generations": "group_size",
    # verl (its DataProto batch keys)
    "prompts": "prompt_ids",
    "responses": "completion_ids",
    "response_mask": "completion_mask",
    "old_log_probs": "old_logps",
    "ref_log_prob": "ref_logps",
}
"""The frameworks' names for the batch's fields: ``batch["old_per_token_logps"]`` is
``batch.old_logps`` (and ``batch["prompt_mask"]``, TRL's, is ones like ``prompt_ids``: no
prompt padding)."""


@dataclass(frozen=True)
class SequenceBatch:
    """One batch of the sequence contract, [N, W]: n_groups prompts × G completions, group-major.

    It speaks both dialects: ``batch.rewards`` and ``batch["rewards"]``, with TRL's and verl's
    names as aliases (:data:`ALIASES`; ``batch["completion_mask"]``,
    ``batch["old_per_token_logps"]``, ``batch["response_mask"]``, ``batch["prompt_mask"]``).

    W ≤ T (``max_completion_length``) is the longest completion in the batch: issue 25's
    "[N, T]" arrays are [N, W] here, as a generation batch padded to its longest is.

    Row i = g·G + j is completion j of group g (a group is one prompt and its G completions).

    Attributes:
        completion_ids: the sampled tokens, int64 [N, W], padded with ``pad_id`` after the EOS
            (or after T tokens), W ≤ T the longest completion in the batch (the other [N, T]
            arrays below are [N, W] too).
        completion_mask: float32 [N, W], 1.0 on real tokens (EOS included), 0.0 on padding.
        prompt_ids: int64 [N, P] (every prompt has P tokens: no prompt padding).
        rewards: R(q, o), float32 [N].
        group_ids: int64 [N], the group's index in the batch, i // G (a prompt drawn twice in
            one batch is two groups).
        group_size: G.
        old_logps: the sampling policy's per-token log-probs, float32 [N, T] (on-policy: equal
            to the log-probs the loss gets, see :meth:`SequenceProblem.on_policy`).
        ref_logps: the reference policy's, float32 [N, T], 0.0 on padding.
        beta: β, the objective's KL coefficient (0.0 where the problem has none).
        max_completion_length: T.
        input_ids: the prompt then the completion, int64 [N, P + W] (model form), padded
            with ``pad_id``.
        attention_mask: int64 [N, P + W], 1 on the prompt and the real completion tokens.
        temperature: τ, the sampler's: the completions were drawn from softmax(logits / τ),
            the policy whose log-probs a loss scores (``old_logps`` are at τ).
        eos_token_id: the EOS token, the last real token of every completion that ends.
        pad_id: the padding token, not EOS (V, one past the policy's vocabulary: the model
            form's model has it as its last token, of probability below 10⁻²⁰); a mask
            written ``completion_ids != pad_id`` is the completion mask.
        advantages: float32 [N], your ``--advantages`` function's on the whole batch (None
            without one).
    """

    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    prompt_ids: torch.Tensor
    rewards: torch.Tensor
    group_ids: torch.Tensor
    group_size: int
    old_logps: torch.Tensor
    ref_logps: torch.Tensor
    beta: float
    max_completion_length: int
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    temperature: float = 1.0
    eos_token_id: int = 0
    pad_id: int = -1
    advantages: torch.Tensor | None = None

    def keys(self) -> list[str]:
        """The field names, then the frameworks' aliases (:data:`ALIASES`, ``prompt_mask``)."""
        return [f.name for f in fields(self)] + [*ALIASES, "prompt_mask"]

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def __getitem__(self, key: str) -> Any:
        """``batch[key]``: a field by its name or by TRL's or verl's (:data:`ALIASES`)."""
        if key == "prompt_mask":
            return torch.ones_like(self.prompt_ids)
        name = ALIASES.get(key, key)
        if name not in {f.name for f in fields(self)}:
            raise KeyError(
                f"the batch has no {key!r}; its keys are {', '.join(self.keys())} "
                "(each also an attribute: batch.rewards is batch['rewards'])"
            )
        return getattr(self, name)

    def get(self, key: str, default: Any = None) -> Any:
        """``batch[key]``, or ``default`` where the batch has no such key."""
        return self[key] if key in self else default


@dataclass(frozen=True)
class Draw:
    """Which completions a batch holds: rows of the :class:`Enumeration`.

    Attributes:
        prompts: the prompt index of each group, [n_groups].
        rows: the enumeration row of each completion, [n_groups · G], group-major.
        group_size: G.
    """

    prompts: np.ndarray
    rows: np.ndarray
    group_size: int


# the problem ---------------------------------------------------------------------------------


def _multisets(p: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every multiset of n draws from values 0 … k−1 with probabilities p, and its probability.

    P(counts c) = n! / Πⱼ cⱼ! · Πⱼ pⱼ^cⱼ (multinomial). Returns the multisets as sorted rows
    [S, n] of value indices, and their probabilities [S].
    """
    k = len(p)
    count = math.comb(k + n - 1, n)
    if count > MAX_GROUP_OUTCOMES:
        raise ValueError(
            f"{k} distinct rewards and {n} other completions make {count} outcomes to "
            f"enumerate (more than {MAX_GROUP_OUTCOMES}); use a smaller group_size, or "
            "rewards with fewer distinct values (a KL-shaped reward has one per completion)"
        )
    rows = list(itertools.combinations_with_replacement(range(k), n))
    out = np.array(rows, dtype=np.int64).reshape(len(rows), n)
    counts = np.stack([(out == j).sum(axis=1) for j in range(k)], axis=1)
    log_coef = math.lgamma(n + 1) - np.sum([[math.lgamma(c + 1) for c in r] for r in counts], 1)
    with np.errstate(divide="ignore"):
        log_p = np.where(counts > 0, counts * np.log(np.where(p > 0, p, 1.0)), 0.0)
    log_p = np.where((counts > 0) & (p[None, :] <= 0), -np.inf, log_p)
    return out, np.exp(log_coef + log_p.sum(axis=1))


class _Bound(torch.nn.Module):
    """A model called with other parameters (``torch.func.functional_call``), same interface."""

    def __init__(self, model: torch.nn.Module, params: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self._inner, self._params = [model], params

    def forward(
        self, input_ids: torch.Tensor, attention_mask: Any = None, position_ids: Any = None
    ) -> Any:
        given = {"attention_mask": attention_mask, "position_ids": position_ids}
        kwargs = {k: v for k, v in given.items() if v is not None}  # a model may take neither
        return torch.func.functional_call(self._inner[0], self._params, (input_ids,), kwargs)
