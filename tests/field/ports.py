"""Fixed bugs of public RL trainers, each side of the fix ported into ``check``'s forms.

Every function is ``loss(logps, batch)`` (the sequence and off-policy families): ``logps`` the
per-token ln π_θ [N, W], ``batch`` the check's (``completion_mask``, ``rewards``, ``group_size``,
``old_logps``, ``ref_logps``, ``beta``, ``max_completion_length``; off-policy also
``sampler_logps``). Each pair ``<case>_buggy`` / ``<case>_fixed`` carries out the operations of
the framework's code at the parent of the fixing commit and at the commit, in their order, on
the check's batch; the docstring names the repository, the commit, the file and the settings
held. Where the framework's code reads a tensor the check's batch spells differently, the
mapping is said once in the docstring (θ_old's log-probs, the sampler's, the layout).

The trainers' advantages are computed from ``batch.rewards`` as each framework computes them
(group-major: the G completions of one prompt are contiguous, as in TRL's and verl's batches).
"""

from __future__ import annotations

import torch


def _groups(batch):
    """The rewards as [groups, G] (group-major rows)."""
    return batch.rewards.view(-1, batch.group_size)


# ── TRL: trl/trainer/grpo_trainer.py ────────────────────────────────────────────────────────
#
# huggingface/trl 35702ce3786a2f4be527d3dd52544fd7ab64785b (2025-09-03, #3992): the branches of
# `scale_rewards` were swapped in `_generate_and_score_completions`: "none" and "batch" divided
# the advantages by the group's std, "group" (the default) by nothing. The pair for "none" is
# checked; "group"'s is the same two losses the other way round.


def _trl_grpo_advantages_before_3992(rewards, G, scale_rewards):
    mean_grouped = rewards.view(-1, G).mean(dim=1).repeat_interleave(G, dim=0)
    advantages = rewards - mean_grouped
    if scale_rewards in ["batch", "none"]:
        std_rewards = rewards.view(-1, G).std(dim=1).repeat_interleave(G, dim=0)
    elif scale_rewards == "group":
        std_rewards = rewards.std().expand_as(rewards)
    if scale_rewards in ["batch", "none"]:
        advantages = advantages / (std_rewards + 1e-4)
    return advantages


def _trl_grpo_advantages_after_3992(rewards, G, scale_rewards):
    mean_grouped = rewards.view(-1, G).mean(dim=1).repeat_interleave(G, dim=0)
    advantages = rewards - mean_grouped
    if scale_rewards in ["group", "none"]:
        std_rewards = rewards.view(-1, G).std(dim=1).repeat_interleave(G, dim=0)
    elif scale_rewards == "batch":
        std_rewards = rewards.std().expand_as(rewards)
    if scale_rewards != "none":
        advantages = advantages / (std_rewards + 1e-4)
    return advantages


def _trl_dr_grpo_loss(per_token_logps, batch, advantages, old_per_token_logps, cispo_branch=False):
    """`_compute_loss`, loss_type "dr_grpo", β = 0, ε = ε_high = 0.2, token-level ratio.

    ``cispo_branch``: the CISPO weight sg(min(rₜ, ε_high))·ℓₜ that 97ca1a256's parent ran for
    dr_grpo; otherwise the PPO clip (35702ce37, 97ca1a256).
    """
    epsilon = epsilon_high = 0.2
    completion_mask = batch.completion_mask
    coef_1 = torch.exp(per_token_logps - old_per_token_logps)
    if cispo_branch:
        clamped_ratios = torch.clamp(coef_1, max=epsilon_high).detach()
        per_token_loss = -clamped_ratios * advantages.unsqueeze(1) * per_token_logps
    else:
        coef_2 = torch.clamp(coef_1, 1 - epsilon, 1 + epsilon_high)
        per_token_loss1 = coef_1 * advantages.unsqueeze(1)
        per_token_loss2 = coef_2 * advantages.unsqueeze(1)
        per_token_loss = -torch.min(per_token_loss1, per_token_loss2)
    max_completion_length = batch.max_completion_length
    normaliser = per_token_loss.size(0) * max_completion_length
    return (per_token_loss * completion_mask).sum() / normaliser


def trl_scale_none_buggy(logps, batch):
    """TRL before 35702ce37, `scale_rewards: none`, `loss_type: dr_grpo`: ÷ the group's std."""
    a = _trl_grpo_advantages_before_3992(batch.rewards, batch.group_size, "none")
    return _trl_dr_grpo_loss(logps, batch, a, logps.detach())


def trl_scale_none_fixed(logps, batch):
    """TRL at 35702ce37, `scale_rewards: none`, `loss_type: dr_grpo`: A = R − the group's mean."""
    a = _trl_grpo_advantages_after_3992(batch.rewards, batch.group_size, "none")
    return _trl_dr_grpo_loss(logps, batch, a, logps.detach())


# huggingface/trl 97ca1a2569367d4d1d30bedf8d29377b3d4d1ec4 (2025-11-07, #4499): the CISPO branch
# of `_compute_loss` ran for loss types grpo/bnpo/dr_grpo/dapo and the PPO clip for cispo.
# Off-policy (num_iterations > 1): `old_per_token_logps` is θ_old's (`batch.old_logps`); no vLLM,
# so no sampler correction; `importance_sampling_level: token`, ε = ε_high = 0.2,
# `scale_rewards: none`, `loss_type: dr_grpo`.


def _trl_dr_grpo_offpolicy(per_token_logps, batch, cispo_branch):
    advantages = _trl_grpo_advantages_after_3992(batch.rewards, batch.group_size, "none")
    return _trl_dr_grpo_loss(per_token_logps, batch, advantages, batch.old_logps, cispo_branch)


def trl_cispo_branch_buggy(logps, batch):
    """TRL before 97ca1a256, `loss_type: dr_grpo`: the CISPO weight sg(min(rₜ, ε_high)) · ℓₜ."""
    return _trl_dr_grpo_offpolicy(logps, batch, cispo_branch=True)


def trl_cispo_branch_fixed(logps, batch):
    """TRL at 97ca1a256, `loss_type: dr_grpo`: the PPO clip on the token ratio."""
    return _trl_dr_grpo_offpolicy(logps, batch, cispo_branch=False)


# ── verl: verl/trainer/ppo/core_algos.py, rollout_corr_helper.py ────────────────────────────

SAFETY_BOUND = 20.0  # verl's rollout_corr_helper bound on a log-ratio before exp


def _verl_rloo(batch):
    """`compute_rloo_outcome_advantage`: R·n/(n − 1) − mean·n/(n − 1), broadcast to tokens."""
    scores = batch.rewards.clone()
    n = batch.group_size
    mean = scores.view(-1, n).mean(dim=1).repeat_interleave(n)
    scores = scores * n / (n - 1) - mean * n / (n - 1)
    return scores.unsqueeze(-1) * batch.completion_mask


def _verl_agg_seq_mean_token_sum(loss_mat, loss_mask, exclude_empty):
    """`agg_loss`, "seq-mean-token-sum", one rank: ÷ the non-empty rows (ab3e8af0a) or all."""
    seq_losses = torch.sum(loss_mat * loss_mask, dim=-1)
    if exclude_empty:
        seq_mask = (torch.sum(loss_mask, dim=-1) > 0).float()
        return (seq_losses * seq_mask).sum() / seq_mask.sum()
    return torch.sum(seq_losses) / loss_mat.shape[0]


def _verl_sequence_is_weights(log_ratio, response_mask, threshold, detach):
    """`compute_rollout_correction_weights`, `rollout_is: sequence` (e01fc05be: the detach)."""
    log_ratio_sum = (log_ratio * response_mask).sum(dim=-1).unsqueeze(-1)
    log_ratio_sum_safe = torch.clamp(log_ratio_sum, min=-SAFETY_BOUND, max=SAFETY_BOUND)
    weights = torch.exp(log_ratio_sum_safe).expand_as(log_ratio)
    weights = weights * response_mask
    weights = weights.clamp(max=threshold)
    return weights.detach() if detach else weights


