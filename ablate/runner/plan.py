"""``ablate plan``: the cells of a spec, each item's state read from the study's storage (done /
failed / running / reused from another study / pending), and the lines that explain it (reuse,
stale results, continuations, retries, orphans). Reading progress opens the storage only if it
exists (nothing is created). The estimate of the rest is ``ablate.runner.estimate``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ablate import design
from ablate.design import Cell, Item, cells
from ablate.design.identity import version_change
from ablate.runner import sequential_looks
from ablate.runner.phases import checked_branch
from ablate.runner.standing import existing_store_url, standing
from ablate.runner.study import StorageError, extends_runs, extension_lines
from ablate.runner.study import load as load_study
from ablate.runner.study import storage as open_storage
from ablate.spec import Spec
from ablate.stores import checkpoint_dir, resolve
from ablate.terminal import count

FINISHED = ("done", "failed")
# What a plan's rows and its summary line count (``CellPlan.tally``), in their order.
TALLIED = ("done", "failed", "running", "reused", "pending")



@dataclass
class CellPlan:
    cell: Cell
    items: list[Item]
    states: dict[str, str] = field(default_factory=dict)  # item key → state in this study
    reusable: dict[str, Any] = field(default_factory=dict)  # item key → study.Source to be linked
    stale: dict[str, Any] = field(default_factory=dict)  # item key → study.Source found stale, not reused
    linked: dict[str, str] = field(default_factory=dict)  # item key → study it was reused from (done)
    held: str = ""  # why results of this cell elsewhere are not reused
    branches: dict[str, Any] = field(default_factory=dict)  # item key → phases.Branch it continues from
    unsound: dict[str, str] = field(default_factory=dict)  # item key → its unsound kept checkpoints, and what then

    @property
    def counts(self) -> Counter:
        return Counter(self.states.get(i.key, "new") for i in self.items)

    @property
    def finished(self) -> int:
        return sum(self.counts[s] for s in FINISHED)

    @property
    def tally(self) -> Counter:
        """Its items as the row and the summary line count them, each once: done, failed, running,
        reused (to be linked from another study) and pending (waiting or not queued yet)."""
        out: Counter = Counter(dict.fromkeys(TALLIED, 0))
        for item in self.items:
            state = self.states.get(item.key, "new")
            out[state if state in ("done", "failed", "running") else
                "reused" if item.key in self.reusable else "pending"] += 1
        return out

    @property
    def status(self) -> str:
        """done / failed (all finished, some without a result) / reused (all that is left comes
        from other studies) / partial / stale / new."""
        if self.finished == len(self.items):
            return "failed" if self.counts["failed"] else "done"
        if self.reusable and self.finished + len(self.reusable) == len(self.items):
            return "reused"
        if self.finished or self.counts["running"] or self.reusable:
            return "partial"
        if self.stale:
            return "stale"
        return "new"

    def _changed(self, old: list[str]) -> str:
        return " | ".join(dict.fromkeys(version_change(v, self.cell.code_version) for v in old))

    @property
    def source(self) -> str:
        """Where its results come from, when not from this study: ``reused from study X``,
        ``stale (code version 1 → 2)``, or why results found elsewhere are not reused."""
        parts = []
        studies = Counter(self.linked.values()) + Counter(s.trained_in for s in self.reusable.values())
        if studies:
            n = sum(studies.values())
            parts.append("reused from study " + ", ".join(studies) + (f" ({n} of {len(self.items)})"
                                                                       if n < len(self.items) else ""))
            old = sorted({s.code_version for s in self.reusable.values() if s.stale})
            if old:
                parts[-1] += f" (stale: {self._changed(old)})"
        if self.stale:
            old = sorted({s.code_version for s in self.stale.values()})
            parts.append(f"stale ({self._changed(old)}): "
                         f"{len(self.stale)} in study " + ", ".join(sorted({s.study for s in self.stale.values()})))
        if self.held:
            parts.append(self.held)
        return "; ".join(parts)


@dataclass
class Plan:
    spec: Spec
    cells: list[CellPlan]
    stored: bool  # a study of this name exists in the storage
    note: str = ""
    orphans: Any = None  # study.Orphans of this study name, when it exists
    storage: str | None = None  # the storage it was read from (as given; None: the default)
    retryable: dict[str, str] = field(default_factory=dict)  # item key → why it failed (--retry-failed re-runs it)

    @property
    def items(self) -> list[Item]:
        return [i for c in self.cells for i in c.items]

    def pending(self) -> list[Item]:
        """Items that will run: not finished here, not reused from another study."""
        return [i for c in self.cells for i in c.items
                if c.states.get(i.key) not in FINISHED and i.key not in c.reusable]

    def counts(self) -> Counter:
        total: Counter = Counter()
        for c in self.cells:
            total.update(c.counts)
        return total

    def tally(self) -> Counter:
        """The rows' tallies summed: what the summary line prints."""
        total: Counter = Counter(dict.fromkeys(TALLIED, 0))
        for c in self.cells:
            total.update(c.tally)
        return total

    @property
    def reused(self) -> Counter:
        """Source study → items that will be linked from it."""
        out: Counter = Counter()
        for c in self.cells:
            out.update(s.trained_in for s in c.reusable.values())
        return out

    @property
    def stale(self) -> list[CellPlan]:
        return [c for c in self.cells if c.stale]


