"""What a claimed item's failure is: its kind (``classify``: ``oom`` retried with gradient
accumulation, ``infrastructure`` re-queued with back-off, ``error`` a bug, recorded), whether the
study storage itself failed (then nothing can be recorded and the worker stops), where a full disk
is looked for, and the one line a failure is shown and recorded by. What the worker then does with
the item: ``ablate.runner.worker``.
"""

from __future__ import annotations

from pathlib import Path

from ablate.runner import queue
from ablate.stores import StorageError, Stores, checkpoint_dir, redact, sqlite_path

#: Failure kinds whose item is re-queued (the others are the item's result or a bug).
RETRYABLE = ("oom", "infrastructure")


class TrackingFailure(Exception):
    """MLflow failed (unreachable, its store deleted or read-only): an ``infrastructure`` failure."""


def text(exc: BaseException) -> str:
    """One line about an exception, without passwords: its type and first line, or, when it wraps
    another (MLflow and Optuna wrap the database's error), the root cause's."""
    from ablate.stores import root_cause

    def first(e: BaseException) -> str:
        return (str(e).strip().splitlines() or [""])[0]

    root = root_cause(exc)
    if root is exc or first(root) in first(exc):
        text = f"{type(exc).__name__}: {first(exc)}"
    else:
        text = f"{type(exc).__name__}: {type(root).__name__}: {first(root)}"
    return redact(text)[:2000]


def storage_failure(exc: BaseException) -> bool:
    """Whether the study storage itself failed (then nothing can be recorded: the worker stops)."""
    if isinstance(exc, StorageError | queue.StorageInternal):
        return True
    try:
        import sqlalchemy.exc
    except ImportError:  # pragma: no cover
        return False
    return isinstance(exc, sqlalchemy.exc.SQLAlchemyError) and not isinstance(exc, TrackingFailure)


def written_paths(stores: Stores) -> list[Path]:
    """The folders a worker writes to: where a full disk is looked for."""
    import tempfile

    from ablate.stores import home
    from ablate.tasks.cache import cache_root

    paths = [home().resolve(), checkpoint_dir(), Path(tempfile.gettempdir())]
    paths.append(cache_root().expanduser())
    for url in (stores.storage, stores.tracking):
        path = sqlite_path(url)
        if path is not None:
            paths.append(path.parent)
    if stores.artifacts and stores.artifacts.startswith("file://"):
        from urllib.parse import unquote, urlparse

        paths.append(Path(unquote(urlparse(stores.artifacts).path)))
    return paths


def classify(exc: BaseException) -> str:
    """oom (retried with accumulation), infrastructure (stores: retried with back-off), error (a bug)."""
    import torch

    text = str(exc).lower()
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in text or (
        "can't allocate memory" in text
    ):
        return "oom"
    infrastructure: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)
    try:
        import sqlalchemy.exc

        infrastructure += (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)
    except ImportError:  # pragma: no cover
        pass
    try:
        import requests

        infrastructure += (requests.exceptions.ConnectionError, requests.exceptions.Timeout)
    except ImportError:  # pragma: no cover
        pass
    if isinstance(exc, infrastructure) or type(exc).__name__ == "MlflowException" and any(
        word in text for word in ("connection", "timed out", "unavailable", "locked")
    ):
        return "infrastructure"
    return "error"