def _verl_sequence_rejection(log_ratio, response_mask, threshold):
    """`compute_rollout_rejection_mask`, `rollout_rs: sequence`, lower bound 1/threshold."""
    log_ratio_sum = (log_ratio * response_mask).sum(dim=-1).unsqueeze(-1)
    log_ratio_sum_safe = torch.clamp(log_ratio_sum, min=-SAFETY_BOUND, max=SAFETY_BOUND)
    weights = torch.exp(log_ratio_sum_safe).expand_as(log_ratio)
    mask = ((weights >= 1.0 / threshold) & (weights <= threshold)).float()
    return response_mask * mask


def _verl_bypass_pg(logps, batch, detach, rejection, exclude_empty):
    """`compute_policy_loss_with_rollout_correction` (bypass mode: old := the rollout's).

    Settings: `rollout_is: sequence`, `rollout_is_threshold: 2.0`, `loss_agg_mode:
    seq-mean-token-sum`, `adv_estimator: rloo`; with ``rejection``, `rollout_rs: sequence` at
    2.0. The rollout log-probs are the sampler's (`batch.sampler_logps`).
    """
    eos_mask = batch.completion_mask
    log_prob = torch.where(eos_mask > 0, logps, 0.0)
    rollout_log_prob = batch.sampler_logps
    log_ratio = log_prob - rollout_log_prob
    weights = _verl_sequence_is_weights(log_ratio, eos_mask, 2.0, detach)
    effective_mask = (
        _verl_sequence_rejection(log_ratio.detach(), eos_mask, 2.0) if rejection else eos_mask
    )
    advantages = _verl_rloo(batch)
    pg_losses = -advantages * log_prob * weights
    return _verl_agg_seq_mean_token_sum(pg_losses, effective_mask, exclude_empty)


def verl_is_detach_buggy(logps, batch):
    """verl before e01fc05be: the truncated sequence IS weight π_θ/π_rollout not detached."""
    return _verl_bypass_pg(logps, batch, detach=False, rejection=False, exclude_empty=True)


def verl_is_detach_fixed(logps, batch):
    """verl at e01fc05be: the same weight, detached."""
    return _verl_bypass_pg(logps, batch, detach=True, rejection=False, exclude_empty=True)


def verl_kept_count_buggy(logps, batch):
    """verl from ab3e8af0a to 2af4aff52: seq-mean over the sequences the rejection kept."""
    return _verl_bypass_pg(logps, batch, detach=True, rejection=True, exclude_empty=True)


def verl_kept_count_fixed(logps, batch):
    """verl at 2af4aff52: seq-mean over every sequence of the batch."""
    return _verl_bypass_pg(logps, batch, detach=True, rejection=True, exclude_empty=False)


# volcengine/verl a194638f1d5725ff2e621eff3ff209400ea82302 (2025-12-18): in
# `compute_grpo_outcome_advantage`, a score within ε of its group's mean gets advantage 0.


def _verl_grpo(batch, zero_at_mean, epsilon=1e-6):
    scores = batch.rewards.clone()
    n = batch.group_size
    grouped = scores.view(-1, n)
    mean = grouped.mean(dim=1).repeat_interleave(n)
    std = grouped.std(dim=1).repeat_interleave(n)
    out = scores.clone()
    for i in range(len(scores)):
        if zero_at_mean and torch.isclose(scores[i], mean[i], atol=epsilon):
            out[i] = 0
        else:
            out[i] = (scores[i] - mean[i]) / (std[i] + epsilon)
    return out.unsqueeze(-1) * batch.completion_mask


def _verl_vanilla(log_prob, old_log_prob, advantages, response_mask, clip=0.2, clip_c=3.0):
    """`compute_policy_loss_vanilla` with its dual clip, `loss_agg_mode: seq-mean-token-sum`."""
    negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - clip, 1 + clip)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_losses3 = -advantages * clip_c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    return _verl_agg_seq_mean_token_sum(pg_losses, response_mask, exclude_empty=True)


def verl_grpo_mean_buggy(logps, batch):
    """verl before a194638f1: (R − mean)/(std + ε) for every score, the vanilla PPO loss."""
    m = batch.completion_mask
    lp = torch.where(m > 0, logps, 0.0)
    return _verl_vanilla(lp, lp.detach(), _verl_grpo(batch, zero_at_mean=False), m)


def verl_grpo_mean_fixed(logps, batch):
    """verl at a194638f1: a score within ε of its group's mean gets advantage 0."""
    m = batch.completion_mask
    lp = torch.where(m > 0, logps, 0.0)
    return _verl_vanilla(lp, lp.detach(), _verl_grpo(batch, zero_at_mean=True), m)


# ── OpenRLHF: openrlhf/trainer/ppo_utils/experience_maker.py, openrlhf/models/loss.py ───────


def _openrlhf_policy_loss(log_probs, old_log_probs, advantages, action_mask, rollout_log_probs=None,
                          seq_mask_tis=None, eps=0.2):  # fmt: skip
    """`PolicyLoss.forward`, `policy_loss_type: ppo`, token-level loss on one rank.

    ``seq_mask_tis``: None (no vLLM correction), "0d7490c2^" or "0d7490c2" (the
    `seq-mask-tis` correction before and at the fix), thresholds [0.5, 5.0] (the CLI default).
    """
    policy_log_ratio = (log_probs - old_log_probs).clamp(min=-20.0, max=20.0)
    ratio = policy_log_ratio.exp()
    surr1 = ratio * advantages
    surr2 = ratio.clamp(1 - eps, 1 + eps) * advantages
    loss = -torch.min(surr1, surr2)
    if seq_mask_tis is not None:
        low_threshold, high_threshold = 0.5, 5.0
        rollout_log_ratio = old_log_probs - rollout_log_probs
        seq_log_ratio = (rollout_log_ratio * action_mask).sum(-1) / action_mask.sum(-1)
        seq_is = torch.exp(seq_log_ratio)
        seq_mask = (seq_is >= low_threshold) & (seq_is <= high_threshold)
        vllm_is = torch.exp(rollout_log_ratio)
        if seq_mask_tis == "0d7490c2":
            vllm_is = vllm_is.clamp(min=low_threshold, max=high_threshold)
        vllm_is = vllm_is.detach()
        loss = seq_mask.unsqueeze(-1) * vllm_is * loss
    return (loss * action_mask).sum() / action_mask.sum()


def _openrlhf_rloo_rewards(batch, has_actions_rule):
    """The group baseline of `make_experience_batch`, `advantage.estimator: rloo`.

    ``has_actions_rule``: False before 68f36f49 (every sample in the group's sums), True at it
    (samples whose action mask is empty left out of the sums and given 0).
    """
    n = batch.group_size
    rewards = batch.rewards.reshape(-1, n)
    if not has_actions_rule:
        baseline = (rewards.sum(-1, keepdim=True) - rewards) / (n - 1)
        return (rewards - baseline).reshape(-1)
    has_actions = (batch.completion_mask > 0).any(dim=-1).reshape(-1, n)
    valid = has_actions.to(rewards.dtype)
    count = valid.sum(-1, keepdim=True)
    total = (rewards * valid).sum(-1, keepdim=True)
    baseline = (total - rewards * valid) / (count - valid).clamp(min=1)
    return torch.where(has_actions, rewards - baseline, torch.zeros_like(rewards)).reshape(-1)