def build(spec: Spec, storage: str | None = None, tracking_uri: str | None = None, reuse: bool = True,
          reuse_stale: bool = False) -> Plan:
    """The plan of ``spec``: each item's state read from the storage when it exists, what other
    studies there hold for the rest (reused; stale ones too with ``reuse_stale``), the orphans."""
    grid = cells(spec)
    # A sequential study's items are the seeds its looks have planned so far.
    work = design.items(spec) if spec.sequential is None else sequential_looks.stored_items(spec, storage)
    by_cell: dict[str, list[Item]] = {c.id: [] for c in grid}
    for item in work:
        by_cell[item.cell.id].append(item)
    plans = [CellPlan(c, by_cell[c.id]) for c in grid]
    note = ""
    found = None
    try:
        tracking = resolve(storage, tracking_uri, create=False).tracking
        found = standing(spec.name, work, storage, tracking, reuse)
    except Exception as exc:  # an unreadable store: plan without progress, say why
        note = f"cannot read progress: {exc}"
    if found is None and not note:
        note = "no results stored yet: every cell is new"
    elif found is not None and not found.stored and not note:
        note = "no study of this name yet"
    for plan in plans:
        if found is None:
            plan.states = {i.key: "new" for i in plan.items}
            continue
        plan.states = {i.key: found.states.get(i.key, "new") for i in plan.items}
        plan.linked = {i.key: found.linked[i.key] for i in plan.items if i.key in found.linked}
        chosen = found.reuse.chosen(reuse_stale)
        plan.reusable = {i.key: chosen[i.key] for i in plan.items if i.key in chosen}
        plan.stale = {i.key: found.reuse.stale[i.key] for i in plan.items
                      if i.key in found.reuse.stale and i.key not in plan.reusable}
        plan.held = found.reuse.held.get(plan.cell.id, "")
    _find_branches(plans)
    return Plan(spec, plans, bool(found and found.stored), note, found.orphans if found else None, storage,
                found.retryable if found else {})


def _find_branches(plans: list[CellPlan]) -> None:
    """The kept stable-phase checkpoints the pending replicates of WSD cells will continue from.
    Cells that tune are left out: their replicates' setting is known only once tuning is done."""
    root = checkpoint_dir()
    for plan in plans:
        if plan.cell.config.get("train", {}).get("schedule") != "wsd":
            continue
        for item in plan.items:
            if item.phase != "replicate" or item.tune or plan.states.get(item.key) in FINISHED \
                    or item.key in plan.reusable:
                continue
            branch, problems = checked_branch(root, plan.cell.config, item.seed, item.phase)
            if branch is not None:
                plan.branches[item.key] = branch
            if problems:
                then = f"continues from step {branch.step} instead" if branch else "trains from step 0"
                plan.unsound[item.key] = f"seed {item.seed}: {'; '.join(problems)} — {then}"


