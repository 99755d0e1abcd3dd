"""Rendering (``ablate.report.render``): pages that do not depend on the host's fonts, row groups
that never split across pages, and a failing notebook cell reported by name."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from pdfs import flat, page_problems, pages
from support import ABLATE

from ablate.report import fonts, render
from ablate.report import format as fmt

needs_poppler = pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils is not installed")


def _html(*blocks: str) -> str:
    """A report page as the renderer writes one: nbconvert's template and stylesheet, our print CSS."""
    cells = [nbformat.v4.new_markdown_cell("# A report\n\n## A section heading that wraps somewhere")]
    for block in blocks:
        cell = nbformat.v4.new_code_cell("")
        cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": block})]
        cells.append(cell)
    return render.to_html(nbformat.v4.new_notebook(cells=cells), "test")


def _wide_table() -> str:
    frame = pd.DataFrame({
        "source": ["Made-up et al. 2024, Table 2", "Other paper (longer training)", "Pending paper", ""],
        "confirmed": ["yes", "no (unconfirmed)", "no (unconfirmed)", ""],
        "cell": ["normalisation=xi, layers=1", "normalisation=gamma, layers=2", "normalisation=none, layers=1",
                 "normalisation=none, layers=2"],
        "published": ["0.500", "0.300", "0.400", ""],
        "ours: mean [95% CI]": ["0.125 [−0.272,\u00a00.522]", "0.031", "pending", "pending"],
        "ours − published": ["−0.375", "−0.269", "—", "—"],
        "published in our CI": ["yes", "—", "—", "—"],
    })
    return fmt.table_block(frame, intro="**Table 1.** Published values next to ours, in a paragraph long enough "
                                        "to wrap over several lines of the page at any font width.",
                           heading="Against published numbers")


# --- fonts -------------------------------------------------------------------------------------


def _liberation_dirs() -> list[str]:
    """Directories holding Liberation fonts: ``$ABLATE_TEST_LIBERATION_DIR`` (e.g. ``apt-get download
    fonts-liberation`` unpacked with ``dpkg -x``), else the system's."""
    given = os.environ.get("ABLATE_TEST_LIBERATION_DIR")
    if given:
        return [given]
    listed = subprocess.run(["fc-list", "Liberation Sans", "file"], capture_output=True, text=True).stdout \
        if shutil.which("fc-list") else ""
    return sorted({str(Path(line.split(":")[0]).parent) for line in listed.splitlines() if line.strip()})


def _fontconfig(tmp: Path, name: str, dirs: list[str], system: bool = False) -> Path:
    """A fontconfig file naming ``dirs`` — and, with ``system``, the host's own configuration (its
    font directories and its alias rules, which send a stylesheet's Arial or Helvetica to Liberation)."""
    conf = tmp / f"{name}.conf"
    body = ('<include ignore_missing="yes">/etc/fonts/fonts.conf</include>' if system else "") + "".join(
        f"<dir>{d}</dir>" for d in dirs)
    conf.write_text(f'<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "fonts.dtd"><fontconfig>{body}'
                    f"<cachedir>{tmp / (name + '-cache')}</cachedir></fontconfig>")
    return conf


def _pdf_under(conf: Path, html: Path, out: Path) -> None:
    """``to_pdf`` in a process of its own, with only the fonts ``conf`` names (fontconfig reads
    FONTCONFIG_FILE once, at start)."""
    code = ("import sys; from pathlib import Path; from ablate.report.render import to_pdf; "
            "to_pdf(Path(sys.argv[1]).read_text(), Path(sys.argv[2]))")
    env = {**os.environ, "FONTCONFIG_FILE": str(conf)}
    subprocess.run([sys.executable, "-c", code, str(html), str(out)], check=True, env=env, timeout=300,
                   capture_output=True)


def _words(pdf: Path) -> list[tuple[str, str, str]]:
    bbox = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    return re.findall(r'<word xMin="([\d.]+)" yMin="([\d.]+)"[^>]*>([^<]*)</word>', bbox)


