"""The sampler's model side: the prompts computed once, then one token a step on their cache.

The sampler (``lm.sample``) asks a :class:`Decoding` for the logits of the next token of the
rows it computes, gives it each step's tokens, and, at its host reads, the rows still going.
Its :attr:`~Decoding.fixed` tells the sampler which reads it needs: with fixed shapes no row
leaves, so a few a sampling, whatever T_max; else every few steps (finished rows leave).
Which cache, which shapes and whether the step is captured are decided here, once a sampling:

* :class:`Decoding` (every kind but the direct one): the model's own cache, grown a token a
  step; where its rows can be indexed, finished rows leave it once they are an eighth of
  those computed (the model's step then costs the live rows only).
* :class:`StaticDecoding` (the direct Llama forward): the keys and values in buffers allocated
  once at their final size, [rows, H_kv, P + T_max, d] a layer (``llama.StaticCache``). With
  fixed shapes (:func:`fixed_shapes`: built for CUDA, held back for now) the step reads
  nothing on the host (every row computed to the end; the attention over the whole buffer,
  masked; the new keys written at a position held in a tensor): the sampler captures it with
  its draw once as a CUDA graph and replays it (:func:`replayed`).
  Elsewhere the same step runs eagerly on the filled positions, so its numbers are those of a
  cache grown by appending, exactly, and finished rows leave as above (the buffers are then
  made again with the rows kept: on a CPU the step's cost is its rows').
* :class:`TransformersStaticDecoding` (with fixed shapes, any other ``transformers`` decoder
  with a cache and no sliding window): the same fixed-shape step over ``transformers``'
  ``StaticCache``, captured. Elsewhere these models decode as :class:`Decoding`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from eligibility.lm.edge.llama import StaticCache

Forward = Any
"""``lm.edge.forward.Forward``, which builds the decodings (named here, not imported)."""


class Decoding:
    """One sampling's model side (see the module docstring).

    Args:
        forward: the model's forward (``lm.edge.forward``).
        ids: [N, P] the prompts, left-padded.
        mask: [N, P] 1 for a prompt token.
        groups: ([U] the first row of each distinct prompt, [N] each row's distinct prompt).
        max_new_tokens: T_max.
        vocab_size: V; the logits are the first V.

    Attributes:
        rows: [m] the batch's rows the model computes (all at first).
        z: [m, V] the logits of their next token.
        fixed: whether the step takes fixed shapes (every row to the end; :meth:`shrink`
            then does nothing, and the sampler reads the host a few times a sampling only).
    """

    fixed = False

    def __init__(
        self,
        forward: Forward,
        ids: torch.Tensor,
        mask: torch.Tensor,
        groups: tuple[torch.Tensor, torch.Tensor],
        max_new_tokens: int,
        vocab_size: int,
    ) -> None:
        self.forward, self.vocab_size = forward, vocab_size
        self.masked = forward.masked(mask)
        n, self.p = ids.shape
        # the mask of every position, filled as tokens come: a finished row's later tokens are
        # masked out (they are EOS padding, never scored)
        self.mask = torch.zeros((n, self.p + max_new_tokens), dtype=torch.long, device=ids.device)
        self.mask[:, : self.p] = mask
        out, self.cache = forward.prompts(ids, mask if self.masked else None, groups)
        self.rows = torch.arange(n, device=ids.device)
        self.z = forward.logits(out[:, -1], vocab_size)

    def advance(self, t: int, tokens: torch.Tensor, live: torch.Tensor) -> None:
        """Compute the logits after step ``t``'s ``tokens`` [N] (``live`` [N]: rows not ended)."""
        self.mask[:, self.p + t] = live.long()
        tok = tokens.index_select(0, self.rows)
        step = self.mask[self.rows, : self.p + t + 1] if self.masked else None
        out, self.cache = self.forward(tok[:, None], step, self.cache, use_cache=True, last=True)
        self.z = self.forward.logits(out[:, -1], self.vocab_size)

    def shrink(self, going: torch.Tensor) -> None:
        """Drop the finished rows (``going`` [N] False) once they are an eighth of :attr:`rows`.

        Only where the cache's rows can be indexed; one host read.
        """
        if not self.forward.shares:
            return
        keep = going.index_select(0, self.rows).nonzero()[:, 0]
        if len(keep) and 8 * (len(self.rows) - len(keep)) >= len(self.rows):
            self.rows, self.z = self.rows[keep], self.z[keep]
            self.cache = self.forward.expand(self.cache, keep)


class _FixedShapes(Decoding):
    """A decoding whose step takes fixed shapes and reads nothing on the host: capturable.

    The step's inputs live at fixed addresses (the tokens, the new position ``slot``, the
    attended keys ``allowed`` [N, 1, 1, S_max], the logits ``z``), made by :meth:`fixed_buffers`;
    :meth:`step_at` runs the model on them, the step's index a device tensor, so the sampler
    captures its draw and this step together and replays them (``lm.sample``).
    """

    fixed = True

    def shrink(self, going: torch.Tensor) -> None:
        """:meth:`Decoding.shrink`, but with fixed shapes, where every row stays."""
        if not self.fixed:
            super().shrink(going)

    def fixed_buffers(self) -> list[torch.Tensor]:
        """The step's buffers at fixed addresses, made once; those it writes and reads again.

        Returned for the capture's warm-up to restore (``replayed``): the logits and the mask
        of the positions filled (the cache's writes are masked until they are made again).
        """
        if not hasattr(self, "tok"):
            n, size = self.mask.shape
            self.tok = torch.zeros((n, 1), dtype=torch.long, device=self.mask.device)
            self.slot = torch.zeros(1, dtype=torch.long, device=self.mask.device)
            self.allowed = torch.zeros((n, 1, 1, size), dtype=torch.bool, device=self.z.device)
            self.z = self.z.clone()
        return [self.z, self.mask]

    def captured(self, step: Callable[[], None], state: list[torch.Tensor]) -> Callable[[], None]:
        """``step`` (which runs :meth:`step_at`) captured on this device (:func:`replayed`).

        ``state``: the tensors of the caller's that ``step`` writes and reads again; this
        decoding's own are added.
        """
        if self.forward.compiled:
            self._logits_at = self._compiled_after_one()
        return replayed(step, self.mask.device, [*state, *self.fixed_buffers()])

    def step_at(self, t: torch.Tensor, tokens: torch.Tensor, live: torch.Tensor) -> None:
        """The logits after step ``t``'s (a [1] tensor) ``tokens`` [N]; no host read."""
        self.mask.index_copy_(1, self.p + t, live.long()[:, None])
        self.tok.copy_(tokens[:, None])
        self.slot.copy_(self.p + t)
        j = torch.arange(self.mask.shape[1], device=self.mask.device)
        self.allowed.copy_((self.mask.bool() | (j == self.slot))[:, None, None])
        pos = (self.mask.sum(1, keepdim=True) - 1).clamp(min=0)
        self.z.copy_(self._logits_at(pos))

    def _logits_at(self, pos: torch.Tensor) -> torch.Tensor:
        """The model's step at positions ``pos`` [N, 1] on the step's buffers: z [N, V]."""
        return self.forward.logits(self._model_step(pos)[:, -1], self.vocab_size)

    def _compiled_after_one(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """:meth:`_logits_at` run eagerly once, then through :func:`compiled_step`.

        The eager call makes what the traced one reads and cannot trace (the direct
        forward's merged weights, ``llama.DirectLM._merged_terms``) for this sampling; the
        capture's warm-up (:func:`replayed`) makes both calls before the capture.
        """
        eager = self._logits_at

        def first(pos: torch.Tensor) -> torch.Tensor:
            self._logits_at = compiled_step(eager)
            return eager(pos)

        return first

    def _model_step(self, pos: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class StaticDecoding(_FixedShapes):
    """The direct forward's decoding: its own static cache; fixed shapes and captured on CUDA."""

    def __init__(self, forward: Forward, ids: torch.Tensor, *args: Any, **kw: Any) -> None:
        super().__init__(forward, ids, *args, **kw)
        self.cache = StaticCache(self.cache, self.mask.shape[1])
        self.fixed = fixed_shapes(ids.device)

    def _model_step(self, pos: torch.Tensor) -> torch.Tensor:
        self.cache.slot, self.cache.allowed = self.slot, self.allowed
        return self.forward.run(self.tok, None, pos, self.cache, True, True)[0]


class TransformersStaticDecoding(_FixedShapes):
    """Any other ``transformers`` decoder, on CUDA: the library's ``StaticCache``, captured.

    The prompts' cache is copied into it (the keys then written at each layer's
    ``cumulative_length``, a device tensor, set to the step's slot before each step), and the
    attended keys given as a 4D mask (taken as it is).
    """

    def __init__(self, forward: Forward, ids: torch.Tensor, *args: Any, **kw: Any) -> None:
        super().__init__(forward, ids, *args, **kw)
        import transformers

        static = transformers.StaticCache(config=forward.config, max_cache_len=self.mask.shape[1])
        for i, layer in enumerate(self.cache.layers):
            static.update(layer.keys, layer.values, i)
        self.cache = static

    def _model_step(self, pos: torch.Tensor) -> torch.Tensor:
        # each layer writes its keys at its own count of the tokens it holds, a device tensor
        # that every update advances: set to the step's slot, the step writes the same place
        # however often it runs (the capture's warm-up runs it twice before the first replay)
        for layer in self.cache.layers:
            layer.cumulative_length.copy_(self.slot[0])
        return self.forward.run(self.tok, self.allowed, pos, self.cache, True, True)[0]


def fixed_shapes(device: torch.device) -> bool:
    """Whether the static decoding takes fixed shapes and is captured: nowhere, for now.

    The captured step is built for CUDA, but on an H200 its samplings ended rows early and
    differed from one run to the next where the eager step's did not
    (``bench/lm/lm_capture_check.py``, and the measurement record's H200 runs): the graph
    kept none of its tensors alive, and the freed step index was overwritten (fixed in
    :func:`replayed`). Every device decodes eagerly until a GPU shows the fix exact; the tests
    and the benchmarks turn the capture on where they check or time it (CUDA:
    ``device.type == "cuda"``).
    """
    del device
    return False


def replayed(
    step: Callable[[], None], device: torch.device, state: list[torch.Tensor]
) -> Callable[[], None]:
    """``step`` captured once as a CUDA graph, and its replay (elsewhere ``step`` itself).

    ``step`` reads and writes tensors at fixed addresses only; ``state``: those it writes and
    reads again (its position, the rows still going, the logits, ...). It runs twice first, as
    torch warms a step up before capturing it (on a side stream on CUDA), and ``state`` is then
    put back as it was, so the warm-up leaves nothing behind: the first replay is the first
    step. The capture does not run it, so the caller replays it. Off CUDA the warm-up runs too
    (the tests of the captured path run it on the CPU: a step that its warm-up would change
    fails there as on CUDA).

    The replay holds ``step`` and ``state``: a graph reads and writes its tensors by address
    and keeps none of them alive, and a tensor held by the step alone (the sampler's step
    index) was freed once the capture returned, its memory handed to the sampler's next
    allocation (the host check's flag), which reset the index mid-sampling.
    """
    kept = [x.clone() for x in state]
    cuda = device.type == "cuda"
    if cuda:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side) if cuda else contextlib.nullcontext():
        for _ in range(2):
            step()
        for x, was in zip(state, kept, strict=True):
            x.copy_(was)
    if not cuda:
        return step
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()

    def replay(held: tuple[Callable[[], None], list[torch.Tensor]] = (step, state)) -> None:
        graph.replay()  # ``held``: what the graph reads and writes, alive as long as it is

    return replay


def compiled_step(step: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The model's step through ``torch.compile``, captured with the eager draw (:func:`replayed`).

    One graph (``fullgraph``: a graph break would leave Python between kernels). The draw is
    not in it: on torch 2.11 inductor failed to generate the float64 scan of the draw's CDF
    on CUDA ([256, 49152]: an ``InductorError`` in its Triton scan), and the model's step holds
    nearly all the kernels. Compiled once a run: torch keeps the compiled code by the step's
    code object and its guards (the shapes and the settings of a sampling), so a later
    sampling of the same shapes reuses it, and a prompt length not seen before compiles it
    once more, its lengths then symbolic.
    """
    return torch.compile(step, fullgraph=True)


__all__ = [
    "Decoding",
    "StaticDecoding",
    "TransformersStaticDecoding",
    "compiled_step",
    "fixed_shapes",
    "replayed",
]
