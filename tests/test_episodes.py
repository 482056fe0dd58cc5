"""Episodes of several turns: only the model's tokens scored, and finetune's update on the exact
two-turn problem held to ∇J in float64 (its expectation over every group of episodes,
enumerated, against J's gradient by autograd through the enumeration)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _episode_loss import loss  # noqa: E402
from eligibility.check.episodes import enumerated  # noqa: E402
from eligibility.lab.sequence.episodes import TwoTurnProblem  # noqa: E402
from eligibility.lm.credit import packed, returns  # noqa: E402
from eligibility.lm.episodes import Episode, Episodes, batch_of  # noqa: E402
from eligibility.lm.sample import token_logps  # noqa: E402
from eligibility.torch import options  # noqa: E402

G = 2


def as_batch(problem: TwoTurnProblem) -> tuple[Episodes, list[int], torch.Tensor]:
    """Every episode of every prompt as one batch; each row's prompt; π(e | q) (float64)."""
    batch, prompt_of, probs = enumerated(problem)
    return batch, prompt_of.tolist(), torch.from_numpy(probs)


@functools.cache
def two_turns(beta: float) -> tuple[TwoTurnProblem, np.ndarray]:
    """The two-turn problem (seed 1) and its ∇J, made once a worker for every test of it."""
    problem = TwoTurnProblem(beta=beta, seed=1)
    return problem, problem.objective()[1]


@functools.cache
def _pairs(problem: TwoTurnProblem, mask: torch.Tensor | None = None) -> tuple:
    """Every ordered pair of a prompt's episodes as one batch of groups, with P(group)/Q, the
    log-probs (a graph to θ, kept) and the reference's: what every choice checked on
    ``problem`` has in common, computed once (the forward passes were most of these tests).

    Each episode's log-probs are computed once and gathered into the pairs (an episode is in
    as many pairs as its prompt has episodes, twice over): the backward pass of the gather
    adds up each episode's share of the pairs' gradient before the model's, which then runs
    on the episodes, not the pairs."""
    batch, prompt_of, p = as_batch(problem)
    t_max = 2 * problem.max_reply_length  # the most model tokens of an episode
    if mask is not None:
        batch.completion_mask, t_max = mask, mask.shape[1]
    prompt_of = torch.tensor(prompt_of)
    rows = [(prompt_of == q).nonzero()[:, 0].tolist() for q in range(len(problem.prompts))]
    pairs = [(i, j) for of_q in rows for i in of_q for j in of_q]
    index = torch.tensor(pairs).reshape(-1)
    groups = batch.select(index)
    weight = p[index[0::2]] * p[index[1::2]] / len(problem.prompts)  # P(group) / Q
    model = problem._at(None)
    params = list(model.parameters())
    logps = token_logps(model, batch, vocab_size=problem.vocab_size)[index]
    assert logps.dtype == torch.float64 and logps.shape == groups.completion_mask.shape
    ref = token_logps(problem._ref64, batch, vocab_size=problem.vocab_size).detach()[index]
    return groups, weight, len(pairs), t_max, params, logps, ref


def expected_update(
    problem: TwoTurnProblem,
    choice: dict[str, str],
    weighting: str,
    mask: torch.Tensor | None = None,
) -> np.ndarray:
    """E[−∇loss] over batches of one prompt and G = 2 episodes, exact: every ordered pair of a
    prompt's episodes is a group of one batch, and the loss's gradient with respect to the
    log-probs, weighted by the pair's probability, is carried to θ by autograd. ``mask``: a
    wrong one in place of the model's tokens."""
    groups, weight, n, t_max, params, logps, ref = _pairs(problem, mask)
    value, _ = loss(logps, groups.turn_rewards, groups.completion_mask, groups.turn,
                    weighting=weighting, group_size=G, max_completion_length=t_max,
                    beta=problem.beta, ref_logps=ref, **choice)  # fmt: skip
    (d,) = torch.autograd.grad(value, logps, retain_graph=True)
    # the batch's loss is the mean of its groups' losses: its gradient is each group's / n
    d = d * (n * weight).repeat_interleave(G)[:, None]
    grads = torch.autograd.grad(logps, params, grad_outputs=-d, retain_graph=True)
    return torch.cat([g.reshape(-1) for g in grads]).numpy()


