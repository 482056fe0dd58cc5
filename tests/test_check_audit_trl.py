"""The credit audit on TRL's own loss (slow: TRL is installed by ``make peers``).

GRPOTrainer's vLLM importance-sampling correction, run as configured through the check's TRL
adapter on the off-policy problems, is read by the audit from TRL's fused-head log-probs: the
per-token ratio, the PPO clip at TRL's ε = 0.2, the sampler correction at the configured C,
and Dr. GRPO's constant, on every batch; each name's fix is TRL's key.
"""

from __future__ import annotations

import numpy as np
import pytest

from eligibility.check import frameworks, user
from eligibility.check.audit import Recorder, audit
from eligibility.check.audit.tap import Tap
from eligibility.check.fixes import fix
from eligibility.check.offpolicy import _audit_scales, _draws, _problem

pytestmark = pytest.mark.slow

BASE = {"trainer": "grpo", "loss_type": "dr_grpo", "scale_rewards": "none", "beta": 0.0}
CASES = {
    "sequence_truncate": (
        {"vllm_importance_sampling_mode": "sequence_truncate",
         "vllm_importance_sampling_clip_max": 0.5},
        ["per-token-ratio", "truncation-bias", "clipping-bias", "constant-normaliser"],
        "C = 0.5",
    ),
    "token_mask": (
        {"vllm_importance_sampling_mode": "token_mask", "vllm_importance_sampling_clip_max": 2.0},
        ["per-token-ratio", "per-token-sampler-weight", "clipping-bias", "masking-bias",
         "constant-normaliser"],
        "C = 2",
    ),
}  # fmt: skip


@pytest.mark.parametrize("distance", ["near", "far"])
@pytest.mark.parametrize("mode", CASES)
def test_trls_sampler_correction_is_read_by_its_keys(mode, distance):
    pytest.importorskip("trl")
    keys, names, bound = CASES[mode]
    fn, form = frameworks.adapt("trl", frameworks.load_config({**BASE, **keys}), "off-policy")
    assert form == "model"
    from eligibility.lab.sequence.handed import policy_model

    problem = _problem(distance)
    draws = _draws(problem, 12, np.random.default_rng(0))
    hf = policy_model(problem.model, problem.base.eos_token_id)
    params = list(problem.model.parameters())
    theta = [p.detach().clone() for p in params]
    recorder = Recorder(scales=_audit_scales(problem))
    for k, d in enumerate(draws):
        user.reset_policy(params, theta)
        batch = problem.batch(d)
        with Tap(model=True) as tap:
            user.call(fn, (hf, batch), params, -1.0, theta, tap=tap)
        recorder.completions([(batch, tap, 1.0)], k, truncated=problem.base.table.truncated[d.rows])
    found = audit(recorder.seen, recorder.scales)
    assert [f.name for f in found.findings] == names, found
    assert "ε = 0.2" in next(f.where for f in found.findings if f.name == "clipping-bias")
    said = next(f.where for f in found.findings if f.name in ("truncation-bias", "masking-bias"))
    assert bound in said
    assert "vllm_importance_sampling" in fix(names[1], framework="trl")  # the keys to change
