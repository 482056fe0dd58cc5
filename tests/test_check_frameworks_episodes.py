"""The frameworks' multi-turn paths: ``check --framework trl|verl|openrlhf --family episodes``.

TRL's derivations are here; verl's and OpenRLHF's beside their cases (:data:`PEER_CASES`).

Each episode of the exact two-turn problems reaches TRL 1.16.0 through its extension point:
``rollout_func`` returns every token after the prompt (the model's replies and the world's
answer between them) with ``env_mask``, 1 on the model's tokens, which TRL treats as its tool
mask; the rewards come through its reward functions. The verdicts below were derived
beforehand from TRL's ``trl/trainer/grpo_trainer.py`` (line numbers of 1.16.0), not read off
the check:

* one advantage a completion (l. 2763: the reward functions' columns summed, ``nansum(dim=1)``;
  l. 3059: ``advantages.unsqueeze(1)``, the same on every token): every turn is weighted by the
  episode's whole return, ``turns-weighted-by-whole-return``. Alone it changes no mean
  (E[r₁ ∇ln π(o⁽²⁾ | …)] = 0); beside a length or std normaliser it does, and is named with it.
  Per-turn reward functions are summed the same way under the default
  ``multi_objective_aggregation: sum_then_normalize`` (l. 2763); ``normalize_then_sum``
  (l. 2794) standardises each turn's column in its group before the sum, a form no row of the
  option table has: ``other``;
* the group mean including the sample (l. 2765) is ½ × the leave-one-out baseline at G = 2, a
  step size;
* ``scale_rewards`` ``group``/``batch`` divide by a std (l. 2787): ``std-normalised``;
* the loss's mask is ``completion_mask * tool_mask`` (l. 2272 ``env_mask`` → ``tool_mask``;
  l. 3027): ``env_mask: every-token`` trains the world's tokens, ``world-tokens-trained``;
* ``loss_type``: ``dapo`` (the default; l. 3170, ``num_items_in_batch`` the batch's model
  tokens) and ``bnpo`` (l. 3159, one micro-batch here) a token mean over the batch,
  ``batch-dependent-normaliser``; ``grpo`` each episode's mean over its model tokens (l. 3154),
  ``length-normalised``; ``dr_grpo`` Σ/(N · ``max_completion_length``) (l. 3164), a constant:
  with ``scale_rewards: none`` TRL's only rescaling of REINFORCE, c = ½ · 1/6 on the problems
  without a KL (``scaled``), the base every other key is tried beside;
* ``mask_truncated_completions`` drops an episode whose last token is no EOS (l. 2490: its last
  reply cut at T): ``truncated-masked``;
* ``beta`` > 0 puts k3 per token in the loss (l. 3101), times the ratio with the default
  ``use_bias_correction_kl`` (l. 3105): ``kl-token-local``; without it ``kl-forward``; β = 0 on
  ``two-turn-kl`` (β = 0.3 there): ``kl-no-gradient``.

Fast here: the adapter's shape (what ``rollout_func`` returns, the refusals) and the wide
variants against the plain loop; slow: TRL's own loss against the derived variant batch by
batch, and every key's verdict through the check (a check of TRL is tens of seconds a problem).
Regenerate the measurement record's table with ``ELIGIBILITY_WRITE_DOCS=1 PYTHONPATH=src
.venv/bin/python -m pytest -m slow -n 0 tests/test_check_frameworks_episodes.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eligibility.check import episodes as ep  # noqa: E402
from eligibility.check.frameworks import trl as adapter  # noqa: E402

WR = ep.WHOLE_RETURN
STD_TOKEN = "std-normalised, batch-dependent-normaliser"
BASE = {"bf16": False}
"""float32 (TRL's default on this machine is bf16 autocast, which moves a batch's estimate by
about 1 %): the batch-by-batch match below is to float rounding."""
TWO = ("two-turn", "two-turn-first-pays")
"""The problems without a KL: each configuration without one reads the same on both."""


def _on(found: tuple[str, str], problems: tuple[str, ...] = TWO) -> dict[str, tuple[str, str]]:
    return dict.fromkeys(problems, found)


ONE = {"loss_type": "dr_grpo", "scale_rewards": "none"}
"""TRL's one rescaling of REINFORCE on episodes: each key of its own is tried beside it."""
CASES: dict[str, tuple[dict, dict[str, tuple[str, str]], tuple]] = {
    # name → (the keys, {problem: derived (verdict, diagnosis)}, the derivation's estimator:
    # (mask, weighting, baseline, scale, aggregation, kl) of the option table)
    "defaults (dapo, scale_rewards=group)": (
        {},
        {
            **_on(("biased", f"{WR}, {STD_TOKEN}")),
            "two-turn-kl": ("biased", f"{WR}, {STD_TOKEN}, kl-no-gradient"),
        },
        ("model", "outcome", "mean", "group-std", "token-mean", "none"),
    ),
    "scale_rewards=batch": (
        {"scale_rewards": "batch"},
        {"two-turn": ("biased", f"{WR}, {STD_TOKEN}")},
        ("model", "outcome", "mean", "batch-std", "token-mean", "none"),
    ),
    "scale_rewards=none": (
        {"scale_rewards": "none"},
        {"two-turn": ("biased", f"{WR}, batch-dependent-normaliser")},
        ("model", "outcome", "mean", "none", "token-mean", "none"),
    ),
    "grpo scale_rewards=none": (
        {"loss_type": "grpo", "scale_rewards": "none"},
        {"two-turn": ("biased", f"{WR}, length-normalised")},
        ("model", "outcome", "mean", "none", "sequence-mean", "none"),
    ),
    "bnpo scale_rewards=none": (
        {"loss_type": "bnpo", "scale_rewards": "none"},
        {"two-turn": ("biased", f"{WR}, batch-dependent-normaliser")},
        ("model", "outcome", "mean", "none", "token-mean", "none"),
    ),
    "dr_grpo scale_rewards=none": (
        ONE,
        {**_on(("scaled", "scale")), "two-turn-kl": ("biased", f"{WR}, kl-no-gradient")},
        ("model", "outcome", "mean", "none", "constant", "none"),
    ),
    "dr_grpo none mask_truncated_completions": (
        {**ONE, "mask_truncated_completions": True},
        _on(("biased", f"truncated-masked, {WR}")),
        ("truncated-masked", "outcome", "mean", "none", "constant", "none"),
    ),
    "dr_grpo none beta=0.3": (
        {**ONE, "beta": 0.3},
        {"two-turn-kl": ("biased", f"{WR}, kl-token-local")},
        ("model", "outcome", "mean", "none", "constant", "k3-ratio"),
    ),
    "dr_grpo none beta=0.3 use_bias_correction_kl=False": (
        {**ONE, "beta": 0.3, "use_bias_correction_kl": False},
        {"two-turn-kl": ("biased", f"{WR}, kl-forward")},
        ("model", "outcome", "mean", "none", "constant", "k3"),
    ),
    "dr_grpo none env_mask=every-token": (
        {**ONE, "env_mask": "every-token"},
        _on(("biased", f"world-tokens-trained, {WR}")),
        ("world-tokens-trained", "outcome", "mean", "none", "constant", "none"),
    ),
    "rewards=per-turn (defaults)": (
        {"rewards": "per-turn"},
        {"two-turn": ("biased", f"{WR}, {STD_TOKEN}")},
        ("model", "outcome", "mean", "group-std", "token-mean", "none"),
    ),
    "dr_grpo none rewards=per-turn": (
        {**ONE, "rewards": "per-turn"},
        {"two-turn": ("scaled", "scale")},
        ("model", "outcome", "mean", "none", "constant", "none"),
    ),
    "dr_grpo none rewards=per-turn normalize_then_sum": (
        {**ONE, "rewards": "per-turn", "multi_objective_aggregation": "normalize_then_sum"},
        # no row of the option table standardises each reward function's column: the credit
        # audit says the weights on the model's replies fit none of its relations (no 'other')
        {"two-turn": ("biased", "credit-unexplained")},
        None,
    ),
}
"""Every key that changes what TRL's loss sees of an episode, with its derived verdicts."""