def _openrlhf_returns(rewards, action_mask):
    """`compute_reward` (KL coefficient 0: the reward on the last action) then
    `get_cumulative_returns` with γ = 1: every action token's return is its sample's reward."""
    eos = action_mask.size(1) - 1 - action_mask.long().fliplr().argmax(dim=1, keepdim=True)
    last = torch.zeros_like(action_mask).scatter_(
        1, eos, rewards.unsqueeze(1).to(action_mask.dtype)
    )
    return last.flip(1).cumsum(1).flip(1) * action_mask


def openrlhf_zero_action_buggy(logps, batch):
    """OpenRLHF before 68f36f49: RLOO baseline over every sample of the group."""
    m = batch.completion_mask
    lp = torch.where(m > 0, logps, 0.0)
    adv = _openrlhf_returns(_openrlhf_rloo_rewards(batch, False), m)
    return _openrlhf_policy_loss(lp, lp.detach(), adv, m)


def openrlhf_zero_action_fixed(logps, batch):
    """OpenRLHF at 68f36f49: samples without actions left out of the baseline."""
    m = batch.completion_mask
    lp = torch.where(m > 0, logps, 0.0)
    adv = _openrlhf_returns(_openrlhf_rloo_rewards(batch, True), m)
    return _openrlhf_policy_loss(lp, lp.detach(), adv, m)


def _openrlhf_seq_mask_tis(logps, batch, version):
    m = batch.completion_mask
    lp = torch.where(m > 0, logps, 0.0)
    old = torch.where(m > 0, batch.old_logps, 0.0)
    rollout = torch.where(m > 0, batch.sampler_logps, 0.0)
    adv = _openrlhf_returns(_openrlhf_rloo_rewards(batch, False), m)
    return _openrlhf_policy_loss(lp, old, adv, m, rollout, seq_mask_tis=version)


def openrlhf_seq_mask_tis_buggy(logps, batch):
    """OpenRLHF before 0d7490c2: seq-mask-tis keeps each token's π_old/μ unclamped."""
    return _openrlhf_seq_mask_tis(logps, batch, "0d7490c2^")


def openrlhf_seq_mask_tis_fixed(logps, batch):
    """OpenRLHF at 0d7490c2: each token's π_old/μ clamped to [0.5, 5]."""
    return _openrlhf_seq_mask_tis(logps, batch, "0d7490c2")


# ── SkyRL: skyrl/backends/skyrl_train/utils/ppo_utils.py, workers/worker.py ─────────────────
#
# NovaSky-AI/SkyRL 9d7bca91a505970211ec844f10bf5c072e921163 (2026-03-20, #1353):
# `compute_approx_kl` carried `@torch.no_grad()`, so the KL loss (`use_kl_loss: true`) had no
# gradient. Settings: `advantage_estimator: rloo`, `policy_loss_type: regular`,
# `loss_reduction: sequence_mean`, `kl_estimator_type: k3`, `kl_loss_coef` = the objective's β.


def _skyrl_k3(log_probs, log_probs_base, loss_mask):
    kl = torch.clamp(log_probs_base - log_probs, min=-20, max=20)
    kld = (torch.exp(kl) - kl - 1).contiguous()
    kld = torch.clamp(kld, min=-10, max=10)
    return kld * loss_mask


def _skyrl_masked_mean_rows(x, mask):
    return (x * mask).sum(-1) / mask.sum(-1)


def _skyrl_loss(logps, batch, kl_grad):
    m = batch.completion_mask
    lp = torch.where(m > 0, logps, 0.0)
    scores = batch.rewards.clone()
    n = batch.group_size
    mean = scores.view(-1, n).mean(dim=1).repeat_interleave(n)
    advantages = ((scores - mean) * (n / (n - 1))).unsqueeze(-1) * m
    ratio = torch.clamp(lp - lp.detach(), -20.0, 20.0).exp()
    surr1 = ratio * advantages
    surr2 = ratio.clamp(1 - 0.2, 1 + 0.2) * advantages
    loss = -torch.min(surr1, surr2)
    policy_loss = _skyrl_masked_mean_rows(loss, m).mean()
    ref = torch.where(m > 0, batch.ref_logps, 0.0)
    if kl_grad:
        kl = _skyrl_k3(lp, ref, m)
    else:
        with torch.no_grad():
            kl = _skyrl_k3(lp, ref, m)
    kl_loss = _skyrl_masked_mean_rows(kl, m).mean()
    return policy_loss + kl_loss * batch.beta


def skyrl_kl_grad_buggy(logps, batch):
    """SkyRL before 9d7bca91a: the k3 KL loss computed under no_grad."""
    return _skyrl_loss(logps, batch, kl_grad=False)


def skyrl_kl_grad_fixed(logps, batch):
    """SkyRL at 9d7bca91a: the k3 KL loss with its gradient."""
    return _skyrl_loss(logps, batch, kl_grad=True)


# ── prime-rl: src/prime_rl/trainer/rl/loss.py ───────────────────────────────────────────────
#
# The trainer's sequences come packed; here the check's N completions are one packed row, so
# `batch_size` (packed rows × micro-batches) is 1. `inference_logprobs` are the sampler's.


def _prime_drgrpo(batch):
    """`compute_advantage_drgrpo` / the default `compute_advantage`: R − the group's mean."""
    r = _groups(batch)
    return (r - r.mean(dim=1, keepdim=True)).reshape(-1)


def _prime_loss_816(logps, batch, fixed):
    """`compute_loss` before and at dece5e7fc (#816): `type: grpo`, `norm_type: token`,
    `clip_ratio: 8`, `advantage_type: drgrpo`, on-policy (old = the trainer's own, detached)."""
    m = batch.completion_mask > 0
    adv = _prime_drgrpo(batch)
    total_loss = 0
    for i in range(logps.shape[0]):
        lp, old, loss_mask = logps[i], logps[i].detach(), m[i]
        advantages = adv[i].expand_as(lp)
        importance_ratio = torch.exp(lp - old)
        clipped = torch.clamp(importance_ratio, max=8.0)
        loss = (-clipped * advantages)[loss_mask].sum()
        total_loss = total_loss + loss
    loss_scale = int(m.sum())
    return total_loss / (max(loss_scale, 1) if fixed else min(loss_scale, 1))


def prime_loss_scale_buggy(logps, batch):
    """prime-rl before dece5e7fc: total_loss / min(loss_scale, 1)."""
    return _prime_loss_816(logps, batch, fixed=False)


def prime_loss_scale_fixed(logps, batch):
    """prime-rl at dece5e7fc: total_loss / max(loss_scale, 1), the batch's token count."""
    return _prime_loss_816(logps, batch, fixed=True)


def _prime_loss_1123(logps, batch, fixed):
    """`compute_loss` before and at 48b9ec7a8 (#1123): `ratio_type: sequence`,
    `ratio_length_norm: false`, `mask_ratio_low/high: 0.125/8`, `advantage`: R − mean."""
    m = batch.completion_mask > 0
    adv = _prime_drgrpo(batch)
    total_loss = 0
    for i in range(logps.shape[0]):
        trainer_logprobs, loss_mask = logps[i], m[i]
        inference_logprobs = batch.sampler_logps[i]
        advantages = adv[i].expand_as(trainer_logprobs)
        log_importance_ratio = trainer_logprobs - inference_logprobs
        seq_log_importance_ratio = (log_importance_ratio[loss_mask]).sum()
        if fixed:
            log_importance_ratio = (
                trainer_logprobs - trainer_logprobs.detach() + seq_log_importance_ratio.detach()
            )
            log_importance_ratio = torch.clamp(log_importance_ratio, max=10.0)
        else:
            seq_log_importance_ratio = torch.clamp(seq_log_importance_ratio, max=10.0)
            log_importance_ratio = torch.full_like(log_importance_ratio, seq_log_importance_ratio)
        importance_ratio = torch.exp(log_importance_ratio)
        is_masked = (importance_ratio < 0.125) | (importance_ratio > 8.0)
        keep_mask = loss_mask & ~is_masked
        loss = (-importance_ratio * advantages)[keep_mask].sum()
        loss = loss / torch.clamp_min(loss_mask.sum(), 1)
        total_loss = total_loss + loss
    return total_loss / 1


