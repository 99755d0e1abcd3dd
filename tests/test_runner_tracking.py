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


def test_fresh_store_prints_no_table_creation(stores, capfd):
    tracking.client(stores.tracking).search_experiments()
    captured = capfd.readouterr()
    assert "Creating initial MLflow database tables" not in captured.err + captured.out
