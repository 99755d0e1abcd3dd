"""``ablate plan``: the cells of a spec, what is already done, and an estimate of the rest.

Reading progress opens the study's storage only if it exists (nothing is created). The
estimate (``--estimate``) times a few training steps, one validation pass and one probe per
distinct model shape on the chosen device, then scales them by each pending trial's steps,
evaluations and probes, plus a measured-once per-trial overhead for tracking.
"""

from __future__ import annotations

import heapq
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ablate.design import Cell, Item, canonical_json, cells, items
from ablate.spec import Spec

# Seconds a worker spends per trial outside training (MLflow run, artifacts, queue), and once per
# `ablate run` (imports, stores); measured on the 2-core CPU development machine.
TRIAL_OVERHEAD_S = 1.5
RUN_OVERHEAD_S = 8.0
WORKER_START_S = 0.0
FINISHED = ("done", "failed")


@dataclass
class CellPlan:
    cell: Cell
    items: list[Item]
    states: dict[str, str] = field(default_factory=dict)  # item key → state

    @property
    def counts(self) -> Counter:
        return Counter(self.states.get(i.key, "new") for i in self.items)

    @property
    def finished(self) -> int:
        return sum(self.counts[s] for s in FINISHED)

    @property
    def status(self) -> str:
        if self.finished == len(self.items):
            return "done"
        if self.finished or self.counts["running"]:
            return "partial"
        return "new"


@dataclass
class Plan:
    spec: Spec
    cells: list[CellPlan]
    stored: bool  # a study of this name exists in the storage
    note: str = ""

    @property
    def items(self) -> list[Item]:
        return [i for c in self.cells for i in c.items]

    def pending(self) -> list[Item]:
        return [i for c in self.cells for i in c.items if c.states.get(i.key) not in FINISHED]

    def counts(self) -> Counter:
        total: Counter = Counter()
        for c in self.cells:
            total.update(c.counts)
        return total


def build(spec: Spec, storage: str | None = None) -> Plan:
    """The plan of ``spec``, with each item's state read from the storage when it exists."""
    grid = cells(spec)
    work = items(spec)
    by_cell: dict[str, list[Item]] = {c.id: [] for c in grid}
    for item in work:
        by_cell[item.cell.id].append(item)
    plans = [CellPlan(c, by_cell[c.id]) for c in grid]
    note = ""
    states: dict[str, str] | None = None
    try:
        from ablate.runner.study import item_states

        states = item_states(spec.name, [i.key for i in work], storage)
    except Exception as exc:  # an unreadable store: plan without progress, say why
        note = f"cannot read progress: {exc}"
    if states is None and not note:
        note = "no results stored yet for this study: every cell is new"
    for plan in plans:
        plan.states = {i.key: (states or {}).get(i.key, "new") for i in plan.items}
    return Plan(spec, plans, states is not None, note)


def summary_line(spec: Spec, n_cells: int) -> str:
    seeds = len(spec.seed_list)
    if spec.tune is None:
        return f"{n_cells} cells × {seeds} seeds = {n_cells * seeds} trials"
    per = spec.tune.trials + seeds
    return (f"{n_cells} cells × ({spec.tune.trials} tuning trials + {seeds} seeds) = {n_cells * per} trials "
            f"({n_cells * spec.tune.trials} tuning, {n_cells * seeds} replicate)")


def render(plan: Plan, console: Any) -> None:
    from rich.table import Table

    spec = plan.spec
    table = Table(title=f"{spec.name}: plan ({spec.design})")
    table.add_column("cell id")
    for name in spec.factors:
        table.add_column(name)
    table.add_column("trials", justify="right")
    table.add_column("done", justify="right")
    table.add_column("status")
    colour = {"done": "green", "partial": "yellow", "new": "cyan"}
    for c in plan.cells:
        table.add_row(c.cell.id, *[c.cell.labels[name] for name in spec.factors], str(len(c.items)),
                      str(c.finished), f"[{colour[c.status]}]{c.status}[/]")
    console.print(table)
    console.print(summary_line(spec, len(plan.cells)))
    counts = plan.counts()
    pending = len(plan.pending())
    console.print(f"done {counts['done']}, failed {counts['failed']}, running {counts['running']}, "
                  f"pending {pending}" + (f"  ({plan.note})" if plan.note else ""))