def prime_gspo_buggy(logps, batch):
    """prime-rl before 48b9ec7a8: the sequence ratio written with `torch.full_like`."""
    return _prime_loss_1123(logps, batch, fixed=False)


def prime_gspo_fixed(logps, batch):
    """prime-rl at 48b9ec7a8: ℓₜ − sg(ℓₜ) + sg(the sequence's log-ratio)."""
    return _prime_loss_1123(logps, batch, fixed=True)


# ── NeMo-RL: nemo_rl/algorithms/loss/loss_functions.py, nemo_rl/algorithms/utils.py ─────────
#
# NVIDIA-NeMo/RL 33bce20d783468d2eec75bace5982f3cc2c5bb8d (2026-06-24, #2506): the KL term's
# per-token weight, 1 before, exp(ℓ − sg ℓ) at the fix; 2206ae11f7e0b48b01c319617cb904ec14b55849
# (2026-06-26, #2958): that weight moved inside `calculate_kl`, detached where the input clamp
# (20) binds. Settings: `ClippedPGLossFn`, `reference_policy_kl_type: k3`, clamps 20 and 10,
# `reference_policy_kl_penalty` = the objective's β, `use_on_policy_kl_approximation: false`,
# `token_level_loss: false` (sequence-level), ratio clip 0.2, no truncated IS,
# `use_leave_one_out_baseline: true`, `normalize_rewards: false`; on-policy (prev = generation
# = the check's `old_logps`).


def _nemo_calculate_kl(logprobs, logprobs_reference, weights=None, clamp_detaches=False):
    logr = logprobs_reference - logprobs
    logr_clamped = logr.clamp(min=-20.0, max=20.0)
    if weights is not None and clamp_detaches:
        weights = torch.where(logr == logr_clamped, weights, weights.detach())
    logr = logr_clamped
    kl = torch.exp(logr) - 1 - logr
    if weights is not None and clamp_detaches:
        kl = weights * kl
    return kl.clamp(min=-10.0, max=10.0)


def _nemo_loss(logps, batch, version):
    token_mask = batch.completion_mask
    sample_mask = torch.ones(token_mask.shape[0])
    curr_logprobs = torch.where(token_mask > 0, logps, 0.0)
    prev_logprobs = torch.where(token_mask > 0, batch.old_logps, 0.0)
    reference = torch.where(token_mask > 0, batch.ref_logps, 0.0)
    r = _groups(batch)
    G = batch.group_size
    baseline = ((r.sum(1, keepdim=True) - r) / (G - 1)).reshape(-1)
    advantages = (batch.rewards - baseline).unsqueeze(-1).expand_as(curr_logprobs)
    if version == "33bce20d7^":
        kl_importance_weights = torch.ones_like(curr_logprobs)
        kl = kl_importance_weights * batch.beta * _nemo_calculate_kl(curr_logprobs, reference)
    elif version == "33bce20d7":
        kl_importance_weights = torch.exp(curr_logprobs - curr_logprobs.detach())
        kl_importance_weights = torch.nan_to_num(
            kl_importance_weights, nan=0.0, posinf=0.0, neginf=0.0
        )
        kl = kl_importance_weights * batch.beta * _nemo_calculate_kl(curr_logprobs, reference)
    else:  # 2206ae11f
        kl_importance_weights = torch.exp(curr_logprobs - curr_logprobs.detach())
        kl_importance_weights = torch.nan_to_num(
            kl_importance_weights, nan=0.0, posinf=0.0, neginf=0.0
        )
        kl = batch.beta * _nemo_calculate_kl(curr_logprobs, reference, kl_importance_weights, True)

    def seq_level(x):
        per_seq = (x * token_mask).sum(-1) / token_mask.sum(-1)
        return (per_seq * sample_mask).sum() / sample_mask.sum()

    kl = seq_level(kl)
    ratios = (curr_logprobs - prev_logprobs).exp()
    ratios_clamped = ratios.clamp(1.0 - 0.2, 1.0 + 0.2)
    loss1 = -advantages * ratios
    loss2 = -advantages * ratios_clamped
    clip_loss = torch.max(loss1, loss2)
    importance_weights_to_use = torch.ones_like(prev_logprobs)  # no IS correction configured
    actor_loss = seq_level(importance_weights_to_use * clip_loss)
    return actor_loss + kl


def nemo_kl_score_buggy(logps, batch):
    """NeMo-RL before 33bce20d7: the k3 term's weight 1 (no score-function part)."""
    return _nemo_loss(logps, batch, "33bce20d7^")


def nemo_kl_score_fixed(logps, batch):
    """NeMo-RL at 33bce20d7: the k3 term × exp(ℓ − sg ℓ)."""
    return _nemo_loss(logps, batch, "33bce20d7")


def nemo_kl_clamp_buggy(logps, batch):
    """NeMo-RL before 2206ae11f (= at 33bce20d7): the weight outside `calculate_kl`."""
    return _nemo_loss(logps, batch, "33bce20d7")


def nemo_kl_clamp_fixed(logps, batch):
    """NeMo-RL at 2206ae11f: the weight inside `calculate_kl`, detached where the clamp binds."""
    return _nemo_loss(logps, batch, "2206ae11f")


# ── AReaL: areal/utils/functional/functional.py, areal/trainer/ppo/actor.py ─────────────────
#
# inclusionAI/AReaL b2fb234d927a0740f3cea4c8cc22c46fa3154686 (2026-05-19, #1346): the 2D padded
# branch of `_compute_sequence_level_ratio_and_advantages` summed every position's advantage,
# masked ones too. AReaL's rows are prompt + completion; `_compute_advantages` (GAE, γ = λ = 1,
# no values, `kl_ctl` 0, no `adv_norm`) carries the advantage back through the prompt's
# positions. Settings: `importance_sampling_level: sequence` (GSPO), ε = 0.2, on-policy.


def _areal_rows(logps, batch):
    """AReaL's 2D layout: [N, P + W], position t holding ln π of token t + 1."""
    N, W = logps.shape
    P = batch.prompt_ids.shape[1]
    loss_mask = torch.zeros(N, P + W)
    loss_mask[:, P:] = batch.completion_mask
    rolled_mask = torch.roll(loss_mask, shifts=-1, dims=-1)
    lp = torch.cat([torch.zeros(N, P - 1), torch.where(batch.completion_mask > 0, logps, 0.0),
                    torch.zeros(N, 1)], dim=1)  # fmt: skip
    attention = torch.cat([torch.ones(N, P), batch.completion_mask], dim=1)
    return lp, rolled_mask, attention


def _areal_advantages(batch, rolled_mask, attention):
    bs, max_seqlen = rolled_mask.shape
    idx = torch.arange(bs)
    seqlens = attention.sum(-1).long()
    rewards = torch.zeros(bs, max_seqlen)
    rewards[idx, seqlens - 1] = 0
    rewards[idx, torch.clip(seqlens - 2, min=0)] += batch.rewards
    values = torch.zeros_like(rewards)
    reversed_adv = [torch.zeros(bs)]
    lastgaelam = 0
    nextvalues = values[:, max_seqlen - 1] * (seqlens == max_seqlen)
    for t in reversed(range(max_seqlen - 1)):
        delta = rewards[:, t] + nextvalues - values[:, t]
        newgaelam = delta + lastgaelam
        mask = rolled_mask[:, t]
        nextvalues = nextvalues * (1 - mask) + values[:, t] * mask
        lastgaelam = lastgaelam * (1 - mask) + newgaelam * mask
        reversed_adv.append(lastgaelam)
    return torch.stack(reversed_adv[::-1], dim=1)


