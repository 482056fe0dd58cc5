"""A tied group drawn again at τ′ (``lm.tied``): the trigger, the estimator's mean, the run.

The mean is held against the exact gradient of a tabular policy over every sequence of two
tokens (J enumerated, ∇J by autograd), the estimator's expectation taken exactly over every
group of draws, so no Monte Carlo tolerance is involved.
"""

from __future__ import annotations

import csv
import itertools

import pytest
import torch

from eligibility.lm import FinetuneConfig, finetune, tied
from eligibility.lm.metrics import SCHEMA
from eligibility.lm.objective import LossSettings, loss

V, G, TAU_Q = 2, 2, 2.0
SEQS = list(itertools.product(range(V), repeat=2))  # every completion of two tokens
R = torch.tensor([0.4, 1.0, 0.0, 0.4], dtype=torch.float64)
SETTINGS = LossSettings(
    group_size=G,
    baseline="rloo",
    scale="none",
    aggregation="sequence-sum",
    max_completion_length=2,
    kl="none",
    beta=0.0,
    ref_logps=None,
)


def _theta() -> torch.Tensor:
    """Logits z[t, previous token, v] of a policy near-saturated on one sequence (0, 0)."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(2, V, V, generator=g, dtype=torch.float64)
    z[0, :, 0] += 3.0
    z[1, 0, 0] += 3.0
    return z.requires_grad_(True)


def _logps(z: torch.Tensor, rows: list[tuple[int, int]], tau: float = 1.0) -> torch.Tensor:
    """[N, 2] ln π_τ of each row's tokens (the first token's context is token 0)."""
    lp = torch.log_softmax(z / tau, dim=-1)
    return torch.stack([torch.stack([lp[0, 0, a], lp[1, a, b]]) for a, b in rows])


def _grad(value: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    return torch.autograd.grad(value, z)[0]


def _exact() -> tuple[torch.Tensor, torch.Tensor]:
    """∇J by autograd of J = Σₒ π(o) R(o), and π of each sequence."""
    z = _theta()
    pi = _logps(z, SEQS).sum(1).exp()
    return _grad((pi * R).sum(), z), pi.detach()


def test_a_group_ties_where_every_reward_is_the_same():
    r = torch.tensor([0.4, 0.4, 0.4, 0.333, 1.0, 1.0, 0.0, 0.0])
    assert tied.tied_groups(r, 2).tolist() == [True, False, True, True]
    assert tied.tied_groups(r, 4).tolist() == [False, False]


def test_the_hot_draws_term_is_unbiased_for_the_gradient():
    """E_q[−∇ tied_loss] = ∇J exactly, q = π_{τ′}: every group of G draws from q enumerated."""
    exact, _ = _exact()
    z = _theta()
    q = _logps(z, SEQS, TAU_Q).sum(1).exp().detach()
    expected = torch.zeros((), dtype=torch.float64)  # Σ_groups q(group) · its loss
    for group in itertools.product(range(len(SEQS)), repeat=G):
        rows = [SEQS[i] for i in group]
        ell, ell_q = _logps(z, rows), _logps(z, rows, TAU_Q).detach()
        value = tied.tied_loss(ell, ell_q, R[list(group)], torch.ones(G, 2), SETTINGS, rows=G)
        expected = expected + q[list(group)].prod() * value
    torch.testing.assert_close(-_grad(expected, z), exact, rtol=1e-9, atol=1e-12)


def test_the_triggered_estimator_weighs_each_prompt_by_one_plus_its_chance_to_tie():
    """On-policy groups, the hot draws' term added where one ties: E[ĝ] = (1 + P(tie)) ∇J."""
    exact, pi = _exact()
    z = _theta()
    mean, p_tie = torch.zeros_like(exact), 0.0
    for group in itertools.product(range(len(SEQS)), repeat=G):
        p = float(pi[list(group)].prod())
        r = R[list(group)]
        if bool(tied.tied_groups(r, G)[0]):
            p_tie += p
            mean += p * exact  # E_q of the hot term (the test above)
        else:
            value, _ = loss(_logps(z, [SEQS[i] for i in group]), r, torch.ones(G, 2), SETTINGS)
            mean += p * -_grad(value, z)
    assert 0.5 < p_tie < 0.95  # both branches weigh in
    torch.testing.assert_close(mean, (1 + p_tie) * exact, rtol=1e-9, atol=1e-12)


