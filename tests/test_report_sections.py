"""Report-section plug-ins (ablate.report.sections, render.render): the example package's section
renders as a page of its own in HTML and PDF beside the built-in reports, its figures and tables
exported; a failing section or a block of the wrong kind is an error naming it; the spec's
``reports:`` knows section names."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from ablate import design
from ablate.report import render, sections
from ablate.results import Results
from ablate.spec import SpecError

SPEC = {"name": "sect", "task": {"name": "parity", "seq_len": 8, "train_size": 64, "val_size": 16, "test_size": 16},
        "model": {"d_model": 8, "state_dim": 8, "heads": 2, "layers": 1},
        "factors": {"model.parameterisation": ["rotation", "cayley"]}, "seeds": 2,
        "reports": ["accuracy", "parity_accuracy"]}


def results() -> Results:
    """A study's results as the frames hold them (four finished runs), without training."""
    spec = design.loads(yaml.safe_dump(SPEC))
    cells = design.cells(spec)
    rows = [{"cell_id": c.id, "cell_label": c.label, "seed": s, "phase": "replicate", "status": "complete",
             "test_accuracy": acc, "chance": 0.5}
            for c, accs in zip(cells, ([0.6, 0.7], [0.9, 1.0]), strict=True) for s, acc in enumerate(accs)]
    return Results(study="sect", spec=spec, spec_hash="0", stores={}, factors=["model.parameterisation"],
                   trials=pl.DataFrame(rows))


def test_the_spec_lists_section_plugins_beside_the_reports() -> None:
    assert design.loads(yaml.safe_dump(SPEC)).reports == ["accuracy", "parity_accuracy"]
    with pytest.raises(SpecError, match="'parity_acuracy' is not one of: accuracy, norm_stability, parity_accuracy; "
                                        "or a plug-in .*did you mean 'parity_accuracy'"):
        design.loads(yaml.safe_dump({**SPEC, "reports": ["parity_acuracy"]}))
    assert sections.is_section("parity_accuracy") and not sections.is_section("accuracy")


def test_a_section_renders_as_a_page_in_html_and_pdf_and_exports(tmp_path: Path) -> None:
    paths = render.render("sect", ["parity_accuracy"], tmp_path, ("html", "pdf"), export=True, data=results())
    assert paths == [tmp_path / "parity_accuracy.html", tmp_path / "parity_accuracy.pdf"]
    html = (tmp_path / "parity_accuracy.html").read_text()
    assert "sect — parity accuracy" in html and "chance is <b>0.500</b>" in html
    assert "data:image/svg+xml;base64," in html and ">0.65<" in html and ">0.95<" in html  # the means
    assert (tmp_path / "parity_accuracy.pdf").read_bytes().startswith(b"%PDF")
    assert (tmp_path / "figures" / "parity_accuracy-test-accuracy-against-chance.svg").is_file()
    table = pl.read_csv(tmp_path / "tables" / "parity_accuracy-test-accuracy-per-cell.csv")
    assert table["mean"].to_list() == [0.65, 0.95] and table["seeds"].to_list() == [2, 2]


BROKEN = '''
def fails(results):
    yield "a first paragraph"
    raise KeyError("no column 'nope'")


def wrong_kind(results):
    yield 42
'''


@pytest.mark.parametrize("name,message", [
    ("my_section_broken:fails", "report section 'my_section_broken:fails' (my_section_broken:fails, path "
                                "(no distribution)) failed: KeyError: \"no column 'nope'\""),
    ("my_section_broken:wrong_kind", "block 1 is a int; a section yields text, matplotlib figures"),
    ("my_section_broken:missing", "module 'my_section_broken' has no attribute 'missing'"),
])
def test_a_broken_section_is_an_error_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                                                message: str) -> None:
    (tmp_path / "my_section_broken.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(sections.SectionError) as err:
            sections.body(name, results())
        assert message in str(err.value)
    finally:
        sys.modules.pop("my_section_broken", None)


def test_a_failing_sections_traceback_is_shown_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "my_section_broken.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        monkeypatch.delenv("ABLATE_TRACEBACK", raising=False)
        with pytest.raises(sections.SectionError, match="; ABLATE_TRACEBACK=1 shows its traceback$"):
            sections.body("my_section_broken:fails", results())
        assert capsys.readouterr().err == ""
        monkeypatch.setenv("ABLATE_TRACEBACK", "1")
        with pytest.raises(sections.SectionError) as err:
            sections.body("my_section_broken:fails", results())
        assert str(err.value).endswith("failed: KeyError: \"no column 'nope'\"")
        shown = capsys.readouterr().err
        assert shown.startswith("traceback of report section 'my_section_broken:fails'")
        assert "my_section_broken.py\", line 4, in fails" in shown
    finally:
        sys.modules.pop("my_section_broken", None)


def test_a_section_by_path_that_cannot_be_loaded_is_refused_before_anything_renders(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_section_broken.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    try:
        assert sections.is_section("my_section_broken:fails")  # resolved, not run
        with pytest.raises(sections.SectionError) as err:
            render.render("sect", ["accuracy", "my_section_broken:nope"], out, ("html",), data=results())
        assert str(err.value) == "section plug-in 'my_section_broken:nope': module 'my_section_broken' has no attribute 'nope'"
        assert not out.exists()  # the accuracy page before it was not rendered
        # a refusal where it reaches the command: exit 2, its message printed as it is (no markup read)
        assert err.value.code == 2 and err.value.lines == [str(err.value)]
    finally:
        sys.modules.pop("my_section_broken", None)


def test_a_section_that_raises_after_others_rendered_leaves_the_folder_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_section_broken.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    out.mkdir()
    (out / "parity_accuracy.html").write_text("the last render's page")
    try:
        with pytest.raises(render.ReportError, match="my_section_broken:fails"):
            render.render("sect", ["parity_accuracy", "my_section_broken:fails"], out, ("html",), export=True,
                          data=results())
        # parity_accuracy's page and its figures were rendered first, but nothing of this render was kept.
        assert sorted(p.name for p in out.iterdir()) == ["parity_accuracy.html"]
        assert (out / "parity_accuracy.html").read_text() == "the last render's page"
        fresh = tmp_path / "fresh"
        with pytest.raises(render.ReportError):
            render.render("sect", ["parity_accuracy", "my_section_broken:fails"], fresh, ("html",), data=results())
        assert not fresh.exists()  # and no empty folder it made
    finally:
        sys.modules.pop("my_section_broken", None)
