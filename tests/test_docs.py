"""The docs: generated pages are current, the record lists every result file, no project notes,
and the guide holds no timing and no page over 700 lines.

docs/cli.md's reference part and docs/reference/configs.md are generated from the code
(``tools/cli_doc.py``, ``tools/config_doc.py``); docs/measurements/index.md lists every file of
bench/results/ (``tools/measurements.py``). Each test names the command that brings its page
up to date. Timings live in the measurement record (docs/measurements/), each with its command
and date; the guide (every other page of docs/) points to them.
"""

from __future__ import annotations

import itertools
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


def test_no_issue_numbers_or_goal_status() -> None:
    """Every page in turn (one test: a test a page cost more than its search); each page that
    names an issue or reports a goal's status is named."""
    wrong = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        if ISSUE.findall(text):
            wrong.append(f"{_name(page)} names an issue of the project: {ISSUE.findall(text)}")
        found = [m.group(0) for m in GOAL_STATUS.finditer(text)]
        if found:
            wrong.append(f"{_name(page)} reports a goal's status: {found}")
    assert not wrong, "\n".join(wrong)


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


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


GUIDE = [p for p in sorted((ROOT / "docs").rglob("*.md")) if "measurements" not in p.parts]
"""The guide: every page of docs/ but the measurement record. README.md is the project's front
page, whose few figures ``tests/test_readme.py`` and ``test_bench_harness.py`` hold to the
record's result files."""
GENERATED_PAGES = {config_doc.PAGE}
"""Pages written whole from the code (their help strings are the code's)."""
GENERATED = re.compile(
    r"(?s)<!-- (?P<name>[\w:-]+):start -->.*?<!-- (?P=name):end -->"
    r"|<!-- table:(?P<table>[\w-]+) -->.*?<!-- /table:(?P=table) -->"
)
"""A part of a page printed from the code (``tools/``, the tests' ``ELIGIBILITY_WRITE_DOCS``)."""

_UNIT = r"(?:s|ms|µs|ns|sec|seconds?|min|minutes?|h|hours?)"
_NUMBER = r"(?<![\w.,])\d+(?:[.,]\d+)?"
MEASURED_TIME = re.compile(
    rf"{_NUMBER}\s?[–-]\s?\d+(?:[.,]\d+)?\s?{_UNIT}(?![\w/])"  # a range: 0.30–0.56 s
    rf"|(?<![\w.,])\d+[.,]\d+\s?{_UNIT}(?![\w/])"  # a decimal: 18.2 s, 1.296 ms
    r"|(?<![\w.:])\d+:\d\d\.\d+"  # a clock: time -v's 0:41.94
)
WHOLE_TIME = re.compile(rf"(?<![\w.,–-])\d+\s?{_UNIT}(?![\w/])")
SETTING = re.compile(
    r"(?:within|every|up to|at most|at least|default|timeout|limit|after|wait(?:s|ing)?|for)"
    r"\W*(?:\w+\W+){0,2}$",
    re.IGNORECASE,
)
"""Words that make a whole number of seconds a setting (a timeout, a cadence), not a timing."""
SPEED_UP = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?(?:\s?[–-]\s?\d+(?:\.\d+)?)?\s?[×x]\s?"
    r"(?:faster|slower|as fast|as long|longer|quicker|sooner|the (?:time|wall|speed|CPU)"
    r"|\w+'s speed)"
    r"|\b(?:wins|gains|faster|slower)\s+by\s+(?:about\s+|up to\s+)?"
    r"\d+(?:\.\d+)?(?:[–-]\d+(?:\.\d+)?)?×",
    re.IGNORECASE,
)
TIME_HEADER = re.compile(r"(?:^|\s)(?:s|ms|µs|seconds|wall)(?:\s|$)")
"""A table's header cell that names a time: ``s per update``, ``plain ms``, ``wall s IQM``."""


