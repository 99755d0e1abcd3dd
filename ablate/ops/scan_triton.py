"""GPU scan kernels in Triton: one program per (sequence, block of channels), walking time in
chunks; inside a chunk ``tl.associative_scan`` runs the parallel scan, and the chunk's last state
carries into the next.

Same interface and layouts as ``scan_numba`` (a is (Ba, La, D) with Ba in {1, B}, La in {1, L};
everything contiguous). Complex tensors travel as interleaved (re, im) float pairs, Triton having
no complex type. Padding rows past the sequence end hold the scan's identity element, so a chunk's
last row is always the state to carry.

Importing this module imports triton: ``ablate.ops.scan`` does so only for CUDA tensors or when
the backend is forced, so CPU-only installs never need it. ``TRITON_INTERPRET=1`` runs these
kernels on CPU tensors (slowly), which is how they can be checked without a GPU.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from ablate.ops.scan_buffers import grad_a_buffer, reduce_batch

BLOCK_T = 64  # time steps per chunk
BLOCK_D = 32  # channels per program
# The complex kernels' tile: at 64 x 32 they took 250-255 registers a thread and spilled (sm_90,
# 4 warps; compiled here without a GPU, cuobjdump -res-usage), the real kernel 117; at 64 x 8
# 80-112, no spill (the 32 bytes of stack are float32 sin/cos's never-taken large-argument path).
# Not fewer rows: a time-invariant decay's rounding repeats at every chunk's carry, and 32-row
# chunks measured 2.1e-5 of |h| at L = 4096, r in [0.999, 1), against 2.1e-6 at 64 (interpreter).
COMPLEX_BLOCK_T = 64
COMPLEX_BLOCK_D = 8


# --- combine functions ---------------------------------------------------------------------------
# An element (a, b) is the map h -> a h + b; (a1, b1) then (a2, b2) is (a2 a1, a2 b1 + b2).


@triton.jit
def _combine(a1, b1, a2, b2):
    return a2 * a1, a2 * b1 + b2


@triton.jit
def _combine_complex(ar1, ai1, br1, bi1, ar2, ai2, br2, bi2):
    return (
        ar2 * ar1 - ai2 * ai1,
        ar2 * ai1 + ai2 * ar1,
        ar2 * br1 - ai2 * bi1 + br2,
        ar2 * bi1 + ai2 * br1 + bi2,
    )


@triton.jit
def _logaddexp(x, y):
    # max + log(1 + exp(-|x - y|)): one exp and one log (it was two exps and a log), and it runs
    # ~2 log2(BLOCK_T) times an element inside the associative scan. log(1 + e) for e in [0, 1]
    # errs by ~1 ulp of 1 in absolute terms, which is ~1 ulp of h relatively: what rounding
    # log h costs anyway. The difference is NaN where both are -inf (the state is still 0: the
    # answer is -inf) or an input is NaN (NaN): x + y is the answer in both cases.
    d = x - y
    v = tl.maximum(x, y) + tl.log(1.0 + tl.exp(-tl.abs(d)))
    return tl.where(d == d, v, x + y)


@triton.jit
def _combine_log(a1, b1, a2, b2):
    # (log a, log b) pairs of the positive map h -> a h + b.
    return a1 + a2, _logaddexp(a2 + b1, b2)


@triton.jit
def _last_row(x, BT: tl.constexpr):
    return tl.sum(tl.where((tl.arange(0, BT) == BT - 1)[:, None], x, 0.0), axis=0)


@triton.jit
def _exp_or_zero(x, s):
    # exp(x - s), 0 where s = -inf (the state is still exactly 0).
    return tl.where(s == float("-inf"), 0.0, tl.exp(x - tl.where(s == float("-inf"), 0.0, s)))


# --- real linear scan ----------------------------------------------------------------------------


@triton.jit
def _linear_fwd(
    a_ptr, b_ptr, h0_ptr, out_ptr, L, D, sa_b, sa_t,
    HAS_H0: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr,
):  # fmt: skip
    pb = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BD + tl.arange(0, BD)
    md = d < D
    rows = tl.arange(0, BT)
    if HAS_H0:
        h = tl.load(h0_ptr + pb * D + d, mask=md, other=0.0)
    else:
        h = tl.zeros([BD], dtype=out_ptr.dtype.element_ty)
    for t0 in range(0, L, BT):
        t = t0 + rows
        m = (t < L)[:, None] & md[None, :]
        idx = (pb * L + t[:, None]) * D + d[None, :]
        a = tl.load(a_ptr + pb * sa_b + t[:, None] * sa_t + d[None, :], mask=m, other=1.0)
        b = tl.load(b_ptr + idx, mask=m, other=0.0)
        A, H = tl.associative_scan((a, b), 0, _combine)
        hs = A * h[None, :] + H
        tl.store(out_ptr + idx, hs, mask=m)
        h = _last_row(hs, BT)


@triton.jit
def _linear_bwd(
    a_ptr, h_ptr, h0_ptr, gh_ptr, ga_ptr, gb_ptr, gh0_ptr, L, D, sa_b, sa_t,
    HAS_H0: tl.constexpr, GA_MODE: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr,
):  # fmt: skip
    # Reverse scan g_t = gh_t + a_{t+1} g_{t+1}, chunks walked from the end, rows in descending t.
    pb = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BD + tl.arange(0, BD)
    md = d < D
    rows = tl.arange(0, BT)
    g = tl.zeros([BD], dtype=h_ptr.dtype.element_ty)
    acc = tl.zeros([BD], dtype=h_ptr.dtype.element_ty)
    if HAS_H0:
        h0 = tl.load(h0_ptr + pb * D + d, mask=md, other=0.0)
    else:
        h0 = tl.zeros([BD], dtype=h_ptr.dtype.element_ty)
    for c in range(0, tl.cdiv(L, BT)):
        t = L - 1 - c * BT - rows
        valid = (t >= 0)[:, None]
        m = valid & md[None, :]
        idx = (pb * L + t[:, None]) * D + d[None, :]
        an = tl.load(
            a_ptr + pb * sa_b + (t[:, None] + 1) * sa_t + d[None, :], mask=m & (t < L - 1)[:, None], other=0.0
        )
        an = tl.where(valid, an, 1.0)  # identity past the start, so the last row is g_{t_min}
        gh = tl.load(gh_ptr + idx, mask=m, other=0.0)
        A, G = tl.associative_scan((an, gh), 0, _combine)
        gs = A * g[None, :] + G
        tl.store(gb_ptr + idx, gs, mask=m)
        if GA_MODE != 0:
            hp = tl.load(h_ptr + idx - D, mask=m & (t >= 1)[:, None], other=0.0)
            hp = tl.where((t == 0)[:, None], h0[None, :], hp)
            ga = tl.where(m, gs * hp, 0.0)
            if GA_MODE == 1:
                tl.store(ga_ptr + idx, ga, mask=m)
            else:
                acc += tl.sum(ga, axis=0)
        g = _last_row(gs, BT)
    a0 = tl.load(a_ptr + pb * sa_b + d, mask=md, other=0.0)
    tl.store(gh0_ptr + pb * D + d, a0 * g, mask=md)
    if GA_MODE == 2:
        tl.store(ga_ptr + pb * D + d, acc, mask=md)


# --- complex linear scan (interleaved re, im; element index i at 2i, 2i+1) -----------------------
# complex64 (PHASE 1, 2): a_t = r_t e^{i θ_t}. With the chunk-local cumulative phase φ_k = Σ_{j<=k} θ_j,
# h_k = e^{i φ_k} g_k where g_k = r_k g_{k-1} + e^{-i φ_k} b_k, g_{-1} = the carried state: a
# real-decay scan of two planes sharing one decay, a 3-tuple combine instead of the 4-tuple complex
# product (fewer values through every level of the parallel scan, 3 multiply-adds a level instead
# of 8). complex128 keeps the complex product: the phase below carries float32's precision.
#
# The planes are loaded from the interleaved view (re at 2i, im at 2i + 1), each once, rather than
# split into separate re and im tensors by the wrapper: that split is a copy of a, b, and of every
# output back, which costs more memory traffic than the kernel itself. The two stride-2 loads touch
# the same cache lines, so DRAM reads each byte once.
#
# Phase arithmetic. θ in float32 near ±π is coarse (ulp 2.4e-7), and an error in θ is systematic:
# a decay with r near 1 repeats it at every step, and the float32 phase sum over a chunk rounds at
# |φ| up to 64 π. Both cost ~1e-5 of |h| at L = 200 against float64 (emulated in torch). So θ is
# a fixed-point angle in units of 2π / 2^32 (uint32): the quadrant exactly, the rest (|p| <= π/8
# after the reductions) from atan's polynomial, within 9e-8 of θ over 10^6 random angles. The
# chunk's sum is then exact, and its wrap-around modulo 2^32 is the reduction modulo 2π. A
# time-invariant decay (PHASE 2) gets its r and θ to float64's accuracy once (``_decay_params``).
_TAN_PI_8 = tl.constexpr(0.41421356237309503)
_UNITS_PER_RAD = tl.constexpr(2.0**31 / math.pi)
_RAD_PER_UNIT = tl.constexpr(math.pi / 2.0**31)


@triton.jit
def _combine_shared(r1, x1, y1, r2, x2, y2):
    # Two real scans (x and y) under one real decay r.
    return r2 * r1, r2 * x1 + x2, r2 * y1 + y2


@triton.jit
def _angle_units(ar, ai):
    """arg(ar + i ai) in units of 2π / 2^32, as uint32 (0 where a = 0)."""
    # a (-i)^n has its angle p in [-π/4, π/4]: n = 0 or 2 where |re| >= |im|, else ±1; then
    # tan p = num / den with |num| <= |den| (a = 0 lands in n = 0 with num = den = 0).
    xdom = tl.abs(ar) >= tl.abs(ai)
    num = tl.where(xdom, ai, -ar)
    den = tl.where(xdom, ar, ai)
    quadrant = tl.where(xdom, tl.where(ar >= 0, 0, 2), tl.where(ai > 0, 1, 3)).to(tl.uint32)
    an = tl.abs(num)
    ad = tl.abs(den)
    # atan(an/ad) = π/4 + atan((an - ad)/(an + ad)) above tan(π/8): one division either way.
    big = an > _TAN_PI_8 * ad
    x = tl.where(big, an - ad, an) / tl.where(big, an + ad, tl.where(ad > 0, ad, 1.0))
    z = x * x
    # Cephes' atanf on [-tan(π/8), tan(π/8)].
    p = (
        ((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1
    ) * z * x + x
    u = (p * _UNITS_PER_RAD + 0.5 - (p < 0).to(p.dtype)).to(tl.int32)  # rounded, |u| <= 2^28
    u = tl.where(big, u + (1 << 29), u)  # + π/4
    u = tl.where((num < 0) != (den < 0), -u, u)
    return (quadrant << 30) + u.to(tl.uint32)


@triton.jit
def _rotated_scan(ar, ai, xr, xi, hr, hi):
    """Rows of h_k = a_k h_{k-1} + x_k (complex, as planes) from h_{-1} = (hr, hi), through the
    real-decay scan of e^{-i φ_k} x_k (see above)."""
    r = tl.sqrt(ar * ar + ai * ai)
    # uint32 sum wraps modulo 2π; as int32 it is φ in [-π, π). (The interpreter sums in 64 bits:
    # the cast wraps there too.)
    phi = tl.cumsum(_angle_units(ar, ai), 0).to(tl.int32).to(tl.float32) * _RAD_PER_UNIT
    c = tl.cos(phi)
    s = tl.sin(phi)
    R, Gr, Gi = tl.associative_scan((r, xr * c + xi * s, xi * c - xr * s), 0, _combine_shared)
    gr = R * hr[None, :] + Gr
    gi = R * hi[None, :] + Gi
    return gr * c - gi * s, gr * s + gi * c


@triton.jit
def _cos_sin64(units):
    """cos and sin of a fixed-point angle in float64, to ~1e-15: the quadrant exactly, Taylor
    series on the rest (|p| <= π/4). libdevice's float64 cos and sin cost 255 registers and 1.8 KB
    of spilled stack in the kernels (sm_90, compiled here without a GPU), this nothing of either."""
    u = units.to(tl.int32).to(tl.int64)
    n = (u + (1 << 29)) >> 30  # the nearest quarter turn, -2 … 2
    p = (u - (n << 30)).to(tl.float64) * _RAD_PER_UNIT
    z = p * p
    # Horner, from p^15 / 15! and p^16 / 16!: the next terms are below 5e-17 at |p| = π/4.
    s = -1.0 / 1307674368000
    s = s * z + 1.0 / 6227020800
    s = s * z - 1.0 / 39916800
    s = s * z + 1.0 / 362880
    s = s * z - 1.0 / 5040
    s = s * z + 1.0 / 120
    s = s * z - 1.0 / 6
    s = p * (s * z + 1.0)
    c = 1.0 / 20922789888000
    c = c * z - 1.0 / 87178291200
    c = c * z + 1.0 / 479001600
    c = c * z - 1.0 / 3628800
    c = c * z + 1.0 / 40320
    c = c * z - 1.0 / 720
    c = c * z + 1.0 / 24
    c = (c * z - 0.5) * z + 1.0
    q = n & 3  # e^{i n π/2} (c + i s)
    cos_t = tl.where(q == 0, c, tl.where(q == 1, -s, tl.where(q == 2, -c, s)))
    sin_t = tl.where(q == 0, s, tl.where(q == 1, c, tl.where(q == 2, -s, -c)))
    return cos_t, sin_t


@triton.jit
def _decay_params(ar, ai):
    """(r, angle units, ε) of a time-invariant decay, per channel, so that a = r (1 + ε) e^{iθ}.

    A time-invariant decay repeats its rounding at every step: float32's r (0.5 ulp) and the
    polynomial's θ (up to 9e-8) put 4.5e-5 of |h| into L = 4096 with r in [0.999, 1) (the complex
    product 1e-5, these parameters 2e-6; interpreter, 2026-12-05). Per channel, not per element, so
    float64 costs little here: one Newton step on θ (``_cos_sin64``) and the relative error ε of
    float32's r, which the chunk applies as (1 + ε)^k = 1 + k ε."""
    r = tl.sqrt(ar * ar + ai * ai)
    units = _angle_units(ar, ai)
    ar64 = ar.to(tl.float64)
    ai64 = ai.to(tl.float64)
    r64 = tl.sqrt(ar64 * ar64 + ai64 * ai64)
    cos_t, sin_t = _cos_sin64(units)
    delta = (ai64 * cos_t - ar64 * sin_t) / tl.where(r64 > 0, r64, 1.0)  # sin(θ - θ̂)
    fix = (delta * _UNITS_PER_RAD + 0.5 - (delta < 0).to(tl.float64)).to(tl.int32)
    eps = tl.where(r > 0, r64 / tl.where(r > 0, r, 1.0).to(tl.float64) - 1.0, 0.0).to(tl.float32)
    return r, units + fix.to(tl.uint32), eps


