"""``ablate plan --estimate [--workers K]``: the wall time of a plan's pending trials, from a
measured dry run on the chosen device: per distinct model shape, a trial's setup, a training step,
a validation pass, a probe and the gradient rows — each after an untimed first call, which pays
for compilation and lazy imports once per worker process — then scaled by each pending trial's
steps, evaluations and probes (the training loop's counts); and once, on throwaway SQLite stores,
a run's bookkeeping (queueing, a worker's imports, a trial's claim and the worker's own
``run_item`` around a stand-in for training). The trials are then scheduled over K workers as the
queue claims them (a tuned cell's replicates after its tuning).
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.design import Item, canonical_json
from ablate.runner import study as st
from ablate.runner import timings as timing_store
from ablate.runner import worker
from ablate.runner.plan import Plan, stored_trials
from ablate.runner.study import extends_runs, extension_history, possible_extensions
from ablate.runner.timings import ShapeTiming, shape_key, trial_seconds
from ablate.schedule import Schedule
from ablate.spec import Spec
from ablate.stores import Stores

# The seconds `ablate run` takes to start Python, read and validate the spec before it queues anything.
CLI_START_S = 1.0
# Items queued for real when the queueing is measured; the rest are scaled from them.
QUEUE_SAMPLE = 200


@dataclass
class Overheads:
    """What a run spends besides training, measured on throwaway SQLite stores (``measure_overheads``)."""

    queue: float  # `ablate run` before any claim: the study created, the items queued, the parent run
    imports: float  # a worker process's start: Python, torch, MLflow, the training code
    trial: float  # one trial's bookkeeping: claim, its MLflow run (params, metrics, artifacts), finish


@dataclass
class Estimate:
    seconds: float  # wall time of every pending trial with ``workers`` workers, start-up included
    trials: int
    shapes: int
    measured: float  # seconds the dry run took
    device: str
    workers: int = 1
    trial_seconds: float = 0.0  # the pending trials' own time, summed (one worker's busy time)
    start_seconds: float = 0.0  # what a run spends before its workers train: queueing, imports
    # Until converged: the extension runs that may still come were every replicate to stay
    # improving up to max_steps (at most), the steps they train, the wall time they add to the
    # above with ``workers`` workers, and their own time summed.
    extension_runs: int = 0
    extension_steps: int = 0
    extension_seconds: float = 0.0
    extension_trial_seconds: float = 0.0
    reused: int = 0  # shapes whose timings an earlier call measured (``timings.timings_file``)
    # What may end a pending trial before its budget, which prices it whole (``sooner``).
    sooner: tuple[str, ...] = ()


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
    gradient rows. Each is called once untimed first: the first call pays for compilation (numba
    and Triton kernels, cached on disk), lazy imports and allocation, once per worker process,
    not once per call; what the first build costs beyond the second is ``first_use``."""
    # Torch and the model code load only when a shape is timed: importing this module stays light.
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
        sync()
        return data, model, optimiser, scheduler, moved

    start = time.perf_counter()
    setup()  # the first build loads what a process loads once (the model code's kernels, lazy imports)
    first = time.perf_counter() - start
    start = time.perf_counter()
    data, model, optimiser, scheduler, (x, y, x_val, y_val) = setup()
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
    probe = grads = 0.0
    rows = 0
    if probes.enabled:
        rows = prober.probe(0).height
        probe = _timed(lambda: prober.probe(0), sync)
        if probes.grads:
            prober.grad_rows(1)
            grads = _timed(lambda: prober.grad_rows(1), sync)
    test = val * len(data.test[0]) / max(1, len(x_val))
    return ShapeTiming(setup_s, per_step, val, test, probe, grads, max(0.0, first - setup_s), rows)


