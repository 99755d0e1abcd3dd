"""Numerical kernels: the scans every recurrent layer runs through, and the exponential of the
skew-symmetric matrices behind RotRNN's orthogonal basis.

Imports torch and numpy only (numba lazily, triton only for CUDA tensors or a forced backend), so
the kernels can be checked on a machine without the rest of ablate's dependencies.
"""

from ablate.ops.expm import skew_expm
from ablate.ops.scan import (
    available_backends,
    linear_scan,
    linear_scan_reference,
    log_scan,
    log_scan_reference,
    resolve_backend,
    widened,
)

__all__ = [
    "available_backends",
    "linear_scan",
    "linear_scan_reference",
    "log_scan",
    "log_scan_reference",
    "resolve_backend",
    "skew_expm",
    "widened",
]
