"""The command line reads specs through the whole validation: exit codes, errors on stderr, plans."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import yaml

from ablate import design

ROOT = Path(__file__).resolve().parents[1]
BASE = {
    "name": "t",
    "task": {"name": "listops", "max_length": 40, "train_size": 100, "val_size": 50, "test_size": 50},
    "model": {"d_model": 16, "state_dim": 8, "layers": 1, "heads": 2},
    "train": {"steps": 5},
    "factors": {"model.parameterisation": ["rotation", "complex_diagonal"], "model.normalisation": ["xi", "gamma"]},
    "seeds": 3,
}


def ablate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ablate.cli", *args], capture_output=True, text=True, cwd=ROOT)


def cli(*args: str):
    from typer.testing import CliRunner

    from ablate.cli import app

    return CliRunner().invoke(app, list(args))


def test_cli_validate_ok_and_error_exit_codes(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    good = cli("validate", "studies/quickstart.yaml")
    assert good.exit_code == 0, good.output
    assert good.output.startswith("OK quickstart")
    bad = tmp_path / "bad.yaml"
    raw = copy.deepcopy(BASE)
    raw["factors"] = {"model.normalisation": ["xi", "zeta"]}
    bad.write_text(yaml.safe_dump(raw))
    res = ablate("validate", str(bad))  # a real process: exit code, stderr, no traceback
    assert res.returncode == 2
    assert "factors.model.normalisation[1]: 'zeta' is not one of: xi, gamma" in res.stderr
    assert "Traceback" not in res.stderr
    missing = cli("validate", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == 2 and "cannot read" in missing.output


def test_cli_validate_checks_the_design_not_only_the_shape(tmp_path):
    path = tmp_path / "cells.yaml"
    path.write_text(yaml.safe_dump({**BASE, "design": "cells"}))
    res = cli("validate", str(path))
    assert res.exit_code == 2 and "cells: design: cells needs a non-empty `cells:` list" in res.output


def test_cli_plan_lists_cells(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    res = cli("plan", "studies/quickstart.yaml")
    assert res.exit_code == 0, res.output
    s = design.load(ROOT / "studies/quickstart.yaml")
    for cell in design.cells(s):
        assert cell.id in res.output
    assert f"{len(design.cells(s))} cells × 2 seeds = {2 * len(design.cells(s))} trials" in res.output


def test_cli_report_names_come_from_the_notebooks(tmp_path):
    res = cli("report", "nostudy", "--reports", "accuracy,speed", "--out", str(tmp_path))
    assert res.exit_code == 2 and "--reports: 'speed' is not one of: accuracy, norm_stability" in res.output


# --- reading a study whatever became of its stores ------------------------------------------------


def _run_cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("ABLATE_STORAGE", "ABLATE_TRACKING_URI")}
    env.update(ABLATE_HOME=str(root / ".ablate"), ABLATE_CACHE_DIR=str(root.parent / "cache"))
    return subprocess.run([sys.executable, "-m", "ablate.cli", *args], capture_output=True, text=True, cwd=root.parent,
                          env=env, timeout=600)


def test_status_and_report_read_a_study_on_a_read_only_filesystem(norm_study, tmp_path):
    """Before: both opened optuna.db.lock for writing and failed."""
    import os

    import pytest
    from test_results import copy_study

    mount = tmp_path / "ro"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200m", "tmpfs", str(mount)]).returncode:
        pytest.skip("mounting a tmpfs read-only needs root")
    try:
        root = copy_study(norm_study, mount / "study")
        for lock in (root / ".ablate").glob("*.lock"):
            lock.unlink()
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        status = _run_cli(root, "status", "norm-e2e")
        assert status.returncode == 0, status.stderr
        assert "4 done · 0 running" in status.stdout
        report = _run_cli(root, "report", "norm-e2e", "--format", "html", "--out", str(tmp_path / "reports"))
        assert report.returncode == 0, report.stderr
        assert "Incomplete data" not in (tmp_path / "reports" / "norm_stability.html").read_text()
    finally:
        subprocess.run(["umount", "--lazy", str(mount)])


def test_report_renders_what_remains_after_the_tracking_store_is_lost(norm_study, tmp_path):
    from test_results import copy_study

    root = copy_study(norm_study, tmp_path / "study")
    (root / ".ablate" / "mlflow.db").unlink()
    res = _run_cli(root, "report", "norm-e2e", "--format", "html", "--out", str(tmp_path / "reports"))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    for name in ("accuracy", "norm_stability"):
        html = (tmp_path / "reports" / f"{name}.html").read_text()
        assert "Incomplete data" in html and "mlflow.db is missing" in html
    assert not (root / ".ablate" / "mlflow.db").exists()
