r"""With β > 0: the KL's part of each weight read apart, and the rest read as at β = 0.

The objective J = E[R] − β KL(π_θ ‖ π_ref) gives token t of a reply the exact weight

    wₜ = (1/N) (Aᵢ − β Σ_{s ≥ t} dₛ),     dₛ = ℓₛ − ℓ^ref_s,

the reward's credit, one value a reply, less β times the log-ratio summed to go. A loss that
places the KL otherwise puts another function of the log-ratios on each token (an estimator's
gradient, :data:`ESTIMATORS`). Within a reply the reward's part is one value, so

    wₜ − w̄ = κ (gₜ − ḡ)

holds for the estimator g the loss uses, κ its weight (−β/N where it is the objective's β),
κ one value, κ/Lᵤ a reply (the KL averaged over each reply's tokens) or κ/T_b a batch (the KL
averaged over the batch's tokens, T_b its count of the model's tokens: a token mean), as
:data:`LENGTHS` lists them; the rest, w − κ g, is one value a reply and is read as the β = 0
audit reads a loss. An estimator's value clamped (NeMo-RL's, verl's and OpenRLHF's k3 at 10)
leaves the tokens past the clamp off the line: those with the largest k3 (or log-ratio dₜ)
are set apart one by one until the rest fit, and their own KL part is read as a rule
(:class:`Past`: none, or the clamp's value times the score). Where no estimator fits, how the
part that varies within a reply depends on dₜ is said (:func:`describe`):
``kl-estimator-unknown``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from eligibility.check.audit.names import Finding
from eligibility.check.audit.seen import MODEL, Seen
from eligibility.check.audit.tokens import k3
from eligibility.check.mistakes import named

# the mistakes this module names, each declared in eligibility.check.mistakes
KL_ESTIMATOR_UNKNOWN = named("kl-estimator-unknown")
KL_FORWARD = named("kl-forward")
KL_NO_GRADIENT = named("kl-no-gradient")
KL_NORMALISED = named("kl-normalised")
KL_REWARD_ESTIMATE = named("kl-reward-estimate")
KL_TOKEN_LOCAL = named("kl-token-local")
KL_WEIGHT = named("kl-weight")

BATCH_KL_WORDS = (
    "the KL's part of each batch's weights divided by the batch's count of the model's tokens "
    "T_b (the KL a token mean over the batch), where the objective divides by N: each "
    "sequence's KL weighed by N/T_b, a factor that changes from batch to batch"
)
"""What the KL's κ/T_b is said as (``kl-normalised``); where the reward's part has the same
factor a batch, the whole loss is one token mean over the batch, said by the reward's part
(``batch-dependent-normaliser``) and not by this (:func:`~eligibility.check.audit.judge.audit`)."""

FIT_TOL = 1e-3
"""An estimator fits where ‖(w − w̄) − κ(g − ḡ)‖ ≤ this × ‖w − w̄‖ over the replies."""


def to_go(d: np.ndarray, model: np.ndarray) -> np.ndarray:
    """Σ_{s ≥ t} dₛ over the model's tokens of each row (0 elsewhere)."""
    x = np.where(model, d, 0.0)
    return np.where(model, np.flip(np.cumsum(np.flip(x, -1), -1), -1), 0.0)


