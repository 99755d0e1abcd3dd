"""MLflow, and only here: one parent run per study, one child run per trial, batched logging.

What a trial's run holds, as the MLflow UI shows it:

- params: the resolved config, one param per setting under its dotted path (``model.heads``);
  a factor that is not itself a setting (a named factor such as ``variant``, or one setting a
  whole mapping such as ``model.init``) adds one param under its name holding the level's label;
- tags: every factor's level label as ``ablate.level.<factor>``, the cell, seed, phase, trial
  number, worker and provenance, and the values that identify rather than measure (``AS_TAGS``:
  the probe inputs' fingerprints, the task's chance level);
- metrics: scalar curves (``train/…``, ``val/…``, ``test/…``), the per-layer summaries of the
  probes (``THIN``: the head mean of ‖x‖² over the probe batch per layer and probe step, …), and
  ``final/…`` at the end.

An item a study reused from another (its Optuna trial links the source's run by
``mlflow_run_id``) is a *light run* in the reusing study's experiment, nested under its parent
run like a trained one (``log_reused``): the source run's params, ``final/…`` metrics and
provenance tags, the item's own cell, seed and level tags, ``ablate.reused_from`` (the study that
trained it) and ``ablate.source_run_id``; no curves (the results API reads the source run's). So
the experiment lists every cell of the study, and its parent run counts the reused items.

Scalar curves go to MLflow in batches (one call per 1,000 values or 30 s, whichever comes first:
single calls are ~100× slower). Dense curves (norms per layer/head/t/step) go to a Parquet
artifact per run (``CURVES_ARTIFACT``), every scalar logged (tags of ``AS_TAGS`` included) to
another (``METRICS_ARTIFACT``): what the results API reads.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.stores import Stores, from_template, redact, sqlite_lock, sqlite_path, user_cache

BATCH = 1000
FLUSH_S = 30.0  # at most this long between flushes, so the MLflow UI follows a running trial
CURVES_ARTIFACT = "curves.parquet"  # step, layer, head, t, value, kind, quantity (ablate.probes)
# Thinned copy as MLflow metrics: (kind, quantity) of per-layer summary rows → metric prefix.
THIN = {
    ("probe", "norm_sq_mean"): "state_norm",
    ("white_noise", "norm_sq_mean"): "white_noise_state_norm",
    ("theory", "norm_sq_mean"): "theory_state_norm",
    ("spectrum", "head_decay"): "head_decay",
}
METRICS_ARTIFACT = "metrics.parquet"  # step, name, value: every scalar logged, for the results API
# Scalars that identify a run's inputs rather than measure it: MLflow tags (charting a hash, or a
# constant, as a metric only clutters the compare view), still rows of METRICS_ARTIFACT.
AS_TAGS = {
    "probe/batch_fingerprint": "ablate.probe.batch_fingerprint",
    "probe/white_noise_fingerprint": "ablate.probe.white_noise_fingerprint",
    "chance": "ablate.chance",
}
LEVEL_TAG = "ablate.level."  # + factor name: the level's label
REUSED_ROLE = "reused"  # ``ablate.role`` of a light run (a reused item); trained runs are "trial"
# A source run's tags a light run does not copy: its role, and what belongs to the training attempt.
NOT_COPIED = ("ablate.role", "ablate.trial_number", "ablate.worker", "ablate.committed")
# MLflow's usage telemetry calls a server at start-up and waits on it at exit: no network at run time.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# MLflow logs each database error with its traceback before raising it; the worker records the
# error it raises by kind (infrastructure) and prints one line: no traceback on the terminal.
logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


def client(tracking_uri: str, read_only: bool = False):
    """An MlflowClient. ``read_only``: for reading an existing store (results, reports): no lock
    file is written, and a missing SQLite store is an error (FileNotFoundError) instead of a new,
    empty one."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no bars in logs and reports
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # no "View run at" per run (servers)
    from mlflow.tracking import MlflowClient

    # A fresh SQLite store announces its table creation and migrations at INFO on stderr: noise in
    # every terminal and worker log, and nothing a user acts on. Its database errors are raised
    # to us too, and reported by kind (above): CRITICAL keeps both off the terminal.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    logging.getLogger("alembic").setLevel(logging.WARNING)

    if read_only:
        path = sqlite_path(tracking_uri)
        if path is not None and not path.is_file():
            raise FileNotFoundError(f"the tracking store {path} is missing")
        return MlflowClient(tracking_uri=tracking_uri)
    if tracking_uri in _BUILT:
        return MlflowClient(tracking_uri=tracking_uri)
    # A process's first client creates a fresh SQLite store's tables, from the template if there is one.
    with sqlite_lock(tracking_uri), from_template(sqlite_path(tracking_uri), store_template()):
        mlc = MlflowClient(tracking_uri=tracking_uri)
    _BUILT.add(tracking_uri)
    return mlc


