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
    out = []
    for rows, logps, batch in batches:
        x = logps.clone().requires_grad_(True)
        (dl,) = torch.autograd.grad(fn(x, batch), x)
        W = dl.shape[1]
        out.append(-np.einsum("nt,ntp->p", dl.double().numpy(), scores[rows, :W]))
    return np.stack(out)