def test_only_the_models_tokens_are_scored():
    """The mask is the model's tokens: o⁽¹⁾ and o⁽²⁾, not the header nor the observation nor
    padding; the loss's gradient with respect to the world's log-probs is 0 and the model's
    tokens after the world's answer get one."""
    ep = Episode((1,))
    ep.act([1, 0], [-0.1, -0.2], ended=True)
    ep.answer([0, 2])  # the world: a header and an observation
    ep.act([2, 0], [-0.3, -0.4], ended=True)
    ep.reward(1.0)
    other = Episode((1,))
    other.act([2], [-0.5], ended=False)
    batch = batch_of([ep, other], eos_id=0, max_turns=2)
    assert batch.completion_mask.tolist() == [[1, 1, 0, 0, 1, 1], [1, 0, 0, 0, 0, 0]]
    assert batch.turn.tolist() == [[0, 0, 0, 0, 1, 1], [0, -1, -1, -1, -1, -1]]
    assert batch.lengths.tolist() == [4, 1]  # "length": the model's tokens
    logps = torch.full((2, 6), -0.7, dtype=torch.float64, requires_grad=True)
    value, _ = loss(logps, batch.turn_rewards, batch.completion_mask, batch.turn,
                    weighting="reward-to-go", group_size=2, max_completion_length=4,
                    beta=0.1, ref_logps=torch.full((2, 6), -0.5, dtype=torch.float64),
                    **options.DEFAULTS)  # fmt: skip
    (d,) = torch.autograd.grad(value, logps)
    scored = d != 0
    assert scored.tolist() == [[True, True, False, False, True, True],
                               [True, False, False, False, False, False]]  # fmt: skip


def test_returns_and_packing():
    """Gₖ = Σ_{j≥k} rⱼ (a plain loop) or the whole return; packing keeps the model's order."""
    r = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, 0.0]])
    loop = [[sum(row[k:]) for k in range(3)] for row in r.tolist()]
    assert returns(r, "reward-to-go").tolist() == loop
    assert returns(r, "outcome").tolist() == [[-0.5] * 3, [3.0] * 3]
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
    m = torch.tensor([[0, 1, 0, 1], [1, 1, 1, 0]])
    xp, mp = packed(x, m)
    assert xp[mp].tolist() == [2.0, 4.0, 5.0, 6.0, 7.0]
    assert mp.tolist() == [[True, True, False], [True, True, True]]
    with pytest.raises(ValueError, match="weighting"):
        returns(r, "whole")


@pytest.mark.parametrize(
    ("weighting", "kind", "name", "beta"),
    [
        ("reward-to-go", "kl", "reward-to-go", 0.3),  # the defaults, with a KL
        ("outcome", "kl", "reward-to-go", 0.3),
        ("reward-to-go", "kl", "sequence-reward", 0.3),
        ("reward-to-go", "aggregation", "sequence-mean", 0.0),
        ("reward-to-go", "baseline", "mean", 0.0),
    ],
)
def test_finetunes_update_on_episodes_is_grad_j_exactly(weighting, kind, name, beta):
    """E[ĝ] = ∇J to 1e-10 (float64) on the two-turn problem, per-turn rewards, G = 2: the
    unbiased rows (the group mean at its step size (G − 1)/G); the per-sequence mean of token
    means is biased (its length reweighting) and the test sees it, so it can fail."""
    problem, grad_j = two_turns(beta)
    got = expected_update(problem, {**options.DEFAULTS, kind: name}, weighting)
    if name == "sequence-mean":
        assert np.abs(got - grad_j).max() > 1e-3
    elif name == "mean":  # the group mean: a step size (G − 1)/G
        np.testing.assert_allclose(got, (G - 1) / G * grad_j, rtol=0, atol=1e-10)
    else:
        np.testing.assert_allclose(got, grad_j, rtol=0, atol=1e-10)


def test_the_mask_bugs_move_the_update_off_grad_j():
    """Scoring the world's tokens too, or dropping the model's after the world's answer, gives
    another expectation: the exact comparison above can tell a wrong mask."""
    problem, grad_j = two_turns(0.0)
    batch, _, _ = as_batch(problem)
    world_too = batch.turn >= 0
    first_only = (batch.turn == 0) & batch.completion_mask.bool()
    for wrong in (world_too, first_only):
        got = expected_update(problem, dict(options.DEFAULTS), "reward-to-go", wrong.long())
        assert np.abs(got - grad_j).max() > 1e-3
