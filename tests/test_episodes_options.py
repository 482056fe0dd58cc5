"""Episodes take every option single completions take, each held exact on the lab's two-turn
problem (E over every group of G = 2 episodes, enumerated, of the update's −∇loss, against an
expectation we did not compute with the loss: ∇J by autograd through the enumeration, or a
plain loop's derived value):

* top-k/top-p/min-p/repetition penalty: the episodes played through the sampler (kept cache or
  contexts whole) record their kept sets, which the scorer reproduces; the update's expectation
  is ∇J̃ of the sampled policy π̃ (the lab's kept sets found by its own loop);
* ``--importance-sampling``: the full policy's log-probs weighted by w̃ of π/q over the model's
  tokens; the exact weight is ∇J of the full policy where q has full support, and every mode
  and cap its derived value;
* K > 1: a further step on episodes drawn at θ_old has expectation ∇J(θ) (the sequence ratio);
  at θ = θ_old it is the first step's, for every KL row;
* the command line runs each (slow)."""

from __future__ import annotations

import csv
import functools
import itertools
import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _episode_loss import loss, reuse_loss  # noqa: E402
from eligibility.check.episodes import enumerated  # noqa: E402
from eligibility.cli import main  # noqa: E402
from eligibility.lab.sequence.episodes import TwoTurnProblem  # noqa: E402
from eligibility.lm.edge.model import TinyLM  # noqa: E402
from eligibility.lm.episodes.episode_rollout import play  # noqa: E402
from eligibility.lm.sample import token_logps, truncated_token_logps  # noqa: E402
from eligibility.lm.tasks import make_task  # noqa: E402
from eligibility.lm.truncation import Sampling, seen_tokens, step  # noqa: E402
from eligibility.torch import options  # noqa: E402

G = 2
RLOO = dict(options.DEFAULTS, kl="none", baseline="rloo", aggregation="sequence-sum")


def _groups(problem: TwoTurnProblem, support_only: bool = True):
    """Every ordered pair of a prompt's episodes as one batch of groups of G = 2; each pair's
    P(group)/Q; each row's episode (the enumeration's index)."""
    batch, prompt_of, p = enumerated(problem)
    p = torch.from_numpy(p)
    pairs = []
    for q in range(len(problem.prompts)):
        rows = [i for i in np.flatnonzero(prompt_of == q) if not support_only or p[i] > 0]
        pairs += list(itertools.product(rows, repeat=2))
    index = torch.tensor(pairs).reshape(-1)
    weight = p[index[0::2]] * p[index[1::2]] / len(problem.prompts)
    return batch.select(index), weight, index


def _kept_sizes(model, groups, s: Sampling) -> torch.Tensor:
    """[N, T] mₜ = |Kₜ| the sampler's own step records at each model token (0 elsewhere)."""
    ids = torch.cat([groups.prompt_ids, groups.completion_ids], dim=1)
    p = groups.prompt_ids.shape[1]
    with torch.no_grad():
        z = model(ids).logits
    sizes = torch.zeros_like(groups.completion_ids)
    for t in range(groups.completion_ids.shape[1]):
        seen = seen_tokens(ids[:, : p + t], torch.ones_like(ids[:, : p + t]), z.shape[-1])
        sizes[:, t] = step(z[:, p + t - 1], seen, 1.0, s)[1]
    return sizes * groups.completion_mask


def _expected(problem, groups, weight, logps, value) -> np.ndarray:
    """E[−∇loss]: the batch's loss is the mean of its n groups' (a row-separable loss, the
    sequence-sum's 1/N): each group's gradient is n × its share, weighted by P(group)/Q."""
    params = list(problem._at(None).parameters())
    (d,) = torch.autograd.grad(value, logps, retain_graph=True)
    d = d * (len(weight) * weight).repeat_interleave(G)[:, None]
    grads = torch.autograd.grad(logps, params, grad_outputs=-d, retain_graph=True)
    return torch.cat([g.reshape(-1) for g in grads]).numpy()


def _loss(logps, groups, t_max, **kw):
    kw = {**RLOO, "beta": 0.0, "ref_logps": None, **kw}
    return loss(logps, groups.turn_rewards, groups.completion_mask, groups.turn,
                weighting="reward-to-go", group_size=G, max_completion_length=t_max,
                **kw)[0]  # fmt: skip


# -- the truncated sampler --

SETTINGS = [dict(top_k=2, repetition_penalty=1.5), dict(top_p=0.7), dict(min_p=0.6)]


