r"""The sequence family of ``eligibility check``: a GRPO/RLOO-style loss on an exact causal LM.

The problems are the lab's (:mod:`eligibility.lab.sequence`): an autoregressive categorical
policy whose every completion is enumerated, so that J(θ), ∇J(θ) and the exact expectation of
several named mistakes are finite sums. The contract (docs/check.md):

* ``logps`` form (the default): ``fn(logps, batch) -> loss``, ``logps`` float32 [N, W] the
  per-token log π_θ of the sampled completion tokens (0.0 on padding), differentiable in θ;
* ``model`` form: ``fn(model, batch) -> loss``: the user computes the log-probs from
  ``model(batch.input_ids, attention_mask=batch.attention_mask).logits``.

Each call's ĝ = −∇θ loss is autograd through the problem's model (in the worker process).

**Named mistakes, from common random numbers.** Every estimator the frameworks write is a
view of the log-probs (``VIEWS``: the right shift, or none, or the prompt or the padding left
in) and one row of each kind of the option table, :mod:`eligibility.torch.options` (baseline,
scale, aggregation, KL placement): each row names the mistake it is, or None, and its function
is the one the loss uses. On the very batches the user's function sees, the check computes
every combination that holds at least one mistake (a *variant*), as

    v̂ = Σᵢ Σₜ wᵢₜ ∇ℓ̃ᵢₜ,   wᵢₜ = aggᵢₜ · (Aᵢ − β cᵢₜ),

cᵢₜ the reward-to-go of the KL, or the derivative k′ of a KL term in the loss (autograd of
the row's k), with ∇ℓ̃ the per-token scores of the view, computed once for every completion
of the enumeration (float64 autograd); the user's mean is then held against each variant's
mean on the same batches, in the user's standard errors. A match names the variant's
mistakes. The lab's exact expectations of ``length-normalised``, ``std-normalised`` and the
three KL mistakes are held against too (:attr:`SequenceProblem.mistakes`), computed there by
enumeration, independently of the table.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from eligibility.check import user
from eligibility.check.audit import Recorder
from eligibility.check.family import Draw, Family, Trial
from eligibility.check.mistakes import meanings, named
from eligibility.check.sequence_calls import Calls, batch_note, batch_of, with_advantages
from eligibility.check.sequence_settings import rebuilt, tempered, unfit, with_beta
from eligibility.check.sequence_views import SAMPLER_VIEWS, VIEWS, View, views

if TYPE_CHECKING:
    from eligibility.lab.sequence.problem import SequenceProblem

PROBLEM_NAMES = ("length", "difficulty", "kl", "clip")
"""The sequence problems of ``--problem`` (the lab's built-ins)."""

PILOT = 400
"""Batches of the reference estimator that give σ, the spread N is sized from."""

MIN_SAMPLES = 800
"""The least N by default: binary rewards and prompts solved 10 % or 90 % of the time make
some components' estimates skewed, and at N = 200 the z-test flagged the unbiased RLOO on
``difficulty`` in 15 % of repetitions at α = 0.1 (5.5 % at N = 800)."""

OWN_MODEL = ("model", "step")
"""The forms whose function gets the model itself (it computes the log-probs)."""

CHUNK = 256
"""Batches per chunk when the variants are computed (bounds the memory: chunk × V × N × K)."""


# -- the choices: the rows of eligibility.torch.options, and the views of the log-probs ----------


@dataclass(frozen=True)
class Batches:
    """What the weights of a chunk of c batches are computed from (torch, float64).

    Attributes:
        rewards: R, [c, N].
        logp: the view's per-token log-probs ℓ̃, [c, N, K].
        seq_kl: Σₜ (ℓₜ − ℓ_ref,ₜ) over the real completion tokens (right shift), [c, N].
        ref: ℓ_ref on the view's completion columns (0 elsewhere), [c, N, K].
        on: the view's loss mask (which tokens the loss sums), [c, N, K].
        completion: the real completion tokens among the view's columns, [c, N, K].
        group_size: G.
        beta: β.
        max_completion_length: T.
        width: each batch's padded width W, [c, 1, 1].
        keep: 0 on a truncated completion (no EOS within T), 1 otherwise, [c, N, 1].
        eos: 1 on each completion's EOS token, [c, N, K].
    """

    rewards: Any
    logp: Any
    seq_kl: Any
    ref: Any
    on: Any
    completion: Any
    group_size: int
    beta: float
    max_completion_length: int
    width: Any
    keep: Any = None
    eos: Any = None


@functools.cache
def _table(kind: str) -> dict[str, Any]:
    """The option table's rows of one kind (imported with torch on first use)."""
    from eligibility.torch import options

    return options.rows(kind)


MASKS: dict[str, tuple[str, ...]] = {
    "completion": (),
    "truncated-masked": (named("truncated-masked"),),
    "truncated-in-normaliser": (named("truncated-masked"), named("masked-tokens-in-normaliser")),
    "eos-masked": (named("eos-masked"),),
}
"""The tokens the loss keeps: every completion's own (right); the truncated completions (no
EOS within T) dropped from the loss, numerator and normaliser alike (TRL's
``mask_truncated_completions``: a completion cut at T gets no gradient); or dropped from the
numerator while a token-mean normaliser still counts their tokens (TRL ≤ 1.8 with
``loss_type`` dapo or bnpo: a denominator that counts tokens the numerator dropped); or every
completion's EOS token dropped from the loss, numerator and normaliser (a mask written
``ids != eos_token_id``, or ``ids != pad_token_id`` where the pad is EOS)."""

MASKED_KLS = ("reward-to-go", "sequence-reward", "none", "k1")
"""The KL placements the masks are tried with (the unbiased two, none, and k1 in the loss: a
mask planted beside a KL term that has no expected gradient)."""

KL_APART: dict[str | None, str | None] = {
    "sequence-sum": None,
    "sequence-mean": named("kl-normalised"),
    "token-mean": named("kl-normalised"),
}
"""How a KL term added to the loss on its own is aggregated (the row of the option table), and
the mistake that is: summed over each completion's tokens and averaged over the completions
(``beta * (k * mask).sum(1).mean()``: the KL's own gradient), averaged over each completion's
tokens (``((k * mask).sum(1) / mask.sum(1)).mean()``), or over the batch's tokens
(``(k * mask).sum() / mask.sum()``): each sequence's KL weighed by 1/L or by N/(the batch's
tokens), a KL weight that depends on the sample."""

NORMALISED_BY_TOKENS = ("token-mean", "micro-batch-token-mean")
"""The aggregations whose normaliser counts tokens across the batch (where a masked numerator
and an unmasked denominator differ)."""


# -- the estimates of every variant on the same batches ------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One estimator: a view of the log-probs and one row of each kind of the option table."""

    view: str
    baseline: str
    scale: str
    aggregation: str
    kl: str
    mask: str = "completion"
    beta: float | None = None
    """The KL weight the loss uses (None: the objective's β); another is ``kl-weight``."""
    kl_aggregation: str | None = None
    """A KL term in the loss aggregated apart from the policy term, by this row of
    :data:`KL_APART` over the completion's tokens (None: one aggregation of both,
    aggᵢₜ · (Aᵢ − β cᵢₜ), as TRL and verl write the per-token loss)."""

    @functools.cached_property
    def rows(self) -> list[Any]:
        """Its rows of the option table."""
        return [
            _table(kind)[getattr(self, kind)] for kind in ("baseline", "scale", "aggregation", "kl")
        ]

    @functools.cached_property
    def mistakes(self) -> tuple[str, ...]:
        """The mistakes it holds, in the tables' order, without repeats.

        Where it holds none, the constants its rows scale ∇J's parts by (a self-including
        group mean, a constant normaliser): a step size where they scale every part alike
        (then the check names the scale), a bias where they do not (a group mean beside a KL
        term that is not in the reward).
        """
        named = [VIEWS[self.view], *MASKS[self.mask], *(o.mistake for o in self.rows)]
        named.append(KL_APART.get(self.kl_aggregation))
        if self.beta is not None:
            named.insert(0, "kl-weight")
        if not any(named):
            named = [o.scale for o in self.rows]
        return tuple(dict.fromkeys(n for n in named if n))

    @property
    def name(self) -> str:
        """The diagnosis it gives: its mistakes, joined."""
        return ", ".join(self.mistakes)


REFERENCE = Variant("logps", "rloo", "none", "sequence-sum", "reward-to-go")
"""The defaults of the option table (RLOO, summed over each sequence, the KL as a reward-to-go):
unbiased; the pilot that sizes N and the estimator of ``variance_ratio``."""

SHAPED = Variant("logps", "rloo", "none", "sequence-sum", "sequence-reward")
"""RLOO with the KL in the reward (TRL's RLOO): the other unbiased estimator a constant may
rescale (where β > 0), so that a rescaled one reads as ``scaled``."""


def variants_of(
    problem: SequenceProblem, form: str, tempered: bool = False, loss_beta: float | None = None
) -> list[Variant]:
    """Every combination holding a mistake that ``problem`` can show, for ``form``.

    The KL placements only where β > 0; the views other than ``logps`` only in the model
    form (``temperature-mismatch`` only where the sampler is ``tempered``, τ ≠ 1); the
    micro-batch token mean only where N is even. With ``loss_beta`` (a KL weight other than
    the objective's β), every combination of the ``logps`` view again at that weight, each
    holding ``kl-weight`` beside its own mistakes.
    """
    own = tuple(v for v in VIEWS if v not in SAMPLER_VIEWS)
    view_names = (own + (SAMPLER_VIEWS if tempered else ())) if form in OWN_MODEL else ("logps",)
    kls = tuple(_table("kl")) if problem.beta else ("reward-to-go",)
    even = not problem_rows(problem) % 2
    aggs = [a for a in _table("aggregation") if even or a != "micro-batch-token-mean"]
    out = []
    for choice in itertools.product(view_names, _table("baseline"), _table("scale"), aggs, kls):
        v = Variant(*choice)
        if v.mistakes:
            out.append(v)
    if problem.table.truncated.any():
        masked_kls = [k for k in kls if k in MASKED_KLS]
        for choice in itertools.product(_table("baseline"), _table("scale"), aggs, masked_kls):
            out.append(Variant("logps", *choice, mask="truncated-masked"))
            if choice[2] in NORMALISED_BY_TOKENS:
                out.append(Variant("logps", *choice, mask="truncated-in-normaliser"))
    masked_kls = [k for k in kls if k in MASKED_KLS]
    for choice in itertools.product(_table("baseline"), _table("scale"), aggs, masked_kls):
        out.append(Variant("logps", *choice, mask="eos-masked"))
    if loss_beta is not None and float(loss_beta) != problem.beta:
        for choice in itertools.product(_table("baseline"), _table("scale"), aggs, _table("kl")):
            out.append(Variant("logps", *choice, beta=float(loss_beta)))
    return out


def apart(found: list[Variant]) -> list[Variant]:
    """Each variant of the ``logps`` view with a KL term in the loss, its KL aggregated apart.

    Once by each row of :data:`KL_APART` (a loss that adds ``beta * kl`` to its policy term);
    a combination that is a variant already (the same row, no mask) is left out.
    """
    return [
        replace(v, kl_aggregation=a)
        for v in found
        if v.view == "logps" and v.rows[3].placement == "loss"
        for a in KL_APART
        if not (a == v.aggregation and v.mask == "completion")
    ]


SCREENED = (40, 12)
"""(M, K): every variant of :func:`apart` is computed on the first M batches, and the K nearest
the user's estimates there (batch by batch) on all N, where no variant of the family is the
user's estimator."""


def _closer(
    problem: SequenceProblem, tables: dict[str, View], rows: np.ndarray, found: list[Variant]
) -> Callable[[np.ndarray], list[tuple[str, np.ndarray]]] | None:
    """The draw's ``closer``: the variants with the KL aggregated apart nearest the user's G."""
    wide = apart(found)
    if not wide:
        return None

    def closer(G: np.ndarray) -> list[tuple[str, np.ndarray]]:
        from eligibility.check.verdict import relative_residual

        m, k = SCREENED
        first = estimates(problem, tables, rows[:m], wide)
        near = np.argsort([relative_residual(G[:m], V) for V in first])[:k]
        every = estimates(problem, tables, rows, [wide[i] for i in near])
        return [(wide[i].name, every[j]) for j, i in enumerate(near)]

    return closer


def problem_rows(problem: SequenceProblem, groups: int | None = None) -> int:
    """N, the completions of one batch: groups × G (default: each prompt once)."""
    return (groups or len(problem.prompts)) * problem.group_size


def estimates(
    problem: SequenceProblem, tables: dict[str, View], rows: np.ndarray, variants: list[Variant]
) -> np.ndarray:
    """Each variant's ĝ on each batch, [len(variants), n, p]: Σᵢₜ wᵢₜ ∇ℓ̃ᵢₜ, in chunks.

    Args:
        problem: the sequence problem.
        tables: the views the variants use (:func:`views`).
        rows: the enumeration rows of each batch, [n, N] (group-major).
        variants: the estimators.
    """
    import torch

    t = problem.table
    n = rows.shape[0]
    p = problem.n_params
    out = np.empty((len(variants), n, p))
    reward = torch.as_tensor(t.reward)
    length = torch.as_tensor(t.length)
    keep = torch.as_tensor(~t.truncated).to(torch.float64)[:, None]
    right = tables["logps"]
    seq_kl = _table("kl")["sequence-reward"].fn(right.logp, right.ref, right.completion > 0)
    by_view: dict[str, list[int]] = {}
    for j, v in enumerate(variants):
        by_view.setdefault(v.view, []).append(j)
    for start in range(0, n, CHUNK):
        r = torch.as_tensor(rows[start : start + CHUNK])
        width = length[r].max(dim=1).values.to(torch.float64)  # W of each batch
        for view_name, members in by_view.items():
            view = tables[view_name]
            inside = (view.column[None, :] < width[:, None]).to(torch.float64)  # [c, K]
            b = Batches(
                rewards=reward[r],
                logp=view.logp[r],
                seq_kl=seq_kl[r],
                ref=view.ref[r],
                on=view.on[r] * inside[:, None, :],
                completion=view.completion[r],
                group_size=problem.group_size,
                beta=problem.beta,
                max_completion_length=problem.max_completion_length,
                width=width[:, None, None],
                keep=keep[r],
                eos=view.eos[r],
            )
            w = _weights(b, [variants[j] for j in members])  # [c, v, N, K]
            scores = view.scores[r].reshape(len(r), -1, p)  # [c, N·K, p]
            g = torch.bmm(w.reshape(len(r), len(members), -1), scores)  # [c, v, p]
            out[members, start : start + len(r)] = g.permute(1, 0, 2).numpy()
    return out


def _kl_terms(b: Batches, kl: Any) -> Any:
    """c with wᵢₜ = aggᵢₜ (Aᵢ − β cᵢₜ): the reward-to-go K, or k′ of a KL in the loss, or 0."""
    import torch

    if kl.placement == "advantage":
        return kl.fn(b.logp, b.ref, b.completion > 0)
    if kl.placement != "loss":
        return torch.zeros_like(b.logp)
    ell = b.logp.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        (k_prime,) = torch.autograd.grad(kl.fn(ell, b.ref).sum(), ell)  # k is per token
    return k_prime * b.completion


def _weights(b: Batches, variants: list[Variant]) -> Any:
    """wᵢₜ = aggᵢₜ · (Aᵢ − β cᵢₜ) of each variant, [c, v, N, K]: ĝ = Σᵢₜ wᵢₜ ∇ℓ̃ᵢₜ.

    With the KL term aggregated apart (:attr:`Variant.kl_aggregation`), wᵢₜ = aggᵢₜ Aᵢ −
    β agg′ᵢₜ cᵢₜ, agg′ that row's weights over every completion token.

    A = scale(baseline(R̃)), R̃ = R − β D with the KL in the reward, R otherwise; every part
    is the option table's function, computed once per chunk and shared by the variants.
    """
    import torch

    adv: dict[tuple[str, str, bool, float], Any] = {}
    agg: dict[tuple[str, str], Any] = {}
    kl_c: dict[str, Any] = {}
    out = []

    def aggregated(name: str, mask: str) -> Any:
        if (name, mask) not in agg:
            on = {"truncated-masked": b.on * b.keep, "eos-masked": b.on * (1 - b.eos)}.get(
                mask, b.on
            )  # numerator and normaliser
            weights = _table("aggregation")[name].fn(on, b.width, b.max_completion_length, None)
            dropped = mask == "truncated-in-normaliser"  # numerator only: the normaliser counts
            agg[name, mask] = weights * b.keep if dropped else weights
        return agg[name, mask]

    for v in variants:
        base, scale, _, kl = v.rows
        shaped = kl.placement == "reward"
        beta = b.beta if v.beta is None else v.beta
        key = (v.baseline, v.scale, shaped, beta)
        if key not in adv:
            r = b.rewards - beta * b.seq_kl if shaped else b.rewards
            adv[key] = scale.fn(base.fn(r, b.group_size), r, b.group_size)
        if v.kl not in kl_c:
            kl_c[v.kl] = _kl_terms(b, kl)
        policy = aggregated(v.aggregation, v.mask)
        if v.kl_aggregation is None:
            out.append(policy * (adv[key][..., None] - beta * kl_c[v.kl]))
        else:  # the KL term over every completion token, by a row of its own
            apart = aggregated(v.kl_aggregation, "completion")
            out.append(policy * adv[key][..., None] - beta * apart * kl_c[v.kl])
    return torch.stack(out, dim=1)


# -- the trial -----------------------------------------------------------------------------------


def _draw_rows(
    problem: SequenceProblem, n: int, groups: int, rng: np.random.Generator
) -> np.ndarray:
    return np.stack([problem.draw(groups, rng).rows for _ in range(n)])


def _checked(
    problem: SequenceProblem, config: Any
) -> tuple[SequenceProblem, SequenceProblem, list[Variant], dict[str, View]]:
    """(the problem at the declared β, the same sampled at τ, its variants, their views).

    The views' scores are ∇_θ of θ itself: at τ ≠ 1 the views of the tempered problem score
    ∇_{θ/τ}, ÷ τ here; the model form's ``temperature-mismatch`` view is the untempered
    problem's own log-probs and scores.

    Raises:
        ValueError: M micro-batches that do not split the problem's groups.
    """
    import dataclasses

    why = unfit(problem, config)
    if why:
        raise ValueError(f"{why}; choose a divisor (or --problem without it)")
    form, tau = config.form, config.temperature
    problem = with_beta(problem, config.beta)
    checked = problem if tau == 1 else tempered(problem, tau)
    found = variants_of(checked, form, tempered=tau != 1, loss_beta=config.loss_beta)
    names = dict.fromkeys(["logps", *(v.view for v in found if v.view not in SAMPLER_VIEWS)])
    tables = views(checked, tuple(names))
    if tau != 1:
        tables = {k: dataclasses.replace(v, scores=v.scores / tau) for k, v in tables.items()}
        if form in OWN_MODEL:
            tables["temperature-mismatch"] = views(problem, ("logps",))["logps"]
    return problem, checked, found, tables


def trial(problem: SequenceProblem, fn: Callable[..., Any], config: Any, seed: int) -> Trial:
    """The sequence problem as the engine sees it.

    A pilot of the reference estimator (:data:`REFERENCE`) gives σ; the lab's exact
    expectations of the mistakes the problem is built to show size N (so that each is told
    from a rescaling, :func:`~eligibility.check.run.choose_samples`), and all of them
    diagnose; then N batches, the user's function called on each of its M micro-batches in
    the worker (the gradients summed), and every variant on the same batches. With the
    sampler's τ ≠ 1 the batches are drawn at τ (:func:`tempered`) and ∇J is ∇_θ J_τ.
    """
    from eligibility.check.step import StepRecord
    from eligibility.lab.sequence.handed import policy_model

    rng = np.random.default_rng(seed)
    groups, G = len(problem.prompts), problem.group_size
    M, tau = config.micro_batches, config.temperature
    problem, checked, found, tables = _checked(problem, config)
    # a function that cannot be loaded is refused before the pilot
    advantages = None if config.advantages is None else user.load_function(config.advantages)
    pilot = estimates(checked, tables, _draw_rows(checked, PILOT, groups, rng), [REFERENCE])[0]
    sign = 1.0 if config.objective else -1.0
    # the model form scores θ's own model; the logps form gets the tempered model's log-probs
    own_model = config.form in OWN_MODEL
    model = problem.model if own_model else checked.model
    R = config.world_size

    def draw(n: int) -> Draw:
        rows = _draw_rows(checked, n, groups, rng)
        refs = [REFERENCE, SHAPED] if checked.beta else [REFERENCE]
        every = estimates(checked, tables, rows, [*refs, *found])
        params = list(model.parameters())
        theta = [p.detach().clone() for p in params]
        hf = policy_model(model, problem.eos_token_id) if own_model else None
        record = StepRecord() if config.form == "step" else None  # what the step did
        scales = named_scales(G, problem.max_completion_length, problem_rows(problem), M, R)
        recorder = Recorder(scales=scales, sign=sign)
        calls = Calls(fn, config, checked, rows, advantages, hf, params, theta, record, recorder)
        return Draw(
            step=calls.step,
            setup=functools.partial(calls.setup, seed),
            summary=calls.summary,
            references=dict(
                zip(["variance_ratio", "kl_in_the_reward"], every[: len(refs)], strict=False)
            ),
            variants=[(v.name, every[j + len(refs)]) for j, v in enumerate(found)],
            drawn=rows,
            closer=_closer(checked, tables, rows, found),
        )

    mistakes = {k: v / tau for k, v in checked.mistakes.items()}
    return Trial(
        name=problem.name,
        exact=checked.exact / tau,
        sigma=pilot.std(axis=0, ddof=1),
        draw=draw,
        expectations=mistakes,
        sizing={k: v for k, v in mistakes.items() if k in problem.shows},
        scales=named_scales(G, problem.max_completion_length, problem_rows(problem), M, R),
        blind_to=tuple(problem.blind_to),
        J=float(checked.J),
        details={
            "max_completion_length": problem.max_completion_length,
            "group_size": G,
            "completions": problem_rows(problem),
        },
    )


def named_scales(G: int, T: int, N: int, M: int = 1, R: int = 1) -> list[tuple[str, float]]:
    """The constants a correct estimator may be scaled by, named (a step size, not a bias).

    A group mean that includes the sample, (G − 1)/G; a constant normaliser, 1/T or N/T
    (Dr. GRPO's ÷ T_max, per sequence or per batch); and, with M micro-batches or R ranks,
    M or 1/M, R or 1/R (the accumulated losses divided never, or once too often; a rank's loss
    normalised by the whole batch's N and then averaged over the ranks: ``accumulation-scaled``).
    Last, N and N·(G − 1)/G: the token terms summed over the batch's N replies where a mean is
    meant (``scale``: the batch size is the run's setting, so c ∝ N is a step size), listed
    after the others so that an equal constant of theirs names it first.
    """
    centred = (("", 1.0), ("self-including-mean", (G - 1) / G))
    base = [
        (", ".join(n for n in (a, b) if n), ca * cb)
        for a, ca in centred
        for b, cb in (("", 1.0), ("constant-normaliser", 1 / T), ("constant-normaliser", N / T))
    ]
    factors = [f for k in {M, R} - {1} for f in (k, 1 / k)]
    base += [
        (", ".join(n for n in (name, "accumulation-scaled") if n), c * m)
        for name, c in base
        for m in factors
    ]
    base += [(", ".join(n for n in (a, "scale") if n), ca * N) for a, ca in centred]
    return [(name, c) for name, c in base if name]


def _problems() -> dict[str, Callable[[], SequenceProblem]]:
    from eligibility.lab.sequence.builtin import PROBLEMS, STEP_PROBLEMS

    known = {**PROBLEMS, **STEP_PROBLEMS}
    return {name: known[name] for name in PROBLEM_NAMES}


class _LazyProblems(dict):  # type: ignore[type-arg]
    """The lab's built-in problems, imported (with torch) on first use."""

    def __init__(self) -> None:
        super().__init__({name: self._builder(name) for name in PROBLEM_NAMES})

    @staticmethod
    def _builder(name: str) -> Callable[[], SequenceProblem]:
        return lambda: _problems()[name]()


FAMILY = Family(
    name="sequence",
    problems=_LazyProblems(),
    forms=("logps", "model", "step"),
    arguments={
        "logps": ("logps", "batch"),
        "model": ("model", "batch"),
        "step": ("model", "optimizer", "batch"),
    },
    trial=trial,
    diagnoses=meanings("sequence"),
    reference="RLOO's (leave-one-out baseline, summed over tokens, KL as a reward-to-go)",
    min_samples=MIN_SAMPLES,
    kl_problems=("kl",),
    step_problems=("clip",),
    batch=batch_note,
    options=("micro_batches", "temperature", "beta", "loss_beta", "advantages", "world_size"),
    unfit=unfit,
)
"""The sequence family of ``eligibility check``."""


__all__ = [
    "FAMILY",
    "MASKS",
    "PROBLEM_NAMES",
    "REFERENCE",
    "VIEWS",
    "Variant",
    "batch_of",
    "estimates",
    "named_scales",
    "rebuilt",
    "tempered",
    "trial",
    "unfit",
    "variants_of",
    "views",
    "with_advantages",
    "with_beta",
]
