"""MLflow as the UI shows a trial's run (ablate.runner.tracking): one param per setting, level
labels and fingerprints as tags, per-layer norm summaries as metrics — on a local SQLite store."""

from __future__ import annotations

import polars as pl
import pytest

from ablate.runner import tracking
from ablate.stores import Stores

CONFIG = {
    "task": {"name": "listops", "max_length": 40},
    "model": {"heads": 4, "parameterisation": "rotation", "init": {"scheme": "ring", "r_min": 0.9}},
    "train": {"steps": 8, "lr": 0.003},
}
# A path factor, a labelled level on a path, a factor setting a whole mapping, a named factor.
LEVELS = {"model.heads": "4", "model.parameterisation": "RotRNN", "model.init": "wide_ring", "variant": "A"}


@pytest.fixture
def stores(tmp_path) -> Stores:
    return Stores(storage=f"sqlite:///{tmp_path / 'optuna.db'}", tracking=f"sqlite:///{tmp_path / 'mlflow.db'}",
                  artifacts=(tmp_path / "mlartifacts").as_uri())


def probe_rows(step: int, layers: int = 2, heads: int = 2, length: int = 3) -> pl.DataFrame:
    """Rows of ablate.probes.CURVE_SCHEMA as a probe writes them: dense norm_sq and its summaries."""
    from ablate.probes import CURVE_SCHEMA

    rows = []
    for layer in range(layers):
        for head in range(heads):
            values = [float(step + layer * 10 + head + t) for t in range(length)]
            rows += [{"step": step, "layer": layer, "head": head, "t": t, "value": v, "kind": "probe",
                      "quantity": "norm_sq"} for t, v in enumerate(values)]
            rows.append({"step": step, "layer": layer, "head": head, "t": -1, "value": sum(values) / length,
                         "kind": "probe", "quantity": "norm_sq_mean"})
    return pl.DataFrame(rows, schema=CURVE_SCHEMA)


def test_run_params_one_name_per_setting():
    params = tracking.run_params(CONFIG, LEVELS)
    assert params["model.heads"] == "4" and params["model.parameterisation"] == "rotation"
    assert params["model.init.r_min"] == "0.9"
    # Factors that are not a setting themselves appear once, under their own name, as the label.
    assert params["model.init"] == "wide_ring" and params["variant"] == "A"
    assert not any(k.startswith("settings.") for k in params)
    assert tracking.level_tags(LEVELS)["ablate.level.model.parameterisation"] == "RotRNN"


def test_trial_run_in_mlflow(stores):
    from mlflow.tracking import MlflowClient

    run = tracking.TrialRun(stores, "trk", None, "A · seed 0", CONFIG, {"ablate.seed": "0"}, levels=LEVELS)
    run.log_metrics(0, {"probe/batch_fingerprint": 0.125, "probe/white_noise_fingerprint": 0.5})
    for step in (0, 4, 8):
        run.log_curves(probe_rows(step))
    run.log_metrics(4, {"train/loss": 2.0, "val/accuracy": 0.25, "val/loss": 1.5})
    assert run.progress() == {"step": 4, "last_val": {"accuracy": 0.25, "loss": 1.5, "step": 4}}
    run.log_metrics(8, {"val/accuracy": 0.5, "chance": 0.125})
    assert "ended" not in run.progress()
    run.log_metrics(8, {"test/accuracy": 0.4})  # its final metrics: a fused replicate may wait for its group
    assert run.progress()["ended"] is True
    run.finish("FINISHED", {"val_accuracy": 0.5, "test_accuracy": 0.4, "chance": 0.125})

    mlc = MlflowClient(stores.tracking)
    data = mlc.get_run(run.run_id).data
    assert set(data.params) == set(tracking.run_params(CONFIG, LEVELS))
    assert data.tags["ablate.level.model.heads"] == "4" and data.tags["ablate.level.variant"] == "A"
    # What identifies the inputs is a tag: the compare view never opens on a hash or a constant.
    assert data.tags["ablate.probe.batch_fingerprint"] == "0.125"
    assert data.tags["ablate.probe.white_noise_fingerprint"] == "0.5"
    assert data.tags["ablate.chance"] == "0.125"
    assert not {"probe/batch_fingerprint", "probe/white_noise_fingerprint", "chance", "final/chance"} & set(data.metrics)
    assert sorted(data.metrics)[0] == "final/test_accuracy"
    # MLflow 3's UI opens the experiment in its model-training view (runs, params, charts).
    assert mlc.get_experiment_by_name("trk").tags["mlflow.experimentKind"] == "custom_model_development"
    # Per layer, per probe step: the head mean of mean-over-t ‖x‖² on the probe batch, charted by MLflow.
    for layer in (0, 1):
        history = mlc.get_metric_history(run.run_id, f"state_norm/layer{layer}")
        assert [m.step for m in history] == [0, 4, 8]
        expected = [probe_rows(s).filter((pl.col("layer") == layer) & (pl.col("quantity") == "norm_sq_mean"))
                    ["value"].mean() for s in (0, 4, 8)]
        assert [m.value for m in history] == pytest.approx(expected)
    # The results API's copy keeps every scalar, the fingerprints included (old and new runs alike).
    logged = tracking.read_parquet_artifact(stores.tracking, run.run_id, tracking.METRICS_ARTIFACT)
    assert {"probe/batch_fingerprint", "chance", "train/loss", "state_norm/layer1"} <= set(logged["name"])