def _areal_gspo(logps, batch, fixed, eps_clip=0.2):
    logprobs, rolled_mask, attention = _areal_rows(logps, batch)
    advantages = _areal_advantages(batch, rolled_mask, attention)
    loss_mask = rolled_mask.bool()
    loss_mask_count = loss_mask.count_nonzero()
    log_ratio = logprobs - logprobs.detach()
    seq_log_ratio_mean = torch.where(loss_mask, log_ratio, 0.0).sum(dim=1) / loss_mask.sum(
        dim=1
    ).clamp(min=1)
    ratio = torch.exp(seq_log_ratio_mean.unsqueeze(1).expand_as(log_ratio))
    ratio = torch.where(loss_mask, ratio, 0.0)
    seq_lengths = loss_mask.sum(dim=-1, keepdim=True).clamp(min=1)
    if fixed:
        masked_advantages = torch.where(loss_mask, advantages, 0.0)
        advantages = (masked_advantages.sum(dim=-1, keepdim=True) / seq_lengths).expand_as(
            log_ratio
        )
        advantages = torch.where(loss_mask, advantages, 0.0)
    else:
        advantages = (advantages.sum(dim=-1, keepdim=True) / seq_lengths).expand_as(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1.0 - eps_clip, 1.0 + eps_clip)
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * clipped_ratio
    pg_loss = torch.max(pg_loss1, pg_loss2)
    return torch.where(loss_mask, pg_loss, 0).sum() / loss_mask_count


def areal_seq_advantage_buggy(logps, batch):
    """AReaL before b2fb234d9: each sequence's advantage Σ over all positions ÷ its tokens."""
    return _areal_gspo(logps, batch, fixed=False)


def areal_seq_advantage_fixed(logps, batch):
    """AReaL at b2fb234d9: Σ over the loss positions only."""
    return _areal_gspo(logps, batch, fixed=True)


# ── slime: slime/utils/ppo_utils.py ─────────────────────────────────────────────────────────
#
# THUDM/slime 166441911f2f59428100323d95fb957a5057cec8 (2026-01-18, #1372): in
# `get_reinforce_plus_plus_returns` the KL of tokens outside the loss mask entered the returns.
# Settings: `advantage_estimator: reinforce_plus_plus`, γ = 1, the k1 KL of the check's
# reference at the objective's β, one rank (no context parallelism); the advantages are these
# returns (REINFORCE++'s whitening is left out: the pair differs before it).


def _slime_rpp(logps, batch, masked):
    m = batch.completion_mask
    lp = torch.where(m > 0, logps, 0.0)
    kl = (lp - torch.where(m > 0, batch.ref_logps, 0.0)).detach()
    returns = []
    for i in range(lp.shape[0]):
        full_mask = m[i]
        full_kl = kl[i]
        if masked:
            full_kl = full_kl * full_mask
        token_level_rewards = -batch.beta * full_kl
        last_idx = full_mask.nonzero(as_tuple=True)[0][-1]
        token_level_rewards[last_idx] += batch.rewards[i]
        running = 0.0
        out = torch.zeros_like(token_level_rewards)
        for t in reversed(range(token_level_rewards.size(0))):
            running = token_level_rewards[t] + running
            out[t] = running
        returns.append(out)
    returns = torch.stack(returns)
    return -(returns * lp * m).sum() / lp.shape[0]


def slime_rpp_kl_mask_buggy(logps, batch):
    """slime before 166441911: −β·KL of every position in the returns."""
    return _slime_rpp(logps, batch, masked=False)


def slime_rpp_kl_mask_fixed(logps, batch):
    """slime at 166441911: −β·KL × the loss mask in the returns."""
    return _slime_rpp(logps, batch, masked=True)


# huggingface/trl d14f7f3eb274c77490cf1fc34b2d379288adb794 (2025-01-24, #2647): the Trainer did
# not divide GRPO's loss by the accumulation steps (`model_accepts_loss_kwargs` left True), so M
# micro-batches summed M per-batch means. Settings: `gradient_accumulation_steps: 2`, β = 0
# (no reference term), one iteration; the loss of `compute_loss` at d14f7f3eb.


def _trl_grpo_2647(per_token_logps, batch):
    completion_mask = batch.completion_mask
    G = batch.group_size
    mean_grouped = batch.rewards.view(-1, G).mean(dim=1).repeat_interleave(G, dim=0)
    std_grouped = batch.rewards.view(-1, G).std(dim=1).repeat_interleave(G, dim=0)
    advantages = (batch.rewards - mean_grouped) / (std_grouped + 1e-4)
    per_token_loss = torch.exp(per_token_logps - per_token_logps.detach()) * advantages.unsqueeze(1)
    per_token_loss = -per_token_loss
    return ((per_token_loss * completion_mask).sum(dim=1) / completion_mask.sum(dim=1)).mean()


def trl_accumulation_buggy(logps, batch):
    """TRL before d14f7f3eb: each micro-batch's loss backpropagated undivided."""
    return _trl_grpo_2647(logps, batch)


def trl_accumulation_fixed(logps, batch):
    """TRL at d14f7f3eb: the Trainer divides each micro-batch's loss by the 2 steps."""
    return _trl_grpo_2647(logps, batch) / 2


# ══ Ported after the check's reading was set: the held-out cases ═══════════════════════════════

# ── PipelineRL: pipelinerl/finetune/rl/__init__.py ──────────────────────────────────────────
#
# ServiceNow/PipelineRL f90d0efcd5f539f2d70ce68763ca017faddc0128 (2025-06-22): `populate_rl_data`
# took the group's statistics from the rows with `rollout_index == 0` (the group's first rollout
# alone) where it meant `step_index == 0` (each rollout's first step). Settings: `algo: grpo`,
# `divide_advantage_by_std: true` and `use_advantages: true` (the defaults), `kl_coef: 0`,
# `entropy_bonus: 0`, `group_normalization: false`, `overlong_filtering: false`,
# `batch_size` = N (the config's "required for normalization"), unpacked rows, on-policy
# (`old_logprobs` = the trainer's, detached). Single turn: every completion is one step
# (`step_index` 0) and its `rollout_index` its place in the group (0 … G − 1, as the actor numbers
# a group's attempts). The frames' operations (pandas' groupby mean and std, std with one degree
# of freedom and NaN on one row) are carried out on tensors, one line for each; the entropy
# bonus is left out (coefficient 0; the logps form has no logits).


def _pipelinerl_advantages(batch, keep_rows_by):
    """`populate_rl_data`'s steps 1–2: the group's mean and std over the kept rows, then
    (reward − mean)/(nan_to_num(std) + 1e-4) for every row."""
    n, G = batch.rewards.shape[0], batch.group_size
    group_id = batch.group_ids
    rollout_index = torch.arange(n) % G
    step_index = torch.zeros(n, dtype=torch.long)
    rollout_reward = batch.rewards.double()  # rewards[0]: the same reward on every token
    if keep_rows_by == "rollout_index":  # df_stats[df_stats["rollout_index"] == 0]
        kept = rollout_index == 0
    else:  # df_stats[df_stats["step_index"] == 0]
        kept = step_index == 0
    mean = torch.empty(n, dtype=torch.float64)
    std = torch.empty(n, dtype=torch.float64)
    for g in group_id.unique():  # groupby("group_id").agg(mean, std)
        rows = kept & (group_id == g)
        r = rollout_reward[rows]
        mean[group_id == g] = r.mean()
        std[group_id == g] = r.std() if r.numel() > 1 else float("nan")  # pandas: NaN on one row
    advantages = (rollout_reward - mean) / (torch.nan_to_num(std, nan=0.0) + 1e-4)
    return advantages.float()


