"""The timings ``ablate plan --estimate`` measures (``estimate.measure``), kept on this machine for a
day, and what a trial takes from them: the plan prices its pending trials with them, and a running
study's ETA (``costs``, through ``eta``) prices the cells it has not seen finish by them.

Kept as one JSON object (``timings_file``): ``"<context>|<probes>|<shape>"`` → ``{"at", "timing"}``
for each model shape timed, and ``"<context>|overheads|<probes>|<shape>"`` → ``{"at", "overheads"}``
for a run's bookkeeping, where the context is the machine, device, threads and versions.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.design import canonical_json
from ablate.schedule import Schedule
from ablate.stores import user_cache

# A trial's bookkeeping when it is not measured (``estimate.measure_overheads`` measures it: ~0.5 s
# on a local SQLite store of the 2-core development machine).
TRIAL_OVERHEAD_S = 0.5
# Timings are reused across calls (``plan --estimate`` again after an edit of the spec times only
# its new shapes) for a day, on this machine, with these versions: a longer-lived or foreign
# timing would estimate another machine or other code.
TIMINGS_TTL_S = 24 * 3600


@dataclass
class ShapeTiming:
    setup: float  # per trial: the cached task read, the model and optimiser built, data moved
    step: float  # one training step (median of several, after a warm-up step)
    val: float  # one pass over the validation split
    test: float  # one pass over the test split
    probe: float  # one hidden-state probe (everything ``probes`` asks for)
    grads: float = 0.0  # the gradient-norm rows of one probe step
    first_use: float = 0.0  # once per worker process: what the first build loads lazily
    probe_rows: int = 0  # rows one probe writes (what a trial's curves artifact grows by)


def shape_key(config: dict[str, Any]) -> str:
    """What a trial's timings depend on: its task, model and batch (not its learning rate)."""
    return canonical_json({"task": config["task"], "model": config["model"],
                           "batch": config["train"]["batch_size"]})


def timings_file() -> Path:
    """Where measured timings are kept: the user's cache, beside the tracking-store template."""
    return user_cache() / "timings.json"


@functools.cache
def _versions() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    from ablate.design.identity import CODE_VERSION

    def v(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "?"

    return {"host": os.uname().nodename, "cpus": os.cpu_count(), "torch": v("torch"), "ablate": v("ablate"),
            "code": CODE_VERSION}


def context(device: str, threads: int | None, steps: int) -> str:
    """The kept entries' context: this machine and these versions, the device, the torch threads a
    trial had and the steps each timing is the median of."""
    return canonical_json({**_versions(), "device": device, "threads": threads, "steps": steps})


_READ: dict[tuple[str, int, int], Any] = {}  # the file's last parse, by its path, mtime and size
_PRICED: dict[str, float] = {}  # ``kept_trial_seconds``' trial seconds, by timing and schedule


def load() -> dict[str, Any]:
    """The kept entries still within their day (none when the file is missing or unreadable). The
    live view's ETA reads them every second: the file is parsed again only once it changed."""
    path = timings_file()
    try:
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        if key not in _READ:
            _READ.clear()
            _READ[key] = json.loads(path.read_text())
        kept = _READ[key]
    except (OSError, ValueError):
        return {}
    now = time.time()
    return {k: v for k, v in kept.items() if isinstance(v, dict) and now - v.get("at", 0) < TIMINGS_TTL_S} \
        if isinstance(kept, dict) else {}


def save(kept: dict[str, Any]) -> None:
    """Written whole through a temporary file (two plans at once: the last one's timings win); a
    cache that cannot be written is only not kept."""
    path = timings_file()
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(kept))
        os.replace(tmp, path)


def counts(config: dict[str, Any], probes: Any) -> tuple[int, int, int, int]:
    """(steps, validations before the last step, probes, gradient-row steps) of a trial: the
    counts of ``ablate.schedule.Schedule``, which the training loop follows."""
    when = Schedule.of(config["train"], probes)
    return (when.steps, when.count("validates") + when.count("checks"), when.count("probes"),
            when.count("measures_grads"))


def trial_seconds(config: dict[str, Any], probes: Any, t: ShapeTiming, overhead: float | None = None,
                  trained: float = 1.0) -> float:
    """One trial's wall time from its timings: the counts of steps, validations (periodic, then
    the final one and the test split) and probes are the training loop's, plus its bookkeeping
    (``overhead``, default ``TRIAL_OVERHEAD_S``). ``trained`` is the part of the loop that runs
    (below 1 for a continuation: its steps after the branch point)."""
    steps, evals, n_probes, n_grads = counts(config, probes)
    loop = steps * t.step + evals * t.val + n_probes * t.probe + n_grads * t.grads
    return (t.setup + trained * loop + t.val + t.test + (TRIAL_OVERHEAD_S if overhead is None else overhead))


def kept_trial_seconds(configs: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Cell id → one trial's seconds, as ``ablate plan --estimate`` timed its shape on this machine
    with these versions, when one kept context (device, threads) holds every cell's shape — the
    latest so measured; {} when none does. A running study's ETA prices by these the cells it has
    not seen finish: the cost model's shapes price a sequential (tanh, ReLU) recurrence at a fixed
    multiple of a scan, while its cost grows with the length (2.8× at L 784, timed so), and the
    ETA rose when such cells started."""
    if not configs:
        return {}
    mine = _versions()
    shapes = {cell: shape_key(config) for cell, config in configs.items()}
    found: dict[tuple[str, str], dict[str, tuple[float, ShapeTiming]]] = {}
    for entry, value in load().items():
        where, _, rest = entry.partition("|")
        probes, _, shape = rest.partition("|")
        try:
            ctx = json.loads(where)
            if probes == "overheads" or any(ctx.get(k) != v for k, v in mine.items()):
                continue
            timing = ShapeTiming(**value["timing"])
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
        found.setdefault((where, probes), {})[shape] = (float(value.get("at", 0)), timing)
    covering = [(max(at for at, _ in timed.values()), where, probes, timed) for (where, probes), timed in found.items()
                if set(shapes.values()) <= set(timed)]
    if not covering:
        return {}
    _, where, probes, timed = max(covering, key=lambda c: c[0])
    out = {}
    for cell, shape in shapes.items():
        # Priced once per timing and schedule: a schedule's counts walk its steps, and the view asks each second.
        key = f"{where}|{probes}|{shape}|{timed[shape][0]}|{canonical_json(configs[cell]['train'])}"
        if key not in _PRICED:
            if len(_PRICED) > 1024:
                _PRICED.clear()
            try:
                _PRICED[key] = trial_seconds(configs[cell], json.loads(probes), timed[shape][1])
            except (ValueError, TypeError, KeyError, AttributeError):
                return {}
        out[cell] = _PRICED[key]
    return out
