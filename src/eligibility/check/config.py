"""The settings of ``eligibility check``: one field per option of the command line.

:class:`CheckConfig` validates its values and the family's options on construction (a
``ValueError`` naming the option and how to fix it); :mod:`eligibility.check.run` runs it.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field, fields
from typing import Literal

from eligibility.check.family import FAMILIES
from eligibility.check.family import get as get_family


@dataclass(frozen=True)
class CheckConfig:
    """What ``eligibility check`` runs, and how it reports."""

    problem: str = field(
        default="all",
        metadata={
            "help": "exact problems, comma-separated, or all (episodic: bandit, chain, "
            "gridworld, short-corridor; --sequence: length, difficulty, kl; --off-policy: "
            "ratio-one, near, far)"
        },
    )
    family: str = field(
        default=next(iter(FAMILIES)),
        metadata={
            "help": f"the problems and contract: {', '.join(FAMILIES)} (--sequence: the "
            "language-model form, fn(logps, batch) or fn(model, batch); --off-policy: an "
            "off-policy sequence loss, the batch carrying old_logps and sampler_logps)",
            "shorthand": {"--sequence": "sequence", "--off-policy": "off-policy"},
        },
    )
    kl: Literal["reverse", "none"] = field(
        default="reverse",
        metadata={
            "help": "the objective you mean to optimise: reverse (J = E[R] − β·KL(π_θ ‖ π_ref), "
            "the sequence-level reverse KL at the problem's β, the default) or none (J = E[R]: "
            "a loss without a KL term; the problems with β > 0 are left out)"
        },
    )
    micro_batches: int = field(
        default=1,
        metadata={
            "help": "M: a batch is split into M micro-batches of whole groups, your function is "
            "called on each and the gradients summed, as gradient accumulation does "
            "(--sequence; M divides the problem's groups)",
            "min": 1,
        },
    )
    temperature: float = field(
        default=1.0,
        metadata={
            "help": "τ: completions are drawn from softmax(logits / τ), the policy checked; "
            "batch.temperature holds it (--sequence; the model form scores the logits itself)"
        },
    )
    beta: float | None = field(
        default=None,
        metadata={
            "help": "β of the declared objective J = E[R] − β·KL(π_θ ‖ π_ref) on every problem "
            "(--sequence; default: each problem's own, 0 on length and difficulty, 0.1 on kl); "
            "a loss whose KL weight is another reads kl-weight"
        },
    )
    loss_beta: float | None = field(
        default=None,
        metadata={
            "help": "the KL weight your loss uses, where it may differ from the objective's β: "
            "the named mistakes are also tried at that weight, so kl-weight is named beside "
            "the rest (--sequence; --framework reads it from the configuration)"
        },
    )
    top_k: int | None = field(
        default=None,
        metadata={
            "help": "--off-policy: the sampler keeps the k most probable tokens at each step "
            "(renormalised, as engines cut); the report says whether your loss estimates the "
            "policy's ∇J or the truncated sampler's",
            "min": 1,
        },
    )
    top_p: float | None = field(
        default=None,
        metadata={
            "help": "--off-policy: the sampler keeps the smallest set of tokens whose "
            "probability reaches p at each step (nucleus, renormalised)"
        },
    )
    min_p: float | None = field(
        default=None,
        metadata={
            "help": "--off-policy: the sampler keeps the tokens at least p_min times as "
            "probable as the most probable one at each step (renormalised)"
        },
    )
    advantages: str | None = field(
        default=None,
        metadata={
            "help": "FILE.py:FUNCTION computing the advantages, advantages(batch) -> [N]: called "
            "on each whole batch, its result handed to your loss as batch.advantages (and a "
            "micro-batch may then split a group) (--sequence)",
            "metavar": "FILE.py:FUNCTION",
        },
    )
    world_size: int = field(
        default=1,
        metadata={
            "help": "R: each batch is shared among R ranks (whole groups), your function is "
            "called on each share and the gradients averaged, as DDP does (--sequence)",
            "min": 1,
        },
    )
    form: Literal["loss", "update", "logps", "model", "step"] | None = field(
        default=None,
        metadata={
            "help": "episodic: loss (fn(policy, episodes, gamma), the default) or update "
            "(fn(policy, env, gamma)); --sequence: logps (fn(logps, batch), the default), "
            "model (fn(model, batch), a Hugging Face causal LM) or step (fn(model, optimizer, "
            "batch): it calls backward() and optimizer.step() itself, the check reads the update)"
        },
    )
    samples: int | None = field(
        default=None,
        metadata={
            "help": "N, calls of your function per problem (default: chosen per problem so "
            "that a sign error or a 2× scale is caught with 99%% power)"
        },
    )
    episodes: int = field(
        default=8,
        metadata={
            "help": "E, episodes handed to each call (episodic)",
            "flag": "--episodes-per-call",
            "metavar": "E",
            "deprecated": {"--episodes": ...},
        },
    )
    seed: int = field(default=0, metadata={"help": "seeds the batches (and torch, update form)"})
    policy: Literal["logits", "probs"] = field(
        default="logits",
        metadata={
            "help": "episodic: policy(obs) gives logits, or probabilities (rows summing to 1)"
        },
    )
    objective: bool = field(
        default=False, metadata={"help": "the function returns an objective to maximise"}
    )
    alpha: float = field(
        default=1e-3,
        metadata={"help": "false-alarm rate per problem of the z-test (Bonferroni)"},
    )
    allow_scale: bool = field(
        default=False,
        metadata={
            "help": "a constant scale (verdict scaled: a step size, not a bias) passes: exit 0"
        },
    )
    timeout: float = field(
        default=60.0, metadata={"help": "seconds one call of your function may take"}
    )
    memory: int = field(
        default=4096,
        metadata={"help": "MiB your function may allocate (in the worker process running it)"},
    )
    format: Literal["text", "json"] = field(
        default="text", metadata={"help": "a table for a person, or JSON for scripts"}
    )
    sequence: InitVar[bool] = False
    """The same as ``family="sequence"`` (the Python spelling of ``--sequence``)."""
    off_policy: InitVar[bool] = False
    """The same as ``family="off-policy"`` (the Python spelling of ``--off-policy``)."""

    def __post_init__(self, sequence: bool, off_policy: bool) -> None:
        if off_policy or sequence:
            object.__setattr__(self, "family", "off-policy" if off_policy else "sequence")
        family = get_family(self.family)
        if self.form is None:
            object.__setattr__(self, "form", family.forms[0])
        elif self.form not in family.forms:
            raise ValueError(
                f"--form {self.form} is not a form of the {family.name} check; it takes "
                f"{' or '.join(family.forms)}"
            )
        for name in (
            "micro_batches",
            "temperature",
            "beta",
            "loss_beta",
            "advantages",
            "world_size",
            "top_k",
            "top_p",
            "min_p",
        ):
            if getattr(self, name) != _DEFAULTS[name] and name not in family.options:
                flag = "--" + name.replace("_", "-")
                hint = (
                    "; a cut sampler is the off-policy check's (--off-policy: the batch "
                    "carries its sampler_logps, ratio-one is θ = θ_old)"
                    if name in ("top_k", "top_p", "min_p")
                    else ""
                )
                raise ValueError(f"{flag} is not taken by the {family.name} check{hint}")
        if self.micro_batches < 1:
            raise ValueError(f"--micro-batches must be at least 1, got {self.micro_batches}")
        if self.top_p is not None and not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.min_p is not None and not (0.0 <= self.min_p < 1.0):
            raise ValueError(f"--min-p must be in [0, 1), got {self.min_p}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"--top-k must be at least 1, got {self.top_k}")
        if self.world_size < 1:
            raise ValueError(f"--world-size must be at least 1, got {self.world_size}")
        if not (0.05 <= self.temperature <= 20.0):
            raise ValueError(f"--temperature must be in [0.05, 20], got {self.temperature}")
        if self.kl not in ("reverse", "none"):
            raise ValueError(f"--kl must be reverse or none, got {self.kl!r}")
        for name in ("beta", "loss_beta"):
            value = getattr(self, name)
            if value is not None and not (0.0 <= value <= 10.0):
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{flag} must be in [0, 10], got {value}")
        if self.beta is not None and self.kl == "none":
            raise ValueError(
                "--beta weighs the objective's KL and --kl none declares one without it; "
                "drop one of them"
            )
        if not isinstance(self.problem, str):  # a list of names, from Python
            object.__setattr__(self, "problem", ",".join(self.problem))
        self.problems  # noqa: B018  (validates the names)
        if self.samples is not None and self.samples < 30:
            raise ValueError(f"--samples must be at least 30 for the z-test, got {self.samples}")
        if self.episodes < 1:
            raise ValueError(f"--episodes-per-call must be at least 1, got {self.episodes}")
        if not (0.0 < self.alpha < 0.5):
            raise ValueError(f"--alpha must be in (0, 0.5), got {self.alpha}")
        if self.seed < 0:
            raise ValueError(f"--seed must be >= 0, got {self.seed}")
        if not (self.timeout > 0):
            raise ValueError(f"--timeout must be a positive number of seconds, got {self.timeout}")
        if self.memory < 64:
            raise ValueError(f"--memory must be at least 64 (MiB), got {self.memory}")

    @property
    def problems(self) -> tuple[str, ...]:
        """The problems checked: ``problem``'s names, or all of them.

        ``all`` leaves out the problems holding a KL where the objective has none
        (``kl="none"``).

        Raises:
            ValueError: an unknown name, or a problem whose objective holds a KL with
                ``kl="none"``.
        """
        family = get_family(self.family)
        names = tuple(family.problems)
        kept = tuple(n for n in names if self.kl == "reverse" or n not in family.kl_problems)
        if self.beta is not None:  # the declared β is every problem's: none is left out
            kept = names
        if self.problem == "all":
            return kept
        asked = tuple(dict.fromkeys(n.strip() for n in self.problem.split(",")))
        for name in asked:
            if name not in names:
                raise ValueError(
                    f"unknown problem {name!r} for the {family.name} check; choose among "
                    f"{', '.join(names)} (comma-separated) or all"
                )
            if name not in kept:
                raise ValueError(
                    f"problem {name} holds a KL to the reference (β > 0) and --kl none "
                    f"declares an objective without one; choose among {', '.join(kept)}, "
                    "or drop --kl none"
                )
        return asked


_DEFAULTS = {f.name: f.default for f in fields(CheckConfig)}


__all__ = ["CheckConfig"]
