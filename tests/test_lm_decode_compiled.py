"""The compiled decode step (``--compile-decode``): torch.compile over the model's step that
CUDA captures with the draw.

Run here with fixed shapes, as on CUDA (the step warmed up as a capture warms it up, then run
eagerly). The compiled model step is one graph (``fullgraph``: no Python between its kernels),
gives the eager step's tokens and log-probs, and is compiled once a run: a new prompt length
compiles it once more, its lengths then symbolic, and no later sampling compiles it again.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from eligibility.lm.edge import decoding as lm_decoding  # noqa: E402
from eligibility.lm.policy import Policy  # noqa: E402
from eligibility.lm.sample import sample  # noqa: E402
from test_lm_decode import TRUNCATIONS, V, _qwen3, llama  # noqa: E402


@pytest.fixture
def compiles(monkeypatch):
    """The frames compiled, counted, with ``backend`` (default: the traced graph run eagerly,
    so its numbers are the eager step's own); fixed shapes as on CUDA."""
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    real = torch.compile
    backend = {"backend": counter}

    def compile(fn, **kw):
        assert kw.get("fullgraph"), "the step is compiled whole"
        return real(fn, **{**kw, **backend})

    monkeypatch.setattr(lm_decoding, "fixed_shapes", lambda device: True)
    monkeypatch.setattr(torch, "compile", compile)
    torch._dynamo.reset()
    yield counter, backend
    torch._dynamo.reset()


def _sampled(model, length: int, compiled: bool, **kw):
    rng = np.random.default_rng(length)
    prompts = [tuple(int(x) for x in rng.integers(3, V - 2, length)) for _ in range(2)]
    kw = {"rng": np.random.default_rng(7), **kw}
    with Policy(model, compile_decode=compiled) as policy:
        rows = [p for p in prompts for _ in range(3)]
        return sample(policy, rows, vocab_size=V - 2, max_new_tokens=9, **kw)


def test_the_compiled_step_is_the_eager_steps_and_compiles_once_a_run(compiles):
    counter, _ = compiles
    model = llama(3)
    # once at the first length, once more at a new one (then symbolic), never again
    for length, frames in ((5, 1), (5, 1), (7, 2), (9, 2), (5, 2)):
        eager, compiled = _sampled(model, length, False), _sampled(model, length, True)
        assert torch.equal(compiled.completion_ids, eager.completion_ids)
        assert torch.equal(compiled.logps, eager.logps) and torch.equal(compiled.ended, eager.ended)
        assert counter.frame_count == frames


def test_a_greedy_and_a_truncated_sampling_reuse_the_compiled_model_step(compiles):
    """The draw stays eager (``decoding.compiled_step``): another draw compiles nothing."""
    counter, _ = compiles
    model = llama(4)
    for kw in ({"sampling": TRUNCATIONS["penalty"]}, {"rng": None}):
        eager, compiled = _sampled(model, 6, False, **kw), _sampled(model, 6, True, **kw)
        assert torch.equal(compiled.completion_ids, eager.completion_ids)
        assert torch.equal(compiled.logps, eager.logps)
    assert counter.frame_count == 1


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_inductors_fused_step_gives_the_eager_steps_tokens(family, compiles):
    """Inductor's kernels (on the CPU here): the same tokens, log-probs within float32's
    rounding (fused reductions sum in another order); the direct forward and a family
    ``transformers`` computes through its ``StaticCache``."""
    _, backend = compiles
    backend.clear()  # torch's default backend, inductor
    model = llama(5) if family == "llama" else _qwen3(layers=2)
    eager, compiled = _sampled(model, 6, False), _sampled(model, 6, True)
    assert torch.equal(compiled.completion_ids, eager.completion_ids)
    torch.testing.assert_close(compiled.logps, eager.logps, rtol=0, atol=1e-5)
