"""MLflow, and only here: one parent run per study, one child run per trial, batched logging.

Scalar curves go to MLflow in batches (one call per 1,000 values or 30 s, whichever comes first:
single calls are ~100× slower). Dense curves (norms per layer/head/t/step) go to a Parquet artifact per run, with a
thinned copy (mean per layer and probe step) as MLflow metrics.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from ablate.stores import Stores, redact, sqlite_lock

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


def client(tracking_uri: str):
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no bars in logs and reports
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # no "View run at" per run (servers)
    from mlflow.tracking import MlflowClient

    with sqlite_lock(tracking_uri):  # a process's first client creates a fresh SQLite store's tables
        return MlflowClient(tracking_uri=tracking_uri)


def experiment_id(stores: Stores, study: str) -> str:
    mlc = client(stores.tracking)
    exp = mlc.get_experiment_by_name(study)
    if exp is not None:
        return exp.experiment_id
    try:
        return mlc.create_experiment(study, artifact_location=stores.artifacts)
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
    ) -> None:
        from mlflow.entities import Param

        self.mlc = client(stores.tracking)
        all_tags = {"ablate.role": "trial", **tags}
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        run = self.mlc.create_run(experiment_id(stores, study), run_name=name, tags=all_tags)
        self.run_id = run.info.run_id
        params: dict[str, str] = {}
        _flatten("", config, params)
        items = [Param(k, v) for k, v in params.items()]
        for i in range(0, len(items), 100):
            self.mlc.log_batch(self.run_id, params=items[i : i + 100])
        self.last_step = 0
        self._pending: list[tuple[int, str, float, int]] = []  # step, name, value, time (ms)
        self._history: list[tuple[int, str, float, int]] = []
        self._curves: list[Any] = []  # polars frames of ablate.probes.CURVE_SCHEMA
        self._thinned = 0  # how many of them have had their thinned copy logged
        self._flushed = time.monotonic()

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        self.last_step = max(self.last_step, step)
        self._add(step, values)
        if len(self._pending) >= BATCH or time.monotonic() - self._flushed > FLUSH_S:
            self.flush()

    def _add(self, step: int, values: dict[str, float]) -> None:
        now = int(time.time() * 1000)
        rows = [(step, k, float(v), now) for k, v in values.items()]  # MLflow's Metric objects at flush
        self._pending += rows
        self._history += rows

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

    def flush(self) -> None:
        self._flushed = time.monotonic()
        if self._thinned < len(self._curves):
            frames, self._thinned = self._curves[self._thinned :], len(self._curves)
            for step, values in sorted(self._thin(frames).items()):
                self._add(step, values)
        from mlflow.entities import Metric

        metrics = [Metric(name, value, now, step) for step, name, value, now in self._pending]
        for i in range(0, len(metrics), BATCH):
            # Synchronous: MLflow's background logging saved nothing here (its shutdown at the end of
            # every run waited about as long as the writes take) and would lose writes on a kill.
            self.mlc.log_batch(self.run_id, metrics=metrics[i : i + BATCH])
        self._pending = []

    def log_params(self, values: dict[str, Any]) -> None:
        """Log a few parameters known only at the end (e.g. whether the trial converged)."""
        from mlflow.entities import Param

        if values:
            self.mlc.log_batch(self.run_id, params=[Param(k, str(v)[:500]) for k, v in values.items()])

    def finish(self, status: str, summary: dict[str, float], tags: dict[str, str] | None = None) -> None:
        """Flush everything, write the curves artifact, and end the run (FINISHED/FAILED/KILLED)."""
        from mlflow.entities import Metric, RunTag

        self.flush()
        now = int(time.time() * 1000)
        self.mlc.log_batch(
            self.run_id,
            metrics=[Metric(f"final/{k}", float(v), now, 0) for k, v in summary.items()],
            tags=[RunTag(k, str(v)[:5000]) for k, v in (tags or {}).items()],
        )
        import polars as pl

        with tempfile.TemporaryDirectory() as tmp:
            curves = pl.concat(self._curves, how="diagonal_relaxed") if self._curves else None
            history = pl.DataFrame([r[:3] for r in self._history], schema=["step", "name", "value"], orient="row")
            for name, rows in ((CURVES_ARTIFACT, curves), (METRICS_ARTIFACT, history)):
                if rows is not None and rows.height:
                    path = Path(tmp) / name
                    rows.write_parquet(path)
                    self.mlc.log_artifact(self.run_id, str(path))
        self.mlc.set_terminated(self.run_id, status)


def terminate(tracking_uri: str, run_id: str, status: str, reason: str = "") -> None:
    """End a run another process left open (e.g. a killed worker's)."""
    mlc = client(tracking_uri)
    run = mlc.get_run(run_id)
    if run.info.status == "RUNNING":
        if reason:
            mlc.set_tag(run_id, "ablate.failure", reason)
        mlc.set_terminated(run_id, status)


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


def read_parquet_artifact(tracking_uri: str, run_id: str, name: str):
    """A run's Parquet artifact as a polars frame, or None when the run has none."""
    import polars as pl

    mlc = client(tracking_uri)
    if name not in {f.path for f in mlc.list_artifacts(run_id)}:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        return pl.read_parquet(mlc.download_artifacts(run_id, name, tmp))
