r"""The off-policy family of ``eligibility check`` (``--sequence --off-policy``).

The problems are the lab's exact off-policy problems (:mod:`eligibility.lab.sequence.offpolicy`):
the ``length`` sequence problem at θ_old, the loss evaluated at θ some exact gradient steps
later, the completions drawn by a sampler μ ≠ π_old (π_old's logits perturbed and at another
temperature, as a rollout engine reports them). The contract is the sequence family's with two
more fields on the batch (:class:`~eligibility.lab.sequence.offpolicy.OffPolicyBatch`):

* ``logps`` form (the default): ``fn(logps, batch) -> loss``, ``logps`` float32 [N, W] the
  per-token ln π_θ at θ, differentiable; ``batch.old_logps`` π_old's (θ_old's) per-token
  log-probs; ``batch.sampler_logps`` μ's;
* ``model`` form: ``fn(model, batch) -> loss`` with the model at θ.

The unbiased estimator is the sequence-level product weight, untruncated:
ĝ = (1/N) Σᵢ (π_θ(oᵢ)/μ(oᵢ)) Aᵢ Σₜ ∇ℓᵢ,ₜ, with A a baseline that does not depend on oᵢ.

**Named mistakes.** Every estimator is a choice in each of five tables: the ratio
(:data:`RATIOS`), a clip (:data:`CLIPS`), the sampler correction (:data:`SAMPLERS`), the
aggregation (:data:`AGGREGATIONS`) and the advantage (:data:`ADVANTAGES`). On the very batches
the user's function sees, every combination in :func:`variants` is computed as
ĝ_v = Σᵢ,ₜ aggᵢ,ₜ Aᵢ κᵢ,ₜ 1{not clipped} w̃ᵢ,ₜ ∇ℓᵢ,ₜ(θ), with ∇ℓ(θ) exact (float64 autograd
of the enumeration) and κ the gradient coefficient of the ratio; the engine names the one the
user's estimator matches. The formulas here are written from the definitions and share
nothing with :mod:`eligibility.torch.offpolicy`.

**The report** says how far θ is from θ_old (the KL of whole completions and the share of
tokens a PPO clip at ε = 0.2 cuts) and decomposes the user's bias ḡ − ∇J along the closest
variant's path from the unbiased estimator (:func:`decompose`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from eligibility.check import user
from eligibility.check.family import Draw, Family, Trial
from eligibility.check.offpolicy_sampler import PROBLEM_NOTES, targets
from eligibility.check.offpolicy_sampler import build_problem as _problem

if TYPE_CHECKING:
    from eligibility.lab.sequence.offpolicy import OffPolicyProblem

PROBLEM_NAMES = ("ratio-one", "near", "far")
"""The off-policy problems of ``--problem``."""

PILOT = 400
"""Batches of the reference estimator that give σ."""

MIN_SAMPLES = 800
"""The least N by default (as the sequence family's, whose problem this is)."""

CHUNK = 128
"""Batches per chunk when the variants are computed."""


# -- the tables of choices -----------------------------------------------------------------------


@dataclass(frozen=True)
class Rows:
    """Per row and token of a chunk of c batches of N completions (torch, float64).

    Attributes:
        mask: 1 on real tokens, [c, N, T].
        log_r: ln rₜ = ℓₜ − ℓ^oldₜ, [c, N, T]. log_s: ln s = Σₜ ln rₜ, [c, N, 1].
        log_w: ln w = Σₜ (ℓ^old − ℓ^μ), [c, N, 1]. log_wt: per token, [c, N, T].
        logp: ln π_θ(o), [c, N, 1]. length: L, [c, N, 1]. rewards: R, [c, N].
        group_size: G.
    """

    mask: Any
    log_r: Any
    log_s: Any
    log_w: Any
    log_wt: Any
    logp: Any
    length: Any
    rewards: Any
    group_size: int


def _product(b: Rows) -> tuple[Any, Any]:
    return (s := b.log_s.exp().expand_as(b.mask)), s


def _token(b: Rows) -> tuple[Any, Any]:
    return (r := b.log_r.exp()), r


def _geometric(b: Rows) -> tuple[Any, Any]:
    return (g := (b.log_s / b.length).exp().expand_as(b.mask)), g


def _one(b: Rows) -> tuple[Any, Any]:
    return (one := b.mask.new_ones(b.mask.shape)), one


def _swapped(b: Rows) -> tuple[Any, Any]:
    inv = (-b.log_s).exp().expand_as(b.mask)
    return inv, -inv  # f = −(1/s) A: ∂f/∂ℓₜ = A/s, so ĝ = −A/s ∇ℓₜ


def _undetached(b: Rows) -> tuple[Any, Any]:
    s = b.log_s.exp()
    return s.expand_as(b.mask), (s * (1.0 + b.logp)).expand_as(b.mask)


RATIOS: dict[str, tuple[str | None, Callable[[Rows], tuple[Any, Any]]]] = {
    "product": (None, _product),
    "token": ("per-token-ratio", _token),
    "geometric-mean": ("geometric-mean", _geometric),
    "one": ("stale-old-logps", _one),
    "swapped": ("ratio-1-broken", _swapped),
    "undetached": ("ratio-1-broken", _undetached),
}
"""Ratio → (the mistake, or None; (ρ, κ): the value a clip sees and ĝ's coefficient on ∇ℓₜ).

``product``: s = π_θ(o)/π_old(o) (κ = s); ``token``: rₜ; ``geometric-mean``: s^{1/L};
``one``: old log-probs taken at θ (ratio ≡ 1); ``swapped``: π_old/π_θ (κ = −1/s);
``undetached``: −s A Σₜ ℓₜ with s not detached (κ = s (1 + ln π_θ(o)))."""

CLIPS: dict[str, tuple[str | None, tuple[float, float, float] | None]] = {
    "none": (None, None),
    "ppo": ("clipping-bias", (0.2, 0.2, float("inf"))),
    "clip-higher": ("clipping-bias", (0.2, 0.28, float("inf"))),
    "dual": ("clipping-bias", (0.2, 0.2, 3.0)),
}
"""Clip → (the mistake, or None; (ε_low, ε_high, dual-clip c)): a token is cut where A > 0 and
ρ > 1 + ε_high, or A < 0 and ρ < 1 − ε_low, or A < 0 and ρ > c."""


CAPS: dict[str, tuple[str | None, tuple[str, float, float] | None]] = {
    "none": (None, None),
    "cispo-relative": ("cispo-relative-cap", ("relative", 0.2, 0.2)),
    "cispo-relative-0.28": ("cispo-relative-cap", ("relative", 0.2, 0.28)),
    "cispo-absolute": ("cispo-absolute-cap", ("absolute", 0.0, 0.2)),
}
"""Cap → (the mistake, or None; (kind, ε_low, ε_high)): CISPO's detached weight, the ratio's
gradient coefficient κ capped and no token cut. ``relative``: κ̂ = clip(κ, 1 − ε_low,
1 + ε_high) (the paper's, verl's ``cispo``); ``absolute``: κ̂ = min(κ, ε_high) (TRL's
``clamp(coef_1, max=epsilon_high)``, ε_high unset is ε = 0.2: every on-policy weight 0.2)."""


def _capped(kappa: Any, cap: str) -> Any:
    bounds = CAPS[cap][1]
    if bounds is None:
        return kappa
    kind, lo, hi = bounds
    return kappa.clamp(max=hi) if kind == "absolute" else kappa.clamp(1.0 - lo, 1.0 + hi)


def _sampler(level: str, cap: float | None, mask_it: bool) -> Callable[[Rows], Any]:
    def factor(b: Rows) -> Any:
        w = (b.log_w if level == "sequence" else b.log_wt).exp()
        if cap is None:
            return w
        return (w <= cap) * w if mask_it else w.clamp(max=cap)

    return factor


SAMPLERS: dict[str, tuple[str | None, Callable[[Rows], Any]]] = {
    "exact": (None, _sampler("sequence", None, False)),
    "none": ("uncorrected-sampler", lambda b: b.mask.new_ones(())),
    **{
        f"{kind}-{c:g}": (f"{name}-bias", _sampler("sequence", c, kind == "mis"))
        for kind, name in (("tis", "truncation"), ("mis", "masking"))
        for c in (0.5, 1.0, 1.5, 2.0, 3.0, 5.0)
    },
    "tis-token-2": ("truncation-bias", _sampler("token", 2.0, False)),
    "mis-token-2": ("masking-bias", _sampler("token", 2.0, True)),
}
"""Sampler correction → (the mistake, or None; w̃, [c, N, 1] or [c, N, T]).

``exact``: w = π_old(o)/μ(o); ``none``: no weight; ``tis-C`` / ``mis-C``: w truncated at C or
masked above C (TRL ``sequence_truncate`` / ``sequence_mask``; C = 3 is TRL's default; C from
0.5 to 5);
``*-token-2``: per-token weights, C = 2."""


@functools.cache
def _row(kind: str, name: str) -> Any:
    """A row of the option table (imported with torch on first use): the one formula."""
    from eligibility.torch import options

    return options.row(kind, name)


def _table_weights(name: str) -> Callable[[Rows], Any]:
    """The option table's aggregation ``name``: its weights on a chunk's mask."""
    return lambda b: _row("aggregation", name).fn(b.mask, None, None, None)


def _group_std(r: Any, G: int) -> Any:
    """The table's group-mean baseline with its group-std scale (GRPO's advantage)."""
    return _row("scale", "group-std").fn(_row("baseline", "mean").fn(r, G), r, G)


AGGREGATIONS: dict[str, tuple[str | None, Callable[[Rows], Any]]] = {
    "sequence-sum": (None, _table_weights("sequence-sum")),
    "sequence-mean": ("length-normalised", _table_weights("sequence-mean")),
    "token-mean": ("batch-dependent-normaliser", _table_weights("token-mean")),
}
"""Aggregation → (the mistake, or None; the per-token multiplier): the option table's rows
(their functions, read on first use so that importing the check needs no torch; a test holds
these mistake names to the rows')."""

ADVANTAGES: dict[str, tuple[str | None, Callable[[Any, int], Any]]] = {
    "rloo": (None, lambda r, G: _row("baseline", "rloo").fn(r, G)),
    "group-std": ("std-normalised", _group_std),
}
"""Advantage → (the mistake, or None; A from the rewards [..., N] and G)."""


@dataclass(frozen=True)
class Variant:
    """One combination of a ratio, a clip, a sampler correction, an aggregation, an advantage."""

    ratio: str = "product"
    clip: str = "none"
    sampler: str = "exact"
    aggregation: str = "sequence-sum"
    advantage: str = "rloo"
    cap: str = "none"

    @property
    def mistakes(self) -> tuple[str, ...]:
        """The mistakes it holds, in the tables' order, without repeats."""
        names = [
            RATIOS[self.ratio][0],
            CLIPS[self.clip][0],
            SAMPLERS[self.sampler][0],
            AGGREGATIONS[self.aggregation][0],
            ADVANTAGES[self.advantage][0],
            CAPS[self.cap][0],
        ]
        return tuple(dict.fromkeys(n for n in names if n))

    @property
    def name(self) -> str:
        """The diagnosis it gives: its mistakes, joined."""
        return ", ".join(self.mistakes)


REFERENCE = Variant()
"""The product weight π_θ/μ, RLOO, summed over each sequence: unbiased."""

PATH = ("advantage", "aggregation", "ratio", "clip", "cap", "sampler")
"""The order in which :func:`decompose` switches a variant's choices on."""

PARTS = {
    "advantage": "advantage scaling",
    "aggregation": "aggregation",
    "ratio": "ratio",
    "clip": "clipping",
    "cap": "capped weight",
    "sampler": "sampler weight",
}
"""The report's name of each part of the bias (followed by the choice: ``ratio: token``)."""


def variants() -> list[Variant]:
    """The full product of the common choices, and each rarer choice on its own."""
    common = itertools.product(
        ("product", "token", "geometric-mean", "one"),
        ("none", "ppo", "clip-higher"),
        ("exact", "none", "tis-3", "mis-3"),
        tuple(AGGREGATIONS),
        tuple(ADVANTAGES),
    )
    out = [Variant(*c) for c in common]
    out += [Variant(ratio=r) for r in ("swapped", "undetached")]
    out += [Variant(clip="dual"), Variant(ratio="token", clip="dual")]
    out += [Variant(sampler=s) for s in SAMPLERS if s not in ("exact", "none", "tis-3", "mis-3")]
    out += [
        Variant(ratio=r, sampler=s, aggregation=a, advantage=adv, cap=c)
        for r, c, s, a, adv in itertools.product(
            ("product", "token", "geometric-mean"),
            tuple(k for k in CAPS if k != "none"),
            ("exact", "none"),
            tuple(AGGREGATIONS),
            tuple(ADVANTAGES),
        )
    ]
    return [v for v in out if v.mistakes]


def _weights(b: Rows, v: Variant) -> Any:
    """wᵢ,ₜ = aggᵢ,ₜ Aᵢ κ̂ᵢ,ₜ 1{not clipped} w̃ᵢ,ₜ: ĝ = Σᵢ,ₜ wᵢ,ₜ ∇ℓᵢ,ₜ (κ̂: κ, capped)."""
    A = ADVANTAGES[v.advantage][1](b.rewards, b.group_size)[..., None]
    rho, kappa = RATIOS[v.ratio][1](b)
    kappa = _capped(kappa, v.cap)
    bounds = CLIPS[v.clip][1]
    keep = 1.0
    if bounds is not None:
        lo, hi, c = bounds
        cut = ((A > 0) & (rho > 1 + hi)) | ((A < 0) & ((rho < 1 - lo) | (rho > c)))
        keep = (~cut).to(rho.dtype)
    return AGGREGATIONS[v.aggregation][1](b) * A * kappa * keep * SAMPLERS[v.sampler][1](b)


def estimates(problem: OffPolicyProblem, rows: np.ndarray, chosen: list[Variant]) -> np.ndarray:
    """Each variant's ĝ on each batch, [len(chosen), n, p], in chunks of :data:`CHUNK`.

    Args:
        problem: the :class:`~eligibility.lab.sequence.offpolicy.OffPolicyProblem`.
        rows: the enumeration rows of each batch, [n, N] (group-major).
        chosen: the estimators.
    """
    import torch

    t = problem.base.table
    mask = torch.as_tensor(t.mask)
    log_r = torch.as_tensor((problem.token_logp - problem.old_token_logp) * t.mask)
    d = np.where(t.mask > 0, problem.old_token_logp - problem.sampler_token_logp, 0.0)
    log_wt = torch.as_tensor(np.where(problem.covered[:, None], d, 0.0))
    logp = torch.as_tensor(problem.token_logp.sum(1))
    scores = torch.as_tensor(problem.token_scores)
    reward = torch.as_tensor(t.reward)
    n, p = rows.shape[0], problem.base.n_params
    out = np.empty((len(chosen), n, p))
    for start in range(0, n, CHUNK):
        r = torch.as_tensor(rows[start : start + CHUNK])
        m = mask[r]
        b = Rows(
            mask=m,
            log_r=log_r[r],
            log_s=log_r[r].sum(-1, keepdim=True),
            log_w=log_wt[r].sum(-1, keepdim=True),
            log_wt=log_wt[r],
            logp=logp[r][..., None],
            length=m.sum(-1, keepdim=True),
            rewards=reward[r],
            group_size=problem.group_size,
        )
        w = torch.stack([_weights(b, v) for v in chosen], dim=1)  # [c, v, N, T]
        s = scores[r].reshape(len(r), -1, p)
        g = torch.bmm(w.reshape(len(r), len(chosen), -1), s)
        out[:, start : start + len(r)] = g.permute(1, 0, 2).numpy()
    return out


def decompose(
    user_mean: np.ndarray, exact: np.ndarray, means: dict[Variant, np.ndarray], closest: Variant
) -> dict[str, Any]:
    r"""The user's bias b = ḡ − ∇J split along the closest variant's path from the reference.

    First the sampling noise, the unbiased reference's mean on these batches minus ∇J; then the
    closest variant's choices switched on one at a time in the order :data:`PATH`
    (advantage, aggregation, ratio, clip, sampler): part k = E[ĝ of the first k switches] −
    E[ĝ of the first k − 1] (means on the same batches); and the residual
    b − Σₖ partₖ is what the variant does not explain. Each part's share is its projection on b,
    ⟨partₖ, b⟩/‖b‖², so the shares and the residual's sum to 1. The split depends on the order
    (the switches interact); the order is fixed so reports can be compared.

    Returns:
        ``{"closest": name, "bias_norm": ‖b‖, "parts": [{"part", "norm", "share"}, …]}``.
    """
    b = user_mean - exact
    b2 = float(b @ b) or float("nan")
    previous, current = means[REFERENCE], REFERENCE
    noise = previous - exact
    parts = [
        {
            "part": "sampling noise",
            "norm": float(np.linalg.norm(noise)),
            "share": float(noise @ b) / b2,
        }
    ]
    for field_name in PATH:
        step = Variant(**{**current.__dict__, field_name: getattr(closest, field_name)})
        if step == current:
            continue
        part = means[step] - previous
        parts.append(
            {
                "part": f"{PARTS[field_name]}: {getattr(closest, field_name)}",
                "norm": float(np.linalg.norm(part)),
                "share": float(part @ b) / b2,
            }
        )
        previous, current = means[step], step
    residual = b - (previous - exact)
    parts.append(
        {
            "part": "residual",
            "norm": float(np.linalg.norm(residual)),
            "share": float(residual @ b) / b2,
        }
    )
    return {
        "closest": closest.name or "unbiased",
        "bias_norm": float(np.linalg.norm(b)),
        "parts": parts,
    }


# -- the trial -----------------------------------------------------------------------------------

EXPECTED = {
    "per-token-ratio": "token-ratio",
    "geometric-mean": "geometric-mean",
    "stale-old-logps": "stale",
    "uncorrected-sampler": "uncorrected",
    "length-normalised": "sequence-mean",
    "truncation-bias": "truncated",
    "masking-bias": "masked",
}
"""Each mistake with an exact expectation → the lab's estimator (RLOO, summed, C = 3)."""

SUPPORT = "sampler-support"
"""The name of a cut sampler's bias (top k, top p, min p): the policy's completions μ never
draws, which no importance weight brings back; every estimator under it holds it."""

SAMPLER_LOGPS = "sampler-logps"
"""The name of a loss that scores the cut sampler's renormalised log-probs as the policy's."""

SIZING = ("per-token-ratio", "geometric-mean", "stale-old-logps", "uncorrected-sampler")
"""The mistakes N is chosen to tell from a rescaling."""


def _sequence_scales(problem: OffPolicyProblem) -> list[tuple[str, float]]:
    """The sequence family's named constants on the base problem: one gradient, one name.

    Dr. GRPO reads ``self-including-mean, constant-normaliser`` here as it does on-policy.
    """
    from eligibility.check.sequence import named_scales

    G = problem.group_size
    return named_scales(G, problem.base.max_completion_length, len(problem.base.prompts) * G)


def _caps_below_one(problem: OffPolicyProblem) -> list[tuple[str, float]]:
    """Where μ = π_old (``ratio-one``), a sampler weight capped at C < 1 is C × REINFORCE.

    Every weight π_old/μ is 1 there, so TIS at C truncates each one to C: a constant on this
    problem, named as the truncation it is (the other problems show its bias), so that one
    estimator has one name at every distance.
    """
    if problem.name != "ratio-one":
        return []
    return [
        ("truncation-bias", float(key.split("-")[1]))
        for key, (mistake, _) in SAMPLERS.items()
        if mistake == "truncation-bias" and key.count("-") == 1 and float(key.split("-")[1]) < 1
    ]


def _draws(problem: OffPolicyProblem, n: int, rng: np.random.Generator) -> list[Any]:
    groups, G = len(problem.base.prompts), problem.group_size
    return [problem.draw_groups(groups, rng, G) for _ in range(n)]


def trial(problem: OffPolicyProblem, fn: Callable[..., Any], config: Any, seed: int) -> Trial:
    """The off-policy problem as the engine sees it (see the module docstring)."""
    import torch

    from eligibility.lab.sequence.handed import policy_model

    rng = np.random.default_rng(seed)
    cut = (config.top_k, config.top_p, config.min_p)
    if cut != (None, None, None):
        problem = _problem(problem.name, cut)
    chosen = variants()
    pilot_rows = np.stack([d.rows for d in _draws(problem, PILOT, rng)])
    sigma = estimates(problem, pilot_rows, [REFERENCE])[0].std(axis=0, ddof=1)
    sign = 1.0 if config.objective else -1.0
    exact_of = problem.variants(cap=3.0)
    cut = problem.sampler.truncates  # μ never draws some of π_old's completions

    def named(name: str) -> str:
        return ", ".join(n for n in (SUPPORT if cut else "", name) if n)

    expectations = {
        named(k): exact_of[v]
        for k, v in {"": "product", **EXPECTED}.items()
        if (k or cut) and not np.allclose(exact_of[v], problem.exact, rtol=1e-9, atol=1e-12)
    }
    if cut:  # the sampler's renormalised log-probs scored as the policy's: its own ∇J_μ
        expectations[SAMPLER_LOGPS] = problem.sampler_exact

    def draw(n: int) -> Draw:
        draws = _draws(problem, n, rng)
        every = estimates(problem, np.stack([d.rows for d in draws]), [REFERENCE, *chosen])
        model = problem.model
        params = list(model.parameters())
        theta = [p.detach().clone() for p in params]
        hf = policy_model(model, problem.base.eos_token_id) if config.form == "model" else None

        def step(k: int) -> np.ndarray | None:
            user.reset_policy(params, theta)
            batch = problem.batch(draws[k])
            if config.form == "model":
                return user.call(fn, (hf, batch), params, sign, theta)
            return user.call(fn, (problem.logps(batch), batch), params, sign, theta)

        means = {v: every[j].mean(axis=0) for j, v in enumerate([REFERENCE, *chosen])}

        def explain(mean: np.ndarray, stderr: Any = None, t: Any = None) -> dict[str, Any]:
            scale = np.maximum(sigma, 1e-12)
            closest = min(means, key=lambda v: float(np.abs((means[v] - mean) / scale).max()))
            out = {"decomposition": decompose(mean, problem.exact, means, closest)}
            if problem.sampler.truncates and stderr is not None:
                out["truncated_sampler"] = targets(mean, stderr, t, problem)
            return out

        return Draw(
            step=step,
            setup=lambda: torch.manual_seed(seed),
            references={"variance_ratio": every[0]},
            variants=[(named(v.name), every[j + 1]) for j, v in enumerate(chosen)]
            + ([(SUPPORT, every[0])] if cut else []),
            explain=explain,
        )

    return Trial(
        name=problem.name,
        exact=problem.exact,
        sigma=sigma,
        draw=draw,
        expectations=expectations,
        sizing={k: v for k, v in expectations.items() if k in SIZING},
        scales=[("ratio-1-broken", 0.2), *_sequence_scales(problem), *_caps_below_one(problem)],
        blind_to=(PROBLEM_NOTES[problem.name],),
        J=float(problem.J),
        details={
            "kl_old": problem.kl_old(),
            "clipped_share": problem.clipped_share(0.2, 0.2),
            "group_size": problem.group_size,
        },
    )


FAMILY = Family(
    name="off-policy",
    problems={name: (lambda name=name: _problem(name)) for name in PROBLEM_NAMES},
    forms=("logps", "model"),
    arguments={"logps": ("logps", "batch"), "model": ("model", "batch")},
    trial=trial,
    options=("top_k", "top_p", "min_p"),
    diagnoses={
        "ratio-1-broken": "at ratio 1 the loss is not REINFORCE: a cap below 1 (TRL's CISPO "
        "with epsilon_high unset caps at 0.2), a swapped ratio π_old/π_θ, or an importance "
        "weight that is not detached",
        "per-token-ratio": "a per-token ratio rₜ where the sequence's Π rₜ belongs: drops the "
        "prefix's and the suffix's ratios",
        "geometric-mean": "the geometric mean s^{1/L} of the ratios (GSPO): length-fair, not "
        "an importance weight",
        "stale-old-logps": "the ratio is identically 1 although θ ≠ θ_old: old_logps taken at "
        "θ (recomputed after the first step), not θ_old's",
        "uncorrected-sampler": "no π_old/μ weight although the sampler μ differs from π_old",
        SUPPORT: "the sampler is cut (--top-k, --top-p, --min-p): the policy's completions it "
        "never draws get no gradient, and no importance weight (TRL's token/sequence "
        "truncate/mask corrections included) brings them back; the report says which "
        "gradient the mean estimates, the policy's ∇J or the cut sampler's own ∇J_μ",
        SAMPLER_LOGPS: "the cut sampler's renormalised log-probs ln μ = ln π − ln S scored as "
        "the policy's: the gradient of the sampler's own objective ∇J_μ, not the policy's",
        "truncation-bias": "the sampler weight truncated at C (TIS): −E_μ[(w − C)₊ g]",
        "masking-bias": "the sampler weight masked above C (MIS): −E_μ[1{w > C} w g]",
        "clipping-bias": "tokens cut by a PPO clip (or a dual clip): they contribute no gradient",
        "cispo-relative-cap": "CISPO's relative cap: the detached weight clipped to "
        "[1 − ε_low, 1 + ε_high] (verl's cispo, the paper's): no token is cut, but a capped "
        "token's weight is not its importance ratio",
        "cispo-absolute-cap": "CISPO's absolute cap: the detached weight min(ρ, ε_high) (TRL's "
        "cispo; ε_high unset is 0.2, every on-policy weight 0.2): a capped weight is not the "
        "importance ratio",
        "length-normalised": "each sequence divided by its length (GRPO's sequence mean of "
        "token means)",
        "batch-dependent-normaliser": "a token mean counted over the batch",
        "std-normalised": "advantages divided by the group's std of the rewards",
    },
    reference="the sequence product weight π_θ/μ with RLOO, summed over tokens",
    min_samples=MIN_SAMPLES,
    batch=lambda report: "one group-major batch per call, old_logps and sampler_logps beside",
)
"""The off-policy family of ``eligibility check``."""


__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "CAPS",
    "CLIPS",
    "FAMILY",
    "PROBLEM_NAMES",
    "RATIOS",
    "REFERENCE",
    "SAMPLERS",
    "Variant",
    "decompose",
    "estimates",
    "trial",
    "variants",
]
