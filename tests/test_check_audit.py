"""The credit audit: each token's weight ∂L/∂ℓ read from one backward pass, held against the
exact credit, and the mistakes it locates (src/eligibility/check/audit/).

The weights are held against autograd (a loss built from known weights gives them back), the
credit's definitions against plain loops, and each finding against a loss written with that
one mistake, on batches of the exact two-turn problem and the sequence problems.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from eligibility.check import user
from eligibility.check.audit import Recorder, audit
from eligibility.check.audit.credit import leave_one_out, reward_to_go
from eligibility.check.audit.names import Finding
from eligibility.check.audit.tap import Tap, entry_read
from eligibility.check.episodes import EpisodesProblem, _batch, _rows, wide_ended
from eligibility.check.sequence import batch_of, named_scales

# -- the weights, against autograd -------------------------------------------------------------


def _logits_and_ids(seed=0, n=3, L=5, V=4):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, L, V, generator=g, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(0, V, (n, L), generator=g)
    return z, ids


@pytest.mark.parametrize("tau", [1.0, 0.7])
def test_the_weights_read_from_the_logits_are_the_losss_own(tau):
    z, ids = _logits_and_ids()
    nxt = ids[:, 1:]
    w = torch.randn(nxt.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ell = torch.log_softmax(z[:, :-1] / tau, -1).gather(-1, nxt[..., None])[..., 0]
    (g,) = torch.autograd.grad((w * ell).sum(), z)
    next_ids = torch.cat([nxt, torch.full((3, 1), -1)], 1).numpy()
    got, entry, rho = entry_read(g.numpy(), z.detach().numpy(), next_ids, tau)
    np.testing.assert_allclose(got[:, :-1], w.numpy(), rtol=1e-9, atol=1e-12)
    assert (entry[:, :-1] == nxt.numpy()).all() and (rho[:, :-1] < 1e-6).all()
    assert (got[:, -1] == 0).all()  # the last position scores nothing


def test_a_read_of_the_tokens_own_position_and_an_entropy_are_told():
    z, ids = _logits_and_ids(seed=2)
    own = torch.log_softmax(z[:, :-1], -1).gather(-1, ids[:, :-1, None])[..., 0]
    (g,) = torch.autograd.grad(own.sum(), z)
    next_ids = torch.cat([ids[:, 1:], torch.full((3, 1), -1)], 1).numpy()
    _, entry, _ = entry_read(g.numpy(), z.detach().numpy(), next_ids)
    differs = ids[:, :-1] != ids[:, 1:]
    assert (entry[:, :-1][differs.numpy()] == ids[:, :-1][differs].numpy()).all()
    p = torch.softmax(z, -1)
    entropy = -(p * torch.log(p)).sum()
    (g,) = torch.autograd.grad(entropy, z)
    _, entry, _ = entry_read(g.numpy(), z.detach().numpy(), next_ids)
    assert (entry == -1).all()


# -- the credit, against plain loops ------------------------------------------------------------


def test_the_credit_is_its_definition_in_a_plain_loop():
    rng = np.random.default_rng(0)
    r = rng.normal(size=(6, 3))
    want = np.array([[sum(r[i, j:]) for j in range(3)] for i in range(6)])
    np.testing.assert_allclose(reward_to_go(r), want)
    G = 3
    loo = np.array([
        [want[i, k] - np.mean([want[j, k] for j in range(i // G * G, i // G * G + G) if j != i])
         for k in range(3)]
        for i in range(6)
    ])  # fmt: skip
    np.testing.assert_allclose(leave_one_out(want, G), loo)


# -- the episodes: one batch per call -----------------------------------------------------------


def _logps(model, batch):
    ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)
    P = batch.prompt_ids.shape[1]
    z = torch.log_softmax(model(input_ids=ids).logits[:, P - 1 : -1], dim=-1)
    return z.gather(-1, batch.completion_ids[..., None])[..., 0]


def _per_turn(model, batch, g, mask, *, norm=None):
    r = g.view(-1, batch.group_size, g.shape[1])
    a = (r - (r.sum(1, keepdim=True) - r) / (batch.group_size - 1)).reshape(g.shape)
    if norm is not None:
        a = norm(g)
    a_t = a.gather(1, batch.turn.clamp(min=0)).float()
    return -(_logps(model, batch) * a_t * mask).sum() / len(mask)


def _rtg(batch):
    return batch.turn_rewards.flip(1).cumsum(1).flip(1)


def _discounted(batch, gamma):
    """Gₖ = rₖ + γ Gₖ₊₁ of every turn: the rewards to go, discounted a turn at a time."""
    r = batch.turn_rewards
    g, run = torch.zeros_like(r), torch.zeros_like(r[:, 0])
    for k in reversed(range(r.shape[1])):
        run = r[:, k] + gamma * run
        g[:, k] = run
    return g


def _first_world_token(batch):
    world = (batch.turn >= 0) & (batch.completion_mask == 0)
    before = torch.cat([torch.zeros_like(world[:, :1]), world[:, :-1]], 1)
    return world & ~before


def _slow(*values):
    """One parameter set run under ``make ci`` only (the suite's time: a representative of its
    kind stays in ``make test``)."""
    return pytest.param(*values, marks=pytest.mark.slow)


EPISODE_LOSSES = {
    "correct": lambda m, b: _per_turn(m, b, _rtg(b), b.completion_mask),
    "header": lambda m, b: _per_turn(
        m, b, _rtg(b), (b.completion_mask.bool() | _first_world_token(b)).long()
    ),
    "zeroed-before-answer": lambda m, b: _per_turn(
        m, b, torch.cat([torch.zeros_like(_rtg(b)[:, :1]), _rtg(b)[:, 1:]], 1), b.completion_mask
    ),
    "own-turn": lambda m, b: _per_turn(m, b, b.turn_rewards, b.completion_mask),
    "a-turn-late": lambda m, b: _per_turn(m, b, _rtg(b) - b.turn_rewards, b.completion_mask),
    "discounted": lambda m, b: _per_turn(m, b, _discounted(b, 0.5), b.completion_mask),
    "whitened-across": lambda m, b: _per_turn(
        m, b, _rtg(b), b.completion_mask, norm=lambda g: (g - g.mean(0)) / (g.std(0) + 1e-6)
    ),
    "token-mean": lambda m, b: (
        _per_turn(m, b, _rtg(b), b.completion_mask)
        * len(b.completion_mask)
        / b.completion_mask.sum()
    ),
    "twice": lambda m, b: 2 * _per_turn(m, b, _rtg(b), b.completion_mask),
}
"""Losses over episodes, each with one mistake (``correct`` with none)."""


@pytest.fixture(scope="module")
def two_turn():
    return EpisodesProblem("two-turn", 0.0)


def _recorded(problem, fn, batches, seed):
    """What the episodes family's step does on its first batches: the recorder of them."""
    model = problem.lab.model
    params = list(model.parameters())
    theta = [p.detach().clone() for p in params]
    rows = _rows(problem, batches, np.random.default_rng(seed))
    recorder = Recorder(limit=batches)
    for k in range(batches):
        user.reset_policy(params, theta)
        batch = _batch(problem, rows[k])
        with Tap(model=model) as tap:
            user.call(fn, (model, batch), params, -1.0, theta, tap=tap)
        recorder.episodes(batch, tap, k, ~wide_ended(problem)[rows[k]], problem.beta)
    user.reset_policy(params, theta)
    return recorder