@pytest.mark.parametrize("setting", SETTINGS, ids=str)
def test_the_truncated_update_on_episodes_is_grad_j_of_the_sampled_policy(setting):
    """E over groups drawn from π̃ of the update scored on the sampler's kept sets (recorded by
    the sampler's step, the lab's sizes) is ∇J̃ to 1e-10; scored by the full π_τ it is not."""
    problem = TwoTurnProblem(seed=1, max_reply_length=1, **setting)
    _, grad_j = problem.objective()
    groups, weight, index = _groups(problem)
    model, s = problem._at(None), Sampling(**setting)
    groups.kept_sizes = _kept_sizes(model, groups, s)
    lab = torch.cat([problem.token_logps(q)[1] for q in range(len(problem.prompts))])
    assert torch.equal(groups.kept_sizes, lab[index][:, : groups.kept_sizes.shape[1]])
    assert (groups.kept_sizes[groups.completion_mask.bool()] < problem.vocab_size).any()
    t_max = 2 * problem.max_reply_length
    logps = truncated_token_logps(model, groups, vocab_size=3, temperature=1.0, sampling=s).logps
    got = _expected(problem, groups, weight, logps, _loss(logps, groups, t_max))
    np.testing.assert_allclose(got, grad_j, rtol=0, atol=1e-10)
    full = token_logps(model, groups, vocab_size=3)  # the full π_τ on π̃'s episodes: biased
    biased = _expected(problem, groups, weight, full, _loss(full, groups, t_max))
    assert np.abs(biased - grad_j).max() > 1e-3


@pytest.mark.parametrize("cache", [True, False])
def test_truncated_episodes_record_the_kept_sets_their_scorer_reproduces(cache):
    """``play`` with top-p and a repetition penalty (the kept cache, or each turn's contexts
    whole): the same episodes and generator either way; on the model's tokens the scorer's
    ln π̃ on the recorded kept sets is the sampler's, no token outside them, and ln π_τ before
    the processing is the full scorer's; the world's tokens carry no kept set."""
    task = make_task("guess")
    torch.manual_seed(0)
    model = TinyLM(task.vocab_size, 8, 1, 2, 32)
    s = Sampling(top_p=0.8, repetition_penalty=1.3)
    runs = []
    for c in (cache, not cache):
        rng = np.random.default_rng(5)
        batch = play(model, task, [0, 1, 2, 3, 4] * 2, t_max=2, temperature=1.2, rng=rng,
                     sampling=s, cache=c)  # fmt: skip
        runs.append((batch, rng.random()))
    (batch, u), (other, w) = runs
    assert torch.equal(batch.completion_ids, other.completion_ids) and u == w
    torch.testing.assert_close(batch.logps, other.logps, rtol=0, atol=1e-5)
    m = batch.completion_mask.bool()
    assert (batch.kept_sizes[m] >= 1).all() and (batch.kept_sizes[~m] == 0).all()
    assert (batch.kept_sizes[m] < task.vocab_size).any()  # the processing cut something
    assert (batch.turns > 1).any()  # the world answered: later turns were played
    with torch.no_grad():
        scored = truncated_token_logps(model, batch, vocab_size=task.vocab_size,
                                       temperature=1.2, sampling=s)  # fmt: skip
        full = token_logps(model, batch, vocab_size=task.vocab_size, temperature=1.2)
    torch.testing.assert_close(scored.logps[m], batch.logps[m], rtol=0, atol=1e-5)
    assert not scored.outside[m].any()
    torch.testing.assert_close(full[m], batch.raw_logps[m], rtol=0, atol=1e-5)


# -- importance sampling --

WEIGHTED = ("token-truncate", "token-mask", "sequence-truncate", "sequence-mask")


def _sampler_logps(problem, index, width) -> torch.Tensor:
    """[N, T] ln q of each model token (the lab's processed policy), 0 on the world's."""
    with torch.no_grad():
        lq = torch.cat([problem.token_logps(q)[0] for q in range(len(problem.prompts))])
    return lq[index][:, :width]


def test_the_exact_weight_on_episodes_is_grad_j_of_the_full_policy():
    """A penalised sampler q (full support): E_q of the full policy's update weighted by
    π(e)/q(e) over the model's tokens (``sequence-truncate``, C = inf; the world's factors
    cancel) is ∇J of the full policy to 1e-10; unweighted it is not."""
    q_problem = TwoTurnProblem(seed=1, max_reply_length=1, repetition_penalty=1.5)
    _, grad_j = TwoTurnProblem(seed=1, max_reply_length=1).objective()  # the same θ, full π
    groups, weight, index = _groups(q_problem)
    assert len(index) == 2 * 2 * 18**2  # q's support is every episode
    model = q_problem._at(None)
    logps = token_logps(model, groups, vocab_size=3)
    lq = _sampler_logps(q_problem, index, logps.shape[1])
    t_max = 2 * q_problem.max_reply_length
    value = _loss(logps, groups, t_max, importance_sampling="sequence-truncate",
                  importance_sampling_cap=math.inf, sampler_logps=lq)  # fmt: skip
    np.testing.assert_allclose(_expected(q_problem, groups, weight, logps, value), grad_j,
                               rtol=0, atol=1e-10)  # fmt: skip
    plain = _expected(q_problem, groups, weight, logps, _loss(logps, groups, t_max))
    assert np.abs(plain - grad_j).max() > 1e-3


