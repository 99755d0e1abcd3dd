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
