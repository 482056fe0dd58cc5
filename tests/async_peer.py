"""The sampler's end of the channel in a process of its own, for tests/test_lm_async.py.

``python async_peer.py PORT MODE``: ``echo`` receives one version of the weights (the shapes
of :func:`weights`) and sends it back as a batch; ``silent`` connects and sends nothing.
"""

from __future__ import annotations

import sys
import time

import torch

from eligibility.lm.channel import Channel, Sampled, join_store


def weights() -> dict[str, torch.Tensor]:
    """The tensors the test sends: three dtypes, one of them bfloat16."""
    g = torch.Generator().manual_seed(0)
    return {
        "w": torch.randn(3, 4, generator=g),
        "b": torch.randn(2, generator=g, dtype=torch.float64),
        "h": torch.randn(5, generator=g).to(torch.bfloat16),
    }


if __name__ == "__main__":
    port, mode = int(sys.argv[1]), sys.argv[2]
    channel = Channel(join_store(port, 60.0), 1, 60.0)
    if mode == "echo":
        like = {k: torch.empty_like(v) for k, v in weights().items()}
        version, got = channel.receive_weights(like)
        channel.send_object(Sampled(version + 1, version, got, [{"state": 7}]), "a batch")
    time.sleep(30 if mode == "silent" else 1)