def test_a_run_ends_with_its_late_params_and_tags_set(stores):
    from mlflow.tracking import MlflowClient

    run = tracking.TrialRun(stores, "trk-end", None, "A · seed 0", CONFIG, {}, levels=LEVELS)
    run.write({"val_accuracy": 0.5}, {"ablate.committed": "false"})
    run.end("FINISHED", {"ablate.committed": "true"}, {"converged": True, "best_step": 8})
    got = MlflowClient(stores.tracking).get_run(run.run_id)
    assert got.info.status == "FINISHED" and got.data.tags["ablate.committed"] == "true"
    assert (got.data.params["converged"], got.data.params["best_step"]) == ("True", "8")


def test_fresh_store_prints_no_table_creation(stores, capfd):
    tracking.client(stores.tracking).search_experiments()
    captured = capfd.readouterr()
    assert "Creating initial MLflow database tables" not in captured.err + captured.out


def reused_attrs(item: str, run_id: str | None, seed: int = 0) -> dict:
    """A linked trial's user attributes, as study.link writes them."""
    return {"item": item, "cell_id": "c1", "cell_label": "A", "seed": seed, "phase": "replicate",
            "settings": LEVELS, "reused_from": {"study": "src", "number": 0, "item": item},
            "mlflow_run_id": run_id}


