"""The option table's fast form: a row's ĝₖ without a model pass per call.

``tests/test_torch_options.py`` and ``tests/test_offpolicy_options.py`` check every row's claimed
verdict at a small N on batches drawn once and shared by the rows; each row's estimates come
from its loss differentiated in the log-probs ℓ (autograd), chained with the enumeration's exact
per-token scores ∇ℓ. Each of them holds these against the check's own calls through the model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def gradients(fn: Any, problem: Any, batches: list[tuple[Any, torch.Tensor, Any]]) -> np.ndarray:
    """ĝₖ = −∇θ fn(ℓ, batch) = −Σᵢₜ ∂fn/∂ℓᵢₜ ∇ℓᵢₜ for each (rows, ℓ, batch) of ``batches``.

    ``problem.token_scores`` holds ∇ℓₜ(θ) of every enumeration row and token, [M, T, p];
    ``rows`` are the batch's rows in it, ℓ its log-probs at θ (detached).
    """
    scores = problem.token_scores
    xs = [logps.clone().requires_grad_(True) for _, logps, _ in batches]
    # One backward over the sum: the batches' graphs are apart, so each ∂fn/∂ℓ is the one a
    # backward of its own gives (bitwise; tests/test_torch_options.py holds it against them).
    total = sum(fn(x, batch) for x, (_, _, batch) in zip(xs, batches, strict=True))
    dls = torch.autograd.grad(total, xs)
    out = []
    for (rows, _, _), dl in zip(batches, dls, strict=True):
        W = dl.shape[1]
        out.append(-np.einsum("nt,ntp->p", dl.double().numpy(), scores[rows, :W]))
    return np.stack(out)