def test_each_modes_expected_update_on_episodes_is_its_derived_value():
    """q: top-k 2 with a repetition penalty. For every mode and a cap that bites, E_q[−∇loss] =
    Σ_e Σ_{t model} q(e)/Q · w̃ₜ(e) · (G_k(e) − E_q[G_k]) ∇ℓₜ (RLOO of G = 2, reward-to-go),
    the weights and coefficients by a plain loop over the lab's per-token log-probs."""
    setting = dict(top_k=2, repetition_penalty=1.5)
    q_problem = TwoTurnProblem(seed=1, max_reply_length=1, **setting)
    groups, weight, index = _groups(q_problem)
    model = q_problem._at(None)
    logps = token_logps(model, groups, vocab_size=3)
    lq = _sampler_logps(q_problem, index, logps.shape[1])
    t_max = 2 * q_problem.max_reply_length
    # the plain loop: per episode e of q's support, q(e), its model tokens' ℓ (the lab's, with
    # their graph), ln π/q per token (floats), each token's turn k, and its returns G_k
    episodes = []
    for qi in range(len(q_problem.prompts)):
        full, _ = q_problem.token_logps(qi, processed=False)
        sampled, _ = q_problem.token_logps(qi)
        rows, probs = q_problem.episodes(qi), q_problem.probabilities(qi).tolist()
        for e, (row, p) in enumerate(zip(rows, probs, strict=True)):
            if p == 0:
                continue
            mine = [t for t, m in enumerate(row.model) if m]
            log_w = [float((full[e, t] - sampled[e, t]).detach()) for t in mine]
            returns = (row.rewards[0] + row.rewards[1], row.rewards[1])
            episodes.append((qi, p, [full[e, t] for t in mine], log_w,
                             [row.turn[t] for t in mine], returns))  # fmt: skip
    mean_g = {(qi, k): sum(p * g[k] for q2, p, *_, g in episodes if q2 == qi)
              for qi in range(2) for k in range(2)}  # fmt: skip

    def derived(mode, cap):
        total = torch.zeros((), dtype=torch.float64)
        for qi, p, ells, log_w, turns, g in episodes:
            for ell, lw, k in zip(ells, log_w, turns, strict=True):
                x = math.exp(lw if mode.startswith("token") else sum(log_w))
                x = min(x, cap) if mode.endswith("truncate") else (x if x <= cap else 0.0)
                total = total + p / 2 * x * (g[k] - mean_g[qi, k]) * ell
        grads = torch.autograd.grad(total, list(model.parameters()), retain_graph=True)
        return torch.cat([x.reshape(-1) for x in grads]).numpy()

    token = [math.exp(lw) for _, _, _, log_w, _, _ in episodes for lw in log_w]
    sequence = [math.exp(sum(log_w)) for _, _, _, log_w, _, _ in episodes]
    caps = {"token": (min(token) + max(token)) / 2, "sequence": (min(sequence) + max(sequence)) / 2}
    seen = {}
    for mode in WEIGHTED:
        cap = caps[mode.split("-")[0]]
        value = _loss(logps, groups, t_max, importance_sampling=mode,
                      importance_sampling_cap=cap, sampler_logps=lq)  # fmt: skip
        got = _expected(q_problem, groups, weight, logps, value)
        np.testing.assert_allclose(got, derived(mode, cap), rtol=0, atol=1e-10, err_msg=mode)
        seen[mode] = got
    for level in ("token", "sequence"):  # the cap bites: truncating and masking differ
        assert np.abs(seen[f"{level}-truncate"] - seen[f"{level}-mask"]).max() > 1e-6


# -- K > 1: a further step on the same episodes --