def _episodes_audit(problem, fn, batches=6, seed=0):
    """The audit of :func:`_recorded`'s batches.

    Six batches (test_check_audit_fixes.py's): every reading below holds on three.
    """
    return audit(_recorded(problem, fn, batches, seed).seen)


@pytest.mark.parametrize(
    ("loss", "names", "words"),
    [
        ("correct", [], None),
        ("header", ["world-tokens-trained"], "first token of each world answer"),
        _slow(
            "zeroed-before-answer", ["first-reply-uncredited"], "tokens in the first reply (exactly"
        ),
        ("own-turn", ["later-rewards-withheld"], "own turn's reward only"),
        ("a-turn-late", ["own-reward-withheld"], "its own turn's reward left out"),
        ("discounted", ["turns-discounted"], "discounted by γ = 0.5 a turn"),
        _slow("whitened-across", ["batch-whitened"], "whitened across the whole batch"),
        _slow("token-mean", ["batch-dependent-normaliser"], "count of the model's tokens"),
        _slow("twice", ["scale"], "c = 2"),
    ],
)
def test_each_episode_mistake_is_located_and_named(two_turn, loss, names, words):
    found = _episodes_audit(two_turn, EPISODE_LOSSES[loss])
    assert [f.name for f in found.findings] == names, found
    if words:
        assert words in found.findings[0].where
    assert found.leak == (loss in ("header", "zeroed-before-answer"))  # a drop by a rule fails