def store_template() -> Path:
    """An empty SQLite tracking store as this MLflow version builds it, kept in the user's cache.

    MLflow builds a fresh SQLite store by running every Alembic migration since its first schema
    (about 4 s of CPU, most of a fresh study's start-up); a copy of the first store it built is
    the same database in milliseconds. MLflow builds it itself, so the schema is exactly MLflow's;
    the version in the name keeps an upgraded MLflow from reusing an older schema."""
    from mlflow.version import VERSION

    return user_cache() / "stores" / f"mlflow-{VERSION}.db"


# The tracking URIs whose store this process has built (MLflow keeps it): its later clients do not
# wait on the lock, which another worker holds for as long as it builds its own store (about half
# a second at start-up, paid by this worker's first trial: benchmarks/bench_idle.py).
_BUILT: set[str] = set()


# MLflow 3's UI opens an experiment in its GenAI view unless the experiment says it holds model
# training: runs, params and metric charts are what a study's experiment has.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def experiment_id(stores: Stores, study: str) -> str:
    mlc = client(stores.tracking)
    exp = mlc.get_experiment_by_name(study)
    if exp is not None:
        if not all(exp.tags.get(k) == v for k, v in EXPERIMENT_KIND.items()):  # made by an earlier version
            for key, value in EXPERIMENT_KIND.items():
                mlc.set_experiment_tag(exp.experiment_id, key, value)
        return exp.experiment_id
    try:
        return mlc.create_experiment(study, artifact_location=stores.artifacts, tags=EXPERIMENT_KIND)
    except Exception:  # another worker created it between our two calls
        exp = mlc.get_experiment_by_name(study)
        if exp is None:
            raise
        return exp.experiment_id


def start_parent_run(stores: Stores, study: str, spec_json: str, spec_hash: str) -> str:
    mlc = client(stores.tracking)
    run = mlc.create_run(
        experiment_id(stores, study),
        run_name=study,
        tags={"ablate.role": "study", "ablate.spec_hash": spec_hash, "ablate.storage": redact(stores.storage)},
    )
    mlc.log_text(run.info.run_id, spec_json, "spec.json")
    return run.info.run_id


def _flatten(prefix: str, data: Any, out: dict[str, str]) -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), value, out)
    else:
        out[prefix] = str(data)[:500]


def run_params(config: dict[str, Any], levels: dict[str, str] | None = None) -> dict[str, str]:
    """A trial run's params: one per setting of ``config`` under its dotted path, and one per
    factor of ``levels`` (factor → label) that is not a setting itself (a named factor, or one
    that sets a whole mapping), holding the label. No setting appears under two names."""
    params: dict[str, str] = {}
    _flatten("", config, params)
    for name, label in (levels or {}).items():
        if name not in params:
            params[name] = str(label)[:500]
    return params


def level_tags(levels: dict[str, str] | None) -> dict[str, str]:
    """Every factor's level label as a tag (``ablate.level.<factor>``), for search_runs filters."""
    return {f"{LEVEL_TAG}{name}": str(label)[:5000] for name, label in (levels or {}).items()}