ESTIMATORS: dict[str, tuple[str, Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    "reward-to-go": ("Σ_{s ≥ t} dₛ, the sequence KL's own gradient (exact)", to_go),
    "token-local": (
        "dₜ alone, each token's own log-ratio (k2 in the loss, or k1 as a per-token reward "
        "without the reward-to-go): the later tokens' KL left out",
        lambda d, m: d,
    ),
    "forward": (
        "(1 − e^(−dₜ)) (k3 in the loss): the gradient of the forward KL(π_ref ‖ π), not the "
        "objective's reverse one",
        lambda d, m: 1.0 - np.exp(-d),
    ),
}
"""Each estimator's per-token g(d): what it is, and the function (d, the model's mask)."""

NAMES = {"token-local": KL_TOKEN_LOCAL, "forward": KL_FORWARD}
"""The finding each estimator other than the exact one gives."""


NO_KL = 1e-3
"""κ within this of 0 (in units of the objective's −β/N) is no KL gradient at all."""

LENGTHS = ("none", "tokens", "batch")
"""The KL's weight κ one value, κ/Lᵤ for each reply (a per-sequence mean of the KL term), or
κ/T_b for each batch (a token mean of the KL term over the batch: T_b the batch's count of the
model's tokens, one factor a batch). The objective's κ is −β/N with the first two, −β with the
last (its ÷ T_b in place of ÷ N)."""

PAST_SHARE = 0.1
"""The most of the weighted tokens a clamp may set apart (past it, off the estimator's line)."""


@dataclass(frozen=True)
class Past:
    """The tokens past a clamp of the KL estimator: which rule, its bound, their KL part.

    Attributes:
        feature: ``"k3"`` (k3ₜ = e^(−dₜ) − 1 + dₜ at or above the bound), ``"d"`` (dₜ at or
            above) or ``"-d"`` (dₜ at or below).
        bound: (the largest value kept on the line, the least set apart): the clamp between.
        count: how many tokens; value: their KL part ÷ (κ/λ), one value (0: no KL weight).
    """

    feature: str
    bound: tuple[float, float]
    count: int
    value: float

    def words(self) -> str:
        """The tokens past the clamp and their KL part, in words."""
        what = {
            "k3": "whose KL value k3 = e^(−dₜ) − 1 + dₜ passes",
            "d": "whose log-ratio dₜ passes",
            "-d": "whose log-ratio dₜ falls below",
        }[self.feature]
        lo, hi = (-self.bound[0], -self.bound[1]) if self.feature == "-d" else self.bound
        part = (
            "get no KL weight (the clamp after the weight: its value has no gradient)"
            if self.value == 0
            else f"get κ·{self.value:.4g} (the clamped value times the score: a constant "
            "in place of the estimator's gradient)"
        )
        return f"the {self.count} tokens {what} a clamp between {lo:.3g} and {hi:.3g} {part}"


@dataclass(frozen=True)
class KLPart:
    """The KL's part of the weights, read: the estimator, κ, the residual, the rest.

    ``length``: one of :data:`LENGTHS`; ``past``: the tokens past a clamp (None where none).
    """

    estimator: str
    kappa: float
    residual: float
    rest: list[Seen]
    length: str = "none"
    past: Past | None = None
    reach: float = np.inf
    """The largest k3 of the tokens the line was read on: past it, a token alone in its reply
    (whose KL part its reply's own weight cannot tell apart) is :func:`unreached`."""
    in_reward: InReward | None = None
    """Where no part varies within a reply: the KL read in each reply's reward instead
    (:func:`in_reward`), or None."""


ZERO_TOL = 1e-6
"""|w| at or below this fraction of the largest is no weight (a token dropped: left out of the
fit, and kept at 0 in the rest, for the token reading to say)."""


def _weighted(s: Seen) -> np.ndarray:
    top = float(np.abs(s.w[s.kind == MODEL]).max(initial=0.0))
    return (s.kind == MODEL) & (np.abs(s.w) > ZERO_TOL * top)


def _centred(seen: list[Seen], g_of: Callable[[Seen], np.ndarray]) -> tuple[np.ndarray, ...]:
    """(w − w̄, g − ḡ) over the weighted tokens of every reply with two or more, flat."""
    ys, xs = [], []
    for s in seen:
        g = g_of(s)
        live = _weighted(s)
        for i in range(len(s.w)):
            at = live[i]
            if at.sum() < 2:
                continue
            ys.append(s.w[i][at] - s.w[i][at].mean())
            xs.append(g[i][at] - g[i][at].mean())
    if not ys:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(ys), np.concatenate(xs)


def _log_ratio(s: Seen) -> np.ndarray:
    return np.where(s.kind == MODEL, s.ell - s.ref, 0.0)  # type: ignore[operator]


@dataclass(frozen=True)
class _Flat:
    """The weighted tokens of every reply with two or more, flat (what a fit reads).

    ``x[name, length]``: g(d)/λ of each estimator (g computed on each row, as it sums to go).
    ``lam[length]``: λ of each token (:func:`_lam`). ``where``: (batch, row, column) of each token.
    """

    w: np.ndarray
    d: np.ndarray
    reply: np.ndarray
    lam: dict[str, np.ndarray]
    x: dict[tuple[str, str], np.ndarray]
    where: tuple[np.ndarray, np.ndarray, np.ndarray]
    replies: int


def _lam(s: Seen, length: str) -> np.ndarray:
    """λ on every position: 1, its row's count of the model's tokens, or its batch's."""
    count = (s.kind == MODEL).sum(1, keepdims=True).astype(np.float64)
    lam = {"none": np.ones_like(count), "tokens": count, "batch": np.full_like(count, count.sum())}
    return np.broadcast_to(lam[length], s.w.shape)


def _flat(seen: list[Seen]) -> _Flat:
    keys = ("w", "d", "reply", "b", "i", "c")
    cols: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    lams: dict[str, list[np.ndarray]] = {length: [] for length in LENGTHS}
    xs: dict[tuple[str, str], list[np.ndarray]] = {
        (name, length): [] for name in ESTIMATORS for length in LENGTHS
    }
    replies = 0
    for b, s in enumerate(seen):
        live, d, model = _weighted(s), _log_ratio(s), s.kind == MODEL
        two = live & (live.sum(1, keepdims=True) >= 2)
        rows, at = np.nonzero(two)
        number = np.cumsum(two.any(1)) - 1 + replies
        for key, v in (
            ("w", s.w[rows, at]),
            ("d", d[rows, at]),
            ("reply", number[rows]),
            ("b", np.full(len(rows), b)),
            ("i", rows),
            ("c", at),
        ):
            cols[key].append(v)
        for length in LENGTHS:
            lams[length].append(_lam(s, length)[rows, at])
        for name, (_, g) in ESTIMATORS.items():
            for length in LENGTHS:
                xs[name, length].append((g(d, model) / _lam(s, length))[rows, at])
        replies += int(two.any(1).sum())
    flat = {k: np.concatenate(v) for k, v in cols.items()}
    return _Flat(
        flat["w"],
        flat["d"],
        flat["reply"].astype(int),
        {k: np.concatenate(v) for k, v in lams.items()},
        {k: np.concatenate(v) for k, v in xs.items()},
        (flat["b"].astype(int), flat["i"].astype(int), flat["c"].astype(int)),
        replies,
    )


def _line(f: _Flat, x: np.ndarray, out: np.ndarray) -> tuple[float, float, np.ndarray] | None:
    """(κ, residual, the reward's part of each reply) of (w − w̄) = κ(x − x̄).

    On the tokens not ``out``, centred over them reply by reply (a reply left with fewer
    than two is left out).
    """
    keep = ~out
    n = np.bincount(f.reply[keep], minlength=f.replies).astype(np.float64)
    two = (n >= 2)[f.reply] & keep
    if not two.any():
        return None
    safe = np.maximum(n, 1.0)
    w_bar = (np.bincount(f.reply[keep], weights=f.w[keep], minlength=f.replies) / safe)[f.reply]
    x_bar = (np.bincount(f.reply[keep], weights=x[keep], minlength=f.replies) / safe)[f.reply]
    y, xc = (f.w - w_bar)[two], (x - x_bar)[two]
    if float(xc @ xc) == 0:
        return None
    kappa = float(xc @ y) / float(xc @ xc)
    residual = float(np.linalg.norm(y - kappa * xc)) / (float(np.linalg.norm(y)) or 1.0)
    rest = np.bincount(f.reply[keep], weights=(f.w - kappa * x)[keep], minlength=f.replies)
    return kappa, residual, rest / safe


PAST_ORDERS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "k3": k3,
    "d": lambda d: d,
    "-d": lambda d: -d,
}
"""The features a clamp of the estimator sets tokens apart by, largest first."""