def measure_overheads(spec: Spec, items: list[Item], config: dict[str, Any], probe_rows: int,
                      folder: str | os.PathLike[str] | None = None) -> Overheads:
    """Measure, on throwaway SQLite stores in a temporary folder (``folder``: there, kept), what
    ``ablate run`` spends besides training: queueing the study (``runner.study.prepare`` with the
    MLflow parent run; up to ``QUEUE_SAMPLE`` items, scaled to all), a worker's start (its imports,
    timed in a fresh process), and one trial's bookkeeping through the worker's own loop
    (``runner.worker.work``: claim, heartbeat, start attributes, MLflow run, record, Optuna commit,
    the run's end), with a stand-in for training that reports what a trial of ``config`` reports
    (its metrics and curve rows) and returns a complete result; the second of two, from the first's
    end to its own (the first pays the stores' first use). Local SQLite stores: a remote server or
    database adds its round trips."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, mlflow.tracking, ablate.training, ablate.runner.worker"],
                   check=True, capture_output=True)
    imports = time.perf_counter() - start

    # Polars, torch and the training code load here, after the worker's imports are timed apart.
    import polars as pl

    from ablate.probes import CURVE_SCHEMA
    from ablate.training import TrialResult

    sample = items[:QUEUE_SAMPLE]
    when = Schedule.of(config["train"], spec.probes)
    layers = int(config["model"]["layers"])
    logged = {"train/loss": 1.0, "train/accuracy": 0.5, "train/lr": 1e-3,
              **{f"train_state_norm/layer{i}": 1.0 for i in range(layers)}}
    curves = pl.DataFrame({"step": [0] * probe_rows, "layer": [0] * probe_rows, "head": [0] * probe_rows,
                           "t": [-1] * probe_rows, "value": [1.0] * probe_rows, "kind": ["probe"] * probe_rows,
                           "quantity": ["norm_sq_mean"] * probe_rows}, schema=CURVE_SCHEMA)
    final = {f"{split}_{name}": value for split in ("val", "test")
             for name, value in (("loss", 1.0), ("accuracy", 0.5), ("bpc", 1.4))}

    def train(_config: dict[str, Any], _seed: int, _probes: Any, reporter: Any, **_: Any) -> TrialResult:
        """What the worker gets from training a trial of ``config``, without the training: its
        reports at the steps of its schedule (the training loop's), then a complete result."""
        begin = time.perf_counter()
        for step in range(when.steps + 1):
            if step and when.logs(step):
                reporter.log_metrics(step, logged)
            if when.validates(step) or when.checks(step):
                reporter.log_metrics(step, {f"val/{k.removeprefix('val_')}": v for k, v in final.items()
                                            if k.startswith("val_")})
            if when.probes(step):
                reporter.log_curves(curves)
        reporter.log_metrics(when.steps, {k.replace("_", "/", 1): v for k, v in final.items()})
        return TrialResult("complete", {"chance": 0.5, **final}, when.steps, time.perf_counter() - begin,
                           convergence={"converged": True, "val_gain_last": 0.0, "val_gain_se": 0.0,
                                        "steps": when.steps, "stopped_early": False, "best_step": when.steps})

    events: list[tuple[str, dict[str, Any]]] = []
    with contextlib.ExitStack() as stack:
        if folder is None:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ablate-estimate-")))
        else:
            (tmp := Path(folder)).mkdir(parents=True, exist_ok=True)
        # The worker's checkpoints (none without training; a WSD replicate's kept-checkpoint note) go there too.
        stack.enter_context(_environ("ABLATE_CHECKPOINT_DIR", str(tmp / "checkpoints")))
        stores = Stores(f"sqlite:///{tmp}/optuna.db", f"sqlite:///{tmp}/mlflow.db", (tmp / "art").as_uri())
        start = time.perf_counter()
        study, _ = st.prepare(spec, sample, stores)  # the parent run: the worker's, below, as in a run
        queued = (time.perf_counter() - start) * max(1.0, len(items) / max(1, len(sample)))
        # A worker's loop (runner.worker.work, as `ablate worker` runs it) over two items: the
        # second's cycle, from the first's end to its own, is one trial's bookkeeping.
        ends: list[float] = []

        def emit(event: str, info: dict[str, Any]) -> None:
            events.append((event, info))
            if event == "complete":
                ends.append(time.perf_counter())

        start = time.perf_counter()
        outcomes = worker.work(spec.name, stores, "cpu", emit, wait_for_running=False, checkpoint_every=0,
                               max_items=min(2, len(sample)), train=train)
        if set(outcomes) != {"complete"}:
            raise RuntimeError(f"measuring a trial's bookkeeping: the worker's outcomes were {outcomes} "
                               f"({events[-1][1].get('message', '') if events else ''})")
        cycle = ends[-1] - (ends[-2] if len(ends) > 1 else start)
    return Overheads(queued, imports, cycle)


@contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    """The environment variable ``name`` set to ``value`` for the block, then as it was."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def schedule(items: list[Item], seconds: list[float], workers: int, follows: list[int | None] | None = None) -> float:
    """The wall time of running ``items`` (``seconds`` each) with ``workers`` workers as the queue
    does: the oldest claimable item goes to whichever worker is free first, and a tuned cell's
    replicates are claimable only once all of its tuning items are finished. ``follows[k]``, when
    given and not None, is the run that run ``k`` extends (until converged): ``k`` is queued when
    that one ends, behind what is queued by then."""
    free = [0.0] * max(1, workers)
    tuning_left = Counter(i.cell.id for i in items if i.phase == "tune")
    tuning_ends: list[tuple[float, str]] = []  # (end, cell id) of tuning items started
    after = follows or [None] * len(items)
    pending = [k for k in range(len(items)) if after[k] is None]
    later = [k for k in range(len(items)) if after[k] is not None]  # extensions not queued yet
    ends: dict[int, float] = {}
    while pending or later:
        w = min(range(len(free)), key=free.__getitem__)
        now = free[w]
        while tuning_ends and tuning_ends[0][0] <= now:
            tuning_left[heapq.heappop(tuning_ends)[1]] -= 1
        due = sorted((ends[after[k]], k) for k in later if after[k] in ends and ends[after[k]] <= now)
        for _, k in due:
            later.remove(k)
            pending.append(k)
        pick = next((k for k in pending if not (items[k].phase == "replicate" and items[k].tune
                                                 and tuning_left[items[k].cell.id])), None)
        if pick is None:  # what is left waits for tuning, or for the run it extends, on other workers
            next_at = [e for e, _ in tuning_ends[:1]] + [ends[after[k]] for k in later if after[k] in ends]
            if not next_at:
                raise ValueError("schedule: an extension follows a run that never runs")
            free[w] = min(next_at)
            continue
        pending.remove(pick)
        free[w] = ends[pick] = now + seconds[pick]
        if items[pick].phase == "tune":
            heapq.heappush(tuning_ends, (free[w], items[pick].cell.id))
    return max(free)


def extension_runs(plan: Plan) -> tuple[list[tuple[Item, dict[str, Any], int | None]], set[str]]:
    """The extension runs a study training until converged may still make, were every replicate
    to stay improving up to ``max_steps``: (its item, the run's config, the step it continues
    from), each item's in order; and the items whose pending trial is itself an extension (their
    declared run is finished: the first of their runs here is the one they wait for). An item
    continues from its longest finished run, or from its declared budget before one finished."""
    if not extends_runs(plan.spec.model_dump(mode="json")):
        return [], set()
    by_key = {i.key: i for i in plan.items}
    runs: list[tuple[Item, dict[str, Any], int | None]] = []
    replaced: set[str] = set()
    for e in extension_history(stored_trials(plan.spec, plan.storage), plan.items):
        item = by_key.get(e.item)
        if item is None or not e.open:
            continue
        if e.reached:
            replaced.add(e.item)
        runs += [(item, config, step) for config, step in possible_extensions(item.cell.config, e.reached or e.declared)]
    return runs, replaced


def estimate(plan: Plan, device: str = "cpu", steps: int = 5, workers: int = 1,
             threads: int | None = None, overheads: Overheads | None = None) -> Estimate:
    """Wall time of the plan's pending trials with ``workers`` local workers (``ablate run
    --workers``), from a measured dry run: each distinct model shape is timed once on ``device``
    (with ``threads`` CPU threads: what each worker of a pool gets), a run's bookkeeping is
    measured (``measure_overheads``; or given), and the trials are scheduled as the queue claims
    them. A run starts with the queueing, then each worker's start (its imports, in parallel; a
    worker started in this process, with one worker, imports once too) and first build.

    Until converged, the extensions that may still come (``extension_runs``) are priced apart, at
    most, from the same timings: each a trial of its budget training from the step it continues
    from, queued when the run it extends ends; what they add to the wall time is the schedule
    with them less the one without."""
    extensions, replaced = extension_runs(plan)
    pending = [i for i in plan.pending() if i.key not in replaced]
    start = time.perf_counter()
    timings: dict[str, ShapeTiming] = {}
    keys: list[str] = []
    kept = timing_store.load()
    context = timing_store.context(device, threads, steps)
    probes = canonical_json(plan.spec.probes.model_dump(mode="json"))
    reused = 0
    with _threads(threads):
        for config in [i.cell.config for i in pending] + [config for _, config, _ in extensions]:
            key = shape_key(config)
            if key not in timings:
                entry = f"{context}|{probes}|{key}"
                if entry in kept:
                    timings[key] = ShapeTiming(**kept[entry]["timing"])
                    reused += 1
                else:
                    timings[key] = measure(config, plan.spec.probes, device, steps)
                    kept[entry] = {"at": time.time(), "timing": dataclasses.asdict(timings[key])}
            keys.append(key)
    if not keys:
        return Estimate(0.0, 0, 0, time.perf_counter() - start, device, workers)
    if overheads is None:
        config = pending[0].cell.config if pending else extensions[0][1]
        entry = f"{context}|overheads|{probes}|{shape_key(config)}"
        if entry in kept:
            overheads = Overheads(**kept[entry]["overheads"])
        else:
            overheads = measure_overheads(plan.spec, pending or [i for i, _, _ in extensions], config,
                                          timings[keys[0]].probe_rows)
            kept[entry] = {"at": time.time(), "overheads": dataclasses.asdict(overheads)}
    timing_store.save(kept)
    branches = {key: b for c in plan.cells for key, b in c.branches.items()}

    def trained(item: Item) -> float:
        branch, steps = branches.get(item.key), int(item.cell.config["train"]["steps"])
        return 1.0 if branch is None else (steps - branch.step) / steps

    per_item = [trial_seconds(i.cell.config, plan.spec.probes, timings[k], overheads.trial, trained(i))
                for i, k in zip(pending, keys[:len(pending)], strict=True)]
    to_train = [int(config["train"]["steps"]) - (step or 0) for _, config, step in extensions]
    per_extension = [trial_seconds(config, plan.spec.probes, timings[k], overheads.trial,
                                   n / int(config["train"]["steps"]))
                     for (_, config, _), k, n in zip(extensions, keys[len(pending):], to_train, strict=True)]
    cores = os.cpu_count() or 1
    # Workers import at once; past one per core they share the cores (imports use one each).
    begin = (CLI_START_S + overheads.queue
             + overheads.imports * max(1.0, min(workers, len(pending) or len(extensions)) / cores)
             + max(t.first_use for t in timings.values()))
    total = begin + schedule(pending, per_item, workers) if pending else 0.0
    extra = 0.0
    if extensions:
        # Each extension is queued when the run before it ends: its item's pending trial, or its
        # previous extension (the first of an item whose pending trial is an extension: at once).
        where = {i.key: k for k, i in enumerate(pending)}
        follows: list[int | None] = [None] * len(pending)
        for k, (item, _, _) in enumerate(extensions):
            before = next((j for j in range(k - 1, -1, -1) if extensions[j][0].key == item.key), None)
            follows.append(len(pending) + before if before is not None else where.get(item.key))
        both = begin + schedule(pending + [i for i, _, _ in extensions], per_item + per_extension, workers, follows)
        extra = max(0.0, both - total)
    return Estimate(total, len(pending), len(timings), time.perf_counter() - start, device, workers,
                    sum(per_item), begin if pending else 0.0, len(extensions), sum(to_train), extra,
                    sum(per_extension), reused, sooner(plan.spec, pending))


def sooner(spec: Spec, pending: list[Item]) -> tuple[str, ...]:
    """What may end some of ``pending`` before their step budget, at which the estimate prices each:
    early stopping, a tuning pruner (lru_ablations' estimate priced its trials at their full 4,000
    steps, and said nothing of its patience or its median pruner)."""
    out = []
    if any(i.cell.config["train"].get("patience") for i in pending):
        out.append("early stopping (train.patience)")
    if spec.tune is not None and spec.tune.pruner != "none" and any(i.phase == "tune" for i in pending):
        out.append(f"pruning (tune.pruner: {spec.tune.pruner})")
    return tuple(out)


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


def _measured(est: Estimate) -> str:
    shapes = f"{est.shapes} model shape{'s' if est.shapes != 1 else ''}"
    if not est.reused:
        return f"measured {shapes} in {est.measured:.1f} s"
    fresh = est.shapes - est.reused
    return (f"{shapes}: {est.reused} timed by an earlier call within a day (this machine and versions), "
            f"{fresh} measured now; {est.measured:.1f} s")


def render_estimate(est: Estimate, console: Any) -> None:
    who = "one worker" if est.workers == 1 else f"{est.workers} workers"
    if not est.trials and not est.extension_runs:
        console.print("estimate: nothing pending")
        return
    if est.trials:
        console.print(f"estimated wall time of the {est.trials} pending trials on {est.device}: ~{duration(est.seconds)} "
                      f"with {who} (trials {duration(est.trial_seconds)} of one worker's time, start-up "
                      f"{duration(est.start_seconds)}); {_measured(est)}"
                      + (f"; each trial at its full budget: {' and '.join(est.sooner)} may end some sooner"
                         if est.sooner else ""), highlight=False, soft_wrap=True)
    else:
        console.print(f"estimate: no declared trial pending; on {est.device}, {_measured(est)}", highlight=False)
    if est.extension_runs:
        runs = f"{est.extension_runs} more run{'s' if est.extension_runs != 1 else ''}"
        console.print(f"extensions (until converged): at most {runs}, {est.extension_steps:,} steps to train, "
                      f"≈ {duration(est.extension_seconds)} more with {who} "
                      f"({duration(est.extension_trial_seconds)} of one worker's time)", highlight=False, soft_wrap=True)
