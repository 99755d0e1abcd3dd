"""A failure's kind, whether the study storage failed, and its one line (``ablate.runner.failures``)."""

from __future__ import annotations

import sqlalchemy.exc
import torch

from ablate.runner import failures, queue
from ablate.stores import StorageError


def test_failures_are_classified():
    assert failures.classify(torch.OutOfMemoryError("CUDA out of memory")) == "oom"
    assert failures.classify(RuntimeError("DefaultCPUAllocator: can't allocate memory")) == "oom"
    assert failures.classify(sqlalchemy.exc.OperationalError("SELECT", {}, Exception("server closed"))) == "infrastructure"
    assert failures.classify(ConnectionError("refused")) == "infrastructure"
    assert failures.classify(ValueError("shape mismatch")) == "error"


def test_only_the_study_storage_s_own_failures_stop_the_worker():
    """MLflow's failure is re-queued (``TrackingFailure``, even when it wraps a database error);
    the study storage's (an SQLAlchemy error, a storage the store layer refused) stops the worker."""
    db = sqlalchemy.exc.OperationalError("UPDATE trials", {}, Exception("database is locked"))
    assert failures.storage_failure(db)
    assert failures.storage_failure(StorageError("cannot write the study storage"))
    assert failures.storage_failure(queue.StorageInternal("lost"))
    wrapped = failures.TrackingFailure("tracking failed: OperationalError: database is locked")
    wrapped.__cause__ = db
    assert not failures.storage_failure(wrapped)
    assert not failures.storage_failure(ValueError("shape mismatch"))


def test_a_failure_s_line_names_the_root_cause_and_hides_passwords():
    try:
        try:
            raise ConnectionRefusedError("could not connect to postgresql://ablate:s3cret@db:5432/ablate")
        except ConnectionRefusedError as inner:
            raise RuntimeError("MLflow could not log the batch\nretried 5 times") from inner
    except RuntimeError as exc:
        line = failures.text(exc)
    assert line.startswith("RuntimeError: ConnectionRefusedError: could not connect to ")
    assert "s3cret" not in line and "\n" not in line
    assert failures.text(ValueError("shape mismatch\nmore")) == "ValueError: shape mismatch"