@triton.jit
def _rotated_scan_invariant(r, units, eps, xr, xi, hr, hi, n, BT: tl.constexpr):
    """``_rotated_scan`` under one decay per channel (``_decay_params``): φ_k = (k + 1) θ, exact
    in fixed point, and the amplitude's correction 1 + (k + 1) ε folded into the rotations. Rows
    from ``n`` on are padding: the identity (k stops at n), so the last row is the state to carry."""
    k1 = tl.minimum(tl.arange(0, BT) + 1, n)
    phi = (k1.to(tl.uint32)[:, None] * units[None, :]).to(tl.int32).to(tl.float32) * _RAD_PER_UNIT
    lam = k1.to(tl.float32)[:, None] * eps[None, :]
    c = tl.cos(phi)
    s = tl.sin(phi)
    # e^{-iφ} / (1 + λ) to first order (λ <= 64 ε ~ 4e-6), as c - c λ: 1 - λ would round λ away
    ci = c - c * lam
    si = s - s * lam
    rr = tl.where((tl.arange(0, BT) < n)[:, None], r[None, :], 1.0)
    R, Gr, Gi = tl.associative_scan((rr, xr * ci + xi * si, xi * ci - xr * si), 0, _combine_shared)
    gr = R * hr[None, :] + Gr
    gi = R * hi[None, :] + Gi
    co = c + c * lam
    so = s + s * lam
    return gr * co - gi * so, gr * so + gi * co


