"""A training step that calls ``backward()`` and ``optimizer.step()`` itself (``--form step``).

One micro-batch per group, each group's loss divided by the number of groups, the gradient
clipped by ``clip_grad_norm_`` and one optimiser step: RLOO, summed over each completion.
``tight`` clips at 0.01, which every problem's gradient exceeds; ``never_steps`` forgets both
``backward()`` and ``step()``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

# the group's loss as the example writes it (examples/check/sequence/training_step.py)
_EXAMPLE = Path(__file__).parents[2] / "examples" / "check" / "sequence" / "training_step.py"
_spec = importlib.util.spec_from_file_location("_training_step_example", _EXAMPLE)
_example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_example)
_group_loss = _example._group_loss


def step(model, optimizer, batch, max_norm=1.0):
    G = batch.group_size
    groups = len(batch.rewards) // G
    optimizer.zero_grad()
    for g in range(groups):
        (_group_loss(model, batch, slice(g * G, (g + 1) * G)) / groups).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()


def tight(model, optimizer, batch):
    step(model, optimizer, batch, max_norm=0.01)


def fixed(model, optimizer, batch):
    step(model, optimizer, batch, max_norm=1e6)


def never_steps(model, optimizer, batch):
    G = batch.group_size
    _group_loss(model, batch, slice(0, G))
