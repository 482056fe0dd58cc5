"""What ``finetune`` watches after each update, and says once: a wreck, and silent updates.

A wreck is a policy driven far from the initial one with no better reward for it.
The drift is :func:`~eligibility.lm.learner.drift`: the KL to the reference where the run keeps
one, else the rise of the sampled tokens' surprisal since the first update. A policy past
``--max-kl`` whose batch mean reward is above the first batch's is learning, not wrecked: a
reply form learned from a sparse reward (the bare answer's first token from about 1% of the
initial model's mass to most of it) moves a pretrained model by about a nat per token, while a
wreck's rewards fall to or below where they started.

The silence: with a group baseline, an update whose every group's rewards were equal
(``frac_reward_zero_std`` 1) had every advantage exactly 0, and moved the policy by the KL term
only (without one, β = 0, by Adam's momentum only). A batch whose every completion is correct
(``accuracy`` 1) is a solved task, not a silent one.

Each watch reads an update's metrics row only, so a resumed run rebuilds both from its
metrics.csv (:meth:`Watches.replay`) and watches on as the uninterrupted run would.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from eligibility.lm.config import FinetuneConfig
from eligibility.lm.defaults import defaults
from eligibility.lm.learner import Diverged, drift

SILENT_UPDATES = 5
"""Updates in a row with every group's rewards equal before a run says they taught nothing."""


@dataclass
class Watches:
    """The two watches' state: what a resumed run rebuilds from its rows."""

    first_entropy: float | None = None  # the first update's surprisal (drift without a KL)
    first_reward: float = 0.0  # the first batch's mean reward (a drift with a better one learns)
    warned_drift: bool = False
    silent_updates: int = 0  # updates in a row with every group's rewards equal (then frozen)

    @property
    def warned_silent(self) -> bool:
        """Whether the silence was said: the count stops where it reached the bound."""
        return self.silent_updates >= SILENT_UPDATES

    def drifted(self, config: FinetuneConfig, row: Mapping[str, Any]) -> float | None:
        """The drift watch's step on an update's ``row`` (``kl``, ``entropy``, ``mean_reward``).

        Returns:
            The drift the first time it is past ``--max-kl`` with no better reward; else None.
        """
        if self.first_entropy is None:
            self.first_entropy, self.first_reward = float(row["entropy"]), float(row["mean_reward"])
        d = drift(row["kl"], row["entropy"], self.first_entropy)
        if not d > config.max_kl or row["mean_reward"] > self.first_reward or self.warned_drift:
            return None
        self.warned_drift = True
        return d

    def silent(self, config: FinetuneConfig, row: Mapping[str, Any]) -> bool:
        """The silence watch's step on an update's ``row``: True the first time it is due."""
        if config.baseline == "none" or self.warned_silent:
            return False
        tied = row["frac_reward_zero_std"] == 1
        solved = row["accuracy"] == 1  # every completion correct: nothing left to learn
        self.silent_updates = self.silent_updates + 1 if tied and not solved else 0
        return self.warned_silent

    def replay(self, config: FinetuneConfig, rows: Iterable[Mapping[str, Any]]) -> None:
        """Both watches stepped silently through a resumed run's rows, as the run left them."""
        for row in rows:
            self.drifted(config, row)
            self.silent(config, row)

    def check_drift(self, config: FinetuneConfig, row: Mapping[str, Any], update: int) -> None:
        """Warn (once) past ``--max-kl`` with no better reward for it; stop a run with a target.

        Raises:
            Diverged: past ``--max-kl`` in a run with a ``--target-accuracy``: its result would
                be a wreck, so it is not saved as one (the last checkpoint stays).
        """
        if (d := self.drifted(config, row)) is None:
            return
        default = defaults(config.model, config.lora_r, config.defaults)["lr"]
        if config.lr > default:
            advice = f"(this model's default is {default:g})"
        else:  # the default, or below it, and still a wreck: say what else holds the policy
            hold = "a --beta B > 0" if config.beta == 0 else f"a --beta above {config.beta:g}"
            advice = f"even at or below its default, {default:g} ({hold} holds it nearer)"
        text = (
            f"the policy is {d:.3g} nats per token from the initial one after update {update} "
            f"(--max-kl {config.max_kl:g}): --lr {config.lr:g} is likely too large for this "
            f"model {advice}"
        )
        if config.target_accuracy is not None:
            raise Diverged(f"{text}; stopped before saving its weights as the result")
        warnings.warn(text, RuntimeWarning, stacklevel=2)

    def check_signal(self, config: FinetuneConfig, row: Mapping[str, Any], update: int) -> None:
        """Warn (once) after :data:`SILENT_UPDATES` updates in a row of tied groups."""
        if not self.silent(config, row):
            return
        moved = "only the KL term" if config.kl_term != "none" else "nothing but Adam's momentum"
        warnings.warn(
            f"in each of the last {self.silent_updates} updates (to update {update}) every "
            f"group's {config.group_size} rewards were equal, so with --baseline "
            f"{config.baseline} every advantage was 0 and {moved} moved the policy; a larger "
            "--group-size, or a reward that tells the completions apart, gives them a signal",
            RuntimeWarning,
            stacklevel=2,
        )


__all__ = ["SILENT_UPDATES", "Watches"]