def test_a_further_step_on_episodes_drawn_at_theta_old_is_grad_j_at_theta():
    """Episodes drawn at θ_old, the update at θ ≠ θ_old (the sequence ratio π_θ(e)/π_old(e) over
    the model's tokens, no clip): E_{π_old}[−∇loss] = ∇J(θ) to 1e-10; with PPO's clip it is
    not."""
    problem = TwoTurnProblem(seed=1, max_reply_length=1)
    groups, weight, _ = _groups(problem)
    with torch.no_grad():
        old = token_logps(problem._at(None), groups, vocab_size=3)
        g = torch.Generator().manual_seed(0)
        for p in problem.model.parameters():  # θ: a step away from θ_old
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    _, grad_j = problem.objective()
    logps = token_logps(problem._at(None), groups, vocab_size=3)
    t_max = 2 * problem.max_reply_length

    def further(clip):
        value, diag = reuse_loss(logps, old, groups.turn_rewards, groups.completion_mask,
                                 groups.turn, weighting="reward-to-go", group_size=G,
                                 max_completion_length=t_max, beta=0.0, ref_logps=None,
                                 ratio="sequence", clip=clip, **{**RLOO, "kl": "none"})  # fmt: skip
        return _expected(problem, groups, weight, logps, value), diag

    got, diag = further(None)
    np.testing.assert_allclose(got, grad_j, rtol=0, atol=1e-10)
    assert diag["ratio/min"] < 1 < diag["ratio/max"]
    clipped, diag = further(0.2)
    assert np.abs(clipped - grad_j).max() > 1e-3 and diag["clip_ratio/region_mean"] > 0


@functools.cache
def _every_seventh_episode():
    """The two-turn problem (β = 0.2) and 24 of its enumerated episodes, with their reference
    log-probs: built once for the KL rows, which only read them (enumerating the episodes was
    two thirds of each row's time)."""
    problem = TwoTurnProblem(seed=1, beta=0.2)
    batch, _, _ = enumerated(problem)
    rows = batch.select(torch.arange(0, 196, 7)[:24])
    ref = token_logps(problem._ref64, rows, vocab_size=3).detach()
    return problem, rows, ref


@pytest.mark.parametrize("kl", options.names("kl"))
def test_a_further_step_at_theta_old_is_the_first_steps_update_on_episodes(kl):
    """At θ = θ_old every ratio is 1: the further step's gradient is the first step's, for
    every KL row (its placement per turn or per token), with a weight of π_old/q."""
    problem, rows, ref = _every_seventh_episode()
    logps = token_logps(problem._at(None), rows, vocab_size=3)
    lq = logps.detach() + 0.2 * torch.randn(logps.shape, generator=torch.Generator().manual_seed(1),
                                            dtype=logps.dtype)  # fmt: skip
    kw = dict(weighting="reward-to-go", group_size=4, max_completion_length=4, beta=0.2,
              ref_logps=ref, **{**RLOO, "kl": kl}, importance_sampling="token-truncate",
              importance_sampling_cap=1.1, sampler_logps=lq)  # fmt: skip
    args = (rows.turn_rewards, rows.completion_mask, rows.turn)
    first = loss(logps, *args, **kw)[0]
    again = reuse_loss(logps, logps.detach(), *args, **kw)[0]
    want, got = (torch.autograd.grad(v, logps, retain_graph=True)[0] for v in (first, again))
    assert float(want.abs().max()) > 1e-3
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)


# -- the command line --

TINY = ["--d-model", "8", "--n-head", "2", "--n-layer", "1", "--group-size", "2",
        "--prompts-per-batch", "2", "--eval-every", "0", "--no-progress"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flags", "filled"),
    [
        (["--top-p", "0.9"], "sampling/outside_kept"),
        (["--top-k", "4", "--importance-sampling", "sequence-truncate"], "sampling/ratio/mean"),
        (["--epochs-per-batch", "2"], "ratio/mean"),
        (["--fsdp"], None),  # one process: a note, as single completions
    ],
    ids=["top-p", "importance-sampling", "k2", "fsdp-one-process"],
)
def test_finetune_guess_takes_each_option_from_the_command_line(tmp_path, capsys, flags, filled):
    out = tmp_path / "run"
    code = main(["finetune", "guess", *TINY, "--max-updates", "2", *flags, "--out", str(out)])
    err = capsys.readouterr().err
    assert code in (0, 1), err
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert len(rows) == 2 and all(float(r["turns"]) >= 1 for r in rows)
    if filled is not None:
        assert all(r[filled] != "" for r in rows), filled
    if flags == ["--fsdp"]:
        assert json.loads((out / "config.json").read_text())["fsdp"] is True
        assert "--fsdp shards over the ranks torchrun starts" in err


def test_the_scorers_seen_tokens_skip_a_worlds_token_past_the_vocabulary():
    """A repetition penalty's seen set: a token id ≥ V after the prompt (a world's token beyond
    the task's vocabulary) marks no logit in the scorer's set, as the sampler's skips it."""
    from eligibility.lm.truncation import seen_before

    ids = torch.tensor([[2, 7, 1, 9]])  # V = 4: 7 and 9 are past it
    got = seen_before(torch.zeros(1, 4, dtype=torch.bool), ids, 4)
    loop = [[u in ids[0, :t].tolist() for u in range(4)] for t in range(4)]
    assert got[0].tolist() == loop
    every = seen_tokens(ids, torch.ones_like(ids), 4)
    assert got[0, -1].tolist() == every[0].tolist() == [False, True, True, False]