class TrialRun:
    """The MLflow child run of one trial; implements training's Reporter protocol."""

    def __init__(
        self,
        stores: Stores,
        study: str,
        parent_run_id: str | None,
        name: str,
        config: dict[str, Any],
        tags: dict[str, str],
        levels: dict[str, str] | None = None,
    ) -> None:
        from mlflow.entities import Param

        self.mlc = client(stores.tracking)
        all_tags = {"ablate.role": "trial", **level_tags(levels), **tags}
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        run = self.mlc.create_run(experiment_id(stores, study), run_name=name, tags=all_tags)
        self.run_id = run.info.run_id
        items = [Param(k, v) for k, v in run_params(config, levels).items()]
        for i in range(0, len(items), 100):
            self.mlc.log_batch(self.run_id, params=items[i : i + 100])
        self.last_step = 0
        self.last_val: dict[str, float] = {}  # the latest validation metrics, and their step
        self.ended = False  # its final metrics came: a fused replicate stopped early waits for its group
        self._tags: dict[str, str] = {}  # AS_TAGS values not yet sent
        self._pending: list[tuple[int, str, float, int]] = []  # step, name, value, time (ms)
        self._history: list[tuple[int, str, float, int]] = []
        self._curves: list[Any] = []  # polars frames of ablate.probes.CURVE_SCHEMA
        self._thinned = 0  # how many of them have had their thinned copy logged
        self._flushed = time.monotonic()

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        self.last_step = max(self.last_step, step)
        val = {k.removeprefix("val/"): float(v) for k, v in values.items() if k.startswith("val/")}
        if val:
            self.last_val = {**val, "step": step}
        self.ended = self.ended or any(k.startswith("test/") for k in values)
        self._add(step, values)
        if len(self._pending) >= BATCH or time.monotonic() - self._flushed > FLUSH_S:
            self.flush()

    def progress(self) -> dict[str, Any]:
        """Where training is: the last step reported and the last validation metrics (what a
        heartbeat records for the live view)."""
        out: dict[str, Any] = {"step": self.last_step}
        if self.last_val:
            out["last_val"] = dict(self.last_val)
        if self.ended:
            out["ended"] = True
        return out

    def _add(self, step: int, values: dict[str, float]) -> None:
        now = int(time.time() * 1000)
        rows = [(step, k, float(v), now) for k, v in values.items()]  # MLflow's Metric objects at flush
        self._history += rows
        for row in rows:
            if row[1] in AS_TAGS:
                self._tags[AS_TAGS[row[1]]] = repr(row[2])
            else:
                self._pending.append(row)

    def log_curves(self, rows: Any) -> None:
        """Keep dense rows (a polars frame, or a list of dicts) for the artifact; their thinned copy
        goes to MLflow at the next flush (thinning per call would cost more than the probe)."""
        import polars as pl

        frame = rows if isinstance(rows, pl.DataFrame) else pl.DataFrame(rows)
        if frame.height:
            self._curves.append(frame)

    def _thin(self, frames: list[Any]) -> dict[int, dict[str, float]]:
        """Per step: per layer the head mean of each ``THIN`` summary, and the gradient norm of each group."""
        import polars as pl

        frame = pl.concat(frames, how="diagonal_relaxed")
        if "quantity" not in frame.columns:  # rows of the old schema: every row a probe norm
            frame = frame.with_columns(pl.lit("norm_sq_mean").alias("quantity"))
        thin = (frame.filter(pl.struct("kind", "quantity").is_in([{"kind": k, "quantity": q} for k, q in THIN]))
                .group_by("kind", "quantity", "step", "layer").agg(pl.col("value").mean()))
        by_step: dict[int, dict[str, float]] = defaultdict(dict)
        for kind, quantity, step, layer, value in thin.sort("step", "layer").iter_rows():
            by_step[step][f"{THIN[(kind, quantity)]}/layer{layer}"] = value
        grads = frame.filter((pl.col("kind") == "grad") & (pl.col("layer") == -1))
        for step, quantity, value in grads.select("step", "quantity", "value").iter_rows():
            by_step[step][f"grad_norm/{quantity}"] = value
        return by_step

    def flush(self, metrics: Sequence[Any] = (), tags: Sequence[Any] = ()) -> None:
        """Send what is pending, with ``metrics`` and ``tags`` (MLflow entities) in the same calls:
        each ``log_batch`` costs ~10 ms of SQLAlchemy whatever it carries, and a fused worker pays it
        for every item in turn."""
        self._flushed = time.monotonic()
        if self._thinned < len(self._curves):
            frames, self._thinned = self._curves[self._thinned :], len(self._curves)
            for step, values in sorted(self._thin(frames).items()):
                self._add(step, values)
        from mlflow.entities import Metric, RunTag

        metrics = [Metric(name, value, now, step) for step, name, value, now in self._pending] + list(metrics)
        tags = [RunTag(k, v) for k, v in self._tags.items()] + list(tags)
        for i in range(0, max(len(metrics), 1 if tags else 0), BATCH):
            # Synchronous: MLflow's background logging saved nothing here (its shutdown at the end of
            # every run waited about as long as the writes take) and would lose writes on a kill.
            self.mlc.log_batch(self.run_id, metrics=metrics[i : i + BATCH], tags=tags if i == 0 else [])
        self._pending, self._tags = [], {}

    def finish(self, status: str, summary: dict[str, float], tags: dict[str, str] | None = None) -> None:
        """Flush everything, write the curves artifact, and end the run (FINISHED/FAILED/KILLED)."""
        self.write(summary, tags)
        self.end(status)

    def end(self, status: str, tags: dict[str, str] | None = None, params: dict[str, Any] | None = None) -> None:
        """End the run (FINISHED/FAILED/KILLED), setting ``tags`` and ``params`` (those known only
        at the end, such as whether the trial converged) first, in one call: this sits between a
        worker's trials."""
        if tags or params:
            from mlflow.entities import Param, RunTag

            self.mlc.log_batch(self.run_id, params=[Param(k, str(v)[:500]) for k, v in (params or {}).items()],
                               tags=[RunTag(k, str(v)[:5000]) for k, v in (tags or {}).items()])
        self.mlc.set_terminated(self.run_id, status)

    def write(self, summary: dict[str, float], tags: dict[str, str] | None = None) -> None:
        """Flush everything, log the ``final/`` metrics and ``tags``, write the curves and metrics
        artifacts; the run stays RUNNING (``end``) until the trial is recorded in Optuna."""
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        self.flush([Metric(f"final/{k}", float(v), now, 0) for k, v in summary.items() if k not in AS_TAGS],
                   [RunTag(k, str(v)[:5000]) for k, v in (tags or {}).items()])
        import polars as pl

        with tempfile.TemporaryDirectory() as tmp:
            curves = pl.concat(self._curves, how="diagonal_relaxed") if self._curves else None
            history = pl.DataFrame([r[:3] for r in self._history], schema=["step", "name", "value"], orient="row")
            for name, rows in ((CURVES_ARTIFACT, curves), (METRICS_ARTIFACT, history)):
                if rows is not None and rows.height:
                    path = Path(tmp) / name
                    rows.write_parquet(path)
                    self.mlc.log_artifact(self.run_id, str(path))


