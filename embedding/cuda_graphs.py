"""Replay a model's forward pass from CUDA graphs, one per micro-batch shape.

A small model's micro-batch is little work for a GPU and a lot for the host: MiniLM runs ~125
kernels per forward pass, each launched through transformers' Python layers, and on an H100 the GPU
waited for the host most of the time. On GPUs every micro-batch already has a fixed (rows, length)
shape (`embedding.batching`), at most one per bucket length, so each shape's forward pass is
captured once as a CUDA graph (`torch.cuda.CUDAGraph`) and then replayed with one launch. The
replay runs the kernels that the capture chose, so a row's bits still depend only on its own
tokens and its batch's shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

Forward = Callable[..., torch.Tensor]  # device tensors in, one device tensor out


@dataclass(frozen=True, eq=False)
class Captured:
    """One shape's graph, the input tensors it reads and the output tensor it writes."""

    graph: torch.cuda.CUDAGraph
    inputs: tuple[torch.Tensor, ...]
    output: torch.Tensor


class GraphedForward:
    """`forward` on host tensors of any shape, replayed from a graph captured at its first call.

    Not for threads at once: the embedder calls it under its model lock."""

    def __init__(self, forward: Forward, device: torch.device):
        self._forward = forward
        self._device = device
        self._graphs: dict[tuple, Captured] = {}
        self._pool = torch.cuda.graph_pool_handle()  # one memory pool for every shape's graph

    @property
    def shapes(self) -> int:
        """How many input shapes have a captured graph."""
        return len(self._graphs)

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        """`forward(*inputs)` (on the device), as a fresh tensor the next replay leaves alone."""
        shape = tuple((tuple(t.shape), t.dtype) for t in inputs)
        captured = self._graphs.get(shape) or self._capture(shape, inputs)
        for static, value in zip(captured.inputs, inputs, strict=True):
            static.copy_(value.pin_memory(), non_blocking=True)
        captured.graph.replay()
        return captured.output.clone()

    def _capture(self, shape: tuple, inputs: tuple[torch.Tensor, ...]) -> Captured:
        """Run `forward` once on a side stream (kernels load, libraries pick their algorithms),
        then capture it into a graph that reads fixed input tensors."""
        static = tuple(t.to(self._device) for t in inputs)
        side = torch.cuda.Stream(self._device)
        side.wait_stream(torch.cuda.current_stream(self._device))
        with torch.cuda.stream(side):
            self._forward(*static)
        torch.cuda.current_stream(self._device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # "thread_local": the actor's other thread (tokens, cache files) may call CUDA meanwhile.
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            output = self._forward(*static)
        self._graphs[shape] = Captured(graph, static, output)
        return self._graphs[shape]


def graphed(
    forward: Forward, device: torch.device, example: tuple[torch.Tensor, ...]
) -> GraphedForward | None:
    """`forward` replayed from CUDA graphs, when the graph of the `example` host tensors gives the
    bits of an eager call; None when it does not, or when `forward` cannot be captured (it waits
    for the device, e.g. reads a value back, which a capture refuses)."""
    replayer = GraphedForward(forward, device)
    try:
        replayed = replayer(*example)
    except RuntimeError:
        return None
    eager = forward(*(t.to(device) for t in example))
    return replayer if torch.equal(replayed, eager) else None
