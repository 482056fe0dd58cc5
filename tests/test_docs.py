"""The docs: generated pages are current, the record lists every result file, no project notes.

docs/cli.md's reference part and docs/reference/configs.md are generated from the code
(``tools/cli_doc.py``, ``tools/config_doc.py``); docs/measurements/index.md lists every file of
bench/results/ (``tools/measurements.py``). Each test names the command that brings its page
up to date.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import cli_doc  # noqa: E402
import config_doc  # noqa: E402

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_cli_md_is_generated_from_every_subcommands_parser() -> None:
    from eligibility.cli import COMMANDS

    page = cli_doc.PAGE.read_text(encoding="utf-8")
    assert cli_doc.splice(page, cli_doc.render()) == page, "run: python tools/cli_doc.py --update"
    for name in COMMANDS:
        assert f"### `eligibility {name}`" in page


def test_the_splice_replaces_only_between_the_markers() -> None:
    page = f"head\n{cli_doc.START}\nold\n{cli_doc.END}\ntail\n"
    assert cli_doc.splice(page, "new") == "head\nnew\ntail\n"
    with pytest.raises(ValueError, match="markers"):
        cli_doc.splice("no markers", "new")


def test_the_config_reference_is_generated_from_the_dataclasses() -> None:
    assert config_doc.PAGE.read_text(encoding="utf-8") == config_doc.render(), (
        "run: python tools/config_doc.py --update"
    )


def test_the_config_reference_has_every_field_with_its_help() -> None:
    import dataclasses

    from eligibility.lm import FinetuneConfig

    page = config_doc.PAGE.read_text(encoding="utf-8")
    for f in dataclasses.fields(FinetuneConfig):
        assert f"| `{f.name}` |" in page
    assert "| `lr` |" in page and "Adam learning rate" in page


def test_the_measurement_index_lists_every_result_file_with_its_commit_and_date() -> None:
    index = (ROOT / "docs" / "measurements" / "index.md").read_text(encoding="utf-8")
    for path in sorted((ROOT / "bench" / "results").glob("*.json")):
        row = next((ln for ln in index.splitlines() if ln.startswith(f"| `{path.name}` |")), None)
        assert row is not None, (
            f"{path.name} is not in the record; run: python tools/measurements.py --update"
        )
        assert re.search(r"\| [0-9a-f]{7,} \| \d{4}-\d{2}-\d{2} \|", row), row


# "Gymnasium issue #1336" cites another project's tracker; this project's own are not named.
ISSUE = re.compile(r"(?<!Gymnasium )\bissues? #?\d+|\(#\d+\b|\bissue's\b", re.IGNORECASE)
GOAL_STATUS = re.compile(r"\bgoals?\b[^.\n]*\b(met|missed|short of|holds)\b", re.IGNORECASE)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_issue_numbers_or_goal_status(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert not ISSUE.findall(text), (
        f"{page.name} names an issue of the project: {ISSUE.findall(text)}"
    )
    found = [m.group(0) for m in GOAL_STATUS.finditer(text)]
    assert not found, f"{page.name} reports a goal's status: {found}"


def test_the_patterns_catch_what_they_are_for() -> None:
    assert ISSUE.search("Against the goals of issue 14:")
    assert ISSUE.search("(#33; every figure above)")
    assert not ISSUE.search("Gymnasium issue #1336, `mean_log_prob.py`")
    assert GOAL_STATUS.search("Speed goal (process wall ≥ 20× every peer's): missed: 5.2×")
    assert not GOAL_STATUS.search("+10 at the goal, γ = 0.9")


def test_bench_readme_lists_every_script_under_its_area() -> None:
    readme = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    sections = dict(re.findall(r"(?ms)^## (\w+)/:.*?\n(.*?)(?=^## |\Z)", readme))
    areas = sorted(p.name for p in (ROOT / "bench").iterdir() if p.is_dir() and p.name != "results")
    assert sorted(sections) == [a for a in areas if not a.startswith("_")]
    for area, text in sections.items():
        scripts = {p.name for p in (ROOT / "bench" / area).glob("*") if p.suffix in (".py", ".sh")}
        listed = set(re.findall(r"^\| `([\w.]+)` \|", text, re.MULTILINE))
        assert listed == scripts, f"bench/{area}: README lists {sorted(listed ^ scripts)} wrongly"


TIMING = re.compile(r"\d+\.\d+ ?(?:s|ms|µs)\b")
DATED = re.compile(r"commit [0-9a-f]{7}|\d{4}-\d{2}-\d{2}")


def _paragraphs(text: str) -> list[str]:
    """The paragraphs of a page, a fenced block counting as one."""
    out, cur, fence = [], [], False
    for line in text.splitlines():
        fence ^= line.startswith("```")
        if not fence and not line.strip():
            out.append("\n".join(cur))
            cur = []
        else:
            cur.append(line)
    return [p for p in [*out, "\n".join(cur)] if p]


GUIDE = [p for p in PAGES if "measurements" not in p.parts and p.name != "check.md"]


@pytest.mark.parametrize("page", GUIDE, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_timing_in_the_guide_says_when_it_was_measured(page: Path) -> None:
    """A measured time (a decimal in s, ms or µs) has a commit or a date in its paragraph or the
    two after it (the command's block and what follows). docs/check.md is its owner's."""
    paragraphs = _paragraphs(page.read_text(encoding="utf-8"))
    for i, paragraph in enumerate(paragraphs):
        if TIMING.search(paragraph) and not paragraph.startswith("```"):
            near = "\n".join(paragraphs[i : i + 3])
            assert DATED.search(near), f"{page.name}: undated {TIMING.search(paragraph)[0]}"
