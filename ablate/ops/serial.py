"""Small tensor algebra on one CPU thread, its backward included.

    serial(fn, *tensors) -> fn(*tensors)

On a CPU whose cores are busy (other workers, numba's scan threads, other users), every parallel
region of torch's intra-op pool waits for its slowest, possibly descheduled, thread: inside a
RotRNN training step at load 8 on this 2-core machine, the (4, 32, 32) × (4, 32, 128) products
of the basis change took 18 ms a call for ~0.1 ms of work, and made the step 1.28× the LRU's.
Work this small gains nothing from threads, so ``serial`` runs ``fn``, and the backward of what
it computed (which autograd would otherwise run on the pool, outside any context of the caller),
with torch's intra-op threads set to 1. Not for large work: the whole process is on one thread
while ``fn`` or its backward runs. On other devices ``serial(fn, *tensors)`` is ``fn(*tensors)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch


@contextlib.contextmanager
def one_cpu_thread() -> Iterator[None]:
    """torch's intra-op threads set to 1 for the block (process-wide; restored after)."""
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class _Serial(torch.autograd.Function):
    """Records ``fn``'s graph on one thread in forward and replays its backward on one thread."""

    @staticmethod
    def forward(ctx: Any, fn: Callable[..., tuple[torch.Tensor, ...]], *tensors: torch.Tensor) -> Any:
        inputs = [t.detach().requires_grad_(t.requires_grad) for t in tensors]
        with one_cpu_thread(), torch.enable_grad():
            outputs = tuple(fn(*inputs))
        ctx.graph = (inputs, outputs)
        return tuple(o.detach() for o in outputs)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, *grads: torch.Tensor | None) -> Any:
        inputs, outputs = ctx.graph  # kept (retain_graph): a retained outer graph may come back
        wanted = [x for x in inputs if x.requires_grad]
        pairs = [(o, g) for o, g in zip(outputs, grads, strict=True) if g is not None and o.requires_grad]
        found: list[torch.Tensor | None] = [None] * len(wanted)
        if pairs and wanted:
            with one_cpu_thread():
                found = list(torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs],
                                                 retain_graph=True, allow_unused=True))
        it = iter(found)
        return (None, *[next(it) if x.requires_grad else None for x in inputs])


def serial(fn: Callable[..., tuple[torch.Tensor, ...]], *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``fn(*tensors)`` (a tuple of tensors) computed on one CPU thread, and so is its gradient.

    ``fn`` must be a function of ``tensors`` alone (anything else it reads is a constant to
    autograd). Without a graph to record, or off the CPU, this is a plain call (on one thread
    on the CPU)."""
    if any(t.device.type != "cpu" for t in tensors):
        return tuple(fn(*tensors))
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
        with one_cpu_thread():
            return tuple(fn(*tensors))
    return _Serial.apply(fn, *tensors)
