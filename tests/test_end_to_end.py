"""The whole path with real processes and stores: spec → Optuna + MLflow → results → HTML/PDF."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from support import ABLATE, dashboard_api

SPEC = {
    "name": "e2e",
    "task": {"name": "listops", "max_depth": 3, "max_length": 30, "train_size": 200, "val_size": 64,
             "test_size": 64, "seed": 0},
    "model": {"d_model": 16, "state_dim": 8, "layers": 2, "heads": 2},
    "train": {"steps": 12, "batch_size": 16, "eval_every": 6, "log_every": 3},
    "probes": {"every": 6, "batch": 16},
    "factors": {"model.normalisation": ["xi", "gamma"]},
    "seeds": 1,
}


def ablate(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "ABLATE_HOME": str(cwd / ".ablate"), "ABLATE_CACHE_DIR": str(cwd / "cache")}
    res = subprocess.run([*ABLATE, *args], capture_output=True, text=True, cwd=cwd,
                         env=env, timeout=600)
    if check:
        assert res.returncode == 0, f"{args}: {res.stdout}\n{res.stderr}"
    return res


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("e2e")
    (root / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    ablate(root, "run", "spec.yaml")
    return root


def test_run_records_trials_in_optuna_and_mlflow(study_dir, monkeypatch):
    monkeypatch.setenv("ABLATE_HOME", str(study_dir / ".ablate"))
    from mlflow.tracking import MlflowClient

    from ablate import results
    from ablate.stores import resolve

    res = results.load("e2e")
    trials = res.trials
    assert trials.height == 2
    assert trials["status"].to_list() == ["complete", "complete"]
    assert trials["test_accuracy"].is_between(0.0, 1.0).all()
    assert set(trials["model.normalisation"].to_list()) == {"xi", "gamma"}

    mlc = MlflowClient(resolve().tracking)
    exp = mlc.get_experiment_by_name("e2e")
    runs = mlc.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("ablate.role") == "study"]
    children = [r for r in runs if r.data.tags.get("ablate.role") == "trial"]
    assert len(parents) == 1 and len(children) == 2
    for child in children:
        assert child.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert child.info.status == "FINISHED"
        assert child.info.run_name in ("normalisation=xi · seed 0", "normalisation=gamma · seed 0")
        # One name per setting: the factor's path holds its value; the label is a tag.
        assert child.data.params["model.normalisation"] in ("xi", "gamma")
        assert not any(k.startswith("settings.") for k in child.data.params)
        assert child.data.tags["ablate.level.model.normalisation"] == child.data.params["model.normalisation"]
        assert child.data.params["model.parameterisation"] == "rotation"
        history = mlc.get_metric_history(child.info.run_id, "state_norm/layer1")
        assert [m.step for m in history] == [0, 6, 12]
        assert len(mlc.get_metric_history(child.info.run_id, "train/loss")) == 4
        assert "final/test_accuracy" in child.data.metrics
    # Dense curves reach the results API as one tidy frame.
    curves = res.curves.filter(res.curves["kind"] == "probe")
    assert set(curves["layer"].unique()) == {0, 1}
    assert set(curves["step"].unique()) == {0, 6, 12}
    assert curves.filter(curves["step"] == 0)["t"].max() >= 9  # a value per time step


def test_optuna_dashboard_shows_cell_seed_and_phase(study_dir, monkeypatch):
    """optuna-dashboard's own JSON API (what its trial table renders) on the study's storage."""
    monkeypatch.setenv("ABLATE_HOME", str(study_dir / ".ablate"))
    from ablate.stores import resolve

    get = dashboard_api(resolve().storage)

    study_id = next(s["study_id"] for s in get("/api/studies")["study_summaries"] if s["study_name"] == "e2e")
    detail = get(f"/api/studies/{study_id}")
    assert {"cell_label", "seed", "phase"} <= {a["key"] for a in detail["union_user_attrs"]}
    rows = [{a["key"]: a["value"] for a in t["user_attrs"]} for t in detail["trials"]]
    shown = sorted((r["cell_label"], r["seed"], r["phase"]) for r in rows)
    assert shown == [("normalisation=gamma", "0", "replicate"), ("normalisation=xi", "0", "replicate")]
    # The factor is a parameter (categorical over its levels, in the spec's order), so the
    # importance, parallel-coordinate and slice views have something to show; the objective is named.
    for t in detail["trials"]:
        (param,) = t["params"]
        assert param["name"] == "model.normalisation"
        assert [c["value"] for c in param["distribution"]["choices"]] == ["xi", "gamma"]
    assert detail["objective_names"] == ["val_accuracy"]
    assert detail["note"]["body"].startswith("**e2e: an ablation study run by ablate**")


def test_rerun_resumes_and_runs_nothing_twice(study_dir, monkeypatch):
    monkeypatch.setenv("ABLATE_HOME", str(study_dir / ".ablate"))
    import optuna

    from ablate.stores import resolve

    before = len(optuna.load_study(study_name="e2e", storage=resolve().storage).trials)
    res = ablate(study_dir, "run", "spec.yaml")
    assert "2 done" in res.stdout and "0 newly queued" in res.stdout
    after = len(optuna.load_study(study_name="e2e", storage=resolve().storage).trials)
    assert after == before == 2
    # Extending the grid by a level runs only the new cell.
    res = ablate(study_dir, "run", "spec.yaml", "--set", "factors.model.normalisation=[xi, gamma, none]")
    assert "1 newly queued" in res.stdout
    assert len(optuna.load_study(study_name="e2e", storage=resolve().storage).trials) == 3


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) is not installed")
def test_reports_render_html_and_pdf(study_dir):
    ablate(study_dir, "report", "e2e", "--out", "out")
    out = study_dir / "out"
    for name in ("accuracy", "norm_stability"):
        html = (out / f"{name}.html").read_text()
        assert not re.search(r"<script[^>]+src=\"https?://", html), "the HTML must be self-contained"
        assert "data:image/svg+xml;base64" in html  # figures as vector graphics
        text = subprocess.run(["pdftotext", str(out / f"{name}.pdf"), "-"], capture_output=True, text=True).stdout
        if name == "accuracy":
            assert "Test accuracy per cell" in text and "Learning curves" in text
            assert "normalisation=xi" in text
        else:
            assert "State norm vs training step" in text


def test_report_of_unknown_study_is_a_clear_error(study_dir):
    res = ablate(study_dir, "report", "nope", check=False)
    assert res.returncode == 1
    assert "no study named 'nope'" in res.stderr and "Traceback" not in res.stderr


def test_run_output_to_a_file_is_one_event_per_line(tmp_path):
    """`ablate run > log` (SLURM, tee): long cell labels whole (no 80-column table or wrap), one
    event per line, a final newline; the worker logs hold no warnings and no MLflow INFO lines."""
    long_labels = {
        "rotation_with_xi_normalisation_as_in_the_RotRNN_paper": {"model.parameterisation": "rotation",
                                                                  "model.normalisation": "xi"},
        "complex_diagonal_with_gamma_normalisation_as_in_the_LRU_paper": {
            "model.parameterisation": "complex_diagonal", "model.normalisation": "gamma"},
    }
    spec = {**SPEC, "name": "piped", "factors": {"variant": long_labels}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "COLUMNS")}
    env.update(ABLATE_HOME=str(tmp_path / ".ablate"), ABLATE_CACHE_DIR=str(tmp_path / "cache"))
    with open(tmp_path / "run.log", "w") as log:
        res = subprocess.run([*ABLATE, "run", "spec.yaml", "--workers", "2"], cwd=tmp_path,
                             env=env, stdout=log, stderr=subprocess.PIPE, text=True, timeout=600)
    text = (tmp_path / "run.log").read_text()
    assert res.returncode == 0, text + res.stderr
    assert text.endswith("\n") and "…" not in text and "\x1b[" not in text
    lines = text.splitlines()
    for label in long_labels:
        done = [line for line in lines if line.startswith(f"done {label} · seed 0: val acc ")]
        assert len(done) == 1, lines
        # the last item's line has nothing left to estimate
        assert " · test acc " in done[0] and (" done · ETA " in done[0] or done[0].endswith(" done · nothing left to run"))
        assert sum(line.startswith(f"start {label} · seed 0 (replicate, trial ") for line in lines) == 1
    assert lines[-2] == "piped: 2 done · 0 running · 0 waiting · 0 failed · nothing left to run"
    assert lines[-1] == "piped: 2 done, 0 failed, 0 unfinished"
    assert "INFO" not in res.stderr and "Warning" not in res.stderr, res.stderr
    for worker_log in (tmp_path / ".ablate" / "logs").glob("piped-worker*.log"):
        body = worker_log.read_text()
        assert "Warning" not in body and "INFO" not in body, body