def _past(
    f: _Flat, x: np.ndarray, lam: np.ndarray, tol: float
) -> tuple[float, float, np.ndarray, Past] | None:
    """The fewest tokens past a clamp whose setting apart leaves the line fitting.

    Tried largest first in each of :data:`PAST_ORDERS`; their KL part must be one value c·κ/λ
    (c = 0: none). Returns (κ, residual, rest, :class:`Past`), or None.
    """
    most = int(PAST_SHARE * len(f.w))
    for feature, of in PAST_ORDERS.items():
        v = of(f.d)
        order = np.argsort(-v, kind="stable")
        for m in range(1, most + 1):
            if v[order[m - 1]] == v[order[min(m, len(v) - 1)]] and m < len(v):
                continue  # a tie: the bound falls between distinct values
            out = np.zeros(len(f.w), bool)
            out[order[:m]] = True
            fitted = _line(f, x, out)
            if fitted is None or fitted[1] > tol:
                continue
            kappa, residual, rest = fitted
            part = (f.w - rest[f.reply])[out] * lam[out] / kappa
            c = float(np.median(part))
            scale = max(float(np.abs(x[~out] * 1.0).max(initial=0.0)), abs(c), 1e-300)
            if np.ptp(part) > 10 * tol * scale:
                continue  # the tokens set apart are no one rule's
            c = 0.0 if abs(c) <= 10 * tol * scale else c
            bound = (float(v[~out].max()), float(v[out].min()))
            return kappa, residual, rest, Past(feature, bound, m, c)
    return None