def _pipelinerl_rl_step(logps, batch, advantages, epsilon=0.2, kl_coef=0.0):
    """`rl_step`, `algo: grpo`: min(r·A, clip(r)·A) − kl_coef·k3, each token × 1/batch_size."""
    masks_shifted = batch.completion_mask
    new_logprobs = torch.where(masks_shifted > 0, logps, 0.0)
    old_logprobs = new_logprobs.detach()
    ref_logprobs = torch.where(masks_shifted > 0, batch.ref_logps, 0.0)
    advantages = advantages.unsqueeze(1).expand_as(new_logprobs)
    tokens_weights = torch.ones_like(new_logprobs) / masks_shifted.shape[0]
    ratio_new_old = torch.exp(new_logprobs - old_logprobs)
    log_ratio_ref_new = ref_logprobs - new_logprobs
    log_ratio_ref_new_clamp = torch.clamp(log_ratio_ref_new, min=-10, max=10)
    approx_kl = torch.exp(log_ratio_ref_new_clamp) - log_ratio_ref_new_clamp - 1
    surr1 = ratio_new_old * advantages
    clamped_ratio = torch.clamp(ratio_new_old, 1 - epsilon, 1 + epsilon)
    surr2 = clamped_ratio * advantages
    policy_loss = torch.min(surr1, surr2)
    loss = policy_loss - kl_coef * approx_kl
    loss = loss * tokens_weights
    return -(loss * masks_shifted).sum()


def pipelinerl_group_stats_buggy(logps, batch):
    """PipelineRL before f90d0ef: the group's mean and std from its first rollout alone."""
    return _pipelinerl_rl_step(logps, batch, _pipelinerl_advantages(batch, "rollout_index"))


def pipelinerl_group_stats_fixed(logps, batch):
    """PipelineRL at f90d0ef: the group's mean and std from every rollout's first step."""
    return _pipelinerl_rl_step(logps, batch, _pipelinerl_advantages(batch, "step_index"))


# ── ms-swift: swift/rlhf_trainers/grpo_trainer.py, swift/trainers/rlhf_trainer/grpo_trainer.py ─
#
# modelscope/ms-swift a7986dca16627101cc245f3a954c7562d2f2c62f (2026-01-22, #7852): SAPO's soft
# gate σ(τ(rₜ − 1)) gained the factor 4/τ (its slope at rₜ = 1 is τ/4). Settings: `loss_type:
# sapo`, `tau_pos: 1.0`, `tau_neg: 1.05` (the defaults), `advantage_estimator: rloo`,
# `scale_rewards: none`, `beta: 0`, `importance_sampling_level: token`, on-policy (old :=
# per_token_logps.detach()), no rollout importance sampling, no entropy mask, no off-policy
# sequence mask, one process.


def _msswift_rloo_none(batch):
    """`_compute_advantages`, grouped mode, `advantage_estimator: rloo`, `scale_rewards: none`."""
    rewards = batch.rewards
    K = batch.group_size
    grouped_rewards = rewards.view(-1, K)
    group_rewards_mean = grouped_rewards.mean(dim=1).repeat_interleave(K)
    return rewards * K / (K - 1) - group_rewards_mean * K / (K - 1)


def _msswift_sapo(logps, batch, fixed, tau_pos=1.0, tau_neg=1.05):
    completion_mask = batch.completion_mask
    per_token_logps = torch.where(completion_mask > 0, logps, 0.0)
    advantages = _msswift_rloo_none(batch)
    old_per_token_logps = per_token_logps.detach()
    log_ratio = per_token_logps - old_per_token_logps
    coef_1 = torch.exp(log_ratio)
    advantages_expanded = advantages.unsqueeze(1)
    gate_pos = torch.sigmoid(tau_pos * (coef_1 - 1))
    gate_neg = torch.sigmoid(tau_neg * (coef_1 - 1))
    if fixed:
        gate_pos = gate_pos * (4.0 / tau_pos)
        gate_neg = gate_neg * (4.0 / tau_neg)
    is_positive = advantages_expanded > 0
    soft_gate = torch.where(is_positive, gate_pos, gate_neg)
    per_token_loss = -soft_gate * advantages_expanded
    per_seq = (per_token_loss * completion_mask).sum(-1) / completion_mask.sum(-1).clamp(min=1.0)
    return per_seq.mean()


def msswift_sapo_gate_buggy(logps, batch):
    """ms-swift before a7986dca1: the gate σ(τ(rₜ − 1)), slope τ/4 at rₜ = 1."""
    return _msswift_sapo(logps, batch, fixed=False)


def msswift_sapo_gate_fixed(logps, batch):
    """ms-swift at a7986dca1: the gate σ(τ(rₜ − 1))·4/τ, slope 1 at rₜ = 1."""
    return _msswift_sapo(logps, batch, fixed=True)


# modelscope/ms-swift ab85a61defb11f6607a53373f0acaabc081621ff (2025-09-29, #6014): the sequence
# log-weight `(log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0).unsqueeze(-1)` divided an
# [N] tensor by an [N, 1] one; the fix moves `unsqueeze(-1)` outside the quotient. Settings:
# `importance_sampling_level: sequence` (GSPO), `loss_type: grpo`, `scale_rewards: false`,
# `beta: 0`, ε 0.2, `delta: None`, not padding-free, no overlong filter, no entropy mask,
# on-policy, one process.


def _msswift_gspo_6014(logps, batch, fixed, epsilon=0.2):
    completion_mask = batch.completion_mask
    per_token_logps = torch.where(completion_mask > 0, logps, 0.0)
    rewards = batch.rewards
    grouped_rewards = rewards.view(-1, batch.group_size)
    group_rewards_mean = grouped_rewards.mean(dim=1).repeat_interleave(batch.group_size)
    advantages = rewards - group_rewards_mean  # normalize_advantages: scale_rewards false
    old_per_token_logps = per_token_logps.detach()
    log_ratio = per_token_logps - old_per_token_logps
    if fixed:
        seq_level_log_weights = (
            (log_ratio * completion_mask).sum(-1) / completion_mask.sum(-1).clamp(min=1.0)
        ).unsqueeze(-1)
    else:
        seq_level_log_weights = (log_ratio * completion_mask).sum(-1) / completion_mask.sum(
            -1
        ).clamp(min=1.0).unsqueeze(-1)
    log_importance_weights = seq_level_log_weights
    coef_1 = torch.exp(log_importance_weights)
    coef_2 = torch.clamp(coef_1, 1 - epsilon, 1 + epsilon)
    per_token_loss1 = coef_1 * advantages.unsqueeze(1)
    per_token_loss2 = coef_2 * advantages.unsqueeze(1)
    per_token_loss = -torch.min(per_token_loss1, per_token_loss2)
    per_seq = (per_token_loss * completion_mask).sum(-1) / completion_mask.sum(-1).clamp(min=1.0)
    return per_seq.mean()


def msswift_gspo_broadcast_buggy(logps, batch):
    """ms-swift before ab85a61de: the sequence log-weight broadcast to [N, N]."""
    return _msswift_gspo_6014(logps, batch, fixed=False)


def msswift_gspo_broadcast_fixed(logps, batch):
    """ms-swift at ab85a61de: the sequence log-weight [N, 1]."""
    return _msswift_gspo_6014(logps, batch, fixed=True)


# ── verl: verl/workers/actor/dp_actor.py (2025-02) ──────────────────────────────────────────
#
# volcengine/verl a65c9157bc0b85b64cd753de19f94e80a11bd871 (2025-02-01, #179): `update_policy`
# subtracted the KL loss (`policy_loss - kl_loss * kl_loss_coef`); the fix adds it. Settings:
# `adv_estimator: grpo`, `use_kl_loss: true`, `kl_loss_type: low_var_kl`, `kl_loss_coef` = the
# objective's β, `entropy_coeff: 0` (the entropy term left out: the logps form has no logits),
# `clip_ratio: 0.2`, one micro-batch per mini-batch (`gradient_accumulation` 1), on-policy.


