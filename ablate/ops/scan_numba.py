"""CPU scan kernels compiled by numba: parallel over batch x channel blocks, sequential over time.

Layouts (all C-contiguous, time is axis 1):

    b, h, grads        (B, L, D)
    a / log_a          (Ba, La, D) with Ba in {1, B}, La in {1, L}: a time-invariant or
                       batch-shared decay is read in place, never materialised
    h0                 (B, D)

One kernel source serves float32/64 and complex64/128: numba specialises per dtype, and
``_conj`` is the identity on reals. Arithmetic stays in the input dtype, one rounding per
multiply and per add, as the torch reference does (no fastmath, so no FMA contraction), except
in the log scan: there FMA contraction (fastmath={"contract"}, no other fast-math licence) of
its exp/log1p polynomials made the forward 1.3-1.9x faster at L = 4096, and a fused
multiply-add rounds once where the pair rounds twice.

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
from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic, overload

from ablate.ops.scan_buffers import GA_FULL, GA_SUM_T, grad_a_buffer, reduce_batch

# A task owns a block of at least this many channels (64 bytes of fp32: one cache line).
_MIN_BLOCK = 16
_TASKS_PER_THREAD = 4
# Elements per extra thread: below this a scan runs on one thread (~100 us of work at ~1 ns/elem).
_WORK_PER_THREAD = 1 << 17


# --- exp and log1p that LLVM vectorises -------------------------------------------------------
# numba lowers np.exp / np.log1p to libm calls, one element at a time (LLVM has no vector math
# library to widen them to without Intel's SVML), so a loop over channels that calls them runs
# scalar: ~20 ns an element for the log scan's logaddexp here. Written as plain arithmetic they
# vectorise with the loop around them (8 float32 lanes here):
#   fast_exp(x)     float32: Cody-Waite reduction to r in [-ln2/2, ln2/2], Cephes' degree-7
#                   polynomial, 2^n built from its bits; <= 1 ulp over the normal range, 0 below
#                   exp(-87.3) (the subnormals, which no scan weight needs), NaN kept
#   fast_log1p(e)   float32, for e in [0, 1] (the log scan's log1p(exp(-|d|))): 2 atanh(u),
#                   u = e / (2 + e) in [0, 1/3], as 2u + 2u w Q(w), w = u², Q a degree-4 fit to
#                   (atanh(u)/u - 1)/w; <= 2 ulp (relative error 1.8e-7)
# float64 gets numpy's (libm's) functions: the float64 paths are the ones held to 1e-12 and to
# gradcheck, and their speed is not the point. Kernels that call these are compiled with
# error_model="numpy": under numba's default every division carries a ZeroDivisionError branch
# that stops vectorisation. The intrinsic below (an LLVM bitcast) is the one place that reaches
# below numba's public jit API. These live in this file, not a module of their own, because
# numba's on-disk cache of a kernel is invalidated by changes to the kernel's own file only.

_F = np.float32
_LOG2E = _F(1.44269504088896341)
_LN2_HI, _LN2_LO = _F(0.693359375), _F(-2.12194440e-4)  # ln 2 = HI + LO, HI exact in 9 bits
_EXP_LO, _EXP_HI = _F(-87.33654), _F(88.3762626647949)  # exp(LO) = FLT_MIN; exp(HI) = FLT_MAX
_EXP_P = tuple(_F(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                               1.6666665459e-1, 5.0000001201e-1))  # fmt: skip
# Chebyshev interpolation (200 nodes on [0, 1/9]) of (atanh(u)/u - 1)/u² as a polynomial in u²;
# its error times u² (what reaches log1p, relatively) is below 4e-10.
_LOG1P_Q = tuple(_F(c) for c in (0.11619525266600507, 0.10851657504409182, 0.14296291707213055,
                                 0.1999985067814708, 0.33333333668806825))  # fmt: skip
_ZERO, _HALF, _ONE, _TWO = _F(0.0), _F(0.5), _F(1.0), _F(2.0)


@intrinsic
def _float32_from_bits(typingctx, bits):  # noqa: ARG001 (numba's signature)
    """The float32 whose IEEE bits are the low 32 bits of the integer ``bits``."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):  # noqa: ARG001
        v = args[0]
        if bits.bitwidth > 32:
            v = builder.trunc(v, ir.IntType(32))
        elif bits.bitwidth < 32:
            v = builder.sext(v, ir.IntType(32))
        return builder.bitcast(v, ir.FloatType())

    return types.float32(bits), codegen


