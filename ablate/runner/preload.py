"""What a worker loads in the background while it reads the queue (``Preload``: torch, the models,
MLflow and its store, the scan kernels; then the settling of runs a kill left RUNNING), and the
device it trains on (``select_device``, made current once the preload is done: ``await_preload``)."""

from __future__ import annotations

import contextlib
import gc
import importlib
import threading
from collections.abc import Callable
from typing import Any

from ablate import provenance
from ablate.runner import tracking
from ablate.runner.forking import database

# What a worker imports before its first claim, in the order it needs them (seconds of CPU,
# measured idle: MLflow 1.05, torch 0.9, torch.fx's symbolic shapes 0.2 — sympy, imported by the
# first backward through ``ablate.ops.serial`` — numba's kernels and the trainer 0.2; and MLflow's
# SQL store 0.6 where the tracking store is a database). Not torch._dynamo (0.6 more): ablate.optim
# trains without torch.optim, whose optimisers import it. ``ablate run`` imports them once, in the
# process that forks its workers (ablate/zygote.py); a worker started alone, in its ``Preload`` thread.
MODULES = ("mlflow.tracking", "torch", "torch.fx.experimental.symbolic_shapes", "ablate.ops.scan_numba",
           "ablate.training")
SQL_STORE = "mlflow.store.tracking.sqlalchemy_store"


def import_modules(sql: bool) -> None:
    """Import ``MODULES`` (and, with ``sql``, MLflow's SQL store: ``forking.database``); one that
    fails to import is left for the item that needs it to raise (and record) when it imports it."""
    for name in (*MODULES, SQL_STORE) if sql else MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


class Preload:
    """Import torch, the models and MLflow in a daemon thread, load the scan kernels (on a CPU
    worker: ``scan.warm_up``), open the tracking store (``tracking``: its first client builds
    MLflow's store, checking a SQLite store's schema), call ``needs`` (the study's parent run: its
    error is raised by ``await_preload``) and ``then`` (the settling of runs a kill left RUNNING).
    ``loaded`` is set once all that is done, or failed: an import error is left for the item that
    needs the module to raise (and record) when it imports it. The first claim waits
    for ``loaded``: settling runs while a first item trains made that item wait on MLflow's store
    and on the interpreter (tenths of a second, a fifth of a small trial: benchmarks/bench_idle.py)."""

    def __init__(self, tracking_uri: str | None = None, then: Callable[[], Any] | None = None,
                 device: str = "cpu", needs: Callable[[], Any] | None = None) -> None:
        self.loaded = threading.Event()
        self.failed: Exception | None = None  # what ``needs`` raised: ``await_preload`` raises it
        self.thread = threading.Thread(target=self._load, args=(tracking_uri, then, device, needs),
                                       name="ablate-preload", daemon=True)
        self.thread.start()

    def _load(self, tracking_uri: str | None, then: Callable[[], Any] | None, device: str,
              needs: Callable[[], Any] | None) -> None:
        try:
            try:
                self._prepare(tracking_uri, device)
            finally:  # even after an import error: what no item can do without (the study's parent run)
                if needs is not None:
                    try:
                        needs()
                    except Exception as exc:
                        self.failed = exc
                        return
            if then is not None:
                with contextlib.suppress(Exception):  # best effort: the next worker to start settles them
                    then()
            # The imports left millions of objects that the collector's first full pass, set off by
            # any allocation, walks in a few tenths of a second: in the first claim or MLflow run,
            # were it not done here. Frozen, they are never walked again (they live as long as the
            # worker), so later passes in training and bookkeeping are short too.
            gc.collect()
            gc.freeze()
        except Exception:  # an import error is raised (and recorded) by the item that needs the module
            return
        finally:
            self.loaded.set()

    @staticmethod
    def _prepare(tracking_uri: str | None, device: str) -> None:
        import_modules(tracking_uri is not None and database(tracking_uri))
        from ablate.training_fused import keep_freed_memory

        # Every trial of this process, fused or apart, reuses freed blocks (an L 784 trial apart
        # ran 1.2x faster for it: its activations were mapped and faulted in afresh each step).
        keep_freed_memory()

        if device == "cpu":  # the scan kernels' first call loads them (~0.5 s): here too
            from ablate.ops import scan

            scan.warm_up()
        provenance.record(device)  # git and package versions, cached: 0.1 s the first trial would pay
        if tracking_uri:
            tracking.client(tracking_uri)

    def join(self, timeout: float | None = None) -> None:
        """Until the thread ends (the imports and ``then``), at most ``timeout`` seconds."""
        self.thread.join(timeout)


def select_device(device: str) -> None:
    """Make ``cuda:k`` this process's current CUDA device, so that work launched without a device
    of its own (Triton's kernels, cuBLAS and cuDNN handles) runs on the worker's GPU: several
    workers can share one GPU, or each take its own, with no CUDA_VISIBLE_DEVICES."""
    if device.startswith("cuda"):
        import torch

        index = torch.device(device).index
        if index is not None:
            torch.cuda.set_device(index)


def await_preload(preload: Preload, device: str) -> None:
    """Wait for the preload (its imports, store and settling of runs), then select the device; a
    signal meanwhile interrupts the worker as at any other moment (``work``)."""
    while not preload.loaded.wait(0.5):  # in slices: a signal's handler runs between them
        pass
    if preload.failed is not None:
        raise preload.failed
    select_device(device)