@triton.jit
def _complex_chunk(ar, ai, xr, xi, hr, hi, PHASE: tl.constexpr):
    if PHASE == 1:
        sr, si = _rotated_scan(ar, ai, xr, xi, hr, hi)
    else:
        Ar, Ai, Hr, Hi = tl.associative_scan((ar, ai, xr, xi), 0, _combine_complex)
        sr = Ar * hr[None, :] - Ai * hi[None, :] + Hr
        si = Ar * hi[None, :] + Ai * hr[None, :] + Hi
    return sr, si


@triton.jit
def _complex_fwd(
    a_ptr, b_ptr, h0_ptr, out_ptr, L, D, sa_b, sa_t,
    HAS_H0: tl.constexpr, PHASE: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr,
):  # fmt: skip
    pb = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BD + tl.arange(0, BD)
    md = d < D
    rows = tl.arange(0, BT)
    if HAS_H0:
        hr = tl.load(h0_ptr + 2 * (pb * D + d), mask=md, other=0.0)
        hi = tl.load(h0_ptr + 2 * (pb * D + d) + 1, mask=md, other=0.0)
    else:
        hr = tl.zeros([BD], dtype=out_ptr.dtype.element_ty)
        hi = tl.zeros([BD], dtype=out_ptr.dtype.element_ty)
    if PHASE == 2:  # time-invariant: the decay's parameters once
        r1, u1, e1 = _decay_params(
            tl.load(a_ptr + 2 * (pb * sa_b + d), mask=md, other=1.0),
            tl.load(a_ptr + 2 * (pb * sa_b + d) + 1, mask=md, other=0.0),
        )
    for t0 in range(0, L, BT):
        t = t0 + rows
        m = (t < L)[:, None] & md[None, :]
        idx = 2 * ((pb * L + t[:, None]) * D + d[None, :])
        br = tl.load(b_ptr + idx, mask=m, other=0.0)
        bi = tl.load(b_ptr + idx + 1, mask=m, other=0.0)
        if PHASE == 2:
            sr, si = _rotated_scan_invariant(r1, u1, e1, br, bi, hr, hi, L - t0, BT)
        else:
            aidx = 2 * (pb * sa_b + t[:, None] * sa_t + d[None, :])
            ar = tl.load(a_ptr + aidx, mask=m, other=1.0)
            ai = tl.load(a_ptr + aidx + 1, mask=m, other=0.0)
            sr, si = _complex_chunk(ar, ai, br, bi, hr, hi, PHASE)
        tl.store(out_ptr + idx, sr, mask=m)
        tl.store(out_ptr + idx + 1, si, mask=m)
        hr = _last_row(sr, BT)
        hi = _last_row(si, BT)


