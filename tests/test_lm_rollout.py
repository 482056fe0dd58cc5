"""A rollout per kind of task, chosen once (``lm.rollout``, ``lm.build.rollout_for``).

Truth: the source read with ``ast`` (what the loop imports; where a task's or a batch's kind
is asked), and the draws of a run (the prompts of each kind drawn alike from one generator).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("torch")

import _source  # noqa: E402
from eligibility.lm.build import rollout_for  # noqa: E402
from eligibility.lm.config import FinetuneConfig  # noqa: E402
from eligibility.lm.episodes.episode_rollout import EpisodeRollout  # noqa: E402
from eligibility.lm.rollout import CompletionRollout, prompts  # noqa: E402
from eligibility.lm.tasks import make_task  # noqa: E402
from test_lm_policy import _imports  # noqa: E402

LM = Path(__file__).resolve().parents[1] / "src" / "eligibility" / "lm"
KINDS = {"Task", "EpisodicTask", "Completions", "Episodes"}


@pytest.mark.parametrize("module", ["update", "trainer"])
def test_the_loop_imports_nothing_of_the_episodes(module):
    bad = sorted(n for n in _imports(LM / f"{module}.py") if "lm.episodes" in n)
    assert not bad, f"lm/{module}.py imports {bad}: ask the run's rollout (lm.rollout)"


def _kind_asked(path: Path, root: Path = LM) -> list[str]:
    """The functions of ``path`` that call ``isinstance(x, K)`` with K a task or batch kind."""
    found = []
    for fn in _source.nodes(path):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for call in ast.walk(fn):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "isinstance":
                kinds = call.args[1]
                names = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
                if any(getattr(n, "id", getattr(n, "attr", None)) in KINDS for n in names):
                    found.append(f"{path.relative_to(root)}:{fn.name}")
    return found


def test_the_kind_of_task_is_asked_nowhere():
    """A task comes with its rollout (``Task.rollout``): no function of lm/ switches on a kind."""
    asked = sorted({f for p in LM.rglob("*.py") for f in _kind_asked(p)})
    assert asked == []


def test_the_kind_test_sees_a_kind_asked(tmp_path):
    """Not vacuous: a switch on a batch's kind is caught, a tuple of kinds too."""
    p = tmp_path / "m.py"
    p.write_text("def f(b):\n    return isinstance(b, (int, Episodes))\n")
    assert _kind_asked(p, tmp_path) == ["m.py:f"]


def test_each_kind_gets_its_rollout_and_the_prompts_of_an_update_are_m_repeated_g_times():
    """``guess`` (several turns) plays episodes, ``repeat`` samples completions; either's
    update draws M distinct prompts (fewer than the task has), each G times in a row."""
    episodic, single = rollout_for(make_task("guess")), rollout_for(make_task("repeat"))
    assert type(episodic) is EpisodeRollout and type(single) is CompletionRollout

    class _Run:
        config = FinetuneConfig("repeat", prompts_per_batch=3, group_size=2)

        def __init__(self, task):
            self.task = task

    rows = [prompts(_Run(r.task), np.random.default_rng(0)) for r in (episodic, single)]
    for r, rollout in zip(rows, (episodic, single), strict=True):
        assert r.tolist() == r[::2].repeat(2).tolist() and len(set(r)) == 3  # M, G each
        assert set(r) <= set(range(len(rollout.task.prompts)))