def separate(seen: list[Seen], tol: float = FIT_TOL) -> KLPart | None:
    """The first of :data:`ESTIMATORS` × :data:`LENGTHS` whose κ g/λ leaves one value a reply.

    Where none fits, the same with the tokens past a clamp set apart (:func:`_past`); else None.
    """
    f = _flat(seen)
    if not len(f.w):
        return None
    for past_tried in (False, True):
        for name in ESTIMATORS:
            for length in LENGTHS:
                x, lam = f.x[name, length], f.lam[length]
                out = np.zeros(len(f.w), bool)
                if past_tried:
                    found = _past(f, x, lam, tol)
                    if found is None:
                        continue
                    kappa, residual, rest, past = found
                    out[_past_tokens(f, past)] = True
                else:
                    fitted = _line(f, x, out)
                    if fitted is None or fitted[1] > tol:
                        continue
                    (kappa, residual, rest), past = fitted, None
                rests = _rest(seen, name, length, kappa, f, rest, out)
                reach = float(PAST_ORDERS["k3"](f.d[~out]).max())
                return KLPart(name, kappa, residual, rests, length, past, reach)
    return None


def _past_tokens(f: _Flat, past: Past) -> np.ndarray:
    """The flat tokens a :class:`Past` sets apart (its feature at or beyond its bound)."""
    return PAST_ORDERS[past.feature](f.d) >= past.bound[1]


def _rest(
    seen: list[Seen],
    name: str,
    length: str,
    kappa: float,
    f: _Flat,
    rest: np.ndarray,
    out: np.ndarray,
) -> list[Seen]:
    """Each batch with its reward's part: w − κ g/λ on its weighted tokens (0 kept 0).

    A reply of two tokens or more holds the one value the fit gives it (``rest``, the mean of
    w − κ g/λ over its tokens): the fit is taken because κ g/λ leaves one value a reply within
    its tolerance, relative to the KL's spread, and what it leaves token by token is the loss's
    rounding of the whole weight (bf16 autocast: ≈ 0.2 % of it), which beside a reward's part
    far smaller than the KL's would read as a factor per token. The tokens set apart past a
    clamp hold their reply's reward part too.
    """
    g = ESTIMATORS[name][1]
    done = []
    for s in seen:
        x = g(_log_ratio(s), s.kind == MODEL) / _lam(s, length)
        done.append(replace(s, w=np.where(_weighted(s), s.w - kappa * x, s.w), beta=0.0))
    b, i, c = f.where
    for bb, ii, cc, value in zip(b, i, c, rest[f.reply], strict=True):
        done[bb].w[ii, cc] = value
    return done


def unreached(part: KLPart, seen: list[Seen]) -> list[np.ndarray]:
    """Per batch, the weighted tokens alone in their reply whose k3 passes :attr:`KLPart.reach`.

    Their KL part is not on the line read within the replies of two tokens or more, and their
    reply holds no other token to tell it apart by: the reward's map of the other replies
    tells it (:func:`settle`).
    """
    out = []
    for s in seen:
        live = _weighted(s)
        alone = live & (live.sum(1, keepdims=True) == 1)
        out.append(alone & (PAST_ORDERS["k3"](_log_ratio(s)) > part.reach))
    return out


