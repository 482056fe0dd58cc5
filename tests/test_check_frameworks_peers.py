"""``check --framework``: TRL's, verl's and OpenRLHF's own code over their configurations.

Each configuration is handed to :func:`eligibility.check` in the framework's own keys; the
adapters (:mod:`eligibility.check.frameworks`) call the framework's advantage and loss code
unchanged. The verdicts derived from the frameworks' formulas, before any run, sit beside each
configuration here; the test runs them all, asserts that every exception is explained
(:data:`EXPLAINED`) and that docs/measurements/check.md's framework table is the one measured
(``tests/test_check_frameworks.py`` holds the tables to it: every ≠ there explained). To
rewrite the tables:

    make peers && ELIGIBILITY_WRITE_DOCS=1 PYTHONPATH=src:.venv/peers .venv/bin/python -m \\
        pytest -m slow -n 0 tests/test_check_frameworks_peers.py

Slow (seconds per check for verl and OpenRLHF, half a minute for TRL): never in the default
suite. Where a framework cannot be imported the test fails with its install line; it is never
skipped.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from eligibility import check
from eligibility.check.frameworks import FRAMEWORKS, row

pytestmark = pytest.mark.slow

DOCS = Path(__file__).resolve().parents[1] / "docs" / "measurements" / "check.md"
START, END = "<!-- framework-table:{}:start -->", "<!-- framework-table:{}:end -->"
PLAIN = ("length", "difficulty", "kl")

BDN, LN, STD = "batch-dependent-normaliser", "length-normalised", "std-normalised"
CN, SIM = "constant-normaliser", "self-including-mean"


def _no_kl(length: str, difficulty: str | None = None, kl: str | None = None) -> dict:
    """Derived verdicts without a KL term: on ``kl`` (β = 0.1) the missing KL is named too.

    On ``kl`` the loss's mean is the reward's part alone, E[ĝ] = c ∇E[R], where ∇J = ∇E[R] −
    β ∇KL. An unbiased reward part leaves ``kl-no-gradient`` alone. A constant c ≠ 1 on it (a
    ``scaled`` row: (G − 1)/G, 1/T) is a bias of its own there: with the KL put back, c ∇E[R] −
    β ∇KL is still no multiple of ∇J. So both are named, the row's ``kl-no-gradient`` first and
    the constant's names after it, as the report orders the table's name and the audit's.
    ``kl`` is given where a row's names and the audit's are joined otherwise.
    """
    difficulty = difficulty or length
    if kl is None:
        v, _, d = difficulty.partition(" (")
        d = d.rstrip(")")
        kl = {
            "unbiased": "biased (kl-no-gradient)",
            "scaled": f"biased (kl-no-gradient, {d})",
        }.get(v, f"biased ({d}, kl-no-gradient)")
    return {"length": length, "difficulty": difficulty, "kl": kl}


def _verl(estimator: str, mode: str, **algorithm) -> dict:
    return {
        "algorithm": {"adv_estimator": estimator, **algorithm},
        "actor": {"loss_agg_mode": mode},
    }


NO_STD = {"norm_adv_by_std_in_grpo": False}
RLOO_SUM = {"adv_estimator": "rloo"}
KL = 0.1  # the kl problem's β: the configurations below weigh their KL term with it

CASES: dict[tuple[str, str], tuple[dict, dict]] = {
    # verl 0.9.1: estimator × loss_agg_mode, no KL term
    ("verl", "grpo token-mean"): (_verl("grpo", "token-mean"), _no_kl(f"biased ({STD}, {BDN})")),
    ("verl", "grpo seq-mean-token-mean"): (
        _verl("grpo", "seq-mean-token-mean"),
        _no_kl(f"biased ({STD}, {LN})"),
    ),
    ("verl", "grpo seq-mean-token-sum"): (
        _verl("grpo", "seq-mean-token-sum"),
        _no_kl(f"biased ({STD})"),
    ),
    # agg_loss divides the sequences' mean by loss_mask.shape[-1], the batch's padded width: T on
    # every batch of difficulty and kl, where some reply reaches T, so 1/T is a constant beside
    # the std there (as for rloo and grpo(no std) below); on length it varies by batch
    ("verl", "grpo seq-mean-token-sum-norm"): (
        _verl("grpo", "seq-mean-token-sum-norm"),
        _no_kl(
            f"biased ({STD}, {BDN})",
            f"biased ({STD}, {CN})",
            f"biased ({STD}, kl-no-gradient, {CN})",
        ),
    ),
    ("verl", "grpo(no std) token-mean"): (
        _verl("grpo", "token-mean", **NO_STD),
        _no_kl(f"biased ({BDN})"),
    ),
    # scores − the group's mean (compute_grpo_outcome_advantage with norm_adv_by_std_in_grpo
    # False) is (G − 1)/G times the leave-one-out advantage, and a token mean per reply keeps
    # that constant apart from 1/L: the group mean that includes the sample, beside the 1/L
    ("verl", "grpo(no std) seq-mean-token-mean"): (
        _verl("grpo", "seq-mean-token-mean", **NO_STD),
        _no_kl(f"biased ({LN}, {SIM})", kl=f"biased ({LN}, kl-no-gradient, {SIM})"),
    ),
    ("verl", "grpo(no std) seq-mean-token-sum"): (
        _verl("grpo", "seq-mean-token-sum", **NO_STD),
        _no_kl("scaled (self-including-mean)"),
    ),
    ("verl", "grpo(no std) seq-mean-token-sum-norm"): (
        _verl("grpo", "seq-mean-token-sum-norm", **NO_STD),
        _no_kl(f"biased ({BDN})", "scaled (self-including-mean, constant-normaliser)"),
    ),
    ("verl", "rloo token-mean"): (_verl("rloo", "token-mean"), _no_kl(f"biased ({BDN})")),
    ("verl", "rloo seq-mean-token-mean"): (
        _verl("rloo", "seq-mean-token-mean"),
        _no_kl(f"biased ({LN})"),
    ),
    ("verl", "rloo seq-mean-token-sum"): (_verl("rloo", "seq-mean-token-sum"), _no_kl("unbiased")),
    ("verl", "rloo seq-mean-token-sum-norm"): (
        _verl("rloo", "seq-mean-token-sum-norm"),
        _no_kl(f"biased ({BDN})", "scaled (constant-normaliser)"),
    ),
    # verl 0.9.1: the KL routes, on RLOO summed over tokens (the kl problem only)
    ("verl", "use_kl_in_reward kl_penalty=kl"): (
        {
            "algorithm": {
                **RLOO_SUM,
                "use_kl_in_reward": True,
                "kl_penalty": "kl",
                "kl_ctrl": {"kl_coef": KL},
            },
            "actor": {"loss_agg_mode": "seq-mean-token-sum"},
        },
        {"kl": "unbiased"},
    ),
}
for _kind, _want in (
    ("kl", "kl-no-gradient"),
    ("mse", "kl-token-local"),
    ("low_var_kl", "kl-forward"),
    ("k3", "kl-forward"),
    ("k3+", "kl-token-local"),
):
    CASES[("verl", f"use_kl_loss kl_loss_type={_kind}")] = (
        {
            "algorithm": RLOO_SUM,
            "actor": {
                "loss_agg_mode": "seq-mean-token-sum",
                "use_kl_loss": True,
                "kl_loss_type": _kind,
                "kl_loss_coef": KL,
            },
        },
        {"kl": f"biased ({_want})"},
    )
# OpenRLHF 0.11.2: the critic-free group estimators × --actor.loss_agg_mode, no KL. dr_grpo's
# advantage is rewards − rewards.mean(-1) (compute_advantages_and_returns), (G − 1)/G times the
# leave-one-out one: in a token mean per reply that constant stays apart from 1/L (the group mean
# that includes the sample); in the batch's token mean it joins the factor of each batch
for _est, _adv in (("rloo", ""), ("group_norm", f"{STD}, "), ("dr_grpo", "")):
    for _mode, _agg in (("token-mean", BDN), ("seq-mean-token-mean", LN)):
        _also = f", {SIM}" if (_est, _mode) == ("dr_grpo", "seq-mean-token-mean") else ""
        CASES[("openrlhf", f"{_est} {_mode}")] = (
            {
                "--algo.advantage.estimator": _est,
                "--actor.loss_agg_mode": _mode,
                "--algo.kl.init_coef": 0,
            },
            _no_kl(
                f"biased ({_adv}{_agg}{_also})",
                kl=f"biased ({_adv}{_agg}, kl-no-gradient{_also})",
            ),
        )
# OpenRLHF 0.11.2: the KL routes on RLOO, token-mean (its default aggregation; the kl problem)
CASES[("openrlhf", "rloo k1 per-token reward (default)")] = (
    {"--algo.advantage.estimator": "rloo", "--algo.kl.init_coef": KL},
    {"kl": f"biased ({BDN})"},
)
for _kind, _extra, _want in (
    ("k1", {}, "kl-no-gradient"),
    ("k2", {}, "kl-token-local"),
    ("k3", {}, "kl-forward"),
    ("k3", {"--algo.kl.unbiased_gradient": True}, "kl-token-local"),
):
    _name = f"rloo --algo.kl.use_loss {_kind}" + (" unbiased_gradient" if _extra else "")
    CASES[("openrlhf", _name)] = (
        {
            "--algo.advantage.estimator": "rloo",
            "--algo.kl.init_coef": KL,
            "--algo.kl.use_loss": True,
            "--algo.kl.estimator": _kind,
            **_extra,
        },
        {"kl": f"biased ({BDN}, {_want})"},
    )

# TRL 1.16.0 GRPOTrainer: loss_type × scale_rewards with TRL's defaults (bf16 autocast, β = 0),
# on length and kl (difficulty reads as length does for these, docs/check.md's older table).
# With scale_rewards="none" the advantage is rewards − mean_grouped_rewards, (G − 1)/G times the
# leave-one-out one; grpo's token mean per reply keeps that constant apart from 1/L (the group
# mean that includes the sample), bnpo's and dapo's token count of the batch join it to their
# factor of each batch. dr_grpo divides by N × max_completion_length: beside the group's σ (a
# factor per group) that 1/T stays apart (constant-normaliser), the batch's σ joins it
_TRL_ADV = {"group": f"{STD}, ", "batch": f"{STD}, ", "none": ""}
_TRL_AGG = {"grpo": LN, "bnpo": BDN, "dapo": BDN}
for _loss in ("grpo", "bnpo", "dr_grpo", "dapo"):
    for _scale in ("group", "batch", "none"):
        if _loss == "dr_grpo":
            _want = (
                f"biased ({STD})"
                if _scale != "none"
                else "scaled (self-including-mean, constant-normaliser)"
            )
        else:
            _want = f"biased ({_TRL_ADV[_scale]}{_TRL_AGG[_loss]})"
        _both = _no_kl(_want)
        if (_loss, _scale) == ("grpo", "none"):
            _both = _no_kl(f"biased ({LN}, {SIM})", kl=f"biased ({LN}, kl-no-gradient, {SIM})")
        if (_loss, _scale) == ("dr_grpo", "group"):  # ÷ (N max_completion_length): 1/T apart
            _both = _no_kl(f"biased ({STD}, {CN})", kl=f"biased ({STD}, kl-no-gradient, {CN})")
        CASES[("trl", f"{_loss} scale_rewards={_scale}")] = (
            {"trainer": "grpo", "loss_type": _loss, "scale_rewards": _scale},
            {"length": _both["length"], "kl": _both["kl"]},
        )
_cispo = _no_kl(f"biased ({STD}, {BDN} × 0.2)")  # clamp(ρ, max=ε_high = 0.2) = 0.2 on-policy
CASES[("trl", "cispo scale_rewards=group")] = (
    {"trainer": "grpo", "loss_type": "cispo", "scale_rewards": "group"},
    {"length": _cispo["length"], "kl": f"biased ({STD}, {BDN}, kl-no-gradient × 0.2)"},
)
# TRL 1.16.0 GRPOTrainer: one optimiser step over several micro-batches, generations and
# iterations (the adapter runs TRL's own _prepare_inputs; old log-probs with the checked model).
# At θ = θ_old every ratio is 1: num_iterations changes nothing; TRL divides each micro-batch
# so that the step's sum is the batch's loss, except bnpo, a token mean per micro-batch, and
# dapo's normaliser where a step holds several generations (a token mean per generation)
_NONE = {"trainer": "grpo", "scale_rewards": "none"}
for _name, _keys, _want in (
    ("grpo num_iterations=2", {"loss_type": "grpo", "num_iterations": 2}, f"biased ({LN}, {SIM})"),
    ("dapo num_iterations=2", {"loss_type": "dapo", "num_iterations": 2}, f"biased ({BDN})"),
    ("dr_grpo num_iterations=2", {"loss_type": "dr_grpo", "num_iterations": 2},
     "scaled (self-including-mean, constant-normaliser)"),
    ("grpo gradient_accumulation_steps=2", {"loss_type": "grpo", "gradient_accumulation_steps": 2},
     f"biased ({LN}, {SIM})"),
    ("bnpo gradient_accumulation_steps=2", {"loss_type": "bnpo", "gradient_accumulation_steps": 2},
     f"biased ({BDN})"),
    ("dr_grpo gradient_accumulation_steps=2",
     {"loss_type": "dr_grpo", "gradient_accumulation_steps": 2},
     "scaled (self-including-mean, constant-normaliser)"),
    ("dapo gradient_accumulation_steps=2 num_iterations=2",
     {"loss_type": "dapo", "gradient_accumulation_steps": 2, "num_iterations": 2},
     f"biased ({BDN})"),
    ("dapo gradient_accumulation_steps=2 steps_per_generation=1",
     {"loss_type": "dapo", "gradient_accumulation_steps": 2, "steps_per_generation": 1},
     f"biased ({BDN})"),
    ("dr_grpo steps_per_generation=2", {"loss_type": "dr_grpo", "steps_per_generation": 2},
     "scaled (self-including-mean, constant-normaliser)"),
):  # fmt: skip
    CASES[("trl", f"{_name} scale_rewards=none")] = ({**_NONE, **_keys}, {"length": _want})
# dr_grpo with β: A = r − the group's mean ((G − 1)/G of the leave-one-out one) and the whole
# loss, its KL term with it, ÷ (N · max_completion_length): the reward's part is (G − 1)/(G T)
# of ∇J's credit, the KL's 1/T of β: a group mean that includes the sample (a bias beside the
# KL it does not scale) and one constant normaliser, under which the KL's weight is β itself.
# The KL's part of each weight: with use_bias_correction_kl, ∂/∂ℓ of k3·exp(ℓ − sg ℓ) at ratio
# 1 is (1 − e^(−d)) + k3 = d, token-local; without it 1 − e^(−d), the forward KL's. The reward's
# part is one value a reply (tests/test_check_trl_ports.py holds a port's weights by autograd)
for _bias, _want in ((True, "kl-token-local"), (False, "kl-forward")):
    CASES[("trl", f"dr_grpo none beta={KL} use_bias_correction_kl={_bias}")] = (
        {
            "trainer": "grpo",
            "loss_type": "dr_grpo",
            "scale_rewards": "none",
            "beta": KL,
            "use_bias_correction_kl": _bias,
        },
        {"kl": f"biased ({_want}, {SIM}, {CN})"},
    )

# TRL 1.16.0 RLOOTrainer: its β (default 0.05, the k1 of whole sequences in the reward) and
# normalize_advantages, with TRL's defaults for the rest (bf16 autocast, the sequence ratio).
# The configuration's β is the objective's on every problem (no --beta declares another), so
# its KL in the reward is unbiased for the objective it declares
for _name, _keys, _length, _kl in (
    ("rloo (defaults: beta=0.05)", {}, "unbiased", "unbiased"),
    (f"rloo beta={KL}", {"beta": KL}, "unbiased", "unbiased"),
    ("rloo beta=0", {"beta": 0.0}, "unbiased", "biased (kl-no-gradient)"),
    ("rloo beta=0 normalize_advantages", {"beta": 0.0, "normalize_advantages": True},
     "biased (batch-whitened)", "biased (batch-whitened, kl-no-gradient)"),
):  # fmt: skip
    CASES[("trl", _name)] = ({"trainer": "rloo", **_keys}, {"length": _length, "kl": _kl})
# a completion cut at T without EOS gets no gradient: a weight that depends on the sample
CASES[("trl", "rloo beta=0 mask_truncated_completions")] = (
    {"trainer": "rloo", "beta": 0.0, "mask_truncated_completions": True},
    {"length": "biased (truncated-masked)"},
)

EXPLAINED: dict[tuple[str, str, str], str] = {
    ("trl", "bnpo gradient_accumulation_steps=2 scale_rewards=none", "length"): "a token mean "
    "per micro-batch, but TRL shuffles the generation before it splits it, so no variant is its "
    "estimator batch by batch (the check's micro-batch token mean takes consecutive halves); on "
    "length its mean is within noise of a rescaling of ∇J at this N (c = 0.29): scaled, not "
    "biased. The audit reads each share's rows (matched across TRL's shuffle) but not which "
    "share each row was in, so a factor per share reads credit-unexplained beside it",
    ("trl", "dr_grpo steps_per_generation=2 scale_rewards=none", "length"): "the check's step "
    "is the first of the generation's two: TRL shuffles the generation and trains on half of "
    "it, ÷ (N/2)·T, so the other half is dropped at random with its weight restored "
    "(dropped-at-random, true: the audit now reads each share's rows). The constant c = 0.17 = "
    "(G − 1)/(G T) is then said by no name: self-including-mean and constant-normaliser "
    "missing, not false",
}
"""(framework, configuration, problem) → why the measured verdict differs from the derived one."""


def _measured(framework: str, config: dict, problem: str) -> str:
    (p,) = check(framework=framework, config=config, problem=problem).problems
    if p.verdict == "scaled":
        return f"scaled ({p.diagnosis}, c = {p.scale:.2f})"
    return p.verdict if p.diagnosis is None else f"{p.verdict} ({p.diagnosis})"


def _bare(verdict: str) -> str:
    """The verdict without its fitted ``, c = …`` (a diagnosis may hold parentheses itself)."""
    head, cut, _ = verdict.partition(", c = ")
    return f"{head})" if cut else verdict


def _table(framework: str, rows: list[tuple[str, dict[str, tuple[str, str]]]]) -> str:
    f = FRAMEWORKS[framework]
    lines = [
        f"| {f.name} {f.version}: configuration | problem | derived | measured |",
        "|---|---|---|---|",
    ]
    for name, found in rows:
        for problem, (want, got) in found.items():
            mark = "" if _bare(got) == want else " ≠"
            lines.append(f"| {name} | {problem} | {want} | {got}{mark} |")
    return "\n".join(lines)


@pytest.mark.parametrize("framework", ["verl", "openrlhf", "trl"])
def test_the_frameworks_own_code_gets_the_derived_verdicts(framework):
    try:
        row(framework)
    except ValueError as err:  # a failure that says what to install, never a skip
        pytest.fail(str(err))
    rows, total, differ = [], 0, []
    for (name_of, name), (config, derived) in CASES.items():
        if name_of != framework:
            continue
        found = {}
        for problem, want in derived.items():
            got = _measured(framework, config, problem)
            found[problem] = (want, got)
            total += 1
            if _bare(got) != want:
                differ.append((framework, name, problem, want, got))
        rows.append((name, found))
    start, end = START.format(framework), END.format(framework)
    table = _table(framework, rows)
    if os.environ.get("ELIGIBILITY_WRITE_DOCS"):
        text = DOCS.read_text()
        head, _, rest = text.partition(start)
        _, _, tail = rest.partition(end)
        DOCS.write_text(f"{head}{start}\n{table}\n{end}{tail}")
    unexplained = [d for d in differ if d[:3] not in EXPLAINED]
    assert not unexplained, unexplained  # the record's tables too: test_check_frameworks.py
    assert f"{start}\n{table}\n{end}" in DOCS.read_text(), (
        "docs/measurements/check.md's table is stale"
    )


# -- on-policy settings that cannot change the gradient -----------------------------------------

UNCHANGED = {
    "verl": (
        _verl("rloo", "seq-mean-token-sum"),
        [{"actor": {"loss_agg_mode": "seq-mean-token-sum", "clip_ratio": 0.05}},
         {"actor": {"loss_agg_mode": "seq-mean-token-sum", "clip_ratio_c": 1.5}}],
    ),
    "openrlhf": (
        {"--algo.advantage.estimator": "rloo", "--algo.kl.init_coef": 0},
        [{"--actor.eps_clip": 0.05}, {"--actor.dual_clip": 1.5},
         {"--actor.eps_clip_low_high": [0.1, 0.3]}],
    ),
}  # fmt: skip
"""Per framework: a configuration and settings that, at θ = θ_old (every ratio 1), cannot
change its gradient: the PPO clip's ε and its dual clip (TRL's: test_check_frameworks_trl.py,
with num_iterations and the accumulation steps)."""


@pytest.mark.parametrize("framework", sorted(UNCHANGED))
def test_on_policy_settings_that_cannot_change_the_gradient_do_not(framework):
    import numpy as np
    import torch

    from eligibility.check.frameworks import adapt
    from eligibility.lab.sequence import get_problem

    base, settings = UNCHANGED[framework]
    p = get_problem("length")
    params = list(p.model.parameters())

    def gradient(config):
        loss, _ = adapt(framework, config)
        logps, batch = p.on_policy(p.sample(2, np.random.default_rng(5)))
        return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss(logps, batch), params)])

    want = gradient(base)
    for setting in settings:
        config = {**base, **{k: {**base.get(k, {}), **v} if isinstance(v, dict) else v
                             for k, v in setting.items()}}  # fmt: skip
        torch.testing.assert_close(gradient(config), want, rtol=1e-6, atol=1e-9)


# -- each token's weight in the frameworks' own losses, by autograd ------------------------------


def _k3_token_mean(d, A, m, G, T):
    """OpenRLHF's KL loss at k3 with its token mean: (Aᵢ − β(1 − e^(−dₜ))·[k3ₜ < 10])/T_b
    (``compute_approx_kl`` clamps k3's value at 10, ``aggregate_loss`` divides by the batch's
    count of tokens T_b; A the leave-one-out advantage, ``rloo``)."""
    k3 = torch.exp(-d) - 1 + d
    return (A[:, None] - KL * (1 - torch.exp(-d)) * (k3 < 10)) / m.sum()


def _self_including_token_mean(d, A, m, G, T):
    """verl's grpo without std in seq-mean-token-mean: (scores − the group's mean)/(N Lᵢ), the
    group-centred score being (G − 1)/G times the leave-one-out advantage A."""
    return ((G - 1) / G * A)[:, None] / (len(A) * m.sum(1, keepdim=True))


WEIGHTS = {
    "openrlhf rloo --algo.kl.use_loss k3": (
        "openrlhf", CASES[("openrlhf", "rloo --algo.kl.use_loss k3")][0], "kl", _k3_token_mean
    ),
    "verl grpo(no std) seq-mean-token-mean": (
        "verl", CASES[("verl", "grpo(no std) seq-mean-token-mean")][0], "length",
        _self_including_token_mean,
    ),
}  # fmt: skip
"""The derivations of the tables' rows that the audit's reading turned on, each as the weight
−∂L/∂ℓₜ its framework's code gives every token (formula in each function's docstring)."""


@pytest.mark.parametrize("name", sorted(WEIGHTS))
def test_each_tokens_weight_in_the_frameworks_own_loss_is_the_derived_one(name):
    import numpy as np

    from eligibility.check.frameworks import adapt
    from eligibility.check.sequence import batch_of
    from eligibility.lab.sequence.builtin import PROBLEMS

    framework, config, problem, weight = WEIGHTS[name]
    loss, _ = adapt(framework, config)
    p = PROBLEMS[problem]()
    G, T, rng = p.group_size, p.max_completion_length, np.random.default_rng(0)
    for _ in range(16):
        logps, batch = p.on_policy(batch_of(p, p.draw(len(p.prompts), rng).rows, 1.0))
        lp = logps.detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad(loss(lp, batch), lp)
        m = batch.completion_mask > 0
        r = batch.rewards.view(-1, G).double()
        A = (r - (r.sum(1, keepdim=True) - r) / (G - 1)).reshape(-1)
        d = (lp.detach() - batch.ref_logps).double() if p.beta else None
        want = weight(d, A, m, G, T).expand_as(g)
        torch.testing.assert_close(-g.double()[m], want[m], rtol=1e-5, atol=1e-9)