def terminate(tracking_uri: str, run_id: str, status: str, reason: str = "",
              tags: dict[str, str] | None = None) -> None:
    """End a run another process left open (e.g. a killed worker's), if it is still RUNNING."""
    from mlflow.entities import RunTag

    mlc = client(tracking_uri)
    run = mlc.get_run(run_id)
    if run.info.status == "RUNNING":
        tags = {**({"ablate.failure": reason} if reason else {}), **(tags or {})}
        if tags:
            mlc.log_batch(run_id, tags=[RunTag(k, str(v)[:5000]) for k, v in tags.items()])
        mlc.set_terminated(run_id, status)


def end_run(tracking_uri: str, run_id: str, status: str) -> bool:
    """Set a run's end ``status`` (a study's parent run: RUNNING, or ended otherwise before a retry
    of its failed items) unless it has it already; False too for a run the store does not hold (a
    tracking store replaced since the study began: nothing to end)."""
    mlc = client(tracking_uri)
    try:
        run = mlc.get_run(run_id)
    except Exception as exc:
        if getattr(exc, "error_code", "") == "RESOURCE_DOES_NOT_EXIST":
            return False
        raise
    if run.info.status == status:
        return False
    mlc.set_terminated(run_id, status)
    return True


@dataclass(frozen=True)
class OpenRun:
    """A RUNNING trial run, with the tags that name its trial."""

    run_id: str
    trial_number: int
    cell_id: str