def settle(
    part: KLPart, seen: list[Seen], alone: list[np.ndarray], reward: list[np.ndarray]
) -> KLPart | None:
    """The tokens :func:`unreached` read as past a clamp, where one rule says their KL part.

    ``reward``: per batch, the reward's part the map of the other replies gives each of the
    ``alone`` tokens (its reply's weight by that map). Their KL part w − reward is c·κ/λ with
    one c for all (0: none; the clamp's value times the score otherwise), or they are no rule's,
    or on the estimator's own line after all (None). Returns the part with them set apart: the
    rest holds their reward part.
    """
    if part.kappa == 0:
        return None  # no KL weight at all: no clamp of it to read
    g = ESTIMATORS[part.estimator][1]
    cs, on, k3s = [], [], []
    for s, at, r in zip(seen, alone, reward, strict=True):
        lam = _lam(s, part.length)[at]
        cs.append((s.w[at] - r) * lam / part.kappa)
        on.append(g(_log_ratio(s), s.kind == MODEL)[at])
        k3s.append(PAST_ORDERS["k3"](_log_ratio(s))[at])
    c_all = np.concatenate(cs) if cs else np.zeros(0)
    if not len(c_all):
        return None
    c = float(np.median(c_all))
    scale = max(abs(c), 1.0)
    if np.all(np.abs(c_all - np.concatenate(on)) <= 10 * FIT_TOL * scale):
        return None  # on the estimator's own line: no clamp
    if np.ptp(c_all) > 10 * FIT_TOL * scale:
        return None
    c = 0.0 if abs(c) <= 10 * FIT_TOL else c
    k3_all = np.concatenate(k3s)
    past = Past("k3", (part.reach, float(k3_all.min())), len(c_all), c)
    if part.past is not None:  # the replies of two tokens or more set some apart already
        if part.past.feature != "k3" or abs(part.past.value - c) > 10 * FIT_TOL * scale:
            return None
        past = Past("k3", part.past.bound, part.past.count + len(c_all), c)
    rest = []
    for r_s, at, r in zip(part.rest, alone, reward, strict=True):
        w = r_s.w.copy()
        w[at] = r
        rest.append(replace(r_s, w=w))
    return replace(part, rest=rest, past=past)


REPLY_SUMS: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    "k1": ("Σₜ dₜ, the reply's log-ratio summed (k1)", lambda d: d),
    "k3": ("Σₜ (e^(−dₜ) − 1 + dₜ), k3 summed", k3),
    "k2": ("Σₜ dₜ²/2, k2 summed", lambda d: d * d / 2),
}
"""The KL estimates a loss may sum over a reply and take off its reward, Sᵢ = Σₜ h(dₜ). With
k1, REINFORCE on R − β Sᵢ is the objective's gradient in mean (E[dₛ ∇ℓₜ] = 0 for s < t, so the
whole sum weighs each token as the sum to go does); with k2 or k3 it is not: their mean is not
the KL's (k2), or their own gradient, E[∇k3], is left out where it is not 0 (k3)."""

BASES: dict[str, Callable[[np.ndarray, int], np.ndarray]] = {
    "no baseline": lambda x, G: x,
    "the others' mean": lambda x, G: (
        (G * x.reshape(-1, G) - x.reshape(-1, G).sum(1, keepdims=True)) / (G - 1)
    ).reshape(-1),
}
"""The baselines a reply's shaped reward may be centred by: none, or its group's others' mean
(leave-one-out, × G/(G − 1): the form whose weight 1/N is unbiased; a group mean that includes
the reply itself is (G − 1)/G of it, a constant the fit's weights carry)."""


@dataclass(frozen=True)
class InReward:
    """The KL read in each reply's reward: wᵢ = (a·B(Rᵢ) − κ·B'(Sᵢ))/λᵢ on every reply.

    Attributes:
        estimate: the key of :data:`REPLY_SUMS` (h summed over the reply).
        ratio: κ·N/β, the weight the loss gives the sum against the objective's β/N.
        base, kl_base: the baseline B of the reward and B' of the sum (:data:`BASES`).
        length: "none" (λ = 1) or "tokens" (λᵢ = Lᵢ, the reply's mean over its tokens).
        residual: ‖w − fit‖/‖w‖ over the replies.
    """

    estimate: str
    ratio: float
    base: str
    kl_base: str
    length: str
    residual: float

    def words(self) -> str:
        """The reading in words."""
        if self.base == "no baseline":
            where = "with no baseline"
        elif self.kl_base == self.base:
            where = f"before the baseline ({self.base})"
        else:
            where = f"after the baseline ({self.base})"
        less = "less" if self.ratio >= 0 else "plus"
        per = ", the whole ÷ the reply's token count L" if self.length == "tokens" else ""
        return (
            f"each reply's weight is one value, its reward {less} {abs(self.ratio):.4g}·β "
            f"times {REPLY_SUMS[self.estimate][0]}, {where}{per} (residual "
            f"{self.residual:.1e}): the KL taken off each reply's reward"
        )


