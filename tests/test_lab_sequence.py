"""Exact sequence problems: the enumeration, J, ∇J, expectations and the sampler, each held
against a reference we did not derive the same way (plain loops, finite differences, mpmath,
scipy's chi-square)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from eligibility.lab.sequence import (
    CausalLMOutput,
    SequenceProblem,
    TinyCausalLM,
    advantage_of,
)
from eligibility.lab.sequence.builtin import PROBLEMS, answers_first, get_problem
from eligibility.lab.sequence.problem import completions, n_completions


def _small(beta: float = 0.3, T: int = 3, seed: int = 0, position: bool = True) -> SequenceProblem:
    """V = 3 (EOS, a, b), two prompts, random θ and π_ref: 15 completions per prompt at T = 3."""
    rng = np.random.default_rng(seed)
    pos = rng.normal(size=(2 + T, 3)) if position else None
    model = TinyCausalLM(
        3, token=rng.normal(size=(3, 3)), prompt=rng.normal(size=(3, 3)), position=pos
    )
    ref = TinyCausalLM(3, token=rng.normal(size=(3, 3)))
    return SequenceProblem(
        model,
        ref,
        [[1, 2], [2, 2]],
        lambda q, o: float(o[0] == q[0]) + 0.5 * float(o[-1] == 0) - 0.1 * len(o),
        max_completion_length=T,
        beta=beta,
        group_size=3,
    )


def _theta(p: SequenceProblem) -> np.ndarray:
    return np.concatenate([v.double().numpy().ravel() for v in p.theta.values()])


# the enumeration ------------------------------------------------------------------------------


def test_completions_are_every_sequence_once():
    C = completions(3, 0, 3)
    assert len(C) == n_completions(3, 3) == 1 + 2 + 4 + 8
    assert len({tuple(r) for r in C}) == len(C)
    # plain loop: every string over {1, 2} of length < 3 then EOS, and every length-3 string
    expected = {
        tuple(b) + (0,) * (3 - len(b))
        for L in range(3)
        for b in itertools.product((1, 2), repeat=L)
    }
    expected |= set(itertools.product((1, 2), repeat=3))
    assert {tuple(r) for r in C} == expected


def _loop_logp(model, prompt, completion) -> float:
    """log π(o|q) by one model call per token, each on the prefix alone (a plain loop)."""
    total, prefix = 0.0, list(prompt)
    for tok in completion:
        with torch.no_grad():
            z = model(torch.tensor([prefix], dtype=torch.int64)).logits[0, -1].double()
        total += float(torch.log_softmax(z, -1)[tok])
        prefix.append(tok)
    return total


def test_enumeration_matches_a_plain_loop_and_sums_to_one():
    p = _small()
    t = p.table
    for row in range(len(t.reward)):
        L = t.length[row]
        q = p.prompts[t.prompt[row]]
        o = t.completion_ids[row, :L]
        assert t.logp[row] == pytest.approx(_loop_logp(p.model64, q, o), abs=1e-12)
        assert t.ref_logp[row] == pytest.approx(_loop_logp(p.ref_model64, q, o), abs=1e-12)
        assert t.reward[row] == p.reward_fn(tuple(q), tuple(int(x) for x in o))
    np.testing.assert_allclose(np.add.reduceat(t.prob, t.start[:-1]), 1.0, atol=1e-13)


# J and ∇J -------------------------------------------------------------------------------------


def test_exact_gradient_matches_central_differences():
    p = _small()
    th, h = _theta(p), 1e-5
    fd = np.array(
        [(p.objective(th + h * e) - p.objective(th - h * e)) / (2 * h) for e in np.eye(len(th))]
    )
    np.testing.assert_allclose(p.exact, fd, atol=1e-9)
    assert p.objective(th) == p.J
    np.testing.assert_allclose(p.reward_gradient - p.beta * p.kl_gradient, p.exact, atol=1e-14)


def test_exact_objective_and_gradient_against_mpmath():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    p = _small(T=2, position=False)
    token, prompt = (p.theta[k].double().numpy() for k in ("token.weight", "prompt.weight"))
    ref = p.ref_model.token.weight.detach().double().numpy()

    def J(tok, pr):
        total = mpmath.mpf(0)
        for q, (x0, x1) in enumerate(p.prompts):
            for row in np.flatnonzero(p.table.prompt == q):
                o = p.table.completion_ids[row, : p.table.length[row]]
                lp = lr = mpmath.mpf(0)
                prev = x1
                for tok_ in o:
                    z = [mpmath.mpf(tok[prev][v]) + mpmath.mpf(pr[x0][v]) for v in range(3)]
                    zr = [mpmath.mpf(ref[prev][v]) for v in range(3)]
                    lp += z[tok_] - mpmath.log(sum(mpmath.exp(x) for x in z))
                    lr += zr[tok_] - mpmath.log(sum(mpmath.exp(x) for x in zr))
                    prev = tok_
                R = p.table.reward[row]
                total += mpmath.exp(lp) * (mpmath.mpf(R) - mpmath.mpf(p.beta) * (lp - lr))
        return total / len(p.prompts)

    assert float(J(token, prompt)) == pytest.approx(p.J, abs=1e-14)
    h = mpmath.mpf(10) ** -12
    # the finite-difference test covers every component; here one per row of each table
    picks = [("token", 1, 0), ("token", 2, 2), ("token", 0, 1), ("prompt", 1, 1), ("prompt", 2, 0)]
    for table_, i, j in picks:
        plus = [[mpmath.mpf(x) for x in r] for r in (token if table_ == "token" else prompt)]
        minus = [r[:] for r in plus]
        plus[i][j] += h
        minus[i][j] -= h
        if table_ == "token":
            grad = (J(plus, prompt) - J(minus, prompt)) / (2 * h)
        else:
            grad = (J(token, plus) - J(token, minus)) / (2 * h)
        k = p.labels().index(f"{table_}.weight[{i},{j}]")
        assert p.exact[k] == pytest.approx(float(grad), abs=1e-13)


def test_labels_follow_named_parameters():
    p = _small()
    labels = p.labels()
    assert len(labels) == p.n_params == len(p.exact)
    assert labels[0] == "token.weight[0,0]" and labels[9] == "prompt.weight[0,0]"
    assert labels[-1].startswith("position.weight[")


# exact expectations ---------------------------------------------------------------------------


def test_expected_score_of_the_shaped_reward_is_the_gradient():
    p = _small()
    t = p.table
    w = p.shaped_reward - t.per_row(t.mean(p.shaped_reward))
    np.testing.assert_allclose(p.expected_score(w), p.exact, atol=1e-14)
    # per-token form of the same weight, and the score tables by forward-mode autograd
    np.testing.assert_allclose(p.expected_score(np.repeat(w[:, None], 3, 1)), p.exact, atol=1e-14)
    by_table = (t.prob * w) @ p.scores / len(p.prompts)
    np.testing.assert_allclose(by_table, p.exact, atol=1e-14)


def test_token_scores_match_autograd_per_completion():
    p = _small()
    params = p.params64()
    lp = p._token_logps64(params)
    for row, tt in [(0, 0), (7, 1), (20, 2)]:
        g = torch.autograd.grad(lp[row, tt], list(params.values()), retain_graph=True)
        flat = torch.cat([x.reshape(-1) for x in g]).numpy()
        np.testing.assert_allclose(p.token_scores[row, tt], flat, atol=1e-14)


def test_kl_gradient_is_the_reward_to_go_penalty():
    """∇KL = E[Σₜ ∇ℓₜ Σ_{t'≥t} (ℓ_t' − ℓ_ref,t')]: k1 as a reward-to-go, per token."""
    p = _small()
    t = p.table
    d = t.token_logp - t.ref_token_logp
    to_go = np.cumsum(d[:, ::-1], axis=1)[:, ::-1]
    np.testing.assert_allclose(p.expected_score(to_go), p.kl_gradient, atol=1e-14)


def _brute_group_expectation(p: SequenceProblem, advantage, G: int) -> np.ndarray:
    """E[(1/G) Σᵢ Aᵢ ∇log π(oᵢ)] by a plain loop over every G-tuple of completions."""
    t, S = p.table, p.scores
    total = np.zeros(p.n_params)
    for q in range(len(p.prompts)):
        rows = range(t.start[q], t.start[q + 1])
        for tup in itertools.product(rows, repeat=G):
            prob = np.prod(t.prob[list(tup)])
            A = advantage(t.reward[list(tup)][None, :])[0]
            total += prob * sum(A[i] * S[r] for i, r in enumerate(tup)) / G
    return total / len(p.prompts)


def rloo_advantage(r):
    """A = R − mean of the others, written out here (not the table's)."""
    G = r.shape[-1]
    return (G * r - r.sum(axis=-1, keepdims=True)) / (G - 1)


def grpo_advantage(r):
    """A = (R − mean)/(std + 10⁻⁴), Bessel's std, written out here (not the table's)."""
    return (r - r.mean(axis=-1, keepdims=True)) / (r.std(axis=-1, ddof=1, keepdims=True) + 1e-4)


@pytest.mark.parametrize(
    "advantage",
    [rloo_advantage, grpo_advantage, advantage_of("rloo"), advantage_of("mean", "group-std")],
)
def test_group_expectation_matches_every_tuple(advantage):
    p = _small(T=2, beta=0.0)  # 7 completions per prompt: 343 triples
    np.testing.assert_allclose(
        p.expected_group_gradient(advantage, group_size=3),
        _brute_group_expectation(p, advantage, 3),
        atol=1e-13,
    )


def test_the_tables_group_advantages_are_the_formulas_written_out():
    r = np.random.default_rng(0).random((5, 4))
    np.testing.assert_allclose(advantage_of("rloo")(r), rloo_advantage(r), rtol=1e-15)
    np.testing.assert_allclose(advantage_of("mean", "group-std")(r), grpo_advantage(r), rtol=1e-14)


def test_rloo_is_unbiased_and_the_group_mean_scaled():
    p = _small(beta=0.0)
    np.testing.assert_allclose(p.expected_group_gradient(rloo_advantage), p.exact, atol=1e-14)

    def mean_only(r):
        return r - r.mean(axis=-1, keepdims=True)

    np.testing.assert_allclose(
        p.expected_group_gradient(mean_only, group_size=4), 0.75 * p.exact, atol=1e-14
    )


# batches --------------------------------------------------------------------------------------


def test_batch_follows_the_contract():
    p = _small()
    b = p.sample(5, np.random.default_rng(0))
    N, T = 15, int(b.completion_mask.sum(1).max())  # padded to the longest in the batch
    assert T == 3 or (b.completion_mask[:, -1] == 1).any()
    assert b.completion_ids.dtype == torch.int64 and b.completion_ids.shape == (N, T)
    assert b.completion_mask.dtype == torch.float32 and b.completion_mask.shape == (N, T)
    assert b.prompt_ids.dtype == torch.int64 and b.prompt_ids.shape == (N, 2)
    assert b.rewards.dtype == torch.float32 and b.rewards.shape == (N,)
    assert b.group_ids.tolist() == [i // 3 for i in range(N)] and b.group_size == 3
    for x in (b.old_logps, b.ref_logps):
        assert x.dtype == torch.float32 and x.shape == (N, T)
        assert (x[b.completion_mask == 0] == 0).all()
    assert b.beta == 0.3 and b.max_completion_length == 3
    assert torch.equal(b.input_ids, torch.cat([b.prompt_ids, b.completion_ids], 1))
    assert b.attention_mask.dtype == torch.int64
    assert torch.equal(b.attention_mask[:, 2:].float(), b.completion_mask)
    # group-major: one prompt per group
    for g in range(5):
        assert (b.prompt_ids[3 * g : 3 * g + 3] == b.prompt_ids[3 * g]).all()
    # the mask covers everything up to the first EOS
    for i in range(N):
        ids, m = b.completion_ids[i].tolist(), b.completion_mask[i].tolist()
        L = ids.index(0) + 1 if 0 in ids else T
        assert m == [1.0] * L + [0.0] * (T - L)


def test_model_logps_match_the_enumeration_and_are_differentiable():
    p = _small()
    b = p.sample(4, np.random.default_rng(1))
    lp, on = p.on_policy(b)
    assert lp.requires_grad and lp.dtype == torch.float32
    assert float((lp.detach() - b.old_logps).abs().max()) < 1e-5
    assert torch.equal(on.old_logps, lp.detach())
    (lp.sum()).backward()
    assert all(x.grad is not None for x in p.model.parameters())
    p.reset()
    assert all(x.grad is None for x in p.model.parameters())


def test_reset_puts_theta_back():
    p = _small()
    with torch.no_grad():
        for x in p.model.parameters():
            x.add_(1.0)
    p.reset()
    for k, x in p.model.named_parameters():
        assert torch.equal(x, p.theta[k])


def test_prompts_are_stratified():
    p = _small()
    rng = np.random.default_rng(2)
    for n in (1, 2, 5):
        d = p.draw(n, rng)
        counts = np.bincount(d.prompts, minlength=2)
        assert counts.max() - counts.min() <= 1 and counts.sum() == n


def _chi2_sample_test(p: SequenceProblem, n_groups: int, seed: int, alpha: float) -> None:
    """Pearson's χ² of the sampled completion counts against π(o|q), per prompt.

    Cells with an expected count below 5 are pooled into one; the p-value is the χ² survival
    function Q(k/2, χ²/2) (torch's regularised upper incomplete gamma). Under a correct sampler
    the test fails with probability ≤ alpha per prompt.
    """
    d = p.draw(n_groups, np.random.default_rng(seed))
    t = p.table
    for q in range(len(p.prompts)):
        rows = d.rows[t.prompt[d.rows] == q]
        observed = np.bincount(rows - t.start[q], minlength=t.start[q + 1] - t.start[q])
        expected = len(rows) * t.prob[t.start[q] : t.start[q + 1]]
        small = expected < 5
        obs = np.append(observed[~small], observed[small].sum())
        exp = np.append(expected[~small], expected[small].sum())
        keep = exp > 0
        chi2 = float((((obs - exp) ** 2)[keep] / exp[keep]).sum())
        dof = float(keep.sum() - 1)
        p_value = float(torch.special.gammaincc(torch.tensor(dof / 2), torch.tensor(chi2 / 2)))
        assert p_value > alpha, (q, chi2, dof)


def test_sampler_frequencies_match_the_exact_probabilities():
    _chi2_sample_test(_small(), 20_000, seed=3, alpha=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_sampler_frequencies_on_the_builtin_problems(name):
    p = get_problem(name)
    _chi2_sample_test(p, 20_000, seed=4, alpha=1e-4)


# the built-in problems ------------------------------------------------------------------------


def test_builtin_problems_have_their_stated_properties():
    length = get_problem("length").stats()
    assert all(s["corr_reward_length"] < -0.4 for s in length)
    assert all(0.2 < s["mean_reward"] < 0.6 for s in length)
    difficulty = get_problem("difficulty").stats()
    for s, target in zip(difficulty, (0.9, 0.5, 0.1), strict=True):
        assert s["mean_reward"] == pytest.approx(target, abs=0.01)
        assert abs(s["corr_reward_length"]) < 0.02  # length independent of reward
    kl = get_problem("kl")
    assert kl.beta > 0 and all(s["kl"] > 0.5 for s in kl.stats())
    clip = get_problem("clip").stats()  # a score out of 10, prompts solved 70 % and 30 %
    for s, target in zip(clip, (7.0, 3.0), strict=True):
        assert s["mean_reward"] == pytest.approx(target, abs=0.1)
    for name in PROBLEMS:
        p = get_problem(name)
        shown = set(p.shows) - {"batch-dependent-normaliser"}
        assert shown <= set(p.mistakes), (name, p.mistakes.keys())
        assert np.isfinite(p.exact).all() and np.linalg.norm(p.exact) > 0


def test_bad_input_names_the_parameter():
    m = TinyCausalLM(3)
    r = answers_first(1)
    with pytest.raises(ValueError, match="prompts"):
        SequenceProblem(m, m, [1, 2], r, max_completion_length=2)
    with pytest.raises(ValueError, match="beta"):
        SequenceProblem(m, m, [[1]], r, max_completion_length=2, beta=-1.0)
    with pytest.raises(ValueError, match="group_size"):
        SequenceProblem(m, m, [[1]], r, max_completion_length=2, group_size=1)
    with pytest.raises(ValueError, match="max_completion_length"):
        SequenceProblem(m, m, [[1]], r, max_completion_length=20)
    with pytest.raises(ValueError, match="token"):
        TinyCausalLM(3, token=np.zeros((2, 3)))
    with pytest.raises(ValueError, match="unknown sequence problem"):
        get_problem("nope")
    p = _small()
    with pytest.raises(ValueError, match="weight"):
        p.expected_score(np.ones(3))


# the lab on sequence problems -----------------------------------------------------------------


def test_lab_names_the_sequence_problems():
    from eligibility.lab.run import SEQUENCE_PROBLEMS

    assert SEQUENCE_PROBLEMS == tuple(PROBLEMS)


def test_lab_estimates_match_a_plain_loop_and_pass():
    from eligibility.lab.run import LabConfig, run_lab
    from eligibility.lab.sequence.estimate import run_sequence_problem

    p = get_problem("kl")
    cases = run_sequence_problem(p, samples=40, seed=3)
    # the first estimate of rloo by a plain loop over the same draws
    rng = np.random.default_rng(3)
    rows = p.draw(4, rng).rows
    S = p.scores
    g = np.zeros(p.n_params)
    for i, row in enumerate(rows):
        group = rows[(i // 8) * 8 : (i // 8) * 8 + 8]
        others = [p.shaped_reward[r] for j, r in enumerate(group) if (i // 8) * 8 + j != i]
        g += (p.shaped_reward[row] - np.mean(others)) * S[row] / len(rows)
    rloo = next(c for c in cases if c.baseline == "rloo")
    np.testing.assert_allclose(rloo.samples[0], g, atol=1e-12)
    assert all(c.passed for c in cases if not c.biased)
    result = run_lab(LabConfig(problem="kl", samples=30))
    assert result.to_json()["problems"][0]["problem"] == "kl"


def test_jacobian_of_another_view_matches_autograd():
    """jacobian(fn) for a view the check needs (the unshifted log-probs), entry by entry."""
    from eligibility.lab.sequence.problem import _Bound

    p = _small()

    def no_shift(model):
        ids = torch.cat([p._prompt_rows, p._ids], dim=1)
        z = model(ids).logits[:, 2:]
        return torch.log_softmax(z, -1).gather(-1, p._ids.unsqueeze(-1)).squeeze(-1)

    J = p.jacobian(no_shift)
    params = p.params64()
    out = no_shift(_Bound(p.model64, params))
    for row, t in [(0, 0), (9, 2), (25, 1)]:
        g = torch.autograd.grad(out[row, t], list(params.values()), retain_graph=True)
        np.testing.assert_allclose(J[row, t], torch.cat([x.reshape(-1) for x in g]), atol=1e-14)


class _MeanPoolLM(torch.nn.Module):
    """Another causal LM: z_t = W tanh(mean_{s≤t} E[x_s]) + b (a causal mean-pool, no tables
    of logits), to show that the enumeration only calls the model."""

    def __init__(self, vocab_size: int = 3, dim: int = 2, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.embed = torch.nn.Parameter(torch.randn(vocab_size, dim, generator=g))
        self.head = torch.nn.Linear(dim, vocab_size)
        with torch.no_grad():
            self.head.weight.copy_(torch.randn(vocab_size, dim, generator=g))
            self.head.bias.copy_(torch.randn(vocab_size, generator=g))

    def forward(self, input_ids, attention_mask=None):
        e = self.embed[input_ids]
        n = torch.arange(1, input_ids.shape[1] + 1, dtype=e.dtype).view(1, -1, 1)
        return CausalLMOutput(logits=self.head(torch.tanh(e.cumsum(1) / n)))


def test_any_causal_lm_works():
    p = SequenceProblem(
        _MeanPoolLM(seed=1),
        _MeanPoolLM(seed=2),
        [[1, 2]],
        lambda q, o: float(o[0] == 1),
        max_completion_length=3,
        beta=0.2,
    )
    t = p.table
    for row in (0, 5, 12):
        o = t.completion_ids[row, : t.length[row]]
        assert t.logp[row] == pytest.approx(_loop_logp(p.model64, p.prompts[0], o), abs=1e-12)
    th, h = _theta(p), 1e-5
    fd = [(p.objective(th + h * e) - p.objective(th - h * e)) / (2 * h) for e in np.eye(len(th))]
    np.testing.assert_allclose(p.exact, fd, atol=1e-9)
    assert p.labels()[0] == "embed[0,0]" and p.labels()[-1] == "head.bias[2]"


def _z_max(estimates: np.ndarray, target: np.ndarray) -> tuple[float, float]:
    """maxᵢ |ḡᵢ − targetᵢ| / SEᵢ over components with spread, and the Bonferroni t* at 1e-3."""
    from statistics import NormalDist

    n = len(estimates)
    se = estimates.std(axis=0, ddof=1) / np.sqrt(n)
    ok = se > 0
    z = np.abs(estimates.mean(axis=0) - target)[ok] / se[ok]
    return float(z.max()), NormalDist().inv_cdf(1 - 1e-3 / (2 * ok.sum()))


@pytest.mark.parametrize(
    ("problem", "mistake", "n"),
    [
        ("kl", "kl-token-local", 1000),
        pytest.param("length", "length-normalised", 3000, marks=pytest.mark.slow),
        pytest.param("difficulty", "std-normalised", 3000, marks=pytest.mark.slow),
        pytest.param("kl", "kl-forward", 3000, marks=pytest.mark.slow),
    ],
)
def test_mistake_expectations_match_monte_carlo(problem, mistake, n):
    """Each named mistake's exact E[ĝ] against the mean of its estimator over n batches (from
    the exact score tables), and against ∇J, which it must be told from. A correct exact
    expectation fails the first z-test with probability ≤ 10⁻³ (Bonferroni)."""
    p = get_problem(problem)
    rng = np.random.default_rng(7)
    groups, G = len(p.prompts), p.group_size
    rows = np.stack([p.draw(groups, rng).rows for _ in range(n)])  # [n, N]
    t = p.table
    r = t.reward[rows].reshape(n, groups, G)
    if mistake == "std-normalised":
        a = grpo_advantage(r)
    else:
        a = rloo_advantage(r)
    a = a.reshape(n, -1)
    if mistake == "length-normalised":
        est = np.einsum("sn,snp->sp", a / t.length[rows], p.scores[rows])
    elif mistake == "std-normalised":
        est = np.einsum("sn,snp->sp", a, p.scores[rows])
    else:
        d = (t.token_logp - t.ref_token_logp)[rows]
        kl = 1 - np.exp(-d) if mistake == "kl-forward" else d
        w = a[:, :, None] - p.beta * kl * t.mask[rows]
        est = np.einsum("snt,sntp->sp", w, p.token_scores[rows])
    est /= rows.shape[1]
    z, t_star = _z_max(est, p.mistakes[mistake])
    assert z < t_star, (z, t_star)
    z_exact, _ = _z_max(est, p.exact)
    assert z_exact > t_star, z_exact


def test_group_expectation_refuses_too_many_outcomes():
    p = _small(beta=0.0)
    with pytest.raises(ValueError, match="group_size"):
        p.expected_group_gradient(rloo_advantage, group_size=200_000)