@needs_poppler
def test_the_page_is_the_same_whatever_fonts_the_host_has(tmp_path):
    """On a host with Liberation fonts (any host with Chromium) the headers used to wrap differently
    and the header text test failed. Rendered once with the host's fonts and alias rules plus
    Liberation, and once with no font at all, the pages must be identical word for word, in the
    reports' fonts only. (The renderer before this test picked Liberation Sans for nbconvert's
    headings here, and its word boxes differed between the two.)"""
    liberation = _liberation_dirs()
    if not liberation:
        pytest.skip("no Liberation fonts here (set ABLATE_TEST_LIBERATION_DIR to an unpacked fonts-liberation)")
    html = tmp_path / "page.html"
    html.write_text(_html(_wide_table(), "<p>Code: <code>stats.min_effect</code>, <b>bold</b> and <em>italic</em>.</p>"))
    with_liberation, without_any = tmp_path / "liberation.pdf", tmp_path / "none.pdf"
    _pdf_under(_fontconfig(tmp_path, "liberation", liberation, system=True), html, with_liberation)
    _pdf_under(_fontconfig(tmp_path, "none", []), html, without_any)
    fonts_used = subprocess.run(["pdffonts", str(with_liberation)], capture_output=True, text=True).stdout
    names = {line.split()[0].split("+")[-1] for line in fonts_used.strip().splitlines()[2:]}
    assert names and all(n.startswith("ablate-") for n in names), names
    assert "Liberation" not in fonts_used
    assert _words(with_liberation) == _words(without_any)
    text = flat("".join(pages(with_liberation)))
    assert flat("published in our CI") in text and flat("ours: mean [95% CI]") in text


def test_the_fonts_are_named_files_that_exist():
    assert all(path.is_file() for path in fonts.files()) and fonts.LICENSE.is_file()
    css = fonts.font_face_css()
    assert css.count("@font-face") == len(fonts.FILES) and "url('file://" in css and "http" not in css
    from matplotlib import font_manager

    from ablate.report import plotting

    with plotting.style():
        found = Path(font_manager.findfont(font_manager.FontProperties(family=fonts.MATPLOTLIB_FAMILY)))
    assert found.parent.resolve() == fonts.DIRECTORY.resolve()  # matplotlib draws with the very files WeasyPrint embeds


# --- page breaks ---------------------------------------------------------------------------------


@needs_poppler
def test_row_groups_never_split_across_pages(tmp_path):
    """Tables of row groups starting at many heights of a page: short ones (where WeasyPrint, with
    a repeating header, broke inside the first group of a table starting near the foot of a page)
    and a long one that runs over several pages."""
    def split_groups(frame: pd.DataFrame, above_mm: int, groups: int, per: int) -> list[int]:
        block = fmt.table_block(frame, intro="The marginal mean of each level: a paragraph kept with its table.",
                                heading="Main effects")
        pdf = tmp_path / f"groups-{above_mm}.pdf"
        render.to_pdf(_html(f'<div style="height: {above_mm}mm"></div>', block), pdf)
        text = pages(pdf)
        for r in range(per):  # nothing dropped
            assert sum(f"g00r{r}" in page for page in text) == 1
        return [g for g in range(groups) if len({i for i, page in enumerate(text) for r in range(per)
                                                 if f"g{g:02d}r{r}" in page}) > 1]

    def table(groups: int, per: int) -> pd.DataFrame:
        return pd.DataFrame([{"factor": f"model.factor{g:02d}", "level": f"g{g:02d}r{r}", "cells": "2/2", "runs": "4",
                              "marginal mean [95% CI]": "0.512 [0.480,\u00a00.544]"}
                             for g in range(groups) for r in range(per)])

    short = table(2, 2)
    for above in range(196, 256, 2):  # every 2 mm through the foot of the page
        assert not split_groups(short, above, 2, 2), above
    assert not split_groups(table(30, 3), 120, 30, 3)


@needs_poppler
def test_a_table_part_keeps_its_caption_on_its_own_page(tmp_path):
    """A table too wide for a page is set in parts, each captioned "part k of n"; a part that moves to
    the next page takes its caption along (WeasyPrint left it at the foot of the page before)."""
    wide = pd.DataFrame({"cell": [f"parameterisation=rotation, layers={k}" for k in range(6)],
                         **{f"measure number {j} [95% CI]": [f"0.{k}1{j} [0.{k}0{j}, 0.{k}2{j}]" for k in range(6)]
                            for j in range(14)}})
    apart = 0
    for above in range(40, 250, 15):  # the parts' tops at many heights of page one
        pdf = tmp_path / f"parts-{above}.pdf"
        render.to_pdf(_html(f'<div style="height: {above}mm"></div>', fmt.table_block(wide, "An answer.")), pdf)
        text = pages(pdf)
        on = [next(i for i, page in enumerate(text) if f"part {k} of" in page) for k in (1, 2)]
        for k, i in enumerate(on, 1):  # its rows follow its caption on its page
            assert "layers=0" in text[i].split(f"part {k} of")[1], (above, k)
        apart += on[1] > on[0]
    assert apart  # some heights set the parts on two pages


