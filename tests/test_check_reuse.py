"""Data reuse without an importance ratio, named by the episodic check.

The user's estimator takes k − 1 plain gradient steps of size α on the batch it is handed,
then returns the batch's REINFORCE loss at the parameters it reached (what a trainer with
Tianshou's ``repeat`` computes at its k-th step). The check's variants are held against it
batch by batch (truth: autograd through the user's own torch code), and the check names it.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

import numpy as np
import pytest

from eligibility.check import problems as P
from eligibility.check import reuse, user
from eligibility.check.run import CheckConfig, _verdict

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "check" / "data_reuse.py"
_LOSS = user.load_function(f"{EXAMPLE}:loss")


def reuse_loss(repeat: int, lr: float):
    """examples/check/data_reuse.py's loss: ``repeat − 1`` SGD steps of size ``lr`` first.

    ``repeat=1`` is plain REINFORCE, through the same code.
    """
    return functools.partial(_LOSS, repeat=repeat, lr=lr)


def _batches(name: str, n: int, E: int = 8):
    problem = P.PROBLEMS[name]()
    eps = problem.sample(n * E, np.random.default_rng(3))
    return problem, eps


@pytest.mark.parametrize("name", list(P.PROBLEMS))
def test_one_step_is_reinforce(name):
    problem, eps = _batches(name, 6)
    s, G = P.returns_to_go(problem, eps)
    psi = np.where(eps.mask, problem.gamma ** np.arange(G.shape[1])[None, :] * G, 0.0)
    m = problem.mdp
    C = reuse.batch_weights(s, eps.actions, psi, 8, m.n_states, m.n_actions)
    V = reuse.reuse_estimates(C, m.phi, problem.W, problem.b, alpha=0.3, k=1)
    np.testing.assert_allclose(V, P.reference_estimates(problem, eps, 8), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["chain", "gridworld"])
@pytest.mark.parametrize(("k", "lr"), [(2, 0.1), (3, 0.05)])
def test_the_variant_is_the_users_reuse_batch_by_batch(name, k, lr):
    """Against autograd through the user's torch code, on the same batches."""
    problem, eps = _batches(name, 4)
    (V,) = [V for key, V in _variants_at(problem, eps, k, lr)]
    policy, params = user.make_policy(problem.W, problem.b, "logits")
    theta = [p.detach().clone() for p in params]
    episodes = P._as_episodes(problem, eps)
    fn = reuse_loss(k, lr)
    for b in range(4):
        user.reset_policy(params, theta)
        g = user.call(fn, (policy, episodes[8 * b : 8 * b + 8], problem.gamma), params, -1.0)
        np.testing.assert_allclose(g, V[b], rtol=1e-4, atol=1e-4 * np.abs(V[b]).max())
        assert not np.allclose(g, P.reference_estimates(problem, eps, 8)[b], rtol=1e-2)


@pytest.mark.parametrize("name", ["chain", "gridworld"])
def test_the_variants_are_each_k_and_alphas_own_walk_to_the_bit(name):
    """``reuse.variants`` walks each α once for every k: the same numbers, exactly, as
    ``reuse_estimates`` walking (k, α) on its own (the plain reference), in the same order."""
    problem, eps = _batches(name, 5)
    s, G = P.returns_to_go(problem, eps)
    psi = np.where(eps.mask, problem.gamma ** np.arange(G.shape[1])[None, :] * G, 0.0)
    m = problem.mdp
    C = reuse.batch_weights(s, eps.actions, psi, 8, m.n_states, m.n_actions)
    got = reuse.variants(C, m.phi, problem.W, problem.b)
    plain = [(k, a) for k in reuse.REPEATS for a in reuse.STEPS]
    assert len(got) == len(plain)
    for (name_, V), (k, a) in zip(got, plain, strict=True):
        want = reuse.reuse_estimates(C, m.phi, problem.W, problem.b, a, k)
        assert name_ == "data-reuse" and np.array_equal(V, want), (k, a)


def _variants_at(problem, eps, k, lr):
    s, G = P.returns_to_go(problem, eps)
    psi = np.where(eps.mask, problem.gamma ** np.arange(G.shape[1])[None, :] * G, 0.0)
    m = problem.mdp
    C = reuse.batch_weights(s, eps.actions, psi, 8, m.n_states, m.n_actions)
    return [("data-reuse", reuse.reuse_estimates(C, m.phi, problem.W, problem.b, lr, k))]


def _verdict_in_process(fn, name: str, samples: int):
    """The engine's verdict on one problem, the calls made here (no worker: fast)."""
    config = CheckConfig(problem=name, samples=samples)
    trial = P.trial(P.PROBLEMS[name](), fn, config, seed=0)
    draw = trial.draw(samples)
    draw.setup()
    rows = np.stack([draw.step(k) for k in range(samples)])
    return _verdict(trial, rows, draw, config, samples, time.perf_counter())


def test_two_steps_on_one_batch_are_named_data_reuse():
    report = _verdict_in_process(reuse_loss(2, 0.3), "bandit", samples=100)
    assert (report.verdict, report.diagnosis) == ("biased", "data-reuse")


def test_the_correct_estimator_through_the_same_code_is_not_named():
    report = _verdict_in_process(reuse_loss(1, 0.3), "bandit", samples=100)
    assert (report.verdict, report.diagnosis) == ("unbiased", None)


@pytest.mark.slow
@pytest.mark.parametrize("k", [2, 3])
def test_reuse_is_named_on_the_chain_and_the_correct_one_passes(k):
    assert _verdict_in_process(reuse_loss(k, 0.2), "chain", 120).diagnosis == "data-reuse"
    assert _verdict_in_process(reuse_loss(1, 0.2), "chain", 120).verdict == "unbiased"


@pytest.mark.slow
@pytest.mark.parametrize(("k", "lr"), [(2, 0.1), (3, 0.1), (4, 0.05)])
def test_the_check_names_data_reuse_on_every_problem_that_shows_it(k, lr):
    """Through ``check`` itself (the worker, the chosen N): named on chain and gridworld.

    The bandit may read a problem-dependent scale where a reuse of one step is nearly a
    rescaling there; the short corridor's gradients are all multiples of one vector (its
    ``blind_to`` says so).
    """
    from eligibility.check import check

    report = check(reuse_loss(k, lr), problem="all")
    found = {p.problem: (p.verdict, p.diagnosis) for p in report.problems}
    assert found["chain"] == ("biased", "data-reuse"), found
    assert found["gridworld"] == ("biased", "data-reuse"), found
    assert not report.passed


@pytest.mark.slow
def test_the_check_passes_the_correct_estimator_through_the_reuse_code():
    from eligibility.check import check

    report = check(reuse_loss(1, 0.1), problem="all")
    assert report.unbiased, [(p.problem, p.verdict, p.diagnosis) for p in report.problems]