def running_runs(tracking_uri: str, study: str, trial_numbers: Sequence[int] | None = None) -> list[OpenRun]:
    """The study's RUNNING trial runs (of ``trial_numbers`` only, if given)."""
    mlc = client(tracking_uri)
    exp = mlc.get_experiment_by_name(study)
    if exp is None:
        return []
    query = "tags.`ablate.role` = 'trial' and attributes.status = 'RUNNING'"
    if trial_numbers is not None and len(trial_numbers) == 1:
        query += f" and tags.`ablate.trial_number` = '{int(trial_numbers[0])}'"
    out = []
    for run in mlc.search_runs([exp.experiment_id], query, max_results=50_000):
        number = run.data.tags.get("ablate.trial_number", "")
        if number.isdigit() and (trial_numbers is None or int(number) in trial_numbers):
            out.append(OpenRun(run.info.run_id, int(number), run.data.tags.get("ablate.cell_id", "")))
    return out


def open_runs(tracking_uri: str, study: str, trial_number: int) -> list[str]:
    """Ids of the RUNNING runs of one trial (by its ``ablate.trial_number`` tag)."""
    mlc = client(tracking_uri)
    exp = mlc.get_experiment_by_name(study)
    if exp is None:
        return []
    runs = mlc.search_runs(
        [exp.experiment_id],
        f"tags.`ablate.trial_number` = '{trial_number}' and attributes.status = 'RUNNING'",
    )
    return [r.info.run_id for r in runs]


def read_parquet_artifact(tracking_uri: str, run_id: str, name: str, mlc=None):
    """A run's Parquet artifact as a polars frame, or None when the run has none (through ``mlc``,
    a client of ``tracking_uri``, when given)."""
    import polars as pl

    mlc = mlc or client(tracking_uri, read_only=True)
    if name not in {f.path for f in mlc.list_artifacts(run_id)}:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        return pl.read_parquet(mlc.download_artifacts(run_id, name, tmp))


def read_parquet_artifacts(tracking_uri: str, run_ids: list[str], name: str, workers: int = 8) -> dict:
    """Run id → its Parquet artifact ``name`` (None where it has none; the exception where the run
    cannot be read, so that one lost run does not hide the others), read through one client (a
    client per run costs a store's set-up each time) and several downloads at a time (a remote
    server answers them in parallel)."""
    from concurrent.futures import ThreadPoolExecutor

    if not run_ids:
        return {}
    folders = _local_artifact_folders(tracking_uri, run_ids)
    if folders is not None:
        return {run_id: _read_local(folders, run_id, name) for run_id in run_ids}
    try:
        mlc = client(tracking_uri, read_only=True)
    except Exception as exc:  # the whole store: every run unread, for the same reason
        return {run_id: exc for run_id in run_ids}

    def one(run_id: str) -> Any:
        try:
            return read_parquet_artifact(tracking_uri, run_id, name, mlc)
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(run_ids)))) as pool:
        return dict(zip(run_ids, pool.map(one, run_ids), strict=True))


def _local_artifact_folders(tracking_uri: str, run_ids: Sequence[str]) -> dict[str, Path] | None:
    """Run id → its artifact folder, for a SQLite tracking store whose runs keep their artifacts in
    local folders, read from MLflow's ``runs`` table (``run_uuid``, ``artifact_uri``: its schema
    since MLflow 1.0) with sqlite3; None for any other store (a server, PostgreSQL, remote
    artifacts), which MLflow reads. Reading a report's artifacts is a few tenths of a second of
    work; MLflow's import and store set-up before it were 2-4 s of CPU."""
    import sqlite3
    from urllib.parse import unquote, urlparse

    path = sqlite_path(tracking_uri)
    if path is None or not path.is_file():
        return None
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            rows = [row for i in range(0, len(run_ids), 500) for row in con.execute(
                f"SELECT run_uuid, artifact_uri FROM runs WHERE run_uuid IN ({','.join('?' * len(run_ids[i:i + 500]))})",
                list(run_ids[i:i + 500]))]
        finally:
            con.close()
    except sqlite3.Error:  # not MLflow's schema (or not readable): MLflow says what is wrong
        return None
    folders = {}
    for run_id, uri in rows:
        parsed = urlparse(uri or "")
        if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
            folders[run_id] = Path(unquote(parsed.path))
        elif parsed.scheme == "" and uri and Path(uri).is_absolute():
            folders[run_id] = Path(uri)
        else:
            return None
    return folders


