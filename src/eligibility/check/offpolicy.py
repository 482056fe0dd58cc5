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
from eligibility.check.audit import Recorder
from eligibility.check.family import Draw, Family, Trial
from eligibility.check.mistakes import meanings, named
from eligibility.check.offpolicy_sampler import PROBLEM_NOTES, greedy, targets
from eligibility.check.offpolicy_sampler import build_problem as _problem
from eligibility.check.offpolicy_tables import (
    ADVANTAGES,
    AGGREGATIONS,
    CAPS,
    CLIPS,
    RATIOS,
    REFERENCE,
    SAMPLERS,
    Variant,
    estimates,
    variants,
)

if TYPE_CHECKING:
    from eligibility.lab.sequence.offpolicy import OffPolicyProblem

PROBLEM_NAMES = ("ratio-one", "near", "far")
"""The off-policy problems of ``--problem``."""

PILOT = 400
"""Batches of the reference estimator that give σ."""

MIN_SAMPLES = 800
"""The least N by default (as the sequence family's, whose problem this is)."""

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
        choice = getattr(closest, field_name)
        bounds = CLIPS[choice][1] if field_name == "clip" else None
        if bounds is not None:  # the clip's constants: ε_low, ε_high
            choice += f" (ε {bounds[0]:g}, {bounds[1]:g})"
        parts.append(
            {
                "part": f"{PARTS[field_name]}: {choice}",
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


class _Means(dict):  # type: ignore[type-arg]
    """Each variant's mean on the draw's batches, computed when first asked for.

    The decomposition switches the closest variant's choices on one at a time: a swept
    variant's intermediate steps need not be among those computed up front.
    """

    def __init__(self, compute: Callable[[Variant], np.ndarray]) -> None:
        super().__init__()
        self.compute = compute

    def __missing__(self, v: Variant) -> np.ndarray:
        self[v] = m = self.compute(v)
        return m


def sweep(closest: Variant, known: set[Variant]) -> list[Variant]:
    """The variants a constant away from ``closest``, those not computed already.

    Every clip, cap and sampler correction (each truncation or mask C of :data:`SAMPLERS`,
    GSPO's ε), with either advantage, at the closest variant's ratio and aggregation.
    """
    out = [
        Variant(closest.ratio, clip, sampler, closest.aggregation, advantage, cap)
        for clip, sampler, advantage, cap in itertools.product(
            CLIPS, SAMPLERS, ADVANTAGES, dict.fromkeys(("none", closest.cap))
        )
    ]
    return [v for v in dict.fromkeys(out) if v.mistakes and v not in known]


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

SUPPORT = named("sampler-support")
"""The name of a cut sampler's bias (top k, top p, min p): the policy's completions μ never
draws, which no importance weight brings back; every estimator under it holds it."""

SAMPLER_LOGPS = named("sampler-logps")
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


def _named(problem: OffPolicyProblem, name: str) -> str:
    """A mistake's name, after :data:`SUPPORT` where the sampler cuts (every estimator holds it)."""
    return ", ".join(n for n in (SUPPORT if problem.sampler.truncates else "", name) if n)


def _expectations(problem: OffPolicyProblem) -> dict[str, np.ndarray]:
    """The exact E[ĝ] of each mistake the problem tells from ∇J (the lab's, at C = 3).

    Under a cut sampler, the product ratio's own (:data:`SUPPORT`) and the sampler's
    renormalised log-probs scored as the policy's (:data:`SAMPLER_LOGPS`) too.
    """
    exact_of = problem.variants(cap=3.0)
    cut = problem.sampler.truncates  # μ never draws some of π_old's completions
    expectations = {
        _named(problem, k): exact_of[v]
        for k, v in {"": "product", **EXPECTED}.items()
        if (k or cut) and not np.allclose(exact_of[v], problem.exact, rtol=1e-9, atol=1e-12)
    }
    if cut:  # the sampler's renormalised log-probs scored as the policy's: its own ∇J_μ
        expectations[SAMPLER_LOGPS] = problem.sampler_exact
    return expectations


def _with_logps(problem: OffPolicyProblem) -> Callable[[Any], tuple[Any, Any]]:
    """The logps form's (log-probs at θ, the batch as it is) of a batch."""
    return lambda batch: (problem.logps(batch), batch)


@dataclass
class _Nearest:
    """A draw's variants by their means on its batches, and what the engine asks of them.

    The closest variant to a mean; the draw's ``closer`` (the variants a constant away from
    the one closest to the user's mean, :func:`sweep`) and its ``explain`` (the user's bias
    along the closest one's path, :func:`decompose`).

    Attributes:
        problem: the off-policy problem.
        rows: the enumeration rows of each batch, [n, N].
        means: each variant's mean on those batches, the swept ones added as computed.
        scale: σ of the reference (floored): the closest is by max |Δ mean| / σ.
    """

    problem: OffPolicyProblem
    rows: np.ndarray
    means: _Means
    scale: np.ndarray

    def closest_to(self, mean: np.ndarray) -> Variant:
        """The variant whose mean is nearest ``mean``, in σ (the swept ones too, once swept)."""
        means = self.means
        return min(means, key=lambda v: float(np.abs((means[v] - mean) / self.scale).max()))

    def closer(self, G: np.ndarray) -> list[tuple[str, np.ndarray]]:
        """The draw's ``closer``: the sweep around the variant closest to G's mean, on all N."""
        swept = sweep(self.closest_to(G.mean(axis=0)), set(self.means))
        found = estimates(self.problem, self.rows, swept)
        self.means.update({v: found[j].mean(axis=0) for j, v in enumerate(swept)})
        return [(_named(self.problem, v.name), found[j]) for j, v in enumerate(swept)]

    def explain(self, mean: np.ndarray, stderr: Any = None, t: Any = None) -> dict[str, Any]:
        """The draw's ``explain``: the decomposition; under a cut sampler, its targets too."""
        closest = self.closest_to(mean)  # the swept variants too, where the engine widened
        out = {"decomposition": decompose(mean, self.problem.exact, self.means, closest)}
        if self.problem.sampler.truncates and stderr is not None:
            out["truncated_sampler"] = targets(mean, stderr, t, self.problem)
        return out


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
    expectations = _expectations(problem)
    named = functools.partial(_named, problem)
    cut = problem.sampler.truncates  # μ never draws some of π_old's completions

    def draw(n: int) -> Draw:
        draws = _draws(problem, n, rng)
        every = estimates(problem, np.stack([d.rows for d in draws]), [REFERENCE, *chosen])
        model = problem.model
        params = list(model.parameters())
        theta = [p.detach().clone() for p in params]
        hf = policy_model(model, problem.base.eos_token_id) if config.form == "model" else None

        recorder = Recorder(scales=_audit_scales(problem), sign=sign)

        def step(k: int) -> np.ndarray | None:
            user.reset_policy(params, theta)
            batch = problem.batch(draws[k])
            tap_of = functools.partial(recorder.tap, k) if recorder.wants(k) else None
            g, tap = user.call_in_form(
                fn, config.form, hf, _with_logps(problem), batch, params, sign, theta, tap_of
            )
            if tap is not None:
                truncated = problem.base.table.truncated[draws[k].rows]
                recorder.record(recorder.completions, [(batch, tap, 1.0)], k, truncated=truncated)
            return g

        rows = np.stack([d.rows for d in draws])
        means = _Means(lambda v: estimates(problem, rows, [v])[0].mean(axis=0))
        means.update({v: every[j].mean(axis=0) for j, v in enumerate([REFERENCE, *chosen])})
        nearest = _Nearest(problem, rows, means, np.maximum(sigma, 1e-12))
        return Draw(
            step=step,
            setup=lambda: torch.manual_seed(seed),
            summary=recorder.summary,
            references={"variance_ratio": every[0]},
            variants=[(named(v.name), every[j + 1]) for j, v in enumerate(chosen)]
            + ([(SUPPORT, every[0])] if cut else []),
            explain=nearest.explain,
            closer=nearest.closer,
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
            "completions": len(problem.base.prompts) * problem.group_size,
        },
    )


def _audit_scales(problem: OffPolicyProblem) -> list[tuple[str, float]]:
    """The constants the audit names: the table's, and the sequence family's at G, T and N.

    The table's weight at ratio 1 (TRL's CISPO cap, 0.2) declares ``ratio-1-broken``: a
    plain factor left over is then each token's weight where its ratio is 1; at ratio-one a
    sampler weight truncated at C < 1 is C itself (:func:`_caps_below_one`), as the table says.
    """
    from eligibility.check.sequence import named_scales, problem_rows

    base = problem.base
    return [
        ("ratio-1-broken", 0.2),
        *named_scales(base.group_size, base.max_completion_length, problem_rows(base)),
        *_caps_below_one(problem),
    ]


FAMILY = Family(
    name="off-policy",
    problems={name: (lambda name=name: _problem(name)) for name in PROBLEM_NAMES},
    forms=("logps", "model"),
    arguments={"logps": ("logps", "batch"), "model": ("model", "batch")},
    trial=trial,
    options=("top_k", "top_p", "min_p"),
    unfit=greedy,
    diagnoses=meanings("off-policy"),
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
