r"""Group sampling with a KV cache, and the log-probs a trainer recomputes.

The policy is π_τ(· | context) = softmax(z_{:V} / τ): the first V logits of the model (the
task's vocabulary) at temperature τ. Completions are sampled token by token from π_τ until EOS
(which is kept, and counted) or T_max tokens; the log-probs recorded are log π_τ of the tokens
drawn, so they are those of the distribution actually sampled. A completion cut at T_max has
no EOS: its probability is the product over the tokens it has (stopping at T_max is part of the
environment, as a time limit is).

The draws come from a NumPy generator (inverse CDF in float64 of the float32 probabilities),
so a run's randomness is a few ``np.random.Generator`` states that a checkpoint restores
exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from eligibility.lm.llama import DirectLM, direct
from eligibility.lm.model import TinyLM
from eligibility.lm.tasks import EOS, Task


@dataclass
class Completions:
    """A batch of prompts and their sampled completions.

    Attributes:
        prompt_ids: [N, P] prompts, left-padded (pads are EOS with ``prompt_mask`` 0).
        prompt_mask: [N, P] 1 for a prompt token.
        completion_ids: [N, T] completions, right-padded with EOS.
        completion_mask: [N, T] 1 for a token of the completion (its EOS included).
        logps: [N, T] log π_τ of each completion token at sampling time (0 on padding).
        ended: [N] the completion stopped at EOS (not at T_max).
        prefix: ([U] the first row of each distinct prompt, [N] each row's distinct prompt),
            or None (then found from ``prompt_ids`` where needed).
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    logps: torch.Tensor
    ended: torch.Tensor
    prefix: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def lengths(self) -> torch.Tensor:
        """L_i, the tokens of each completion (EOS included)."""
        return self.completion_mask.sum(1)

    def completions(self) -> list[list[int]]:
        """Every completion's tokens without its EOS: row i's first Lᵢ − [ended i] tokens."""
        n = (self.lengths - self.ended.long()).tolist()
        return [row[:k] for row, k in zip(self.completion_ids.tolist(), n, strict=True)]


def left_pad(
    prompts: Sequence[Sequence[int]], pad_id: int = EOS
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts as a left-padded [N, P] id tensor and its mask."""
    width = max(len(p) for p in prompts)
    rows = [[pad_id] * (width - len(p)) + list(p) for p in prompts]
    ids = torch.tensor(rows, dtype=torch.long)
    lengths = torch.tensor([len(p) for p in prompts])
    mask = (torch.arange(width) >= width - lengths[:, None]).long()
    return ids, mask


def distinct(prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """([U] the first row of each distinct prompt, [N] the distinct prompt of each row)."""
    first: dict[tuple[int, ...], int] = {}  # each distinct prompt → its first row, in order
    for i, p in enumerate(prompts):
        first.setdefault(tuple(p), i)
    number = {key: u for u, key in enumerate(first)}
    return torch.tensor(list(first.values())), torch.tensor([number[tuple(p)] for p in prompts])


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """Position of each token among the real ones (0 at the first real token; pads at 0)."""
    return (mask.cumsum(1) - 1).clamp(min=0)


def _draw(logp: torch.Tensor, rng: np.random.Generator | None) -> torch.Tensor:
    """One token per row: the mode (``rng`` None) or an inverse-CDF draw from exp(logp)."""
    if rng is None:
        return logp.argmax(-1)
    cdf = np.cumsum(logp.detach().double().exp().cpu().numpy(), axis=1)
    u = rng.random(logp.shape[0]) * cdf[:, -1]
    tok = np.minimum((cdf < u[:, None]).sum(1), logp.shape[1] - 1)
    return torch.from_numpy(tok).to(logp.device)


def _wide(z: torch.Tensor) -> torch.Tensor:
    """Logits in float32 at least (bf16 ones widened; a float64 model's kept float64)."""
    return z.to(torch.promote_types(z.dtype, torch.float32))


def _call(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor | None, **kw: object) -> object:
    """``model`` on new tokens ``ids`` [B, t] with ``mask`` [B, S] over the cached and new ones.

    ``mask`` None: no token of the batch is padding, and the model is a ``transformers`` one,
    which then takes its positions from the cache and attends causally with no mask to build
    (the same logits; the pads' mask and positions cost a mask per layer and step).
    """
    if mask is None:
        return model(input_ids=ids, **kw)
    pos = _positions(mask)[:, mask.shape[1] - ids.shape[1] :]
    return model(input_ids=ids, attention_mask=mask, position_ids=pos, **kw)


def _needs_mask(model: nn.Module, mask: torch.Tensor) -> bool:
    """Whether ``model`` must be given the mask.

    It must when the batch has a pad, or when the model is not a ``transformers`` one (the
    built-in model and a factory's take the mask as an argument).
    """
    hf = type(model).__module__.startswith("transformers.") or isinstance(model, DirectLM)
    return not (hf and bool(mask.all()))


def _forward(model: nn.Module) -> nn.Module | DirectLM:
    """What computes ``model``'s logits: its direct forward where ``lm.llama`` has one."""
    return direct(model) or model


def _shares_prefix(forward: nn.Module | DirectLM) -> bool:
    """Whether ``forward``'s cache is a list of per-layer (K, V) tensors, batch first.

    Then a prompt repeated in the batch (G times, for a group) is computed once and its K, V
    rows are repeated: the same numbers, and the gradient sums over the copies as it would
    over G separate computations.
    """
    return isinstance(forward, DirectLM | TinyLM)


def _prefix(
    forward: nn.Module | DirectLM,
    ids: torch.Tensor,
    mask: torch.Tensor,
    masked: bool,
    groups: tuple[torch.Tensor, torch.Tensor] | None,
) -> tuple[torch.Tensor, object]:
    """Logits at the last prompt position [N, V'] and the prompts' cache.

    Each distinct prompt is computed once where the cache allows it (``groups``: see
    ``Completions.prefix``).
    """
    if not _shares_prefix(forward):
        out = _call(forward, ids, mask if masked else None, use_cache=True)
        return out.logits[:, -1], out.past_key_values
    if groups is None:
        found = distinct(torch.cat([ids, mask], dim=1).tolist())
        groups = (found[0].to(ids.device), found[1].to(ids.device))
    firsts, index = groups
    rows = mask.index_select(0, firsts) if masked else None
    out = _call(forward, ids.index_select(0, firsts), rows, use_cache=True)
    past = [(k.index_select(0, index), v.index_select(0, index)) for k, v in out.past_key_values]
    return out.logits[:, -1].index_select(0, index), past


@torch.no_grad()
def sample(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    vocab_size: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    rng: np.random.Generator | None = None,
    eos_id: int = EOS,
) -> Completions:
    """Complete each prompt once (repeat a prompt G times in ``prompts`` for a group of G).

    Args:
        model: a causal LM with the Hugging Face call convention (see ``lm.model``).
        prompts: token-id sequences.
        vocab_size: V; tokens are drawn among the first V logits.
        max_new_tokens: T_max.
        temperature: τ > 0.
        rng: the generator of the draws; None: greedy (the mode at every step).
        eos_id: the token that ends a completion (and pads).
    """
    where = next((q.device for q in model.parameters()), torch.device("cpu"))
    ids, prompt_mask = (x.to(where) for x in left_pad(prompts, eos_id))
    n, p = ids.shape
    model = _forward(model)
    masked = _needs_mask(model, prompt_mask)
    # the mask of every position, filled as tokens come: a finished row's later tokens are
    # masked out (they are EOS padding, never scored)
    mask = torch.zeros((n, p + max_new_tokens), dtype=torch.long, device=where)
    mask[:, :p] = prompt_mask
    groups = None
    if _shares_prefix(model):
        firsts, index = distinct(prompts)
        groups = (firsts.to(where), index.to(where))
    z, past = _prefix(model, ids, prompt_mask, masked, groups)
    z = z[:, :vocab_size]
    tokens = torch.full((n, max_new_tokens), eos_id, dtype=torch.long, device=where)
    logps = torch.zeros((n, max_new_tokens), device=where)
    alive = torch.ones(n, dtype=torch.bool, device=where)
    t = 0
    for t in range(max_new_tokens):
        logp = F.log_softmax(_wide(z) / temperature, dim=-1)
        tok = torch.where(alive, _draw(logp, rng), eos_id)
        tokens[:, t] = tok
        logps[:, t] = torch.where(alive, logp.gather(1, tok[:, None])[:, 0], 0.0)
        mask[:, p + t] = alive
        alive &= tok != eos_id
        if not alive.any() or t == max_new_tokens - 1:
            break
        step = mask[:, : p + t + 1] if masked else None
        out = _call(model, tok[:, None], step, past_key_values=past, use_cache=True)
        past, z = out.past_key_values, out.logits[:, -1, :vocab_size]
    return Completions(
        prompt_ids=ids,
        prompt_mask=prompt_mask,
        completion_ids=tokens[:, : t + 1],
        completion_mask=mask[:, p : p + t + 1].clone(),
        logps=logps[:, : t + 1],
        ended=~alive,
        prefix=groups,
    )


def token_logps(
    model: nn.Module, batch: Completions, *, vocab_size: int, temperature: float = 1.0
) -> torch.Tensor:
    """log π_τ of every completion token, recomputed in one forward pass (differentiable).

    ln π_τ(oₜ) = zₜ[oₜ]/τ − logsumexp(zₜ/τ) over the first V logits: one gather and one
    logsumexp, no [N, T, V] log-softmax kept for the backward pass.

    Returns:
        [N, T] log-probs, 0 where ``completion_mask`` is 0.
    """
    p, t = batch.prompt_ids.shape[1], batch.completion_ids.shape[1]
    forward = _forward(model)
    # a pad after a completion's EOS is seen by no scored position: only the prompts' pads count
    masked = _needs_mask(forward, batch.prompt_mask)
    if _shares_prefix(forward):  # each distinct prompt once, then the completions on its cache
        first, past = _prefix(forward, batch.prompt_ids, batch.prompt_mask, masked, batch.prefix)
        z = first[:, None]
        if t > 1:
            full = torch.cat([batch.prompt_mask, torch.ones_like(batch.completion_ids)], dim=1)
            rest = _call(forward, batch.completion_ids[:, :-1], full[:, :-1], past_key_values=past)
            z = torch.cat([z, rest.logits], dim=1)
    else:
        ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)
        mask = torch.cat([batch.prompt_mask, batch.completion_mask], dim=1)
        z = _call(forward, ids, mask if masked else None).logits[:, p - 1 : p + t - 1]
    z = _wide(z[..., :vocab_size]) / temperature
    chosen = z.gather(2, batch.completion_ids[:, :, None])[:, :, 0] - z.logsumexp(-1)
    return chosen * batch.completion_mask


def greedy_eval(model: nn.Module, task: Task, t_max: int, chunk: int) -> tuple[float, float]:
    """(accuracy, mean reward) of the greedy completions of the evaluation prompts.

    Evaluated ``chunk`` prompts at a time (the training batch's size, known to fit).
    """
    ev = task.evaluation
    correct, rewards = [], []
    for start in range(0, len(ev.prompts), chunk):
        index = list(range(start, min(start + chunk, len(ev.prompts))))
        batch = sample(
            model,
            [ev.prompts[i] for i in index],
            vocab_size=ev.vocab_size,
            max_new_tokens=t_max,
            eos_id=ev.eos_id,
        )
        completions = batch.completions()
        ended = batch.ended.tolist()
        r, ok = ev.rewards(index, completions, ended)
        correct.append(ev.correct(index, completions, ended, r))
        rewards.append(r[ok])
    c = np.concatenate(correct)
    acc = float(np.nanmean(c)) if np.isfinite(c).any() else 0.0
    r_all = np.concatenate(rewards)
    return acc, float(r_all.mean()) if r_all.size else float("nan")
