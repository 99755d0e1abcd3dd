"""``ablate rm``, ``ablate keep`` and ``ablate gc`` as library calls: each does what
``ablate.runner.housekeeping`` (and ``phases``, for kept checkpoints) offers, asks its question
through the ``confirm`` it is given, and returns what the command says when done (``Said``); a
refusal is a ``Refused`` with its exit status, a store that fails a ``StorageError``.

Above housekeeping, so that a sequential study's current items (``sequential_looks.items``) are
its own business here, not the command's.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.markup import escape

from ablate.runner import housekeeping as hk
from ablate.runner import phases, sequential_looks
from ablate.spec import name_problem
from ablate.stores import StorageError, Stores
from ablate.terminal import Refused, Said, count

#: Asks a question before anything is removed; raises ``Refused`` when the answer is no.
Confirm = Callable[[str], None]


def rm(study: str, stores: Stores, confirm: Confirm, orphans: bool = False, force: bool = False) -> Said:
    """``ablate rm``: remove ``study`` (its queue entries and MLflow runs; the runs another study
    reuses stay), or with ``orphans`` drop only its trials whose items belong to no cell of its
    current spec; refused while workers run its items, unless ``force``."""
    try:
        if orphans:
            found = hk.study_orphans(study, stores, sequential_looks.items)
        else:
            plan = hk.removal(study, stores, force)
    except hk.StudyRunning as exc:
        raise Refused(escape(str(exc)), 1) from None
    except Exception as exc:  # the stores, MLflow included, unreachable or refusing: nothing was removed
        raise StorageError(str(exc)) from None
    if orphans:
        return _drop_orphans(study, found, confirm)
    removed, question = hk.removal_question(plan)
    confirm(question)
    try:
        renamed = hk.remove(plan, stores)
    except Exception as exc:  # half done: running the same command again finishes it
        raise StorageError(str(exc)) from None
    return Said([f"removed {study}: {removed} (deleted: `mlflow gc` purges them and their artifacts)"
                 + (f"; kept {hk.counted(len(plan.kept), 'run')} in experiment {renamed!r}, reused by "
                    f"{', '.join(plan.users)}" if plan.kept else "")])


def _drop_orphans(study: str, found: hk.StudyOrphans, confirm: Confirm) -> Said:
    if not found.found:
        return Said([f"{study}: no orphaned trials"])
    confirm(f"drop {count(found.found.trials, 'finished trial')} ({count(len(found.found.finished), 'item')}) and "
            f"{count(len(found.found.unfinished), 'queued item')} of {study!r} that belong to no cell of its spec?")
    try:
        dropped = hk.drop(found)
    except Exception as exc:
        raise StorageError(str(exc)) from None
    return Said([f"{study}: dropped {hk.counted(dropped.trials, 'trial')}; "
                 f"deleted {hk.counted(dropped.runs_deleted, 'MLflow run')}"
                 + (f", kept {len(dropped.runs_kept)} that other studies reuse" if dropped.runs_kept else "")
                 + (f"; {hk.counted(dropped.running, 'running item')} left alone" if dropped.running else "")])


def keep(study: str, new: str, stores: Stores) -> Said:
    """``ablate keep``: keep the orphaned trials of ``study`` as study ``new`` (``housekeeping.keep``);
    a ``new`` that is no study name or is taken is refused with exit 2, a keep that cannot be made
    with exit 1."""
    if (why := name_problem(new)) is not None:
        raise Refused(escape(f"NEW: {why}"))
    try:
        done = hk.keep(study, new, stores, sequential_looks.items)
    except hk.NameTaken as exc:
        raise Refused(escape(str(exc))) from None
    except (hk.SpecNotRecorded, hk.NoneKept) as exc:
        raise Refused(escape(str(exc)), 1) from None
    if done.dropped is None:
        return Said([f"{study}: no finished orphaned trials to keep"])
    return Said([f"kept {count(len(done.kept), 'orphaned item')} of {study} as study {new} ({done.covered} of them in "
                 f"the spec they were queued under, spec hash {done.spec_hash}; nothing was run); {study} dropped "
                 f"{count(done.dropped.trials, 'trial')}"
                 + (f"; {count(done.left, 'orphaned item')} not in that spec stay" if done.left else "")])


def gc(storage: str | None, confirm: Confirm, every: bool = False) -> Said:
    """``ablate gc``: remove the kept stable-phase checkpoints whose cell no study on the storage
    has any more (``every``: all of them), after ``confirm``; exit 1 with no stores to ask."""
    try:
        found = phases.garbage(storage, every)
    except phases.NoStores as exc:
        raise Refused(escape(str(exc)), 1) from None
    kept, drop = found.kept, found.drop
    if not kept:
        return Said([f"no kept checkpoints under {found.root / 'stable'}"])
    if not drop:
        return Said([f"{hk.counted(len(kept), 'kept checkpoint')} ({found.size / 2**20:.1f} MiB), each of a cell a "
                     "study still has: nothing to remove (--all removes them anyway)"])
    cells = sorted({f"{k.cell_label} ({k.cell_id})" for k in drop})
    confirm(f"remove {hk.counted(len(drop), 'kept checkpoint')} ({found.drop_size / 2**20:.1f} MiB) of "
            f"{hk.counted(len(cells), 'cell')}: {', '.join(cells[:5])}{' …' if len(cells) > 5 else ''}?")
    freed = phases.drop_kept(drop)
    return Said([f"removed {hk.counted(len(drop), 'kept checkpoint')}, {freed / 2**20:.1f} MiB; "
                 f"kept {len(kept) - len(drop)}"])
