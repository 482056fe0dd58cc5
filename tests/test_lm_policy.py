"""The language-model wing's fence: the training loop speaks to one ``Policy``.

The loop's modules (the loop itself, its learner, the sampler, the micro-batches, the
evaluation, the objective, the watches, the batch and the rollout) never import the edge
(``lm.edge``: transformers, peft, the direct forward, the device) nor those libraries: read
from their source with ``ast``, so an import inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import _source

LM = Path(__file__).resolve().parents[1] / "src" / "eligibility" / "lm"
LOOP = ("trainer", "update", "learner", "sample", "micro", "evaluation", "objective", "metrics",
        "watches", "truncation", "mismatch", "batch", "rollout")  # fmt: skip
EDGE = ("eligibility.lm.edge", "transformers", "peft", "accelerate")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in _source.nodes(path):
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
    """Outside lm/edge/, the modules that import it or its libraries (every module of lm/, its
    subpackages' too) are the set-up's (its measurement of the model too, in the run's
    precision), the commands' and the loop's owners (the policy, the checkpointer; the
    data-parallel rows, over the ranks) only."""
    allowed = {"policy", "checkpointer", "rows", "build", "measure", "usertask", "runs", "config"}
    modules = {p.relative_to(LM).with_suffix("").as_posix(): p for p in LM.rglob("*.py")}
    reach = {
        name
        for name, p in modules.items()
        if not name.startswith("edge/") and any(n.startswith(EDGE) for n in _imports(p))
    }
    assert "episodes/tools" in modules  # the subpackages are seen
    assert reach <= allowed, sorted(reach - allowed)


def test_the_sampler_samples_the_weights_after_a_fused_adam_step():
    """Adam's fused kernel writes the weights without counting a version: a direct forward
    kept across a step would sample from the weights before it while the scorer reads the
    new ones. The sampler's log-probs are the training scorer's after a step (float32, 1e-4).
    Fails with the forward kept for the run (the first sampling's merged weights)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import numpy as np

    from eligibility.lm.learner import Learner
    from eligibility.lm.policy import Policy
    from eligibility.lm.sample import sample, token_logps
    from test_lm_llama import _model

    policy = Policy(_model("llama"))
    assert policy.forward.kind == "direct"
    learner = Learner(policy, lr=0.05)
    prompts = [[1, 5, 6], [1, 7]] * 2

    def apart() -> float:
        batch = sample(policy, prompts, vocab_size=11, max_new_tokens=4,
                       rng=np.random.default_rng(0))  # fmt: skip
        scored = token_logps(policy, batch, vocab_size=11)  # with gradients, as training scores
        return float((scored.detach() - batch.logps).abs().max())

    assert apart() < 1e-4
    for p in learner.params:
        p.grad = torch.randn_like(p)
    learner.optimizer.step()  # fused on the CPU: no version counted
    assert apart() < 1e-4


def test_the_edge_imports_nothing_above_it():
    """The edge is the bottom of the wing: what it needs lives in it (the built-in model, a
    model's sizes), so ``lm/`` imports it and never the other way."""
    for p in sorted((LM / "edge").glob("*.py")):
        up = sorted(
            n
            for n in _imports(p)
            if n.startswith("eligibility.lm") and not n.startswith("eligibility.lm.edge")
        )
        assert not up, f"lm/edge/{p.name} imports {up}: move what it needs into the edge"