def timings(text: str) -> list[str]:
    """The timings of a page's text, its generated parts aside.

    A timing is a measured time or speed: a decimal or a range followed by a time unit
    (``18.2 s``, ``0.30–0.56 s``, ``1.296 ms``); a whole number of a time unit unless a setting's
    word comes just before it (``--timeout`` 60 s, ``every 15 s``, ``up to 15 s``); a speed-up
    (``5.2–13.5× faster``, ``2.4× the time``); or a table whose header names a time.
    """
    text = GENERATED.sub("", text)
    found = [m.group(0) for m in MEASURED_TIME.finditer(text)]
    found += [m.group(0) for m in SPEED_UP.finditer(text)]
    for m in WHOLE_TIME.finditer(text):
        before, after = text[max(0, m.start() - 40) : m.start()], text[m.end() : m.end() + 6]
        if not SETTING.search(before) and not after.lstrip().startswith("later"):
            found.append(m.group(0))
    lines = text.splitlines()
    for head, rule in itertools.pairwise(lines):
        if head.startswith("|") and rule.startswith("|---"):
            found += [c.strip() for c in head.strip("|").split("|") if TIME_HEADER.search(c)]
    return found


def test_no_guide_page_holds_a_timing() -> None:
    """Timings live in the measurement record (docs/measurements/), with their command and
    date; a guide page may point to them, not repeat them. Every page holding one is named."""
    wrong = [
        f"{_name(page)} holds timings {found}: move them to docs/measurements/"
        for page in GUIDE
        if page not in GENERATED_PAGES and (found := timings(page.read_text(encoding="utf-8")))
    ]
    assert not wrong, "\n".join(wrong)


def test_the_timing_pattern_catches_what_it_is_for() -> None:
    assert timings("took 18.2 s wall and 8.5 s of user CPU") == ["18.2 s", "8.5 s"]
    assert timings("workers gone 0.21–1.55 s later") == ["0.21–1.55 s"]
    assert timings("289 ms against 0.034 ms") == ["0.034 ms", "289 ms"]
    assert timings("Elapsed (wall clock) time (h:mm:ss or m:ss): 0:41.94") == ["0:41.94"]
    assert timings("5.2–13.5× faster than Tianshou") == ["5.2–13.5× faster"]
    assert timings("the single buffer wins by\n2–3×.") == ["wins by\n2–3×"]
    assert timings("a SIGINT 12 s into the grid") == ["12 s"]
    assert timings("| fine-tune | s per update |\n|---|---|\n| full | 3.65 |") == ["s per update"]
    for setting in (
        "a call that runs longer than `--timeout` seconds (default 60 s)",
        "a watchdog ends it 10 s later",
        "every 15 s on a terminal",
        "waits for them (up to 15 s)",
        "an address that does not answer within 5 s",
        "a factor-2 scale error, a 2× scale, c ≈ 8 = E: a step size 8× larger",
        "<!-- table:options -->\n| x | 2.5 s |\n<!-- /table:options -->",
    ):
        assert timings(setting) == [], setting


def test_no_guide_page_is_over_700_lines() -> None:
    """A guide page over 700 lines holds more than one reader's errand: split it."""
    lines = {p: len(p.read_text(encoding="utf-8").splitlines()) for p in GUIDE}
    wrong = [
        f"{_name(page)} has {n} lines: split it by what the reader came to do"
        for page, n in lines.items()
        if page not in GENERATED_PAGES and n > 700
    ]
    assert not wrong, "\n".join(wrong)


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


def test_the_readmes_timings_say_when_they_were_measured() -> None:
    """README.md, the front page, keeps a few figures: each paragraph with a timing has a commit
    or a date in it or in the two after it (the command's block and what follows)."""
    paragraphs = _paragraphs((ROOT / "README.md").read_text(encoding="utf-8"))
    for i, paragraph in enumerate(paragraphs):
        if timings(paragraph) and not paragraph.startswith("```"):
            near = "\n".join(paragraphs[i : i + 3])
            assert DATED.search(near), f"README.md: undated {timings(paragraph)}"