def _problem(name: str) -> ep.EpisodesProblem:
    return ep.FAMILY.problems[name]()


def _variant(derived: tuple) -> tuple[str, str, dict[str, str]]:
    mask, weighting, baseline, scale, aggregation, kl = derived
    mask = "model" if mask == "model" else mask
    form = {"baseline": baseline, "scale": scale, "aggregation": aggregation, "kl": kl}
    return mask, weighting, form


# -- fast: the adapter's shape ---------------------------------------------------------------------


def test_an_episode_reaches_trl_as_a_rollout_func_returns_it():
    """Every token after the prompt, the world's too; env_mask 1 on the model's; the rewards'
    columns (one sum, or one per turn); TRL's ``tool_mask`` is what ``env_mask`` says."""
    problem = _problem("two-turn")
    rows = ep._rows(problem, 1, np.random.default_rng(0))[0]
    batch = ep._batch(problem, rows)
    every = batch.turn >= 0
    for rollout, columns in (
        ({"env_mask": "model-tokens", "rewards": "episode"}, [batch.turn_rewards.sum(1)]),
        ({"env_mask": "every-token", "rewards": "per-turn"}, list(batch.turn_rewards.T)),
    ):
        out, rewards = adapter._rows(batch, rollout)
        for i in range(len(rows)):
            n = int(every[i].sum())
            assert out["completion_ids"][i] == batch.completion_ids[i, :n].tolist()
            assert out["prompt_ids"][i] == batch.prompt_ids[i].tolist()
            want = batch.completion_mask[i] if rollout["env_mask"] == "model-tokens" else every[i]
            assert out["env_mask"][i] == want[:n].long().tolist()
            assert len(out["logprobs"][i]) == n
        assert rewards == [c.tolist() for c in columns]
    world = (every & (batch.completion_mask == 0)).sum()
    assert world == 2 * len(rows)  # the world's header and observation in every episode


