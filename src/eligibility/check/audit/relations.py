r"""Where a loss's weights differ from the exact credit, and how: the audit's findings.

On each audited batch, wᵢₜ = ∂L/∂ℓᵢₜ (:mod:`~eligibility.check.audit.seen`) is held against
the structure of the exact credit (:mod:`~eligibility.check.audit.credit`):

1. **Tokens scored that should not be**: w ≠ 0 on the prompt, the padding, the world's tokens
   (by their place in each world answer: "the first token of each answer").
2. **Entries read that are not the token's**: the logits at a position read for another token
   (the token at the position itself: no shift), or for the whole distribution (an entropy, a
   KL over the vocabulary).
3. **The model's tokens that get no weight**: the EOS token, a truncated reply, a turn.
4. **How the rest relate** (where β = 0: the credit is then one value per reply): within a
   reply, a weight that varies with the token's own probability or the sampler's (a per-token
   ratio, a cap, a floor); across replies, the fit of w̄ᵤ (the reply's weight) among

       w̄ᵤ · λᵤ = κ · A(Xᵤ),

   X the return each reply is credited with (its reward-to-go, the whole return, its own
   turn's reward), λ a length (1, the reply's token count, the episode's), and A one of: the
   group-centred X (any group-mean baseline: leave-one-out is G/(G − 1) times it), X itself,
   the group-whitened X (σ of the group, ÷ G or G − 1), the batch-centred or batch-whitened X,
   or the group-centred X times a factor per batch (a normaliser counted over the batch). The
   first that fits (relative residual ≤ :data:`FIT_TOL`), simplest first, is the relation;
   κ against the leave-one-out's is the constant.

Each finding is a :class:`Finding`: the name the check gives it (the families' diagnoses where
they mean the same), where it is, and its share of the weight. The vectorised fits are held
against plain loops in the tests.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np

from eligibility.check.audit.credit import leave_one_out, reward_to_go
from eligibility.check.audit.names import Finding
from eligibility.check.audit.seen import KINDS, MODEL, PADDING, PROMPT, WORLD, Seen
from eligibility.check.mistakes import named

# the mistakes this module names, each declared in eligibility.check.mistakes
NO_SHIFT = named("no-shift")
PADDING_IN_LOSS = named("padding-in-loss")
PER_TOKEN_WEIGHT = named("per-token-weight")
POSITION_WEIGHTED = named("position-weighted")
PROMPT_IN_LOSS = named("prompt-in-loss")
READS_WHOLE_DISTRIBUTION = named("reads-whole-distribution")
WORLD_TOKENS_TRAINED = named("world-tokens-trained")
WRONG_ENTRY = named("wrong-entry")

ZERO_TOL = 1e-6
"""|w| at or below this fraction of the largest weight on the model's tokens is no weight
(a mask multiplies by an exact 0; float32 arithmetic leaves ≈ 1e-8)."""

FIT_TOL = 1e-3
"""A relation fits where ‖w − fit‖ ≤ this × ‖w‖ (float32 losses, ε in a std: ≈ 1e-4)."""

COARSE_TOL = 2e-2
"""The tolerance tried where none fits at :data:`FIT_TOL`: a loss computed in bf16 (a
framework's autocast) leaves its weights ≈ 0.4 % from any exact relation; a fit found so is
said with it."""

VARIES_TOL = 1e-4
"""A reply's weights vary within it where they spread by more than this (relative)."""


def _scale(seen: list[Seen]) -> float:
    """The largest |w| on the model's tokens (the reference for 'no weight')."""
    tops = [np.abs(s.w[s.kind == MODEL]).max(initial=0.0) for s in seen]
    tops += [np.abs(s.w).max(initial=0.0) for s in seen] if max(tops, default=0.0) == 0 else []
    return max(tops, default=0.0)


def _share(seen: list[Seen], pick: list[np.ndarray]) -> float:
    total = sum(float(np.abs(s.w).sum()) for s in seen)
    return sum(float(np.abs(s.w[m]).sum()) for s, m in zip(seen, pick, strict=True)) / (
        total or 1.0
    )


def _rows(count: int, of: int, what: str) -> str:
    return f"{'every' if count == of else f'{count} of {of}'} {what}"


def leaks(seen: list[Seen]) -> list[Finding]:
    """Tokens the model did not write that the loss weights, by kind and place."""
    top = _scale(seen)
    out = []
    on = [(np.abs(s.w) > ZERO_TOL * top) & (s.kind != MODEL) & (s.entry >= 0) for s in seen]
    for kind, name in ((PROMPT, PROMPT_IN_LOSS), (PADDING, PADDING_IN_LOSS)):
        pick = [m & (s.kind == kind) for s, m in zip(seen, on, strict=True)]
        rows = sum(int(p.any(1).sum()) for p in pick)
        if rows:
            n = sum(len(s.w) for s in seen)
            out.append(
                Finding(
                    name,
                    f"the {KINDS[kind]} scored in {_rows(rows, n, 'rows')}",
                    _share(seen, pick),
                    leak=True,
                )
            )
    pick = [m & (s.kind == WORLD) for s, m in zip(seen, on, strict=True)]
    if any(p.any() for p in pick):
        places = sorted({int(a) for s, p in zip(seen, pick, strict=True) for a in s.world_at[p]})
        every = sorted({int(a) for s in seen for a in s.world_at[s.kind == WORLD]})
        with_world = sum(int((s.kind == WORLD).any(1).sum()) for s in seen)
        rows = sum(int(p.any(1).sum()) for p in pick)
        live = [(np.abs(s.w) > ZERO_TOL * top) & (s.kind == MODEL) for s in seen]
        weighed = sum(  # the episodes whose own tokens the loss weighs at all
            int(((s.kind == WORLD).any(1) & m.any(1)).sum())
            for s, m in zip(seen, live, strict=True)
        )
        if places == every:
            which = "every token of the world's answers"
        elif places == list(range(len(places))):  # a prefix of every answer: its header
            k = len(places)
            first = "first token" if k == 1 else f"first {k} tokens"
            which = f"the {first} of each world answer (a role header)"
        else:
            which = f"the {', '.join(_ordinal(a) for a in places)} tokens of each world answer"
        out.append(
            Finding(
                WORLD_TOKENS_TRAINED,
                f"{which}, in "
                + (
                    f"every episode the loss weighs ({rows} of {with_world})"
                    if rows == weighed and rows < with_world
                    else _rows(rows, with_world, "episodes")
                ),
                _share(seen, pick),
                leak=True,
            )
        )
    return out


def _ordinal(k: int) -> str:
    return {0: "first", 1: "second", 2: "third"}.get(k, f"{k + 1}th")


def entries(seen: list[Seen]) -> list[Finding]:
    """Positions whose gradient reads another entry than the sampled token's log-prob."""
    top = _scale(seen)
    shifted, other, whole = 0, 0, 0
    for s in seen:
        if s.ids is None:
            continue
        live = np.abs(s.w) > ZERO_TOL * top
        nxt = s.ids[:, 1:]
        own = s.ids[:, :-1]
        wrong = (s.entry != nxt) & ((s.kind == MODEL) | live)
        whole += int((wrong & (s.entry < 0) & (s.kind == MODEL)).sum())
        shifted += int((wrong & (s.entry == own) & (s.entry >= 0)).sum())
        other += int((wrong & (s.entry != own) & (s.entry >= 0)).sum())
    out = []
    if shifted:
        out.append(
            Finding(
                NO_SHIFT,
                f"{shifted} positions read the logits at a token's own "
                "position for that token (logits[:, t] predicts input_ids[:, t + 1])",
                leak=True,
            )
        )
    if other:
        out.append(
            Finding(
                WRONG_ENTRY,
                f"{other} positions read the log-prob of another token than the one sampled there",
                leak=True,
            )
        )
    if whole:
        out.append(
            Finding(
                READS_WHOLE_DISTRIBUTION,
                f"{whole} of the model's positions read "
                "more of the logits than the sampled token's log-prob (an entropy, "
                "or a KL over the whole vocabulary): the audit's weights there are "
                "that term's projection",
            )
        )
    return out


@dataclass
class Units:
    """The model's replies of the audited batches as units (one per row and turn), flat.

    Attributes:
        w: each unit's mean weight; spread its weights' largest relative spread.
        batch, group, turn, row: where it is (group numbered across batches).
        tokens: its model tokens; episode: its row's model tokens.
        rtg, whole, own, later: the return from its turn on, the row's whole return, its
            turn's own reward, the rewards of the turns after its own.
        part: the rank share and micro-batch of its row (numbered across batches).
        width: its batch's count of model tokens.
        truncated: its row's last reply was cut at T.
        zero: it has no weight at all.
        rows: its batch's number of rows N (the exact credit is the batch mean's: ÷ N).
        logp: ln π of the reply, Σₜ ℓₜ over its tokens.
    """

    w: np.ndarray
    spread: np.ndarray
    batch: np.ndarray
    group: np.ndarray
    turn: np.ndarray
    tokens: np.ndarray
    episode: np.ndarray
    rtg: np.ndarray
    whole: np.ndarray
    own: np.ndarray
    later: np.ndarray
    part: np.ndarray
    width: np.ndarray
    truncated: np.ndarray
    zero: np.ndarray
    rows: np.ndarray
    logp: np.ndarray
    G: int


def units(seen: list[Seen]) -> Units:
    """Every (row, turn) of the model's tokens, in a plain loop."""
    top = _scale(seen)
    cols: dict[str, list[float]] = {k: [] for k in Units.__dataclass_fields__ if k != "G"}
    groups = 0
    parts = 0
    for b, s in enumerate(seen):
        G = s.group_size
        rtg = reward_to_go(s.rewards)
        n_model = int((s.kind == MODEL).sum())
        for i in range(len(s.w)):
            episode = int((s.kind[i] == MODEL).sum())
            for k in sorted({int(t) for t in s.turn[i] if t >= 0}):
                at = (s.kind[i] == MODEL) & (s.turn[i] == k)
                w = s.w[i][at]
                weighted = np.abs(w) > ZERO_TOL * top
                w = w[weighted] if weighted.any() else w  # a token dropped: tokens.dropped()
                mean = float(w.mean())
                spread = float(np.ptp(w)) / max(abs(mean), ZERO_TOL * top, 1e-300)
                row = {
                    "w": mean,
                    "spread": spread,
                    "batch": b,
                    "group": groups + i // G,
                    "turn": k,
                    "tokens": int(at.sum()),
                    "episode": episode,
                    "logp": float(s.ell[i][at].sum()),
                    "rtg": rtg[i, k],
                    "whole": rtg[i, 0],
                    "own": s.rewards[i, k],
                    "later": rtg[i, k] - s.rewards[i, k],
                    "part": parts + int(s.part[i]),
                    "width": n_model,
                    "truncated": bool(s.truncated[i]),
                    "rows": len(s.w),
                    "zero": bool(np.all(np.abs(w) <= ZERO_TOL * top)),
                }
                for key, value in row.items():
                    cols[key].append(value)
        groups += len(s.w) // G
        parts += int(s.part.max()) + 1
    arrays = {k: np.asarray(v) for k, v in cols.items()}
    return Units(**arrays, G=seen[0].group_size)  # type: ignore[arg-type]


def _credit(u: Units) -> np.ndarray:
    """The exact credit of each unit: its turn's reward-to-go less the leave-one-out mean.

    Per (group, turn) cell of n units, xᵢ − the others' mean = (n/(n − 1))(xᵢ − x̄) (x itself
    where n = 1); ÷ N, the batch's rows (:func:`credit_loop` is the same in a plain loop).
    """
    _, cell = np.unique(np.stack([u.group, u.turn]), axis=1, return_inverse=True)
    cell = cell.reshape(-1)
    n = np.bincount(cell).astype(np.float64)
    d = u.rtg - (np.bincount(cell, weights=u.rtg) / n)[cell]
    c = np.where(n[cell] > 1, d * n[cell] / np.maximum(n[cell] - 1, 1), u.rtg)
    return c / u.rows


def others_baseline(u: Units, tol: float = FIT_TOL) -> float | None:
    """κ where every reply's weight is κ (Rᵢ − b), b a function of its group's other rewards.

    A baseline b taken from the prompt and the other replies' rewards of the group (their
    median, their mean, any statistic of them) never depends on the reply itself, so the
    credit κ (Rᵢ − b) is the exact one's mean up to κ. Replies of one prompt whose groups'
    other rewards are the same multiset share b: within each such cell wᵢ = κ Rᵢ + c_cell, one
    κ over every cell that holds two rewards or more, fitted to ``tol``. Single replies only
    (a unit a row); None where it does not fit or no cell holds two rewards.
    """
    if u.turn.max() > 0:
        return None
    first = {int(b): int(u.group[u.batch == b].min()) for b in np.unique(u.batch)}
    prompt = u.group - np.asarray([first[int(b)] for b in u.batch])
    keys: dict[tuple, int] = {}
    cell = np.zeros(len(u.w), int)
    for g in np.unique(u.group):  # a plain loop: a few groups a batch
        at = np.nonzero(u.group == g)[0]
        for i in at:
            others = tuple(sorted(float(u.rtg[j]) for j in at if j != i))
            cell[i] = keys.setdefault((int(prompt[i]), others), len(keys))
    n = np.bincount(cell).astype(np.float64)
    r_bar = (np.bincount(cell, weights=u.rtg) / n)[cell]
    w_bar = (np.bincount(cell, weights=u.w) / n)[cell]
    x, y = u.rtg - r_bar, u.w - w_bar
    if float(x @ x) == 0:
        return None
    kappa = float(x @ y) / float(x @ x)
    scale = float(np.linalg.norm(u.w)) or 1.0
    if float(np.linalg.norm(y - kappa * x)) > tol * scale:
        return None
    return kappa


def credit_loop(u: Units) -> np.ndarray:
    """:func:`_credit` in a plain loop (its reference), by ``credit.leave_one_out``."""
    c = np.zeros(len(u.w))
    for g in np.unique(u.group):
        for k in np.unique(u.turn[u.group == g]):
            at = (u.group == g) & (u.turn == k)
            c[at] = leave_one_out(u.rtg[at], int(at.sum())) / u.rows[at]
    return c


RETURNS = ("rtg", "whole", "own", "later")
LENGTHS = ("none", "tokens", "episode")
FORMS = (
    "group",
    "none",
    "group-std-1",
    "group-std-0",
    "batch-mean",
    "batch-std-1",
    "batch-std-0",
    "batch-factor",
    "part-factor",
)
"""The relations tried, simplest first (the module's docstring)."""


def shape(u: Units, x: np.ndarray, form: str) -> np.ndarray:
    """A(X) of every unit for one of :data:`FORMS` (the per-batch factors left free: 1).

    Centred (and whitened) within each group, or each batch for ``batch-*``, turn by turn
    (:func:`shape_loop` is the same in a plain loop).
    """
    if form == "none":
        return x.astype(np.float64) / u.rows
    by = u.batch if form.startswith(("batch-mean", "batch-std")) else u.group
    _, cell = np.unique(np.stack([by, u.turn]), axis=1, return_inverse=True)
    cell = cell.reshape(-1)
    count = np.bincount(cell).astype(np.float64)
    d = x - (np.bincount(cell, weights=x) / count)[cell]
    if form.endswith(("std-0", "std-1")):
        dof = np.maximum(count - int(form[-1]), 1.0)
        sd = np.sqrt(np.bincount(cell, weights=d * d) / dof)[cell]
        d = np.where(sd > 0, d / np.where(sd > 0, sd, 1.0), 0.0)
    return d / u.rows


def shape_loop(u: Units, x: np.ndarray, form: str) -> np.ndarray:
    """:func:`shape` in a plain loop over the groups (or batches) and turns: its reference."""
    if form == "none":
        return x.astype(np.float64) / u.rows
    by = u.batch if form.startswith(("batch-mean", "batch-std")) else u.group
    out = np.zeros(len(x))
    for g in np.unique(by):
        for k in np.unique(u.turn[by == g]):
            at = (by == g) & (u.turn == k)
            d = x[at] - x[at].mean()
            if form.endswith(("std-0", "std-1")):
                sd = np.sqrt((d**2).sum() / max(int(at.sum()) - int(form[-1]), 1))
                d = d / sd if sd > 0 else 0.0 * d
            out[at] = d / u.rows[at]
    return out


def fit(u: Units, w: np.ndarray, s: np.ndarray, form: str) -> tuple[float, np.ndarray]:
    """(relative residual, κ per unit) of w ≈ κ s: one κ, or one a batch or a part."""
    kappa = np.zeros(len(w))
    by = {"batch-factor": u.batch, "part-factor": u.part}.get(form)
    keys = [None] if by is None else list(np.unique(by))
    for key in keys:
        at = np.ones(len(w), bool) if key is None else by == key  # type: ignore[comparison-overlap]
        ss = float(s[at] @ s[at])
        kappa[at] = float(w[at] @ s[at]) / ss if ss > 0 else np.nan  # nan: no credit to scale
    kappa = np.where(np.isnan(kappa), 0.0, kappa) if by is None else kappa
    norm = float(np.linalg.norm(w))
    left = w - np.nan_to_num(kappa) * s
    return float(np.linalg.norm(left)) / (norm or 1.0), kappa


@dataclass(frozen=True)
class Relation:
    """The relation of the replies' weights to the exact credit that fits (:func:`relate`)."""

    returns: str
    length: str
    form: str
    kappa: np.ndarray
    residual: float
    units: Units
    """The units fitted (those given no weight where their credit is not 0 left out)."""


def relate(
    u: Units,
    every: bool = False,
    shapes: dict[tuple[str, str], np.ndarray] | None = None,
    tol: float = FIT_TOL,
    leave: np.ndarray | None = None,
) -> Relation | None:
    """The first relation of :data:`RETURNS` × :data:`LENGTHS` × :data:`FORMS` that fits.

    ``every``: fitted to every unit; else the units given no weight where their exact credit
    is not 0 are left out (:func:`drops` says them). ``shapes``: A(X) by (return, form),
    filled and reused (they depend on the units' places and returns, not their weights).
    ``tol``: the relative residual a fit may leave. ``leave``: units left out of the fit
    besides (their A(X) still computed with their groups).
    """
    shapes = {} if shapes is None else shapes
    live = np.ones(len(u.w), bool) if every else ~u.zero | (np.abs(_credit(u)) == 0)
    live = live if leave is None else live & ~leave
    sub = Units(
        **{k: (getattr(u, k)[live] if k != "G" else u.G) for k in Units.__dataclass_fields__}
    )
    multi_turn = u.turn.max() > 0
    split = any(len(np.unique(u.part[u.batch == b])) > 1 for b in np.unique(u.batch))
    for returns, length, form in itertools.product(RETURNS, LENGTHS, FORMS):
        if (returns != "rtg" and not multi_turn) or (form == "part-factor" and not split):
            continue
        if length == "episode" and not multi_turn:
            continue
        lam = {"none": 1.0, "tokens": u.tokens, "episode": u.episode}[length]
        w = (u.w * lam)[live]
        if (returns, form) not in shapes:
            shapes[returns, form] = shape(u, getattr(u, returns).astype(np.float64), form)
        s = shapes[returns, form][live]
        if not np.any(s) and np.any(w):
            continue
        residual, kappa = fit(sub, w, s, form)
        if residual <= tol:
            return Relation(returns, length, form, kappa, residual, sub)
    return None


def owed(u: Units, rel: Relation) -> np.ndarray:
    """The units the relation gives a weight (κ A(Xᵤ)/λᵤ ≠ 0), κ the fit's typical one."""
    s = shape(u, getattr(u, rel.returns).astype(np.float64), rel.form)
    kappa = rel.kappa[np.isfinite(rel.kappa)]
    k = float(np.median(np.abs(kappa))) if len(kappa) else 0.0
    top = max(float(np.abs(s).max(initial=0.0)), 1e-300)
    return k * np.abs(s) > ZERO_TOL * k * top


def positions(s: Seen) -> tuple[np.ndarray, np.ndarray]:
    """(t, L − 1 − t) of every model token: its place from its reply's start and its end."""
    model = s.kind == MODEL
    pos, end = np.zeros(s.w.shape), np.zeros(s.w.shape)
    for k in {int(t) for t in np.unique(s.turn) if t >= 0}:
        at = model & (s.turn == k)
        t = np.cumsum(at, 1) - 1
        pos = np.where(at, t, pos)
        end = np.where(at, at.sum(1, keepdims=True) - 1 - t, end)
    return pos, end


def _log_one_less(ell: np.ndarray) -> np.ndarray:
    """ln(1 − e^ℓ), finite where π = e^ℓ is 1 (a token the model was sure of: ln 10⁻¹²)."""
    return np.log1p(-np.exp(np.minimum(ell, np.log1p(-1e-12))))


FEATURES = (
    ("the ratio π/μ to the sampler", lambda s: s.ell - s.sampler),
    ("the token's own probability π", lambda s: s.ell),
    ("1 − π, one less the token's own probability", lambda s: _log_one_less(s.ell)),
    ("γᵗ, t its place from the reply's first token", lambda s: positions(s)[0]),
    ("γ^(L − 1 − t), from the reply's last token", lambda s: positions(s)[1]),
)
"""The per-token features a weight may vary with, as ln fₜ is linear in them: (π/μ)ᵏ, πᵏ,
(1 − π)ᵏ (a focal weight), γᵗ (k = ln γ), γ^(L−1−t)."""


def within(u: Units, seen: list[Seen]) -> list[tuple[list[Finding], list[Seen]]]:
    """Replies whose weights vary from token to token where the exact credit is one value.

    ln |wₜ| less its reply's mean is fitted, over every varying reply, as k times one of
    :data:`FEATURES` (less its reply's mean). Each that fits within 5 % is a reading: its
    finding, and the batches with that factor divided out (the replies' relation is then
    read on what is left). Within a reply a place from the start and one from the end are
    one feature (γᵗ = γ^(L−1) · (1/γ)^(L−1−t)): the replies' relation tells them apart, so
    both are readings. None fits: one reading, said without a factor and nothing divided;
    no reply varies: none.
    """
    varying = u.spread > VARIES_TOL
    if not varying.any():
        return []
    top = _scale(seen)
    ys: list[np.ndarray] = []
    xs: list[list[np.ndarray]] = [[] for _ in FEATURES]
    for s in seen:
        raw = [f(s) for _, f in FEATURES]
        for i in range(len(s.w)):
            for k in {int(t) for t in s.turn[i] if t >= 0}:
                at = (s.kind[i] == MODEL) & (s.turn[i] == k) & (np.abs(s.w[i]) > ZERO_TOL * top)
                if at.sum() < 2:
                    continue
                w = np.abs(s.w[i][at])
                if np.ptp(w) <= VARIES_TOL * w.mean():
                    continue
                ys.append(np.log(w) - np.log(w).mean())
                for x, r in zip(xs, raw, strict=True):
                    x.append(r[i][at] - r[i][at].mean())
    words = f"{int(varying.sum())} of {len(u.w)} replies"
    if not ys:
        return []
    y = np.concatenate(ys)
    out: list[tuple[list[Finding], list[Seen]]] = []
    for (said, raw_of), parts in zip(FEATURES, xs, strict=True):
        x = np.concatenate(parts)
        if float(x @ x) == 0:
            continue
        k = float(x @ y) / float(x @ x)
        left = float(np.linalg.norm(y - k * x)) / (float(np.linalg.norm(y)) or 1.0)
        if left > 0.05:
            continue
        divided = [
            replace(s, w=np.where(s.kind == MODEL, s.w / np.exp(k * raw_of(s)), s.w)) for s in seen
        ]
        if said.startswith("γ"):
            what = said.replace("γ", f"γ = {np.exp(k):.4g}, γ", 1)
            name, where = POSITION_WEIGHTED, f"each token's weight is × {what}"
        else:
            name, where = PER_TOKEN_WEIGHT, f"each token's weight varies as ({said})^{k:.3g}"
        where = f"in {words} {where}, where the exact credit is one value a reply"
        out.append(([Finding(name, where)], divided))
    if out:
        return out
    return [
        (
            [
                Finding(
                    PER_TOKEN_WEIGHT,
                    f"in {words} the weights vary from token to token "
                    "(largest/smallest up to "
                    f"{float(np.exp(y.max() - y.min())):.3g}; with the token's own probability "
                    "or the sampler's through a cap, a floor or a clip) where the exact credit is "
                    "one value a reply",
                )
            ],
            seen,
        )
    ]


__all__ = [
    "COARSE_TOL",
    "FEATURES",
    "FIT_TOL",
    "FORMS",
    "Finding",
    "Relation",
    "Units",
    "credit_loop",
    "entries",
    "fit",
    "leaks",
    "others_baseline",
    "owed",
    "positions",
    "relate",
    "shape",
    "shape_loop",
    "units",
    "within",
]
