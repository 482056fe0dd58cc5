r"""What ``finetune`` watches after each update, and says once: a wreck, and silent updates.

**The wreck guard** judges a run by what wrecks a model, read from its metrics rows:

* a value that is not finite (``loss``, ``entropy``, ``kl``, ``grad_norm``, ``mean_reward``);
* the held-out reward or accuracy fallen below half its height at the run's first evaluation
  (:func:`held_out_fall`);
* the batch reward collapsed against a robust running level: each of the last w batches kept at
  most a quarter of the highest level held w batches in a row (:func:`reward_collapse`);
* the entropy collapsed onto wrong replies: 2 updates in a row whose sampled tokens' surprisal
  is below 0.4 of the highest the run has had, every completion of the batch at the reward's floor
  (:func:`entropy_collapse`);
* the replies ramble: 2 updates in a row whose completions ran to T_max without ending (their
  mean length short of T_max by at most 0.15 of the first batch's shortfall) and scored the
  reward's floor, in a run whose first batch ended a token or more short of T_max on average
  (:func:`rambling`).

A non-finite value is a wreck wherever it comes. A fall or a collapse of the reward counts only
while the policy is past ``--max-kl`` from the initial one (:func:`~eligibility.lm.learner.drift`):
within it the policy is near the model it started as, and a falling reward is the noise of a
sparse task. An entropy collapse and rambling count wherever the guard is on (``--max-kl``
finite): without a reference the drift is the rise of the surprisal, which a collapse lowers and
rambling need not raise. The drift alone is
never a wreck: learning a reply form from a sparse reward moves a pretrained model about a nat
per token (0.95–1.63 on the kit's ``antonym``), while its rewards and held-out accuracy rise. No
rule reads the first batch's reward alone: one lucky right sample there (0.031 on ``antonym``)
is not a level, since a level is held for w batches.

The entropy rule, and how it was chosen. A policy sure of its replies and wrong on every one
has no advantage to learn from and no spread to explore with; neither half alone is a wreck.
Measured on the kit's tuning tasks (SmolLM2-135M-Instruct, ``add`` and ``capital``, the shaped
``reward`` or ``correct``, β = 0, ``bench/results/lm_guard_kit_tuning.json``): a policy that
does not move (every reward 0, no gradient) samples at 0.72–1 of its highest surprisal;
learning runs go lower (0.22 on ``add`` at the default rate, 0.30 on ``capital``) but their
batches are rarely all at the floor, and where one was, the surprisal stood at 0.56 of its
highest or more; the ``--lr 1e-3`` wreck of ``add`` fell to 0.21 and 0.17 with every batch at 0.
The share e = 0.4 lies between the two, and w = 2 updates in a row leave no single batch to
decide. The highest surprisal, not the first, is the reference: a wrecking rate first raises it
(on ``antonym``: 2.21, 2.45, 3.21, 1.87, 1.01, 0.42).

The rambling rule, and how it was chosen. On the tuning task ``capital`` at ``--lr 1e-3``
(seeds 0 and 1) one update made every reply run to the length limit (16 tokens) and every one
wrong, to the run's end, while the surprisal stayed at 0.45–1.7 of its highest (no entropy
collapse), the drift under 1 nat (no fall is read) and the held-out reward at 0 from the first
evaluation (update 3: the fall from the model's 0.39 greedy before update 1 is not seen, since
no evaluation precedes update 1). The recorded runs tell it apart by length: every learner's and
every still run's mean length stayed under T_max (at most 15.6 of 16) where its batch was all
at the floor; at 3e-4 ``capital`` also ran to T_max, but with rewards above the floor in every
batch. Two updates in a row (as the entropy rule) leave no single batch to decide, and a run
whose first batch already ran to T_max (a T_max too short for the task's replies) is not one the
updates wrecked: its first batch must average a token or more under T_max (a batch of
``multiply`` at T_max 8, 7.94 tokens, a reply or two of 32 ending, ran on as it began; found in
the race on that held-out task, after the choice). Checked after the choice on the held-out
``antonym`` and ``multiply`` runs: it fires on their 1e-3 wrecks at the updates the other rules
stop them (6 and 10), and on no learner.

The same wreck on other bf16 kernels. ``antonym`` at ``--lr 1e-3`` with ``--dtype bfloat16`` on
an AMD EPYC with AVX-512 BF16 and AMX (seed 0, ``bench/results/lm_guard_kit_bf16.json``; an Intel
Xeon with AMX gave the same lengths) took another path than the held-out record's: mean lengths
11.5, 2.56, 3.31, 15.25, 15.6, 16.0, every reply at the floor from update 5, a few of update 5's
32 replies ending before T_max. "Every reply at T_max" saw update 6 alone, and the batch
reward's collapse needs 3 batches at the floor: the 6 updates of the docs' command ran
unstopped. The rule reads "ran to the limit" as the mean length's shortfall T_max − L̄ᵤ at most
s = 0.15 of the first batch's, T_max − L̄₁ (0.675 tokens there; update 5's was 0.375), so it
stops that run at update 6 as the record's. s was chosen on that run; replayed after on every
recorded run, it moves no stop (``add`` at 1e-3 seed 1 is now read as rambling too, at update
12, where the collapse stopped it) and fires on no learner or still run, the bf16 learner at
the default rate included; a still run's batches at the floor stay 0.23 tokens or more further
from T_max than s allows (``multiply``, whose first batch began 1.2 tokens short).

The silence: with a group baseline, an update whose every group's rewards were equal
(``frac_reward_zero_std`` 1) had every advantage exactly 0, and moved the policy by the KL term
only (without one, β = 0, not at all: no optimiser step on a zero gradient, ``lm.update._step``).
A batch whose every completion is correct (``accuracy`` 1) is a solved task, not a silent one.

Each watch reads the updates' metrics rows only, so a resumed run rebuilds both from its
metrics.csv (:meth:`Watches.replay`) and watches on as the uninterrupted run would.

The last update. Update u's row is drawn from the weights before its step, so the weights a run
ends with are judged on batches drawn from them when it ends (``lm.sound.looks``), the rules
read on the rows with those after them (:func:`wreck_at_the_end`); :func:`alarmed`, each rule's
terms on one batch alone, says which weights were sound (the result of a run the guard stops).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eligibility.lm.config import FinetuneConfig
from eligibility.lm.defaults import defaults
from eligibility.lm.importance import resolved
from eligibility.lm.learner import Diverged, drift
from eligibility.lm.mismatch import WARN_OUTSIDE
from eligibility.lm.truncation import Sampling

SILENT_UPDATES = 5
"""Updates in a row with every group's rewards equal before a run says they taught nothing."""