def test_the_rollout_keys_are_the_episodes_familys_alone():
    adapter.family_keys({"env_mask": "every-token", "rewards": "per-turn"}, "episodes")
    with pytest.raises(ValueError, match="env_mask describe a multi-turn rollout"):
        adapter.family_keys({"env_mask": "model-tokens"}, "sequence")
    with pytest.raises(ValueError, match="rewards must be one of episode, per-turn"):
        adapter.family_keys({"rewards": "turn"}, "episodes")
    with pytest.raises(ValueError, match="RLOOTrainer has no rollout_func"):
        adapter.family_keys({"trainer": "rloo"}, "episodes")


def test_the_rollout_keys_on_single_turns_are_one_line_exit_2(tmp_path, capsys):
    from eligibility.cli import main

    config = tmp_path / "grpo.yaml"
    config.write_text("env_mask: every-token\n")
    rc = main(["check", "--framework", "trl", "--config", str(config), "--sequence"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "describe a multi-turn rollout" in err, err


def test_the_wide_variants_name_trls_estimator_and_leave_out_the_rescalings():
    problem = _problem("two-turn-kl")
    named = {v[:2] + tuple(v[2].values()): n for n, v in ep.wide_variants(problem)}
    default = ("model", "outcome", "mean", "group-std", "token-mean", "none")
    assert named[default] == f"{WR}, {STD_TOKEN}, kl-no-gradient"
    assert named[("world-tokens-trained", "outcome", "mean", "none", "constant", "k3")] == (
        f"world-tokens-trained, {WR}, kl-forward"
    )
    for rescaled in (  # a step size, or the whole return alone: no mean's direction changes
        ("model", "outcome", "mean", "none", "constant", "reward-to-go"),
        ("model", "reward-to-go", "rloo", "none", "sequence-sum", "reward-to-go"),
    ):
        assert rescaled not in named
    assert len(named) == len(set(named)) and all(n for n in named.values())


@pytest.mark.slow  # 1.5 s (its scores by forward-mode autograd); the frameworks' tests use it too
def test_the_wide_variants_are_the_loss_through_the_model_batch_by_batch():
    """:class:`Wide` (every token's score computed once) against the plain loop: each batch's
    loss through the model, autograd to θ."""
    from eligibility.lm.sample import token_logps

    problem = _problem("two-turn-kl")
    wide = ep.Wide(problem)
    rows = ep._rows(problem, 2, np.random.default_rng(3))
    variants = [
        ("world-tokens-trained", "outcome", {"scale": "group-std", "kl": "k3"}),
        ("truncated-masked", "reward-to-go", {"aggregation": "token-mean", "kl": "k3-ratio"}),
    ]
    got = wide.estimates(rows, variants)
    params = list(problem.lab.model.parameters())
    for v, (mask, weighting, form) in enumerate(variants):
        for b, r in enumerate(rows):
            batch = ep._batch(problem, r)
            if mask == "world-tokens-trained":
                batch.completion_mask = (batch.turn >= 0).long()
            else:
                ended = batch.completion_ids[torch.arange(len(r)), (batch.turn >= 0).sum(1) - 1]
                batch.completion_mask = batch.completion_mask * (ended == 0)[:, None].long()
            logps = token_logps(problem.lab.model, batch, vocab_size=problem.lab.vocab_size)
            grads = torch.autograd.grad(ep._loss(logps, batch, weighting, **form), params)
            want = -torch.cat([g.reshape(-1) for g in grads]).double().numpy()
            np.testing.assert_allclose(got[v, b], want, rtol=1e-5, atol=1e-7)


def test_an_episode_reaches_verl_and_openrlhf_as_their_agent_loops_hand_it():
    """One response an episode: the world's tokens attended, the loss's mask the model's
    tokens, one reward (Σₖ rₖ), θ_old's log-probs θ's detached, the groups consecutive."""
    from eligibility.check.frameworks import as_rollout

    problem = _problem("two-turn")
    batch = ep._batch(problem, ep._rows(problem, 1, np.random.default_rng(1))[0])
    logps = torch.randn(batch.completion_ids.shape, requires_grad=True)
    view = as_rollout(batch, logps)
    assert torch.equal(view.attention, (batch.turn >= 0).long())
    assert torch.equal(view.completion_mask.long(), batch.completion_mask)
    assert bool((view.attention >= view.completion_mask).all())
    torch.testing.assert_close(view.rewards.double(), batch.turn_rewards.sum(1))
    assert not view.old_logps.requires_grad and torch.equal(view.old_logps, logps.detach())
    assert view.group_ids.tolist() == [0, 0, 1, 1] and view.group_size == ep.G


# -- slow: TRL's own code ------------------------------------------------------------------------


def _trl() -> None:
    from eligibility.check.frameworks import row

    try:
        row("trl")
    except ValueError as err:  # a failure that says what to install, never a skip
        pytest.fail(str(err))


DERIVED = [(name, c) for name, c in CASES.items() if c[2] is not None]


@pytest.mark.slow
@pytest.mark.parametrize("name, case", DERIVED, ids=[n for n, _ in DERIVED])
def test_trls_loss_is_the_derived_estimator_batch_by_batch(name, case):
    """Autograd through TRL's ``_compute_loss`` equals the derivation's option-table estimator
    on each batch (written apart from TRL's code, :func:`~eligibility.check.episodes._loss`)."""
    _trl()
    keys, derived, estimator = case
    _held(adapter.loss_function({**BASE, **keys}), next(iter(derived)), estimator, 2e-4)


def _held(loss: Any, problem: str, estimator: tuple, tol: float) -> None:
    """Autograd through ``loss`` equals the option-table ``estimator`` on three batches, each
    component within ``tol`` of the batch's largest."""
    p = _problem(problem)
    rows = ep._rows(p, 3, np.random.default_rng(5))
    want = ep.Wide(p).estimates(rows, [_variant(estimator)])[0]
    params = list(p.lab.model.parameters())
    for b, r in enumerate(rows):
        grads = torch.autograd.grad(loss(p.lab.model, ep._batch(p, r)), params)
        got = -torch.cat([g.reshape(-1) for g in grads]).double().numpy()
        np.testing.assert_allclose(got, want[b], rtol=0, atol=tol * np.abs(want[b]).max())


DOCS = Path(__file__).resolve().parents[1] / "docs" / "measurements" / "check.md"


def _said(verdict: str, diagnosis: str) -> str:
    return f"{verdict} ({diagnosis})" if diagnosis else verdict


def _bare(verdict: str, diagnosis: str | None) -> tuple[str, str]:
    """(verdict, diagnosis) without a fitted ``× c`` (the derivation names no constant)."""
    return verdict, (diagnosis or "").partition(" × ")[0]


EXPLAINED: dict[tuple[str, str, str], str] = {}
"""Disagreements with the derivation, each with why (the record's table marks them ≠)."""


def _measured(framework: str, cases: dict, title: str) -> None:
    """Each case's verdicts through ``check(framework=..., family="episodes")`` (seed 0,
    α = 10⁻³, N chosen per problem) against the derived ones; the record's table is this run
    (rewritten with ``ELIGIBILITY_WRITE_DOCS``)."""
    from eligibility import check

    start, end = (f"<!-- framework-table:{framework}-episodes:{k} -->" for k in ("start", "end"))
    lines = [f"| {title} | problem | derived | measured |", "|---|---|---|---|"]
    differ = []
    for name, (keys, derived, _) in cases.items():
        report = check(
            framework=framework, config=keys, family="episodes", problem=",".join(derived)
        )
        for p in report.problems:
            want, got = derived[p.problem], _bare(p.verdict, p.diagnosis)
            mark = "" if got == want else " ≠"
            lines.append(f"| {name} | {p.problem} | {_said(*want)} | {_said(*got)}{mark} |")
            if got != want and (framework, name, p.problem) not in EXPLAINED:
                differ.append((name, p.problem, want, got))
    table = "\n".join(lines)
    if os.environ.get("ELIGIBILITY_WRITE_DOCS"):
        text = DOCS.read_text()
        head, _, rest = text.partition(start)
        _, _, tail = rest.partition(end)
        DOCS.write_text(f"{head}{start}\n{table}\n{end}{tail}")
    assert not differ, differ
    assert f"{start}\n{table}\n{end}" in DOCS.read_text(), "the record's table is stale"


@pytest.mark.slow
def test_every_key_gets_its_derived_verdict_through_trls_code():
    _trl()
    cases = {name: ({**BASE, **keys}, derived, e) for name, (keys, derived, e) in CASES.items()}
    _measured("trl", cases, "trl 1.16.0: configuration (bf16=False)")


# -- verl's and OpenRLHF's multi-turn paths ------------------------------------------------------

PEER_CASES: dict[str, dict[str, tuple[dict, dict[str, tuple[str, str]], tuple]]] = {
    # derived from verl 0.9.1 (agent_loop.py l. 1098: the episode's score on its response's last
    # token; core_algos.compute_grpo_outcome_advantage: scores = token_level_rewards.sum(-1),
    # the one advantage × response_mask on every model token, the whole return; ε = 10⁻⁶
    # under the std) and OpenRLHF 0.11.2 (agent.py: the steps' rewards summed, action_mask
    # 1 on the action ranges; models/utils.compute_reward: R on the last action token, its
    # cumulative return at γ = 1 the same on every earlier action token: the whole return)
    "verl": {
        "grpo (token-mean, norm_adv_by_std_in_grpo)": (
            {"algorithm": {"adv_estimator": "grpo"}},
            _on(("biased", f"{WR}, {STD_TOKEN}")),
            ("model", "outcome", "mean", "group-std", "token-mean", "none"),
        ),
        "grpo no std seq-mean-token-mean": (
            {
                "algorithm": {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False},
                "actor": {"loss_agg_mode": "seq-mean-token-mean"},
            },
            {"two-turn": ("biased", f"{WR}, length-normalised")},
            ("model", "outcome", "mean", "none", "sequence-mean", "none"),
        ),
        "rloo seq-mean-token-sum": (
            {
                "algorithm": {"adv_estimator": "rloo"},
                "actor": {"loss_agg_mode": "seq-mean-token-sum"},
            },
            {"two-turn": ("unbiased", ""), "two-turn-first-pays": ("excess variance", WR)},
            ("model", "outcome", "rloo", "none", "sequence-sum", "none"),
        ),
    },
    "openrlhf": {
        "rloo (token-mean)": (
            {"algo.advantage.estimator": "rloo", "algo.kl.init_coef": 0},
            _on(("biased", f"{WR}, batch-dependent-normaliser")),
            ("model", "outcome", "rloo", "none", "token-mean", "none"),
        ),
        "rloo seq-mean-token-mean": (
            {
                "algo.advantage.estimator": "rloo",
                "algo.kl.init_coef": 0,
                "actor.loss_agg_mode": "seq-mean-token-mean",
            },
            {"two-turn": ("biased", f"{WR}, length-normalised")},
            ("model", "outcome", "rloo", "none", "sequence-mean", "none"),
        ),
    },
}
"""verl's and OpenRLHF's multi-turn loss paths: the derived verdicts. Neither has an unbiased
per-turn credit (one score an episode); verl's RLOO summed over each response is unbiased, the
whole return then told only by the components it moves (``two-turn-first-pays``)."""

PEERS = [(f, n, c) for f, cases in PEER_CASES.items() for n, c in cases.items()]


def _peer(framework: str) -> None:
    from eligibility.check.frameworks import row

    try:
        row(framework)
    except ValueError as err:  # a failure that says what to install, never a skip
        pytest.fail(str(err))


@pytest.mark.slow
@pytest.mark.parametrize("framework, name, case", PEERS, ids=[f"{f}-{n}" for f, n, _ in PEERS])
def test_the_peers_loss_is_the_derived_estimator_batch_by_batch(framework, name, case):
    """Autograd through verl's ``ppo_loss`` / OpenRLHF's ``PolicyLoss`` on each batch of
    episodes equals the derivation's option-table estimator (verl's ε = 10⁻⁶ under the std
    against the row's 10⁻⁴ moves a group of close rewards by a few parts in 10³: within
    5·10⁻³ of the largest component; the others to float rounding)."""
    from eligibility.check.frameworks import adapt

    _peer(framework)
    keys, derived, estimator = case
    loss, form = adapt(framework, keys, "episodes")
    assert form == "model"
    _held(loss, next(iter(derived)), estimator, 5e-3 if estimator[3] != "none" else 1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("framework", list(PEER_CASES))
def test_the_peers_multi_turn_paths_get_their_derived_verdicts(framework):
    _peer(framework)
    version = {"verl": "0.9.1", "openrlhf": "0.11.2"}[framework]
    _measured(framework, PEER_CASES[framework], f"{framework} {version}: configuration")


def test_trls_fixes_on_episodes_name_what_a_rollout_func_user_can_set():
    """On episodes RLOOTrainer (the completions' KL fix) cannot run: the fix says so; the
    world's tokens are fixed in the rollout_func's env_mask."""
    from eligibility.check import fixes as fx

    for name in ("kl-no-gradient", "kl-forward", "kl-token-local"):
        said = fx.fix(name, "model", "trl", "episodes")
        assert said.startswith("beta: 0.0") and "no rollout_func" in said, said
        assert fx.fix(name, "model", "trl", "sequence").startswith("trainer: rloo")
    assert "env_mask" in fx.fix("world-tokens-trained", "model", "trl", "episodes")


def test_the_engine_asks_the_familys_closer_variants_only_where_none_is_the_users():
    """A biased estimator none of whose family's variants is it batch by batch gets the
    family's ``closer`` ones beside them (and is named by the one that is it); where a variant
    is it, ``closer`` is never called (it costs: the episodes family computes hundreds)."""
    import types

    from eligibility.check.family import Draw, Trial
    from eligibility.check.verdict import _verdict

    rng = np.random.default_rng(0)
    exact = np.array([1.0, -1.0, 0.5])
    bias = np.array([0.4, 0.3, -0.2])
    G = exact + bias + 0.05 * rng.standard_normal((400, 3))
    other = exact + np.array([-0.5, 0.6, 0.1]) + 0.05 * rng.standard_normal((400, 3))
    asked = []

    def closer(g):
        asked.append(g.shape)
        return [("the-users-mistake", G.copy())]

    trial = Trial("p", exact, np.full(3, 0.05), draw=lambda n: None)
    config = types.SimpleNamespace(alpha=1e-3, episodes=1)
    for variants, named in (([("another", other)], "the-users-mistake"), ([("it", G)], "it")):
        asked.clear()
        draw = Draw(step=lambda k: None, variants=variants, closer=closer)
        report = _verdict(trial, G, draw, config, len(G), 0.0)
        assert (report.verdict, report.diagnosis) == ("biased", named)
        assert asked == ([(400, 3)] if named == "the-users-mistake" else [])


def _engine(G: np.ndarray, variants: list, exact: np.ndarray) -> tuple[str, str | None]:
    """The engine's (verdict, diagnosis) of the estimates G beside ``variants`` (same batches)."""
    import types

    from eligibility.check.family import Draw, Trial
    from eligibility.check.verdict import _verdict

    trial = Trial("p", exact, np.full(exact.size, 0.05), draw=lambda n: None)
    config = types.SimpleNamespace(alpha=1e-3, episodes=1)
    report = _verdict(trial, G, Draw(step=lambda k: None, variants=variants), config, len(G), 0.0)
    return report.verdict, report.diagnosis


def test_a_variant_whose_mean_fits_but_not_its_batches_names_nothing():
    """Where the user's loss and a row are computed on the same batches, the row names the
    user's estimator only if it is it batch by batch: another estimator whose mean is within
    noise of the row's (TRL's normalize_then_sum beside the whole return standardised) is
    ``biased`` with ``other``, never the nearest row by its mean; the row itself is named."""
    rng = np.random.default_rng(1)
    exact = np.array([1.0, -1.0, 0.5])
    row = exact + np.array([0.4, 0.3, -0.2]) + 0.05 * rng.standard_normal((400, 3))
    another = row + 0.3 * rng.standard_normal((400, 3))  # the same mean, other batches
    assert np.abs(another.mean(0) - row.mean(0)).max() < 3 * 0.3 / np.sqrt(400)
    assert _engine(another, [("the-row", row)], exact) == ("biased", "other")
    assert _engine(row * (1 + 1e-3), [("the-row", row)], exact) == ("biased", "the-row")


def _own_episode_loss(model: Any, batch: Any, per_turn: bool) -> Any:
    """A user's dr_grpo-style episode loss, written apart from the option table: one advantage
    an episode on all its model tokens, Σ / (N · T). ``per_turn``: each turn's rewards
    standardised in their group, summed, the sum standardised over the batch (TRL's
    ``normalize_then_sum``; no row of the table); else the whole return standardised in its
    group (a row: the whole return and a std beside the constant normaliser)."""
    from eligibility.lm.sample import token_logps

    logps = token_logps(model, batch, vocab_size=model.vocab_size)
    r = batch.turn_rewards.double()
    r = r if per_turn else r.sum(1, keepdim=True)
    g = r.view(-1, batch.group_size, r.shape[1])  # the rows come a group after another
    z = (g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-4)
    advantage = z.sum(-1).reshape(-1, 1)
    if per_turn:  # and the sum standardised over the batch, as TRL does (l. 2800)
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-4)
    advantage = advantage.to(logps.dtype)
    terms = advantage * logps * batch.completion_mask
    return -terms.sum() / (len(terms) * batch.max_completion_length)


@pytest.mark.slow  # two checks of the episodes family (tens of seconds)
@pytest.mark.parametrize(
    ("per_turn", "want"),
    [(True, ("biased", "credit-unexplained")), (False, ("biased", f"{WR}, std-normalised"))],
    ids=["normalize-then-sum", "whole-return-standardised"],
)
def test_a_users_episode_loss_is_named_by_a_row_only_if_it_is_that_row(per_turn, want):
    """``normalize_then_sum`` written by a user, no TRL: no row of the table is it batch by
    batch, so the check names no row (not the row nearest its mean), and the credit audit says
    what it sees: the right tokens, weights that fit none of its relations to the exact credit
    (``credit-unexplained``, where ``other`` stood before the audit); the whole return
    standardised, which is a row, is named by it."""
    from eligibility import check

    def fn(model, batch):
        return _own_episode_loss(model, batch, per_turn)

    (p,) = check(fn, family="episodes", problem="two-turn").problems
    assert _bare(p.verdict, p.diagnosis) == want, (p.verdict, p.diagnosis)
