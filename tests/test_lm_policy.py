"""The language-model wing's fence: the training loop speaks to one ``Policy``.

The loop's modules (the loop itself, its learner, the sampler, the micro-batches, the
evaluation, the objective and the watches) never import the edge (``lm.edge``: transformers,
peft, the direct forward, the device) nor those libraries: read from their source with
``ast``, so an import inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LM = Path(__file__).resolve().parents[1] / "src" / "eligibility" / "lm"
LOOP = ("trainer", "learner", "sample", "micro", "evaluation", "objective", "metrics", "watches",
        "truncation", "mismatch")  # fmt: skip
EDGE = ("eligibility.lm.edge", "transformers", "peft", "accelerate")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


@pytest.mark.parametrize("module", LOOP)
def test_the_loop_imports_nothing_of_the_edge(module):
    bad = sorted(n for n in _imports(LM / f"{module}.py") if n.startswith(EDGE))
    assert not bad, f"lm/{module}.py imports {bad}: speak to lm.policy.Policy instead"


def test_the_fence_test_sees_an_edge_import(tmp_path):
    """Not vacuous: a module that imports the edge inside a function is caught."""
    p = tmp_path / "m.py"
    p.write_text("def f():\n    from eligibility.lm.edge import lora\n")
    assert any(n.startswith(EDGE) for n in _imports(p))


def test_only_the_set_up_and_the_fence_reach_the_edge():
    """Outside lm/edge/, the modules that import it are the set-up's and the commands' only."""
    allowed = {"policy", "build", "usertask", "runs", "config"}
    reach = {
        p.stem
        for p in LM.glob("*.py")
        if any(n.startswith("eligibility.lm.edge") for n in _imports(p))
    }
    assert reach <= allowed, sorted(reach - allowed)
