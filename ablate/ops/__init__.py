"""Numerical kernels: the scans every recurrent layer runs through."""

from ablate.ops.scan import (
    available_backends,
    linear_scan,
    linear_scan_reference,
    log_scan,
    log_scan_reference,
    resolve_backend,
)

__all__ = [
    "available_backends",
    "linear_scan",
    "linear_scan_reference",
    "log_scan",
    "log_scan_reference",
    "resolve_backend",
]
