"""Exact off-policy sequence problems: θ_old, θ after K exact steps, a sampler μ ≠ π_old.

Truth: the on-policy problem's own enumeration (at θ = θ_old), central finite differences of
J, Monte Carlo draws from μ with a z-test, and (for :mod:`eligibility.torch.offpolicy`) the
lab's numpy weights, written from the definitions, against the torch losses' autograd.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eligibility.lab.sequence import get_problem  # noqa: E402
from eligibility.lab.sequence.offpolicy import (  # noqa: E402
    OffPolicyProblem,
    Sampler,
    _objective,
    ascend,
)
from eligibility.torch.offpolicy import off_policy_loss  # noqa: E402


@pytest.fixture(scope="module")
def base():
    return get_problem("length")


@pytest.fixture(scope="module")
def problem(base):
    return OffPolicyProblem(base, ascend(base, 2, 0.5), Sampler(temperature=1.3, noise=0.3))


def test_at_theta_old_it_is_the_on_policy_problem(base):
    p = OffPolicyProblem(base, ascend(base, 0, 1.0))
    assert p.J == pytest.approx(base.J, abs=1e-12)
    np.testing.assert_allclose(p.exact, base.exact, atol=1e-12)
    np.testing.assert_allclose(p.sampler_prob, base.table.prob, atol=1e-12)
    assert p.kl_old() == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(p.variants()["product"], base.exact, atol=1e-12)


def test_exact_gradient_matches_central_differences(problem, base):
    h = 1e-5
    for j in (0, 5, 17, 33, 59):
        e = np.zeros(base.n_params)
        e[j] = h
        with torch.no_grad():
            up = float(_objective(base, base.params64(problem.theta_flat + e)))
            down = float(_objective(base, base.params64(problem.theta_flat - e)))
        assert (up - down) / (2 * h) == pytest.approx(problem.exact[j], abs=1e-8)


def test_ascent_climbs_and_moves_away_from_theta_old(base, problem):
    assert problem.J > base.J + 0.05
    assert 0.01 < problem.kl_old() < 1.0
    assert problem.clipped_share() > 0


def test_sampler_is_a_proper_distribution_and_differs_from_pi_old(problem, base):
    per_prompt = np.add.reduceat(problem.sampler_prob, base.table.start[:-1])
    np.testing.assert_allclose(per_prompt, 1.0, atol=1e-12)
    assert np.abs(problem.sampler_prob - base.table.prob).max() > 1e-3


def test_product_weight_is_unbiased_and_each_named_variant_is_not(problem):
    v = problem.variants(cap=1.5)
    np.testing.assert_allclose(v["product"], problem.exact, rtol=1e-9, atol=1e-12)
    scale = np.linalg.norm(problem.exact)
    for name, g in v.items():
        if name != "product":
            assert np.linalg.norm(g - problem.exact) > 1e-3 * scale, name


def test_top_k_sampler_recovers_only_its_support(base):
    """β = 0: E_μ[(π_θ/μ) A ∇ln π_θ] = ∇ Σ_{o ∈ supp μ} π_θ(o) (R − b_q) with b_q held fixed."""
    theta = ascend(base, 1, 0.5)
    p = OffPolicyProblem(base, theta, Sampler(top_k=3))
    assert not p.covered.all()
    got = p.variants()["product"]
    assert np.linalg.norm(got - p.exact) > 1e-3 * np.linalg.norm(p.exact)
    t = base.table
    b = torch.as_tensor((p.shaped_reward - p.advantage)[p.covered])  # b_q on each covered row
    params = base.params64(theta)
    lp = p._token_logps(params).sum(1)[torch.as_tensor(p.covered)]
    R = torch.as_tensor(t.reward[p.covered])
    value = (torch.exp(lp) * (R - b)).sum() / len(base.prompts)
    want = torch.cat([g.reshape(-1) for g in torch.autograd.grad(value, list(params.values()))])
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", ["product", "uncorrected", "token-ratio", "clipped"])
def test_expectations_match_monte_carlo_draws_from_the_sampler(problem, name):
    rng = np.random.default_rng(3)
    n = 4000
    rows = problem.draw(n, rng)  # [Q, n]
    c = problem.variant_weights()[name]
    per_row = np.einsum("mt,mtp->mp", c * problem.base.table.mask, problem.token_scores)
    samples = per_row[rows]  # [Q, n, p]
    mean = samples.mean(axis=1).mean(axis=0)
    se = np.sqrt((samples.var(axis=1, ddof=1) / n).sum(axis=0)) / rows.shape[0]
    z = (mean - problem.expected_score(c)) / np.maximum(se, 1e-12)
    assert np.abs(z).max() < 5.0


def test_draws_follow_the_sampler(problem, base):
    rows = problem.draw(20_000, np.random.default_rng(0))
    M = len(base.table.reward) // len(base.prompts)
    for q in range(len(base.prompts)):
        freq = np.bincount(rows[q] - q * M, minlength=M) / rows.shape[1]
        p = problem.sampler_prob[q * M : (q + 1) * M]
        se = np.sqrt(p * (1 - p) / rows.shape[1])
        assert (np.abs(freq - p) <= 5 * se + 1e-9).all()


# ------------------------------------------------ the torch losses' exact expectations

TORCH_VARIANTS = [
    ("product", {}),
    ("token-ratio", {"ratio": "token"}),
    ("geometric-mean", {"ratio": "geometric-mean"}),
    ("sequence-mean", {"aggregation": "sequence-mean"}),
    ("clipped", {"ratio": "token", "surrogate": "ppo-clip", "eps_low": 0.2, "eps_high": 0.28}),
    ("truncated", {"correction": "tis", "cap": 1.2}),
    ("masked", {"correction": "mis", "cap": 1.2}),
]


@pytest.mark.parametrize("name,kw", TORCH_VARIANTS)
def test_torch_losses_have_the_labs_expectations(problem, name, kw):
    def loss(lp, old, mu, a, m):
        return off_policy_loss(lp, old, a, m, sampler_logps=mu, **kw)

    want = problem.variants(eps_low=0.2, eps_high=0.28, cap=1.2)[name]
    np.testing.assert_allclose(problem.expected_loss_gradient(loss), want, rtol=1e-9, atol=1e-12)


def test_torch_loss_without_sampler_weight_and_with_stale_old_logps(problem):
    v = problem.variants()

    def uncorrected(lp, old, mu, a, m):
        return off_policy_loss(lp, old, a, m)

    def stale(lp, old, mu, a, m):  # old log-probs recomputed at θ: the ratio is 1
        return off_policy_loss(lp, lp.detach(), a, m, sampler_logps=mu + (lp.detach() - old))

    g = problem.expected_loss_gradient
    np.testing.assert_allclose(g(uncorrected), v["uncorrected"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(g(stale), v["stale"], rtol=1e-9, atol=1e-12)


def test_bad_input_names_the_parameter(base):
    with pytest.raises(ValueError, match="theta must be"):
        OffPolicyProblem(base, np.zeros(3))
    with pytest.raises(ValueError, match="temperature"):
        Sampler(temperature=0.0)
    with pytest.raises(ValueError, match="top_k"):
        Sampler(top_k=0)
    with pytest.raises(ValueError, match="steps must be"):
        ascend(base, -1, 0.1)


def test_token_scores_match_autograd_row_by_row(problem):
    params = problem.base.params64(problem.theta_flat)
    lp = problem._token_logps(params)
    for i, t in ((0, 0), (5, 1), (300, 3), (700, 4)):
        if problem.base.table.mask[i, t]:
            g = torch.autograd.grad(lp[i, t], list(params.values()), retain_graph=True)
            want = torch.cat([x.reshape(-1) for x in g]).numpy()
            np.testing.assert_allclose(problem.token_scores[i, t], want, atol=1e-12)


def test_batches_follow_the_contract_and_the_sampler(problem):
    rng = np.random.default_rng(1)
    draw = problem.draw_groups(4, rng, 8)
    batch = problem.batch(draw)
    lp = problem.logps(batch)
    W = batch.completion_ids.shape[1]
    rows = draw.rows
    np.testing.assert_allclose(
        batch.sampler_logps.numpy(), problem.sampler_token_logp[rows, :W], atol=1e-6
    )
    np.testing.assert_allclose(batch.old_logps.numpy(), problem.old_token_logp[rows, :W], atol=1e-6)
    np.testing.assert_allclose(lp.detach().numpy(), problem.token_logp[rows, :W], atol=1e-5)
    assert lp.requires_grad and batch.group_size == 8 and lp.shape == (32, W)


# -- samplers that truncate: top k, top p, min p, and the sampler's own objective ---------------


def _cut_by_hand(z: np.ndarray, top_p=None, min_p=None) -> np.ndarray:
    """ln μ per position from logits [L, V]: a loop over positions, written from the rules."""
    out = np.empty_like(z)
    for i, row in enumerate(z):
        keep = np.ones(len(row), dtype=bool)
        if top_p is not None:
            p = np.exp(row - row.max())
            p /= p.sum()
            total = 0.0
            keep[:] = False
            for v in sorted(range(len(row)), key=lambda v: -p[v]):  # most probable first
                if total >= top_p:
                    break
                keep[v], total = True, total + p[v]
        if min_p is not None:
            q = np.where(keep, np.exp(row - row[keep].max()), 0.0)
            q /= q.sum()
            keep &= q >= min_p * q.max()
        kept = np.where(keep, row, -np.inf)
        out[i] = kept - (np.log(np.exp(kept - row[keep].max()).sum()) + row[keep].max())
    return out


@pytest.mark.parametrize(
    "cut", [{"top_p": 0.7}, {"top_p": 0.95}, {"min_p": 0.3}, {"top_p": 0.9, "min_p": 0.2}]
)
def test_top_p_and_min_p_cut_each_step_as_engines_do(cut):
    rng = np.random.default_rng(0)
    z = rng.normal(size=(6, 5)) * 2
    got = Sampler(**cut).log_probs(torch.as_tensor(z)[None], torch.zeros(1, 6, dtype=torch.long))[0]
    np.testing.assert_allclose(got.numpy(), _cut_by_hand(z, **cut), rtol=1e-12, atol=1e-12)
    assert Sampler(**cut).truncates and not Sampler().truncates
    with pytest.raises(ValueError, match="top_p must be in"):
        Sampler(top_p=0.0)


@pytest.mark.parametrize("sampler", [Sampler(top_p=0.8), Sampler(min_p=0.25, temperature=1.2)])
def test_the_truncated_samplers_gradient_is_its_objectives(base, sampler):
    """∇J_μ by autograd (the cuts held) against central differences of J_μ; μ's support is
    smaller than π_old's, and without a cut J_μ is J."""
    p = OffPolicyProblem(base, ascend(base, 0, 1.0), sampler)
    assert not p.covered.all()
    u = np.random.default_rng(1).normal(size=p.n_params)
    h = 1e-5
    fd = p.sampler_objective(p.theta_flat + h * u) - p.sampler_objective(p.theta_flat - h * u)
    assert p.sampler_exact @ u == pytest.approx(fd / (2 * h), rel=1e-6, abs=1e-9)
    plain = OffPolicyProblem(base, ascend(base, 0, 1.0))
    np.testing.assert_allclose(plain.sampler_exact, plain.exact, atol=1e-12)
    assert plain.sampler_objective() == pytest.approx(plain.J, abs=1e-12)