def test_the_hot_term_is_the_plain_loop_sum():
    """(1/N) Σⱼ wⱼ (Rⱼ − b₋ⱼ) Σₜ ℓⱼ,ₜ, written as a loop, N the update's rows."""
    z = _theta()
    rows = [SEQS[i] for i in (0, 1, 2, 3)]  # two groups of G = 2
    ell, ell_q = _logps(z, rows), _logps(z, rows, TAU_Q).detach()
    r = R[[0, 1, 2, 3]]
    value = tied.tied_loss(ell, ell_q, r, torch.ones(4, 2), SETTINGS, rows=10)
    plain = 0.0
    for j in range(4):
        mate = j + 1 if j % 2 == 0 else j - 1  # the other of its group of two
        w = float((ell[j].sum() - ell_q[j].sum()).exp().detach())
        plain = plain - w * float(r[j] - r[mate]) * ell[j].sum() / 10
    torch.testing.assert_close(value, plain, rtol=1e-12, atol=1e-15)


TINY = dict(
    task="reverse",
    max_updates=4,
    d_model=16,
    n_head=2,
    n_layer=1,
    group_size=4,
    prompts_per_batch=4,
    eval_every=2,
    checkpoint_every=2,
    target_accuracy=None,
    progress=False,
)


def _rows(path):
    with open(path / "metrics.csv", newline="") as f:
        return [{k: v for k, v in r.items() if k not in SCHEMA.timing} for r in csv.DictReader(f)]


@pytest.mark.slow
def test_a_run_draws_its_tied_groups_again_and_resumes_exactly(tmp_path, monkeypatch):
    drawn = []
    draw = tied.draw

    def counted(run, prompts, rewards):
        out = draw(run, prompts, rewards)
        drawn.append(0 if out is None else out.groups)
        return out

    monkeypatch.setattr(tied, "draw", counted)
    whole = finetune(FinetuneConfig(**TINY, out=str(tmp_path / "whole")))
    assert FinetuneConfig(**TINY).tied_temperature == 2.0  # the tiny model's default
    assert sum(drawn) > 0  # some group tied and was drawn again
    cut = FinetuneConfig(**TINY, out=str(tmp_path / "cut"))
    finetune(cut, callback=lambda row: row["update"] < 3)
    finetune(FinetuneConfig(**TINY), resume=tmp_path / "cut")
    assert _rows(tmp_path / "cut") == _rows(tmp_path / "whole")
    off = finetune(FinetuneConfig(**TINY, tied_temperature=0))
    assert [r["loss"] for r in off.history] != [r["loss"] for r in whole.history]


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (dict(tied_temperature=0.5), "> --temperature"),
        (dict(tied_temperature=1.0), "> --temperature"),
        (dict(tied_temperature=-1.0), "> --temperature"),
    ],
)
def test_a_tied_temperature_not_above_tau_is_refused(given, says):
    with pytest.raises(ValueError, match="tied_temperature") as err:
        FinetuneConfig("reverse", **given)
    assert says in str(err.value)


def test_tied_draws_where_they_cannot_run_are_refused_or_left_out():
    """Beside a sampler process, on several ranks or on a task of turns: a τ′ given is refused,
    the model's default resolves to 0."""
    given = FinetuneConfig("reverse", max_staleness=1, tied_temperature=2.0)
    with pytest.raises(ValueError, match="--max-staleness"):
        tied.resolved(given, episodes=False, world=1)
    with pytest.raises(ValueError, match="several ranks"):
        tied.resolved(FinetuneConfig("reverse", tied_temperature=3.0), episodes=False, world=2)
    with pytest.raises(ValueError, match="a task of turns"):
        tied.resolved(FinetuneConfig("guess", tied_temperature=3.0), episodes=True, world=1)
    left = FinetuneConfig("guess")
    assert left.tied_temperature == 2.0 and "tied_temperature" in left.defaulted
    assert tied.resolved(left, episodes=True, world=1).tied_temperature == 0.0
    assert tied.resolved(left, episodes=False, world=1) is left
