"""``ablate status`` and ``ablate ls`` as library calls: each reads the stores once and returns an
object that prints itself (``StatusView``, ``StudyList``), tables and lines as the commands show
them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from ablate.runner import countdown, housekeeping, locate, phases, progress, sequential_looks
from ablate.runner.plan import PLAIN_ROWS, plain_table
from ablate.runner.standing import STATUS_METRIC, STATUSES, StudyStatus, existing_store_url
from ablate.stores import redact, resolve
from ablate.terminal import table

#: The per-cell table's column of the finished replicates' mean ``STATUS_METRIC``.
MEAN_HEAD = "test acc (mean, descriptive)"


@dataclass(frozen=True)
class StatusView:
    """What ``ablate status`` prints of a study: its per-cell counts, the summary line with the
    ETA, what is running, a sequential study's looks and the extended or continued runs; or with
    ``as_json`` one JSON object for scripts."""

    name: str
    found: StudyStatus
    snap: progress.Snapshot
    as_json: bool = False
    tuned: dict[str, phases.Pick] = field(default_factory=dict)  # cell label → its tuning's outcome (``picks``)

    def print(self, console: Console) -> None:
        snap, workers = self.snap, self.snap.workers
        if self.as_json:
            shown = progress.status_json(self.name, snap, workers) | {
                "tuned": {cell: {"params": p.params, "metric": p.metric, "mean": p.mean, "tuning_trials": p.trials, "tuning_seeds": p.seeds, "edge_note": p.edge}
                          for cell, p in self.tuned.items()}}
            console.file.write(json.dumps(self.found.to_json(shown), default=str) + "\n")
            return
        self.print_cells(console)
        # The ETA's own words: with no worker running, none as if one were ("no worker running").
        line = self.found.summary("").removesuffix(" · ETA ") + f" · {countdown.eta_text(snap, workers)}"
        console.print(line, highlight=False, soft_wrap=True)
        if snap.items:
            console.print(progress.table(self.name, snap, workers).renderables[-1])
        edge = [phases.EDGE_NOTE] if any(pick.at for pick in self.tuned.values()) else []
        for line in [pick.line(cell) for cell, pick in self.tuned.items()] + edge:
            console.print(line, highlight=False, soft_wrap=True, markup=False)
        for line in self.found.sequential + self.found.extension_lines():  # looks; until converged; WSD
            console.print(line, highlight=False, soft_wrap=True)
        for line in self.found.failure_lines():  # a message may hold [brackets]
            console.print(line, highlight=False, soft_wrap=True, markup=False)

    def print_cells(self, console: Console) -> None:
        """The per-cell counts: a rich table, or above ``plan.PLAIN_ROWS`` cells plain aligned
        lines, as ``plan`` prints them (rich lays out 100 rows in seconds on a busy machine)."""
        title = f"{self.name}: status per cell"
        cells = self.found.cells
        # The finished replicates' mean test accuracy, when any has one: a first look, not a verdict.
        metric = [MEAN_HEAD] if any(c.get(STATUS_METRIC) is not None for c in cells) else []
        rows = [[c["cell_label"], *[str(c[s]) for s in STATUSES],
                 *([f"{c[STATUS_METRIC]:.3f} (n={c[STATUS_METRIC + '_n']})" if c[STATUS_METRIC] is not None else "—"]
                   if metric else [])] for c in cells]
        if len(rows) > PLAIN_ROWS:
            console.print("\n".join(plain_table(title, ["cell", *STATUSES, *metric], rows, {*STATUSES, *metric})),
                          highlight=False, markup=False, soft_wrap=True)
            return
        console.print(title, highlight=False, soft_wrap=True)  # a table title would pad to the table's width
        shown = Table()
        shown.add_column("cell")
        for s in [*STATUSES, *metric]:
            shown.add_column(s, justify="right")
        for row in rows:
            shown.add_row(*row)
        console.print(shown)


def status(study: str, storage: str | None = None, tracking_uri: str | None = None,
           as_json: bool = False) -> StatusView:
    """``ablate status``: one read-only opening of the study, its items' statuses read from the
    queue alone (but first what a kill left RUNNING is ended: ``locate.status``'s ``settle``)."""
    found = locate.status(study, storage, tracking_uri, settle=True)
    return StatusView(study, found, progress.snapshot(found.study), as_json, phases.picks(found.study, found.items))


LS_HEADERS = ["study", "cells", "done", "reused", "failed", "running", "waiting", "orphaned", "dropped",
              "last activity"]
# The orphaned column of a study whose stored spec was not read: its other columns count every item it holds.
UNREAD = "?"


@dataclass(frozen=True)
class StudyList:
    """What ``ablate ls`` prints: a row per study of the storage at ``url`` (None: no stores yet),
    and below the table a line per study whose stored spec was not read (``UNREAD``), saying why."""

    url: str | None
    rows: list[housekeeping.StudyRow]

    def print(self, console: Console) -> None:
        if self.url is None:
            console.print("no stores yet: no study has run here (see --storage, ABLATE_HOME)")
            return
        rows = [[r.name, str(r.cells), str(r.done), str(r.reused), str(r.failed), str(r.running), str(r.waiting),
                 UNREAD if r.orphaned is None else str(r.orphaned), str(r.dropped),
                 r.last.astimezone().strftime("%Y-%m-%d %H:%M:%S") if r.last else "-"]
                for r in self.rows]
        table(console, f"studies on {redact(self.url)}", LS_HEADERS, rows, set(LS_HEADERS[1:-1]))
        for r in self.rows:
            if r.orphaned is None:
                console.print(f"{UNREAD} {r.name}: {r.unread or 'its spec was not read'}; its row counts every item "
                              "it holds, orphans of an earlier spec included", highlight=False, markup=False,
                              soft_wrap=True)


def studies(storage: str | None = None, tracking_uri: str | None = None) -> StudyList:
    """``ablate ls``: the studies on the stores, with their current spec's items per state, their
    orphans (items of an earlier spec) and last activity; reads only, and creates no store where
    there is none."""
    url = existing_store_url(storage)
    return StudyList(url, housekeeping.overview(resolve(url, tracking_uri, create=False), sequential_looks.items)
                     if url else [])
