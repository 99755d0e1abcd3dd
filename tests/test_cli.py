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


def test_cli_ls_without_stores_writes_nothing_and_report_takes_a_spec_file(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    res = cli("ls")
    assert res.exit_code == 0 and "no stores yet" in res.output
    assert not (tmp_path / "home").exists()
    res = cli("report", "studies/quickstart.yaml", "--out", str(tmp_path / "out"))
    assert res.exit_code == 1 and "no study named 'quickstart'" in res.output  # the spec's study, by its name
    res = cli("report", "a", "b", "--compare", "--format", "txt")
    assert res.exit_code == 2 and "--format: 'txt' is not one of: html, pdf" in res.output