@triton.jit
def _complex_bwd(
    a_ptr, h_ptr, h0_ptr, gh_ptr, ga_ptr, gb_ptr, gh0_ptr, L, D, sa_b, sa_t,
    HAS_H0: tl.constexpr, GA_MODE: tl.constexpr, PHASE: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr,
):  # fmt: skip
    # g_t = gh_t + conj(a_{t+1}) g_{t+1}: the same chunk scan under the decay conj(a_{t+1}) (phase
    # -θ_{t+1}); grad_a_t = g_t conj(h_{t-1}) and grad_h0 = conj(a_0) g_0, elementwise.
    pb = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BD + tl.arange(0, BD)
    md = d < D
    rows = tl.arange(0, BT)
    gr = tl.zeros([BD], dtype=h_ptr.dtype.element_ty)
    gi = tl.zeros([BD], dtype=h_ptr.dtype.element_ty)
    acc_r = tl.zeros([BD], dtype=h_ptr.dtype.element_ty)
    acc_i = tl.zeros([BD], dtype=h_ptr.dtype.element_ty)
    if HAS_H0:
        h0r = tl.load(h0_ptr + 2 * (pb * D + d), mask=md, other=0.0)
        h0i = tl.load(h0_ptr + 2 * (pb * D + d) + 1, mask=md, other=0.0)
    else:
        h0r = tl.zeros([BD], dtype=h_ptr.dtype.element_ty)
        h0i = tl.zeros([BD], dtype=h_ptr.dtype.element_ty)
    if PHASE == 2:  # time-invariant: conj(a)'s parameters once. Its row t = L - 1 (no a_L) then
        # decays the carried g as well, which is 0 there.
        r1, u1, e1 = _decay_params(
            tl.load(a_ptr + 2 * (pb * sa_b + d), mask=md, other=1.0),
            -tl.load(a_ptr + 2 * (pb * sa_b + d) + 1, mask=md, other=0.0),
        )
    for c in range(0, tl.cdiv(L, BT)):
        t = L - 1 - c * BT - rows
        valid = (t >= 0)[:, None]
        m = valid & md[None, :]
        idx = 2 * ((pb * L + t[:, None]) * D + d[None, :])
        ghr = tl.load(gh_ptr + idx, mask=m, other=0.0)
        ghi = tl.load(gh_ptr + idx + 1, mask=m, other=0.0)
        if PHASE == 2:
            sr, si = _rotated_scan_invariant(r1, u1, e1, ghr, ghi, gr, gi, L - c * BT, BT)
        else:
            aidx = 2 * (pb * sa_b + (t[:, None] + 1) * sa_t + d[None, :])
            mn = m & (t < L - 1)[:, None]
            anr = tl.where(valid, tl.load(a_ptr + aidx, mask=mn, other=0.0), 1.0)
            ani = tl.where(valid, -tl.load(a_ptr + aidx + 1, mask=mn, other=0.0), 0.0)
            sr, si = _complex_chunk(anr, ani, ghr, ghi, gr, gi, PHASE)
        tl.store(gb_ptr + idx, sr, mask=m)
        tl.store(gb_ptr + idx + 1, si, mask=m)
        if GA_MODE != 0:
            mp = m & (t >= 1)[:, None]
            hr = tl.where((t == 0)[:, None], h0r[None, :], tl.load(h_ptr + idx - 2 * D, mask=mp, other=0.0))
            hi = tl.where(
                (t == 0)[:, None], h0i[None, :], tl.load(h_ptr + idx - 2 * D + 1, mask=mp, other=0.0)
            )
            ga_r = tl.where(m, sr * hr + si * hi, 0.0)
            ga_i = tl.where(m, si * hr - sr * hi, 0.0)
            if GA_MODE == 1:
                tl.store(ga_ptr + idx, ga_r, mask=m)
                tl.store(ga_ptr + idx + 1, ga_i, mask=m)
            else:
                acc_r += tl.sum(ga_r, axis=0)
                acc_i += tl.sum(ga_i, axis=0)
        gr = _last_row(sr, BT)
        gi = _last_row(si, BT)
    a0r = tl.load(a_ptr + 2 * (pb * sa_b + d), mask=md, other=0.0)
    a0i = tl.load(a_ptr + 2 * (pb * sa_b + d) + 1, mask=md, other=0.0)
    tl.store(gh0_ptr + 2 * (pb * D + d), a0r * gr + a0i * gi, mask=md)
    tl.store(gh0_ptr + 2 * (pb * D + d) + 1, a0r * gi - a0i * gr, mask=md)
    if GA_MODE == 2:
        tl.store(ga_ptr + 2 * (pb * D + d), acc_r, mask=md)
        tl.store(ga_ptr + 2 * (pb * D + d) + 1, acc_i, mask=md)


