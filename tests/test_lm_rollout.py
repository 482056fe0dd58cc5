"""A rollout per kind of task, chosen once (``lm.rollout``, ``lm.build.rollout_for``).

Truth: the source read with ``ast`` (what the loop imports; where a task's or a batch's kind
is asked), and the draws of a run (the prompts of each kind drawn alike from one generator).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import ClassVar

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
        counters: ClassVar[dict[str, int]] = {"updates": 0}

        def __init__(self, task):
            self.task = task

    rows = [prompts(_Run(r.task), np.random.default_rng(0)) for r in (episodic, single)]
    for r, rollout in zip(rows, (episodic, single), strict=True):
        assert r.tolist() == r[::2].repeat(2).tolist() and len(set(r)) == 3  # M, G each
        assert set(r) <= set(range(len(rollout.task.prompts)))


class _Walk:
    """What :func:`prompts` reads of a run: its task's prompts, M, G, the seed, the updates."""

    def __init__(self, n: int, m: int, seed: int = 0, updates: int = 0) -> None:
        self.task = type("T", (), {"prompts": [(i,) for i in range(n)]})()
        self.config = FinetuneConfig("repeat", prompts_per_batch=m, group_size=2, seed=seed)
        self.counters = {"updates": updates}


def test_the_prompts_are_walked_in_epochs_as_trls_sampler_walks_its_dataset():
    """Against a plain loop: each epoch a shuffle of N prompts cut into ⌊N/M⌋ batches of M
    distinct ones, the N mod M left over undrawn that epoch; the draw a function of the seed
    and the update alone (a resumed run walks on exactly), ``prompt_rng`` not read."""
    n, m = 11, 3
    untouched = np.random.default_rng(5)
    walked = [prompts(_Walk(n, m, seed=7, updates=u), untouched)[::2].tolist() for u in range(9)]
    assert untouched.bit_generator.state == np.random.default_rng(5).bit_generator.state
    for epoch in range(3):
        order = np.random.default_rng(np.random.SeedSequence(7, spawn_key=(3, epoch))).permutation(
            n
        )
        batches = [order[j * m : (j + 1) * m].tolist() for j in range(n // m)]
        assert walked[3 * epoch : 3 * epoch + 3] == batches
        seen = [i for b in batches for i in b]
        assert len(set(seen)) == len(seen) == n - n % m  # each once, the rest left over
    assert walked[:3] != walked[3:6]  # a shuffle of its own each epoch
    again = prompts(_Walk(n, m, seed=7, updates=4), np.random.default_rng(99))
    assert again[::2].tolist() == walked[4]  # where the counter says, whatever the generator


def test_fewer_prompts_than_a_batch_are_drawn_with_replacement():
    rng = np.random.default_rng(0)
    drawn = prompts(_Walk(2, 5), rng)
    assert len(drawn) == 10 and set(drawn.tolist()) <= {0, 1}


def test_the_kinds_of_task_and_the_rollouts_speak_one_vocabulary(tmp_path):
    """Each rollout is named by a kind of task (``usertask.KINDS``), each task class names a
    rollout, and a task of each kind that needs no model directory gets its rollout: a
    built-in one (either), a Gymnasium id of text (episodes), the user's prompts (prompts)."""
    from _user_code_here import rewards_here, worlds_here
    from eligibility.lm.build import ROLLOUTS
    from eligibility.lm.tasks import Task
    from eligibility.lm.usertask import KINDS, Given, kind_of
    from eligibility.lm.usertask import make_task as user_task

    assert set(ROLLOUTS) <= set(KINDS)
    classes, seen = [Task], []
    while classes:
        seen.append(cls := classes.pop())
        classes += cls.__subclasses__()
    assert {c.rollout for c in seen} == set(ROLLOUTS)

    zero = "def zero(completions, **kw):\n    return [0.0] * len(completions)\n"
    (tmp_path / "m.py").write_text(zero)
    made = {
        ("built-in", "prompts"): (FinetuneConfig("repeat"), {}),
        ("built-in", "episodes"): (FinetuneConfig("guess"), {}),
        ("environment", "episodes"): (FinetuneConfig("_text_env:EchoText-v0"), {}),
        ("prompts", "prompts"): (
            FinetuneConfig(f"{tmp_path}/m.py:zero"),
            {"records": ([{"prompt": "ab"}], None)},
        ),
    }
    with rewards_here(), worlds_here():
        for (kind, rollout), (config, given) in made.items():
            assert kind_of(config, Given(**given)) == kind
            task = user_task(config, **given)
            try:
                assert task.rollout == rollout and type(rollout_for(task)) is ROLLOUTS[rollout]
            finally:
                task.close()