def continuation_lines(plan: Plan) -> list[str]:
    """One line per pending item that continues a shorter run of its lineage, and one per item whose
    kept checkpoint is unsound (missing, damaged, its description unreadable: trained from step 0)."""
    lines = []
    for c in plan.cells:
        steps = int(c.cell.config["train"]["steps"])
        for b in c.branches.values():
            lines.append(f"{c.cell.id}: continues {b.cell_label} · seed {b.seed} from step {b.step}: "
                         f"{steps - b.step} of {steps} steps to train")
        lines += [f"{c.cell.id}: {why}" for why in c.unsound.values()]
    return lines


def sequential_lines(spec: Spec, storage: str | None = None) -> list[str]:
    """A sequential study's design and where it stands (``ablate.runner.sequential_looks.lines``), read
    from its storage when it has one; for a fixed number of seeds, nothing, or a warning when they
    were first added look by look (``sequential_looks.fixed_after_looks``)."""
    st = None
    url = existing_store_url(storage)
    if url is not None:
        try:
            st = sequential_looks.load_state(load_study(open_storage(url, read_only=True), spec.name))
        except KeyError:
            st = None
    if spec.sequential is None:  # a study once sequential: its fixed design comes after its looks
        return [f"warning: {line}"] if (line := sequential_looks.fixed_after_looks(spec, st)) else []
    return sequential_looks.lines(spec, st)


def until_converged_lines(spec: Spec, storage: str | None = None) -> list[str]:
    """A study training until converged (``train.until_converged``): the items extended so far
    and how many steps its replicates may still train (``ablate.runner.study.extension_lines``), read from
    its storage when it has one; nothing for a study that does not extend."""
    if not extends_runs(spec.model_dump(mode="json")):
        return []
    return extension_lines(stored_trials(spec, storage), design.items(spec))


def stored_trials(spec: Spec, storage: str | None) -> list[Any]:
    """The study's trials, whole, when its storage and the study exist; else none."""
    url = existing_store_url(storage)
    if url is None:
        return []
    try:
        return load_study(open_storage(url, read_only=True), spec.name).get_trials(
            deepcopy=False)
    except (KeyError, StorageError):
        return []


def _n(k: int, word: str) -> str:
    return f"{k} {word}{'' if k == 1 else 's'}"


def summary_line(spec: Spec, n_cells: int) -> str:
    seeds = len(spec.seed_list)
    upto = "up to " if spec.sequential is not None else ""  # the looks decide how many run
    if spec.tune is None:
        return f"{_n(n_cells, 'cell')} × {upto}{_n(seeds, 'seed')} = {upto}{_n(n_cells * seeds, 'trial')}"
    per = spec.tune.trials + seeds
    return (f"{_n(n_cells, 'cell')} × ({_n(spec.tune.trials, 'tuning trial')} + {upto}{_n(seeds, 'seed')}) = "
            f"{upto}{_n(n_cells * per, 'trial')} ({n_cells * spec.tune.trials} tuning, {upto}{n_cells * seeds} "
            "replicate)")


def counts_line(plan: Plan) -> str:
    """The summary line: the rows' columns summed (``Plan.tally``)."""
    tally = plan.tally()
    text = f"done {tally['done']}, failed {tally['failed']}, running {tally['running']}"
    if tally["reused"]:
        text += f", reused {tally['reused']} ({', '.join(f'{n} from {s}' for s, n in plan.reused.items())})"
    return text + f", pending {tally['pending']}"


def retry_lines(plan: Plan) -> list[str]:
    """The items that failed otherwise than by diverging, which ``ablate run --retry-failed`` re-runs."""
    if not plan.retryable:
        return []
    label = {i.key: f"{i.cell.id} {i.cell.label} · seed {i.seed}" for i in plan.items}
    lines = [f"failed with an error: {count(len(plan.retryable), 'item')}; after a fix, the same `ablate run` with "
             f"--retry-failed re-runs them (their failed attempts kept):"]
    return lines + [f"  {label.get(key, key)}: {why[:200]}" for key, why in plan.retryable.items()]


