"""What produced a result: code commit, package versions, host and device."""

from __future__ import annotations

import functools
import platform
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES = ("ablate", "torch", "numpy", "optuna", "mlflow", "numba", "polars")


@functools.cache
def git_commit() -> str:
    """The commit of the ablate checkout (with ``+dirty`` for local changes), or ``unknown``."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@functools.cache
def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return f"{device} ({platform.processor() or platform.machine()})"


def record(device: str) -> dict[str, str]:
    """Provenance of one trial, as flat string tags."""
    tags = {"ablate.git_commit": git_commit(), "ablate.host": platform.node(), "ablate.device": device_name(device)}
    tags.update({f"ablate.version.{k}": v for k, v in versions().items()})
    return tags
