"""The JSON Schema and the spec reference are current; the studies/ files validate against both."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml
from support import ABLATE

from ablate import design, schema
from ablate.terminal import Refused

ROOT = Path(__file__).resolve().parents[1]
STUDIES = sorted((ROOT / "studies").glob("*.yaml"))
REGENERATE = "stale: run `ablate schema --docs docs/spec.md` and commit docs/"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    sch = json.loads((ROOT / "docs/spec.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(sch)
    return jsonschema.Draft202012Validator(sch)


def test_schema_file_is_current():
    assert (ROOT / "docs/spec.schema.json").read_text(encoding="utf-8") == schema.schema_text(installed=False), \
        REGENERATE


def test_the_schema_for_an_editor_knows_the_installed_plugins_and_docs_only_the_builtins():
    def names(sch: dict) -> tuple[list, list]:
        param = sch["$defs"]["ModelSpec"]["properties"]["parameterisation"]["anyOf"]
        tasks = [t["properties"]["name"].get("const") for t in sch["properties"]["task"]["oneOf"]]
        return param[0]["enum"], tasks

    params, tasks = names(schema.json_schema())  # the example plug-in package is installed (scripts/setup.sh)
    assert "cayley" in params and "parity" in tasks
    params, tasks = names(schema.json_schema(installed=False))
    assert "cayley" not in params and "parity" not in tasks and "rotation" in params and "listops" in tasks


def test_reference_docs_are_current():
    assert (ROOT / "docs/spec.md").read_text(encoding="utf-8") == schema.reference_markdown(), REGENERATE


def test_there_are_studies_and_each_carries_the_modeline():
    assert len(STUDIES) >= 4
    for path in STUDIES:
        assert path.read_text(encoding="utf-8").splitlines()[0] == schema.MODELINE, path.name


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.name)
def test_studies_validate_against_the_schema_and_load(path, validator):
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    problems = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(raw)]
    assert not problems, problems
    s = design.load(path)
    assert design.items(s)


def test_schema_rejects_what_validation_rejects(validator):
    base = yaml.safe_load((ROOT / "studies/quickstart.yaml").read_text(encoding="utf-8"))
    assert validator.is_valid(base)
    for path, value in (("model.layer", 2), ("model.normalisation", "zeta"), ("task.name", "listopz"),
                        ("task.max_lenght", 3), ("design", "fractional"), ("seeds", 0), ("tune", {"space": {}}),
                        ("factors", {"bad name!": [1]})):
        raw = json.loads(json.dumps(base))
        *parents, key = path.split(".")
        node = raw
        for part in parents:
            node = node[part]
        node[key] = value
        assert not validator.is_valid(raw), path
    # A spec that extends another may leave name and task to its base.
    assert validator.is_valid({"extends": "base.yaml", "train": {"steps": 3}})
    assert not validator.is_valid({"train": {"steps": 3}})


def test_cli_schema_check_and_write(tmp_path):
    res = subprocess.run([*ABLATE, "schema", "--check", "--docs", "docs/spec.md"],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    # The repo's reference by its absolute path from another folder: built-ins only there too (with
    # an installed plug-in it read as stale).
    res = subprocess.run([*ABLATE, "schema", "--check", str(ROOT / "docs" / "spec.schema.json")],
                         capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([*ABLATE, "schema", "--out", str(tmp_path / "s.json")],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0 and (tmp_path / "s.json").read_text() == schema.schema_text()


def test_outputs_choose_the_destination_and_the_stale_files(tmp_path):
    assert schema.outputs(terminal=True).files == {Path("docs/spec.schema.json"): schema.schema_text(installed=False)}
    piped = schema.outputs(terminal=False)  # redirected, it goes where it is sent
    assert piped.stdout == schema.schema_text() and piped.files == {}
    assert schema.outputs("-", docs=tmp_path / "d.md").files == {tmp_path / "d.md": schema.reference_markdown()}
    for kwargs in ({"docs": tmp_path / "d.md"}, {"check": True}):
        assert schema.outputs(terminal=False, **kwargs).stdout is None
    with pytest.raises(schema.DestinationError, match="^give the schema's destination once: TARGET or --out$"):
        schema.outputs("a.json", tmp_path / "b.json")
    with pytest.raises(schema.DestinationError, match="^--check compares files: give a file, not standard output$"):
        schema.outputs("-", check=True)
    both = schema.outputs(None, tmp_path / "x" / "s.json", tmp_path / "y" / "d.md")
    assert both.stdout is None and both.stale() == [tmp_path / "x" / "s.json", tmp_path / "y" / "d.md"]
    assert list(both.write()) == [tmp_path / "x" / "s.json", tmp_path / "y" / "d.md"] and both.stale() == []
    (tmp_path / "y" / "d.md").write_text("old", encoding="utf-8")
    assert both.stale() == [tmp_path / "y" / "d.md"]


def test_outputs_refuse_a_destination_that_is_no_file_before_writing_anything(tmp_path):
    (tmp_path / "file").write_text("")
    for args, said in [
        ((str(tmp_path),), f"cannot write {tmp_path}: it is a folder; give a file's path"),
        ((None, tmp_path), f"cannot write {tmp_path}: it is a folder; give a file's path"),
        (("-", None, tmp_path), f"cannot write {tmp_path}: it is a folder; give a file's path"),
        ((str(tmp_path / "s.json"), None, tmp_path / "file" / "d.md"),
         f"cannot write {tmp_path}/file/d.md: {tmp_path}/file is not a folder"),
        ((str(tmp_path), None, None, True), f"cannot check {tmp_path}: it is a folder; give a file's path"),
    ]:
        with pytest.raises(Refused) as refused:
            schema.outputs(*args)
        assert refused.value.code == 2 and refused.value.lines == [said]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_file_schema_did_not_write_is_never_replaced(tmp_path):
    """`ablate schema study.yaml` (every other command takes a spec there) overwrote the spec."""
    spec, notes = tmp_path / "study.yaml", tmp_path / "notes.md"
    spec.write_text("name: mine\n")
    notes.write_text("my notes\n")
    lost = "it holds something ablate schema did not write, which would be lost"
    for args, path in [((str(spec),), spec), ((str(tmp_path / "s.json"), None, notes), notes)]:
        with pytest.raises(Refused) as refused:
            schema.outputs(*args)
        assert refused.value.code == 2 and refused.value.lines[0].startswith(f"cannot write {path}: {lost}")
    assert spec.read_text() == "name: mine\n" and notes.read_text() == "my notes\n"
    ours, ref, empty = tmp_path / "s.json", tmp_path / "ref.md", tmp_path / "empty.json"
    empty.write_text("")
    list(schema.outputs(str(ours), None, ref).write())
    for again in ((str(ours), None, ref), (str(empty),)):  # what it wrote, or an empty file: replaced
        list(schema.outputs(*again).write())
    assert json.loads(empty.read_text())["$id"] == schema.SCHEMA_ID


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="/dev/full: a device that is always full (Linux)")
def test_a_failed_write_is_refused_and_writes_nothing_else(tmp_path):
    (tmp_path / "old.json").write_text("old", encoding="utf-8")
    os.chmod(tmp_path / "old.json", 0o640)
    full = schema.Outputs(None, {tmp_path / "old.json": "new", Path("/dev/full"): "text"})
    with pytest.raises(Refused, match="^cannot write /dev/full: No space left on device$"):
        list(full.write())
    assert [p.name for p in tmp_path.iterdir()] == ["old.json"] and (tmp_path / "old.json").read_text() == "old"
    assert list(schema.Outputs(None, {tmp_path / "old.json": "new"}).write()) == [tmp_path / "old.json"]
    assert (tmp_path / "old.json").read_text() == "new" and (tmp_path / "old.json").stat().st_mode & 0o777 == 0o640


def test_cli_schema_refuses_an_unwritable_destination(tmp_path):
    for target in (str(tmp_path), *(["/dev/full"] if os.path.exists("/dev/full") else [])):
        res = subprocess.run([*ABLATE, "schema", target, "--docs", str(tmp_path / "d.md")],
                             capture_output=True, text=True, cwd=tmp_path)
        assert res.returncode == 2 and res.stdout == "", res.stderr
        assert res.stderr.startswith(f"error cannot write {target}: ") and res.stderr.count("\n") == 1
        assert list(tmp_path.iterdir()) == [], "nothing else written"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="/dev/full: a device that is always full (Linux)")
def test_a_reference_that_cannot_be_written_prints_no_schema(tmp_path):
    res = subprocess.run([*ABLATE, "schema", "-", "--docs", "/dev/full"], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == "", res.stdout[:200]
    assert "cannot write /dev/full" in res.stderr