def test_a_world_header_scored_is_found_on_one_batch(two_turn):
    found = _episodes_audit(two_turn, EPISODE_LOSSES["header"], batches=1, seed=3)
    (f,) = [f for f in found.findings if f.leak]
    assert f.name == "world-tokens-trained" and "(a role header)" in f.where
    assert 0 < f.share < 1


# -- single completions: the sequence family's batches -------------------------------------------


def _rloo(batch):
    r = batch.rewards.view(-1, batch.group_size)
    G = batch.group_size
    return (r - (r.sum(1, keepdim=True) - r) / (G - 1)).reshape(-1)


def _seq_audit(fn, problem_name="length", batches=8, M=1, kl=False):
    """The audit of ``fn`` on a sequence problem's batches (``kl``: with β and π_ref).

    Eight batches: a loss's mistake is in every batch's weights, so a reading is as wrong on
    eight as on sixteen. A reading that needs a token the batches seldom hold (one past a
    clamp) asks for more and says so; on too few its words are missing and its test fails.
    """
    from eligibility.lab.sequence.builtin import PROBLEMS

    problem = PROBLEMS[problem_name]()
    rng = np.random.default_rng(0)
    G = problem.group_size
    params = list(problem.model.parameters())
    theta = [p.detach().clone() for p in params]
    N = len(problem.prompts) * G
    recorder = Recorder(scales=named_scales(G, problem.max_completion_length, N, M), limit=99)
    for k in range(batches):
        rows = problem.draw(len(problem.prompts), rng).rows
        calls = []
        for i in np.split(np.arange(len(rows)), M):
            user.reset_policy(params, theta)
            logps, batch = problem.on_policy(batch_of(problem, rows[i], 1.0))
            tap = Tap(logps=logps)
            user.call(fn, (logps, batch), params, -1.0, theta, tap=tap)
            calls.append((batch, tap, 1.0))
        beta = problem.beta if kl else 0.0
        recorder.completions(calls, k, truncated=problem.table.truncated[rows], beta=beta)
        if kl:  # π_ref on the completion grid, as the logps form lays it out
            ref = [np.where(b.completion_mask > 0, b.ref_logps, 0.0) for b, _, _ in calls]
            recorder.seen[-1].ref = np.concatenate(ref)
    user.reset_policy(params, theta)
    return audit(recorder.seen, recorder.scales)


def _summed(logps, batch, a):
    return -(logps * a[:, None] * batch.completion_mask).sum() / len(a)


SEQUENCE_LOSSES = {
    "rloo": lambda lp, b: _summed(lp, b, _rloo(b)),
    "no-baseline": lambda lp, b: _summed(lp, b, b.rewards),
    "grpo": lambda lp, b: (
        -(
            (lp * b.completion_mask).sum(1)
            / b.completion_mask.sum(1)
            * (
                (b.rewards.view(-1, b.group_size) - b.rewards.view(-1, b.group_size).mean(1, True))
                / b.rewards.view(-1, b.group_size).std(1, keepdim=True).clamp_min(1e-8)
            ).reshape(-1)
        ).mean()
    ),
    "prob-weighted": lambda lp, b: _summed(lp.exp().detach() * lp, b, _rloo(b)),
    "undivided-micro-batches": lambda lp, b: _summed(lp, b, _rloo(b)),  # ÷ its own rows
}


@pytest.mark.parametrize(
    ("loss", "names", "M"),
    [
        ("rloo", [], 1),
        ("no-baseline", [], 1),
        ("grpo", ["length-normalised", "std-normalised"], 1),
        ("prob-weighted", ["per-token-weight"], 1),
        ("undivided-micro-batches", ["accumulation-scaled"], 2),
    ],
)
def test_each_completion_mistake_is_named(loss, names, M):
    found = _seq_audit(SEQUENCE_LOSSES[loss], M=M)
    assert [f.name for f in found.findings] == names, found
    assert not found.leak


def _centred(b):
    r = b.rewards.view(-1, b.group_size)
    return (r - r.mean(1, keepdim=True)).reshape(-1)


