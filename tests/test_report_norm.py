"""The norm-stability path from storage to report: a real (tiny) study through Optuna and MLflow, its
Parquet curves, the thinned MLflow metrics, the results frame, the analysis, and the rendered PDF."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid

import numpy as np
import pandas as pd
import polars as pl
import pytest

from ablate.report import norms

SPEC = {
    "name": "norm-e2e",
    "task": {"name": "listops", "max_depth": 3, "max_length": 24, "train_size": 120, "val_size": 32,
             "test_size": 32, "seed": 0},
    "model": {"d_model": 8, "state_dim": 8, "layers": 2, "heads": 2},
    "train": {"steps": 8, "batch_size": 8, "eval_every": 100, "log_every": 2},
    "probes": {"every": 4, "batch": 8, "white_noise_batch": 8},
    "factors": {"variant": {
        "RotRNN": {"model.parameterisation": "rotation", "model.normalisation": "xi"},
        "LRU": {"model.parameterisation": "complex_diagonal", "model.normalisation": "gamma",
                "model.init": {"scheme": "ring"}},
    }},
    "seeds": 2,
}
STEPS = [0, 4, 8]


def _run_study(root) -> None:
    """Run SPEC in-process, as ``ablate run`` does, with stores under ``root``."""
    from ablate.design import items, spec_hash, validate
    from ablate.runner import study as st
    from ablate.runner import tracking
    from ablate.runner.worker import work
    from ablate.stores import resolve

    spec = validate(SPEC)
    stores = resolve()
    opt, _ = st.prepare(spec, items(spec), stores)
    opt.set_user_attr("mlflow_parent_run_id", tracking.start_parent_run(
        stores, spec.name, json.dumps(spec.model_dump()), spec_hash(spec)))
    outcomes = work(spec.name, stores)
    assert outcomes == {"complete": 4}, outcomes


@pytest.fixture(scope="module")
def study(tmp_path_factory, request):
    """The study of SPEC, run once per test session (xdist workers share it); yields the loaded Results."""
    from filelock import FileLock

    shared = hasattr(request.config, "workerinput")  # an xdist worker: the session's workers share it
    root = tmp_path_factory.getbasetemp().parent / "norm-study" if shared else tmp_path_factory.mktemp("norm")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ABLATE_HOME", str(root / ".ablate"))
        mp.setenv("ABLATE_CACHE_DIR", str(root / "cache"))
        with FileLock(f"{root}.lock"):
            if not (root / "done").exists():
                root.mkdir(exist_ok=True)
                _run_study(root)
                (root / "done").touch()
        from ablate import results
        from ablate.stores import resolve

        yield results.load(SPEC["name"]), resolve(), root


def test_curves_artifact_has_the_schema(study):
    from ablate.probes import CURVE_SCHEMA
    from ablate.runner import tracking

    res, stores, _ = study
    for run_id in res.trials["mlflow_run_id"]:
        curves = tracking.read_parquet_artifact(stores.tracking, run_id, tracking.CURVES_ARTIFACT)
        assert dict(curves.schema) == CURVE_SCHEMA
        assert set(curves["kind"].unique()) == {"probe", "white_noise", "theory", "spectrum", "grad", "train"}
        probe = curves.filter(pl.col("kind") == "probe")
        assert sorted(probe["step"].unique()) == STEPS
        assert sorted(curves.filter(pl.col("kind") == "grad")["step"].unique()) == STEPS[1:]
        assert sorted(curves.filter(pl.col("kind") == "train")["step"].unique()) == [2, 4, 6, 8]
        dense = probe.filter(pl.col("quantity") == "norm_sq")
        assert dense.height == len(STEPS) * 2 * 2 * dense["t"].n_unique()  # steps × layers × heads × t


def test_thinned_copy_in_mlflow(study):
    from mlflow.tracking import MlflowClient

    res, stores, _ = study
    mlc = MlflowClient(stores.tracking)
    run_id = res.trials["mlflow_run_id"][0]
    for name, steps in (("state_norm/layer1", STEPS), ("white_noise_state_norm/layer0", STEPS),
                        ("theory_state_norm/layer0", STEPS), ("grad_norm/total", STEPS[1:])):
        assert [m.step for m in mlc.get_metric_history(run_id, name)] == steps, name
    curves = res.curves.filter((pl.col("kind") == "probe") & (pl.col("quantity") == "norm_sq_mean")
                               & (pl.col("layer") == 1) & (pl.col("step") == 8)
                               & (pl.col("cell_id") == res.trials["cell_id"][0]) & (pl.col("seed") == res.trials["seed"][0]))
    thinned = mlc.get_metric_history(run_id, "state_norm/layer1")[-1].value
    assert thinned == pytest.approx(curves["value"].mean())


def test_results_give_one_tidy_frame_and_one_probe_batch(study):
    res, _, _ = study
    curves = res.curves
    for col in ("cell_id", "cell_label", "seed", "variant", "step", "layer", "head", "t", "value", "kind", "quantity"):
        assert col in curves.columns
    assert curves.select("cell_id", "seed").unique().height == 4
    fp = res.metrics.filter(pl.col("name") == "probe/batch_fingerprint")
    assert fp.height == 4 and fp["value"].n_unique() == 1
    assert res.metrics.filter(pl.col("name") == "probe/white_noise_fingerprint")["value"].n_unique() == 1


def test_analysis_of_the_study(study):
    res, _, _ = study
    df = norms.prepare(res.curves, res.trials)
    order = norms.variants(df, res.trials)
    assert [label for _, label in order] == ["RotRNN", "LRU"]
    table = norms.stability_table(norms.layer_norms(df), order, n_resamples=200)
    assert table["seeds"].tolist() == [2, 2] and table["steps"].tolist() == [3, 3]
    assert (table["n_training"] == 4).all() and (table["n_depth"] == 6).all() and (table["n_seeds"] == 6).all()
    assert norms.factor_table(table, res.trials, res.factors).empty  # one cell per level: Table 1 says it
    check = norms.theory_check(df, order)
    rot = check[check["variant"] == "RotRNN"]
    assert np.allclose(rot["stationary"], 1.0)


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) is not installed")
def test_report_renders_with_its_figures_and_tables(study):
    from ablate.report.render import render

    res, stores, root = study
    out = root / f"out-{uuid.uuid4().hex[:8]}"
    written = render(res.study, ["norm_stability"], out, storage=stores.storage, tracking_uri=stores.tracking)
    html = (out / "norm_stability.html").read_text()
    assert not re.search(r"<script[^>]+src=\"https?://", html)
    assert html.count("data:image/png;base64") >= 5
    pdf = out / "norm_stability.pdf"
    assert pdf in written
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    text = " ".join(text.split())
    for title in ("Summary", "State norm vs training step", "Figure 1.", "Figure 2.",
                  "State norm vs time step at initialisation and at the end, with theory", "Figure 3.",
                  "Stability table", "Table 1. Stability of the state norm per variant", "Table 2. Ratio between variants",
                  "Table 4. White-noise check", "Spectrum drift over training",
                  "Figure 4.", "Table 5. Spectrum drift",
                  "Gradient norms", "Figure 5.", "Probe batch identical across all 4 runs: yes",
                  "RotRNN", "LRU"):
        assert title in text, title
    assert "most stable" in text or "varies least" in text


# --- the analysis on constructed frames (no study needed) ---------------------------------------------


def frame(values: dict[str, np.ndarray]) -> pd.DataFrame:
    """Probe norm_sq_mean rows: values[label] has shape (seeds, layers, steps)."""
    rows = []
    for i, (label, v) in enumerate(values.items()):
        for s, l_, k in np.ndindex(v.shape):
            rows.append({"cell_id": f"c{i}", "cell_label": label, "seed": s, "layer": l_, "step": 10 * k, "head": 0,
                         "t": -1, "value": v[s, l_, k], "kind": "probe", "quantity": "norm_sq_mean"})
    return pd.DataFrame(rows)


def test_stability_and_text_come_from_the_numbers():
    rng = np.random.default_rng(0)
    steady = 1 + 0.01 * rng.standard_normal((4, 3, 6))
    wild = np.exp(rng.standard_normal((4, 3, 6)))
    df = frame({"steady": steady, "wild": wild})
    order = norms.variants(df)
    table = norms.stability_table(norms.layer_norms(df), order, n_resamples=300)
    ratios = norms.ratio_table(norms.layer_norms(df), table, n_resamples=300)
    # The per-unit CVs equal a direct computation.
    direct = np.mean([np.std(steady[s, l_], ddof=1) / steady[s, l_].mean() for s in range(4) for l_ in range(3)])
    assert table.loc[0, "cv_training"] == pytest.approx(direct)
    assert (table.loc[0, [f"cv_{m}" for m in norms.MEASURES]].to_numpy() <
            table.loc[1, [f"cv_{m}" for m in norms.MEASURES]].to_numpy()).all()
    wild_rows = ratios[ratios["variant"] == "wild"]
    assert (wild_rows["reference"] == "steady").all() and (wild_rows["ratio_low"] > 10).all()
    text = norms.summary_text(table, ratios)
    assert text.startswith("**steady** has the most stable state norm (lowest CV) on every measure")
    assert "clearly so on each" in text
    assert "clearly less stable" in text
    again = norms.summary_text(norms.stability_table(norms.layer_norms(df), order, n_resamples=300), ratios)
    assert again == text  # deterministic


def test_text_says_when_variants_cannot_be_told_apart():
    rng = np.random.default_rng(1)
    df = frame({"a": 1 + 0.1 * rng.standard_normal((3, 2, 5)), "b": 1 + 0.1 * rng.standard_normal((3, 2, 5))})
    order = norms.variants(df)
    table = norms.stability_table(norms.layer_norms(df), order, n_resamples=300)
    text = norms.summary_text(table, norms.ratio_table(norms.layer_norms(df), table, n_resamples=300))
    assert "not distinguishable" in text


def test_factor_table_averages_cells_per_level():
    cells = {"p=rot, n=xi": 1.0, "p=rot, n=gamma": 2.0, "p=diag, n=xi": 3.0, "p=diag, n=gamma": 6.0}
    table = pd.DataFrame({"cell_id": [f"c{i}" for i in range(4)], "variant": list(cells),
                          **{f"cv_{m}": list(cells.values()) for m in norms.MEASURES}})
    trials = pd.DataFrame({"cell_id": [f"c{i}" for i in range(4)], "p": ["rot", "rot", "diag", "diag"],
                           "n": ["xi", "gamma", "xi", "gamma"]})
    out = norms.factor_table(table, trials, ["p", "n"]).set_index(["factor", "level"])["cv_training"]
    assert out.to_dict() == {("p", "rot"): 1.5, ("p", "diag"): 4.5, ("n", "xi"): 2.0, ("n", "gamma"): 4.0}
    assert norms.short_order(list(zip(table["cell_id"], table["variant"], strict=True)))[1] == "p · n"
