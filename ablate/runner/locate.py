"""Finding the stores that hold a study, and its status read from the queue alone: what ``ablate
status`` prints and ``ablate report``/``compare`` look up before reading frames. Kept apart from
``ablate.results`` so that a command which only counts items does not import polars (about a
fifth of a second of CPU at every call); ``results`` re-exports each function.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import os
from collections.abc import Sequence
from pathlib import Path

import optuna
from optuna.trial import TrialState

from ablate import design
from ablate.runner import queue, sequential_looks
from ablate.runner.standing import StudyStatus, existing_store_url, study_status
from ablate.runner.study import (
    RUNS_SETTLED,
    WHERE_STORES_ARE,
    StorageError,
    extends_runs,
    finished_mark,
    missing_study,
    no_store,
    open_study,
    recorded_tracking,
    settle_runs,
)
from ablate.runner.study import storage as open_storage
from ablate.spec import Spec
from ablate.stores import Stores, home_is_default, homes_above, resolve

__all__ = ["locate", "located_study", "status", "stored_specs"]


def locate(study: str, storage_url: str | None = None, tracking_uri: str | None = None,
           home: str | Path | None = None) -> Stores:
    """The stores that hold ``study``: the given ones, else the environment's, else the home folder
    (``home``, ``$ABLATE_HOME``, ``./.ablate``), else — when nothing was given — the ``.ablate``
    folders above the working directory. Creates nothing; raises StorageError naming what was
    searched and the closest study names."""
    given = resolve(storage_url, tracking_uri, home, create=False)
    url = existing_store_url(given.storage)
    if url is not None:
        names = queue.names(open_storage(url, read_only=True))
        if study in names:
            return given
        message = missing_study(study, names, url)
    else:
        message = no_store(study, given.storage)
    searched, close = [], []
    if storage_url is None and tracking_uri is None and not os.environ.get("ABLATE_STORAGE") \
            and not os.environ.get("ABLATE_TRACKING_URI") and home_is_default(home):
        for folder in homes_above():
            above = resolve(None, None, folder, create=False)
            names = queue.names(open_storage(above.storage, read_only=True))
            if study in names:
                return above
            searched.append(str(folder))
            close += [f"{c!r} in {folder}" for c in difflib.get_close_matches(study, names, n=2, cutoff=0.6)]
        message += f"; no .ablate folder above {Path.cwd()} holds it either"
        if searched:
            message += f" (searched {', '.join(searched)}" + (f"; did you mean {' or '.join(close)}?)" if close
                                                             else ")")
    raise StorageError(f"{message}; {WHERE_STORES_ARE}")


def located_study(study: str, storage_url: str | None = None, tracking_uri: str | None = None,
                  home: str | Path | None = None) -> tuple[Stores, optuna.Study]:
    """The stores that hold ``study`` (as ``locate`` finds them) and the study opened read-only
    from them: one opening when the given stores hold it, ``locate``'s search only when they do
    not. Creates nothing; raises StorageError as ``locate`` does."""
    given = resolve(storage_url, tracking_uri, home, create=False)
    if existing_store_url(given.storage) is not None:
        try:
            return given, open_study(study, given, read_only=True)
        except StorageError:  # not there: locate searches further and says where it looked
            pass
    stores = locate(study, storage_url, tracking_uri, home)
    return stores, open_study(study, stores, read_only=True)


def status(study: str, storage: str | None = None, tracking_uri: str | None = None,
           home: str | Path | None = None, settle: bool = False) -> StudyStatus:
    """What ``ablate status`` prints of ``study``, found as ``locate`` says: its items (a
    sequential study's: the seeds its looks planned) counted by status per cell and in total, as
    the ``status`` column of ``load``'s trials counts them, read from the queue alone (no MLflow,
    no frames); ``sequential`` holds a sequential study's lines (its looks and decisions). Reads
    only (``settle``: but first ends what a kill left RUNNING in MLflow once nothing is left to run,
    ``settle_finished``); raises StorageError, and SpecError for a stored spec this code does not accept."""
    stores, opt = located_study(study, storage, tracking_uri, home)
    if settle:
        settle_finished(opt, stores)
    spec_data = opt.user_attrs["spec"]
    spec = design.validate(spec_data, f"study {study}")
    found = study_status(study, opt, sequential_looks.items(spec, opt), extends=extends_runs(spec_data))
    if spec.sequential is None:
        return found
    state = sequential_looks.load_state(opt)
    return dataclasses.replace(found, sequential=sequential_looks.lines(spec, state, found.seconds_per_item()),
                               sequential_json=sequential_looks.state_json(spec, state))


def settle_finished(opt: optuna.Study, stores: Stores) -> None:
    """When no trial of ``opt`` waits or runs, end its MLflow runs a kill left RUNNING, the parent run
    included (``study.settle_runs``, through a writable opening); best effort: a store that cannot
    be written is left to the next run. While trials run, their workers settle."""
    if queue.count(opt, (TrialState.WAITING, TrialState.RUNNING)) or \
            opt.user_attrs.get(RUNS_SETTLED) == finished_mark(opt):  # settled since the last trial finished
        return
    with contextlib.suppress(Exception):
        writable = open_study(opt.study_name, stores)
        settle_runs(writable, recorded_tracking(writable, stores.tracking))


def stored_specs(studies: Sequence[str], storage: str | None = None, tracking_uri: str | None = None) -> dict[str, Spec]:
    """Each study's spec as its study stored it, validated by this code (what a comparison checks
    its cells against), from the given stores (``ablate.stores.resolve``'s). Raises StorageError
    for a study they do not hold, SpecError for a spec this code does not accept."""
    stores = resolve(storage, tracking_uri, create=False)
    return {s: design.validate(open_study(s, stores).user_attrs["spec"], f"study {s}") for s in studies}
