"""``check --framework``: a framework's own advantage and loss code against the exact gradient.

One row per framework (:data:`FRAMEWORKS`): the package it imports, the version the adapter
is tested with, the line that installs it, and the adapter, which turns a configuration in
the framework's own keys into the check's ``loss(logps, batch)`` (or ``loss(model, batch)``)
that calls the framework's code unchanged. Another installed version runs with a warning
naming the tested one (the check holds the code that is installed; only the docs' table is
tied to the tested version). A framework that cannot be imported is a ``ValueError`` carrying
its install line.

    >>> sorted(FRAMEWORKS)
    ['openrlhf', 'trl', 'verl']

See docs/check.md ("A framework's own code"); the verdicts measured: docs/measurements/check.md.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eligibility._keyfile import read_mapping
from eligibility._output import quoted


@dataclass(frozen=True)
class Framework:
    """One framework the check can run unchanged.

    Attributes:
        name: the value of ``--framework``.
        distribution: the installed distribution whose version is compared.
        version: the version the adapter and docs/measurements/check.md's table were made with.
        install: the command that installs that version.
        adapter: the module (under this package) with ``loss_function(config)`` and
            ``kl_coefficient(config)``.
        form: the check's form the loss takes (``logps`` or ``model``).
    """

    name: str
    distribution: str
    version: str
    install: str
    adapter: str
    form: str


FRAMEWORKS: dict[str, Framework] = {
    "trl": Framework(
        "trl", "trl", "1.16.0", "pip install -e '.[frameworks]' (trl==1.16.0)", "trl", "model"
    ),
    "verl": Framework(
        "verl",
        "verl",
        "0.9.1",
        "make peers (verl==0.9.1 and its pure-torch needs, --no-deps into .venv/peers), then "
        "PYTHONPATH=.venv/peers",
        "verl",
        "logps",
    ),
    "openrlhf": Framework(
        "openrlhf",
        "openrlhf",
        "0.11.2",
        "make peers (openrlhf==0.11.2, --no-deps into .venv/peers), then PYTHONPATH=.venv/peers",
        "openrlhf",
        "logps",
    ),
}
"""``--framework`` → its row."""


MAX_CONFIG_BYTES = 16_000_000
"""The largest framework configuration read (a YAML or JSON of keys: kilobytes)."""


def load_config(source: str | Path | dict[str, Any]) -> dict[str, Any]:
    """The framework configuration: a mapping, or a JSON or YAML file (by its suffix).

    A file is read as ``eligibility._keyfile.read_mapping`` reads one: each key once (a key
    given twice is refused by name and line: a reader would keep the last without a word), no
    YAML alias, at most :data:`MAX_CONFIG_BYTES`.

    Raises:
        ValueError: a file that does not exist, is not a regular file, is over
            :data:`MAX_CONFIG_BYTES`, does not parse, gives a key twice, or is not a mapping.
    """
    if isinstance(source, dict):
        return dict(source)
    return read_mapping(
        source,
        f"the --config file {source}",
        MAX_CONFIG_BYTES,
        "a framework's configuration is kilobytes",
        "the framework's keys",
    )


def row(framework: str) -> Framework:
    """The row of ``framework``, its package imported and its version compared.

    Raises:
        ValueError: an unknown framework, or one that cannot be imported (with the install line).
    """
    if framework not in FRAMEWORKS:
        raise ValueError(
            f"unknown --framework {framework!r}; choose one of {', '.join(sorted(FRAMEWORKS))}"
        )
    f = FRAMEWORKS[framework]
    from importlib.metadata import PackageNotFoundError, version

    try:
        if importlib.util.find_spec(f.distribution) is None:  # found, not run: see openrlhf.py
            raise ImportError(f"No module named {f.distribution!r}")
        installed = version(f.distribution)
    except (ImportError, PackageNotFoundError) as err:
        raise ValueError(f"{f.name} {f.version} is not importable ({err}); {f.install}") from None
    if installed != f.version:
        warnings.warn(
            f"{f.name} {installed} is installed; the adapter is tested with {f.name} "
            f"{f.version} (docs/measurements/check.md's table): its verdicts may differ",
            stacklevel=2,
        )
    return f


def adapt(
    framework: str, config: str | Path | dict[str, Any], family: str = "sequence"
) -> tuple[Callable[..., Any], str]:
    """The check's loss for ``framework`` configured by ``config``, and its form.

    Args:
        framework: ``trl``, ``verl`` or ``openrlhf``.
        config: the configuration in the framework's keys (a mapping or a JSON/YAML file).
        family: the check family whose batches it takes; on ``episodes`` a ``logps``-form
            adapter's loss is handed each batch of episodes as the framework's multi-turn path
            hands it (:func:`on_episodes`).

    Returns:
        ``(loss, form)``: the loss calling the framework's code, and ``"logps"`` or ``"model"``.

    Raises:
        ValueError: an unknown framework, one that is not installed, or a bad configuration.
    """
    f = row(framework)
    adapter = importlib.import_module(f"eligibility.check.frameworks.{f.adapter}")
    loss = adapter.loss_function(load_config(config))
    if family == "episodes" and f.form == "logps":
        return on_episodes(loss), "model"
    return loss, f.form


def as_rollout(batch: Any, logps: Any) -> Any:
    """A batch of episodes as verl's agent loop and OpenRLHF's agent executor hand it on.

    Each episode one response: every token after the prompt (``attention``, the world's
    included), the loss's mask 1 on the model's tokens only (verl's ``response_mask``,
    OpenRLHF's ``action_mask``: ``completion_mask``), one reward, Σₖ rₖ, on its last token (verl's
    ``rm_scores``; OpenRLHF sums its steps' rewards); on-policy, θ_old's log-probs are θ's
    (detached); the groups consecutive, G rows each.
    """
    import types

    import torch

    n = len(batch.completion_ids)
    return types.SimpleNamespace(
        prompt_ids=batch.prompt_ids,
        completion_ids=batch.completion_ids,
        completion_mask=batch.completion_mask.to(logps.dtype),
        attention=(batch.turn >= 0).long(),
        rewards=batch.turn_rewards.sum(1).to(logps.dtype),
        old_logps=logps.detach(),
        ref_logps=batch.ref_logps,
        group_size=batch.group_size,
        group_ids=torch.arange(n) // batch.group_size,
        beta=batch.beta,
    )


def on_episodes(loss: Callable[..., Any]) -> Callable[..., Any]:
    """``loss(logps, batch)`` of a ``logps``-form adapter as ``loss(model, batch of episodes)``.

    The log-probs are the check's (as the ``logps`` form hands them: 0 on the world's tokens);
    the batch is :func:`as_rollout`'s.
    """

    def on(model: Any, batch: Any) -> Any:
        from eligibility.lm.sample import token_logps

        logps = token_logps(model, batch, vocab_size=model.vocab_size)
        return loss(logps, as_rollout(batch, logps))

    return on


def kl_coefficient(framework: str, config: str | Path | dict[str, Any]) -> float | None:
    """The KL weight ``config`` gives the framework's loss (None: no KL term)."""
    f = row(framework)
    adapter = importlib.import_module(f"eligibility.check.frameworks.{f.adapter}")
    return adapter.kl_coefficient(load_config(config))