WINDOW = 3
"""w: the batches in a row that hold a level, and the low batches in a row that make a collapse."""

COLLAPSED = 0.25
"""A collapsed batch keeps at most this share of the level's height above the reward floor."""

HELD_OUT_KEPT = 0.5
"""A held-out evaluation below this share of the first one's height above its floor has fallen."""

ENTROPY_KEPT = 0.4
"""A collapsed entropy is below this share of the highest surprisal the run has had."""

ENTROPY_WINDOW = 2
"""The updates in a row, sure and wrong, that make an entropy collapse."""

RAMBLE_WINDOW = 2
"""The updates in a row, every reply run to T_max and wrong, that make rambling."""

RAMBLE_SHORTFALL = 0.15
"""s: replies that fell short of T_max by at most this share of the first batch's shortfall, on
average, ran to the limit (a few of a batch may end: bf16's wreck, the module's docstring)."""

GUARD_SINCE = "guard_since"
"""The counter a run the guard stopped at its end keeps in its checkpoint: the rows it judged
(its resume is judged anew from the next update, :meth:`Watches.replay`)."""

FINITE = ("loss", "entropy", "kl", "grad_norm", "mean_reward")
"""The columns a wreck makes non-finite (``kl`` may be empty: no reference)."""

Row = Mapping[str, Any]