# --- log-space scan ------------------------------------------------------------------------------


@triton.jit
def _log_fwd(
    la_ptr, lb_ptr, lh0_ptr, out_ptr, L, D, sa_b, sa_t,
    HAS_H0: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr,
):  # fmt: skip
    pb = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BD + tl.arange(0, BD)
    md = d < D
    rows = tl.arange(0, BT)
    if HAS_H0:
        s = tl.load(lh0_ptr + pb * D + d, mask=md, other=float("-inf"))
    else:
        s = tl.full([BD], float("-inf"), dtype=out_ptr.dtype.element_ty)
    for t0 in range(0, L, BT):
        t = t0 + rows
        m = (t < L)[:, None] & md[None, :]
        idx = (pb * L + t[:, None]) * D + d[None, :]
        la = tl.load(la_ptr + pb * sa_b + t[:, None] * sa_t + d[None, :], mask=m, other=0.0)
        lb = tl.load(lb_ptr + idx, mask=m, other=float("-inf"))
        A, H = tl.associative_scan((la, lb), 0, _combine_log)
        ss = _logaddexp(A + s[None, :], H)
        tl.store(out_ptr + idx, ss, mask=m)
        s = _last_row(ss, BT)


@triton.jit
def _log_bwd(
    la_ptr, lb_ptr, s_ptr, lh0_ptr, gs_ptr, ga_ptr, gb_ptr, gh0_ptr, L, D, sa_b, sa_t,
    HAS_H0: tl.constexpr, GA_MODE: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr,
):  # fmt: skip
    # w_t = exp(log a_t + s_{t-1} - s_t): g_t = gs_t + w_{t+1} g_{t+1}; grad log a_t = g_t w_t;
    # grad log b_t = g_t exp(log b_t - s_t); grad log h0 = w_0 g_0.
    pb = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BD + tl.arange(0, BD)
    md = d < D
    rows = tl.arange(0, BT)
    g = tl.zeros([BD], dtype=s_ptr.dtype.element_ty)
    acc = tl.zeros([BD], dtype=s_ptr.dtype.element_ty)
    if HAS_H0:
        lh0 = tl.load(lh0_ptr + pb * D + d, mask=md, other=float("-inf"))
    else:
        lh0 = tl.full([BD], float("-inf"), dtype=s_ptr.dtype.element_ty)
    for c in range(0, tl.cdiv(L, BT)):
        t = L - 1 - c * BT - rows
        valid = (t >= 0)[:, None]
        m = valid & md[None, :]
        idx = (pb * L + t[:, None]) * D + d[None, :]
        mn = m & (t < L - 1)[:, None]
        la_next = tl.load(la_ptr + pb * sa_b + (t[:, None] + 1) * sa_t + d[None, :], mask=mn, other=0.0)
        s_t = tl.load(s_ptr + idx, mask=m, other=0.0)
        s_next = tl.load(s_ptr + idx + D, mask=mn, other=0.0)
        w_next = tl.where(mn, _exp_or_zero(la_next + s_t, s_next), 0.0)
        w_next = tl.where(valid, w_next, 1.0)
        gs = tl.load(gs_ptr + idx, mask=m, other=0.0)
        A, G = tl.associative_scan((w_next, gs), 0, _combine)
        gg = A * g[None, :] + G
        lb = tl.load(lb_ptr + idx, mask=m, other=0.0)
        tl.store(gb_ptr + idx, gg * _exp_or_zero(lb, s_t), mask=m)
        if GA_MODE != 0:
            la = tl.load(la_ptr + pb * sa_b + t[:, None] * sa_t + d[None, :], mask=m, other=0.0)
            sp = tl.load(s_ptr + idx - D, mask=m & (t >= 1)[:, None], other=0.0)
            sp = tl.where((t == 0)[:, None], lh0[None, :], sp)
            ga = tl.where(m, gg * _exp_or_zero(la + sp, s_t), 0.0)
            if GA_MODE == 1:
                tl.store(ga_ptr + idx, ga, mask=m)
            else:
                acc += tl.sum(ga, axis=0)
        g = _last_row(gg, BT)
    la0 = tl.load(la_ptr + pb * sa_b + d, mask=md, other=0.0)
    s0 = tl.load(s_ptr + pb * L * D + d, mask=md, other=0.0)
    tl.store(gh0_ptr + pb * D + d, g * _exp_or_zero(la0 + lh0, s0), mask=md)
    if GA_MODE == 2:
        tl.store(ga_ptr + pb * D + d, acc, mask=md)


