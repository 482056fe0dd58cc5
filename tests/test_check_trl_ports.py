"""TRL 1.16's losses ported by hand, and the credit audit's reading of them.

Each port follows TRL's own code (``trl/trainer/rloo_trainer.py``, ``grpo_trainer.py``); the
weight it gives every token, −∂L/∂ℓₜ by autograd, is held to the formula read from that code
before the audit reads it. The framework tables run TRL's code itself
(tests/test_check_frameworks_peers.py, slow); these hold the readings the tables turned on, fast.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from eligibility.check import user
from eligibility.check.audit import Recorder, audit
from eligibility.check.audit.tap import Tap
from eligibility.check.sequence import batch_of, named_scales


def _rloo(batch):
    r = batch.rewards.view(-1, batch.group_size)
    G = batch.group_size
    return (r - (r.sum(1, keepdim=True) - r) / (G - 1)).reshape(-1)


def _truncated(batch) -> torch.Tensor:
    """TRL's rule: a completion whose last token is not EOS (``ids[-1] not in eos_and_pad``)."""
    L = batch.completion_mask.sum(1).long()
    last = batch.completion_ids.gather(1, (L - 1)[:, None])[:, 0]
    return last != int(batch.eos_token_id)


def _rloo_masking_truncated(logps, batch):
    """RLOOTrainer with ``mask_truncated_completions`` at θ = θ_old, ported.

    ``completion_mask`` zeroed on the truncated rows before the old log-probs are summed, so
    a truncated row's sequence log-prob is 0 in both terms; the sequence ratio exp(Σℓ − Σℓ_old)
    (1 here) clipped PPO-style, times the leave-one-out advantage (the truncated rows' rewards
    still in their siblings' baselines), a mean over the rows: wᵢₜ = Aᵢ/N on the kept rows,
    0 on the truncated ones.
    """
    m = batch.completion_mask * (~_truncated(batch))[:, None]
    seq = (logps * m).sum(1)
    ratio = torch.exp(seq - seq.detach())
    A = _rloo(batch)
    return -torch.min(ratio * A, ratio.clamp(0.8, 1.2) * A).mean()


def _audit_of(fn, scored=None, batches=8, problem_name="length"):
    """The audit of ``fn`` on a sequence problem's batches, as the check lays them out, and
    each batch with the weights −∂L/∂ℓ that autograd gives.

    ``scored(seen)``: the ℓ the loss's forward put at each position, where it is not the
    sampled token's (applied to each batch's record before the audit reads it). Where the
    problem has a KL (β > 0), π_ref is recorded beside, as the check records it.
    """
    from eligibility.lab.sequence.builtin import PROBLEMS

    problem = PROBLEMS[problem_name]()
    rng = np.random.default_rng(0)
    G, T = problem.group_size, problem.max_completion_length
    params = list(problem.model.parameters())
    theta = [p.detach().clone() for p in params]
    N = len(problem.prompts) * G
    recorder = Recorder(scales=named_scales(G, T, N), limit=99)
    weights = []
    for k in range(batches):
        rows = problem.draw(len(problem.prompts), rng).rows
        user.reset_policy(params, theta)
        logps, batch = problem.on_policy(batch_of(problem, rows, 1.0))
        tap = Tap(logps=logps)
        user.call(fn, (logps, batch), params, -1.0, theta, tap=tap)
        truncated = problem.table.truncated[rows]
        recorder.completions([(batch, tap, 1.0)], k, truncated=truncated, beta=problem.beta)
        if problem.beta:
            recorder.seen[-1].ref = np.where(batch.completion_mask > 0, batch.ref_logps, 0.0)
        if scored is not None:
            scored(recorder.seen[-1])
        lp = logps.detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad(fn(lp, batch), lp)
        weights.append((batch, logps.detach().double(), -g.double()))
    user.reset_policy(params, theta)
    return audit(recorder.seen, recorder.scales), weights


def _scored_as_token_zero(seen):
    """TRL's fused head at a position whose label the mask drops (−100) scores token 0
    (``labels.clamp(min=0)``): another value of ℓ wherever a row has no weight."""
    no_weight = (seen.kind == 1) & (np.abs(seen.w).max(1, keepdims=True) == 0)
    seen.ell = np.where(no_weight, seen.ell - 3.0, seen.ell)


def test_trls_mask_of_truncated_completions_reads_as_its_name():
    found, weights = _audit_of(_rloo_masking_truncated, _scored_as_token_zero)
    for batch, _, w in weights:  # the port's weights, by autograd: Aᵢ/N kept, 0 truncated
        m = batch.completion_mask > 0
        kept = ~_truncated(batch)
        want = (_rloo(batch) * kept / len(kept))[:, None].double().expand_as(w)
        torch.testing.assert_close(w[m], want[m], rtol=1e-5, atol=1e-9)
    assert any(_truncated(b).any() for b, _, _ in weights)  # some rows were truncated
    assert [f.name for f in found.findings] == ["truncated-masked"], found
    assert "off-policy" not in found.covers, found.covers