def _read_local(folders: dict[str, Path], run_id: str, name: str) -> Any:
    """What ``read_parquet_artifact`` gives for one run, from its local folder."""
    import polars as pl

    if run_id not in folders:
        return LookupError(f"Run '{run_id}' not found")
    try:
        file = folders[run_id] / name
        return pl.read_parquet(file) if file.is_file() else None
    except Exception as exc:
        return exc


def experiment_runs(tracking_uri: str, study: str) -> list[tuple[str, str | None, str]]:
    """(run id, parent run id, ``ablate.role``) of every active run in the study's experiment."""
    from mlflow.entities import ViewType

    mlc = client(tracking_uri)
    exp = mlc.get_experiment_by_name(study)
    if exp is None or exp.lifecycle_stage != "active":
        return []
    runs, token = [], None
    while True:
        page = mlc.search_runs([exp.experiment_id], run_view_type=ViewType.ACTIVE_ONLY, max_results=1000,
                               page_token=token)
        runs += list(page)
        token = page.token
        if not token:
            break
    return [(r.info.run_id, r.data.tags.get("mlflow.parentRunId"), r.data.tags.get("ablate.role", "")) for r in runs]


def delete_runs(tracking_uri: str, run_ids: list[str]) -> None:
    """Delete runs (MLflow's soft delete: hidden everywhere; ``mlflow gc`` purges them and their artifacts)."""
    mlc = client(tracking_uri)
    for run_id in run_ids:
        mlc.delete_run(run_id)


def retire_experiment(tracking_uri: str, study: str, delete: bool, note: str) -> str | None:
    """Rename the study's experiment ``<study>.removed-<UTC time>`` (its name is then free for a
    new study), tag it with ``note``, and delete it when ``delete``. Returns the new name, or None
    when there is no such experiment."""
    import datetime

    mlc = client(tracking_uri)
    exp = mlc.get_experiment_by_name(study)
    if exp is None:
        return None
    name = f"{study}.removed-{datetime.datetime.now(datetime.timezone.utc):%Y%m%dT%H%M%S}"
    mlc.rename_experiment(exp.experiment_id, name)
    mlc.set_experiment_tag(exp.experiment_id, "ablate.removed", note[:5000])
    if delete:
        mlc.delete_experiment(exp.experiment_id)
    return name


# --- reused items: light runs ----------------------------------------------------------------------


@dataclass(frozen=True)
class Reused:
    """An item a study linked from another study's trial, as its light run shows it."""

    item: str  # the item key
    trial_number: int  # the linking trial's, in the reusing study
    cell_id: str
    cell_label: str
    seed: int
    phase: str
    levels: dict[str, str]  # factor → level label
    source_study: str  # the study that trained it
    source_run_id: str | None
    failed: bool  # a diverged item (its run ended FAILED)

    @classmethod
    def of(cls, number: int, failed: bool, attrs: Any) -> Reused | None:
        """From a trial's number, whether it failed, and its user attributes; None unless it is
        a link (``reused_from``)."""
        origin = attrs.get("reused_from")
        if not isinstance(origin, dict) or not attrs.get("item") or attrs.get("dropped"):
            return None
        settings = attrs.get("settings")
        return cls(str(attrs["item"]), int(number), str(attrs.get("cell_id", "")), str(attrs.get("cell_label", "")),
                   int(attrs.get("seed", -1)), str(attrs.get("phase", "")),
                   {str(k): str(v) for k, v in settings.items()} if isinstance(settings, dict) else {},
                   str(origin.get("study", "")), attrs.get("mlflow_run_id") or None, failed)


def reused_runs(tracking_uri: str, study: str) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """Item key → (run id, source study) of the study's ended light runs; and the ids of those
    left RUNNING (their writing was cut short)."""
    from mlflow.entities import ViewType

    mlc = client(tracking_uri)
    exp = mlc.get_experiment_by_name(study)
    if exp is None:
        return {}, []
    out: dict[str, tuple[str, str]] = {}
    cut: list[str] = []
    token = None
    while True:
        page = mlc.search_runs([exp.experiment_id], f"tags.`ablate.role` = '{REUSED_ROLE}'",
                               run_view_type=ViewType.ACTIVE_ONLY, max_results=1000, page_token=token)
        for run in page:
            item = run.data.tags.get("ablate.item")
            if run.info.status == "RUNNING":
                cut.append(run.info.run_id)
            elif item:
                out.setdefault(item, (run.info.run_id, run.data.tags.get("ablate.reused_from", "")))
        token = page.token
        if not token:
            return out, cut


