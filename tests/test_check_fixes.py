"""Every name the check gives carries its fix, and each fix, applied, makes the check pass.

The examples are users' losses (tests/check_users/, examples/check/): each case applies the
line the report's fix names (a knob of ``knobs.py``, or the example's corrected function) and
runs the check again. Truth: the exact problems' ∇J, as for every verdict of the check.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from eligibility.check import check  # noqa: E402
from eligibility.check import fixes as fx  # noqa: E402
from eligibility.check.diagnosis import Diagnosis  # noqa: E402
from eligibility.check.family import FAMILIES, get  # noqa: E402
from eligibility.check.report import DIAGNOSES  # noqa: E402
from eligibility.cli import main  # noqa: E402

HERE = Path(__file__).resolve().parent
USERS = HERE / "check_users"
SEQ = HERE.parent / "examples" / "check" / "sequence"
OFF = HERE.parent / "examples" / "check" / "offpolicy" / "losses.py"
sys.path.insert(0, str(USERS))
import knobs  # noqa: E402

FRAMEWORK_ONLY = {"gradient-clipped"}


def test_every_name_of_every_family_has_a_fix():
    names = set(DIAGNOSES) | FRAMEWORK_ONLY
    for family in FAMILIES:
        names |= {n for n in get(family).diagnoses if ", " not in n}
    assert names <= set(fx.FIXES), names - set(fx.FIXES)
    assert all(fx.fix(n) for n in names)


def test_a_fix_is_said_for_the_form_and_the_framework():
    assert fx.fix("std-normalised", framework="trl") == "scale_rewards: none"
    assert fx.fix("length-normalised", framework="trl") == "loss_type: dr_grpo"
    assert fx.fix("batch-dependent-normaliser", framework="verl") == (
        "actor.loss_agg_mode: seq-mean-token-sum"
    )
    assert fx.fix("length-normalised", framework="openrlhf") == fx.FIXES["length-normalised"].loss
    assert "backward()" in fx.fix("no-gradient", form="step")
    assert "model(...).logits" in fx.fix("no-gradient", form="model")
    weight = (("kl-weight", "config 0.04, objective β = 0"),)
    said = fx.fixes_for(Diagnosis(("kl-weight", "std-normalised"), 1.1, weight), "logps")
    assert said == [
        f"kl-weight: {fx.FIXES['kl-weight'].loss}",
        f"std-normalised: {fx.FIXES['std-normalised'].loss}",
    ]


@pytest.mark.parametrize(
    "diagnosis, c, kw, words",
    [
        (("std-normalised", 1.07), None, {"G": 8}, "population standard deviation"),
        (("std-normalised", None), (8 / 7) ** 0.5, {"G": 8}, "√(G/(G − 1)) = 1.069"),
        (("std-normalised", 0.935), None, {"G": 8}, "sample standard deviation"),
        (("accumulation-scaled", None), 2.01, {"M": 2}, "never divided by 2"),
        (("accumulation-scaled", None), 0.499, {"M": 2}, "divided by 2 once too often"),
        (("accumulation-scaled", None), 0.25, {"R": 4}, "(R ranks)"),
        (("self-including-mean", None), 0.875, {"G": 8}, "(G − 1)/G"),
        (("std-normalised", 2.3), None, {"G": 8}, None),
        (("std-normalised", 1.15), None, {"G": 8}, None),  # 7 % off √(8/7): not said as it
    ],
)
def test_a_fitted_constant_is_said_as_its_cause(diagnosis, c, kw, words):
    """The fitted constant is read as a number (the finding's ``times``), never from the
    rendered ``× 1.1``: 1.15 was 1.1 to two digits and said as √(8/7) = 1.069."""
    name, times = diagnosis
    said = fx.constant_in_words(Diagnosis((name,), times), c, **kw)
    assert said is None if words is None else words in said


def test_the_configurations_beta_is_the_objectives_and_said(monkeypatch):
    """A GRPOConfig with β 0.04 read kl-weight on every problem (the default objective has
    β 0 on length and difficulty): its β is now the objective's, and another declared
    objective (--beta, --kl none) keeps kl-weight where the weights differ."""
    from eligibility.check import frameworks

    monkeypatch.setattr(frameworks, "kl_coefficient", lambda f, setup: setup.get("beta"))
    monkeypatch.setattr(frameworks, "sampler", lambda f, setup: {})
    read = frameworks.settings_from("trl", {"beta": 0.04}, {})
    assert (read["beta"], read.get("loss_beta")) == (0.04, None)
    declared = frameworks.settings_from("trl", {"beta": 0.04}, {"beta": 0.1})
    assert (declared["beta"], declared["loss_beta"]) == (0.1, 0.04)
    none = frameworks.settings_from("trl", {"beta": 0.04}, {"kl": "none"})
    assert (none.get("beta"), none["loss_beta"]) == (None, 0.04)
    assert frameworks.settings_from("trl", {}, {}) == {}


def test_an_error_in_the_advantages_function_is_said_as_its_own(capsys):
    argv = ["check", f"{USERS}/own_advantages.py:loss", "--sequence", "--problem", "length",
            "--samples", "30", "--advantages", f"{USERS}/own_advantages.py:broken"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("eligibility check: error: the --advantages function ")
    assert "own_advantages.py:broken raised AttributeError" in err and "loss could not" not in err
    assert len(err.splitlines()) == 1


# -- each name's fix, applied (slow: a check each) ------------------------------------------------

K = knobs.make
SEQUENCE = [  # (name, the example showing it, the example with the fix applied, options)
    ("std-normalised", K(advantage="std"), K(), {}),
    ("batch-whitened", K(advantage="whiten"), K(), {}),
    ("length-normalised", K(aggregation="length"), K(), {}),
    ("batch-dependent-normaliser", K(aggregation="token"), K(aggregation="constant"),
     {"allow_scale": True}),
    ("self-including-mean", K(advantage="mean"), K(), {}),
    ("constant-normaliser", K(aggregation="constant"), K(aggregation="constant"),
     {"allow_scale": True}),
    ("eos-masked", K(mask="eos"), K(), {}),
    ("truncated-masked", K(mask="truncated"), K(), {}),
    ("masked-tokens-in-normaliser", K(mask="truncated-counted", aggregation="token"),
     K(aggregation="constant"), {"allow_scale": True}),
    ("kl-no-gradient", K(kl="k1"), K(), {"problem": "kl"}),
    ("kl-forward", K(kl="k3"), K(), {"problem": "kl"}),
    ("kl-token-local", K(kl="k2"), K(), {"problem": "kl"}),
    ("kl-weight", K(beta=0.05), K(), {"loss_beta": 0.05}),
    ("sign", K(sign=-1.0), K(), {}),
    ("scale", K(divide=3.0), K(divide=3.0), {"allow_scale": True}),
    ("accumulation-scaled", K(), K(divide=2.0), {"micro_batches": 2}),
]  # fmt: skip
MODEL = [
    ("no-shift", "model_form.py:no_shift", "model_form.py:loss", {}),
    ("prompt-in-loss", "model_form.py:prompt_in_loss_no_baseline", "model_form.py:no_baseline",
     {}),
    ("padding-in-loss", "model_form.py:padding_in_loss", "model_form.py:loss", {}),
    ("temperature-mismatch", "temperature.py:scored_at_one", "temperature.py:loss",
     {"temperature": 0.7}),
]  # fmt: skip
OFF_POLICY = [  # each fixed to the product weight (losses.py:product)
    ("per-token-ratio", "per_token_ratio", "far"),
    ("geometric-mean", "geometric_mean", "far"),
    ("stale-old-logps", "stale_old_logps", "near"),
    ("uncorrected-sampler", "uncorrected_sampler", "near"),
    ("truncation-bias", "truncated_half", "near"),
    ("ratio-1-broken", "swapped", "near"),
    ("clipping-bias", "ppo_clip", "near"),
    ("cispo-relative-cap", "cispo_relative", "far"),
    ("masking-bias", "masked_whole", "near"),
]


def _names(report):
    return [set(p.names) for p in report.problems]


@pytest.mark.slow
@pytest.mark.parametrize("name, shown, fixed, options", SEQUENCE, ids=[c[0] for c in SEQUENCE])
def test_each_sequence_name_is_removed_by_its_fix(name, shown, fixed, options):
    options = {"problem": "length", **options}
    allow = options.pop("allow_scale", False)
    if name not in ("constant-normaliser", "scale") and "loss_beta" not in options:
        assert any(name in n for n in _names(check(shown, sequence=True, **options)))
    else:  # read as a step size: named, and passed by --allow-scale
        report = check(shown, sequence=True, **options)
        assert any(name in n for n in _names(report)), _names(report)
    if name == "accumulation-scaled":
        (p,) = check(shown, sequence=True, **options).problems
        assert "never divided by 2" in p.constant
    after = check(fixed, sequence=True, allow_scale=allow, **options)
    assert after.passed, [(p.verdict, p.diagnosis) for p in after.problems]


@pytest.mark.slow
@pytest.mark.parametrize("name, shown, fixed, options", MODEL, ids=[c[0] for c in MODEL])
def test_each_model_form_name_is_removed_by_its_fix(name, shown, fixed, options):
    kw = {"sequence": True, "form": "model", "problem": "length", **options}
    assert any(name in n for n in _names(check(f"{SEQ}/{shown}", **kw)))
    assert check(f"{SEQ}/{fixed}", **kw).passed


@pytest.mark.slow
@pytest.mark.parametrize("name, shown, problem", OFF_POLICY, ids=[c[0] for c in OFF_POLICY])
def test_each_off_policy_name_is_removed_by_its_fix(name, shown, problem):
    kw = {"off_policy": True, "problem": problem}
    report = check(f"{OFF}:{shown}", **kw)
    assert any(name in n for n in _names(report)) and report.problems[0].fix
    assert check(f"{OFF}:product", **kw).passed


@pytest.mark.slow
def test_a_clipped_step_is_named_on_clip_and_raising_max_norm_removes_it():
    """clip_grad_norm_(1.0) binds on ``clip`` (norm ≈ 5): ``gradient-clipped``, with its fix;
    the fix applied (max_norm raised above the largest norm the report gives) passes, and the
    report then says the clip was not exercised."""
    import functools

    import training_step as users_step

    from eligibility.check.report import report_text

    kw = {"sequence": True, "form": "step", "problem": "clip"}
    report = check(f"{USERS}/training_step.py:step", **kw)  # max_norm 1.0
    (p,) = report.problems
    assert (p.verdict, p.diagnosis) == ("biased", "gradient-clipped")
    assert p.details["clip"]["bound"] > 0.9 * p.details["clip"]["calls"]
    assert "raise max_norm in clip_grad_norm_" in report_text(report)
    above = 2 * p.details["clip"]["largest_norm"]
    after = check(functools.partial(users_step.step, max_norm=above), **kw)
    assert after.passed and after.problems[0].details["clip"]["bound"] == 0
    assert "did not exercise the clip" in report_text(after)
