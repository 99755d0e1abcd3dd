"""`ablate compare --data` (and `ablate report --data DIR --compare`): the comparison report
rendered from exports, with no store — the page the stores give — and what it refuses.

Two tiny studies on one ListOps set (7 runs of 8 steps): ``cmpx-ref`` (2 heads, 3 seeds) and
``cmpx-more`` (4 heads, 4 seeds), so that an over-seeds comparison has 4 seeds on one side and 3
on the other and must use as many on both."""

from __future__ import annotations

import html as _html
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import real_studies as studies
from typer.testing import CliRunner

from ablate.cli import app
from ablate.report.norm_tables import MEASURE_WORDS

REF = {**studies.FIRST, "name": "cmpx-ref", "factors": {"model.normalisation": ["xi"]}, "seeds": 3}
MORE = {**REF, "name": "cmpx-more", "model": {**REF["model"], "heads": 4}, "seeds": 4}
NAMES = [REF["name"], MORE["name"]]


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Both studies trained in-process as `ablate run` does, then exported by `ablate export` into
    ``root/data/STUDY`` each; the stores stay beside them under ``root/.ablate`` (on tmpfs where
    there is one: SQLite's syncs make Optuna several times slower on disk)."""
    shm = Path("/dev/shm")
    root = (Path(tempfile.mkdtemp(prefix="ablate-test-", dir=shm)) if shm.is_dir() and os.access(shm, os.W_OK)
            else tmp_path_factory.mktemp("compare-exports"))
    try:
        yield _build(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _build(root: Path) -> Path:
    from ablate.design import items, validate
    from ablate.runner import study as st
    from ablate.runner.worker import work
    from ablate.stores import resolve

    with pytest.MonkeyPatch.context() as mp:
        studies.study_env(mp, root)
        stores = resolve()
        for raw in (REF, MORE):
            spec = validate(raw)
            st.prepare(spec, items(spec), stores)
            assert work(spec.name, stores) == {"complete": len(items(spec))}
        res = cli("export", *NAMES, str(root / "data"))
        assert res.exit_code == 0, res.output
    return root


def no_stores(mp: pytest.MonkeyPatch, root: Path) -> Path:
    """The default stores pointed at an empty folder: a command that looked for them would make them."""
    empty = root / "empty"
    empty.mkdir(exist_ok=True)
    studies.study_env(mp, empty)
    return empty


def table_rows(page: str, caption: str) -> list[list[str]]:
    """The body rows (cell texts) of the first table after the paragraph that starts with ``caption``."""
    start = page.index(caption)
    table = page[page.index("<table", start):page.index("</table>", start)]
    body = table[table.index("<tbody"):]
    return [[" ".join(_html.unescape(re.sub(r"<[^>]+>", "", c)).split()) for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
            for r in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)]


def test_a_comparison_renders_from_exports_with_no_store(exports, tmp_path, monkeypatch):
    from ablate import results

    data = exports / "data"
    with monkeypatch.context() as mp:  # what the stores give is what the exports hold
        studies.study_env(mp, exports)
        stored = results.load(NAMES, curves=True, metrics=True)
    exported = results.read_exports([data / n for n in NAMES])
    assert exported.names == NAMES
    for ours, theirs in zip(exported.frames(), stored.frames(), strict=True):
        assert ours.equals(theirs)
    assert exported.variants().equals(stored.variants()) and exported.summaries() == stored.summaries()

    empty = no_stores(monkeypatch, tmp_path)
    res = cli("compare", "--data", str(data / REF["name"]), "--data", str(data / MORE["name"]), "--format", "html",
              "--name", "tiny", "--out", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    assert not any(empty.iterdir())  # no store was created, or looked for and made
    page = (tmp_path / "out" / "comparison.html").read_text()
    assert "<title>tiny — comparison</title>" in page
    # Page one: the answer first — the heads=4 variant's difference from the reference, in the same 3 pairs.
    assert [r[:2] for r in table_rows(page, "Table 1. Each variant against the reference")] == [["heads=4", "3 pairs"]]
    assert [r[0] for r in table_rows(page, "Table 2. The studies.")] == NAMES
    variants = {r[0]: r[1] for r in table_rows(page, "Table 3. The variants")}
    assert variants == {"heads=2 (reference)": "cmpx-ref", "heads=4": "cmpx-more"}
    # heads, the one setting the studies differ in, is in the labels: no table of what they leave out
    assert "What the labels leave out" not in page
    assert [r[0] for r in table_rows(page, "Table 4.")] == ["heads=2 (reference)", "heads=4"]
    assert [r[1] for r in table_rows(page, "Table 4.")] == ["3", "4"]  # every run of each study counts
    # A spread over 4 seeds against one over 3 would depend on the counts: over seeds both sides
    # take the 3 seeds they share, and so do the per-seed measures (paired).
    ratios = table_rows(page, "Table 8.")
    head = page[page.index("Table 8."):]
    head = _html.unescape(head[head.index("<thead"):head.index("</thead>")])
    assert all(words in head for words in MEASURE_WORDS.values())
    assert [r[:2] for r in ratios] == [["heads=4", "3 pairs"]], ratios
    text = " ".join(_html.unescape(re.sub(r"<[^>]+>", "", page)).split())
    assert "Over seeds (spread of log ‖x‖²): 0 of 1 tested comparisons are significant at α = 0.05" in text
    # One family for everything the comparison tests, said once with its m, which every sentence quotes.
    m = int(re.search(r"One family for this comparison: .*?, m = (\d+) tests", text).group(1))
    assert m == 1 + len(MEASURE_WORDS)  # accuracy and the four norm measures, one comparison each
    assert (f"With 3 seeds no comparison can be significant: the exact test cannot give a p below 0.25 on any "
            f"comparison, above Holm's first threshold over this comparison's {m} tests") in text
    assert "the study's" not in text and "Holm within each measure" not in text
    assert "Pairs. A test pairs seed s of a variant with seed s of the reference" in text


def test_report_data_compare_renders_one_comparison_of_a_folder_of_exports(exports, tmp_path, monkeypatch):
    """`ablate report --data DIR --compare` is `ablate compare --data DIR`: every export in the
    folder, the selection applied; nothing looks for a store."""
    from ablate.report import render

    calls = []

    def fake(studies_, out_dir, cells, formats, storage, tracking_uri, parameters, title="", data=None):
        calls.append((studies_, out_dir, cells, title, data))
        return []

    monkeypatch.setattr(render, "render_comparison", fake)
    no_stores(monkeypatch, tmp_path)
    res = cli("report", "--data", str(exports / "data"), "--compare", "--cells", "model.normalisation=xi",
              "--out", str(tmp_path / "o"))
    assert res.exit_code == 0, res.output
    ((names, out_dir, cells, title, data),) = calls
    assert names == sorted(NAMES) == data.names and title == "-".join(sorted(NAMES))
    assert cells == [{"model.normalisation": "xi"}] and out_dir == tmp_path / "o"
    assert data.trials.height == 3 + 4


def test_compare_data_refuses_on_one_line_with_exit_2(exports, tmp_path, monkeypatch):
    data = exports / "data"
    (tmp_path / "busy").mkdir()
    spec = tmp_path / "c.yaml"
    spec.write_text(f"name: c\ntask: {{name: listops}}\ncompare: [{REF['name']}, nope]\n")
    no_stores(monkeypatch, tmp_path)
    refused = {
        ("compare", REF["name"], "--data", str(data)): "give no study with it",
        ("compare", "--data", str(tmp_path / "busy")): "has no manifest.json",
        ("compare", "--data", str(data / REF["name"]), "--data", str(data)): "are both exports of study 'cmpx-ref'",
        ("compare", "--spec", str(spec), "--data", str(data)): "the exports hold no study 'nope'",
        ("compare", "--data", str(data), "--cells", "model.haeds=4"): "did you mean 'model.heads'",
        ("report", REF["name"], "--data", str(data), "--compare"): "give no study with it",
    }
    for args, message in refused.items():
        res = cli(*args)
        assert res.exit_code == 2, (args, res.output)
        assert message in " ".join(res.output.split()), (args, res.output)
    assert not list(tmp_path.rglob("*.html"))
