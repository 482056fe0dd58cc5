"""The check's families come from one registry, and what the report says about each.

A family is one line of :data:`eligibility.check.family.FAMILIES` and its module: a fourth
family registered here (a one-parameter problem with ∇J = 1) runs through the engine, the
command line's options and the report unchanged. Every diagnosis the engine or a family can
give is explained in every family it can appear in; the objective's KL is the user's to
declare (``kl="none"``); a user's function that raises is one line on stderr, exit 2.
"""

from __future__ import annotations

import functools
import sys
import types

import numpy as np
import pytest

from eligibility import check
from eligibility.check import family as registry
from eligibility.check.diagnosis import Diagnosis
from eligibility.check.family import Draw, Family, Trial
from eligibility.check.report import DIAGNOSES, explain_diagnosis, report_text
from eligibility.check.run import CheckConfig
from eligibility.cli import main


def _coin_trial(problem, fn, config, seed):
    """∇J = 1; the user's fn(x) is called on x ~ N(1, 1) and its value is the estimate."""
    x = np.random.default_rng(seed).normal(1.0, 1.0, size=4000)

    def draw(n):
        return Draw(step=lambda k: np.array([float(fn(x[k]))]))

    return Trial(name="coin", exact=np.array([1.0]), sigma=np.array([1.0]), draw=draw)


COIN = Family(
    name="coin",
    problems={"coin": lambda: None},
    forms=("value",),
    arguments={"value": ("x",)},
    trial=_coin_trial,
    diagnoses={},
    reference="the draw itself",
    min_samples=200,
    batch=lambda report: "one draw per call",
)


@pytest.fixture
def coin_family(monkeypatch):
    module = types.ModuleType("eligibility_test_coin_family")
    module.FAMILY = COIN
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(registry.FAMILIES, "coin", module.__name__)


def test_a_family_is_one_registry_line(coin_family):
    good = check(lambda x: x, family="coin", samples=200)
    twice = check(lambda x: 2 * x, family="coin", samples=200)
    assert good.problems[0].verdict == "unbiased" and good.family == "coin"
    assert (twice.problems[0].verdict, twice.problems[0].diagnosis) == ("scaled", "scale")
    assert "value form, one draw per call" in report_text(good)
    with pytest.raises(ValueError, match="unknown problem 'bandit' for the coin check"):
        CheckConfig(family="coin", problem="bandit")


def test_an_unknown_family_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown check family 'tabular'; choose one of episodic"):
        CheckConfig(family="tabular")


def test_the_shorthands_and_the_python_spellings_pick_the_family():
    assert CheckConfig(sequence=True).family == "sequence"
    assert CheckConfig(off_policy=True).family == "off-policy"
    assert CheckConfig(sequence=True, off_policy=True).family == "off-policy"
    assert CheckConfig(family="off-policy").form == "logps"


@functools.cache  # the same names for every family's case: built once
def _sequence_variant_names() -> frozenset[str]:
    from eligibility.check import offpolicy, sequence
    from eligibility.lab.sequence.builtin import PROBLEMS

    names = {v.name for form in ("logps", "model") for v in sequence.variants_of(
        PROBLEMS["kl"](), form)}  # fmt: skip
    return frozenset(names | {v.name for v in offpolicy.variants()})


@pytest.mark.parametrize("name", list(registry.FAMILIES))
def test_every_diagnosis_is_explained_in_every_family(name):
    """The engine's diagnoses (problem-dependent-scale among them: it used to be explained for
    the episodic family only) and the family's own, alone and joined as the variants join them."""
    family = registry.get(name)
    known = DIAGNOSES | family.diagnoses
    own = set(family.diagnoses) | set(DIAGNOSES)
    if name != "episodic":
        own |= {n for n in _sequence_variant_names() if set(n.split(", ")) <= set(known)}
    unexplained = sorted(d for d in own if explain_diagnosis(known, Diagnosis.of(d)) is None)
    assert not unexplained
    said = explain_diagnosis(known, Diagnosis(("problem-dependent-scale",)))
    assert said.startswith("E[ĝ] = c ∇J")


def test_every_variant_of_a_family_is_named_from_its_own_diagnoses():
    from eligibility.check import offpolicy, sequence

    for family, names in (
        (sequence.FAMILY, {v.name for v in sequence.variants_of(_kl(), "model")}),
        (offpolicy.FAMILY, {v.name for v in offpolicy.variants()}),
    ):
        parts = {p for n in names for p in n.split(", ")}
        assert parts <= set(family.diagnoses) | set(DIAGNOSES), parts - set(family.diagnoses)


def _kl():
    from eligibility.lab.sequence.builtin import PROBLEMS

    return PROBLEMS["kl"]()


