"""The sequence examples (examples/check/sequence) run under the contract, and the ones whose
gradient has a closed form match it batch by batch, against the problem's exact score tables."""

from __future__ import annotations

import importlib.util
import inspect
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from eligibility.check.step import stepped
from eligibility.lab.sequence import PROBLEMS, get_problem
from eligibility.lab.sequence.handed import policy_model

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "check" / "sequence"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"seq_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _functions():
    for path in sorted(EXAMPLES.glob("*.py")):
        module = _module(path.stem)
        for name, fn in vars(module).items():
            if (
                inspect.isfunction(fn)
                and not name.startswith("_")
                and fn.__module__ == module.__name__
            ):
                params = tuple(inspect.signature(fn).parameters)[:3]
                if params[0] in ("logps", "model") and len(params) == 2:
                    yield f"{path.stem}:{name}", fn, params[0] == "model"
                elif params == ("model", "optimizer", "batch"):  # --form step
                    yield f"{path.stem}:{name}", fn, "step"


@pytest.fixture(scope="module")
def problems():
    return {name: get_problem(name) for name in PROBLEMS}


def _gradient(p, fn, model_form, batch):
    p.reset()
    logps, batch = p.on_policy(batch)
    model = policy_model(p.model, p.eos_token_id)  # the model form's: pad token V, shared θ
    advantages = fn.__globals__.get("advantages")  # --advantages: its module computes them
    if advantages is not None:
        batch = replace(batch, advantages=advantages(batch))
    if model_form == "step":
        params = list(p.model.parameters())
        return stepped(fn, model, batch, params, [w.detach().clone() for w in params])
    loss = fn(model, batch) if model_form else fn(logps, batch)
    assert loss.shape == () and torch.isfinite(loss)
    if not loss.requires_grad:
        return None
    grads = torch.autograd.grad(loss, list(p.model.parameters()), allow_unused=True)
    return -np.concatenate(
        [
            (g if g is not None else torch.zeros_like(w)).reshape(-1).double().numpy()
            for g, w in zip(grads, p.model.parameters(), strict=True)
        ]
    )


def _every_example_returns_a_finite_scalar(problems):
    found = list(_functions())
    files = {name.split(":")[0] for name, _, _ in found}
    assert files == {path.stem for path in EXAMPLES.glob("*.py")} and len(found) >= 19
    for name, fn, model_form in found:
        for p in problems:
            p.reset()
            g = _gradient(p, fn, model_form, p.sample(2, np.random.default_rng(0)))
            assert (g is None) == name.endswith(":detached"), name
            assert g is None or np.isfinite(g).all(), name


def _batch(p, seed=1, groups=4):
    d = p.draw(groups, np.random.default_rng(seed))
    return d.rows, p.batch(d)


def _rloo(p, rows):
    r = p.shaped_reward[rows].reshape(-1, p.group_size)
    G = p.group_size
    return ((G * r - r.sum(1, keepdims=True)) / (G - 1)).reshape(-1)


def test_every_example_returns_a_finite_scalar(problems):
    _every_example_returns_a_finite_scalar([problems["kl"]])  # β > 0: every path


@pytest.mark.slow
def test_every_example_returns_a_finite_scalar_on_every_problem(problems):
    _every_example_returns_a_finite_scalar(problems.values())


@pytest.mark.parametrize(
    "name",
    [
        "kl",
        pytest.param("length", marks=pytest.mark.slow),
        pytest.param("difficulty", marks=pytest.mark.slow),
    ],
)
def test_correct_losses_are_the_rloo_estimate(problems, name):
    """rloo and the correct model form give ĝ = (1/N) Σᵢ Aᵢ ∇log π(oᵢ) exactly."""
    for p in [problems[name]]:
        rows, batch = _batch(p)
        expected = _rloo(p, rows) @ p.scores[rows] / len(rows)
        for module, name, model_form in [
            ("rloo", "loss", False),
            ("model_form", "loss", True),
        ]:
            g = _gradient(p, getattr(_module(module), name), model_form, batch)
            np.testing.assert_allclose(g, expected, atol=2e-6, err_msg=f"{module}:{name}")


def test_kl_placements_match_their_formulas(problems):
    """k1 reward-to-go: Σₜ (Aᵢ − β Σ_{t'≥t} dₜ') ∇ℓₜ; k3 in the loss: −β (1 − ρₜ) ∇ℓₜ added."""
    p = problems["kl"]
    rows, batch = _batch(p)
    t, S = p.table, p.token_scores[rows][:, : batch.completion_mask.shape[1]]
    r = t.reward[rows].reshape(-1, p.group_size)
    G = p.group_size
    a = ((G * r - r.sum(1, keepdims=True)) / (G - 1)).reshape(-1, 1)
    d = (t.token_logp - t.ref_token_logp)[rows][:, : S.shape[1]]
    to_go = np.cumsum(d[:, ::-1], axis=1)[:, ::-1]
    module = _module("kl_placements")
    g = _gradient(p, module.k1_reward_to_go, False, batch)
    expected = np.einsum("nt,ntp->p", a - p.beta * to_go, S) / len(rows)
    np.testing.assert_allclose(g, expected, atol=2e-6)
    g = _gradient(p, module.k3_in_loss, False, batch)
    expected = np.einsum("nt,ntp->p", a - p.beta * (1 - np.exp(-d)), S) / len(rows)
    np.testing.assert_allclose(g, expected, atol=2e-6)