def in_reward(part: KLPart, seen: list[Seen], tol: float = FIT_TOL) -> KLPart:
    """Where the KL's part varies within no reply (κ ≈ 0): the KL read in each reply's reward.

    Each reply's weight wᵢ (one value: its weighted tokens' mean, 0 where it has none) is
    fitted on every batch's replies as (a·B(Rᵢ) + b·B'(Sᵢ))/λᵢ for each estimate h of
    :data:`REPLY_SUMS`, baselines B, B' (:data:`BASES`; B' is B or none) and λ (1, or the
    reply's token count); the fit within ``tol`` whose b ≠ 0 gives the sum's weight κ = −b
    against the objective's β/N. The rest holds a·B(Rᵢ)/λᵢ on the reply's tokens (the
    reward's part, read as at β = 0). Unchanged where none fits, the KL varies within replies,
    or a reply holds more than one turn.
    """
    n, beta = len(seen[0].w), seen[0].beta
    if abs(weight_factor(part, seen)) > NO_KL or any(s.turn.max() > 0 for s in seen):
        return part
    G = seen[0].group_size
    w: list[np.ndarray] = []
    R: list[np.ndarray] = []
    L: list[np.ndarray] = []
    S: dict[str, list[np.ndarray]] = {h: [] for h in REPLY_SUMS}
    for s in seen:
        model, live = s.kind == MODEL, _weighted(s)
        w.append(np.where(live, s.w, 0.0).sum(1) / np.maximum(live.sum(1), 1))
        R.append(np.asarray(s.rewards, np.float64)[:, 0])
        L.append(np.maximum(model.sum(1), 1).astype(np.float64))
        d = _log_ratio(s)
        for h, (_, fn) in REPLY_SUMS.items():
            S[h].append(np.where(model, fn(d), 0.0).sum(1))
    y, lengths = np.concatenate(w), np.concatenate(L)
    lam_of = {"none": np.ones(len(lengths)), "tokens": lengths}
    norm = float(np.linalg.norm(y)) or 1.0
    best: tuple[float, str, str, str, str, float, float] | None = None
    for h in REPLY_SUMS:
        for base, B in BASES.items():
            for kl_base in dict.fromkeys((base, "no baseline")):
                for length, lam in lam_of.items():
                    X = np.stack(
                        [
                            np.concatenate([B(r, G) for r in R]) / lam,
                            np.concatenate([BASES[kl_base](x, G) for x in S[h]]) / lam,
                        ],
                        1,
                    )
                    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
                    left = float(np.linalg.norm(y - X @ coef)) / norm
                    if best is None or left < best[0]:
                        best = (left, h, base, kl_base, length, float(coef[0]), float(coef[1]))
    if best is None or best[0] > tol:
        return part
    left, h, base, kl_base, length, a, b = best
    if abs(b * n / beta) <= NO_KL:
        return part  # no KL in the reward either: the part's own reading stands
    found = InReward(h, -b * n / beta, base, kl_base, length, left)
    rest = []
    for s in seen:
        count = np.maximum((s.kind == MODEL).sum(1), 1) if length == "tokens" else 1.0
        reward = a * BASES[base](np.asarray(s.rewards, np.float64)[:, 0], G) / count
        rest.append(replace(s, w=np.where(_weighted(s), reward[:, None], s.w), beta=0.0))
    return replace(part, rest=rest, in_reward=found)


SHAPES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "dₜ": lambda d: d,
    "dₜ²": lambda d: d * d,
    "e^(−dₜ)": lambda d: np.exp(-d),
    "e^(dₜ)": np.exp,
    "|dₜ|": np.abs,
    "sign(dₜ)": np.sign,
}
"""The shapes tried where no estimator fits, to say how the weights follow dₜ."""


def weight_factor(part: KLPart, seen: list[Seen]) -> float:
    """κ over the objective's: κ·N/(−β), or κ/(−β) where the KL is a token mean over the batch."""
    per = 1 if part.length == "batch" else len(seen[0].w)
    return part.kappa * per / -seen[0].beta