def test_reused_items_get_one_light_run_each_under_the_parent(stores):
    from mlflow.tracking import MlflowClient

    trained = tracking.TrialRun(stores, "src", None, "A · seed 0", CONFIG,
                                {"ablate.cell_id": "c1", "ablate.seed": "0", "ablate.trial_number": "0",
                                 "ablate.worker": "host:1", "ablate.git_commit": "abc"}, levels=LEVELS)
    trained.log_metrics(8, {"val/accuracy": 0.5})
    trained.finish("FINISHED", {"val_accuracy": 0.5, "test_accuracy": 0.4})
    parent = tracking.start_parent_run(stores, "dst", "{}", "h")
    trials = [(3, False, reused_attrs("c1/replicate/0", trained.run_id)),
              (4, False, {"item": "c2/replicate/0", "cell_id": "c2"}),  # trained here: not a light run
              (5, True, reused_attrs("c1/replicate/1", "gone", seed=1))]  # diverged; its run cannot be read
    assert tracking.log_reused(stores, "dst", parent, trials) == 2
    assert tracking.log_reused(stores, "dst", parent, trials) == 0  # idempotent

    mlc = MlflowClient(stores.tracking)
    runs = mlc.search_runs([mlc.get_experiment_by_name("dst").experiment_id])
    light = {r.data.tags["ablate.item"]: r for r in runs if r.data.tags.get("ablate.role") == "reused"}
    assert set(light) == {"c1/replicate/0", "c1/replicate/1"} and len(runs) == 3  # two light runs + the parent
    run, source = light["c1/replicate/0"], mlc.get_run(trained.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "A · seed 0 (reused)"
    assert run.data.tags["mlflow.parentRunId"] == parent
    assert run.data.params == source.data.params
    assert run.data.metrics == {"final/val_accuracy": 0.5, "final/test_accuracy": 0.4}
    tags = run.data.tags
    assert (tags["ablate.reused_from"], tags["ablate.source_run_id"]) == ("src", trained.run_id)
    assert (tags["ablate.cell_id"], tags["ablate.seed"], tags["ablate.phase"], tags["ablate.trial_number"]) == (
        "c1", "0", "replicate", "3")
    assert tags["ablate.level.variant"] == "A" and tags["ablate.git_commit"] == "abc"  # provenance copied
    assert "ablate.worker" not in tags and f"runs/{trained.run_id}" in tags["mlflow.note.content"]
    assert (run.info.start_time, run.info.end_time) == (source.info.start_time, source.info.end_time)
    lost = light["c1/replicate/1"]
    assert lost.info.status == "FAILED" and not lost.data.params and "cannot be read" in lost.data.tags[
        "mlflow.note.content"]
    assert mlc.get_run(parent).data.tags["ablate.reused_items"] == "2"
    assert mlc.get_run(parent).data.tags["ablate.reused_from"] == "src"


def test_a_light_run_cut_short_is_made_again(stores):
    from mlflow.tracking import MlflowClient

    parent = tracking.start_parent_run(stores, "dst", "{}", "h")
    mlc = MlflowClient(stores.tracking)
    cut = mlc.create_run(tracking.experiment_id(stores, "dst"),  # a kill right after its creation
                         tags={"ablate.role": tracking.REUSED_ROLE, "ablate.item": "c1/replicate/0"})
    assert tracking.log_reused(stores, "dst", parent, [(3, False, reused_attrs("c1/replicate/0", None))]) == 1
    assert mlc.get_run(cut.info.run_id).info.lifecycle_stage == "deleted"
    runs = mlc.search_runs([mlc.get_experiment_by_name("dst").experiment_id])
    assert sorted(r.info.status for r in runs) == ["FINISHED", "RUNNING"]  # the light run, and the open parent


def test_a_process_takes_the_store_lock_only_for_its_first_client(stores, tmp_path):
    """A process's first client builds the store under the lock beside a SQLite file; its later
    clients (every trial's run, every settling) do not wait on that lock, which another worker
    holds for as long as it builds its own store: here held by another process for good."""
    import subprocess
    import sys
    import threading

    tracking.client(stores.tracking)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from filelock import FileLock; lock = FileLock(sys.argv[1]); lock.acquire(); "
                               "print('held', flush=True); time.sleep(600)", f"{tmp_path / 'mlflow.db'}.lock"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        got = []
        later = threading.Thread(target=lambda: got.append(tracking.client(stores.tracking)), daemon=True)
        later.start()
        later.join(60)
        assert got and got[0].search_experiments() is not None  # returned, and the client works
    finally:
        holder.kill()
        holder.wait()


def _schema(path) -> tuple:
    import sqlite3

    with sqlite3.connect(path) as db:
        tables = db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()
        version = db.execute("SELECT version_num FROM alembic_version").fetchall()
        experiments = db.execute("SELECT experiment_id, name FROM experiments").fetchall()
    return tables, version, experiments


def test_a_fresh_store_is_a_copy_of_the_first_one_mlflow_built(tmp_path, monkeypatch):
    """MLflow's migrations run once per MLflow version; every later fresh store is a copy of that
    first build (the same schema, the same default experiment) and records runs as one built fresh."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    template = tracking.store_template()
    assert not template.exists()
    first = tmp_path / "a" / "mlflow.db"
    first.parent.mkdir()
    tracking.client(f"sqlite:///{first}")
    assert template.is_file() and _schema(template) == _schema(first)
    second = tmp_path / "b" / "mlflow.db"
    second.parent.mkdir()
    mlc = tracking.client(f"sqlite:///{second}")
    assert _schema(second) == _schema(first)
    run = mlc.create_run(mlc.create_experiment("x"))
    mlc.log_metric(run.info.run_id, "m", 1.5)
    assert mlc.get_run(run.info.run_id).data.metrics == {"m": 1.5}


def test_a_damaged_template_is_dropped_and_the_store_built_by_mlflow(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    template = tracking.store_template()
    template.parent.mkdir(parents=True)
    template.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)  # a truncated file
    store = tmp_path / "s" / "mlflow.db"
    store.parent.mkdir()
    mlc = tracking.client(f"sqlite:///{store}")
    assert mlc.search_experiments()[0].name == "Default"
    assert _schema(store)[1]  # migrated to a schema version by MLflow itself
    assert _schema(template) == _schema(store)  # rebuilt from this store


def test_artifacts_of_a_local_store_read_without_mlflow_are_what_mlflow_reads(stores, tmp_path):
    # results.load reads a local store's artifacts with sqlite3 and polars (MLflow's import and
    # store set-up were most of a report's load): the same frames, the same None for a run without
    # the artifact, an error for a run the store does not have, and the same for a deleted run.
    mlc = tracking.client(stores.tracking)
    exp = tracking.experiment_id(stores, "arts")
    ids = []
    for k in range(3):
        run = mlc.create_run(exp)
        if k < 2:
            frame = pl.DataFrame({"step": [1, 2], "value": [0.5 + k, 0.25]})
            path = tmp_path / f"m{k}" / tracking.METRICS_ARTIFACT
            path.parent.mkdir()
            frame.write_parquet(path)
            mlc.log_artifact(run.info.run_id, str(path))
        ids.append(run.info.run_id)
    mlc.delete_run(ids[1])
    asked = [*ids, "0" * 32]
    assert tracking._local_artifact_folders(stores.tracking, asked) is not None  # the fast path is taken
    fast = tracking.read_parquet_artifacts(stores.tracking, asked, tracking.METRICS_ARTIFACT)
    for run_id in ids:
        slow = tracking.read_parquet_artifact(stores.tracking, run_id, tracking.METRICS_ARTIFACT, mlc)
        assert (fast[run_id] is None and slow is None) or fast[run_id].equals(slow)
    assert fast[ids[0]]["value"].to_list() == [0.5, 0.25] and fast[ids[2]] is None
    assert isinstance(fast["0" * 32], Exception)
    with pytest.raises(Exception, match="not found"):
        tracking.read_parquet_artifact(stores.tracking, "0" * 32, tracking.METRICS_ARTIFACT, mlc)
    # A store MLflow must read (not SQLite, or artifacts not in local folders): MLflow reads it.
    assert tracking._local_artifact_folders("http://127.0.0.1:9/", ids) is None