class _RoundedWeights(torch.autograd.Function):
    """ℓ as it is, its gradient rounded to bf16: each token's weight as a bf16 loss leaves it
    (TRL's own weights on the check's kl batches sit within 0.2 % of the formula below)."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g.to(torch.bfloat16).to(g.dtype)


def _trl_dr_grpo_kl(bias_correction: bool):
    """GRPOTrainer's ``dr_grpo`` with ``scale_rewards="none"`` and β > 0 at θ = θ_old, ported.

    A = r − the group's mean; per_token_kl = e^(ℓ_ref − ℓ) − (ℓ_ref − ℓ) − 1 (k3), times
    coef_1 = exp(ℓ − sg ℓ) where ``use_bias_correction_kl``; the PPO term −min(coef_1 A,
    clip(coef_1) A) plus β·per_token_kl, summed over the tokens ÷ (N · max_completion_length).
    Each weight rounded to bf16, as under TRL's default autocast (:class:`_RoundedWeights`). Each
    token's weight: (A − β(1 − e^(−dₜ)))/(N T), or (A − β dₜ)/(N T) with the correction
    (∂/∂ℓ of k3·e^(ℓ − sg ℓ) is (1 − e^(−d)) + k3 = d), dₜ = ℓₜ − ℓ_ref,ₜ.
    """

    def loss(logps, batch):
        m = batch.completion_mask
        N, T, G = m.shape[0], batch.max_completion_length, batch.group_size
        r = batch.rewards.view(-1, G)
        A = (r - r.mean(1, keepdim=True)).reshape(-1)[:, None]
        lp, ref = _RoundedWeights.apply(logps), batch.ref_logps
        coef_1 = torch.exp(logps - logps.detach())
        coef_2 = coef_1.clamp(0.8, 1.2)
        kl = torch.exp(ref - lp) - (ref - lp) - 1
        if bias_correction:
            kl = kl * torch.exp(lp - lp.detach())
        per_token = -torch.min(coef_1 * A, coef_2 * A) + batch.beta * kl
        return (per_token * m).sum() / (N * T)

    return loss


@pytest.mark.parametrize(
    ("bias_correction", "estimator"), [(True, "kl-token-local"), (False, "kl-forward")]
)
def test_trls_dr_grpo_with_a_kl_reads_no_per_token_factor_on_the_rewards_part(
    bias_correction, estimator
):
    """The reward's part of every weight is one value a reply, A/(N T): the rounding bf16
    leaves on the KL's part is no factor per token, and no token's sign is flipped. Against
    ∇J's credit (A_loo/N, the KL's β/N) the reward's part is (G − 1)/(G T) (a group mean that
    includes the sample, ÷ T_max) and the KL's 1/T: one constant normaliser of the whole loss,
    its KL weight the objective's β."""
    loss = _trl_dr_grpo_kl(bias_correction)
    found, weights = _audit_of(loss, batches=8, problem_name="kl")
    for batch, logps, w in weights:  # the port's weights, by autograd, to bf16's rounding
        m = batch.completion_mask > 0
        N, T, G = m.shape[0], batch.max_completion_length, batch.group_size
        r = batch.rewards.view(-1, G).double()
        A = (r - r.mean(1, keepdim=True)).reshape(-1)[:, None]
        d = logps - batch.ref_logps.double()
        f = d if bias_correction else 1 - torch.exp(-d)
        want, kl = (A - batch.beta * f) / (N * T), batch.beta * f / (N * T)
        assert torch.all((w - want).abs()[m] <= 2**-8 * kl.abs()[m] + 1e-12)  # KL's rounding
    names = [f.name for f in found.findings]
    assert names == [estimator, "self-including-mean", "constant-normaliser"], found


def test_the_weights_of_micro_batches_each_padded_to_its_own_width_are_the_batchs():
    """TRL's accumulation shuffles the batch, splits it and pads each share to its own longest
    reply: every row's weights read from the shares' passes are the ones autograd gives the
    same loss in one pass over the batch (two equal rows in two shares stay two rows)."""
    from eligibility.check.audit.seen import from_logits
    from eligibility.lab.sequence.model import TinyCausalLM

    V, P = 5, 2
    gen = torch.Generator().manual_seed(0)
    model = TinyCausalLM(V, token=torch.randn(V, V, generator=gen))
    lengths = [4, 2, 3, 4, 1, 2]
    ids = torch.randint(1, V, (len(lengths), P + max(lengths)), generator=gen)
    ids[3] = ids[0]  # one reply twice, its copies in different shares below
    real = (torch.arange(ids.shape[1]) < P + torch.tensor(lengths)[:, None]).long()
    ids = ids * real  # padding: token 0
    a = torch.randn(len(lengths), generator=gen, dtype=torch.float64)
    a[3] = 2 * a[0]  # the copies weighted apart: a mix-up of the two would show
    shares = [torch.tensor([4, 0, 2]), torch.tensor([1, 3, 5])]

    def ell(rows):
        width = int(real[rows].sum(1).max())  # padded to the share's own longest
        x = ids[rows, :width]
        z = torch.log_softmax(model(x).logits[:, :-1].double(), -1)
        return z.gather(-1, x[:, 1:, None])[..., 0] * real[rows, 1:width]

    def loss_in(parts):
        return sum((a[rows, None] * ell(rows)).sum() for rows in parts)

    params = list(model.parameters())
    read = []
    for parts in ([torch.arange(len(lengths))], shares):
        tap = Tap(model=model)
        with tap:
            user.call(lambda m, b, parts=parts: loss_in(parts), (model, None), params, 1.0, tap=tap)
        w, _, _, unmatched = from_logits(tap, ids, 1.0, real)
        assert not unmatched
        read.append(w)
    np.testing.assert_allclose(read[0], read[1], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(read[1], (a[:, None] * real[:, 1:]).numpy(), atol=1e-9)
