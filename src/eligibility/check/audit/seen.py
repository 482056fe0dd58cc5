r"""What the credit audit reads from one batch: each token's weight, its kind, and the facts.

A batch is laid out as the model sees it: row i's tokens x₀ … x_{L−1} (the prompt, then every
token after it), and position t holds the weight wᵢₜ the loss put on ℓᵢₜ = ln π(xₜ₊₁ | x_{≤t}),
the score of the token at t + 1. Each position is of one :data:`KINDS`: the prompt's tokens,
the model's, the world's (a header, an observation: ``world_at`` counts from the first token of
each world answer) and the padding. A family builds a :class:`Seen` from the weights a
:class:`~eligibility.check.audit.tap.Tap` read (:func:`from_logits`, :func:`from_logps`) and
the batch's own fields; the audit (:mod:`eligibility.check.audit.relations`) reads only this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from eligibility.check.audit.tap import entry_read

PROMPT, MODEL, WORLD, PADDING = 0, 1, 2, 3
KINDS = {PROMPT: "prompt", MODEL: "model", WORLD: "world", PADDING: "padding"}
"""Each position's kind (the kind of the token it scores)."""


@dataclass
class Seen:
    """One batch as the audit reads it (numpy; N rows, L − 1 positions).

    Attributes:
        w: wᵢₜ, the loss's weight on ℓᵢₜ (summed over its calls, ranks and micro-batches).
        entry: the token whose log-prob explains the loss's gradient at t (xₜ₊₁ where the
            loss read the sampled token; another id where it read another entry; −1 where
            no one entry explains it), or the sampled token where w is read directly.
        kind: the kind of xₜ₊₁ (:data:`KINDS`).
        world_at: xₜ₊₁'s place in its world answer (0 the first token), −1 elsewhere.
        turn: the model's turn xₜ₊₁ belongs to (0, 1, …), −1 elsewhere.
        eos: xₜ₊₁ is the model's EOS token.
        ell: ℓᵢₜ at the sampler's temperature (0 where not the model's).
        sampler: the sampler's ln μ(xₜ₊₁) where it differs from π (off-policy), else ``ell``.
        old: ln π_old(xₜ₊₁), the policy the batch was generated for (off-policy), else ``ell``.
        rewards: per-turn rewards, [N, K] (a single completion: [N, 1]).
        group_size: G.
        truncated: row i's last reply was cut at T (no EOS).
        part: the rank share and micro-batch each row was in (0 …), [N].
        beta: the objective's KL weight (the audit's relations hold where it is 0).
        unmatched: the loss scored rows other than the batch's (not matched to its rows).
        ids: the rows' tokens [N, L] (None in the ``logps`` form: the completion grid).
        uncovered: the share of the loss's gradient that does not flow through the tensors
            read (:attr:`~eligibility.check.audit.tap.Tap.uncovered`; the most of the calls).
        sampler_top: ln μ of the sampler's most probable token at each position (a fast
            sampler's top-1 entry), where the batch carries its top-k (else None).
        ref: ln π_ref(xₜ₊₁) of the KL's reference where the objective holds one (β > 0; else
            None): the KL's part of each weight is then read apart
            (:mod:`~eligibility.check.audit.kl`).
        detached: the positions whose ℓ (or logits) the loss read without its gradient
            (:attr:`~eligibility.check.audit.tap.Tap.detached`), or None where it read none.
        ratio_read: every call's value carries θ's log-probs against the batch's ``old``
            (:attr:`~eligibility.check.audit.tap.Tap.ratio_read`): the loss computes the
            ratio π_θ/π_old from θ_old's log-probs.
    """

    w: np.ndarray
    entry: np.ndarray
    kind: np.ndarray
    world_at: np.ndarray
    turn: np.ndarray
    eos: np.ndarray
    ell: np.ndarray
    sampler: np.ndarray
    rewards: np.ndarray
    group_size: int
    truncated: np.ndarray
    part: np.ndarray
    beta: float = 0.0
    unmatched: bool = False
    ids: np.ndarray | None = None
    old: np.ndarray | None = None
    uncovered: float = 0.0
    sampler_top: np.ndarray | None = None
    ref: np.ndarray | None = None
    detached: np.ndarray | None = None
    ratio_read: bool = False

    @property
    def off_policy(self) -> bool:
        """θ is not the policy the batch was drawn for, or the sampler is not π_old.

        Read on the model's tokens that carry weight: where a token has none, the loss need
        not have scored its own entry (TRL's fused head scores a position whose label its mask
        drops, −100, as token 0), so ℓ there is no log-prob of θ's.
        """
        on = (self.kind == MODEL) & (self.w != 0)
        return self.old is not None and bool(
            np.any(np.abs(self.ell - self.old)[on] > 1e-6)
            or np.any(np.abs(self.old - self.sampler)[on] > 1e-6)
        )