def _fmt(values: Iterable[float]) -> str:
    return ", ".join(f"{v:.3g}" for v in values)


def reward_floor(rows: Sequence[Row]) -> float:
    """F = minᵤ min_reward(u): the lowest reward any completion of the run has got.

    For a 0/1 reward, 0: the level a collapse falls back to.
    """
    return min(float(r["min_reward"]) for r in rows)


def reward_level(rewards: Sequence[float], window: int = WINDOW) -> float | None:
    """L = maxₙ min(r̄ₙ₋w₊₁, …, r̄ₙ): the highest level the batch reward held w batches in a row.

    A level is held, not touched: one lucky batch (a sparse reward's first right sample) is
    not one, nor are a sparse task's scattered right batches (on the kit's ``multiply``, at
    1e-5: 0.09, 0, 0.25, 0, 0, 0.06, …). None before w batches.
    """
    if len(rewards) < window:
        return None
    return max(min(rewards[i : i + window]) for i in range(len(rewards) - window + 1))


def reward_collapse(
    rows: Sequence[Row], window: int = WINDOW, tail: int | None = None
) -> str | None:
    """The batch reward collapsed: r̄ᵤ ≤ F + c (L − F) for each of the last w updates, L > F.

    L is :func:`reward_level`, F :func:`reward_floor`, c = :data:`COLLAPSED`: the batches
    lost three quarters of the height the run had held. On the kit's ``antonym`` at
    ``--lr 1e-3``: r̄ = 0.03, 0.13, 0.28, 0, 0, 0 → L = 0.03, F = 0, collapsed at update 6.
    ``tail``: the batches in a row that must be low (None: w; 1: the latest alone,
    :func:`alarmed`'s reading of one batch).

    Returns:
        What was measured, or None.
    """
    rewards = [float(r["mean_reward"]) for r in rows]
    level = reward_level(rewards, window)
    if level is None or len(rewards) < 2 * window:
        return None
    floor = reward_floor(rows)
    bar = floor + COLLAPSED * (level - floor)
    last = rewards[-(window if tail is None else tail) :]
    if not (level > floor and all(r <= bar for r in last)):
        return None
    return (
        f"the batch reward fell to {_fmt(last)} over the last {len(last)} batches, from a level of "
        f"{level:.3g} held {window} batches in a row (the lowest reward is {floor:.3g})"
    )


def held_out_fall(rows: Sequence[Row]) -> str | None:
    """The held-out reward or accuracy fell: Eₙ < F + h (E₁ − F) at the latest evaluation n.

    E₁ is the run's first evaluation (the model before its first update is not evaluated),
    h = :data:`HELD_OUT_KEPT`; F is :func:`reward_floor` for the reward and 0 for the accuracy.
    Greedy decoding on fixed prompts has no sampling noise: half the height lost is the model's.

    Returns:
        What was measured, or None (fewer than two evaluations, or none above its floor).
    """
    evals = [r for r in rows if r.get("eval_accuracy") is not None]
    if len(evals) < 2:
        return None
    first, now = evals[0], evals[-1]
    for column, floor in (("eval_reward", reward_floor(rows)), ("eval_accuracy", 0.0)):
        if first.get(column) is None or now.get(column) is None:
            continue
        e1, en = float(first[column]), float(now[column])
        if e1 > floor and en < floor + HELD_OUT_KEPT * (e1 - floor):
            return (
                f"the held-out {column.removeprefix('eval_')} fell to {en:.3g} at update "
                f"{int(now['update'])} from {e1:.3g} at the first evaluation (update "
                f"{int(first['update'])})"
            )
    return None


