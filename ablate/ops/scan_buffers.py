"""Gradient buffers shared by the compiled scan backends (numba, triton).

The kernels see ``a`` as (Ba, La, D) with Ba in {1, B} and La in {1, L}. Where a is time-invariant
(La = 1) the kernel sums grad_a over time itself, into a (B, 1, D) buffer, so the (B, L, D)
gradient is never written; a batch-shared a gets its gradient summed over the batch afterwards.
"""

from __future__ import annotations

import torch

GA_NONE = 0  # a needs no gradient
GA_FULL = 1  # one gradient per time step: (B, L, D)
GA_SUM_T = 2  # summed over time in the kernel: (B, 1, D)


def grad_a_buffer(a: torch.Tensor, b: torch.Tensor, need: bool) -> tuple[torch.Tensor, int]:
    """(buffer for grad_a, GA_* mode) for a of shape (Ba, La, D) against b of shape (B, L, D)."""
    B, L, D = b.shape
    if not need:
        return torch.empty(1, 1, 1, device=b.device, dtype=b.dtype), GA_NONE
    if a.shape[1] == 1 and L > 1:
        return torch.empty(B, 1, D, device=b.device, dtype=b.dtype), GA_SUM_T
    return torch.empty(B, L, D, device=b.device, dtype=b.dtype), GA_FULL


def reduce_batch(grad: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Sum the kernel's per-sequence grad_a over the batch where a is shared by the batch."""
    return grad.sum(0, keepdim=True) if a.shape[0] == 1 and grad.shape[0] > 1 else grad