def _verl_grpo_2025_02(batch, epsilon=1e-6):
    """`compute_grpo_outcome_advantage` at a65c9157's parent: (score − mean)/(std + ε) by uid."""
    scores = batch.rewards.clone()  # token_level_rewards.sum(dim=-1): the reward on one token
    index = batch.group_ids.tolist()
    id2score, id2mean, id2std = {}, {}, {}
    bsz = scores.shape[0]
    for i in range(bsz):
        id2score.setdefault(index[i], []).append(scores[i])
    for idx in id2score:
        if len(id2score[idx]) == 1:
            id2mean[idx] = torch.tensor(0.0)
            id2std[idx] = torch.tensor(1.0)
        else:
            id2mean[idx] = torch.mean(torch.tensor(id2score[idx]))
            id2std[idx] = torch.std(torch.tensor([id2score[idx]]))
    for i in range(bsz):
        scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
    return scores.unsqueeze(-1) * batch.completion_mask


def _verl_masked_mean(values, mask):
    return (values * mask).sum() / mask.sum()


def _verl_update_policy_179(logps, batch, kl_sign):
    response_mask = batch.completion_mask
    log_prob = torch.where(response_mask > 0, logps, 0.0)
    old_log_prob = log_prob.detach()
    advantages = _verl_grpo_2025_02(batch)
    negative_approx_kl = log_prob - old_log_prob
    ratio = torch.exp(negative_approx_kl)
    pg_losses = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - 0.2, 1.0 + 0.2)
    pg_loss = _verl_masked_mean(torch.max(pg_losses, pg_losses2), response_mask)
    policy_loss = pg_loss
    ref_log_prob = torch.where(response_mask > 0, batch.ref_logps, 0.0)
    kl = ref_log_prob - log_prob  # kl_penalty "low_var_kl"
    kld = torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)
    kl_loss = _verl_masked_mean(kld, response_mask)
    policy_loss = policy_loss + kl_sign * kl_loss * batch.beta
    return policy_loss / 1  # gradient_accumulation = mini-batch ÷ micro-batch = 1


def verl_kl_sign_buggy(logps, batch):
    """verl before a65c9157: policy_loss − kl_loss · kl_loss_coef."""
    return _verl_update_policy_179(logps, batch, kl_sign=-1.0)


def verl_kl_sign_fixed(logps, batch):
    """verl at a65c9157: policy_loss + kl_loss · kl_loss_coef."""
    return _verl_update_policy_179(logps, batch, kl_sign=+1.0)


# ── OpenRLHF: openrlhf/models/loss.py (2025-07) ─────────────────────────────────────────────
#
# OpenRLHF/OpenRLHF 1b23ecf0b17f0842138f9a6a3216fa21baff5355 (2025-07-31): `PolicyLoss` with
# `policy_loss_type: gspo` took the token-level mean over the batch (`token_level_loss` True, the
# default the actor leaves); the fix sets it False for GSPO (a mean per sequence, then over the
# sequences). Settings: `advantage_estimator: rloo`, `init_kl_coef: 0`, γ = 1, ε 0.2 both sides,
# no dual clip, on-policy, one rank. The RLOO rewards and the returns are the parent's
# (`rloo` reward shaping, `compute_reward` at KL coefficient 0, `get_cumulative_returns`): the
# same operations as `_openrlhf_rloo_rewards(…, False)` and `_openrlhf_returns` above.


def _openrlhf_gspo_policy_loss(log_probs, old_log_probs, advantages, action_mask, token_level_loss,
                               eps=0.2):  # fmt: skip
    log_ratio = log_probs - old_log_probs
    ratio = (log_ratio * action_mask).sum(dim=-1) / action_mask.sum(dim=-1)
    ratio = ratio.exp().unsqueeze(-1) * action_mask
    surr1 = ratio * advantages
    surr2 = ratio.clamp(1 - eps, 1 + eps) * advantages
    loss = -torch.min(surr1, surr2)
    if token_level_loss:
        return (loss * action_mask).sum() / action_mask.sum()
    return ((loss * action_mask).sum(dim=-1) / action_mask.sum(dim=-1)).mean()


def _openrlhf_gspo(logps, batch, token_level_loss):
    m = batch.completion_mask
    lp = torch.where(m > 0, logps, 0.0)
    adv = _openrlhf_returns(_openrlhf_rloo_rewards(batch, False), m)
    return _openrlhf_gspo_policy_loss(lp, lp.detach(), adv, m, token_level_loss)


def openrlhf_gspo_loss_buggy(logps, batch):
    """OpenRLHF before 1b23ecf0: GSPO's loss a token mean over the batch."""
    return _openrlhf_gspo(logps, batch, token_level_loss=True)


def openrlhf_gspo_loss_fixed(logps, batch):
    """OpenRLHF at 1b23ecf0: GSPO's loss a mean per sequence, then over the sequences."""
    return _openrlhf_gspo(logps, batch, token_level_loss=False)


# ── TRL: trl/trainer/grpo_trainer.py (2025-02, 2026-07) ─────────────────────────────────────
#
# huggingface/trl 293b62095099561a6a2e27d2d521c3cee709a1f2 (2025-02-17, #2881): "Fix loss
# normalization": the mean per sequence then over the sequences became one mean over the batch's
# tokens. Settings: β = the objective's (0 on `length` and `difficulty`: the k3 term is there and
# weighs nothing), one iteration, one process, no accumulation.


def _trl_grpo_2881(per_token_logps, batch, token_mean):
    completion_mask = batch.completion_mask
    G = batch.group_size
    rewards = batch.rewards
    mean_grouped_rewards = rewards.view(-1, G).mean(dim=1)
    std_grouped_rewards = rewards.view(-1, G).std(dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(G, dim=0)
    std_grouped_rewards = std_grouped_rewards.repeat_interleave(G, dim=0)
    advantages = (rewards - mean_grouped_rewards) / (std_grouped_rewards + 1e-4)
    per_token_logps = torch.where(completion_mask > 0, per_token_logps, 0.0)
    ref_per_token_logps = torch.where(completion_mask > 0, batch.ref_logps, 0.0)
    per_token_kl = (
        torch.exp(ref_per_token_logps - per_token_logps)
        - (ref_per_token_logps - per_token_logps)
        - 1
    )
    per_token_loss = torch.exp(per_token_logps - per_token_logps.detach()) * advantages.unsqueeze(1)
    per_token_loss = -(per_token_loss - batch.beta * per_token_kl)
    if token_mean:
        return (per_token_loss * completion_mask).sum() / completion_mask.sum()
    return ((per_token_loss * completion_mask).sum(dim=1) / completion_mask.sum(dim=1)).mean()


def trl_loss_normalisation_buggy(logps, batch):
    """TRL before 293b62095: each sequence's token mean, then the mean over sequences."""
    return _trl_grpo_2881(logps, batch, token_mean=False)


def trl_loss_normalisation_fixed(logps, batch):
    """TRL at 293b62095: one token mean over the batch."""
    return _trl_grpo_2881(logps, batch, token_mean=True)


# huggingface/trl 7c1fa85ad5d1878edef7a795c74e91749961b152 (2026-07-18, #6439): DAPO's
# normaliser `num_items_in_batch` was the batch's completion tokens counted before
# `mask_truncated_completions` zeroed the truncated ones; the fix counts the loss mask after it.
# Settings: `loss_type: dapo`, `mask_truncated_completions: true`, `scale_rewards: none`,
# `multi_objective_aggregation: sum_then_normalize`, β = 0, ε = ε_high = 0.2,
# `importance_sampling_level: token`, no tools, no vLLM, one process, no entropy mask, no
# off-policy mask, on-policy. A completion is truncated where its last real token (the unpadded
# list's `ids[-1]`) is neither EOS nor the pad token.


def _trl_dapo_6439(logps, batch, fixed, epsilon=0.2):
    completion_ids = batch.completion_ids
    real = batch.completion_mask
    completion_lengths = real.sum(1)
    total_completion_tokens = completion_lengths.sum()  # = num_items_in_batch (the parent's)
    G = batch.group_size
    rewards = batch.rewards
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, G), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(G, dim=0)
    advantages = rewards - mean_grouped_rewards  # scale_rewards "none"
    advantages = torch.nan_to_num(advantages, nan=0.0)
    eos_and_pad = [batch.eos_token_id, batch.pad_id]
    last = completion_ids.gather(1, (completion_lengths.long() - 1).clamp(min=0).unsqueeze(1))
    is_truncated = torch.tensor([int(ids) not in eos_and_pad for ids in last.squeeze(1)])
    completion_mask = real * (~is_truncated).unsqueeze(1).int()
    if fixed:
        loss_mask = completion_mask
        num_items_in_batch = loss_mask.sum()
    else:
        num_items_in_batch = total_completion_tokens
    mask = completion_mask
    per_token_logps = torch.where(real > 0, logps, 0.0)
    old_per_token_logps = per_token_logps.detach()
    coef_1 = torch.exp(per_token_logps - old_per_token_logps)
    coef_2 = torch.clamp(coef_1, 1 - epsilon, 1 + epsilon)
    per_token_loss1 = coef_1 * advantages.unsqueeze(1)
    per_token_loss2 = coef_2 * advantages.unsqueeze(1)
    per_token_loss = -torch.min(per_token_loss1, per_token_loss2)
    if fixed:
        normalizer = num_items_in_batch.clamp(min=1.0) / 1
    else:
        normalizer = num_items_in_batch / 1
    return (per_token_loss * mask).sum() / normalizer


