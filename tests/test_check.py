"""``eligibility check``: every verdict and diagnosis reached by an estimator built for it.

The estimators below are written for the tests (the examples in ``examples/check/`` are run
by the slow test at the end and by ``docs/check.md``). The false-alarm rate of the verdict
``unbiased`` is tested as the lab tests its threshold: on simulated Gaussian estimates under
H₀; the power claim on simulated estimates under the two mistakes it is stated for.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.distributions import Categorical  # noqa: E402

from eligibility.checker import check, stats  # noqa: E402
from eligibility.checker.problems import CHECK_PROBLEMS  # noqa: E402
from eligibility.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "check"


def _rtg(rewards, gamma):
    out, g = [], 0.0
    for r in reversed(rewards.tolist()):
        g = r + gamma * g
        out.insert(0, g)
    return torch.tensor(out)


def _surrogate(log_probs, rewards, gamma):
    w = gamma ** torch.arange(len(rewards), dtype=torch.float32)
    return (w * _rtg(rewards, gamma) * log_probs).sum()


def correct(policy, episodes, gamma):
    """−(1/E) Σ_e Σ_t γᵗ G_t ln π(a_t | s_t)."""
    terms = [
        _surrogate(Categorical(logits=policy(ep.obs)).log_prob(ep.actions), ep.rewards, gamma)
        for ep in episodes
    ]
    return -torch.stack(terms).mean()


def correct_probs(policy, episodes, gamma):
    terms = [
        _surrogate(Categorical(probs=policy(ep.obs)).log_prob(ep.actions), ep.rewards, gamma)
        for ep in episodes
    ]
    return -torch.stack(terms).mean()


def objective(policy, episodes, gamma):
    return -correct(policy, episodes, gamma)


def sign(policy, episodes, gamma):
    return -correct(policy, episodes, gamma) * 1.0


def doubled(policy, episodes, gamma):
    return 2.0 * correct(policy, episodes, gamma)


def no_gamma_t(policy, episodes, gamma):
    terms = [
        (_rtg(ep.rewards, gamma) * Categorical(logits=policy(ep.obs)).log_prob(ep.actions)).sum()
        for ep in episodes
    ]
    return -torch.stack(terms).mean()


def greedy(policy, episodes, gamma):
    terms = []
    for ep in episodes:
        logits = policy(ep.obs)
        terms.append(
            _surrogate(Categorical(logits=logits).log_prob(logits.argmax(-1)), ep.rewards, gamma)
        )
    return -torch.stack(terms).mean()


def detached(policy, episodes, gamma):
    return correct(policy, episodes, gamma).detach()


def raises(policy, episodes, gamma):
    return _inner_raise()


def _inner_raise():
    raise RuntimeError("the user's bug")


def update(policy, env, gamma):
    terms = []
    for _ in range(8):
        obs, _ = env.reset()
        log_probs, rewards, done = [], [], False
        while not done:
            assert obs.dtype == np.float32
            dist = Categorical(logits=policy(torch.as_tensor(obs)))
            a = dist.sample()
            obs, r, terminated, truncated, _ = env.step(a.item())
            log_probs.append(dist.log_prob(a))
            rewards.append(r)
            done = terminated or truncated
        terms.append(_surrogate(torch.stack(log_probs), torch.tensor(rewards), gamma))
    return -torch.stack(terms).mean()


def update_sign(policy, env, gamma):
    return -update(policy, env, gamma)


def _one(fn, name, **kw):
    kw.setdefault("samples", 100)
    report = check(fn, problem=name, **kw)
    (p,) = report.problems
    return report, p


# verdicts and diagnoses -----------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_correct_estimator_is_unbiased_on_every_problem(seed):
    report = check(correct, problem="all", samples=100, seed=seed)
    assert [p.verdict for p in report.problems] == ["unbiased"] * len(CHECK_PROBLEMS), str(report)
    assert report.passed and report.exit_code == 0
    for p in report.problems:
        assert p.variance_ratio == pytest.approx(1.0, rel=1e-4)  # it *is* plain REINFORCE


def test_sign_error():
    _, p = _one(sign, "chain")
    assert (p.verdict, p.diagnosis) == ("biased", "sign")
    assert p.scale == pytest.approx(-1.0, abs=0.3)


def test_scaled_reports_c():
    report, p = _one(doubled, "gridworld", samples=None)  # N sized to tell it from a lost γᵗ
    assert (p.verdict, p.diagnosis) == ("scaled", "scale")
    assert p.scale == pytest.approx(2.0, abs=0.3)
    assert report.exit_code == 1


def test_missing_discount_weighting():
    _, p = _one(no_gamma_t, "gridworld")
    assert (p.verdict, p.diagnosis) == ("biased", "missing-discount-weighting")
    _, same = _one(no_gamma_t, "chain")  # γ = 1: invisible, and said so
    assert same.verdict == "unbiased"
    assert any("missing-discount-weighting" in s for s in same.cannot_see)


def test_other_bias_reports_its_size():
    _, p = _one(greedy, "gridworld")
    assert (p.verdict, p.diagnosis) == ("biased", "other")
    assert p.bias_norm > 5 * p.noise and -1.0 <= p.cosine < 0.99


def test_no_gradient():
    _, p = _one(detached, "chain")
    assert p.verdict == "no gradient" and p.diagnosis is None


def test_raising_function_is_an_error_verdict_with_the_users_frames():
    report, p = _one(raises, "bandit")
    assert p.verdict == "error"
    assert "RuntimeError: the user's bug" in p.error
    assert "_inner_raise" in p.error and "core.py" not in p.error
    assert report.exit_code == 1


def test_probs_policy():
    report = check(correct_probs, problem="chain", samples=100, policy="probs")
    assert report.passed, str(report)
    _, p = _one(correct, "chain", policy="probs")  # logits code fed probabilities: wrong
    assert p.verdict != "unbiased"


def test_objective_form():
    assert check(objective, problem="chain", samples=100, objective=True).passed
    _, p = _one(objective, "chain")  # an objective read as a loss is a sign error
    assert p.diagnosis == "sign"


def test_update_form():
    report = check(update, problem="chain", samples=100, form="update")
    assert report.passed, str(report)
    assert report.problems[0].variance_ratio is None  # no common episodes to compare on
    _, p = _one(update_sign, "bandit", form="update", samples=300)
    assert (p.verdict, p.diagnosis) == ("biased", "sign")


def test_torch_rng_and_threads_are_left_as_they_were():
    torch.manual_seed(123)
    before = torch.rand(3)
    threads = torch.get_num_threads()
    torch.manual_seed(123)
    check(correct, problem="bandit", samples=30)
    assert torch.equal(torch.rand(3), before) and torch.get_num_threads() == threads


# the statistics --------------------------------------------------------------------------------


def test_false_alarm_rate_of_unbiased_is_at_most_alpha():
    """Simulated unbiased estimates, correlated components: rejection rate ≤ α (as the lab)."""
    rng = np.random.default_rng(0)
    n, p, reps, alpha = 60, 4, 2000, 0.2
    exact = np.array([0.3, -0.2, 0.1, 0.5])
    A = rng.normal(size=(p, p))
    rejected = 0
    for _ in range(reps):
        G = exact + rng.normal(size=(n, p)) @ A
        rejected += stats.judge(G, exact, alpha=alpha, without_discount_weighting=None)[0] != (
            "unbiased"
        )
    rate = rejected / reps
    assert rate <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / reps)


def test_chosen_n_catches_sign_and_scale_errors_with_99_percent_power():
    """At the N chosen, simulated ×2 and −1 estimates (plain REINFORCE's spread) are caught."""
    rng = np.random.default_rng(1)
    exact = np.array([0.12, -0.04, 0.11, -0.19])
    spread = np.array([0.7, 0.6, 0.7, 0.8])
    cases = stats.mistakes(exact, spread)
    n = stats.samples_for_power(cases, alpha=1e-3)
    assert min(stats.mistake_power(cases, n, 1e-3).values()) >= 0.99
    for c in (2.0, -1.0):
        caught = np.mean(
            [
                not stats.z_test(
                    c * exact + abs(c) * spread * rng.normal(size=(n, 4)), exact, 1e-3
                ).passed
                for _ in range(300)
            ]
        )
        assert caught >= 0.97


def test_scale_fit_recovers_c_and_its_residual_passes_only_when_parallel():
    rng = np.random.default_rng(2)
    exact = np.array([1.0, -2.0, 0.5])
    G = 3.0 * exact + rng.normal(size=(400, 3))
    fit = stats.fit_scale(G, exact, 1e-3)
    assert abs(fit.c - 3.0) < 4 * fit.stderr and fit.residual.passed
    G2 = 3.0 * exact + np.array([1.0, 1.0, 1.0]) + rng.normal(size=(400, 3))
    assert not stats.fit_scale(G2, exact, 1e-3).residual.passed


# the command line and the helpers --------------------------------------------------------------


def _write(tmp_path, body, name="user.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


BAD = {
    "missing file": ("nowhere.py:loss", None),
    "does not import": ("user.py:loss", "import no_such_module_here\n"),
    "syntax error": ("user.py:loss", "def loss(:\n"),
    "missing function": ("user.py:other", "def loss(policy, episodes, gamma):\n    pass\n"),
    "no function named": ("user.py", "def loss(policy, episodes, gamma):\n    pass\n"),
    "wrong signature": ("user.py:loss", "def loss(policy, episodes):\n    pass\n"),
    "not a tensor": ("user.py:loss", "def loss(policy, episodes, gamma):\n    return 1.0\n"),
    "not a scalar": (
        "user.py:loss",
        "def loss(policy, episodes, gamma):\n    return policy(episodes[0].obs)\n",
    ),
    "NaN": (
        "user.py:loss",
        "def loss(policy, episodes, gamma):\n"
        "    return policy(episodes[0].obs).sum() * float('nan')\n",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_and_exit_2(case, tmp_path, monkeypatch, capsys):
    target, body = BAD[case]
    if body is not None:
        _write(tmp_path, body)
    monkeypatch.chdir(tmp_path)
    assert main(["check", target, "--problem", "chain", "--samples", "30"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("eligibility check: error:"), err
    assert "Traceback" not in err


def test_cli_json_and_exit_codes(tmp_path, monkeypatch, capsys):
    path = _write(
        tmp_path,
        """
        from torch.distributions import Categorical

        def loss(policy, episodes, gamma):
            terms = [(Categorical(logits=policy(ep.obs)).log_prob(ep.actions)
                      * ep.rewards.flip(0).cumsum(0).flip(0)).sum() for ep in episodes]
            return -sum(terms) / len(episodes)

        def wrong(policy, episodes, gamma):
            return -loss(policy, episodes, gamma)
        """,
    )
    args = ["--problem", "chain", "--samples", "100", "--format", "json"]
    assert main(["check", f"{path}:loss", *args]) == 0
    out = json.loads(capsys.readouterr().out)
    keys = {"problem", "verdict", "diagnosis", "scale", "max_abs_z", "bias_norm", "noise"}
    keys |= {"cosine", "variance_ratio"}
    assert keys <= set(out["problems"][0]) and {"alpha", "samples", "episodes"} <= set(out)
    assert out["problems"][0]["verdict"] == "unbiased"
    assert main(["check", f"{path}:wrong", *args]) == 1
    assert json.loads(capsys.readouterr().out)["problems"][0]["diagnosis"] == "sign"


def test_assert_unbiased_in_a_users_pytest_run(tmp_path):
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch.distributions import Categorical
            from eligibility.testing import assert_unbiased

            def loss(policy, episodes, gamma):
                return sum(-(Categorical(logits=policy(ep.obs)).log_prob(ep.actions)
                             * ep.rewards.flip(0).cumsum(0).flip(0)).sum()
                           for ep in episodes) / len(episodes)

            def test_right():
                assert_unbiased(loss, problem="chain", samples=100)

            def test_wrong():
                assert_unbiased(lambda p, e, g: -loss(p, e, g), problem="chain", samples=100)
            """
        )
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert "1 failed, 1 passed" in run.stdout, run.stdout + run.stderr
    assert "biased (sign)" in run.stdout


def test_eligibility_check_is_the_function():
    import eligibility

    assert eligibility.check is check


# the examples ------------------------------------------------------------------------------------

EXPECTED = {
    "correct.py:loss": {p: "unbiased" for p in CHECK_PROBLEMS},
    "sign.py:loss": {p: "biased (sign)" for p in CHECK_PROBLEMS},
    "dropped_discount.py:loss": {
        "bandit": "unbiased",
        "chain": "unbiased",
        "gridworld": "biased (missing-discount-weighting)",
        "short-corridor": "unbiased",
    },
    "sum_over_episodes.py:loss": {p: "scaled (scale)" for p in CHECK_PROBLEMS},
    "greedy_action.py:loss": {
        **{p: "biased (other)" for p in ("bandit", "chain", "gridworld")},
        "short-corridor": "scaled (scale)",  # it sees one direction only
    },
    "detached.py:loss": {p: "no gradient" for p in CHECK_PROBLEMS},
}


@pytest.mark.slow
@pytest.mark.parametrize("target", list(EXPECTED))
def test_examples_get_their_documented_verdicts(target):
    from eligibility.checker.load import load_function

    report = check(load_function(str(EXAMPLES / target)))
    got = {
        p.problem: p.verdict + (f" ({p.diagnosis})" if p.diagnosis else "") for p in report.problems
    }
    assert got == EXPECTED[target], str(report)
