"""CPU scan kernels compiled by numba: parallel over batch x channel blocks, sequential over time.

Layouts (all C-contiguous, time is axis 1):

    b, h, grads        (B, L, D)
    a / log_a          (Ba, La, D) with Ba in {1, B}, La in {1, L}: a time-invariant or
                       batch-shared decay is read in place, never materialised
    h0                 (B, D)

One kernel source serves float32/64 and complex64/128: numba specialises per dtype, and
``_conj`` is the identity on reals. Arithmetic stays in the input dtype, one rounding per
multiply and per add, as the torch reference does (no fastmath, so no FMA contraction).

The memory traffic is the floor: forward reads a, b and writes h (12 B/elem in fp32); backward
reads grad_h, a, h and writes grad_b, grad_a (20 B/elem). The inner loop runs over a contiguous
block of channels so LLVM vectorises it; each task owns its channels for the whole sequence, so
no two threads ever write the same element.

Compilation is lazy and cached on disk (``cache=True``): the first call per dtype pays a few
seconds, later processes load the machine code. Nothing is compiled at install.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

# numba's OpenMP layer shares libgomp with torch: its set_num_threads then resets torch's thread
# count (seen: torch.set_num_threads(1) undone by the first scan, and 3x slower training on a
# busy machine). Its own workqueue layer leaves torch alone.
os.environ.setdefault("NUMBA_THREADING_LAYER", "workqueue")
import numba  # noqa: E402
import numpy as np
import torch
from numba import prange

from ablate.ops.numba_math import fast_exp, fast_log1p, one_like
from ablate.ops.scan_buffers import GA_FULL, GA_SUM_T, grad_a_buffer, reduce_batch

# A task owns a block of at least this many channels (64 bytes of fp32: one cache line).
_MIN_BLOCK = 16
_TASKS_PER_THREAD = 4
# Elements per extra thread: below this a scan runs on one thread (~100 us of work at ~1 ns/elem).
_WORK_PER_THREAD = 1 << 17


@numba.njit(inline="always")
def _conj(x):
    return np.conj(x)


@numba.njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def _linear_fwd(a, b, h0, out, blk):
    # h_{t-1} is read back from the row of out just written (in L1) rather than kept in a
    # scratch array: one store an element instead of two, 1.3x faster for float32 at L = 4096
    # here (complex64 the same). The log scan and the backward scans measured no better, or
    # worse (complex backward 0.8x), that way, so they keep their carry arrays.
    B, L, D = b.shape
    nblk = (D + blk - 1) // blk
    ab = 1 if a.shape[0] > 1 else 0
    at = 1 if a.shape[1] > 1 else 0
    for task in prange(B * nblk):
        i = task // nblk
        d0 = (task % nblk) * blk
        n = min(blk, D - d0)
        ia = i * ab
        hp = h0[i, d0 : d0 + n]
        for t in range(L):
            a_t = a[ia, t * at, d0 : d0 + n]
            b_t = b[i, t, d0 : d0 + n]
            o_t = out[i, t, d0 : d0 + n]
            for j in range(n):
                o_t[j] = a_t[j] * hp[j] + b_t[j]
            hp = o_t


@numba.njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def _linear_bwd(a, h, h0, gh, ga, gb, gh0, ga_mode, blk):
    # Reverse scan of the adjoint: g_t = gh_t + conj(a_{t+1}) g_{t+1}; grad_b_t = g_t,
    # grad_a_t = g_t conj(h_{t-1}) (h_{-1} = h0), grad_h0 = conj(a_0) g_0. Conjugates follow
    # torch's convention for complex gradients (grad of x*y wrt x is grad * conj(y)).
    B, L, D = h.shape
    nblk = (D + blk - 1) // blk
    ab = 1 if a.shape[0] > 1 else 0
    at = 1 if a.shape[1] > 1 else 0
    for task in prange(B * nblk):
        i = task // nblk
        d0 = (task % nblk) * blk
        n = min(blk, D - d0)
        ia = i * ab
        carry = np.zeros(n, dtype=h.dtype)  # conj(a_{t+1}) g_{t+1}
        acc = np.zeros(n, dtype=h.dtype)  # sum_t grad_a_t when a is time-invariant
        for t in range(L - 1, -1, -1):
            a_t = a[ia, t * at, d0 : d0 + n]
            gh_t = gh[i, t, d0 : d0 + n]
            gb_t = gb[i, t, d0 : d0 + n]
            hp = h[i, t - 1, d0 : d0 + n] if t > 0 else h0[i, d0 : d0 + n]
            if ga_mode == GA_FULL:
                # Two loops: with the grad_a store in the recurrence's loop LLVM gives up on
                # vectorising it (2.1 vs 1.1 ns an element here); the second pass reads g back
                # from L1.
                for j in range(n):
                    g = gh_t[j] + carry[j]
                    gb_t[j] = g
                    carry[j] = _conj(a_t[j]) * g
                ga_t = ga[i, t, d0 : d0 + n]
                for j in range(n):
                    ga_t[j] = gb_t[j] * _conj(hp[j])
            elif ga_mode == GA_SUM_T:
                for j in range(n):
                    g = gh_t[j] + carry[j]
                    gb_t[j] = g
                    acc[j] += g * _conj(hp[j])
                    carry[j] = _conj(a_t[j]) * g
            else:
                for j in range(n):
                    g = gh_t[j] + carry[j]
                    gb_t[j] = g
                    carry[j] = _conj(a_t[j]) * g
        gh0[i, d0 : d0 + n] = carry
        if ga_mode == GA_SUM_T:
            ga[i, 0, d0 : d0 + n] = acc


@numba.njit(inline="always", error_model="numpy")
def _logaddexp(x, y):
    # max + log1p(exp(-|x - y|)): one exp and one log1p, both vectorised in float32. The
    # difference is NaN where both are -inf (h = 0 before the first input: the answer is -inf)
    # or an input is NaN (NaN): x + y is the answer in both cases. Selects, not branches.
    d = x - y
    v = max(x, y) + fast_log1p(fast_exp(-abs(d)))
    return v if d == d else x + y


@numba.njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def _log_fwd(la, lb, lh0, out, blk):
    # log h_t = logaddexp(log a_t + log h_{t-1}, log b_t): sequential, so no cumulative sum of
    # log a ever grows large (Heinsen's cumsum form loses precision at long L in fp32).
    B, L, D = lb.shape
    nblk = (D + blk - 1) // blk
    ab = 1 if la.shape[0] > 1 else 0
    at = 1 if la.shape[1] > 1 else 0
    for task in prange(B * nblk):
        i = task // nblk
        d0 = (task % nblk) * blk
        n = min(blk, D - d0)
        ia = i * ab
        s = lh0[i, d0 : d0 + n].copy()
        for t in range(L):
            la_t = la[ia, t * at, d0 : d0 + n]
            lb_t = lb[i, t, d0 : d0 + n]
            o_t = out[i, t, d0 : d0 + n]
            for j in range(n):
                v = _logaddexp(la_t[j] + s[j], lb_t[j])
                s[j] = v
                o_t[j] = v


@numba.njit(inline="always", error_model="numpy")
def _weights(x, y, s):
    # (w, v) = (exp(x - s), exp(y - s)) for s = logaddexp(x, y), so w + v = 1, with one exp: the
    # smaller weight from its own exponent (full relative precision however small it is), the
    # larger, >= 1/2, as 1 minus it (no cancellation). Both 0 where s = -inf (h is still 0).
    empty = s == -np.inf
    small = fast_exp(s if empty else min(x, y) - s)
    big = small if empty else one_like(s) - small
    return (small, big) if x <= y else (big, small)


@numba.njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def _log_bwd(la, lb, s, lh0, gs, gla, glb, glh0, ga_mode, blk):
    # With w_t = exp(log a_t + s_{t-1} - s_t) and v_t = exp(log b_t - s_t) (w_t + v_t = 1):
    # g_t = gs_t + w_{t+1} g_{t+1}; grad log b_t = g_t v_t; grad log a_t = g_t w_t;
    # grad log h0 = w_0 g_0.
    B, L, D = s.shape
    nblk = (D + blk - 1) // blk
    ab = 1 if la.shape[0] > 1 else 0
    at = 1 if la.shape[1] > 1 else 0
    for task in prange(B * nblk):
        i = task // nblk
        d0 = (task % nblk) * blk
        n = min(blk, D - d0)
        ia = i * ab
        carry = np.zeros(n, dtype=s.dtype)  # w_{t+1} g_{t+1}
        acc = np.zeros(n, dtype=s.dtype)
        for t in range(L - 1, -1, -1):
            la_t = la[ia, t * at, d0 : d0 + n]
            lb_t = lb[i, t, d0 : d0 + n]
            s_t = s[i, t, d0 : d0 + n]
            sp = s[i, t - 1, d0 : d0 + n] if t > 0 else lh0[i, d0 : d0 + n]
            gs_t = gs[i, t, d0 : d0 + n]
            glb_t = glb[i, t, d0 : d0 + n]
            if ga_mode == GA_FULL:
                # grad log a_t = g_t w_t is the carry; stored in a second loop, as in _linear_bwd.
                for j in range(n):
                    g = gs_t[j] + carry[j]
                    w, v = _weights(la_t[j] + sp[j], lb_t[j], s_t[j])
                    glb_t[j] = g * v
                    carry[j] = w * g
                gla[i, t, d0 : d0 + n] = carry
            elif ga_mode == GA_SUM_T:
                for j in range(n):
                    g = gs_t[j] + carry[j]
                    w, v = _weights(la_t[j] + sp[j], lb_t[j], s_t[j])
                    glb_t[j] = g * v
                    acc[j] += g * w
                    carry[j] = w * g
            else:
                for j in range(n):
                    g = gs_t[j] + carry[j]
                    w, v = _weights(la_t[j] + sp[j], lb_t[j], s_t[j])
                    glb_t[j] = g * v
                    carry[j] = w * g
        glh0[i, d0 : d0 + n] = carry
        if ga_mode == GA_SUM_T:
            gla[i, 0, d0 : d0 + n] = acc


# --- torch-facing wrappers: the interface every backend module provides -----------------------


def _launch(kernel: Callable[..., None], shape: torch.Size, *args: Any) -> None:
    """Run ``kernel(*args, block)`` on as many threads as the work pays for.

    Waking the pool costs tens of microseconds, and far more on a busy machine, so small scans run
    on the calling thread alone. Channels per task: whole rows when the batch alone gives every
    thread a few tasks, else D is split so that it does.
    """
    batch, length, channels = shape
    have = numba.get_num_threads()
    threads = max(1, min(have, batch * length * channels // _WORK_PER_THREAD))
    per_row = max(1, math.ceil(_TASKS_PER_THREAD * threads / batch))
    block = max(_MIN_BLOCK, math.ceil(channels / per_row))
    if threads == have:
        kernel(*args, block)
        return
    numba.set_num_threads(threads)  # applies to this calling thread's launches only
    try:
        kernel(*args, block)
    finally:
        numba.set_num_threads(have)


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().numpy()


def _zeros_state(b: torch.Tensor) -> torch.Tensor:
    return torch.zeros(b.shape[0], b.shape[2], dtype=b.dtype)


def linear_forward(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None) -> torch.Tensor:
    out = torch.empty_like(b)
    h0 = _zeros_state(b) if h0 is None else h0
    _launch(_linear_fwd, b.shape, _np(a), _np(b), _np(h0), _np(out))
    return out


def linear_backward(
    a: torch.Tensor, h: torch.Tensor, h0: torch.Tensor | None, grad_h: torch.Tensor, need_a: bool
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """Returns (grad_a shaped like a or None, grad_b, grad_h0 of shape (B, D))."""
    h0 = _zeros_state(h) if h0 is None else h0
    ga, mode = grad_a_buffer(a, h, need_a)
    gb = torch.empty_like(h)
    gh0 = torch.empty_like(h0)
    _launch(_linear_bwd, h.shape, _np(a), _np(h), _np(h0), _np(grad_h), _np(ga), _np(gb), _np(gh0), mode)
    return (reduce_batch(ga, a) if need_a else None), gb, gh0


def _neg_inf_state(b: torch.Tensor) -> torch.Tensor:
    return torch.full((b.shape[0], b.shape[2]), -math.inf, dtype=b.dtype)


def log_forward(la: torch.Tensor, lb: torch.Tensor, lh0: torch.Tensor | None) -> torch.Tensor:
    out = torch.empty_like(lb)
    lh0 = _neg_inf_state(lb) if lh0 is None else lh0
    _launch(_log_fwd, lb.shape, _np(la), _np(lb), _np(lh0), _np(out))
    return out


def log_backward(
    la: torch.Tensor,
    lb: torch.Tensor,
    s: torch.Tensor,
    lh0: torch.Tensor | None,
    grad_s: torch.Tensor,
    need_a: bool,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """Returns (grad log_a shaped like log_a or None, grad log_b, grad log_h0 of shape (B, D))."""
    lh0 = _neg_inf_state(s) if lh0 is None else lh0
    gla, mode = grad_a_buffer(la, s, need_a)
    glb = torch.empty_like(s)
    glh0 = torch.empty_like(lh0)
    args = (_np(la), _np(lb), _np(s), _np(lh0), _np(grad_s), _np(gla), _np(glb), _np(glh0), mode)
    _launch(_log_bwd, s.shape, *args)
    return (reduce_batch(gla, la) if need_a else None), glb, glh0
