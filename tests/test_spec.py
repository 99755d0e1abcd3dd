"""Spec validation, error texts, the CLI's validate/plan, and cell identity."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ablate import design, spec

ROOT = Path(__file__).resolve().parents[1]
BASE = {
    "name": "t",
    "task": {"name": "listops", "max_length": 40, "train_size": 100, "val_size": 50, "test_size": 50},
    "model": {"d_model": 16, "state_dim": 8, "layers": 1, "heads": 2},
    "train": {"steps": 5},
    "factors": {"model.parameterisation": ["rotation", "complex_diagonal"], "model.normalisation": ["xi", "gamma"]},
    "seeds": 3,
}


def errors(raw) -> str:
    with pytest.raises(spec.SpecError) as info:
        spec.validate(raw)
    return str(info.value)


def with_(path: str, value):
    raw = yaml.safe_load(yaml.safe_dump(BASE))
    spec.set_path(raw, path, value) if "." in path else raw.__setitem__(path, value)
    return raw


def test_valid_spec_resolves_defaults():
    s = spec.validate(BASE)
    assert s.model.init.scheme == "rotrnn"
    assert s.baseline()["task"]["min_length"] == 10  # the task's own default filled in
    assert s.seed_list == [0, 1, 2]


def test_bad_factor_level_names_path_and_choices():
    msg = errors(with_("factors", {"model.normalisation": ["xi", "zeta"]}))
    assert msg == "factors.model.normalisation[1]: 'zeta' is not one of: xi, gamma, gamma_recomputed, none"


def test_bad_baseline_choice():
    msg = errors(with_("model.parameterisation", "diagonal"))
    assert msg.startswith("model.parameterisation: 'diagonal' is not one of: rotation, complex_diagonal")


def test_unknown_keys_are_errors_with_suggestion():
    assert "model.layer: unknown key; did you mean 'layers'?" in errors(with_("model.layer", 3))
    assert "trian: unknown key; did you mean 'train'?" in errors(with_("trian", {}))
    assert "task.max_lenght: unknown key" in errors(with_("task.max_lenght", 3))


def test_unknown_task_lists_tasks():
    msg = errors(with_("task", {"name": "listopz"}))
    assert msg.startswith("task.name: 'listopz' is not one of: listops")


def test_bad_init_scheme_and_heads():
    assert "model.init.scheme: 'circle' is not one of: ring, rotrnn" in errors(with_("model.init", {"scheme": "circle"}))
    msg = errors(with_("factors", {"model.heads": [2, 3]}))
    assert msg.startswith("factors.model.heads[1]: model: Value error") or "heads (3) must divide" in msg


def test_factor_path_must_exist():
    assert "factors.model.depth: 'depth' is not a key of the baseline" in errors(with_("factors", {"model.depth": [1]}))


def test_yaml_tags_refused_and_syntax_errors_located():
    with pytest.raises(spec.SpecError, match="not valid YAML"):
        spec.parse_yaml("name: !!python/object/apply:os.system ['true']")
    with pytest.raises(spec.SpecError, match=r"line 2"):
        spec.parse_yaml("name: a\n  bad: [1\n")
    with pytest.raises(spec.SpecError, match="not UTF-8"):
        spec.parse_yaml(b"name: \xff\xfe")


def test_grid_counts_and_seeds():
    s = spec.validate(BASE)
    cells = design.cells(s)
    assert len(cells) == 4
    assert len(design.items(s)) == 12
    assert {c.settings["model.parameterisation"] for c in cells} == {"rotation", "complex_diagonal"}


def test_cell_id_stable_under_key_order_and_formatting():
    s1 = spec.validate(BASE)
    reordered = {k: BASE[k] for k in reversed(list(BASE))}
    reordered["model"] = dict(reversed(list(BASE["model"].items())))
    text = yaml.safe_dump(reordered, default_flow_style=True)
    s2 = spec.validate(yaml.safe_load(text))
    assert sorted(c.id for c in design.cells(s1)) == sorted(c.id for c in design.cells(s2))
    # Writing a default explicitly resolves to the same config, hence the same id.
    explicit = with_("model.dropout", 0.0)
    assert {c.id for c in design.cells(spec.validate(explicit))} == {c.id for c in design.cells(s1)}


def test_cell_id_changes_with_a_fixed_setting():
    ids = {c.id for c in design.cells(spec.validate(BASE))}
    other = {c.id for c in design.cells(spec.validate(with_("train.lr", 1e-3)))}
    assert ids.isdisjoint(other)


def test_overrides_apply_and_parse_yaml_values():
    raw = spec.apply_overrides(BASE, ["train.steps=7", "model.parameterisation=complex_diagonal", "seeds=[4, 5]"])
    s = spec.validate(raw)
    assert s.train.steps == 7 and s.model.parameterisation == "complex_diagonal" and s.seed_list == [4, 5]


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
    raw = with_("factors", {"model.normalisation": ["xi", "zeta"]})
    bad.write_text(yaml.safe_dump(raw))
    res = ablate("validate", str(bad))  # a real process: exit code, stderr, no traceback
    assert res.returncode == 2
    assert "factors.model.normalisation[1]: 'zeta' is not one of: xi, gamma" in res.stderr
    assert "Traceback" not in res.stderr
    missing = cli("validate", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == 2 and "cannot read" in missing.output


def test_cli_plan_lists_cells(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    res = cli("plan", "studies/quickstart.yaml")
    assert res.exit_code == 0, res.output
    s = spec.load(ROOT / "studies/quickstart.yaml")
    for cell in design.cells(s):
        assert cell.id in res.output
    assert f"{len(design.cells(s))} cells × 2 seeds = {2 * len(design.cells(s))} trials" in res.output