def test_a_self_including_mean_under_a_constant_normaliser_is_said_by_both_names():
    """Dr. GRPO without a σ: (r − r̄_g) summed over tokens ÷ (N T). The audit's constant is
    (G − 1)/(G T), the lab's G and T; both of its causes are said, each carrying c. Beside a row
    that reads the divisor batch by batch over the whole sample (verl's padded width, T on each
    batch the audit read), the constant with every name of its cause is the audit's coarser
    reading of ``batch-dependent-normaliser`` and is not said; beside a row it is no reading of,
    the readings differ and the audit's is the diagnosis."""
    from eligibility.check.audit.judge import one_reading
    from eligibility.check.diagnosis import Diagnosis
    from eligibility.lab.sequence.builtin import PROBLEMS

    p = PROBLEMS["length"]()
    T, G = p.max_completion_length, p.group_size
    found = _seq_audit(lambda lp, b: _summed(lp, b, _centred(b)) / T)
    assert [f.name for f in found.findings] == ["self-including-mean", "constant-normaliser"]
    for f in found.findings:
        assert f.constant == pytest.approx((G - 1) / (G * T), rel=1e-3)
    audit, table = one_reading(found, Diagnosis(("batch-dependent-normaliser",)))
    assert table.names == ("batch-dependent-normaliser",) and audit.findings == []
    audit, table = one_reading(found, Diagnosis(("std-normalised",)))
    assert table.names == ("self-including-mean", "constant-normaliser")
    # no group mean taken (the leave-one-out's ÷ T): the constant normaliser alone
    found = _seq_audit(lambda lp, b: _summed(lp, b, _rloo(b)) / T)
    assert [f.name for f in found.findings] == ["constant-normaliser"]


def _batch_sigma(b):
    """TRL's scale_rewards="batch": the group-centred reward ÷ the batch's σ of the rewards."""
    return _centred(b) / (b.rewards.std() + 1e-4)


def _rloo_whitened(b):
    """TRL RLOOTrainer's normalize_advantages: the leave-one-out advantage, batch-whitened."""
    a = _rloo(b)
    return (a - a.mean()) / (a.std() + 1e-4)


@pytest.mark.parametrize(
    ("advantage", "name"), [(_batch_sigma, "std-normalised"), (_rloo_whitened, "batch-whitened")]
)
def test_one_sigma_a_batch_is_read_as_that_sigma(advantage, name):
    """A factor per batch that is 1/σ over the batch, of the rewards or of the group-centred
    rewards, is read as that σ, the name a row of the table gives it (a factor per batch that is
    no σ, a token mean over the batch, is read below)."""
    found = _seq_audit(lambda lp, b: _summed(lp, b, advantage(b)))
    assert [f.name for f in found.findings] == [name], found


def test_a_coarser_name_of_the_audits_leaves_the_rows_finer_one():
    """The registry declares a factor per batch a coarser reading of a batch's σ: beside a row
    naming the σ, the audit's factor (read here from a token mean over the batch) leaves the
    row's names and is not said; beside a row it is no reading of, the readings differ and the
    audit's is the diagnosis; where the audit gives the row's name itself, its factor per batch
    is a mistake of its own, added after the row's."""
    from eligibility.check.audit.judge import one_reading
    from eligibility.check.diagnosis import Diagnosis

    found = _seq_audit(
        lambda lp, b: -(lp * _rloo(b)[:, None] * b.completion_mask).sum() / b.completion_mask.sum()
    )  # a factor per batch that is no σ: read as what it is
    assert [f.name for f in found.findings] == ["batch-dependent-normaliser"], found
    assert "count of the model's tokens" in found.findings[0].where
    for row in ("std-normalised", "batch-whitened"):
        audit, table = one_reading(found, Diagnosis((row, "kl-no-gradient")))
        assert table.names == (row, "kl-no-gradient") and audit.findings == []
    audit, table = one_reading(found, Diagnosis(("length-normalised",)))
    assert table.names == ("batch-dependent-normaliser",) and audit.findings == found.findings
    sigma = Finding("std-normalised", "each group's advantages divided by its σ")
    both = dataclasses.replace(found, findings=[sigma, *found.findings])
    _, table = one_reading(both, Diagnosis(("std-normalised",)))
    assert table.names == ("std-normalised", "batch-dependent-normaliser")


# -- off-policy: the batch drawn by μ for π_old, scored at θ ---------------------------------------