def test_a_joined_diagnosis_and_a_fitted_constant_are_explained_part_by_part():
    known = DIAGNOSES | registry.get("sequence").diagnoses
    found = Diagnosis(("std-normalised", "batch-dependent-normaliser"), times=0.2)
    text = explain_diagnosis(known, found)
    assert text.startswith("std-normalised: advantages divided")
    assert "(times a constant 0.2)" in text
    weight = Diagnosis(("kl-weight",), notes=(("kl-weight", "config 0.05, objective β = 0.1"),))
    said = explain_diagnosis(known, weight)
    assert said == "the configuration's KL coefficient is not the objective's β"
    assert explain_diagnosis(known, Diagnosis(("no-such-thing",))) is None


# -- the objective the user declares ------------------------------------------------------------


def test_kl_none_leaves_out_the_problems_with_a_kl():
    assert CheckConfig(sequence=True).problems == ("length", "difficulty", "kl")
    assert CheckConfig(sequence=True, kl="none").problems == ("length", "difficulty")
    with pytest.raises(ValueError, match="problem kl holds a KL to the reference"):
        CheckConfig(sequence=True, kl="none", problem="kl")


def test_problems_are_comma_separated_or_a_list():
    assert CheckConfig(sequence=True, problem="difficulty,length").problems == (
        "difficulty",
        "length",
    )
    assert CheckConfig(problem=["chain", "bandit"]).problems == ("chain", "bandit")
    with pytest.raises(ValueError, match="unknown problem 'lenght' for the sequence check"):
        CheckConfig(sequence=True, problem="length,lenght")


@pytest.mark.usefixtures("check_calls_in_process")  # what is read is the command line's, not N
def test_the_command_line_takes_kl_none_and_a_list_of_problems(capsys):
    argv = ["examples/check/correct.py:loss", "--problem", "bandit,chain", "--kl", "none"]
    rc = main(["check", *argv, "--samples", "30"])
    out = capsys.readouterr().out
    assert rc == 0 and "│ bandit" in out and "│ chain" in out and "│ gridworld" not in out


def test_a_failing_kl_problem_says_what_to_pass_for_an_objective_without_one():
    from eligibility.check.run import CheckReport
    from eligibility.check.verdict import ProblemReport

    def problem(name, verdict, diagnosis):
        empty = dict.fromkeys(["scale", "scale_stderr", "max_abs_z", "threshold", "bias_norm",
            "noise", "cosine", "variance_ratio", "variance_ratio_value_baseline",
            "min_detectable_bias", "power_scale2"])  # fmt: skip
        return ProblemReport(name, verdict, diagnosis and Diagnosis.of(diagnosis), **empty,
                             samples=800, episodes=8, seconds=0.0, blind_to=[])  # fmt: skip

    report = CheckReport(
        problems=[problem("length", "unbiased", None), problem("kl", "biased", "kl-no-gradient")],
        alpha=1e-3, samples=None, episodes=8, form="logps", policy="logits", objective=False,
        seed=0, family="sequence",
    )  # fmt: skip
    text = report_text(report)
    assert "kl: its objective holds a KL to π_ref (β > 0); if yours has none, pass --kl none" in (
        text
    )


# -- a function that raises --------------------------------------------------------------------


def test_a_function_that_raises_is_one_line_and_exit_2(tmp_path, capsys):
    """It used to print the whole report, the traceback inside, and "verdict: NOT unbiased"."""
    f = tmp_path / "broken.py"
    f.write_text("def loss(policy, episodes, gamma):\n    raise KeyError('advantage')\n")
    rc = main(["check", f"{f}:loss", "--problem", "bandit", "--samples", "30"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    (line,) = [x for x in err.splitlines() if "error" in x]
    assert "KeyError: 'advantage'" in line and f"{f}:2" in line and "problem bandit" in line
    assert "verdict" not in err


def test_framework_with_a_family_it_does_not_take_is_refused_in_one_line():
    """A framework's step is checked on-policy, off-policy (its sampler correction) and on
    multi-turn episodes; the episodic family's MDPs are no framework's."""
    from eligibility.check.frameworks import check_settings

    with pytest.raises(ValueError) as err:
        check_settings("trl", {"family": "episodic"})
    assert "--family episodic is not supported with --framework trl" in str(err.value)
    assert "the frameworks that take it: none" in str(err.value)
    assert check_settings("verl", {"family": "episodes"})["family"] == "episodes"


def test_off_policy_then_sequence_is_still_off_policy(capsys):
    for flags in (["--sequence", "--off-policy"], ["--off-policy", "--sequence"]):
        rc = main(["check", "x.py:loss", *flags, "--micro-batches", "2"])
        assert rc == 2 and "not taken by the off-policy check" in capsys.readouterr().err


def test_every_familys_problems_are_exact_problems():
    """One Protocol says what a problem is: its --problem key and its exact ∇J."""
    import numpy as np

    from eligibility.check.family import FAMILIES, ExactProblem, get

    for family in FAMILIES:
        f = get(family)
        for name, build in f.problems.items():
            problem = build()
            assert isinstance(problem, ExactProblem), (family, name)
            assert problem.name == name and np.isfinite(problem.exact).all(), (family, name)