@numba.njit(error_model="numpy", fastmath={"contract"})
def _exp_f32(x):
    xc = min(max(x, _EXP_LO), _EXP_HI)
    n = np.floor(xc * _LOG2E + _HALF)
    r = (xc - n * _LN2_HI) - n * _LN2_LO
    p0, p1, p2, p3, p4, p5 = _EXP_P
    y = (((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5) * (r * r) + r + _ONE
    y = y * _float32_from_bits((np.int32(n) + 127) << 23)
    # below exp(-87.3): 0 (a subnormal at most); NaN compares false both ways and stays NaN
    return y if x >= _EXP_LO else (_ZERO if x < _EXP_LO else x)


@numba.njit(error_model="numpy", fastmath={"contract"})
def _log1p_unit_f32(e):
    u = e / (_TWO + e)
    w = u * u
    q4, q3, q2, q1, q0 = _LOG1P_Q
    q = (((q4 * w + q3) * w + q2) * w + q1) * w + q0
    return _TWO * u + _TWO * u * (w * q)


def fast_exp(x):  # pragma: no cover - a typing stub, compiled through the overload below
    """exp(x): vectorisable in float32 (see module docstring), numpy's in float64."""
    return np.exp(x)


def fast_log1p(e):  # pragma: no cover - a typing stub, compiled through the overload below
    """log1p(e) for e in [0, 1]: vectorisable in float32, numpy's in float64."""
    return np.log1p(e)


def one_like(x):  # pragma: no cover - a typing stub, compiled through the overload below
    """1 in x's float type: a bare literal 1 or 1.0 would promote float32 arithmetic to float64."""
    return 1.0


@overload(fast_exp)
def _fast_exp_overload(x):
    if x == types.float32:
        return lambda x: _exp_f32(x)
    if isinstance(x, types.Float):
        return lambda x: np.exp(x)
    return None


@overload(fast_log1p)
def _fast_log1p_overload(e):
    if e == types.float32:
        return lambda e: _log1p_unit_f32(e)
    if isinstance(e, types.Float):
        return lambda e: np.log1p(e)
    return None


@overload(one_like)
def _one_like_overload(x):
    if isinstance(x, types.Float):
        one = np.dtype(x.name).type(1)
        return lambda x: one
    return None


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
                # Two loops: with the grad_a store in the recurrence's loop LLVM did not
                # vectorise it (2.1 ns an element in cache here; split, 1.7; 1.1 with no grad_a
                # at all); the second pass reads g back from L1.
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


@numba.njit(parallel=True, cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
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


@numba.njit(parallel=True, cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
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
                # grad log a_t = g_t w_t is the carry: stored after the loop, as in _linear_bwd
                # (in the loop: not vectorised, 7.3 vs 3.1 ns an element in cache here).
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


def load_kernels(dtypes: tuple[str, ...] = ("float32", "complex64")) -> None:
    """Load the kernels for C-contiguous arrays of ``dtypes`` (from numba's disk cache, else
    compile them) without running any: what a first call would load (~0.1 s a kernel). The process
    that forks ``ablate run``'s workers (ablate/zygote.py) loads them once, with no torch operation
    (an OpenMP pool used before a fork is not the child's); it starts numba's workqueue threads,
    which that layer re-creates in a forked child (its own ``pthread_atfork`` handler)."""
    for name in dtypes:
        dt = getattr(types, name)
        a3, a2, n = types.Array(dt, 3, "C"), types.Array(dt, 2, "C"), types.int64
        _linear_fwd.compile((a3, a3, a2, a3, n))
        _linear_bwd.compile((a3, a3, a2, a3, a3, a3, a2, n, n))
        if dt not in (types.complex64, types.complex128):  # the log scan is real
            _log_fwd.compile((a3, a3, a2, a3, n))
            _log_bwd.compile((a3, a3, a3, a2, a3, a3, a3, a2, n, n))
