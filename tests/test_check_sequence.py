"""`eligibility check --sequence`: GRPO/RLOO-style losses held against the exact ∇J of the lab's
sequence problems, with the mistakes named.

Truth comes from the lab's enumeration (itself held against finite differences and mpmath in
tests/test_lab_sequence.py) and from torch autograd through the problem's model: the
variants' vectorised estimates are held against plain per-token loops differentiated by
autograd.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch

from eligibility.check import check
from eligibility.check import sequence as seq
from eligibility.check.run import CheckConfig, _verdict, choose_samples, max_abs_z
from eligibility.cli import main
from eligibility.lab.estimate import z_threshold
from eligibility.lab.sequence.builtin import PROBLEMS
from eligibility.lab.sequence.handed import policy_model
from eligibility.lab.sequence.problem import Draw as Rows
from eligibility.torch import options

JSON = ["--format", "json"]
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "check" / "sequence"

GRADIENT_PROBLEMS = [n for n in seq.PROBLEM_NAMES if n in PROBLEMS]
"""The problems whose verdict is about ∇J (``clip``, a step's problem, is tested on its own)."""


def verdicts(report):
    return {p.problem: (p.verdict, p.diagnosis) for p in report.problems}


# -- the variants against autograd through the model, token by token ------------------------------


def plain_estimate(problem, batch, v: seq.Variant) -> np.ndarray:
    """ĝ = −∇θ loss of the variant, its loss written as loops over sequences and tokens."""
    problem.reset()
    P = batch.prompt_ids.shape[1]
    N, W = batch.completion_ids.shape
    T, G = problem.max_completion_length, batch.group_size
    beta = batch.beta if v.beta is None else v.beta  # kl-weight: the loss's own β
    model = policy_model(problem.model, problem.eos_token_id)  # the model form's, pad V
    lsm = torch.log_softmax(model(batch.input_ids).logits, dim=-1)
    m, ids = batch.completion_mask, batch.input_ids
    tokens = []  # per sequence: (log-prob, completion position or None)
    for i in range(N):
        row = []
        if v.view == "prompt-in-loss":
            row += [(lsm[i, j, ids[i, j + 1]], None) for j in range(P - 1)]
        for t in range(W):
            if v.view == "padding-in-loss" or m[i, t] > 0:
                pos = P + t if v.view == "no-shift" else P - 1 + t
                row.append((lsm[i, pos, ids[i, P + t]], t if m[i, t] > 0 else None))
        tokens.append(row)
    R = [float(x) for x in batch.rewards]
    if v.kl == "sequence-reward":
        R = [
            R[i] - beta * float(((batch.old_logps[i] - batch.ref_logps[i]) * m[i]).double().sum())
            for i in range(N)
        ]
    A = []
    for i in range(N):
        g = range(i // G * G, i // G * G + G)
        mean = statistics.fmean(R[j] for j in g)
        others = statistics.fmean(R[j] for j in g if j != i)
        A.append({"none": R[i], "rloo": R[i] - others, "mean": R[i] - mean}[v.baseline])
    if v.scale == "group-std":
        A = [a / (statistics.stdev(R[i // G * G : i // G * G + G]) + 1e-4) for i, a in enumerate(A)]
    elif v.scale == "batch-std":
        A = [a / (statistics.stdev(R) + 1e-4) for a in A]
    elif v.scale == "whiten":
        mu, var = statistics.fmean(A), statistics.variance(A)
        A = [(a - mu) / math.sqrt(var + 1e-8) for a in A]
    half = N // 2
    count = sum(len(r) for r in tokens)
    loss = torch.zeros(())
    for i, row in enumerate(tokens):
        part = sum(len(r) for r in (tokens[:half] if i < half else tokens[half:]))
        agg = {
            "sequence-sum": 1 / N,
            "constant": 1 / (N * T),
            "constant-sum": 1 / T,
            "sequence-mean": 1 / (N * len(row)),
            "token-mean": 1 / count,
            "micro-batch-token-mean": 1 / (2 * part),
            "padded-width": 1 / (N * W),
            "token-sum-norm": 1 / W,
        }[v.aggregation]
        togo = [0.0] * len(row)  # the reward-to-go of the view's KL, by hand
        for k in range(len(row)):
            togo[k] = sum(
                float(lp.detach()) - float(batch.ref_logps[i, t])
                for lp, t in row[k:]
                if t is not None
            )
        for (lp, t), rtg in zip(row, togo, strict=True):
            a = A[i] - (beta * rtg if v.kl == "reward-to-go" else 0.0)
            loss = loss - agg * a * lp
            if t is not None and v.kl.startswith("k"):  # a KL term in the loss
                d = lp - batch.ref_logps[i, t]
                k3 = torch.exp(-d) - 1 + d
                k = {
                    "k1": d,
                    "k2": d**2 / 2,
                    "k3": k3,
                    "k3-ratio": k3 * torch.exp(lp - lp.detach()),
                }
                k = k.get(v.kl, torch.clamp(k3, -10, 10))  # k3-clamped: verl's low_var_kl
                loss = loss + beta * agg * k
    grads = torch.autograd.grad(loss, list(problem.model.parameters()))
    return -torch.cat([g.reshape(-1) for g in grads]).double().numpy()


def test_the_variants_are_autograd_through_the_model_token_by_token():
    """Every choice of every table at least once (on the kl problem, β > 0), on one batch."""
    problem = PROBLEMS["kl"]()
    rng = np.random.default_rng(3)
    rows = seq._draw_rows(problem, 1, len(problem.prompts), rng)
    chosen = [seq.REFERENCE]
    tables = [seq.VIEWS, *(options.rows(k) for k in options.KINDS)]
    for k in range(max(len(t) for t in tables)):
        names = [list(t)[(k + j) % len(t)] for j, t in enumerate(tables)]
        chosen.append(seq.Variant(*names))
    for kl in ("sequence-reward", "reward-to-go", "k3"):  # kl-weight: the loss's β is 0.04
        chosen.append(seq.Variant("logps", "mean", "group-std", "sequence-mean", kl, beta=0.04))
    views = seq.views(problem, tuple(seq.VIEWS))
    got = seq.estimates(problem, views, rows, chosen)
    G = problem.group_size
    for b in range(1):
        batch = problem.batch(
            Rows(prompts=problem.table.prompt[rows[b, ::G]], rows=rows[b], group_size=G)
        )
        for j, v in enumerate(chosen):
            want = plain_estimate(problem, batch, v)
            np.testing.assert_allclose(got[j, b], want, rtol=2e-4, atol=2e-6, err_msg=str(v))


# -- verdicts on a tiny budget (the default suite) ------------------------------------------------


# the sequence family's calls in the worker: test_check_fixes.py, test_check_family.py
@pytest.mark.usefixtures("check_calls_in_process")
def test_a_correct_rloo_is_unbiased(capsys):
    """At N = 30, the least the check takes: a false alarm is 1e-3 at any N (largest |z| 2.1
    to 3.2 on seeds 0-3, t* 4.92); the reference itself, so its variance ratio is 1."""
    spec = f"{EXAMPLES / 'kl_placements.py'}:k1_reward_to_go"  # the reference itself
    rc = main(["check", spec, "--sequence", "--problem", "kl", "--samples", "30", *JSON])
    out = json.loads(capsys.readouterr().out)
    (p,) = out["problems"]
    assert rc == 0 and p["verdict"] == "unbiased" and out["family"] == "sequence"
    assert p["J"] == pytest.approx(PROBLEMS["kl"]().J) and p["variance_ratio"] == pytest.approx(1)


@pytest.mark.usefixtures("check_calls_in_process")  # the same gradients, no worker's round trips
def test_allow_scale_passes_a_self_including_group_mean(capsys):
    """At N = 100 the mean 7/8 ∇J is far from ∇J (largest |z| 6.3–7.5 on seeds 0–3, t* 4.53;
    8.0–9.8 at N = 150) and the fitted scale within 4 standard errors of 7/8 (0.04–1.2 of
    them there); every seed reads it ``self-including-mean``."""
    spec = f"{EXAMPLES / 'mistakes.py'}:group_mean"
    argv = ["--sequence", "--problem", "length", "--samples", "100", "--allow-scale", *JSON]
    rc = main(["check", spec, *argv])
    out = json.loads(capsys.readouterr().out)
    (p,) = out["problems"]
    assert (p["verdict"], p["diagnosis"]) == ("scaled", "self-including-mean")
    assert p["scale"] == pytest.approx(7 / 8, abs=4 * p["scale_stderr"])  # (G − 1)/G, G = 8
    assert rc == 0 and out["passed"] is True and out["unbiased"] is False


@pytest.mark.usefixtures("check_calls_in_process")  # the same gradients, no worker's round trips
def test_the_model_form_names_a_missing_shift():
    report = check(
        f"{EXAMPLES / 'model_form.py'}:no_shift",
        sequence=True,
        form="model",
        problem="difficulty",
        samples=60,
    )
    assert verdicts(report) == {"difficulty": ("biased", "no-shift")}


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--form", "update"], "--form update is not a form of the sequence check"),
        (["--problem", "chain"], "unknown problem 'chain' for the sequence check"),
        (["--form", "logps"], "does not take (logps, batch)"),
    ],
)
def test_sequence_bad_input_is_one_line_exit_2(capsys, argv, needle):
    spec = f"{EXAMPLES.parent / 'correct.py'}:loss"  # an episodic loss: (policy, episodes, gamma)
    rc = main(["check", spec, "--sequence", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and needle in err, err


def test_help_presents_both_forms(capsys):
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--sequence" in text and "fn(logps, batch)" in text and "fn(policy, episodes" in text


# -- the statistics, per problem (slow) -----------------------------------------------------------


def _chosen_n(problem, rng):
    sigma = _reference(problem, seq.PILOT, rng).std(0, ddof=1)
    shows = {k: v for k, v in problem.mistakes.items() if k in problem.shows}
    return choose_samples(sigma, problem.exact, 1e-3, shows, minimum=seq.MIN_SAMPLES)


def _reference(problem, n, rng):
    rows = seq._draw_rows(problem, n, len(problem.prompts), rng)
    return seq.estimates(problem, seq.views(problem, ("logps",)), rows, [seq.REFERENCE])[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", GRADIENT_PROBLEMS)
def test_the_false_alarm_rate_is_at_most_alpha(name):
    """The unbiased reference's own estimates, 200 times at the N the check chooses, α = 0.1:
    the rejection rate stays within 4 standard errors of a rate of at most α. (At N = 200 the
    rate on ``difficulty`` is 0.15: hence the family's minimum of 800.)"""
    problem = PROBLEMS[name]()
    rng = np.random.default_rng(0)
    reps, alpha = 200, 0.1
    n = _chosen_n(problem, rng)
    G = _reference(problem, n * reps, rng).reshape(reps, n, -1)
    t = z_threshold(alpha, problem.n_params, n)
    rate = np.mean(
        [max_abs_z(g.mean(0), g.std(0, ddof=1) / math.sqrt(n), problem.exact) > t for g in G]
    )
    assert rate <= alpha + 4 * math.sqrt(alpha * (1 - alpha) / reps), rate


@pytest.mark.slow
@pytest.mark.parametrize("name", GRADIENT_PROBLEMS)
def test_the_chosen_n_catches_a_factor_two_with_the_stated_power(name):
    """A 2× estimator at the N the check chooses: rejected in at least 37 of 40 repetitions."""
    problem = PROBLEMS[name]()
    rng = np.random.default_rng(1)
    n = _chosen_n(problem, rng)
    t = z_threshold(1e-3, problem.n_params, n)
    g = 2 * _reference(problem, 40 * n, rng).reshape(40, n, -1)
    caught = sum(
        max_abs_z(x.mean(0), x.std(0, ddof=1) / math.sqrt(n), problem.exact) > t for x in g
    )
    assert caught >= 37, (name, n, caught)


SHOWN = {
    "length": [
        seq.Variant("logps", "rloo", "none", "sequence-mean", "reward-to-go"),
        seq.Variant("logps", "rloo", "none", "token-mean", "reward-to-go"),
    ],
    "difficulty": [seq.Variant("logps", "mean", "group-std", "sequence-sum", "reward-to-go")],
    "kl": [
        seq.Variant("logps", "rloo", "none", "sequence-sum", "k1"),
        seq.Variant("logps", "rloo", "none", "sequence-sum", "k2"),
        seq.Variant("logps", "rloo", "none", "sequence-sum", "k3"),
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", GRADIENT_PROBLEMS)
def test_each_mistake_a_problem_shows_is_named_at_the_chosen_n(name):
    """The mistake's own estimates as the user's, at the N the check chooses, 10 fresh draws:
    named by its name every time (not ``scaled``, not another mistake, not ``other``)."""
    problem = PROBLEMS[name]()
    config = CheckConfig(sequence=True)
    for seed in range(10):
        trial = seq.trial(problem, None, config, seed)
        n = choose_samples(
            trial.sigma, trial.exact, config.alpha, trial.sizing, minimum=seq.MIN_SAMPLES
        )
        draw = trial.draw(n)
        order = seq.variants_of(problem, "logps")  # the order of draw.variants
        for v in SHOWN[name]:
            p = _verdict(trial, draw.variants[order.index(v)][1], draw, config, n, 0.0)
            assert (p.verdict, p.diagnosis) == ("biased", v.name), (name, seed, v, p)


# -- every example's verdict (slow; the table of docs/check.md) ----------------------------------

EXPECTED: dict[str, dict[str, tuple[str, str | None]]] = {
    "kl_placements.py:k1_in_loss": {
        "length": ("unbiased", None),
        "difficulty": ("unbiased", None),
        "kl": ("biased", "kl-no-gradient"),
    },
    "kl_placements.py:k2_in_loss": {
        "length": ("unbiased", None),
        "difficulty": ("unbiased", None),
        "kl": ("biased", "kl-token-local"),
    },
    "kl_placements.py:k3_in_loss": {
        "length": ("unbiased", None),
        "difficulty": ("unbiased", None),
        "kl": ("biased", "kl-forward"),
    },
    "kl_placements.py:k1_reward_to_go": {
        "length": ("unbiased", None),
        "difficulty": ("unbiased", None),
        "kl": ("unbiased", None),
    },
    "kl_placements.py:k1_per_token_reward": {
        "length": ("unbiased", None),
        "difficulty": ("unbiased", None),
        "kl": ("biased", "kl-token-local"),
    },
    "mistakes.py:sign": {
        "length": ("biased", "sign"),
        "difficulty": ("biased", "sign"),
        "kl": ("biased", "sign"),
    },
    "mistakes.py:detached": {
        "length": ("no gradient", "no-gradient"),
        "difficulty": ("no gradient", "no-gradient"),
        "kl": ("no gradient", "no-gradient"),
    },
    "mistakes.py:group_mean": {
        "length": ("scaled", "self-including-mean"),
        "difficulty": ("scaled", "self-including-mean"),
        "kl": ("scaled", "self-including-mean"),
    },
    "mistakes.py:padded_width": {
        "length": ("biased", "batch-dependent-normaliser"),
        "difficulty": ("scaled", "constant-normaliser"),
        "kl": ("scaled", "constant-normaliser"),
    },
    "mistakes.py:length_mean": {
        "length": ("biased", "length-normalised"),
        "difficulty": ("biased", "length-normalised"),
        "kl": ("biased", "length-normalised"),
    },
    "model_form.py:loss": {
        "length": ("unbiased", None),
        "difficulty": ("unbiased", None),
        "kl": ("unbiased", None),
    },
    "model_form.py:no_baseline": {
        "length": ("unbiased", None),
        "difficulty": ("unbiased", None),
        "kl": ("unbiased", None),
    },
    "model_form.py:no_shift": {
        "length": ("biased", "no-shift"),
        "difficulty": ("biased", "no-shift"),
        "kl": ("biased", "no-shift"),
    },
    # unbiased by the z-test (RLOO's advantages sum to 0 in a group, so its shared prompt's terms
    # cancel), and the credit audit still names the tokens weighted that must not be
    "model_form.py:prompt_in_loss": {
        "length": ("unbiased", "prompt-in-loss"),
        "difficulty": ("unbiased", "prompt-in-loss"),
        "kl": ("unbiased", "prompt-in-loss"),
    },
    "model_form.py:prompt_in_loss_no_baseline": {
        "length": ("biased", "prompt-in-loss"),
        "difficulty": ("biased", "prompt-in-loss"),
        "kl": ("biased", "prompt-in-loss"),
    },
    "model_form.py:prompt_in_loss_token_mean": {
        "length": ("biased", "prompt-in-loss, batch-dependent-normaliser"),
        "difficulty": ("biased", "prompt-in-loss, batch-dependent-normaliser"),
        "kl": ("biased", "prompt-in-loss, batch-dependent-normaliser, kl-no-gradient"),
    },
    "model_form.py:padding_in_loss": {  # difficulty: its padding's terms have no bias there
        "length": ("biased", "padding-in-loss"),
        "difficulty": ("unbiased", "padding-in-loss"),
        "kl": ("biased", "padding-in-loss"),
    },
    "rloo.py:loss": {
        "length": ("unbiased", None),
        "difficulty": ("unbiased", None),
        "kl": ("unbiased", None),
    },
    "rloo.py:loss_token_budget": {
        "length": ("scaled", "constant-normaliser"),
        "difficulty": ("scaled", "constant-normaliser"),
        "kl": ("scaled", "constant-normaliser"),
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("example", sorted(EXPECTED))
def test_every_example_gets_its_verdict(example):
    form = "model" if example.startswith("model_form") else "logps"
    report = check(str(EXAMPLES / example), sequence=True, form=form)
    assert verdicts(report) == EXPECTED[example]


def prompt_in_a_token_mean(model, batch):
    """Labels = input_ids shifted, loss mask = attention_mask[:, 1:], a token mean."""
    lsm = torch.log_softmax(model(batch.input_ids).logits[:, :-1], dim=-1)
    logps = lsm.gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    mask = batch.attention_mask[:, 1:].to(logps.dtype)
    r = batch.rewards.view(-1, batch.group_size)
    a = (r - (r.sum(1, keepdim=True) - r) / (batch.group_size - 1)).reshape(-1, 1)
    return -(a * logps * mask).sum() / mask.sum()


@pytest.mark.slow
def test_a_prompt_left_in_a_token_mean_is_named():
    report = check(prompt_in_a_token_mean, sequence=True, form="model", problem="length")
    assert verdicts(report) == {"length": ("biased", "prompt-in-loss, batch-dependent-normaliser")}
