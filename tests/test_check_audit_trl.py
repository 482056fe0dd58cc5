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

CASES = {
    "sequence_truncate": (
        [
            "per-token-ratio",
            "truncation-bias",
            "clipping-bias",
            "self-including-mean",
            "constant-normaliser",
        ],
        "C = 0.5",
    ),
    "token_mask": (
        [
            "per-token-ratio",
            "per-token-sampler-weight",
            "clipping-bias",
            "masking-bias",
            "self-including-mean",
            "constant-normaliser",
        ],
        "C = 2",
    ),
}
"""examples/check/audit/trl_MODE.yaml (GRPOTrainer, dr_grpo, no std, vLLM's correction in
that mode) → the audit's names, and the bound it reads."""


@pytest.mark.parametrize("distance", ["near", "far"])
@pytest.mark.parametrize("mode", CASES)
def test_trls_sampler_correction_is_read_by_its_keys(mode, distance):
    pytest.importorskip("trl")
    names, bound = CASES[mode]
    config = frameworks.load_config(f"examples/check/audit/trl_{mode}.yaml")
    fn, form = frameworks.adapt("trl", config, "off-policy")
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