def entropy_collapse(rows: Sequence[Row], window: int = ENTROPY_WINDOW) -> str | None:
    """The entropy collapsed onto wrong replies: Hᵤ < e maxᵥ≤ᵤ Hᵥ and r̄ᵤ = F, w updates in a row.

    Hᵤ is the ``entropy`` column (the sampled tokens' mean surprisal), e = :data:`ENTROPY_KEPT`,
    w = :data:`ENTROPY_WINDOW`, F :func:`reward_floor`; r̄ᵤ = F is every completion at the floor
    (so every group tied). How e and w were chosen: the module's docstring.

    Returns:
        What was measured, or None.
    """
    if len(rows) < window:
        return None
    floor = reward_floor(rows)
    peaks = [max(float(r["entropy"]) for r in rows[: len(rows) - k]) for k in range(window)]
    last = rows[-window:]
    if all(
        float(r["entropy"]) < ENTROPY_KEPT * peak and float(r["mean_reward"]) <= floor
        for r, peak in zip(last, reversed(peaks), strict=True)
    ):
        return (
            f"the entropy collapsed onto wrong replies: the sampled tokens' surprisal was "
            f"{_fmt(float(r['entropy']) for r in last)} nats per token over the last {window} "
            f"batches (the run's highest {peaks[0]:.3g}), every completion at the lowest reward "
            f"{floor:.3g}"
        )
    return None


def rambling(rows: Sequence[Row], t_max: int, window: int = RAMBLE_WINDOW) -> str | None:
    """The replies ramble: T_max − L̄ᵤ ≤ s (T_max − L̄₁), r̄ᵤ = F, the last w updates; L̄₁ ≤ T_max − 1.

    L̄ᵤ is the ``mean_length`` column (tokens a completion, EOS included, each at most T_max:
    the mean reaches T_max only where no completion ended); s = :data:`RAMBLE_SHORTFALL`: the
    replies ran to the limit but for a small share of how far short the first batch stopped;
    r̄ᵤ = F every completion at the
    reward's floor (:func:`reward_floor`), w = :data:`RAMBLE_WINDOW`; L̄₁ ≤ T_max − 1: the first
    update's replies ended a token or more short of the limit on average, so running to it is
    what the updates did (a first batch at 7.94 of T_max 8, where a reply or two of 32 ended, ran to
    the limit before any update: a T_max too short for the task's replies). How w was chosen:
    the module's docstring.

    Returns:
        What was measured, or None.
    """
    first = float(rows[0]["mean_length"])
    if len(rows) <= window or not first <= t_max - 1:
        return None
    floor, last = reward_floor(rows), rows[-window:]
    slack = RAMBLE_SHORTFALL * (t_max - first)
    if all(
        t_max - float(r["mean_length"]) <= slack and float(r["mean_reward"]) <= floor for r in last
    ):
        return (
            f"the replies ran to the length limit ({t_max} tokens) without ending over the last "
            f"{window} batches (mean lengths {_fmt(float(r['mean_length']) for r in last)}), "
            f"every one at the lowest reward {floor:.3g} (the first update's replies averaged "
            f"{first:.3g} tokens)"
        )
    return None


def non_finite(row: Row) -> str | None:
    """A column of :data:`FINITE` that is NaN or ±inf in ``row`` (what was measured), or None."""
    bad = [c for c in FINITE if row.get(c) is not None and not math.isfinite(float(row[c]))]
    return None if not bad else "non-finite " + ", ".join(f"{c} {row[c]}" for c in bad)


def wreck(
    rows: Sequence[Row], max_kl: float, since: int = 0, t_max: int | None = None
) -> tuple[str, float] | None:
    """The guard's verdict on a run's rows so far: (what was measured, drift), or None.

    wreck = non-finite ∨ (max_kl < ∞ ∧ (entropy collapse ∨ rambling)) ∨ (D > max_kl ∧
            (held-out fall ∨ reward collapse)),

    with D the latest update's :func:`~eligibility.lm.learner.drift` from the first update.
    ``since``: the collapses, rambling and the fall are judged on the rows from this one (a run
    resumed after the guard stopped it is judged anew), the drift from the first. ``t_max``:
    the run's T_max (None: rambling is not judged).
    """
    now, recent = rows[-1], rows[since:]
    d = drift(now.get("kl"), now["entropy"], rows[0]["entropy"])
    if (what := non_finite(now)) is not None:
        return what, d
    if max_kl < math.inf and (what := entropy_collapse(recent)):
        return what, d
    if max_kl < math.inf and t_max is not None and (what := rambling(recent, t_max)):
        return what, d
    if not d > max_kl:
        return None
    for rule in (held_out_fall, reward_collapse):
        if (what := rule(recent)) is not None:
            return what, d
    return None


