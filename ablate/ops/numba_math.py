"""exp and log1p that LLVM can vectorise inside numba kernels, for the log-space scan.

numba lowers ``np.exp`` / ``np.log1p`` to calls into libm, one element at a time (LLVM has no
vector math library to widen them to without Intel's SVML), so a loop over channels that calls
them runs scalar: ~20 ns an element for the log scan's logaddexp on this machine. Written as
plain arithmetic, the same functions vectorise with the loop around them (8 float32 lanes here).

    fast_exp(x)      float32: Cody-Waite reduction to r in [-ln2/2, ln2/2], Cephes' degree-7
                     polynomial, 2^n built from its bits; <= 1 ulp over the normal range,
                     0 below exp(-87.3) (the subnormals, which no scan weight needs), NaN kept
    fast_log1p(e)    float32, for e in [0, 1] (the log scan's log1p(exp(-|d|))): log1p(e) =
                     2 atanh(u), u = e / (2 + e) in [0, 1/3], as 2u + 2u w Q(w), w = u², Q a
                     degree-4 fit to (atanh(u)/u - 1)/w; <= 2 ulp (relative error 1.8e-7)

float64 arguments get numpy's (libm's) functions unchanged: the float64 paths are the ones held
to 1e-12 and gradcheck, and their speed is not the point. Callers are compiled with
``error_model="numpy"``: under numba's default Python error model every division carries a
ZeroDivisionError branch that stops vectorisation.

This module is the one place that reaches below numba's public jit API (an ``intrinsic`` that
emits an LLVM bitcast): a change in numba or llvmlite shows up here and only here.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

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


@numba.njit(error_model="numpy")
def _exp_f32(x):
    xc = min(max(x, _EXP_LO), _EXP_HI)
    n = np.floor(xc * _LOG2E + _HALF)
    r = (xc - n * _LN2_HI) - n * _LN2_LO
    p0, p1, p2, p3, p4, p5 = _EXP_P
    y = (((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5) * (r * r) + r + _ONE
    y = y * _float32_from_bits((np.int32(n) + 127) << 23)
    # below exp(-87.3): 0 (a subnormal at most); NaN compares false both ways and stays NaN
    return y if x >= _EXP_LO else (_ZERO if x < _EXP_LO else x)


@numba.njit(error_model="numpy")
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
