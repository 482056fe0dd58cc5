r"""Token by token: each weight wₜ held against its exact credit cₜ, and the odd ones described.

On every audited batch, each model token's exact credit (:mod:`~eligibility.check.audit.credit`)

    cᵢₜ = (1/N)(G_{i,k} − (1/(n − 1)) Σ_{j ≠ i} G_{j,k}),     k = the turn of token t,

(the others: the n replies of i's group that have a turn k) is set beside wᵢₜ = ∂L/∂ℓᵢₜ. The
tokens a correct estimator weights and the loss does not (cₜ ≠ 0, wₜ = 0), and those weighted
against their reply's sign, are described by the simplest rule over the tokens' features
(:func:`atoms`: the place in the reply from its start and its end, the EOS, the turn, a reply
cut at T, the reply's length against its group's, the sign of its advantage, its index in the
group; with β > 0, :func:`threshold_atoms`: the token's log-ratio to the reference and its k3
above or below a bound read off the set) that picks them out:

* replies whose zero weight their return explains (no baseline: w = X·h with X = 0) are the
  map's, not drops (:func:`zero_return`);
* a rule that reads the sample (a place, a length, a reward) leaves those terms out of E[ĝ]
  whatever N is: the check fails on it, as on a leak, even where the z-test cannot see it;
* a rule over the replies' index in their group alone picks exchangeable replies (the halves
  of a group), and no rule at all is a drop at random: both unbiased where the rest carry the
  weight back (×1/p), a constant otherwise, said with the share kept.

:func:`describe` searches conjunctions of up to three atoms (vectorised; :func:`describe_loop`
is the same search in plain loops).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from eligibility.check.audit.names import Finding
from eligibility.check.audit.seen import MODEL, Seen
from eligibility.check.mistakes import named

# the mistakes this module names, each declared in eligibility.check.mistakes
DROPPED_AT_RANDOM = named("dropped-at-random")
EOS_MASKED = named("eos-masked")
FIRST_REPLY_UNCREDITED = named("first-reply-uncredited")
MODEL_TOKENS_AFTER_ANSWER_DROPPED = named("model-tokens-after-answer-dropped")
MODEL_TOKENS_DROPPED = named("model-tokens-dropped")
SIGN_FLIPPED = named("sign-flipped")
TRUNCATED_MASKED = named("truncated-masked")

RULE_PHI = 0.9
"""A rule describes a set of tokens where its φ (Matthews) correlation with it is at least
this; where no rule tried reaches it, the set is one drawn at random."""


def unit_credit(s: Seen) -> tuple[np.ndarray, np.ndarray]:
    """(c, exists) per row and turn, [N, K]: the leave-one-out credit ÷ N of each reply.

    Within each (group, turn) the n replies that exist: cᵢ = (n/(n − 1))(Gᵢ − Ḡ) (Gᵢ itself
    where n = 1); :func:`unit_credit_loop` is the same in plain loops.
    """
    n_rows, K = s.rewards.shape
    G = s.group_size
    rtg = np.flip(np.cumsum(np.flip(np.asarray(s.rewards, np.float64), -1), -1), -1)
    model = s.kind == MODEL
    exists = np.stack([(model & (s.turn == k)).any(1) for k in range(K)], 1)
    x = np.where(exists, rtg, 0.0).reshape(-1, G, K)
    e = exists.reshape(-1, G, K)
    n = e.sum(1, keepdims=True).astype(np.float64)
    mean = x.sum(1, keepdims=True) / np.maximum(n, 1.0)
    c = np.where(n > 1, (x - mean) * n / np.maximum(n - 1, 1.0), x)
    return np.where(e, c, 0.0).reshape(n_rows, K) / n_rows, exists


def unit_credit_loop(s: Seen) -> np.ndarray:
    """:func:`unit_credit`'s c in plain loops: its reference."""
    n_rows, K = s.rewards.shape
    G = s.group_size
    out = np.zeros((n_rows, K))
    for i in range(n_rows):
        for k in range(K):
            if not ((s.kind[i] == MODEL) & (s.turn[i] == k)).any():
                continue
            ret = sum(s.rewards[i, k:])
            others = [
                sum(s.rewards[j, k:])
                for j in range(i // G * G, i // G * G + G)
                if j != i and ((s.kind[j] == MODEL) & (s.turn[j] == k)).any()
            ]
            out[i, k] = (ret - sum(others) / len(others) if others else ret) / n_rows
    return out


def token_credit(s: Seen) -> np.ndarray:
    """cᵢₜ on every position, [N, L − 1]: its reply's credit on the model's tokens, else 0."""
    c, _ = unit_credit(s)
    at = np.take_along_axis(c, np.clip(s.turn, 0, None), 1)
    return np.where((s.kind == MODEL) & (s.turn >= 0), at, 0.0)


@dataclass
class Tokens:
    """The model's tokens of the audited batches, flat, with the features a rule may read.

    Attributes:
        w, c: the loss's weight and the exact credit.
        unit: the reply (row and turn) it belongs to, numbered as :func:`relations.units`.
        j: the reply's index in its group (0 …); G the group size.
        turn, pos, pos_end: its turn, its place from the reply's first token and its last.
        length: its reply's token count; eos: it is the EOS; truncated: its row was cut at T.
        longest, shortest: its reply is strictly longer (shorter) than every other of its
            group in that turn; longer_next, shorter_next: than the next reply of its group.
        positive, negative: the sign of its reply's exact credit.
        ret: its reply's return (its turn's reward-to-go).
        d: its log-ratio to the KL's reference, dₜ = ℓₜ − ℓ^ref_t (NaN where none is held).
        ell: its own log-prob ℓₜ = ln π_θ(oₜ | ·) at the sampler's temperature.
        batch, row, col: where it sits in the audited batches.
    """

    w: np.ndarray
    c: np.ndarray
    unit: np.ndarray
    j: np.ndarray
    turn: np.ndarray
    pos: np.ndarray
    pos_end: np.ndarray
    length: np.ndarray
    eos: np.ndarray
    truncated: np.ndarray
    longest: np.ndarray
    shortest: np.ndarray
    longer_next: np.ndarray
    shorter_next: np.ndarray
    positive: np.ndarray
    negative: np.ndarray
    ret: np.ndarray
    d: np.ndarray
    ell: np.ndarray
    batch: np.ndarray
    row: np.ndarray
    col: np.ndarray
    G: int


def tokens(seen: list[Seen]) -> Tokens:
    """Every model token of ``seen`` with its features (a loop over batches and turns)."""
    cols: dict[str, list[np.ndarray]] = {k: [] for k in Tokens.__dataclass_fields__ if k != "G"}
    units = 0
    for b, s in enumerate(seen):
        G = s.group_size
        n_rows, K = s.rewards.shape
        c_unit, exists = unit_credit(s)
        rtg = np.flip(np.cumsum(np.flip(np.asarray(s.rewards, np.float64), -1), -1), -1)
        model = s.kind == MODEL
        lengths = np.stack([(model & (s.turn == k)).sum(1) for k in range(K)], 1)
        pos = np.zeros(s.w.shape, int)
        for k in range(K):
            at = model & (s.turn == k)
            pos = np.where(at, np.cumsum(at, 1) - 1, pos)
        # the units' numbers in relations.units' order: row by row, its turns in order
        number = np.where(exists, np.cumsum(exists.reshape(-1)).reshape(exists.shape) - 1, -1)
        g = lengths.reshape(-1, G, K).astype(np.float64)
        gx = np.where(exists.reshape(-1, G, K), g, np.nan)
        others_max = np.stack(
            [np.nanmax(np.delete(gx, m, 1), 1, initial=-np.inf) for m in range(G)], 1
        )
        others_min = np.stack(
            [np.nanmin(np.delete(gx, m, 1), 1, initial=np.inf) for m in range(G)], 1
        )
        nxt = np.concatenate([gx[:, 1:], np.full_like(gx[:, :1], np.nan)], 1)
        unit_feats = {
            "longest": (g > others_max).reshape(n_rows, K),
            "shortest": (g < others_min).reshape(n_rows, K),
            "longer_next": (g > nxt).reshape(n_rows, K),
            "shorter_next": (g < nxt).reshape(n_rows, K),
        }
        rows, cols_ = np.nonzero(model & (s.turn >= 0))
        k = s.turn[rows, cols_]
        L = lengths[rows, k]
        p = pos[rows, cols_]
        cu = c_unit[rows, k]
        found = {
            "w": s.w[rows, cols_],
            "batch": np.full(len(rows), b),
            "row": rows,
            "col": cols_,
            "c": cu,
            "unit": units + number[rows, k],
            "j": rows % G,
            "turn": k,
            "pos": p,
            "pos_end": L - 1 - p,
            "length": L,
            "eos": s.eos[rows, cols_],
            "truncated": np.asarray(s.truncated, bool)[rows],
            "positive": cu > 0,
            "negative": cu < 0,
            "ret": rtg[rows, k],
            "d": (s.ell - s.ref)[rows, cols_] if s.ref is not None else np.full(len(rows), np.nan),
            "ell": s.ell[rows, cols_],
            **{key: v[rows, k] for key, v in unit_feats.items()},
        }
        for key, v in found.items():
            cols[key].append(np.asarray(v))
        units += int(exists.sum())
    arrays = {k: np.concatenate(v) if v else np.zeros(0) for k, v in cols.items()}
    return Tokens(**arrays, G=seen[0].group_size)  # type: ignore[arg-type]


SAMPLE, INDEX = "sample", "index"
"""An atom reads the sample (a place, a length, a reward: a drop by it is a bias) or only the
reply's index in its group (the replies of a group are exchangeable: a drop by it is not)."""


def atoms(t: Tokens) -> list[tuple[str, str, np.ndarray]]:
    """(words, SAMPLE or INDEX, which tokens) of every atom a rule is built from."""
    out: list[tuple[str, str, np.ndarray]] = [
        ("the EOS token", SAMPLE, t.eos.astype(bool)),  # before "the last": its own name
        ("the first token of its reply", SAMPLE, t.pos == 0),
        ("the second token of its reply", SAMPLE, t.pos == 1),
        ("the last token of its reply", SAMPLE, t.pos_end == 0),
        ("the second-to-last token of its reply", SAMPLE, t.pos_end == 1),
        ("in a reply cut at T (no EOS)", SAMPLE, t.truncated.astype(bool)),
        ("in a reply longer than every other of its group", SAMPLE, t.longest.astype(bool)),
        ("in a reply shorter than every other of its group", SAMPLE, t.shortest.astype(bool)),
        ("in a reply longer than the next reply of its group", SAMPLE, t.longer_next.astype(bool)),
        (
            "in a reply shorter than the next reply of its group",
            SAMPLE,
            t.shorter_next.astype(bool),
        ),
        ("in a reply of one token", SAMPLE, t.length == 1),
        ("in a reply whose advantage is positive", SAMPLE, t.positive.astype(bool)),
        ("in a reply whose advantage is negative", SAMPLE, t.negative.astype(bool)),
        # with β > 0 such a reply's tokens are owed the KL's part of their weight
        ("in a reply whose advantage is 0", SAMPLE, t.c == 0),
    ]
    if t.turn.max(initial=0) > 0:
        out += [
            ("in the first reply", SAMPLE, t.turn == 0),
            ("in a reply after the world's first answer", SAMPLE, t.turn > 0),
        ]
    out += [(f"in reply {m + 1} of its group", INDEX, t.j == m) for m in range(min(t.G, 4))]
    if t.G >= 2:
        half = t.G // 2
        out += [
            (f"in replies 1 to {half} of its group", INDEX, t.j < half),
            (f"in replies {half + 1} to {t.G} of its group", INDEX, t.j >= half),
            ("in the odd-numbered replies of its group", INDEX, t.j % 2 == 0),
            ("in the even-numbered replies of its group", INDEX, t.j % 2 == 1),
        ]
    return out


@dataclass(frozen=True)
class Rule:
    """The conjunction of atoms that best picks out a set of tokens, and how well.

    Attributes:
        atoms: the atoms' indices (in :func:`atoms`' order), () for none.
        hit: tokens of the set it picks; picked: tokens it picks in all; size: the set's size.
        phi: its φ correlation with the set (1: exactly the set).
    """

    atoms: tuple[int, ...]
    hit: int
    picked: int
    size: int
    phi: float

    @property
    def exact(self) -> bool:
        """The rule picks exactly the set."""
        return self.hit == self.size == self.picked


def _phi(hit: np.ndarray, picked: np.ndarray, size: int, n: int) -> np.ndarray:
    """φ of a rule picking ``picked`` tokens, ``hit`` of the set's ``size``, among ``n``."""
    fp, fn = picked - hit, size - hit
    tn = n - hit - fp - fn
    den = np.sqrt(np.maximum(picked * (n - picked) * size * (n - size), 0.0).astype(np.float64))
    return np.where(den > 0, (hit * tn - fp * fn) / np.where(den > 0, den, 1.0), 0.0)


def describe(flag: np.ndarray, a: np.ndarray, depth: int = 3) -> Rule:
    """The simplest conjunction of rows of ``a`` [atoms, n] that picks out ``flag`` [n].

    Exact rules first, fewest atoms first (a conjunction of three only of atoms that each
    hold the whole set); else the best φ among single atoms and pairs, by counts from one
    product (hits = A diag(f) Aᵀ).
    """
    flag = np.asarray(flag, bool)
    a = np.asarray(a, bool)
    n, size = len(flag), int(flag.sum())
    af = a.astype(np.float64)
    hit1, pick1 = af @ flag, af.sum(1)
    phi1 = _phi(hit1, pick1, size, n)
    hit2 = (af * flag) @ af.T
    pick2 = af @ af.T
    phi2 = _phi(hit2, pick2, size, n)
    exact1 = np.nonzero((hit1 == size) & (pick1 == size))[0]
    if len(exact1):
        return Rule((int(exact1[0]),), size, size, size, 1.0)
    exact = np.argwhere((hit2 == size) & (pick2 == size))
    if len(exact):
        i, j = min((tuple(sorted(map(int, e))) for e in exact), key=lambda e: e)
        return Rule((i, j), size, size, size, 1.0)
    cover = [int(i) for i in np.nonzero(hit1 == size)[0]]
    if depth >= 3:
        for trio in itertools.combinations(cover, 3):
            picked = int(np.logical_and.reduce(a[list(trio)], 0).sum())
            if picked == size:
                return Rule(trio, size, size, size, 1.0)
    i1 = int(np.argmax(phi1))
    i, j = np.unravel_index(int(np.argmax(phi2)), phi2.shape)
    if phi2[i, j] > phi1[i1] + 1e-12:
        pair = tuple(sorted((int(i), int(j))))
        return Rule(pair, int(hit2[i, j]), int(pick2[i, j]), size, float(phi2[i, j]))
    return Rule((i1,), int(hit1[i1]), int(pick1[i1]), size, float(phi1[i1]))


def describe_loop(flag: np.ndarray, a: np.ndarray, depth: int = 3) -> Rule:
    """:func:`describe` in plain loops over the rules: its reference."""
    flag = [bool(x) for x in flag]
    rows = [[bool(x) for x in r] for r in a]
    n, size = len(flag), sum(flag)

    def counts(picks: list[bool]) -> tuple[int, int, float]:
        hit = sum(1 for p, f in zip(picks, flag, strict=True) if p and f)
        picked = sum(picks)
        fp, fn = picked - hit, size - hit
        tn = n - hit - fp - fn
        den = (picked * (n - picked) * size * (n - size)) ** 0.5
        return hit, picked, (hit * tn - fp * fn) / den if den > 0 else 0.0

    singles = [(i, *counts(r)) for i, r in enumerate(rows)]
    for i, hit, picked, _ in singles:
        if hit == size == picked:
            return Rule((i,), size, size, size, 1.0)
    pairs = []
    for i in range(len(rows)):
        for j in range(len(rows)):
            both = [x and y for x, y in zip(rows[i], rows[j], strict=True)]
            pairs.append(((i, j), *counts(both)))
    for (i, j), hit, picked, _ in sorted(pairs, key=lambda p: tuple(sorted(p[0]))):
        if hit == size == picked:
            return Rule(tuple(sorted((i, j))), size, size, size, 1.0)
    if depth >= 3:
        cover = [i for i, hit, _, _ in singles if hit == size]
        for trio in itertools.combinations(cover, 3):
            picks = [all(rows[m][t] for m in trio) for t in range(n)]
            if sum(picks) == size:
                return Rule(trio, size, size, size, 1.0)
    best1 = max(singles, key=lambda s: (s[3], -s[0]))
    best2 = max(pairs, key=lambda p: p[3])
    if best2[3] > best1[3] + 1e-12:
        return Rule(tuple(sorted(best2[0])), best2[1], best2[2], size, best2[3])
    return Rule((best1[0],), best1[1], best1[2], size, best1[3])


NAMED_RULES = {
    "the EOS token": EOS_MASKED,
    "in a reply cut at T (no EOS)": TRUNCATED_MASKED,
    "in the first reply": FIRST_REPLY_UNCREDITED,
    "in a reply after the world's first answer": MODEL_TOKENS_AFTER_ANSWER_DROPPED,
}
"""A drop whose rule is one of these atoms alone carries that atom's own name."""


@dataclass(frozen=True)
class Drops:
    """The model's tokens owed weight and given none, read.

    Attributes:
        findings: what was found (a drop by a rule of the sample is a leak).
        kept: the share of the owed credit Σc² on the tokens that kept their weight (1: none
            dropped); kept_se: its standard error were the drops made at random.
        random: the drops are at random or by the replies' index (exchangeable).
    """

    findings: list[Finding]
    kept: float = 1.0
    kept_se: float = 0.0
    random: bool = False


def _said(words: list[str]) -> str:
    """A rule's atoms as one phrase: its places, then the replies it holds to."""
    places = [w for w in words if not w.startswith(("in ", "with "))]
    where = [w for w in words if w.startswith(("in ", "with "))]
    return " ".join([" and ".join(places) or "the tokens", " and ".join(where)]).strip()


def _share(t: Tokens, pick: np.ndarray) -> float:
    return float(np.abs(t.c[pick]).sum() / max(np.abs(t.c).sum(), 1e-300))


def zero_return(t: Tokens, top: float, zero_tol: float) -> np.ndarray:
    """The tokens of whole replies whose zero weight their return explains (no baseline).

    Where every weighted token's sign is its reply's return's (w = X·h, h > 0: the return
    itself as the advantage, times any factor), every reply whose return X is 0 has weight 0
    by the map, not by a drop: those replies' tokens; none where the weights do not follow
    the return's sign.
    """
    zero = np.abs(t.w) <= zero_tol * top
    n_units = int(t.unit.max(initial=-1)) + 1
    live_units = np.bincount(t.unit, weights=(~zero).astype(float), minlength=n_units) > 0
    whole = ~live_units[t.unit]
    at_zero = t.ret == 0
    sign = np.sign(float(t.w @ t.ret))
    follows = sign != 0 and bool(np.all(np.sign(t.w[~zero]) * np.sign(t.ret[~zero]) == sign))
    if not follows or not np.all(whole[at_zero]):
        return np.zeros(len(t.w), bool)
    return whole & at_zero


def k3(d: np.ndarray) -> np.ndarray:
    """k3ₜ = e^(−dₜ) − 1 + dₜ, the token's KL estimate; dₜ = ℓₜ − ℓ^ref_t.

    Reference: Schulman (2020), "Approximating KL divergence".
    """
    return np.expm1(-d) + d


def threshold_atoms(t: Tokens, flag: np.ndarray) -> list[tuple[str, str, np.ndarray]]:
    """Atoms over each token's log-ratio to the KL's reference, their bounds read off ``flag``.

    dₜ ≥ its least on the set, dₜ ≤ its greatest, and k3ₜ (:func:`k3`, the KL value a clamp
    on the loss's KL would bind on) ≥ its least: a drop by a clamp of the token's KL or its
    log-ratio is a rule of the sample, never one at random. None where no reference is held.
    """
    if not flag.any() or np.isnan(t.d[flag]).any():
        return []
    d, kl = t.d, k3(t.d)
    lo, hi, k_lo = float(d[flag].min()), float(d[flag].max()), float(kl[flag].min())
    return [
        (f"with a KL value k3 = e^(−d) − 1 + d ≥ {k_lo:.3g}", SAMPLE, kl >= k_lo),
        (f"with a log-ratio to the reference d = ℓ − ℓ_ref ≥ {lo:.3g}", SAMPLE, d >= lo),
        (f"with a log-ratio to the reference d = ℓ − ℓ_ref ≤ {hi:.3g}", SAMPLE, d <= hi),
    ]


def probability_atoms(t: Tokens, flag: np.ndarray) -> list[tuple[str, str, np.ndarray]]:
    """Atoms over each token's own probability πₜ = e^ℓₜ, their bounds read off ``flag``.

    πₜ ≤ its greatest on the set and πₜ ≥ its least: a mask computed from the token's own
    probability (keep the confident tokens, or only the unlikely ones; a nucleus whose one
    member carries no gradient) drops by a rule of the sample, never at random.
    """
    if not flag.any():
        return []
    lo, hi = float(t.ell[flag].min()), float(t.ell[flag].max())
    out = []
    if hi < 0:  # π ≤ 1 holds of every token: no threshold
        out.append((f"whose own probability π_θ is at most {np.exp(hi):.3g}", SAMPLE, t.ell <= hi))
    if lo < 0:  # ℓ = 0 is also where the loss scored no log-prob (a row left out of the call)
        out.append((f"whose own probability π_θ is at least {np.exp(lo):.3g}", SAMPLE, t.ell >= lo))
    return out


def _ordinal(k: int) -> str:
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


def place_atoms(t: Tokens, flag: np.ndarray) -> list[tuple[str, str, np.ndarray]]:
    """Atoms over each token's place and its reply's length, their bounds read off ``flag``.

    The tokens from the k-th of a reply on (k the least place from the start on the set), those
    k or more before its end, the first k + 1 and the last k + 1 (k the greatest), the replies
    of at least and at most so many tokens: a mask that keeps the last three tokens of each
    reply drops "the tokens 3 or more places before the last of its reply", a rule of the sample.
    Bounds that pick every token, or one place only (:func:`atoms` names those), are left out.
    """
    if not flag.any():
        return []
    pos, end, length = t.pos[flag], t.pos_end[flag], t.length[flag]
    out: list[tuple[str, str, np.ndarray]] = []
    k = int(pos.min())
    if k == 1:
        out.append(("every token of its reply but the first", SAMPLE, t.pos >= 1))
    elif k >= 2:
        out.append((f"the tokens from the {_ordinal(k + 1)} of its reply on", SAMPLE, t.pos >= k))
    k = int(end.min())
    if k == 1:
        out.append(("every token of its reply but the last", SAMPLE, t.pos_end >= 1))
    elif k >= 2:
        out.append(
            (f"the tokens {k} or more places before the last of its reply", SAMPLE, t.pos_end >= k)
        )
    k = int(pos.max())
    if 1 <= k < int(t.pos.max(initial=0)):
        out.append((f"the first {k + 1} tokens of its reply", SAMPLE, t.pos <= k))
    k = int(end.max())
    if 1 <= k < int(t.pos_end.max(initial=0)):
        out.append((f"the last {k + 1} tokens of its reply", SAMPLE, t.pos_end <= k))
    k = int(length.min())
    if k >= 3:
        out.append((f"in a reply of {k} or more tokens", SAMPLE, t.length >= k))
    k = int(length.max())
    if 2 <= k < int(t.length.max(initial=0)):
        out.append((f"in a reply of at most {k} tokens", SAMPLE, t.length <= k))
    return out


def dropped(t: Tokens, owed: np.ndarray, top: float, zero_tol: float) -> Drops:
    """The tokens ``owed`` a weight that have none, described by their rule.

    ``owed``: cₜ ≠ 0, and the relation that fits the rest gives the reply a weight (the
    module's docstring says how a rule is read); the replies whose zero weight their return
    explains (:func:`zero_return`) are the map's to read, not drops.
    """
    zero = np.abs(t.w) <= zero_tol * top
    flag = owed & zero & ~zero_return(t, top, zero_tol)
    if flag.sum() < 2:
        return Drops([])
    table = atoms(t) + place_atoms(t, flag) + threshold_atoms(t, flag) + probability_atoms(t, flag)
    a = np.stack([m[owed] for _, _, m in table]) if table else np.zeros((0, int(owed.sum())))
    rule = describe(flag[owed], a)
    c2 = t.c[owed] ** 2
    kept = float(c2[~flag[owed]].sum() / max(c2.sum(), 1e-300))
    se = float(np.sqrt((c2**2).sum() * kept * (1 - kept)) / max(c2.sum(), 1e-300))
    words = [table[i][0] for i in rule.atoms]
    kinds = {table[i][1] for i in rule.atoms}
    n_owed, n_flag = int(owed.sum()), int(flag.sum())
    count = f"{n_flag} of the {n_owed} model tokens whose exact credit is not 0 get no weight"
    share = _share(t, flag)
    if rule.phi >= RULE_PHI and SAMPLE in kinds:
        how = "exactly" if rule.exact else f"{rule.hit} of the {rule.picked} it picks"
        name = NAMED_RULES.get(words[0], MODEL_TOKENS_DROPPED) if len(words) == 1 else None
        where = (
            f"{count}: {_said(words)} ({how}; {share:.1%} of the exact credit's weight): "
            "a rule of the sample itself, so E[ĝ] misses their terms at every N"
        )
        return Drops([Finding(name or MODEL_TOKENS_DROPPED, where, share, leak=True)], kept, se)
    if rule.phi >= RULE_PHI:
        said = f"{_said(words)}, replies a group's draws make exchangeable"
    else:
        said = (
            f"by no rule of their features (the closest: {_said(words)}, "
            f"φ = {rule.phi:.2f}): at random"
        )
    where = f"{count}: {said}; the weight kept is {kept:.3g} of the owed credit's Σc²"
    return Drops([Finding(DROPPED_AT_RANDOM, where, share)], kept, se, random=True)


def reference_sign(t: Tokens, top: float, zero_tol: float) -> np.ndarray:
    """Each token's reply's sign, that of most of its weighted tokens.

    On a tie, the sign of its exact credit times the loss's overall one (sign Σ wc).
    """
    live = np.abs(t.w) > zero_tol * top
    n_units = int(t.unit.max(initial=-1)) + 1
    up = np.bincount(t.unit, weights=(live & (t.w > 0)).astype(float), minlength=n_units)
    down = np.bincount(t.unit, weights=(live & (t.w < 0)).astype(float), minlength=n_units)
    tie = np.sign(t.c) * np.sign(float(t.w @ t.c))
    vote = np.sign(up - down)[t.unit]
    return np.where(vote != 0, vote, tie)


def flipped(t: Tokens, top: float, zero_tol: float) -> tuple[list[Finding], np.ndarray]:
    """Tokens weighted against the sign of their reply, described by a rule; and which.

    The reply's sign is :func:`reference_sign`'s; the map is read with the flipped tokens'
    sign set right.
    """
    live = np.abs(t.w) > zero_tol * top
    ref = reference_sign(t, top, zero_tol)
    n_units = int(t.unit.max(initial=-1)) + 1
    several = (np.bincount(t.unit, weights=live.astype(float), minlength=n_units) >= 2)[t.unit]
    pool = live & (ref != 0) & several  # a reply of one weighted token is the map's to read
    flag = pool & (np.sign(t.w) * ref < 0)
    if flag.sum() < 1:
        return [], flag
    table = atoms(t)
    rule = describe(flag[pool], np.stack([m[pool] for _, _, m in table]))
    words = [table[i][0] for i in rule.atoms]
    sample = any(table[i][1] == SAMPLE for i in rule.atoms)
    said = _said(words) if rule.phi >= RULE_PHI else "by no rule of their features"
    how = "exactly" if rule.exact else f"{rule.hit} of the {rule.picked} it picks"
    return [
        Finding(
            SIGN_FLIPPED,
            f"{int(flag.sum())} of {int(pool.sum())} weighted model tokens carry the opposite "
            f"sign to their reply's other tokens: {said} ({how})",
            _share(t, flag),
            leak=rule.phi >= RULE_PHI and sample,
        )
    ], flag


__all__ = [
    "INDEX",
    "NAMED_RULES",
    "RULE_PHI",
    "SAMPLE",
    "Drops",
    "Rule",
    "Tokens",
    "atoms",
    "describe",
    "describe_loop",
    "dropped",
    "flipped",
    "k3",
    "reference_sign",
    "threshold_atoms",
    "token_credit",
    "tokens",
    "unit_credit",
    "unit_credit_loop",
    "zero_return",
]