def findings(part: KLPart, seen: list[Seen]) -> list[Finding]:
    """The names the KL's part gives: its estimator's, its normaliser's, its weight's where not β.

    The weight is held against the objective's κ for its :data:`LENGTHS`: −β/N, or −β where
    the KL is a token mean over the batch (the batch's count of tokens in place of N, a
    ``kl-normalised``, said apart from the weight).
    """
    if part.in_reward is not None:
        return reward_findings(part.in_reward)
    n = len(seen[0].w)
    per = 1 if part.length == "batch" else n
    factor = weight_factor(part, seen)
    if abs(factor) <= NO_KL:
        return [
            Finding(
                KL_NO_GRADIENT,
                f"the KL's part of each weight is {factor:.2g} times the objective's β = "
                f"{seen[0].beta:g}: within each reply the weights do not move with the "
                "log-ratio to the reference at all",
            )
        ]
    out = []
    words = ESTIMATORS[part.estimator][0]
    past = "" if part.past is None else f"; {part.past.words()}"
    if part.estimator in NAMES:
        out.append(
            Finding(
                NAMES[part.estimator], f"the KL's part of each token's weight is κ·{words}{past}"
            )
        )
    elif past:
        out.append(Finding(KL_ESTIMATOR_UNKNOWN, f"the KL's part of each token's weight{past}"))
    if part.length == "tokens":
        out.append(
            Finding(
                KL_NORMALISED,
                "the KL's part of each reply's weights divided by its token count L (the KL "
                "averaged over each reply's tokens): each sequence's KL weighed by 1/L",
            )
        )
    if part.length == "batch":
        out.append(
            Finding(
                KL_NORMALISED,
                BATCH_KL_WORDS,
            )
        )
    if abs(factor - 1.0) > 1e-3:
        out.append(
            Finding(
                KL_WEIGHT,
                f"the KL's part of each weight is {factor:.4g} times the objective's β = "
                f"{seen[0].beta:g}"
                + (f" (÷ N = {n})" if per == n else " (÷ T_b)")
                + ": another KL weight, or another normaliser",
            )
        )
    return out


SHAPE_FITS = 0.01
"""A shape of :data:`SHAPES` whose residual (relative) is at most this describes the KL's
part found, not the closest to it."""


def reward_findings(found: InReward) -> list[Finding]:
    """The names the KL read in each reply's reward gives.

    None where it is k1 at the objective's β, summed (exact in mean); its estimate's and its
    weight's otherwise.
    """
    out = []
    if found.estimate != "k1":
        out.append(Finding(KL_REWARD_ESTIMATE, found.words()))
    if abs(found.ratio - 1.0) > 1e-2:
        sign = (
            " (its sign turned over: the log-ratio written the other way)"
            if (abs(found.ratio + 1.0) <= 1e-2)
            else ""
        )
        out.append(
            Finding(
                KL_WEIGHT,
                f"the KL in each reply's reward is weighted {found.ratio:.4g} times the "
                f"objective's β{sign}: " + found.words(),
            )
        )
    return out  # a ÷ L of the whole reply is the reward part's to say (length-normalised)


def describe(seen: list[Seen]) -> Finding:
    """How the part of each weight that varies within a reply follows dₜ (no estimator fits)."""
    best: tuple[float, str, float] | None = None
    for said, h in SHAPES.items():
        y, x = _centred(seen, lambda s, h=h: h(_log_ratio(s)))
        if not len(y) or float(x @ x) == 0:
            continue
        k = float(x @ y) / float(x @ x)
        left = float(np.linalg.norm(y - k * x)) / (float(np.linalg.norm(y)) or 1.0)
        if best is None or left < best[0]:
            best = (left, said, k)
    if best is None:
        return Finding(
            KL_ESTIMATOR_UNKNOWN,
            "no reply of two tokens or more: the KL's part of the weights is not read",
        )
    left, said, k = best
    shape = f"{k:.3g}·{said} (dₜ = ℓₜ − ℓ^ref_t)"
    if left <= SHAPE_FITS:
        return Finding(
            KL_ESTIMATOR_UNKNOWN,
            f"the weights vary within a reply as {shape} (residual {left:.1%}), the gradient "
            "of none of the KL estimators",
        )
    return Finding(
        KL_ESTIMATOR_UNKNOWN,
        "the weights vary within a reply as none of the KL estimators' gradients: closest, "
        f"{shape}, off by {left:.1%}",
    )


__all__ = [
    "BASES",
    "BATCH_KL_WORDS",
    "ESTIMATORS",
    "LENGTHS",
    "NAMES",
    "NO_KL",
    "PAST_ORDERS",
    "PAST_SHARE",
    "REPLY_SUMS",
    "SHAPES",
    "InReward",
    "KLPart",
    "Past",
    "describe",
    "findings",
    "in_reward",
    "reward_findings",
    "separate",
    "settle",
    "to_go",
    "unreached",
]