def layout(
    prompt_len: int, completion_mask: np.ndarray, completion_turn: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kind, world_at, turn) of every position of rows ``[prompt | completion]``, [N, L − 1].

    ``completion_mask`` is 1 on the model's tokens; ``completion_turn`` the turn of every
    token after the prompt (−1 on padding; None: a single reply, padding where the mask is 0).
    A world token is one after the prompt that is not the model's and not padding.
    """
    m = np.asarray(completion_mask) > 0
    n, k = m.shape
    turn_after = np.where(m, 0, -1) if completion_turn is None else np.asarray(completion_turn)
    kind_after = np.where(m, MODEL, np.where(turn_after >= 0, WORLD, PADDING))
    world_at = np.full((n, k), -1)
    for i in range(n):  # a plain loop: episodes have few world answers
        run = 0
        for j in range(k):
            run = run + 1 if kind_after[i, j] == WORLD else 0
            world_at[i, j] = run - 1 if kind_after[i, j] == WORLD else -1
    kind = np.concatenate([np.full((n, prompt_len - 1), PROMPT), kind_after], 1)
    pad = np.full((n, prompt_len - 1), -1)
    turns = np.concatenate([pad, np.where(m, turn_after, -1)], 1)
    return kind, np.concatenate([pad, world_at], 1), turns


def from_logits(
    tap: Any, input_ids: Any, tau: float = 1.0, real: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """(w, entry, ℓ, unmatched) on the positions of ``input_ids`` [N, L] from a model-form call.

    The gradients of every captured forward pass on these rows (the same ids in any order of
    rows, or a share of the rows, or a prefix of their columns; logits for the last columns
    only where ``logits_to_keep`` cut them) are summed position by position before they are read
    (:func:`entry_read`): two passes over the same tokens are one weight. A fused head's
    ``log_probs`` give their weights as they are (the entry is the label's). ``real`` [N, L]
    marks the rows' own tokens (the rest padding, which a framework may pad otherwise).
    """
    ids = np.asarray(input_ids.detach().cpu())
    own = np.ones(ids.shape, bool) if real is None else np.asarray(real.cpu()) > 0
    n, width = ids.shape
    g_sum: np.ndarray | None = None
    z_at: np.ndarray | None = None
    direct, direct_ell = np.zeros((n, width)), np.zeros((n, width))
    unmatched = False
    grads = tap.grads if len(tap.grads) == len(tap.captured) else [None] * len(tap.captured)
    matched = _matched(tap.captured, ids, own)
    for (seen_ids, z, kind), g, rows in zip(tap.captured, grads, matched, strict=True):
        if g is None:
            continue
        if rows is None:
            unmatched = unmatched or bool(g.abs().max() > 0)
            continue
        cols = np.asarray(seen_ids).shape[1]
        zz = z.detach().double().cpu().numpy()
        gg = g.detach().double().cpu().numpy()
        if kind == "log_probs":  # position t scores ids[t + 1]
            direct[rows, : zz.shape[1]] += gg
            direct_ell[rows, : zz.shape[1]] = zz
            continue
        if g_sum is None:
            g_sum, z_at = np.zeros((n, width, zz.shape[-1])), np.zeros((n, width, zz.shape[-1]))
        start = cols - zz.shape[1]
        g_sum[rows, start:cols] += gg
        z_at[rows, start:cols] = zz  # type: ignore[index]
    next_ids = np.concatenate([ids[:, 1:], np.full((n, 1), -1)], 1)
    if g_sum is None:
        w, entry, ell = direct, np.where(direct != 0, next_ids, next_ids), direct_ell
    else:
        w, entry, _ = entry_read(g_sum, z_at, next_ids, tau)  # type: ignore[arg-type]
        z = z_at / tau  # type: ignore[operator]
        lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
        safe = np.clip(next_ids, 0, z.shape[-1] - 1)
        ell = np.take_along_axis(z, safe[..., None], -1)[..., 0] - lse
        w = w + direct
    # the last position scores no token of the batch: a weight there is a shifted read, said
    # by the entries it reads at the others (entries(): the token at the position itself)
    return w[:, :-1], entry[:, :-1], ell[:, :-1], unmatched


def detached_on(tap: Any, input_ids: Any, real: Any = None) -> np.ndarray | None:
    """The positions of ``input_ids`` [N, L] whose logits a model-form call read detached.

    Laid out as :func:`from_logits` lays out the weights (each pass's rows matched to the
    batch's); None where the call read nothing without its gradient.
    """
    if not any(d is not None for d in tap.detached):
        return None
    ids = np.asarray(input_ids.detach().cpu())
    own = np.ones(ids.shape, bool) if real is None else np.asarray(real.cpu()) > 0
    out = np.zeros(ids.shape, bool)
    matched = _matched(tap.captured, ids, own)
    for (seen_ids, _, kind), d, rows in zip(tap.captured, tap.detached, matched, strict=True):
        if rows is not None and d is not None:  # a fused head's log_probs: t scores ids[t + 1]
            start = 0 if kind == "log_probs" else np.asarray(seen_ids).shape[1] - d.shape[1]
            out[rows, start : start + d.shape[1]] |= d
    return out[:, :-1]


def _matched(captured: list[Any], ids: np.ndarray, own: np.ndarray) -> list[np.ndarray | None]:
    """The rows of ``ids`` each captured pass scored (:func:`_rows_of`), the passes in order."""
    taken: set[int] = set()
    return [_rows_of(np.asarray(seen_ids.cpu()), ids, own, taken) for seen_ids, _, _ in captured]


def _rows_of(
    seen: np.ndarray, ids: np.ndarray, own: np.ndarray, taken: set[int] | None = None
) -> np.ndarray | None:
    """The row of ``ids`` each row of ``seen`` is, or None where not every one is found.

    A framework may reorder the batch's rows (TRL shuffles a generation batch) and pad them
    with its own id: each seen row is matched to an unused row whose own tokens (``own``) it
    holds in the same columns. A pass over fewer rows than the batch's is one micro-batch of
    it (TRL's gradient accumulation splits the shuffled batch, each share padded to its own
    width): its rows are matched among those no earlier share took (``taken``, updated), so
    two equal replies in two shares are two rows.
    """
    if seen.shape[0] > ids.shape[0] or seen.shape[1] > ids.shape[1]:
        return None
    width = seen.shape[1]
    prefix, mine = ids[:, :width], own[:, :width]
    share = seen.shape[0] < ids.shape[0]
    if not share and np.array_equal(seen, prefix):
        return np.arange(len(ids))
    free = [i for i in range(len(ids)) if not (share and taken is not None and i in taken)]
    out = []
    for row in seen:
        hit = next((i for i in free if np.array_equal(prefix[i][mine[i]], row[mine[i]])), None)
        if hit is None:
            return None
        free.remove(hit)
        out.append(hit)
    if share and taken is not None:
        taken.update(out)
    return np.asarray(out)


def from_logps(tap: Any, mask: Any) -> tuple[np.ndarray, np.ndarray]:
    """(w, ℓ) on the completion grid of a ``logps``-form call: ∂L/∂ℓ where it has a score.

    A weight where ℓ is not the model's (the padding: ℓ = 0 there, no score) moves nothing
    and is left out.
    """
    g = tap.grads[0] if tap.grads else None  # none: the value did not depend on θ
    m = np.asarray(mask.detach().cpu()) > 0
    lp = np.asarray(tap.logps.detach().double().cpu())
    w = np.zeros(m.shape) if g is None else np.asarray(g.detach().double().cpu())
    return np.where(m, w, 0.0), np.where(m, lp, 0.0)


__all__ = [
    "KINDS",
    "MODEL",
    "PADDING",
    "PROMPT",
    "WORLD",
    "Seen",
    "detached_on",
    "from_logits",
    "from_logps",
]
