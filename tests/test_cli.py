"""The command line reads specs through the whole validation: exit codes, errors on stderr, plans."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import yaml
from support import ABLATE, BASE

from ablate import design

ROOT = Path(__file__).resolve().parents[1]


def ablate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*ABLATE, *args], capture_output=True, text=True, cwd=ROOT)


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
    n = len(design.cells(s))
    assert f"{n} cells × {len(s.seed_list)} seeds = {n * len(s.seed_list)} trials" in res.output


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


def _partial_study(tmp_path, monkeypatch):
    """BASE queued in a home under tmp_path: one item complete, one killed and re-queued, one running."""
    from optuna.trial import TrialState

    from ablate.runner import phases, queue
    from ablate.runner import study as st
    from ablate.stores import resolve

    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    monkeypatch.delenv("ABLATE_TRACKING_URI", raising=False)
    spec = design.validate(BASE)
    study, _ = st.prepare(spec, design.items(spec), resolve())
    done = phases.claim(study)
    queue.finish(study, done, TrialState.COMPLETE, {"status": "complete", "val_accuracy": 0.5, "steps": 5,
                                                     "seconds": 1.0}, 0.5)
    killed = phases.claim(study)
    assert st.declare_dead(study, killed.number)  # failed as killed, its item re-queued
    running = phases.claim(study)
    queue.beat(study, running.number, {"step": 2, "worker": "host:1"})
    return spec


def test_cli_status_json_and_table_agree(tmp_path, monkeypatch):
    import json

    spec = _partial_study(tmp_path, monkeypatch)
    total = len(design.items(spec))
    res = cli("status", "t", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["counts"] == {"done": 1, "running": 1, "waiting": total - 2, "failed": 0, "diverged": 0,
                              "total": total}
    for key, status in (("done", "complete"), ("running", "running"), ("waiting", "pending")):
        assert sum(c[status] for c in data["cells"]) == data["counts"][key]
    assert [r["step"] for r in data["running"]] == [2] and data["running"][0]["steps"] == 5
    assert data["eta_seconds"] is not None  # measured from the finished trial
    text = cli("status", "t")
    assert text.exit_code == 0, text.output
    assert f"t: 1 done · 1 running · {total - 2} waiting · 0 failed (0 diverged)" in text.output
    assert "ETA ?" not in text.output


def test_cli_status_of_many_cells_prints_one_plain_line_per_cell(tmp_path, monkeypatch):
    from optuna.trial import TrialState

    from ablate.runner import phases, queue
    from ablate.runner import plan as planning
    from ablate.runner import study as st
    from ablate.stores import resolve

    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    monkeypatch.delenv("ABLATE_TRACKING_URI", raising=False)
    raw = {**copy.deepcopy(BASE), "seeds": 2,
           "factors": {"train.lr": [round(1e-3 * (1 + i), 6) for i in range(planning.PLAIN_ROWS + 1)]}}
    spec = design.validate(raw)
    study, _ = st.prepare(spec, design.items(spec), resolve())
    done = phases.claim(study)  # the oldest item: the first cell's first seed
    queue.finish(study, done, TrialState.COMPLETE, {"status": "complete", "val_accuracy": 0.5, "steps": 5,
                                                     "seconds": 1.0}, 0.5)
    res = cli("status", "t")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == "t: status per cell" and lines[1].split() == ["cell", "complete", "pruned", "running",
                                                                      "pending", "diverged", "failed", "killed"]
    labels = [c.label for c in design.cells(spec)]
    rows = lines[2 : 2 + len(labels)]
    assert [r.rsplit(None, 7)[0] for r in rows] == labels and "│" not in res.output
    counts = [[int(n) for n in r.rsplit(None, 7)[1:]] for r in rows]
    assert counts[0] == [1, 0, 0, 1, 0, 0, 0] and all(c == [0, 0, 0, 2, 0, 0, 0] for c in counts[1:])
    assert f"t: 1 done · 0 running · {2 * len(labels) - 1} waiting · 0 failed (0 diverged)" in res.output


def test_cli_status_suggests_a_misspelt_study(tmp_path, monkeypatch):
    _partial_study(tmp_path, monkeypatch)
    # a real process: exit code, stderr (ABLATE_HOME from the environment)
    res = subprocess.run([*ABLATE, "status", "tt"], capture_output=True, text=True,
                         cwd=tmp_path)
    assert res.returncode == 1 and "no study named 'tt'" in res.stderr and "did you mean 't'?" in res.stderr
    assert "Traceback" not in res.stderr


def test_cli_schema_to_standard_output(tmp_path):
    import json

    from ablate import schema as schema_mod

    expected = schema_mod.schema_text()
    dash = subprocess.run([*ABLATE, "schema", "-"], capture_output=True, text=True,
                          cwd=tmp_path)
    assert dash.returncode == 0 and dash.stdout == expected
    piped = subprocess.run([*ABLATE, "schema"], capture_output=True, text=True,
                           cwd=tmp_path)  # stdout is a pipe, not a terminal: the Unix habit
    assert piped.returncode == 0 and piped.stdout == expected and not (tmp_path / "docs").exists()
    json.loads(piped.stdout)
    to_file = subprocess.run([*ABLATE, "schema", "s.json"], capture_output=True,
                             text=True, cwd=tmp_path)
    assert to_file.returncode == 0 and (tmp_path / "s.json").read_text() == expected


# --- reading a study whatever became of its stores ------------------------------------------------


def _run_cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("ABLATE_STORAGE", "ABLATE_TRACKING_URI")}
    env.update(ABLATE_HOME=str(root / ".ablate"), ABLATE_CACHE_DIR=str(root.parent / "cache"))
    return subprocess.run([*ABLATE, *args], capture_output=True, text=True, cwd=root.parent,
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


# --- exports -----------------------------------------------------------------------------------


def test_cli_export_writes_each_study_and_refuses_on_one_line(tmp_path, monkeypatch):
    """Two studies into DIR/STUDY each; then what `export` and `report --data` refuse: exit 2, one
    line on stderr, no traceback, nothing written."""
    import json

    from ablate import results
    from ablate.runner import study as st
    from ablate.stores import resolve

    _partial_study(tmp_path, monkeypatch)
    other = design.validate({**BASE, "name": "u"})
    st.prepare(other, design.items(other), resolve())
    res = cli("export", "t", "u", str(tmp_path / "data"))
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["t", "u"]
    for name in ("t", "u"):
        manifest = json.loads((tmp_path / "data" / name / "manifest.json").read_text())
        assert manifest["study"] == name and manifest["rows"]["trials"] == len(design.items(other))
        assert f"wrote {tmp_path / 'data' / name}: {manifest['rows']['trials']} trials" in res.output
        assert results.read_export(tmp_path / "data" / name).study == name
    assert "complete" in results.read_export(tmp_path / "data" / "t").trials["status"].to_list()
    again = cli("export", "t", str(tmp_path / "data" / "t"))  # a previous export of the same study: replaced
    assert again.exit_code == 0, again.output

    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x.txt").write_text("mine")
    (tmp_path / "file").write_text("x")
    listing = sorted(str(p) for p in tmp_path.rglob("*"))
    refused = {
        ("export", "t", str(tmp_path / "busy")): "is not empty and is not an export of study 't'",
        ("export", "t", str(tmp_path / "file")): "exists and is not a directory",
        ("export", "t", "u", str(tmp_path / "file")): "exists and is not a directory",
        ("export", "u", str(tmp_path / "data" / "t")): "(it holds study 't')",
        ("export", "t", "/dev/null"): "/dev/null exists and is not a directory",
        ("export", "t", str(tmp_path / ("n" * 4000))): "File name too long",
        ("export", "t"): "give a study and a directory",
        ("report", "--data", str(tmp_path / "busy")): "has no manifest.json",
        ("report", "--data", "/dev/null"): "is not a directory",
        ("report", "t", "--data", str(tmp_path / "data")): "give no study",
    }
    for args, message in refused.items():
        out = subprocess.run([*ABLATE, *args], capture_output=True, text=True,
                             cwd=tmp_path)
        assert out.returncode == 2, (args[:3], out.stderr)
        assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, (args[:3], out.stderr)
        assert "Traceback" not in out.stderr and len(out.stderr) < 800
    missing = cli("export", "nope", str(tmp_path / "n"))
    assert missing.exit_code == 1 and "no study named 'nope'" in missing.output
    (tmp_path / "data" / "u" / "spec.yaml").write_text("name: u\n")
    tampered = cli("report", "--data", str(tmp_path / "data"), "--format", "html")
    assert tampered.exit_code == 2 and "spec.yaml does not match the sha256" in tampered.output
    assert sorted(str(p) for p in tmp_path.rglob("*")) == listing


def test_the_installed_command_runs_main_and_is_what_these_tests_run():
    """``ablate`` on the PATH enters ``cli.main`` (the one-line error, the quick exit after a
    signal, the warning filters), not the typer app bare; the tests run that script."""
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "ablate"]
    assert script.value == "ablate.cli:main"
    assert Path(ABLATE[0]).is_file() and "from ablate.cli import main" in Path(ABLATE[0]).read_text()
    res = subprocess.run([*ABLATE, "validate", "/nonexistent.yaml"], capture_output=True, text=True)
    assert res.returncode == 2 and res.stderr.startswith("error") and "Traceback" not in res.stderr


def test_cli_run_and_plan_given_a_study_name_say_they_take_a_spec_file(tmp_path, monkeypatch):
    # Issue 43: `ablate run NAME` answered "cannot read NAME: No such file or directory".
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    for command in ("run", "plan", "validate"):
        res = cli(command, "quickstart")
        assert res.exit_code == 2
        assert "quickstart is not a file: this command takes a spec file (status, report and worker take a " \
               "study's name)" in res.output and "did you mean" not in res.output
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "quickstart.yaml").write_text("name: quickstart\n")
    assert "did you mean studies/quickstart.yaml?" in cli("run", "quickstart").output
    assert not (tmp_path / "home").exists()  # nothing created