# --- estimate ---------------------------------------------------------------------------------


@dataclass
class ShapeTiming:
    setup: float  # per trial: the cached task read, the model and optimiser built, data moved
    step: float  # one training step (median of several, after a warm-up step)
    val: float  # one pass over the validation split
    test: float  # one pass over the test split
    probe: float  # one hidden-state probe (everything ``probes`` asks for)
    grads: float = 0.0  # the gradient-norm rows of one probe step


@dataclass
class Estimate:
    seconds: float  # wall time of every pending trial with ``workers`` workers, start-up included
    trials: int
    shapes: int
    measured: float  # seconds the dry run took
    device: str
    workers: int = 1
    trial_seconds: float = 0.0  # the pending trials' own time, summed (one worker's busy time)
    start_seconds: float = 0.0  # what a run spends before its workers claim anything


def _shape_key(config: dict[str, Any]) -> str:
    return canonical_json({"task": config["task"], "model": config["model"],
                           "batch": config["train"]["batch_size"]})


def _timed(fn: Any, sync: Any, repeats: int = 3) -> float:
    """The median of ``repeats`` timed calls of ``fn`` (after the caller's warm-up call)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(config: dict[str, Any], probes: Any = None, device: str = "cpu", steps: int = 5) -> ShapeTiming:
    """Time what a trial of ``config`` does, on ``device``, with the trial's own functions: its
    setup, training steps (``train_step``), an evaluation, a probe (``Prober.probe``) and the
    gradient rows. Each is called once untimed first: the first call pays for compilation (numba,
    Triton), lazy imports and allocation, once per worker process, not once per call."""
    import torch

    from ablate.models import build_model
    from ablate.probes import Prober
    from ablate.spec import ModelSpec, ProbeSpec, TrainSpec
    from ablate.tasks import load_task
    from ablate.training import evaluate, make_optimiser, train_step

    probes = ProbeSpec.model_validate(probes) if isinstance(probes, dict) else probes or ProbeSpec()

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)

    train = TrainSpec.model_validate(config["train"])
    load_task(config["task"], progress=False)  # a cache miss generates the data: once per study, not per trial

    def setup() -> tuple[Any, ...]:
        data = load_task(config["task"], progress=False)
        torch.manual_seed(0)
        model = build_model(ModelSpec.model_validate(config["model"]), data.info).to(device)
        optimiser, scheduler = make_optimiser(model, train)
        moved = [t.to(device) for t in (*data.train, *data.val)]
        return data, model, optimiser, scheduler, moved

    setup()  # the first build imports what the optimiser loads lazily (seconds, once per process)
    start = time.perf_counter()
    data, model, optimiser, scheduler, (x, y, x_val, y_val) = setup()
    sync()
    setup_s = time.perf_counter() - start
    prober = Prober(model, probes, x_val[: probes.batch], optimiser.param_groups)

    def step() -> None:
        idx = torch.randint(len(x), (train.batch_size,)).to(device)
        train_step(model, optimiser, scheduler, x[idx], y[idx], train)

    def block() -> None:
        for _ in range(steps):
            step()

    step()
    sync()
    per_step = _timed(block, sync) / steps
    evaluate(model, x_val, y_val)
    val = _timed(lambda: evaluate(model, x_val, y_val), sync)
    probe = 0.0
    grads = 0.0
    if probes.enabled:
        prober.probe(0)
        probe = _timed(lambda: prober.probe(0), sync)
        if probes.grads:
            prober.grad_rows(1)
            grads = _timed(lambda: prober.grad_rows(1), sync)
    test = val * len(data.test[0]) / max(1, len(x_val))
    return ShapeTiming(setup_s, per_step, val, test, probe, grads)


def trial_seconds(config: dict[str, Any], probes: Any, t: ShapeTiming) -> float:
    """One trial's wall time from its timings: the counts of steps, evaluations and probes are the
    training loop's (``ablate.training.run_trial``), plus ``TRIAL_OVERHEAD_S``."""
    train = config["train"]
    steps, every = int(train["steps"]), int(train["eval_every"])
    evals = (steps - 1) // every  # periodic validation passes; the final val + test come after
    enabled = getattr(probes, "enabled", True)
    probe_every = int(getattr(probes, "every", probes if isinstance(probes, int) else 100))
    n_probes = (2 + (steps - 1) // probe_every) if enabled else 0  # step 0, every `every`, the end
    n_grads = (steps // probe_every + (1 if steps % probe_every else 0)) if enabled else 0
    return (t.setup + steps * t.step + (evals + 1) * t.val + t.test + n_probes * t.probe + n_grads * t.grads
            + TRIAL_OVERHEAD_S)


def schedule(items: list[Item], seconds: list[float], workers: int) -> float:
    """The wall time of running ``items`` (``seconds`` each) with ``workers`` workers as the queue
    does: the oldest claimable item goes to whichever worker is free first, and a tuned cell's
    replicates are claimable only once all of its tuning items are finished."""
    free = [0.0] * max(1, workers)
    tuning_left = Counter(i.cell.id for i in items if i.phase == "tune")
    tuning_ends: list[tuple[float, str]] = []  # (end, cell id) of tuning items started
    pending = list(range(len(items)))
    while pending:
        w = min(range(len(free)), key=free.__getitem__)
        now = free[w]
        while tuning_ends and tuning_ends[0][0] <= now:
            tuning_left[heapq.heappop(tuning_ends)[1]] -= 1
        pick = next((k for k in pending if not (items[k].phase == "replicate" and items[k].tune
                                                 and tuning_left[items[k].cell.id])), None)
        if pick is None:  # what is left waits for tuning running on other workers
            free[w] = tuning_ends[0][0]
            continue
        pending.remove(pick)
        free[w] = now + seconds[pick]
        if items[pick].phase == "tune":
            heapq.heappush(tuning_ends, (free[w], items[pick].cell.id))
    return max(free)


def estimate(plan: Plan, device: str = "cpu", steps: int = 5, workers: int = 1,
             threads: int | None = None) -> Estimate:
    """Wall time of the plan's pending trials with ``workers`` local workers (``ablate run
    --workers``), from a measured dry run: each distinct model shape is timed once on ``device``
    (with ``threads`` CPU threads: what each worker of a pool gets), the trials are scheduled as
    the queue claims them, and a run's start is added (``RUN_OVERHEAD_S``, ``WORKER_START_S``)."""
    pending = plan.pending()
    start = time.perf_counter()
    timings: dict[str, ShapeTiming] = {}
    per_item: list[float] = []
    with _threads(threads):
        for item in pending:
            key = _shape_key(item.cell.config)
            if key not in timings:
                timings[key] = measure(item.cell.config, plan.spec.probes, device, steps)
            per_item.append(trial_seconds(item.cell.config, plan.spec.probes, timings[key]))
    begin = RUN_OVERHEAD_S + WORKER_START_S if pending else 0.0
    total = begin + schedule(pending, per_item, workers) if pending else 0.0
    return Estimate(total, len(pending), len(timings), time.perf_counter() - start, device, workers,
                    sum(per_item), begin)


@contextmanager
def _threads(threads: int | None) -> Iterator[None]:
    if not threads:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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
    who = "one worker" if est.workers == 1 else f"{est.workers} workers"
    console.print(f"estimated wall time of the {est.trials} pending trials on {est.device}: ~{duration(est.seconds)} "
                  f"with {who} (trials {duration(est.trial_seconds)} of one worker's time, start-up "
                  f"{duration(est.start_seconds)}); measured {est.shapes} model shape{'s' if est.shapes != 1 else ''} "
                  f"in {est.measured:.1f} s", highlight=False, soft_wrap=True)
