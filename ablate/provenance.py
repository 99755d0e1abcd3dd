"""What produced a result: code commit, package versions (plug-in distributions included), the
installed plug-ins, host and device."""

from __future__ import annotations

import functools
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from ablate import plugins

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
    for plugin in plugins.installed():  # the distributions that provide plug-ins
        if plugin.distribution and plugin.version:
            out[plugin.distribution] = plugin.version
    return out


def plugin_tags() -> dict[str, str]:
    """``ablate.plugin.<kind>.<name>`` → target and source hash of each installed plug-in (a cell's
    id holds the identity of those it uses; this says what else the worker had)."""
    out = {}
    for plugin in plugins.installed():
        try:
            source = plugins.source_hash(plugin)
        except plugins.PluginError:
            source = "unavailable"
        out[f"ablate.plugin.{plugin.kind}.{plugin.name}"] = f"{plugin.target} ({plugin.origin}; source {source})"
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
    tags.update(plugin_tags())
    return tags
