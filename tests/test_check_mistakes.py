"""The registry of mistakes holds every name the check can give, and every part reads it.

Truth: the check's own modules, read as source (every name written in them, an audit
``Finding`` or a ``Diagnosis`` spelled anywhere), and the names their tables build (the
families' variants, the option table's verdicts), none of them copied here; the docs' table
is the registry's rendering.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from eligibility.check import family as families
from eligibility.check import fixes as fx
from eligibility.check import mistakes
from eligibility.check.diagnosis import Diagnosis
from eligibility.check.mistakes import MISTAKES, REGISTRY
from eligibility.check.report import explain_diagnosis

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "src" / "eligibility" / "check"
HYPHENATED = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9.]+)+$")

BUILT_WITH_A_BOUND = {"q-floored"}
"""Tags written in pieces, their bound joined at run time (the audit's floored token factor,
``q-floored-0.8``): the one vocabulary no module declares as a tuple."""


def _modules() -> list[Path]:
    """Every module of the check (its framework adapters apart: they name no mistake)."""
    return [p for p in sorted(CHECK.rglob("*.py")) if "frameworks" not in p.parts]


def _strings(path: Path) -> tuple[set[str], set[str]]:
    """(every hyphenated string constant that is no docstring, every name a ``Finding`` or
    ``Diagnosis`` is built with as a constant) in one module."""
    tree = ast.parse(path.read_text())
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
    }
    hyphenated, built = set(), set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            if HYPHENATED.match(n.value):
                hyphenated.add(n.value)
        if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", "")) in (
            "Finding",
            "Diagnosis",
        ):
            first = n.args[0] if n.args else None
            items = first.elts if isinstance(first, ast.Tuple) else [first]
            built |= {c.value for c in items if isinstance(c, ast.Constant)}
    return hyphenated, built


@functools.cache
def _vocabulary() -> frozenset[str]:
    """The hyphenated words of the check that are no mistake: problems, option rows, the
    audit's relation forms and factors, the variant tables' keys (each module's own)."""
    from eligibility.check import episodes, offpolicy, offpolicy_tables, sequence
    from eligibility.check.audit import kl, maps, relations, sampler
    from eligibility.torch import options

    words = set(families.FAMILIES)
    for name in families.FAMILIES:
        words |= set(families.get(name).problems)
    words |= {o.name for o in (*options.ROWS, *options.OFF_POLICY_ROWS)}
    words |= {*relations.FORMS, *relations.RETURNS, *relations.LENGTHS}
    words |= {*sampler.TOKEN_FACTORS, *sampler.POLICY, *sampler.SAMPLER, *sampler.WHOLE}
    words |= {*sampler.BOUNDED, *sampler.REJECTION_FEATURES}
    words |= {*maps.BASES, *maps.FUNCTIONS, *maps.LENGTHS, *maps.SCALES, *kl.ESTIMATORS}
    for table in (
        offpolicy_tables.RATIOS,
        offpolicy_tables.CLIPS,
        offpolicy_tables.CAPS,
        offpolicy_tables.SAMPLERS,
        offpolicy_tables.AGGREGATIONS,
        offpolicy_tables.ADVANTAGES,
    ):
        words |= set(table)
    words |= {*sequence.MASKS, *episodes.KLS, *offpolicy.EXPECTED.values()}
    return frozenset(words)


def _a_piece_of_a_word(s: str, words: frozenset[str]) -> bool:
    """``s`` is a word's prefix or suffix (``batch-std`` of ``batch-std-1``, a ``startswith``)."""
    return any(w != s and (w.startswith(s + "-") or w.endswith("-" + s)) for w in words)


def test_every_name_written_in_the_checks_modules_is_in_the_registry():
    """The audit's five reading modules included: a ``Finding`` named outside the registry, or
    a hyphenated word that is neither a mistake nor a declared word of its module, fails."""
    words = _vocabulary() | BUILT_WITH_A_BOUND
    unknown: dict[str, set[str]] = {}
    for path in _modules():
        hyphenated, built = _strings(path)
        for s in built - set(MISTAKES):
            unknown.setdefault(s, set()).add(path.name)
        for s in hyphenated - set(MISTAKES) - words:
            if not _a_piece_of_a_word(s, words):
                unknown.setdefault(s, set()).add(path.name)
    assert not unknown, unknown
    from eligibility.check.audit.judge import REPLACED

    audit = {m.name for m in REGISTRY if mistakes.AUDIT in m.found_by}
    for path in sorted((CHECK / "audit").glob("*.py")):
        said = set(_strings(path)[0]) & set(MISTAKES) - set(REPLACED)
        assert said <= audit, (path.name, said - audit)  # the registry names the audit a finder
    audit_built = set()
    for name in ("relations.py", "judge.py", "sampler.py"):
        audit_built |= _strings(CHECK / "audit" / name)[0] & set(MISTAKES)
    assert {"model-tokens-dropped", "credit-unexplained", "ratio-floor"} <= audit_built


def test_the_collector_sees_a_name_that_is_not_registered(tmp_path):
    """The walk above can fail: a module that names a new finding is caught."""
    module = tmp_path / "m.py"
    module.write_text('Finding("a-new-mistake", "where")\nDiagnosis(("unheard",))\n')
    hyphenated, built = _strings(module)
    assert "a-new-mistake" in hyphenated - set(MISTAKES)
    assert built - set(MISTAKES) == {"a-new-mistake", "unheard"}


@functools.cache
def _variant_names() -> dict[str, frozenset[str]]:
    """The names the families' variant tables build (their own code, on a built-in problem)."""
    from eligibility.check import offpolicy_tables, sequence
    from eligibility.lab.sequence.builtin import PROBLEMS

    kl = PROBLEMS["kl"]()
    seq = {v.name for v in sequence.variants_of(kl, "model", tempered=True, loss_beta=0.05)}
    seq |= {v.name for v in sequence.variants_of(kl, "logps")}
    seq |= {m for name in PROBLEMS for m in PROBLEMS[name]().shows}
    off = {v.name for v in offpolicy_tables.variants()}
    return {"sequence": frozenset(seq), "off-policy": frozenset(off)}


def test_every_variant_and_option_row_names_a_registered_mistake_its_family_gives():
    from eligibility.torch import options

    for family, names in _variant_names().items():
        parts = {p for n in names for p in n.split(", ")}
        gives = {m.name for m in REGISTRY if family in m.found_by}
        assert parts <= gives, (family, parts - gives)
    for row in (*options.ROWS, *options.OFF_POLICY_ROWS):
        said = {row.mistake, row.scale} | {d for _, d in row.verdicts.values()}
        for name in said - {None}:
            assert set(name.split(", ")) <= set(MISTAKES), (row.name, name)


@pytest.mark.parametrize("mistake", REGISTRY, ids=[m.name for m in REGISTRY])
def test_each_mistake_has_a_meaning_a_fix_and_says_where_the_fix_is_held(mistake):
    assert mistake.meaning and mistake.fix.loss
    assert set(mistake.found_by) <= set(mistakes.FINDERS) and mistake.found_by
    assert bool(mistake.held) != bool(mistake.unheld), "held by a test, or why not: one"
    if mistake.held:
        assert f'"{mistake.name}"' in (ROOT / mistake.held).read_text()
    for form in ("logps", "model", "step"):
        assert fx.fix(mistake.name, form)
    for family in families.FAMILIES:
        assert explain_diagnosis(mistakes.explained(family), Diagnosis((mistake.name,)))
    for coarse in mistake.coarser:  # a name the audit gives, and never the mistake itself
        assert coarse != mistake.name and mistakes.AUDIT in MISTAKES[coarse].found_by


def test_a_model_token_dropped_has_a_meaning_and_a_fix():
    dropped = MISTAKES["model-tokens-dropped"]
    assert "no weight" in dropped.meaning and "completion_mask" in dropped.fix.loss
    said = explain_diagnosis(mistakes.explained("off-policy"), Diagnosis((dropped.name,)))
    assert said == dropped.meaning


def test_every_framework_cure_is_a_row_of_the_option_table_with_that_frameworks_keys():
    """The keys are read from the option table, never written in the registry: every
    ``Cure`` names a row whose framework column exists."""
    for m in REGISTRY:
        for framework, cure in m.fix.framework.items():
            if isinstance(cure, mistakes.Cure):
                assert fx.fix_keys(m.name, framework), (m.name, framework)


def test_a_mistake_of_mean_zero_is_one_the_engine_holds_at_zero_or_a_drop_at_random():
    """``Trial.held_at_zero`` names the mistakes that change no mean (episodes' whole return);
    the audit's drop at random is the other (its constant, where the weight is not carried
    back, is named apart): the registry says the same of them, and of no other."""
    from eligibility.check import episodes
    from eligibility.check.audit import tokens

    assert not MISTAKES[episodes.WHOLE_RETURN].moves_mean
    assert {m.name for m in REGISTRY if not m.moves_mean} == {
        episodes.WHOLE_RETURN,
        tokens.DROPPED_AT_RANDOM,
    }


def test_the_families_diagnoses_and_the_fixes_are_views_of_the_registry():
    for name in families.FAMILIES:
        family = families.get(name)
        assert set(family.diagnoses) - {", ".join(k) for k in mistakes.JOINED} == {
            m.name for m in REGISTRY if name in m.found_by
        }
    assert {n for n in fx.FIXES if ":" not in n} == set(MISTAKES)
    with pytest.raises(ValueError, match="no mistake is named"):
        mistakes.named("no-such-mistake")


def test_the_docs_table_is_the_registry():
    text = (ROOT / "docs" / "check-mistakes.md").read_text()
    assert f"<!-- table:mistakes -->\n{mistakes.markdown()}<!-- /table:mistakes -->" in text


def test_every_name_the_guide_tables_give_is_registered():
    """The audit's table in check-explained.md and the verdicts' table in check.md name
    mistakes by hand: each name there is one of the registry's (a renamed one is caught)."""
    said = set()
    for page in ("check.md", "check-explained.md"):
        for line in (ROOT / "docs" / page).read_text().splitlines():
            if line.startswith("| "):
                said |= set(re.findall(r"`([a-z][a-z0-9]*(?:-[a-z0-9]+)+)`", line))
    words = _vocabulary()
    named_here = {s for s in said if s in MISTAKES}
    assert {"per-token-weight", "world-tokens-trained", "data-reuse"} <= named_here
    assert not said - set(MISTAKES) - words, sorted(said - set(MISTAKES) - words)


def test_every_name_the_audit_gives_is_in_the_guides_audit_table():
    """check-explained.md's table of what the audit says names every mistake the registry says
    the audit gives (a name added to the audit and not to the guide is caught)."""
    lines = (ROOT / "docs" / "check-explained.md").read_text().splitlines()
    start = lines.index("| what | names |")
    table = "\n".join(lines[start : lines.index("", start)])
    said = set(re.findall(r"`([a-z][a-z0-9]*(?:-[a-z0-9]+)*)`", table))
    audit = {m.name for m in REGISTRY if mistakes.AUDIT in m.found_by}
    assert audit <= said, sorted(audit - said)
