"""The README: its Python examples print what it says, and its Layout is the repository's tree."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PACKAGE = ROOT / "src" / "eligibility"


def test_readme_examples() -> None:
    result = doctest.testfile(str(README), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 2
    assert result.failed == 0


def _layout() -> list[str]:
    """The lines of the fenced block under ``## Layout``."""
    section = README.read_text(encoding="utf-8").split("\n## Layout\n", 1)[1]
    return section.split("```\n", 2)[1].splitlines()


def _names(line: str) -> list[str]:
    """The file and folder names a Layout line starts with (``a.py b.py   what they are``)."""
    head = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
    return [w for w in head.split() if w.endswith(("/", ".py"))]


def test_the_layout_names_every_module_of_the_package_and_nothing_else() -> None:
    lines = _layout()
    start = lines.index("src/eligibility/")
    listed = [n.rstrip("/") for ln in lines[start + 1 :] if ln.startswith("  ") for n in _names(ln)]
    tree = {
        p.name
        for p in PACKAGE.iterdir()
        if p.name not in {"__init__.py", "py.typed", "__pycache__"}
        and (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))
    }
    assert len(listed) == len(set(listed)), "a module is listed twice in README.md's Layout"
    assert set(listed) == tree, (
        f"README.md's Layout and src/eligibility/ differ: missing {sorted(tree - set(listed))}, "
        f"not in the tree {sorted(set(listed) - tree)}"
    )


def test_the_layout_names_every_top_level_folder_and_bench_area() -> None:
    top = [n for ln in _layout() if ln and not ln.startswith(" ") for n in _names(ln)]
    folders = {"src", "tests", "bench", "docs", "examples", "tools"}
    assert {n.rstrip("/").split("/")[0] for n in top} == folders
    assert all((ROOT / n).is_dir() for n in folders)
    bench_line = next(ln for ln in _layout() if ln.startswith("bench/"))
    areas = set(re.findall(r"(\w+)/", bench_line.split(":", 1)[1]))
    assert areas == {p.name for p in (ROOT / "bench").iterdir() if p.is_dir() and p.name[0] != "_"}


def test_the_readme_stays_a_front_door() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 200
    opening = text.split("\n## ", 1)[0]
    for first in ("eligibility explain", "eligibility train", "eligibility finetune", "check"):
        assert first in opening, f"the README's opening lacks the first command {first!r}"


RESULTS = ROOT / "bench" / "results"


def test_the_explain_figure_is_the_records() -> None:
    import json
    import statistics

    short = json.loads((RESULTS / "cli_wall.json").read_text())["short"]
    plain, checked = (
        statistics.median(r["wall_s"] for r in short[k])
        for k in ("eligibility explain …", "eligibility explain … --autograd")
    )
    assert f"answers in {plain:.2f} s, {checked:.2f} s with `--autograd`" in README.read_text()


def test_the_finetune_figure_is_the_records() -> None:
    import json

    runs = json.loads((RESULTS / "lm_real_race_json_bf16.json").read_text())["runs"]
    by = {(r["system"], r["seed"]): r for r in runs}

    def to_target(run: dict) -> float:
        return next(s for _, acc, s in run["curve"] if acc >= 0.95)

    seeds = sorted(s for system, s in by if system == "eligibility")
    sooner = [to_target(by["trl", s]) / to_target(by["eligibility", s]) for s in seeds]
    per_update = [
        by["trl", s]["s_per_update"] / by["eligibility", s]["s_per_update"] for s in seeds
    ]
    memory = [by["trl", s]["peak_mib"] / by["eligibility", s]["peak_mib"] for s in seeds]
    text = " ".join(README.read_text().split())
    ratios = f"{sooner[0]:.1f}×, {sooner[1]:.1f}× and {sooner[2]:.1f}×"
    assert f"{ratios} sooner on seeds {seeds[0]}–{seeds[-1]}" in text
    assert f"TRL taking {min(per_update):.1f}–{max(per_update):.1f}× as long per update" in text
    assert all(1.9 < m < 2.2 for m in memory) and "twice the peak memory" in text


def test_the_check_figure_is_the_framework_tables() -> None:
    said = re.search(r"(\d+) of (\d+) configuration verdicts", " ".join(README.read_text().split()))
    assert said, "the README's measured sentence for check is gone"
    check_md = (ROOT / "docs" / "measurements" / "check.md").read_text(encoding="utf-8")
    assert f"in all, {said[1]} of {said[2]}" in check_md, (
        "docs/measurements/check.md's tables say otherwise"
    )