@needs_poppler
def test_identifiers_break_at_their_separators_never_inside(tmp_path):
    """A study's variants named by every factor (``parameterisation=complex_diagonal, …``) in a wide
    table's first column and a narrow one's text column: a line may break after ``=`` or ``,``, never
    inside ``complex_diagonal`` (the reports' Table 1 and the comparison's Table 4 printed
    ``complex_diagon`` / ``al``), and no line begins with the separator."""
    labels = [f"parameterisation={p}, normalisation={n}, layers={k}" for p in ("rotation", "complex_diagonal")
              for n in ("xi", "gamma") for k in (1, 4)]
    wide = pd.DataFrame({"cell": labels, "n": "6", "mean [95% CI]": "0.487 [0.468,\u00a00.505]",
                         **{f"measure {i}": "0.026 [0.001,\u00a00.05]" for i in range(5)}})
    narrow = pd.DataFrame({"factor": "model.parameterisation", "level": [f"complex_diagonal_{k}" for k in range(3)],
                           "variant": labels[4:7], "mean": "0.5"})
    pdf = tmp_path / "labels.pdf"
    render.to_pdf(_html(fmt.table_block(wide, "**Table 1.** Wide."), fmt.table_block(narrow, "**Table 2.** Narrow.")),
                  pdf)
    text = pages(pdf)
    assert "parameterisation=complex_diagonal" in flat("".join(text))
    assert page_problems(pdf, ["complex_diagonal", "complex_diagonal_1"]) == []
    lines = [line for page in text for line in page.splitlines()]
    assert "parameterisation=" in lines and "complex_diagonal," in lines  # the wide table's cells broke after "="