def sampler(framework: str, config: dict[str, Any]) -> dict[str, Any]:
    """The check's sampler settings that ``config`` fixes (``temperature``), or none.

    An adapter with a ``sampler(config)`` reads them from the framework's keys (TRL's
    ``temperature``) and refuses the keys it cannot reproduce by name.
    """
    f = row(framework)
    adapter = importlib.import_module(f"eligibility.check.frameworks.{f.adapter}")
    read = getattr(adapter, "sampler", None)
    return {} if read is None else dict(read(config))


def settings_from(framework: str, setup: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """The check's settings: the caller's, with the configuration's sampler and KL weight.

    The configuration's ``temperature`` is the sampler's τ (a different ``--temperature``
    beside it is refused); its KL coefficient is the loss's weight (``loss_beta``), so that
    a weight other than the objective's β is named beside the other mistakes.

    In the episodes family the objective's β is each problem's own and the episodes are drawn
    at τ = 1: the configuration's KL weight is named where it differs
    (:func:`kl_weight`), and another τ is refused.

    Raises:
        ValueError: a ``--temperature`` other than the configuration's, or a τ ≠ 1 in the
            episodes family.
    """
    out = dict(options)
    if out.get("family") == "episodes":
        tau = sampler(framework, setup).get("temperature", 1.0)
        if tau != 1.0:
            raise ValueError(
                f"the configuration's temperature {tau:g}: the episodes check draws its "
                "episodes at τ = 1 (its exact problems' policy); remove it"
            )
        return out
    for key, value in sampler(framework, setup).items():
        given = out.get(key)
        if given is not None and given != 1.0 and given != value:
            raise ValueError(
                f"--{key} {given:g} differs from the configuration's {key}: {value:g}; the "
                "configuration's is used, drop the flag"
            )
        out[key] = value
    coefficient = kl_coefficient(framework, setup)
    if out.get("loss_beta") is not None or coefficient is None:
        return out  # no KL term: kl-no-gradient names it where the objective has one
    if out.get("beta") is None and out.get("kl", "reverse") == "reverse":
        out["beta"] = coefficient  # the objective the configuration declares: its β
    else:
        out["loss_beta"] = coefficient  # another objective declared: kl-weight where they differ
    return out


def family_keys(framework: str, setup: dict[str, Any], family: str) -> None:
    """Refuse the adapter's own keys where ``family`` does not take them, before any import.

    An adapter with a ``family_keys(config, family)`` (TRL's: its rollout keys are the
    episodes family's) refuses them; the others take every key to their framework.

    Raises:
        ValueError: a key of the adapter's that ``family`` does not take.
    """
    adapter = importlib.import_module(
        f"eligibility.check.frameworks.{FRAMEWORKS[framework].adapter}"
    )
    refuse = getattr(adapter, "family_keys", None)
    if refuse is not None:
        refuse(setup, family)


def kl_weight(
    framework: str, setup: dict[str, Any], settings: dict[str, Any]
) -> tuple[float | None, dict[str, float] | None]:
    """(the KL weight to name where it differs from a problem's β, each problem's β or None).

    The sequence families: the loss's weight where another objective was declared
    (``loss_beta``), against the declared β. The episodes family: the configuration's weight,
    against each problem's own β.
    """
    if settings.get("family") != "episodes":
        return settings.get("loss_beta"), None
    from eligibility.check.episodes import FAMILY as EPISODES

    betas = {name: float(build().beta) for name, build in EPISODES.problems.items()}
    return kl_coefficient(framework, setup), betas


def objective_line(framework: str, setup: dict[str, Any], settings: dict[str, Any]) -> str | None:
    """The report's line on the objective the configuration declares, or None without a KL.

    J = E[R] − β·KL(π_θ ‖ π_ref) with the configuration's β (where no ``--beta`` or ``--kl``
    declares another), and the KL's estimator as the adapter reads it (``kl_estimator``).
    """
    coefficient = kl_coefficient(framework, setup)
    if coefficient is None:
        return None
    f = row(framework)
    adapter = importlib.import_module(f"eligibility.check.frameworks.{f.adapter}")
    read = getattr(adapter, "kl_estimator", None)
    estimator = read(setup) if read is not None else None
    how = f"; its loss's KL: {estimator}" if estimator else ""
    if settings.get("family") == "episodes":
        return (
            f"the configuration's KL weight {coefficient:g}; each problem's objective keeps its "
            f"own β (kl-weight where they differ){how}"
        )
    if settings.get("beta") == coefficient and settings.get("loss_beta") is None:
        return (
            f"objective from the configuration: J = E[R] − β·KL(π_θ ‖ π_ref), β = "
            f"{coefficient:g} on every problem{how}"
        )
    declared = "none (--kl none)" if settings.get("kl") == "none" else f"β = {settings['beta']:g}"
    return (
        f"the configuration's KL weight {coefficient:g}, the declared objective's {declared}{how}"
    )


FAMILY = "sequence"
"""The check family a framework's loss is held in: its on-policy step (θ = θ_old)."""


def check_settings(framework: str, options: dict[str, Any]) -> dict[str, Any]:
    """The check's settings for ``framework``: the caller's, in the framework's family.

    A framework's step is checked on-policy (:data:`FAMILY`: θ = θ_old, its old log-probs its
    model's own) unless its adapter takes the off-policy family's batches too (its
    ``FAMILIES``: the sampler's log-probs handed in as its rollout engine's), or the episodes
    family's (each episode handed in through the framework's multi-turn path).

    Raises:
        ValueError: a family the adapter does not take, or ranks or advantages of the user's
            (the framework's step runs in one process and computes its own advantages).
    """
    if framework not in FRAMEWORKS:
        raise ValueError(
            f"unknown --framework {framework!r}; choose one of {', '.join(sorted(FRAMEWORKS))}"
        )
    adapter = importlib.import_module(
        f"eligibility.check.frameworks.{FRAMEWORKS[framework].adapter}"
    )
    families = getattr(adapter, "FAMILIES", (FAMILY,))
    asked = "off-policy" if options.get("off_policy") else options.get("family") or FAMILY
    if asked not in families:
        flag = "--off-policy" if asked == "off-policy" else f"--family {asked}"
        takers = ", ".join(n for n, f in FRAMEWORKS.items() if _takes(f, asked)) or "none"
        raise ValueError(
            f"--framework {framework} checks the framework's on-policy step (θ = θ_old, its "
            f"old log-probs its model's own); {flag} is not supported with --framework "
            f"{framework} (the frameworks that take it: {takers})"
        )
    if options.get("world_size", 1) != 1 or options.get("advantages") is not None:
        raise ValueError(
            f"--framework {framework} runs the framework's own step in one process, its "
            "advantages included: --world-size and --advantages are for your own loss"
        )
    settings = {k: v for k, v in options.items() if k not in ("sequence", "off_policy")}
    return {**settings, "family": asked}


def _takes(f: Framework, family: str) -> bool:
    adapter = importlib.import_module(f"eligibility.check.frameworks.{f.adapter}")
    return family in getattr(adapter, "FAMILIES", (FAMILY,))


def subject(
    framework: str, config: dict[str, Any], source: str | Path | dict[str, Any] | None
) -> str:
    """The report's first line: framework, trainer, version, configuration, the keys it read.

    The keys the configuration gives (:func:`given_keys`), and those the check sets itself
    whatever it says (the adapter's ``SET_BY_CHECK``: its problems' group size, batch and
    lengths), a given one among them said not used.

    >>> subject("verl", {}, "grpo.yaml")  # doctest: +SKIP
    'verl 0.9.1 (ppo_loss, compute_advantage), config grpo.yaml; keys read: none (verl's
    defaults); set by the check: actor.rollout_n (each problem's G), …'
    """
    from importlib.metadata import version

    f = FRAMEWORKS[framework]
    adapter = importlib.import_module(f"eligibility.check.frameworks.{f.adapter}")
    where = "a mapping" if source is None or isinstance(source, dict) else f"config {source}"
    given = given_keys(config)
    owned = getattr(adapter, "SET_BY_CHECK", {})
    read = [k for k in given if k not in owned]
    said = ", ".join(read) if read else f"none ({f.name}'s defaults)"
    unused = {k: f"; the configuration's {quoted(given[k])} not used" for k in owned if k in given}
    set_by = ", ".join(f"{k} ({why}{unused.get(k, '')})" for k, why in owned.items())
    return (
        f"{f.name} {version(f.distribution)} ({adapter.trainer_name(config)}), {where}; keys "
        f"read: {said}" + (f"; set by the check: {set_by}" if set_by else "")
    )


def given_keys(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The configuration's keys with their values, each named as the report names it.

    A nested section's as ``actor.clip_ratio``; OpenRLHF's leading dashes dropped.

    >>> given_keys({"actor": {"clip_ratio": 0.2}, "--algo.kl.init_coef": 0.01, "beta": 0})
    {'actor.clip_ratio': 0.2, 'algo.kl.init_coef': 0.01, 'beta': 0}
    """
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = prefix + (str(key).lstrip("-") if str(key).startswith("--") else str(key))
        if isinstance(value, dict) and value:
            out.update(given_keys(value, name + "."))
        else:
            out[name] = value
    return out


def name_kl_weight(
    report: Any, coefficient: float | None, betas: dict[str, float] | None = None
) -> Any:
    """Name a KL weight that differs from the objective's β on each problem it biases.

    The check's objective is E[R] − β·KL with the problem's β (``batch.beta``); a framework
    configured with another KL coefficient estimates the gradient of another objective. Where
    such a problem's verdict is not ``unbiased``, the diagnosis names both values (before
    whatever else was found, ``other`` dropped, and a named variant times a fitted constant,
    ``V × c``, dropped too: its constant was fitted to the gradient of the other objective,
    so it names the KL weight's effect, not a mistake; TRL's ``RLOOTrainer`` with its
    default β = 0.05 reads ``std-normalised × 0.45`` on ``kl`` without this rule).

    Args:
        report: the :class:`~eligibility.check.run.CheckReport` (changed in place).
        coefficient: the configuration's KL weight (None: no KL term).
        betas: each problem's β (default: the lab's built-in problems').

    Returns:
        The report.
    """
    if coefficient is None:
        return report
    if betas is None and report.beta is not None:
        betas = {p.problem: float(report.beta) for p in report.problems}
    if betas is None:
        from eligibility.lab.sequence.builtin import PROBLEMS

        betas = {p.problem: float(PROBLEMS[p.problem]().beta) for p in report.problems}
    from eligibility.check.diagnosis import Diagnosis

    for p in report.problems:
        beta = float(betas[p.problem])
        if p.verdict == "unbiased" or abs(coefficient - beta) <= 1e-12 * max(1.0, beta):
            continue
        fitted = p.finding is not None and p.finding.times is not None
        found = () if p.names == ("other",) or fitted else p.names
        found = tuple(d for d in found if d != "kl-weight")  # a variant at the config's weight
        p.finding = Diagnosis(
            ("kl-weight", *found),
            notes=(("kl-weight", f"config {coefficient:g}, objective β = {beta:g}"),),
        )
    return report


__all__ = [
    "FRAMEWORKS",
    "Framework",
    "adapt",
    "as_rollout",
    "check_settings",
    "family_keys",
    "given_keys",
    "kl_coefficient",
    "kl_weight",
    "load_config",
    "name_kl_weight",
    "objective_line",
    "on_episodes",
    "row",
    "sampler",
    "settings_from",
    "subject",
]