def _batches(mlc: Any, run_id: str, params: list[Any], metrics: list[Any], tags: list[Any]) -> None:
    """``log_batch`` within MLflow's limits (100 params, 100 tags, 1,000 entities a call)."""
    while params or metrics or tags:
        mlc.log_batch(run_id, params=params[:100], metrics=metrics[:800], tags=tags[:100])
        params, metrics, tags = params[100:], metrics[800:], tags[100:]


def _light_run(mlc: Any, experiment: str, parent_run_id: str | None, item: Reused) -> str:
    from mlflow.entities import Metric, Param, RunTag

    source = None
    if item.source_run_id:
        try:
            source = mlc.get_run(item.source_run_id)
        except Exception:  # deleted or purged: the light run still names it
            source = None
    tags = {k: v for k, v in (source.data.tags.items() if source else ()) if k.startswith("ablate.")
            and k not in NOT_COPIED and not k.startswith(LEVEL_TAG)}
    tags |= {**level_tags(item.levels), "ablate.role": REUSED_ROLE, "ablate.item": item.item,
             "ablate.cell_id": item.cell_id, "ablate.seed": str(item.seed), "ablate.phase": item.phase,
             "ablate.trial_number": str(item.trial_number), "ablate.reused_from": item.source_study,
             "ablate.source_run_id": item.source_run_id or ""}
    where = (f"[its run](#/experiments/{source.info.experiment_id}/runs/{source.info.run_id})" if source
             else f"its run {item.source_run_id or '(none recorded)'}, which cannot be read")
    tags["mlflow.note.content"] = (f"Reused, not trained here: trained in study **{item.source_study}**, {where}. "
                                   "Params and final metrics are copied from it; its curves stay there.")
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    # Marked a light run from its creation: one cut short (RUNNING) is found, deleted and made again.
    first = {k: tags.pop(k) for k in ("ablate.role", "ablate.item", "mlflow.parentRunId") if k in tags}
    run = mlc.create_run(experiment, start_time=source.info.start_time if source else None,
                         run_name=f"{item.cell_label} · seed {item.seed} (reused)", tags=first)
    params = [Param(k, v) for k, v in (source.data.params.items() if source else ())]
    at = int(time.time() * 1000)
    metrics = [Metric(k, v, at, 0) for k, v in (source.data.metrics.items() if source else ()) if k.startswith("final/")]
    _batches(mlc, run.info.run_id, params, metrics, [RunTag(k, str(v)[:5000]) for k, v in tags.items()])
    mlc.set_terminated(run.info.run_id, "FAILED" if item.failed else "FINISHED",
                       end_time=source.info.end_time if source and source.info.end_time else None)
    return run.info.run_id


def log_reused(stores: Stores, study: str, parent_run_id: str | None,
               trials: Sequence[tuple[int, bool, Any]]) -> int:
    """Give each reused item among ``trials`` — (number, failed, user attributes) of a study's
    trials; the others are skipped — its light run in the study's experiment unless it has one
    (re-running adds none), and tag the parent run with how many reused items its experiment
    shows (``ablate.reused_items``) and from which studies (``ablate.reused_from``). How many
    light runs it created."""
    from mlflow.entities import RunTag

    items = [r for r in (Reused.of(*t) for t in trials) if r is not None]
    if not items:
        return 0
    have, cut = reused_runs(stores.tracking, study)
    todo = [r for r in items if r.item not in have]
    if not todo:
        return 0
    mlc = client(stores.tracking)
    for run_id in cut:
        mlc.delete_run(run_id)
    experiment = experiment_id(stores, study)
    for item in todo:
        have[item.item] = (_light_run(mlc, experiment, parent_run_id, item), item.source_study)
    if parent_run_id:
        sources = sorted({source for _, source in have.values() if source})
        mlc.log_batch(parent_run_id, tags=[RunTag("ablate.reused_items", str(len(have))),
                                           RunTag("ablate.reused_from", ", ".join(sources)[:5000])])
    return len(todo)