@needs_poppler
def test_a_report_from_a_committed_export_passes_the_page_check(tmp_path):
    """The smallest committed export's accuracy report, rendered with no store: no identifier split
    inside a word, no line that begins with a separator, no page under a third full but the last."""
    data = tmp_path / "data"
    shutil.copytree(Path(__file__).resolve().parents[1] / "reports" / "null_task_seed" / "data", data)
    env = {k: v for k, v in os.environ.items() if k not in ("ABLATE_STORAGE", "ABLATE_TRACKING_URI")}
    env.update(ABLATE_HOME=str(tmp_path / ".ablate"), ABLATE_CACHE_DIR=str(tmp_path / "cache"))
    res = subprocess.run([*ABLATE, "report", "--data", str(data), "--reports", "accuracy", "--format", "pdf",
                          "--out", str(tmp_path / "out")], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    assert page_problems(tmp_path / "out" / "accuracy.pdf") == []


# --- failures ------------------------------------------------------------------------------------


def test_a_failing_cell_is_named_with_its_error_not_a_traceback(tmp_path):
    """A cell that raises, here on a value the commands refuse before rendering (``--param`` is
    checked by ``ablate.report.parameters``; ``render`` takes its parameters as given): named by its
    section, its first line and the error, and the ``out_dir`` it made taken away again."""
    from ablate import results

    export = Path(__file__).resolve().parents[1] / "reports" / "null_task_seed" / "data"
    out = tmp_path / "new" / "broken"
    with pytest.raises(render.ReportError) as caught:
        render.render("null_task_seed", ["accuracy"], out, ("html",), parameters={"cells_per_figure": 0},
                      data=results.read_export(export))
    message = " ".join(str(caught.value).split())
    assert "report 'accuracy' failed in the cell under \"Per cell\" (`for part in chunks(" in message, message
    assert "ValueError" in message and re.search(r"ablate/report/display\.py:\d+", message), message
    assert "Traceback" not in message and "Papermill" not in message and "----" not in message
    assert not out.exists() and not out.parent.exists()  # nothing written, no empty folder left


def test_the_same_notebook_gives_the_same_page():
    """A re-render of a committed report changes only what the data changed: nbformat gives new
    notebooks' cells random ids, which the page would otherwise carry into its HTML."""
    first, second = _html("<p>one</p>"), _html("<p>one</p>")
    assert first == second and 'id="cell-id=cell-1"' in first


# --- from an export, with no store ------------------------------------------------------------------


def test_a_report_rendered_from_an_export_is_the_one_rendered_from_the_stores(norm_study, tmp_path):
    """`ablate export`, then `ablate report --data` with the stores pointed at an empty folder: every
    page byte for byte the page rendered from the stores (its tables, numbers and figures)."""
    import real_studies as studies

    def ablate(home: Path, *args: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k not in ("ABLATE_STORAGE", "ABLATE_TRACKING_URI")}
        env.update(ABLATE_HOME=str(home), ABLATE_CACHE_DIR=str(tmp_path / "cache"))
        res = subprocess.run([*ABLATE, *args], capture_output=True, text=True, env=env,
                             cwd=tmp_path, timeout=600)
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
        return res

    name, home = studies.NORM["name"], norm_study / ".ablate"
    ablate(home, "export", name, str(tmp_path / "data"))
    ablate(home, "report", name, "--format", "html", "--out", str(tmp_path / "from-stores"))
    empty = tmp_path / "empty"
    empty.mkdir()
    ablate(empty / ".ablate", "report", "--data", str(tmp_path / "data"), "--format", "html", "--out",
           str(tmp_path / "from-export"))
    assert not any(empty.iterdir())  # no store was created, or looked for and made
    pages = sorted(p.name for p in (tmp_path / "from-stores").iterdir())
    assert pages == ["accuracy.html", "norm_stability.html"]
    assert sorted(p.name for p in (tmp_path / "from-export").iterdir()) == pages
    for page in pages:
        assert (tmp_path / "from-export" / page).read_text() == (tmp_path / "from-stores" / page).read_text(), page


# --- what a command renders, decided before any kernel starts -------------------------------------


def _queued(home: Path) -> tuple[str, str]:
    """Two studies queued, not run, in ``home``: qa (heads 2 and 4; its spec lists the accuracy
    report) and qb (heads 2; every report); their stores."""
    from ablate import design
    from ablate.runner import study as st
    from ablate.stores import resolve

    stores = resolve(home_dir=home)
    for name, heads, reports in (("qa", [2, 4], {"reports": ["accuracy"]}), ("qb", [2], {})):
        spec = design.validate({"name": name, "task": {"name": "listops", "max_length": 20, "train_size": 32},
                                "model": {"d_model": 8, "state_dim": 8, "layers": 1}, "factors": {"model.heads": heads},
                                **reports})
        st.prepare(spec, design.items(spec), stores)
    return stores.storage, stores.tracking


def test_comparison_decides_studies_cells_and_name_or_says_why_not(tmp_path):
    """``render.comparison`` (``ablate compare`` before it renders) in process: the studies, their
    cells and the name from the arguments, a spec's ``compare:`` or exports; each refusal typed."""
    from ablate import design, results
    from ablate.runner.study import StorageError
    from ablate.spec import SpecError

    storage, tracking = _queued(tmp_path / "h")
    assert render.comparison(["qa", "qb"], storage=storage, tracking_uri=tracking) == \
        render.Comparison(["qa", "qb"], [], "qa-qb")
    got = render.comparison(["qa", "qb"], ["model.heads=2", "{model.heads: [2, 4]}"], name="x", storage=storage,
                            tracking_uri=tracking)
    assert got.selectors == [{"model.heads": 2}, {"model.heads": [2, 4]}] and got.name == "x"
    base = {"task": {"name": "listops"}}
    spec = design.validate({**base, "name": "c", "compare": ["qa", {"study": "qb", "cells": {"model.heads": 2}}]})
    assert render.comparison([], spec=spec, storage=storage, tracking_uri=tracking) == \
        render.Comparison(["qa", "qb"], {"qb": [{"model.heads": 2}]}, "c")
    refused = {
        (): "name the studies to compare (or --spec FILE)",
        ("qa",): "--cells (study qa): cells.model.heads: 16 is not a level of model.heads; levels: 2, 4",
    }
    for studies, line in refused.items():
        with pytest.raises(render.ComparisonError) as info:
            render.comparison(list(studies), ["model.heads=16"], storage=storage, tracking_uri=tracking)
        assert info.value.lines == [line]
    with pytest.raises(render.ComparisonError) as info:
        render.comparison([], spec=design.validate({**base, "name": "nc"}), storage=storage, tracking_uri=tracking)
    assert info.value.lines == ["nc: the spec has no `compare:` section (e.g. compare: [studyA, {study: studyB, "
                                "cells: {model.heads: 8}}])"]
    with pytest.raises(SpecError, match="'model.heads' is not of the form key=value"):
        render.comparison(["qa"], ["model.heads"], storage=storage, tracking_uri=tracking)
    with pytest.raises(render.ComparisonError, match="'haeds' is not a key of the baseline; did you mean 'model.heads'"):
        render.comparison(["qa"], ["model.haeds=4"], storage=storage, tracking_uri=tracking)
    with pytest.raises(StorageError, match="no study named 'nope'"):
        render.comparison(["qa", "nope"], storage=storage, tracking_uri=tracking)
    # From exports: their studies (or those the spec names, in its order), and no store opened.
    assert list(results.export_many(["qa", "qb"], tmp_path / "data", storage, tracking))
    nowhere = f"sqlite:///{tmp_path / 'none' / 'optuna.db'}"
    got = render.comparison([], data=[tmp_path / "data"], storage=nowhere, tracking_uri=nowhere)
    assert (got.studies, got.name, got.data.names) == (["qa", "qb"], "qa-qb", ["qa", "qb"])
    flipped = design.validate({**base, "name": "f", "compare": ["qb", "qa"]})
    assert render.comparison([], spec=flipped, data=[tmp_path / "data"], storage=nowhere).data.names == ["qb", "qa"]
    with pytest.raises(results.ExportError, match=r"the exports hold no study 'nope' \(they hold: qa, qb\)"):
        render.comparison([], spec=design.validate({**base, "name": "m", "compare": ["qa", "nope"]}),
                          data=[tmp_path / "data"])
    assert not (tmp_path / "none").exists()


def test_the_reports_of_a_study_or_an_export_come_from_its_spec(tmp_path, monkeypatch):
    """``render.study_reports`` and ``export_reports`` (``ablate report`` before it renders) in
    process: the reports the spec lists (every one when it lists none) unless some are chosen, and
    the stores found from a subfolder of the project."""
    from ablate import results
    from ablate.report import REPORTS
    from ablate.runner.study import StorageError

    for key in ("ABLATE_HOME", "ABLATE_STORAGE", "ABLATE_TRACKING_URI"):
        monkeypatch.delenv(key, raising=False)
    storage, tracking = _queued(tmp_path / ".ablate")
    nested = tmp_path / "analysis"
    nested.mkdir()
    monkeypatch.chdir(nested)
    stores, names = render.study_reports("qa")
    assert (stores.storage, stores.tracking, names) == (storage, tracking, ["accuracy"])
    assert render.study_reports("qb")[1] == list(REPORTS)
    assert render.study_reports("qa", only=["norm_stability"]) == (stores, ["norm_stability"])
    with pytest.raises(StorageError, match=r"no study named 'qc'.*no .ablate folder above .* holds it either"):
        render.study_reports("qc")
    exported = {d.study: results.read_export(d.path) for d in results.export_many(["qa", "qb"], tmp_path / "data")}
    assert render.export_reports(exported["qa"]) == ["accuracy"]
    assert render.export_reports(exported["qb"]) == list(REPORTS)
    assert render.export_reports(exported["qb"], ["accuracy"]) == ["accuracy"]
    assert not (nested / ".ablate").exists()


# --- a report's options (spec.reports): the cells, their order, the sections ----------------------------


def test_report_options_select_cells_and_order_variants() -> None:
    import synthetic_study

    from ablate.report.render import apply_options
    from ablate.spec.reports import ReportOptions

    res = synthetic_study.scaled(synthetic_study.GRIDS[12], seeds=2)
    opts = ReportOptions(name="accuracy", cells=[{"model.layers": 1}, {"model.layers": 4}],
                         order=["model.normalisation", "model.layers"])
    shown = apply_options(res, opts)
    trials = shown.trials
    assert set(trials["model.layers"].cast(str)) == {"1", "4"}
    assert set(shown.curves["cell_id"]) == set(trials["cell_id"])  # every frame cut alike
    order = trials.select("model.normalisation", "model.layers").unique(maintain_order=True).rows()
    assert order == [("xi", "1"), ("xi", "4"), ("gamma", "1"), ("gamma", "4")]
    assert apply_options(res, ReportOptions(name="accuracy")).trials.equals(res.trials)


def test_sections_keep_the_header_and_follow_the_order_given() -> None:
    from nbformat.v4 import new_code_cell, new_markdown_cell

    from ablate.report.render import keep_sections

    cells = [new_markdown_cell("# Accuracy"), new_code_cell("header"), new_markdown_cell("## The answer"),
             new_code_cell("answer"), new_markdown_cell("## Summary\nwhat it says"), new_code_cell("summary"),
             new_markdown_cell("## Few-run estimates"), new_code_cell("few")]
    kept = keep_sections(cells, ["few-run-estimates", "the-answer"])
    assert [c.source for c in kept] == ["# Accuracy", "header", "## Few-run estimates", "few", "## The answer",
                                        "answer"]
