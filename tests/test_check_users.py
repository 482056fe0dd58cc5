"""Eight losses written as users write them (tests/check_users/), each read by the check.

A TRL-style per-token helper on a transformers model, a step that calls backward() and
optimizer.step() itself, advantages in their own function, Dr. GRPO, DAPO, GSPO and a
sequence TIS (off the policy), a k3 KL, and three planted bugs: each gets its names and a fix
that, applied (the file's ``fixed``), makes the check pass. Truth: the exact problems' ∇J.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from eligibility.check import check  # noqa: E402
from eligibility.check.report import report_text  # noqa: E402

USERS = Path(__file__).resolve().parent / "check_users"
SEQ = {"sequence": True}
NO_KL = {"sequence": True, "kl": "none"}


def _read(report):
    return {p.problem: (p.verdict, p.diagnosis) for p in report.problems}


CASES = [  # (file:function, options, what each problem reads, the fixed function, its options)
    ("trl_helper.py:loss", {**SEQ, "form": "model", "problem": "length,difficulty"},
     ("biased", "std-normalised, length-normalised"),
     "trl_helper.py:fixed", {"allow_scale": True}),
    ("dapo.py:loss", {**NO_KL},
     ("biased", "std-normalised, batch-dependent-normaliser"),
     "dapo.py:fixed", {"allow_scale": True}),
    ("dr_grpo.py:loss", {**NO_KL},
     ("scaled", "self-including-mean, constant-normaliser"),
     "dr_grpo.py:loss", {"allow_scale": True}),
    ("k3_kl.py:loss", {**SEQ, "problem": "kl"}, ("biased", "kl-forward"), "k3_kl.py:fixed", {}),
    ("planted.py:loss", {**SEQ, "problem": "kl"},
     ("biased", "eos-masked, length-normalised, kl-no-gradient"), "planted.py:fixed", {}),
    ("training_step.py:tight", {**SEQ, "form": "step", "problem": "length"},
     ("biased", "gradient-clipped"), "training_step.py:fixed", {}),
    ("gspo.py:gspo", {"off_policy": True, "problem": "near,far"},
     ("biased", "geometric-mean, clipping-bias, length-normalised, std-normalised"),
     "gspo.py:fixed", {}),
    ("gspo.py:tis", {"off_policy": True, "problem": "near,far"}, ("biased", "truncation-bias"),
     "gspo.py:fixed", {}),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("shown, options, reads, fixed, fix_options", CASES,
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_each_users_loss_reads_right_and_its_fix_passes(shown, options, reads, fixed, fix_options):
    report = check(f"{USERS}/{shown}", **options)
    assert set(_read(report).values()) == {reads}, _read(report)
    text = report_text(report)
    if reads[0] == "biased":
        assert all(f"{p}: fix " in text for p in _read(report)), text
    after = check(f"{USERS}/{fixed}", **options, **fix_options)
    assert after.passed, _read(after)


@pytest.mark.slow
def test_a_step_whose_clip_never_binds_says_so_and_own_advantages_pass():
    report = check(f"{USERS}/training_step.py:step", **SEQ, form="step", problem="length")
    (p,) = report.problems
    assert p.verdict == "unbiased" and p.details["clip"]["bound"] == 0
    assert "did not exercise the clip" in report_text(report)
    own = check(f"{USERS}/own_advantages.py:loss", **SEQ, problem="length",
                advantages=f"{USERS}/own_advantages.py:advantages")  # fmt: skip
    assert own.unbiased


@pytest.mark.slow
def test_a_step_that_never_steps_reads_the_step_forms_words():
    report = check(f"{USERS}/training_step.py:never_steps", **SEQ, form="step", problem="length")
    text = report_text(report)
    assert "your step left no update to read" in text and "call loss.backward()" in text
    assert "does not depend on the policy's parameters" not in text