OFF_POLICY = {
    "product": [],
    "per_token_ratio": ["per-token-ratio"],
    "stale_old_logps": ["stale-old-logps"],
    "uncorrected_sampler": ["uncorrected-sampler"],
    "truncated": ["truncation-bias"],
    "geometric_mean": ["geometric-mean"],
    "ppo_clip": ["per-token-ratio", "clipping-bias"],
    "cispo_relative": ["cispo-relative-cap"],
    "truncated_whole_half": ["truncation-bias"],
    "truncated_without_ratio": ["stale-old-logps", "truncation-bias"],
    "cispo_trl_default": ["cispo-absolute-cap"],
}
"""examples/check/offpolicy/losses.py's functions and the audit's names for them on ``near``."""


@pytest.fixture(scope="module")
def near():
    from eligibility.check.offpolicy import _audit_scales, _draws, _problem

    problem = _problem("near")
    # six draws: each reading below holds on them (a rejection's gap around its bound is the
    # one that narrows with more; on three it no longer holds the bound and its test fails)
    return problem, _draws(problem, 6, np.random.default_rng(0)), _audit_scales(problem)


def _example(path):
    """The module of an example file (its functions are the losses checked)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _offpolicy_names(near, fn):
    """The audit's names for ``fn`` on the off-policy family's batches of ``near`` (each once:
    a cap's reading and the constant it explains are two findings of one name)."""
    return list(dict.fromkeys(f.name for f in _offpolicy_audit(near, fn).findings))


def _offpolicy_audit(near, fn):
    """The audit of ``fn`` on the off-policy family's batches of ``near``."""
    problem, draws, scales = near
    params = list(problem.model.parameters())
    theta = [p.detach().clone() for p in params]
    recorder = Recorder(scales=scales)
    for k, d in enumerate(draws):
        user.reset_policy(params, theta)
        batch = problem.batch(d)
        logps = problem.logps(batch)
        tap = Tap(logps=logps, batch=batch)
        user.call(fn, (logps, batch), params, -1.0, theta, tap=tap)
        recorder.completions([(batch, tap, 1.0)], k, truncated=problem.base.table.truncated[d.rows])
    user.reset_policy(params, theta)
    return audit(recorder.seen, scales)


OFF_POLICY_SLOW = {
    "cispo_relative",  # cispo-relative-cap: its bounds read in test_check_reading.py
    "truncated_whole_half",  # truncation-bias: as "truncated"
    "truncated_without_ratio",  # stale-old-logps and truncation-bias: each read fast above
    "cispo_trl_default",  # cispo-absolute-cap: TRL's own, read below (the cap that binds)
}
"""Off-policy examples under ``make ci`` only: each name they read is read in ``make test``."""


@pytest.mark.parametrize(
    ("name", "names"),
    [
        pytest.param(n, names, marks=(pytest.mark.slow,) if n in OFF_POLICY_SLOW else ())
        for n, names in OFF_POLICY.items()
    ],
)
def test_each_off_policy_mistake_is_named(near, name, names):
    losses = _example("examples/check/offpolicy/losses.py")
    assert _offpolicy_names(near, getattr(losses, name)) == names


def test_a_cap_that_binds_on_every_token_is_not_read_as_stale_old_logps(near):
    """TRL's CISPO weight sg(min(rₜ, 0.2)) · ℓₜ (the parent of huggingface/trl 97ca1a256, run
    for dr_grpo) on ``near``: by autograd every token's weight is 0.2 (Rᵢ − R̄_g)/(N·T) whatever
    the old log-probs, θ_old's as handed or θ's own (stale): every ratio is above 0.2, so the
    cap binds on every token and the fix of ``stale-old-logps`` changes no weight. The audit
    reads the cap the loss computes from θ_old's log-probs, not stale ones; the same loss with
    its old log-probs taken at θ (TRL's path where none are handed: logps.detach()) reads
    ``stale-old-logps``."""
    from field import ports

    problem, draws, _ = near

    def weights(fn, logps, batch):
        (g,) = torch.autograd.grad(fn(logps, batch), logps)
        return -g * batch.completion_mask

    for d in draws[:4]:
        batch = problem.batch(d)
        logps = problem.logps(batch)
        m = batch.completion_mask > 0
        ratio = torch.exp(logps - batch.old_logps).detach()[m]
        assert ratio.min() > 0.2 and (ratio - 1).abs().max() > 0.1  # capped, and θ ≠ θ_old
        given = weights(ports.trl_cispo_branch_buggy, logps, batch)
        at_theta = dataclasses.replace(batch, old_logps=logps.detach().clone())
        np.testing.assert_array_equal(given, weights(ports.trl_cispo_branch_buggy, logps, at_theta))
        a = batch.rewards.view(-1, batch.group_size)
        a = (a - a.mean(1, keepdim=True)).reshape(-1, 1) * batch.completion_mask
        np.testing.assert_allclose(
            given, 0.2 * a / (len(a) * batch.max_completion_length), rtol=1e-5, atol=1e-9
        )
    found = _offpolicy_audit(near, ports.trl_cispo_branch_buggy)
    cap, sampler, constant = found.findings
    assert (cap.name, sampler.name, constant.name) == (
        "cispo-absolute-cap",
        "uncorrected-sampler",
        "cispo-absolute-cap",
    )
    assert cap.instead_of == ("stale-old-logps",) and "θ_old's log-probs" in cap.where
    # the constant 0.2 × (G − 1)/G × 1/T, its 0.2 the cap's bound
    assert constant.constant == pytest.approx(0.2 * 7 / 8 / 5, rel=1e-4)

    def old_at_theta(logps, batch):
        return ports.trl_cispo_branch_buggy(
            logps, dataclasses.replace(batch, old_logps=logps.detach())
        )

    assert _offpolicy_names(near, old_at_theta)[0] == "stale-old-logps"


def test_a_row_the_audit_shows_untrue_is_not_the_reading():
    """A row that names ``stale-old-logps`` where the audit reads the cap on a ratio computed
    from θ_old's log-probs: the audit's reading is the diagnosis (the two variants' means are
    one up to a constant on these batches; the weights and what the loss read tell them
    apart)."""
    from eligibility.check.audit.judge import Audit, one_reading
    from eligibility.check.diagnosis import Diagnosis

    cap = Finding("cispo-absolute-cap", "capped on every token", instead_of=("stale-old-logps",))
    found = Audit(4, [cap, Finding("uncorrected-sampler", "no π_old/μ weight")])
    _, table = one_reading(found, Diagnosis(("stale-old-logps", "uncorrected-sampler"), 0.035))
    assert table == Diagnosis(("cispo-absolute-cap", "uncorrected-sampler"))
    _, table = one_reading(found, Diagnosis(("uncorrected-sampler", "cispo-absolute-cap")))
    assert table.names == ("uncorrected-sampler", "cispo-absolute-cap")
    with pytest.raises(ValueError, match="no mistake is named"):
        Finding("cispo-absolute-cap", "", instead_of=("no-such-name",))


@pytest.fixture(scope="module")
def correct_units(two_turn):
    """The units of the correct loss's first 4 batches on two-turn, recorded once: the forms
    below read them and write nothing."""
    from eligibility.check.audit.relations import units

    return units(_recorded(two_turn, EPISODE_LOSSES["correct"], 4, 5).seen)


@pytest.mark.parametrize("form", ["group", "none", "group-std-1", "group-std-0", "batch-mean",
                                  "batch-std-1", "batch-std-0", "batch-factor"])  # fmt: skip
def test_the_vectorised_relation_shapes_are_the_plain_loops(correct_units, form):
    from eligibility.check.audit.relations import shape, shape_loop

    u = correct_units
    for x in (u.rtg, u.whole, u.own):
        np.testing.assert_allclose(shape(u, x, form), shape_loop(u, x, form), atol=1e-12)


def test_a_role_header_of_two_tokens_before_answers_of_varying_length_is_located():
    """On two-turn-long-answers (a header of two tokens; an answer of one or two tokens after
    it) the first token alone, the whole header and every world token are told apart."""
    long = EpisodesProblem("two-turn-long-answers", 0.0, header=(0, 2), long_answers=True)

    def scoring(k):
        def fn(model, batch):
            world = (batch.turn >= 0) & (batch.completion_mask == 0)
            place = torch.cumsum(world.long(), 1) - 1  # one world answer an episode here
            mask = batch.completion_mask.bool() | (world & (place < k))
            return _per_turn(model, batch, _rtg(batch), mask.long())

        return fn

    said = {k: _episodes_audit(long, scoring(k), batches=2).findings[0].where for k in (1, 2, 9)}
    assert said[1].startswith("the first token of each world answer (a role header)")
    assert said[2].startswith("the first 2 tokens of each world answer (a role header)")
    assert said[9].startswith("every token of the world's answers")


def test_a_fast_samplers_top_entry_read_as_the_sampled_tokens_is_named(near):
    """examples/check/audit/offpolicy.py: μ's most probable entry read as the sampled token's
    log-prob (``batch.sampler_top_logps[..., 0]``) is ``sampler-wrong-entry``, a floor under
    each token's ratio ``ratio-floor`` (0.8 read off); their fix is neither."""
    losses = _example("examples/check/audit/offpolicy.py")
    problem, draws, _ = near
    assert problem.batch(draws[0]).sampler_top_ids.shape[-1] == 2
    found = {
        name: _offpolicy_names(near, getattr(losses, name))
        for name in ("fixed", "top_logprob_as_sampler", "ratio_floored")
    }
    assert found == {
        "fixed": [],
        "top_logprob_as_sampler": ["sampler-wrong-entry"],
        "ratio_floored": ["ratio-floor"],
    }


AUDIT_EXAMPLES = {
    "episodes.py": {
        "fixed": [],
        "role_header_scored": ["world-tokens-trained"],
        "return_zeroed_before_answer": ["first-reply-uncredited"],
        "first_reply_left_out": ["first-reply-uncredited"],
        "own_turn_reward": ["later-rewards-withheld"],
        "whitened_across_groups": ["batch-whitened"],
        "token_mean_over_batch": ["batch-dependent-normaliser"],
        "accumulated_twice": ["scale"],
    },
    "completions.py": {
        "fixed": [],
        "whitened_across_groups": ["batch-whitened"],
        "weighted_by_relative_probability": ["per-token-weight"],
    },
}
"""examples/check/audit/'s losses and the audit's names for them (on two-turn; on length)."""


FAST_EXAMPLES = {
    ("episodes.py", "fixed"),
    ("episodes.py", "role_header_scored"),
    ("completions.py", "whitened_across_groups"),
}
"""The examples read in ``make test``; the rest under ``make ci`` (each a mistake the tests
above read in another form)."""


@pytest.mark.parametrize(
    ("path", "name"),
    [
        pytest.param(p, n, marks=() if (p, n) in FAST_EXAMPLES else pytest.mark.slow)
        for p, names in AUDIT_EXAMPLES.items()
        for n in names
    ],
)
def test_the_audit_examples_read_as_their_docstrings_say(two_turn, path, name):
    fn = getattr(_example(f"examples/check/audit/{path}"), name)
    found = _episodes_audit(two_turn, fn) if path == "episodes.py" else _seq_audit(fn)
    assert [f.name for f in found.findings] == AUDIT_EXAMPLES[path][name], found


@pytest.mark.parametrize(
    ("name", "M", "names"),
    [("undivided_accumulation", 2, ["accumulation-scaled"]), ("divided_accumulation", 2, [])],
)
def test_the_accumulation_examples_read_with_two_micro_batches(name, M, names):
    fn = getattr(_example("examples/check/audit/completions.py"), name)
    assert [f.name for f in _seq_audit(fn, M=M).findings] == names


def test_the_vectorised_credit_is_the_plain_loops(two_turn):
    from eligibility.check.audit.relations import _credit, credit_loop, units

    recorder = _recorded(two_turn, EPISODE_LOSSES["correct"], 3, 7)
    u = units(recorder.seen)
    np.testing.assert_allclose(_credit(u), credit_loop(u), atol=1e-12)
    assert np.any(_credit(u))


def test_a_loss_that_weighs_no_token_has_no_finding(two_turn):
    """No weight anywhere (the check's verdict: no gradient): the audit names nothing."""
    found = _episodes_audit(two_turn, lambda m, b: 0.0 * EPISODE_LOSSES["correct"](m, b), 2)
    assert found.findings == [] and "moves nothing" in found.covers


def test_every_name_only_the_audit_gives_has_a_meaning_and_a_fix():
    """The report explains each (``AUDIT_DIAGNOSES``) and says what to change (``FIXES``); the
    examples above hold the fixed losses reading no finding."""
    from eligibility.check.fixes import fix
    from eligibility.check.report import AUDIT_DIAGNOSES

    assert {"first-reply-uncredited", "ratio-floor", "sampler-wrong-entry"} <= set(AUDIT_DIAGNOSES)
    assert all(fix(name) for name in AUDIT_DIAGNOSES)
