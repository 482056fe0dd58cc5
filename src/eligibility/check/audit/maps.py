r"""The map from credit to weight, found by a search over a small grammar.

Where no relation of :func:`~eligibility.check.audit.relations.relate` fits the replies'
weights w̄ᵤ, the search tries

    w̄ᵤ · λ(Lᵤ) = κ_b · f(A(Xᵤ)),

X the return the reply is credited with (:data:`~eligibility.check.audit.relations.RETURNS`),
A a baseline and scale of it (:data:`BASES`: the group-centred X, whitened within the group or
the batch, or X less its group's first reply's), f a function of the advantage
(:data:`FUNCTIONS`: |A|, A², its sign, its positive or negative part, a clip at [lo, hi] whose
bounds are read off the weights, a power |A|ᵖ with its sign kept or lost, p read off, a line
of another slope s below 0 than above, s read off), λ a length (1, L, √L, the episode's,
L/(L + b): a factor 1 + b/L on the weight, or L + b, b read off), and κ one constant or one a
batch. The simplest that fits (fewest changes from the exact credit's κ·A/1) is the map, said
in the loss's words with its constants and residual (:func:`words`); where none fits, the
closest is kept, so that ``credit-unexplained`` says how far off the best description is.
The fits are vectorised per candidate and held against a plain loop in the tests
(:func:`fit_loop`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from eligibility.check.audit.names import Finding
from eligibility.check.audit.relations import RETURNS, Units, shape
from eligibility.check.mistakes import named

# the mistakes this module names, each declared in eligibility.check.mistakes
ADVANTAGE_TRANSFORMED = named("advantage-transformed")
BATCH_DEPENDENT_NORMALISER = named("batch-dependent-normaliser")
BATCH_WHITENED = named("batch-whitened")
DROPPED_AT_RANDOM = named("dropped-at-random")
LATER_REWARDS_WITHHELD = named("later-rewards-withheld")
LENGTH_NORMALISED = named("length-normalised")
MEAN_NORMALISED = named("mean-normalised")
OWN_REWARD_WITHHELD = named("own-reward-withheld")
TURNS_DISCOUNTED = named("turns-discounted")
RATIO_1_BROKEN = named("ratio-1-broken")
REPLY_FACTOR = named("reply-factor")
STD_NORMALISED = named("std-normalised")
TURNS_WEIGHTED_BY_WHOLE_RETURN = named("turns-weighted-by-whole-return")

BASES = (
    "loo",
    "group",
    "group-std-1",
    "group-std-0",
    "group-relative",
    "batch-std-1",
    "batch-std-0",
    "group-batch-std",
    "none",
    "group-first",
)
"""A(X): the leave-one-out advantage (the exact credit's, G/(G − 1) times the group-centred X),
the group-centred X, X whitened within the group (σ ÷ G − 1 or G), the group-centred X over
the group's mean, X whitened over the batch, the group-centred X whitened over the batch
(σ ÷ N − 1: REINFORCE++'s baseline), X itself, and X less the X of its group's first reply
(one other reply's reward as the baseline: independent of the reply it centres, so unbiased
there, and the first reply its own baseline, weight 0)."""

FUNCTIONS = (
    "identity",
    "abs",
    "square",
    "sign",
    "positive",
    "negative",
    "clip",
    "signed-power",
    "power",
    "slopes",
)
"""f(A): A, |A|, A², sign(A), max(A, 0), min(A, 0), min(max(A, lo), hi), sign(A)·|A|ᵖ and
|A|ᵖ (p read off the weights: :func:`read_power`), and A above 0, s·A below it (s read off:
:func:`read_slopes`)."""

POWERS = ("signed-power", "power")
"""The functions of :data:`FUNCTIONS` whose exponent p is read off the weights."""

READ_OFF = ("clip", *POWERS, "slopes")
"""The functions of :data:`FUNCTIONS` with a number read off the weights (bounds, p, s)."""

LENGTHS = ("none", "tokens", "sqrt", "episode", "affine", "shifted")
"""λ: 1, the reply's token count L, √L, the episode's token count, L/(L + b) (a factor
1 + b/L on the weight, b one number fitted: :func:`fit_affine`), L + b (a count off by b:
:func:`fit_shifted`)."""

SCALES = ("one", "batch")
"""κ: one constant, or one a batch."""


@dataclass(frozen=True)
class Map:
    """A map of the grammar (the module's docstring), fitted.

    Attributes:
        returns, base, function, length, scale: its parts.
        bounds: (lo, hi) of a clip, in the units of A (None otherwise).
        b: the b of the factor 1 + b/L where ``length`` is ``"affine"``, of L + b where it is
            ``"shifted"`` (0 otherwise).
        p: the exponent of a power of :data:`POWERS` (1 otherwise).
        slope: s, the slope below 0 of ``"slopes"`` over the slope above it (1 otherwise).
        gamma: the γ of a ``"discounted"`` return (1 otherwise).
        kappa: κ per unit; residual: ‖w̄λ − κ f(A)‖/‖w̄λ‖ on the units fitted.
        predicted: κ f(A)/λ on every unit (those left out of the fit too).
    """

    returns: str
    base: str
    function: str
    length: str
    scale: str
    bounds: tuple[float, float] | None
    kappa: np.ndarray
    residual: float
    predicted: np.ndarray
    b: float = 0.0
    p: float = 1.0
    gamma: float = 1.0
    slope: float = 1.0

    @property
    def changes(self) -> int:
        """How far it is from the exact credit's own form (the search's order).

        A clip, a power or two slopes count twice: their bounds, exponent or slope are read
        off the weights.
        """
        return (
            (self.returns != "rtg")
            + (self.returns == "discounted")
            + (self.base not in ("loo", "group"))
            + (self.function != "identity")
            + (self.function in READ_OFF)
            + (self.length != "none")
            + (self.scale != "one")
        )


def apply(
    function: str,
    a: np.ndarray,
    bounds: tuple[float, float] | None = None,
    p: float = 1.0,
    slope: float = 1.0,
) -> np.ndarray:
    """f(A) of one of :data:`FUNCTIONS`.

    ``bounds`` are the clip's, ``p`` a power's, ``slope`` the s of two slopes.
    """
    if function == "clip":
        lo, hi = bounds if bounds is not None else (-np.inf, np.inf)
        return np.clip(a, lo, hi)
    if function == "signed-power":
        return np.sign(a) * np.abs(a) ** p
    if function == "power":
        return np.abs(a) ** p
    if function == "slopes":
        return np.where(a < 0, slope * a, a)
    return {
        "identity": lambda x: x,
        "abs": np.abs,
        "square": np.square,
        "sign": np.sign,
        "positive": lambda x: np.maximum(x, 0.0),
        "negative": lambda x: np.minimum(x, 0.0),
    }[function](a)


def _lambda(u: Units, length: str, b: float = 0.0) -> np.ndarray:
    L = u.tokens.astype(np.float64)
    return {
        "none": lambda: np.ones(len(u.w)),
        "tokens": lambda: L,
        "sqrt": lambda: np.sqrt(L),
        "episode": lambda: u.episode.astype(np.float64),
        "affine": lambda: L / (L + b),
        "shifted": lambda: L + b,
    }[length]()


def fit(
    y: np.ndarray, s: np.ndarray, batch: np.ndarray, scale: str, live: np.ndarray
) -> tuple[float, np.ndarray]:
    """(relative residual on ``live``, κ per unit) of y ≈ κ s, κ one or one a batch."""
    kappa = np.zeros(len(y))
    if scale == "one":
        ss = float(s[live] @ s[live])
        kappa[:] = float(y[live] @ s[live]) / ss if ss > 0 else 0.0
    else:
        keys, at = np.unique(batch, return_inverse=True)
        at = at.reshape(-1)
        ys = np.bincount(at[live], weights=(y * s)[live], minlength=len(keys))
        ss = np.bincount(at[live], weights=(s * s)[live], minlength=len(keys))
        kappa = np.where(ss > 0, ys / np.where(ss > 0, ss, 1.0), 0.0)[at]
    left = (y - kappa * s)[live]
    norm = float(np.linalg.norm(y[live]))
    return float(np.linalg.norm(left)) / (norm or 1.0), kappa


def fit_loop(
    y: np.ndarray, s: np.ndarray, batch: np.ndarray, scale: str, live: np.ndarray
) -> tuple[float, np.ndarray]:
    """:func:`fit` in a plain loop over the batches: its reference."""
    kappa = np.zeros(len(y))
    if scale == "one":
        groups = [list(range(len(y)))]
    else:  # one constant a batch
        groups = [[i for i in range(len(y)) if batch[i] == b] for b in sorted(set(batch.tolist()))]
    for idx in groups:
        num = sum(y[i] * s[i] for i in idx if live[i])
        den = sum(s[i] * s[i] for i in idx if live[i])
        for i in idx:
            kappa[i] = num / den if den > 0 else 0.0
    left = sum((y[i] - kappa[i] * s[i]) ** 2 for i in range(len(y)) if live[i]) ** 0.5
    norm = sum(y[i] ** 2 for i in range(len(y)) if live[i]) ** 0.5
    return left / (norm or 1.0), kappa


AFFINE_B_MAX = 1e3
"""A factor 1 + b/L with b past this is ÷ L (the ``tokens`` length), not a factor of its own."""


def fit_affine(
    y: np.ndarray, s: np.ndarray, L: np.ndarray, batch: np.ndarray, scale: str, live: np.ndarray
) -> tuple[float, np.ndarray, float] | None:
    """(residual, κ per unit, b) of y ≈ κ s (1 + b/L), b one number, κ one or one a batch.

    b from the least squares of y on (s, s/L) in each batch (y ≈ p s + q s/L, b = q/p), the
    batches' median; then κ refitted by :func:`fit` with b held. None where b is not in
    (0, :data:`AFFINE_B_MAX`]: a mean weight κ(1 − k/L) is k tokens of each reply left without
    weight, which the token reading reads (:func:`~eligibility.check.audit.tokens.dropped`).
    """
    keys = np.unique(batch[live]) if scale == "batch" else np.zeros(1)
    bs = []
    for key in keys:
        on = live & ((batch == key) if scale == "batch" else True)
        if on.sum() < 3:
            continue
        design = np.stack([s[on], s[on] / L[on]], 1)
        # lstsq's rank is matrix_rank's (the same cut, max(M, N)·eps·σ₁): one SVD, not two
        (p, q), _, rank, _ = np.linalg.lstsq(design, y[on], rcond=None)
        if rank == 2 and p != 0:
            bs.append(q / p)
    if not bs:
        return None
    b = float(np.median(bs))
    if not (np.isfinite(b) and 0 < b <= AFFINE_B_MAX):
        return None
    residual, kappa = fit(y, s * (1 + b / L), batch, scale, live)
    return residual, kappa, b


def fit_shifted(
    w: np.ndarray, s: np.ndarray, L: np.ndarray, batch: np.ndarray, scale: str, live: np.ndarray
) -> tuple[float, np.ndarray, float] | None:
    """(residual, κ per unit, b) of w ≈ κ s/(L + b), b one number, κ one or one a batch.

    w(L + b) = κ s is linear in (κ, b): w L = κ s − b w, by least squares over the ``live``
    units (one κ column a batch where ``scale`` is ``"batch"``); then κ refitted by
    :func:`fit` with b held. None where b is within 10⁻³ of 0 (that is ÷ L) or L + b is not
    positive on every unit.
    """
    keys = np.unique(batch[live]) if scale == "batch" else np.zeros(1)
    cols = [s * ((batch == k) if scale == "batch" else 1.0) for k in keys]
    design = np.stack([*cols, -w], 1)[live]
    if live.sum() < len(cols) + 2:
        return None
    solved, _, rank, _ = np.linalg.lstsq(design, (w * L)[live], rcond=None)  # rank as above
    if rank < design.shape[1]:
        return None
    b = float(solved[-1])
    if not np.isfinite(b) or abs(b) < 1e-3 or np.any(L + b <= 0):
        return None
    residual, kappa = fit(w * (L + b), s, batch, scale, live)
    return residual, kappa, b


def read_power(y: np.ndarray, a: np.ndarray, live: np.ndarray, signed: bool) -> float | None:
    """The exponent p of y ≈ κ·sign(A)·|A|ᵖ (``signed``) or κ·|A|ᵖ, or None.

    The slope of ln|y| on ln|A| over the ``live`` units where neither is 0. None where it is
    not finite or p is one the grammar names apart: 0 (a sign or a constant), 1 (A or |A|),
    2 unsigned (A²), each within 0.05.
    """
    on = live & (a != 0) & (y != 0)
    if on.sum() < 3:
        return None
    x, v = np.log(np.abs(a[on])), np.log(np.abs(y[on]))
    x0 = x - x.mean()
    if float(x0 @ x0) <= 1e-12:
        return None
    p = float(x0 @ (v - v.mean())) / float(x0 @ x0)
    named = (0.0, 1.0) if signed else (0.0, 1.0, 2.0)
    if not np.isfinite(p) or p <= 0 or min(abs(p - q) for q in named) < 0.05:
        return None
    return p


SLOPES_APART = 1e-3
"""Two slopes whose ratio s is within this of 1 are one line (``identity``)."""


def read_slopes(y: np.ndarray, a: np.ndarray, live: np.ndarray) -> float | None:
    """s of y ≈ κ·(A above 0, s·A below it), or None.

    κ₊ = Σ yA/Σ A² over the ``live`` units with A > 0, κ₋ the same with A < 0, s = κ₋/κ₊.
    None where a side has fewer than 2 units, s is not finite, s ≤ 0 (a part cut or a sign
    flipped: other functions say those) or s is within :data:`SLOPES_APART` of 1.
    """
    kappas = []
    for side in (a > 0, a < 0):
        on = live & side
        aa = float(a[on] @ a[on])
        if on.sum() < 2 or aa <= 0:
            return None
        kappas.append(float(y[on] @ a[on]) / aa)
    if kappas[0] == 0:
        return None
    s = kappas[1] / kappas[0]
    if not np.isfinite(s) or s <= 0 or abs(s - 1) < SLOPES_APART:
        return None
    return s


def _bounds(y: np.ndarray, a: np.ndarray, live: np.ndarray) -> tuple[float, float] | None:
    """The clip [lo, hi] (lo < 0 < hi) read off the weights, or None where it binds on none.

    κ = the y/A of largest size (a clip around 0 only shrinks |f(A)/A|, so the units inside
    it give κ itself), then the largest and smallest y/κ.
    """
    on = live & (a != 0)
    if on.sum() < 3:
        return None
    ratio = y[on] / a[on]
    kappa = float(ratio[np.argmax(np.abs(ratio))])  # a clip around 0 only shrinks |f(A)/A|
    if kappa == 0:
        return None
    v = y[live] / kappa
    lo, hi = float(v.min()), float(v.max())
    binds = np.any(a[live] > hi * (1 + 1e-6) + 1e-12) or np.any(a[live] < lo * (1 + 1e-6) - 1e-12)
    return (lo, hi) if binds and lo < hi else None


def less_first(u: Units, x: np.ndarray) -> np.ndarray:
    """X less the X of its group's first reply, turn by turn (the units come in row order)."""
    _, first, cell = np.unique(
        np.stack([u.group, u.turn]), axis=1, return_index=True, return_inverse=True
    )
    return x - x[first][cell.reshape(-1)]


def discounted(u: Units, gamma: float) -> np.ndarray:
    """Xₖ = Σ_{j ≥ k} γ^(j − k) rⱼ of every unit, in a plain loop.

    Its turn's rewards to go, each turn after it discounted by γ once more. A row's units are
    consecutive, their turns increasing; the rewards of its turns after its last reply (rtg
    less its own) are one turn on.
    """
    x = np.zeros(len(u.own))
    for i in reversed(range(len(x))):
        same_row = i + 1 < len(x) and u.turn[i + 1] > u.turn[i]
        if same_row:
            x[i] = u.own[i] + gamma ** float(u.turn[i + 1] - u.turn[i]) * x[i + 1]
        else:
            x[i] = u.own[i] + gamma * float(u.rtg[i] - u.own[i])
    return x


GAMMAS = np.round(np.arange(0.05, 1.0, 0.01), 2)
"""The discounts a :func:`discounted` return is tried at (1 is the reward-to-go itself)."""


def read_gamma(u: Units, live: np.ndarray) -> float:
    """The γ of :data:`GAMMAS` whose discounted return fits the ``live`` units' weights best.

    The return less its group's leave-one-out mean, one κ.
    """
    scale = u.G / (u.G - 1) if u.G > 1 else 1.0
    left = [
        fit(u.w, shape(u, discounted(u, float(g)), "group") * scale, u.batch, "one", live)[0]
        for g in GAMMAS
    ]
    return float(GAMMAS[int(np.argmin(left))])


def search(u: Units, live: np.ndarray, tol: float) -> tuple[Map | None, Map | None]:
    """(the simplest map that fits the ``live`` units within ``tol``, the closest one tried)."""
    multi_turn = u.turn.max() > 0
    best: Map | None = None
    fits: list[Map] = []
    gamma = read_gamma(u, live) if multi_turn else 1.0
    xs = {r: getattr(u, r).astype(np.float64) for r in (RETURNS if multi_turn else ("rtg",))}
    if multi_turn:  # the discounted return at the γ read off, once for every base
        xs["discounted"] = discounted(u, gamma)
    for (returns, x), base in itertools.product(xs.items(), BASES):
        by = "group" if base in ("loo", "group-relative", "group-batch-std") else base
        a = shape(u, x, by) * u.rows
        if base == "group-batch-std":  # its batch mean is 0 already: ÷ the batch's σ
            a = shape(u, a, "batch-std-1") * u.rows
        if base == "loo" and u.G > 1:
            a = a * u.G / (u.G - 1)
        if base == "group-relative":  # (X − X̄_g)/X̄_g, 0 where the group's mean is 0
            mean = x - a
            a = np.where(mean != 0, a / np.where(mean != 0, mean, 1.0), 0.0)
        if base == "group-first":
            a = less_first(u, x)
        for function, length, scale in itertools.product(FUNCTIONS, LENGTHS, SCALES):
            if length == "episode" and not multi_turn:
                continue
            if function in ("positive", "negative") and base == "none":
                continue  # X itself carries no sign to cut
            fitted_b = length in ("affine", "shifted")
            if fitted_b and function in READ_OFF:
                continue  # one number read off the weights at a time
            y = u.w * _lambda(u, length) if not fitted_b else u.w
            bounds = _bounds(y, a, live) if function == "clip" else None
            if function == "clip" and bounds is None:
                continue
            p = slope = 1.0
            if function in POWERS:
                read = read_power(y, a, live, function == "signed-power")
                if read is None:
                    continue
                p = read
            if function == "slopes":
                read = read_slopes(y, a, live)
                if read is None:
                    continue
                slope = read
            s = apply(function, a, bounds, p, slope) / u.rows
            if not np.any(s[live]):
                continue
            b = 0.0
            if fitted_b:
                fitter = fit_affine if length == "affine" else fit_shifted
                got = fitter(u.w, s, u.tokens.astype(np.float64), u.batch, scale, live)
                if got is None:
                    continue
                residual, kappa, b = got
            else:
                residual, kappa = fit(y, s, u.batch, scale, live)
            found = Map(
                returns,
                base,
                function,
                length,
                scale,
                bounds,
                kappa,
                residual,
                kappa * s / _lambda(u, length, b),
                b,
                p,
                gamma if returns == "discounted" else 1.0,
                slope,
            )
            if best is None or residual < best.residual:
                best = found
            if residual <= tol:
                fits.append(found)
    if not fits:
        return None, best
    # the fewest changes first; among those, the one found first (the search's order)
    return min(fits, key=lambda m: m.changes), best


REPLY_FEATURES = {
    "logp": "ln π(reply), the reply's own log-probability",
    "prob": "π(reply), the reply's own probability",
    "tokens": "L, the reply's token count",
    "whole_ratio": "the reply's importance weight Πₜ π_θ/μ",
    "sampler_ratio": "the reply's sampler weight Πₜ π_old/μ",
    "sampler_mean": "the mean over the reply's tokens of π_old/μ",
}
"""The features of a reply its weight's factor may follow: h = a + b·x."""


ATTACHED_TOL = 1e-3
"""A reply factor a + b·ln π(o) with |b/a − 1| within this is an importance weight attached."""


@dataclass(frozen=True)
class ReplyFactor:
    """Each reply's weight its exact credit times a + b·x, x one of :data:`REPLY_FEATURES`.

    Attributes:
        feature: the key of x; a, b: the fitted line; residual: ‖w̄ − c(a + bx)‖/‖w̄‖.
        predicted: c(a + bx) on every unit.
    """

    feature: str
    a: float
    b: float
    residual: float
    predicted: np.ndarray

    def words(self) -> str:
        """The factor in the loss's words, its constants and residual."""
        line = (
            f"{self.b:.4g}·x"
            if abs(self.a) <= 1e-6 * abs(self.b)
            else f"({self.a:.4g} + {self.b:.4g}·x)"
        )
        return (
            f"each reply's weight is its exact credit × {line}, x = "
            f"{REPLY_FEATURES[self.feature]}; residual {self.residual:.2g}"
        )

    @property
    def attached(self) -> bool:
        """The line is 1 + ln π(o) (b = a): an importance weight left attached.

        A weight h = e^(ln π(o) − c) not detached adds its derivative h' = h to its value.
        """
        return self.feature == "logp" and abs(self.b / self.a - 1.0) <= ATTACHED_TOL

    def findings(self) -> list[Finding]:
        """The one name it gives, with its words."""
        if self.attached:
            return [
                Finding(
                    RATIO_1_BROKEN,
                    self.words() + ": an importance weight π_θ/π_old (1 here) not detached, "
                    "its derivative in the reply's own log-prob added to its value",
                )
            ]
        why = (
            " (a weight that should be detached carries the reply's own log-prob's gradient?)"
            if self.feature == "logp"
            else ""
        )
        return [Finding(REPLY_FACTOR, self.words() + why)]


def reply_factor(
    u: Units,
    credit: np.ndarray,
    live: np.ndarray,
    tol: float,
    ratios: dict[str, np.ndarray] | None = None,
) -> ReplyFactor | None:
    """The first of :data:`REPLY_FEATURES` whose line a + b·x makes w̄ = c(a + bx) (b ≠ 0).

    Least squares of w̄ on (c, c·x) over the ``live`` units with credit; off-policy,
    ``ratios`` holds the reply's own ratios (the keys of :data:`REPLY_FEATURES` after
    ``tokens``), tried after its own features.
    """
    on = live & (credit != 0)
    if on.sum() < 3:
        return None
    features = {"logp": u.logp, "prob": np.exp(u.logp), "tokens": u.tokens.astype(np.float64)}
    features |= ratios or {}
    norm = float(np.linalg.norm(u.w[on])) or 1.0
    for key, x in features.items():
        design = np.stack([credit, credit * x], 1)
        (a, b), *_ = np.linalg.lstsq(design[on], u.w[on], rcond=None)
        residual = float(np.linalg.norm(u.w[on] - design[on] @ (a, b))) / norm
        if residual <= tol and abs(b) * float(np.ptp(x[on])) > 1e-3 * abs(a):
            return ReplyFactor(key, float(a), float(b), residual, design @ (a, b))
    return None


_BASE_WORDS = {
    "loo": "the leave-one-out advantage (the exact credit's)",
    "group": "the group-centred return",
    "group-std-1": "the return whitened within its group (σ ÷ (G − 1))",
    "group-std-0": "the return whitened within its group (σ ÷ G)",
    "group-relative": "the group-centred return over the group's mean return",
    "batch-std-1": "the return whitened over the batch (σ ÷ (N − 1))",
    "batch-std-0": "the return whitened over the batch (σ ÷ N)",
    "group-batch-std": "the group-centred return whitened over the batch (σ ÷ (N − 1))",
    "none": "the return itself (no baseline)",
    "group-first": "the return less its group's first reply's (one other reply's as the "
    "baseline, the first reply's own weight 0)",
}
RETURN_WORDS = {
    "rtg": "its turn's reward-to-go",
    "whole": "the episode's whole return",
    "own": "its own turn's reward only",
    "later": "the rewards of the turns after its own (its own turn's left out)",
    "discounted": "its turn's reward-to-go discounted by γ = {gamma:.3g} a turn",
}
LENGTH_WORDS = {
    "none": "",
    "tokens": " ÷ the reply's token count L",
    "sqrt": " ÷ √L, the square root of the reply's token count",
    "episode": " ÷ the episode's token count",
    "affine": " × (1 + b/L), a factor of the reply's token count L",
    "shifted": " ÷ (L + b), the reply's token count L off by a constant",
}


def _length_words(m: Map) -> str:
    said = LENGTH_WORDS[m.length]
    return said + f" with b = {m.b:.4g}" if m.length in ("affine", "shifted") else said


def _function_words(m: Map) -> str:
    lo, hi = m.bounds if m.bounds is not None else (0.0, 0.0)
    return {
        "identity": "A",
        "abs": "|A|, a function of its advantage that loses the sign",
        "square": "A², a function of its advantage that loses the sign",
        "sign": "sign(A), its advantage's sign alone (its size lost)",
        "positive": "max(A, 0), its advantage's positive part (the replies below the "
        "baseline given no weight)",
        "negative": "min(A, 0), its advantage's negative part (the replies above the "
        "baseline given no weight)",
        "clip": f"A clipped to [{lo:.3g}, {hi:.3g}]",
        "signed-power": f"sign(A)·|A|ᵖ with p = {m.p:.3g}, a power of its advantage that "
        "keeps the sign",
        "power": f"|A|ᵖ with p = {m.p:.3g}, a function of its advantage that loses the sign",
        "slopes": f"A above 0 and s·A below it with s = {m.slope:.3g}: the replies below the "
        f"baseline weighted {m.slope:.3g} times as much for their advantage as those above",
    }[m.function]


def words(m: Map, multi_turn: bool) -> str:
    """The map in the loss's words, its constants and residual."""
    kappa = m.kappa[np.isfinite(m.kappa)]
    k = (
        f"κ = {float(np.median(kappa)):.4g}"
        if m.scale == "one"
        else f"κ from {kappa.min():.3g} to {kappa.max():.3g} by batch"
    )
    said = RETURN_WORDS[m.returns] if multi_turn else "its reward"
    said = said.format(gamma=m.gamma)
    return (
        f"each reply's weight is κ·f(A){_length_words(m)}, A {_BASE_WORDS[m.base]} "
        f"of {said}, f(A) = {_function_words(m)}; {k}; residual {m.residual:.2g}"
    )


def findings(m: Map) -> list[Finding]:
    """The names a map gives (each part that differs from the exact credit's form)."""
    out = []
    if m.returns == "whole":
        out.append(
            Finding(TURNS_WEIGHTED_BY_WHOLE_RETURN, "every turn weighted by the whole return")
        )
    if m.returns == "own":
        out.append(Finding(LATER_REWARDS_WITHHELD, "each turn credited with its own reward"))
    if m.returns == "discounted":
        out.append(
            Finding(
                TURNS_DISCOUNTED,
                f"each turn credited with the later turns' rewards discounted by γ = "
                f"{m.gamma:.3g} a turn, where the objective sums them",
            )
        )
    if m.returns == "later":
        out.append(Finding(OWN_REWARD_WITHHELD, "each turn credited with the later turns' rewards"))
    if m.length == "affine":  # not ÷ L: length-normalised's fix (drop the ÷ L) leaves it
        out.append(Finding(REPLY_FACTOR, f"each reply's weight{_length_words(m)}"))
    elif m.length != "none":
        out.append(Finding(LENGTH_NORMALISED, f"each reply's weight{_length_words(m)}"))
    if m.base.startswith("group-std"):
        out.append(
            Finding(
                STD_NORMALISED,
                "each group's advantages divided by the group's own σ of the return: the "
                "scale differs from prompt to prompt",
            )
        )
    if m.base == "group-relative":
        out.append(
            Finding(
                MEAN_NORMALISED,
                "each group's advantages divided by the group's mean return: the scale "
                "differs from prompt to prompt",
            )
        )
    if m.base == "group-first":
        out.append(
            Finding(
                DROPPED_AT_RANDOM,
                "the first reply of each group is the others' baseline and its own, so it gets "
                "no weight: one reply in G left out by its place in the group (the draws "
                "exchangeable: at random), the rest unbiased, E[ĝ] = κ·(G − 1)/G ∇J",
            )
        )
    if m.base.startswith("batch-std") or m.base == "group-batch-std":
        out.append(Finding(BATCH_WHITENED, "the advantages whitened across the whole batch"))
    if m.function != "identity":
        out.append(Finding(ADVANTAGE_TRANSFORMED, f"each reply's weight is κ·{_function_words(m)}"))
    if m.scale == "batch":
        kappa = m.kappa[np.isfinite(m.kappa)]
        out.append(
            Finding(
                BATCH_DEPENDENT_NORMALISER,
                f"a factor that changes from batch to batch ({kappa.min():.3g} to "
                f"{kappa.max():.3g}): a normaliser counted on the sample (a second "
                "whitening over the batch, say)",
            )
        )
    return out


__all__ = [
    "AFFINE_B_MAX",
    "ATTACHED_TOL",
    "BASES",
    "FUNCTIONS",
    "LENGTHS",
    "LENGTH_WORDS",
    "POWERS",
    "READ_OFF",
    "REPLY_FEATURES",
    "RETURN_WORDS",
    "SCALES",
    "Map",
    "ReplyFactor",
    "apply",
    "discounted",
    "findings",
    "fit",
    "fit_affine",
    "fit_loop",
    "fit_shifted",
    "less_first",
    "read_gamma",
    "read_power",
    "read_slopes",
    "reply_factor",
    "search",
    "words",
]