def trl_truncated_normaliser_buggy(logps, batch):
    """TRL before 7c1fa85ad: DAPO ÷ every completion token, the masked truncated ones too."""
    return _trl_dapo_6439(logps, batch, fixed=False)


def trl_truncated_normaliser_fixed(logps, batch):
    """TRL at 7c1fa85ad: DAPO ÷ the tokens of the loss mask."""
    return _trl_dapo_6439(logps, batch, fixed=True)


# ── ROLL: roll/utils/functionals.py, roll/pipeline/rlvr/actor_worker.py ─────────────────────
#
# alibaba/ROLL d8d7e78f14726357e57ed26672f8b8579824b65b (2025-08-06): in `agg_loss`,
# "seq-mean-token-mean" divided each sequence's token mean by its length once more, and
# "seq-mean-token-sum" took a token mean where its name (and the fix) says a token sum.
# Settings: `adv_estimator: grpo` with `reward_shift: true` (the group's mean subtracted, no ÷
# std), γ = 1, no whitening, no reward or advantage clip, `importance_sampling: token`,
# `pg_clip: 0.2`, `dual_clip_loss: false`, `use_kl_loss: false`, `entropy_loss_coef: 0`,
# `rl_loss_coef: 1`, `postive_loss_coef: 0`, `use_topr_neg_loss_coef: 0`, no difficulty or
# length loss weight (every sample weight N/(N + 1e-8)), on-policy.


def _roll_masked_mean(tensor, mask, dim=None):
    if dim is not None:
        mask_sum = mask.sum(axis=dim)
        mean = (tensor * mask).sum(axis=dim) / (mask_sum + 1e-8)
        return torch.where(mask_sum > 0, mean, torch.zeros_like(mask_sum))
    return (tensor * mask).sum() / (mask.sum() + 1e-8)


def _roll_masked_sum(tensor, mask, dim=None):
    mask_sum = mask.sum(axis=dim)
    return torch.where(mask_sum > 0, (tensor * mask).sum(axis=dim), torch.zeros_like(mask_sum))


def _roll_agg_loss(loss_mat, loss_mask, loss_agg_mode, weights, fixed):
    """`agg_loss` at d8d7e78f's parent (``fixed`` False) and at it, the two modes ported."""
    valid_samples = torch.any(loss_mask > 0, dim=-1).float()
    if loss_agg_mode == "seq-mean-token-sum":
        if fixed:
            seq_losses = _roll_masked_sum(loss_mat, loss_mask, dim=-1)
        else:
            seq_losses = _roll_masked_mean(loss_mat, loss_mask, dim=-1)
    elif loss_agg_mode == "seq-mean-token-mean":
        seq_losses = _roll_masked_mean(loss_mat, loss_mask, dim=-1)
        if not fixed:
            seq_losses = seq_losses / (torch.sum(loss_mask, dim=-1) + 1e-8)
    else:
        raise ValueError(loss_agg_mode)
    return (seq_losses * weights * valid_samples).sum() / (valid_samples.sum() + 1e-8)


def _roll_advantages(batch):
    """`group_reward_norm` (div_std False), `expand_to_token_level` (the reward on the last
    response token), `compute_reinforce_return` (γ = 1) × the response mask."""
    n = batch.group_size
    reshape_reward = batch.rewards.reshape(-1, n)
    reshape_reward = reshape_reward - reshape_reward.mean(dim=-1, keepdim=True)
    response_level_rewards = reshape_reward.reshape(-1)
    response_mask = batch.completion_mask
    last = (response_mask.sum(-1).long() - 1).clamp(min=0)
    token_level_rewards = torch.zeros_like(response_mask)
    token_level_rewards[torch.arange(len(last)), last] = response_level_rewards
    token_level_rewards = token_level_rewards * response_mask
    gen_len = token_level_rewards.shape[-1]
    cumulative_reward = 0
    advantages_reversed = []
    for t in reversed(range(gen_len)):
        cumulative_reward = token_level_rewards[:, t] + 1.0 * cumulative_reward
        advantages_reversed.append(cumulative_reward)
    advantages = torch.stack(advantages_reversed[::-1], dim=1)
    return advantages * response_mask


def _roll_loss(logps, batch, loss_agg_mode, fixed, pg_clip=0.2):
    final_response_mask = batch.completion_mask
    log_probs = torch.where(final_response_mask > 0, logps, 0.0)
    old_log_probs = log_probs.detach()
    advantages = _roll_advantages(batch)
    batch_size = final_response_mask.shape[0]
    sample_weights = torch.ones(batch_size)
    sample_weights = sample_weights * (batch_size / (sample_weights.sum() + 1e-8))
    ratio = (log_probs - old_log_probs).exp()
    surr1 = ratio * advantages
    surr2 = ratio.clamp(1 - pg_clip, 1 + pg_clip) * advantages
    loss = -torch.min(surr1, surr2)
    weighted_pg_loss = _roll_agg_loss(
        loss, final_response_mask, loss_agg_mode, sample_weights, fixed
    )
    total_loss = weighted_pg_loss
    return total_loss * 1.0  # rl_loss_coef


def roll_agg_token_mean_buggy(logps, batch):
    """ROLL before d8d7e78f, `loss_agg_mode: seq-mean-token-mean`: ÷ the length twice."""
    return _roll_loss(logps, batch, "seq-mean-token-mean", fixed=False)


def roll_agg_token_mean_fixed(logps, batch):
    """ROLL at d8d7e78f, `loss_agg_mode: seq-mean-token-mean`: ÷ the length once."""
    return _roll_loss(logps, batch, "seq-mean-token-mean", fixed=True)


def roll_agg_token_sum_buggy(logps, batch):
    """ROLL before d8d7e78f, `loss_agg_mode: seq-mean-token-sum`: a token mean."""
    return _roll_loss(logps, batch, "seq-mean-token-sum", fixed=False)


def roll_agg_token_sum_fixed(logps, batch):
    """ROLL at d8d7e78f, `loss_agg_mode: seq-mean-token-sum`: a token sum."""
    return _roll_loss(logps, batch, "seq-mean-token-sum", fixed=True)