def alarmed(rows: Sequence[Row], max_kl: float, since: int = 0, t_max: int | None = None) -> bool:
    """Whether the latest batch alone meets a rule of :func:`wreck`, its window made one batch.

    alarm = non-finite ∨ (max_kl < ∞ ∧ (Hᵤ < e maxᵥ≤ᵤ Hᵥ ∧ r̄ᵤ = F ∨ rambling at u)) ∨
            (D > max_kl ∧ r̄ᵤ ≤ F + c (L − F)),

    the terms of :func:`entropy_collapse`, :func:`rambling` and :func:`reward_collapse` on the
    latest row alone. Update u's batch is drawn from the weights before its step: a batch that
    raises no alarm says those weights were sound (``lm.sound`` keeps them as the result of a
    run the guard stops). The held-out fall is not read: an evaluation measures the weights
    after the step, not those the batch was drawn from.
    """
    now, recent = rows[-1], rows[since:]
    if non_finite(now) is not None:
        return True
    if max_kl < math.inf and entropy_collapse(recent, window=1) is not None:
        return True
    if max_kl < math.inf and t_max is not None and rambling(recent, t_max, window=1):
        return True
    d = drift(now.get("kl"), now["entropy"], rows[0]["entropy"])
    return d > max_kl and reward_collapse(recent, tail=1) is not None


def wreck_at_the_end(
    rows: Sequence[Row],
    looks: Sequence[Row],
    max_kl: float,
    since: int = 0,
    t_max: int | None = None,
) -> tuple[str, float] | None:
    """The guard's verdict on the weights a run ends with, or None where it does not fire.

    :func:`wreck` on ``rows`` with the ``looks`` after them (batches drawn from those weights,
    ``lm.sound.looks``), judged as each look comes, as each update's row is.
    """
    for k in range(1, len(looks) + 1):
        if (verdict := wreck([*rows, *looks[:k]], max_kl, since, t_max)) is not None:
            return verdict
    return None


def advice(config: FinetuneConfig, update: int, home: str | Path | None) -> str:
    """What to change to go on: the rate named against its default only when above it.

    ``home``: the run's directory, which ``--resume`` takes (None: a run that keeps none).
    """
    default = defaults(config.model, config.lora_r, config.defaults)["lr"]
    rate = (
        f"; --lr {config.lr:g} is {config.lr / default:.3g}x this model's default, {default:g}"
        if config.lr > default
        else ""
    )
    hold = "--beta B > 0" if config.beta == 0 else f"a --beta above {config.beta:g}"
    how = f"--resume {home}" if home else "run again"
    return (
        f"{rate}. To go on from update {update}: {how} with a smaller --lr or {hold} to hold "
        "the policy nearer, or with --max-kl inf if the run was learning"
    )


