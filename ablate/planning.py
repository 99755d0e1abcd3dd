"""``ablate plan``: the cells of a spec, what is already done, and an estimate of the rest.

Reading progress opens the study's storage only if it exists (nothing is created). The
estimate (``--estimate``) times a few training steps, one validation pass and one probe per
distinct model shape on the chosen device, then scales them by each pending trial's steps,
evaluations and probes, plus a measured-once per-trial overhead for tracking.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ablate.design import Cell, Item, canonical_json, cells, items
from ablate.spec import Spec

# Seconds a worker spends per trial outside training (MLflow run, artifacts, queue), and once per
# `ablate run` (imports, stores); measured on the 2-core CPU development machine.
TRIAL_OVERHEAD_S = 1.5
RUN_OVERHEAD_S = 8.0
FINISHED = ("done", "failed")


@dataclass
class CellPlan:
    cell: Cell
    items: list[Item]
    states: dict[str, str] = field(default_factory=dict)  # item key → state in this study
    reusable: dict[str, Any] = field(default_factory=dict)  # item key → study.Source to be linked
    stale: dict[str, Any] = field(default_factory=dict)  # item key → study.Source found stale, not reused
    linked: dict[str, str] = field(default_factory=dict)  # item key → study it was reused from (done)
    held: str = ""  # why results of this cell elsewhere are not reused

    @property
    def counts(self) -> Counter:
        return Counter(self.states.get(i.key, "new") for i in self.items)

    @property
    def finished(self) -> int:
        return sum(self.counts[s] for s in FINISHED)

    @property
    def status(self) -> str:
        """done / reused (all that is left comes from other studies) / partial / stale / new."""
        if self.finished == len(self.items):
            return "done"
        if self.reusable and self.finished + len(self.reusable) == len(self.items):
            return "reused"
        if self.finished or self.counts["running"] or self.reusable:
            return "partial"
        if self.stale:
            return "stale"
        return "new"

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
                parts[-1] += f" (stale: code version {', '.join(old)} → {self.cell.code_version})"
        if self.stale:
            old = sorted({s.code_version for s in self.stale.values()})
            parts.append(f"stale (code version {', '.join(old)} → {self.cell.code_version}): "
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
    work = items(spec)
    by_cell: dict[str, list[Item]] = {c.id: [] for c in grid}
    for item in work:
        by_cell[item.cell.id].append(item)
    plans = [CellPlan(c, by_cell[c.id]) for c in grid]
    note = ""
    found = None
    try:
        from ablate.runner.study import standing
        from ablate.stores import resolve

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
    return Plan(spec, plans, bool(found and found.stored), note, found.orphans if found else None)


def summary_line(spec: Spec, n_cells: int) -> str:
    seeds = len(spec.seed_list)
    if spec.tune is None:
        return f"{n_cells} cells × {seeds} seeds = {n_cells * seeds} trials"
    per = spec.tune.trials + seeds
    return (f"{n_cells} cells × ({spec.tune.trials} tuning trials + {seeds} seeds) = {n_cells * per} trials "
            f"({n_cells * spec.tune.trials} tuning, {n_cells * seeds} replicate)")


def counts_line(plan: Plan) -> str:
    counts = plan.counts()
    reused = sum(plan.reused.values())
    text = f"done {counts['done']}, failed {counts['failed']}, running {counts['running']}"
    if reused:
        text += f", reused {reused} ({', '.join(f'{n} from {s}' for s, n in plan.reused.items())})"
    return text + f", pending {len(plan.pending())}"


def stale_lines(plan: Plan, reuse_stale: bool = False) -> list[str]:
    """What is stale and the choice: ``--reuse-stale`` reuses it."""
    if reuse_stale or not plan.stale:
        return []
    n = sum(len(c.stale) for c in plan.stale)
    old = sorted({s.code_version for c in plan.stale for s in c.stale.values()})
    now = sorted({c.cell.code_version for c in plan.stale})
    return [f"stale: {n} trials of {len(plan.stale)} cells were run by code version {', '.join(old)} (the code "
            f"is now at {', '.join(now)}): not reused, they will run again; --reuse-stale reuses them"]


def orphan_lines(orphans: Any, spec_name: str) -> list[str]:
    """The orphans of a study, and the commands that keep or drop them."""
    if not orphans:
        return []
    lines = []
    if orphans.finished:
        labels = sorted(set(orphans.cells.values()))
        shown = "; ".join(labels[:3]) + (f"; … {len(labels) - 3} more" if len(labels) > 3 else "")
        lines.append(f"orphaned: {orphans.trials} finished trials of study {spec_name!r} ({len(orphans.finished)} "
                     f"items, {len(labels)} cells: {shown}) belong to no cell of this spec")
    if orphans.unfinished:
        lines.append(f"orphaned: {len(orphans.unfinished)} queued items of study {spec_name!r} belong to no cell of "
                     "this spec; workers of this study still run them")
    lines += [f"  keep them as a study of their own:  ablate keep {spec_name} {spec_name}-old",
              f"  drop them:                          ablate rm {spec_name} --orphans",
              "  (until dropped they stay in the store, and any study that asks for their cells reuses them)"]
    return lines


def render(plan: Plan, console: Any, reuse_stale: bool = False) -> None:
    from rich.table import Table

    spec = plan.spec
    table = Table(title=f"{spec.name}: plan ({spec.design})")
    table.add_column("cell id")
    for name in spec.factors:
        table.add_column(name)
    table.add_column("trials", justify="right")
    table.add_column("done", justify="right")
    table.add_column("status")
    sources = any(c.source for c in plan.cells)
    if sources:
        table.add_column("source")
    colour = {"done": "green", "partial": "yellow", "new": "cyan", "reused": "blue", "stale": "magenta"}
    for c in plan.cells:
        row = [c.cell.id, *[c.cell.labels[name] for name in spec.factors], str(len(c.items)), str(c.finished),
               f"[{colour[c.status]}]{c.status}[/]"]
        table.add_row(*row, *([c.source] if sources else []))
    console.print(table)
    console.print(summary_line(spec, len(plan.cells)))
    console.print(counts_line(plan) + (f"  ({plan.note})" if plan.note else ""))
    for line in stale_lines(plan, reuse_stale) + orphan_lines(plan.orphans, spec.name):
        console.print(line, highlight=False, soft_wrap=True)


# --- estimate ---------------------------------------------------------------------------------


@dataclass
class ShapeTiming:
    setup: float  # building the model and optimiser
    step: float  # one training step
    val: float  # one pass over the validation split
    test: float  # one pass over the test split
    probe: float  # one hidden-state probe


@dataclass
class Estimate:
    seconds: float  # one worker, every pending trial
    trials: int
    shapes: int
    measured: float  # seconds the dry run took
    device: str


def _shape_key(config: dict[str, Any]) -> str:
    return canonical_json({"task": config["task"], "model": config["model"],
                           "batch": config["train"]["batch_size"]})


def measure(config: dict[str, Any], probe_batch: int, device: str = "cpu", steps: int = 5) -> ShapeTiming:
    """Time a few training steps (the trial's own ``train_step``), one evaluation and one probe of
    ``config`` on ``device``."""
    import torch

    from ablate.models import build_model
    from ablate.probes import probe_norms
    from ablate.spec import ModelSpec, TrainSpec
    from ablate.tasks import load_task
    from ablate.training import evaluate, make_optimiser, train_step

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)

    train = TrainSpec.model_validate(config["train"])
    data = load_task(config["task"], progress=False)
    start = time.perf_counter()
    torch.manual_seed(0)
    model = build_model(ModelSpec.model_validate(config["model"]), data.info).to(device)
    optimiser, scheduler = make_optimiser(model, train)
    x, y = (t.to(device) for t in data.train)
    x_val, y_val = (t.to(device) for t in data.val)
    sync()
    setup = time.perf_counter() - start

    def step() -> None:
        idx = torch.randint(len(x), (train.batch_size,)).to(device)
        train_step(model, optimiser, scheduler, x[idx], y[idx], train)

    step()  # the first step pays for compilation and allocation once per worker, not per step
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    per_step = (time.perf_counter() - start) / steps
    start = time.perf_counter()
    evaluate(model, x_val, y_val)
    sync()
    val = time.perf_counter() - start
    start = time.perf_counter()
    probe_norms(model, x_val[:probe_batch], 0)
    sync()
    probe = time.perf_counter() - start
    test = val * len(data.test[0]) / max(1, len(x_val))
    return ShapeTiming(setup, per_step, val, test, probe)


def trial_seconds(config: dict[str, Any], probes_every: int, t: ShapeTiming) -> float:
    train = config["train"]
    steps, every = int(train["steps"]), int(train["eval_every"])
    evals = (steps - 1) // every
    probes = 2 + (steps - 1) // probes_every
    return (t.setup + steps * t.step + (evals + 1) * t.val + t.test + probes * t.probe + TRIAL_OVERHEAD_S)


def estimate(plan: Plan, device: str = "cpu", steps: int = 5) -> Estimate:
    """Wall time of the plan's pending trials on one worker, from a measured dry run."""
    pending = plan.pending()
    start = time.perf_counter()
    timings: dict[str, ShapeTiming] = {}
    total = 0.0
    for item in pending:
        key = _shape_key(item.cell.config)
        if key not in timings:
            timings[key] = measure(item.cell.config, plan.spec.probes.batch, device, steps)
        total += trial_seconds(item.cell.config, plan.spec.probes.every, timings[key])
    if pending:
        total += RUN_OVERHEAD_S
    return Estimate(total, len(pending), len(timings), time.perf_counter() - start, device)


def duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, s = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {s:02d} s"
    hours, m = divmod(minutes, 60)
    return f"{hours} h {m:02d} min"


def render_estimate(est: Estimate, console: Any) -> None:
    if not est.trials:
        console.print("estimate: nothing pending")
        return
    console.print(f"estimated wall time of the {est.trials} pending trials on {est.device}: "
                  f"~{duration(est.seconds)} with one worker (≈ that ÷ N with N workers); measured "
                  f"{est.shapes} model shape{'s' if est.shapes != 1 else ''} in {est.measured:.1f} s")