def stale_lines(plan: Plan, reuse_stale: bool = False) -> list[str]:
    """What is stale and the choice: ``--reuse-stale`` reuses it."""
    if reuse_stale or not plan.stale:
        return []
    n = sum(len(c.stale) for c in plan.stale)
    changes = dict.fromkeys(version_change(s.code_version, c.cell.code_version)
                            for c in plan.stale for s in c.stale.values())
    return [f"stale: {count(n, 'trial')} of {count(len(plan.stale), 'cell')} were run by other code ({' | '.join(changes)}): not "
            f"reused, they will run again; --reuse-stale reuses them"]


def orphan_lines(orphans: Any, spec_name: str) -> list[str]:
    """The orphans of a study, and the commands that keep or drop them."""
    if not orphans:
        return []
    lines = []
    if orphans.finished:
        labels = sorted(set(orphans.cells.values()))
        shown = "; ".join(labels[:3]) + (f"; … {len(labels) - 3} more" if len(labels) > 3 else "")
        lines.append(f"orphaned: {count(orphans.trials, 'finished trial')} of study {spec_name!r} "
                     f"({count(len(orphans.finished), 'item')}, {count(len(labels), 'cell')}: {shown}) "
                     f"{'belongs' if orphans.trials == 1 else 'belong'} to no cell of this spec")
    if orphans.unfinished:
        lines.append(f"orphaned: {count(len(orphans.unfinished), 'queued item')} of study {spec_name!r} "
                     f"{'belongs' if len(orphans.unfinished) == 1 else 'belong'} to no cell of this spec; workers of "
                     "this study still run them")
    lines += [f"  keep them as a study of their own:  ablate keep {spec_name} {orphans.keep_as or spec_name + '-old'}",
              f"  drop them:                          ablate rm {spec_name} --orphans",
              "  (until dropped they stay in the store, and any study that asks for their cells reuses them)"]
    return lines


# Rows above which a table is printed as plain aligned text: rich lays a table out cell by cell
# (~0.1 s of CPU per 100 rows, seconds on a busy machine) for frames a long listing does not need.
PLAIN_ROWS = 40


def plain_table(title: str, headers: list[str], rows: list[list[str]], right: set[str] = frozenset()) -> list[str]:
    """The lines of a table as plain aligned columns (never truncated, no markup)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if h in right else c.ljust(w)
                         for c, w, h in zip(cells, widths, headers, strict=True)).rstrip()

    return [title, line(headers), *(line(r) for r in rows)]


def render(plan: Plan, console: Any, reuse_stale: bool = False) -> None:
    spec = plan.spec
    title = f"{spec.name}: plan ({spec.design})"
    sources = any(c.source for c in plan.cells)
    shown = [t for t in TALLIED if t != "reused" or plan.reused]  # the summary line's counts, per cell
    headers = ["cell id", *spec.factors, "trials", *shown, "status", *(["source"] if sources else [])]
    rows = [[c.cell.id, *[c.cell.labels[name] for name in spec.factors], str(len(c.items)),
             *[str(c.tally[t]) for t in shown], c.status, *([c.source] if sources else [])] for c in plan.cells]
    if len(rows) > PLAIN_ROWS:
        console.print("\n".join(plain_table(title, headers, rows, {"trials", *shown})), highlight=False, markup=False,
                      soft_wrap=True)
    else:
        from rich.table import Table

        colour = {"done": "green", "failed": "red", "partial": "yellow", "new": "cyan", "reused": "blue",
                  "stale": "magenta"}
        status = headers.index("status")
        table = Table(title=title)
        for h in headers:
            table.add_column(h, justify="right" if h in ("trials", *shown) else "left")
        for row in rows:
            row[status] = f"[{colour[row[status]]}]{row[status]}[/]"
            table.add_row(*row)
        console.print(table)
    console.print(summary_line(spec, len(plan.cells)))
    console.print(counts_line(plan) + (f"  ({plan.note})" if plan.note else ""))
    for line in continuation_lines(plan) + retry_lines(plan) + stale_lines(plan, reuse_stale) + \
            orphan_lines(plan.orphans, spec.name):
        console.print(line, highlight=False, soft_wrap=True)
