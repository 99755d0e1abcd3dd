"""``ablate export``, ``report`` and ``compare`` as library calls (``ablate.report.commands``): the
options checked, and every refusal a ``Refused`` with exit 2 before a store is looked for."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from ablate.report import REPORTS, commands
from ablate.terminal import Refused


def never(path: Path):
    raise AssertionError(f"no spec file is read: {path}")


def refused(call, *args, **kwargs) -> Refused:
    with pytest.raises(Refused) as caught:
        call(*args, **kwargs)
    return caught.value


def test_options_are_checked():
    assert commands.formats("html, pdf") == ("html", "pdf") and commands.formats("pdf") == ("pdf",)
    assert refused(commands.formats, "html,docx").lines == ["--format: 'docx' is not one of: html, pdf"]
    assert refused(commands.formats, ",").code == 2
    assert commands.chosen_reports(" accuracy ,") == ["accuracy"]
    assert refused(commands.chosen_reports, "acuracy").lines == [f"--reports: 'acuracy' is not one of: {', '.join(REPORTS)}"]
    assert "nope" in refused(commands.report_parameters, ["nope=1"], ["accuracy"]).lines[0]


def test_report_compare_and_export_refuse_what_cannot_be_done_with_exit_2(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    out = Console(file=io.StringIO())
    cases = [
        (lambda: commands.report(out, [], never), "name a study (or a spec file), or give --data DIR"),
        (lambda: commands.report(out, ["a"], never, data=tmp_path), "give no study with it"),
        (lambda: commands.report(out, ["a"], never, fmt="doc"), "--format: 'doc'"),
        (lambda: commands.compare_command(out, [], None), "name the studies to compare (or --spec FILE)"),
        (lambda: commands.compare_command(out, ["a"], None, data=[tmp_path]), "give no study with it"),
        (lambda: commands.export(out, out, ["a"], None, None, never), "give a study and a directory"),
    ]
    for k, (call, message) in enumerate(cases):
        refusal = refused(call)
        assert refusal.code == 2 and message in refusal.lines[0], (k, refusal.lines)
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\n")
    assert "--compare takes study names" in refused(commands.report, out, [str(spec)], never, compare_=True).lines[0]
    assert not (tmp_path / "home").exists()


EXPORT = Path(__file__).resolve().parents[1] / "reports" / "null_task_seed" / "data"


def test_out_must_be_a_folder_or_one_that_can_be_made_and_the_check_leaves_nothing(tmp_path):
    afile = tmp_path / "spec.yaml"
    afile.write_text("name: s\n")
    cases = [(Path("/dev/null"), "exists and is not a folder"), (afile, "exists and is not a folder"),
             (afile / "sub", f"cannot be made a folder ({afile} is not a folder)")]
    if Path("/proc/self").is_dir():
        cases.append((Path("/proc/ablate-test-x"), "cannot be made a folder ("))
    for path, why in cases:
        refusal = refused(commands.out_folder, path)
        assert refusal.code == 2 and refusal.lines[0].startswith(f"--out {path}: {why}"), refusal.lines
    assert afile.read_text() == "name: s\n" and sorted(tmp_path.iterdir()) == [afile]
    commands.out_folder(tmp_path / "a" / "b")  # can be made: made and taken away again
    commands.out_folder(tmp_path)
    assert sorted(tmp_path.iterdir()) == [afile]


def test_report_and_compare_refuse_bad_parameters_out_and_names_before_a_store_is_looked_for(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    out = Console(file=io.StringIO())
    cases = [
        (lambda: commands.report(out, ["a"], never, param=["alpha=-1"], only="accuracy"),
         "--param alpha=-1: out of range; give a number with 0 < alpha < 1"),
        (lambda: commands.report(out, ["a"], never, param=["results_file=/etc/passwd"], only="accuracy"),
         "--param results_file: set by the command itself"),
        (lambda: commands.compare_command(out, ["a"], None, name="a/b"), "--name: 'a/b': use letters, digits"),
        (lambda: commands.compare_command(out, ["a"], None, name="x" * 1000),
         "--name: 1,000 characters; at most 240"),
        (lambda: commands.compare_command(out, ["a"], None, param=["cells_per_figure=0"]),
         "--param 'cells_per_figure=0': expected KEY=VALUE"),  # not the comparison's
        (lambda: commands.compare_command(out, ["a"], None, param=["confidence=5"]),
         "--param confidence=5: out of range"),
    ]
    for k, (call, message) in enumerate(cases):
        refusal = refused(call)
        assert refusal.code == 2 and refusal.lines[0].startswith(message), (k, refusal.lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no store, no reports/ folder


def test_a_metric_or_cell_the_study_lacks_is_refused_before_a_kernel_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    out = Console(file=io.StringIO())
    target = tmp_path / "out"
    cases = [
        (lambda: commands.report(out, [], never, data=EXPORT, out_dir=target, param=["metric=nosuch"]),
         "--param metric: 'nosuch' is not a metric of study null_task_seed; one of: val_accuracy, "),
        (lambda: commands.report(out, [], never, data=EXPORT, out_dir=target, param=["reference=nosuch=1"]),
         "--param reference: no cell with id or label 'nosuch=1'; as a selector: 'nosuch' is neither a factor nor "
         "a dotted path (factors: task.seed); cells are: 'seed=0'"),
        (lambda: commands.report(out, [], never, data=EXPORT, out_dir=Path("/dev/null")),
         "--out /dev/null: exists and is not a folder"),
        (lambda: commands.compare_command(out, [], None, data=[EXPORT], out_dir=target, param=["reference=nosuch"]),
         "--param reference: no variant with id or label 'nosuch'; variants are: 'seed=0'"),
    ]
    for k, (call, message) in enumerate(cases):
        refusal = refused(call)
        assert refusal.code == 2 and refusal.lines[0].startswith(message), (k, refusal.lines)
    assert not target.exists() and not (tmp_path / "home").exists()


def test_a_report_that_fails_is_refused_with_exit_1(tmp_path, monkeypatch):
    from ablate.report import render

    def fails(*args, **kwargs):
        raise render.ReportError("report 'accuracy' failed in cell 3: KeyError: 'x'")

    monkeypatch.setattr(render, "render", fails)
    refusal = refused(commands.render_reports, Console(file=io.StringIO()), "s", ["accuracy"], tmp_path / "o",
                      ("html",))
    assert refusal.code == 1 and refusal.lines == ["report 'accuracy' failed in cell 3: KeyError: 'x'"]


def test_a_parameter_a_later_study_lacks_is_refused_before_the_first_study_renders(studies_root, monkeypatch,
                                                                                   tmp_path):
    import real_studies as studies

    studies.study_env(monkeypatch, studies_root)
    b = studies.load(studies_root, "cmp-b", curves=False)
    only_b = next(label for label in b.trials["cell_label"].unique() if "heads=4" in label)
    out = Console(file=io.StringIO())
    refusal = refused(commands.report, out, ["cmp-b", "cmp-a"], never, out_dir=tmp_path / "out",
                      param=[f"reference={only_b}"], only="accuracy")
    assert refusal.code == 2 and refusal.lines[0].startswith(f"--param reference: no cell with id or label "
                                                              f"{only_b!r}"), refusal.lines
    assert not (tmp_path / "out").exists() and out.file.getvalue() == ""