@dataclass
class Watches:
    """The watches' state: the rows seen, and what was said (a resumed run rebuilds it).

    ``t_max``: the run's T_max, which rambling is judged against (None: not judged). ``home``:
    the run's directory, named in the guard's advice by every rank (another rank's config has
    no ``out``, and whichever rank's stop reaches the user first must say where to resume).
    """

    t_max: int | None = None
    home: str | Path | None = None
    rows: list[Row] = field(default_factory=list)  # every update's metrics row so far
    warned_wreck: bool = False
    since: int = 0  # the first row the guard judges (a resume after its stop: the next one)
    alarm: bool = False  # whether the latest row alone raised an alarm (:func:`alarmed`)
    warned_mismatch: bool = False
    silent_updates: int = 0  # updates in a row with every group's rewards equal (then frozen)

    @property
    def first_entropy(self) -> float | None:
        """The first update's surprisal (the drift without a KL is measured from it)."""
        return float(self.rows[0]["entropy"]) if self.rows else None

    @property
    def warned_silent(self) -> bool:
        """Whether the silence was said: the count stops where it reached the bound."""
        return self.silent_updates >= SILENT_UPDATES

    def wrecked(self, config: FinetuneConfig, row: Row) -> tuple[str, float] | None:
        """The guard's step on an update's ``row``: :func:`wreck` the first time it fires."""
        self.rows.append(row)
        judged = len(self.rows) > self.since  # (a replay's rows before a stop: judged then)
        self.alarm = judged and alarmed(self.rows, config.max_kl, self.since, self.t_max)
        verdict = (
            wreck(self.rows, config.max_kl, self.since, self.t_max)
            if judged and not self.warned_wreck
            else None
        )
        if verdict is None:
            return None
        self.warned_wreck = True
        return verdict

    def silent(self, config: FinetuneConfig, row: Row) -> bool:
        """The silence watch's step on an update's ``row``: True the first time it is due."""
        if config.baseline == "none" or self.warned_silent:
            return False
        tied = row["frac_reward_zero_std"] == 1
        solved = row["accuracy"] == 1  # every completion correct: nothing left to learn
        self.silent_updates = self.silent_updates + 1 if tied and not solved else 0
        return self.warned_silent

    def replay(self, config: FinetuneConfig, rows: Iterable[Row], since: int = 0) -> None:
        """The watches stepped silently through a resumed run's rows, as the run left them.

        A run whose last row the guard judged a wreck was stopped there (or warned): its
        resume, the answer to it, is judged anew from the next update; so is the resume of a
        run stopped at its end (``since``: the rows it had, its checkpoint's
        :data:`GUARD_SINCE`), and the rows after that resume are judged from there.
        """
        fired, self.since = False, since
        for row in rows:
            fired = self.wrecked(config, row) is not None
            self.silent(config, row)
            self.mismatched(row)
        if fired:
            self.warned_wreck, self.since = False, len(self.rows)

    def mismatched(self, row: Row) -> float | None:
        """The mismatch watch's step: the fraction of ρ outside [0.9, 1.1], once, past the bar.

        The bar is :data:`~eligibility.lm.mismatch.WARN_OUTSIDE`; None below it or once said.
        """
        out = row.get("sampling/ratio/outside_0.9_1.1")
        if self.warned_mismatch or out is None or not float(out) > WARN_OUTSIDE:
            return None
        self.warned_mismatch = True
        return float(out)

    def check(self, config: FinetuneConfig, row: Row, update: int) -> None:
        """Every watch on the update's row: the signal, the mismatch, then the wreck (a stop)."""
        self.check_signal(config, row, update)
        self.check_mismatch(config, row, update)
        self.check_wreck(config, row, update)

    def check_mismatch(self, config: FinetuneConfig, row: Row, update: int) -> None:
        """Warn (once) when the scoring pass and the sampler disagree on many tokens.

        Not under an importance-sampling mode: its weight π_score/π_sample already makes the
        update the scored policy's gradient, as the mode states it (``lm.importance``).
        """
        cut = Sampling.of(config) is not None
        mode = resolved(
            config.importance_sampling, config.dtype, not cut, bool(config.max_staleness)
        )
        if (out := self.mismatched(row)) is None or mode != "none":
            return
        also = " (it trains the uncut policy on the cut sampler's completions)" if cut else ""
        if row.get("async/staleness"):  # a stale sampler (--max-staleness): its own words
            warnings.warn(
                f"at update {update}, {out:.1%} of the sampled tokens' ratios π_θ/π_sample lie "
                f"outside [0.9, 1.1]: the batch was drawn {row['async/staleness']} update(s) "
                "ago (--max-staleness) and the update is uncorrected (--importance-sampling "
                "none), neither policy's gradient; --importance-sampling exact weights it to "
                "the policy trained, unbiased",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        warnings.warn(
            f"at update {update}, {out:.1%} of the sampled tokens' ratios π_score/π_sample lie "
            f"outside [0.9, 1.1] (more than {WARN_OUTSIDE:.0%}; sampling/ratio/* in "
            f"metrics.csv): the scoring pass (--dtype {config.dtype}) and the sampler compute "
            f"the policy apart, and the update is neither policy's gradient; --importance-"
            f"sampling sequence-mask weights it to the scored policy's{also}, or --dtype float32 "
            "brings them together",
            RuntimeWarning,
            stacklevel=2,
        )

    def check_wreck(self, config: FinetuneConfig, row: Row, update: int) -> None:
        """Warn (once) when :func:`wreck` fires; stop a run with a target, its update checkpointed.

        Raises:
            Diverged: a wreck in a run with a ``--target-accuracy``: its result would be a
                wreck, so it is not saved as one; the update just logged is checkpointed (the
                trainer's stop), so ``--resume`` with another ``--lr`` or ``--max-kl`` goes on,
                and the last weights the guard judged sound are the result (``lm.sound``).
        """
        if (verdict := self.wrecked(config, row)) is None:
            return
        text = self._said(
            config, row, update, verdict, f"the run looks wrecked after update {update}"
        )
        if config.target_accuracy is not None:
            raise Diverged(f"{text}. Stopped with update {update} checkpointed")
        warnings.warn(text, RuntimeWarning, stacklevel=2)

    def check_end(self, config: FinetuneConfig, looks: Sequence[Row], update: int) -> None:
        """Stop a run whose last weights look wrecked (:func:`wreck_at_the_end`).

        With or without a target: those weights would be its result.

        Raises:
            Diverged: the wreck, said as :meth:`check_wreck` says it; the trainer's stop
                checkpoints the update and saves the last sound weights as the result.
        """
        verdict = wreck_at_the_end(self.rows, looks, config.max_kl, self.since, self.t_max)
        if verdict is None:
            return
        text = self._said(
            config,
            looks[-1],
            update,
            verdict,
            f"the weights the run ends with look wrecked after update {update}, judged on "
            f"{len(looks)} batches drawn from them as the next update would draw",
        )
        raise Diverged(f"{text}. Stopped with update {update} checkpointed")

    def _said(
        self,
        config: FinetuneConfig,
        row: Row,
        update: int,
        verdict: tuple[str, float],
        head: str,
    ) -> str:
        """The guard's one line: what was measured, the drift, ``--max-kl``, the advice."""
        what, d = verdict
        far = (
            f"the policy is {d:.3g} nats per token from the initial one"
            if row.get("kl") is not None or d >= 0
            else f"the sampled tokens' surprisal is {-d:.3g} nats per token below the first "
            "update's (no KL: --beta 0)"
        )
        return (
            f"{head}: {what}; {far} (--max-kl {config.max_kl:g}){advice(config, update, self.home)}"
        )

    def check_signal(self, config: FinetuneConfig, row: Row, update: int) -> None:
        """Warn (once) after :data:`SILENT_UPDATES` updates in a row of tied groups."""
        if not self.silent(config, row):
            return
        moved = (
            "only the KL term moved the policy"
            if config.kl_term != "none"
            else "the policy did not move (no optimiser step)"
        )
        warnings.warn(
            f"in each of the last {self.silent_updates} updates (to update {update}) every "
            f"group's {config.group_size} rewards were equal, so with --baseline "
            f"{config.baseline} every advantage was 0 and {moved}; a larger "
            "--group-size, or a reward that tells the completions apart, gives them a signal",
            RuntimeWarning,
            stacklevel=2,
        )


__all__ = [
    "ENTROPY_KEPT",
    "ENTROPY_WINDOW",
    "GUARD_SINCE",
    "RAMBLE_SHORTFALL",
    "RAMBLE_WINDOW",
    "SILENT_UPDATES",
    "Watches",
    "alarmed",
    "entropy_collapse",
    "held_out_fall",
    "non_finite",
    "rambling",
    "reward_collapse",
    "reward_level",
    "wreck",
    "wreck_at_the_end",
]