# --- torch-facing wrappers (the same interface as scan_numba) ------------------------------------


def _on_its_device(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Launch on the GPU that holds the tensors: Triton launches on the current CUDA device, not
    the tensors' (a layer on cuda:1 in a process whose current device is cuda:0). CPU tensors
    (Triton's interpreter) need no guard."""

    @functools.wraps(fn)
    def launch(first: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        guard = torch.cuda.device(first.device) if first.is_cuda else contextlib.nullcontext()
        with guard:
            return fn(first, *args, **kwargs)

    return launch


def _grid(b: torch.Tensor) -> tuple[int, int]:
    return b.shape[0], triton.cdiv(b.shape[2], BLOCK_D)


def _a_strides(a: torch.Tensor) -> tuple[int, int]:
    """Element strides of a over batch and time, 0 where a is broadcast."""
    _, La, D = a.shape
    return (La * D if a.shape[0] > 1 else 0), (D if La > 1 else 0)


def _real(x: torch.Tensor | None) -> torch.Tensor | None:
    """Interleaved float view of a complex tensor (the kernels index re at 2i, im at 2i + 1)."""
    return torch.view_as_real(x) if x is not None and x.is_complex() else x


def _linear_launch(x: torch.Tensor, a: torch.Tensor) -> tuple[tuple[int, int], dict[str, int]]:
    """(grid, tile and flags) of the linear kernels. The complex kernels take PHASE: 0 the complex
    product (complex128, whose precision the phase would not keep), 1 the real-decay form
    (complex64), 2 the same under a time-invariant decay (La = 1), its parameters once per channel."""
    if not x.is_complex():
        consts = {"BT": BLOCK_T, "BD": BLOCK_D}
    else:
        phase = 0 if x.dtype != torch.complex64 else 2 if a.shape[1] == 1 else 1
        consts = {"PHASE": phase, "BT": COMPLEX_BLOCK_T, "BD": COMPLEX_BLOCK_D}
    return (x.shape[0], triton.cdiv(x.shape[2], consts["BD"])), consts


@_on_its_device
def linear_forward(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None) -> torch.Tensor:
    out = torch.empty_like(b)
    kernel = _complex_fwd if b.is_complex() else _linear_fwd
    B, L, D = b.shape
    grid, consts = _linear_launch(b, a)
    kernel[grid](
        _real(a), _real(b), _real(h0 if h0 is not None else b), _real(out), L, D, *_a_strides(a),
        HAS_H0=h0 is not None, **consts,
    )  # fmt: skip
    return out


@_on_its_device
def linear_backward(
    a: torch.Tensor, h: torch.Tensor, h0: torch.Tensor | None, grad_h: torch.Tensor, need_a: bool
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    B, L, D = h.shape
    ga, mode = grad_a_buffer(a, h, need_a)
    gb = torch.empty_like(h)
    gh0 = torch.empty(B, D, device=h.device, dtype=h.dtype)
    kernel = _complex_bwd if h.is_complex() else _linear_bwd
    grid, consts = _linear_launch(h, a)
    kernel[grid](
        _real(a), _real(h), _real(h0 if h0 is not None else h), _real(grad_h), _real(ga), _real(gb),
        _real(gh0), L, D, *_a_strides(a),
        HAS_H0=h0 is not None, GA_MODE=mode, **consts,
    )  # fmt: skip
    return (reduce_batch(ga, a) if need_a else None), gb, gh0


@_on_its_device
def log_forward(la: torch.Tensor, lb: torch.Tensor, lh0: torch.Tensor | None) -> torch.Tensor:
    out = torch.empty_like(lb)
    B, L, D = lb.shape
    _log_fwd[_grid(lb)](
        la, lb, lh0 if lh0 is not None else lb, out, L, D, *_a_strides(la),
        HAS_H0=lh0 is not None, BT=BLOCK_T, BD=BLOCK_D,
    )  # fmt: skip
    return out


@_on_its_device
def log_backward(
    la: torch.Tensor,
    lb: torch.Tensor,
    s: torch.Tensor,
    lh0: torch.Tensor | None,
    grad_s: torch.Tensor,
    need_a: bool,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    B, L, D = s.shape
    ga, mode = grad_a_buffer(la, s, need_a)
    gb = torch.empty_like(s)
    gh0 = torch.empty(B, D, device=s.device, dtype=s.dtype)
    _log_bwd[_grid(s)](
        la, lb, s, lh0 if lh0 is not None else s, grad_s, ga, gb, gh0, L, D, *_a_strides(la),
        HAS_H0=lh0 is not None, GA_MODE=mode, BT=BLOCK_T, BD=BLOCK_D,
    )  # fmt: skip
    return (reduce_batch(ga, la) if need_a else None), gb, gh0
