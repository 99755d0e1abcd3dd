"""The accuracy report on a real, partial study: results API additions, tables, the rendered HTML/PDF.

One small study is shared by the module: a 2 × 2 grid (normalisation × layers) that tunes the
learning rate (one trial per cell) and replicates on two seeds, with one replicate failing by an
injected fault; then the spec grows a third normalisation level whose cells stay pending.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from ablate import stats
from ablate.report import tables as tb

NAME = "accrep"
SPEC = {
    "name": NAME,
    "description": "accuracy report test study",
    "task": {"name": "listops", "max_depth": 3, "max_length": 20, "train_size": 64, "val_size": 32,
             "test_size": 32, "seed": 0},
    "model": {"d_model": 8, "state_dim": 4, "layers": 1, "heads": 1},
    "train": {"steps": 4, "batch_size": 8, "eval_every": 2, "log_every": 2},
    "probes": {"enabled": False},  # the accuracy report reads no norm curves
    "factors": {"model.normalisation": ["xi", "gamma", "none"], "model.layers": [1, 2]},
    "seeds": 2,
    "tune": {"trials": 1, "space": {"train.lr": {"low": 1e-3, "high": 1e-2, "log": True}}},
    "references": [
        {"value": 0.5, "source": "Made-up et al. 2024, Table 2", "confirmed": True},
        {"value": 0.3, "source": "Other paper", "cell": {"model.normalisation": "gamma", "model.layers": 2},
         "note": "longer training"},
        {"value": 0.4, "source": "Pending paper", "cell": {"model.normalisation": "none"}},
    ],
}
FAILING = {"model.normalisation": "gamma", "model.layers": "2"}  # its replicate on seed 1 fails


def _cli(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "ABLATE_HOME": str(root / ".ablate"), "ABLATE_CACHE_DIR": str(root / "cache")}
    env.pop("ABLATE_STORAGE", None)
    env.pop("ABLATE_TRACKING_URI", None)
    res = subprocess.run([sys.executable, "-m", "ablate.cli", *args], capture_output=True, text=True, cwd=root,
                         env=env, timeout=600)
    if check:
        assert res.returncode == 0, f"{args}: {res.stdout}\n{res.stderr}"
    return res


def _run(spec, stores, fail_key: str | None) -> None:
    """What `ablate run` does, in process, with a fault injected into one item."""
    from ablate.design import items, spec_hash
    from ablate.runner import phases, tracking
    from ablate.runner import study as st
    from ablate.runner.worker import run_item

    study, _ = st.prepare(spec, items(spec), stores)
    parent = tracking.start_parent_run(stores, spec.name, json.dumps(spec.model_dump()), spec_hash(spec))
    study.set_user_attr("mlflow_parent_run_id", parent)
    while (trial := phases.claim(study)) is not None:
        fault = trial.user_attrs.get("item") == fail_key
        if fault:
            os.environ["ABLATE_FAULT"] = "error@1"
        try:
            run_item(study, trial, stores, "cpu", lambda event, info: None)
        finally:
            os.environ.pop("ABLATE_FAULT", None)


@pytest.fixture(scope="module")
def study_root(tmp_path_factory) -> Path:
    from ablate.design import items
    from ablate.runner import study as st
    from ablate.spec import validate
    from ablate.stores import resolve

    root = tmp_path_factory.mktemp("accuracy")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ABLATE_HOME", str(root / ".ablate"))
        mp.setenv("ABLATE_CACHE_DIR", str(root / "cache"))
        mp.delenv("ABLATE_STORAGE", raising=False)
        mp.delenv("ABLATE_TRACKING_URI", raising=False)
        mp.delenv("ABLATE_FAULT", raising=False)
        stores = resolve()
        first = copy.deepcopy(SPEC)
        first["factors"]["model.normalisation"] = ["xi", "gamma"]
        first["references"] = first["references"][:2]  # the third names a level this subset lacks
        first_spec = validate(first)
        failing = next(i for i in items(first_spec)
                       if i.phase == "replicate" and i.seed == 1 and i.cell.labels == FAILING)
        _run(first_spec, stores, failing.key)
        full = validate(SPEC)
        st.prepare(full, items(full), stores)  # the third level's cells: queued, never run
    (root / "spec.yaml").write_text(yaml.safe_dump(SPEC, sort_keys=False))
    return root


@pytest.fixture(scope="module")
def res(study_root):
    from ablate import results

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ABLATE_HOME", str(study_root / ".ablate"))
        return results.load(NAME, curves=False, metrics=True)


@pytest.fixture(scope="module")
def rendered(study_root) -> Path:
    """The accuracy report, rendered once through the CLI (HTML and PDF), with a chosen reference."""
    _cli(study_root, "report", NAME, "--reports", "accuracy", "--format", "html,pdf", "--out", "out",
         "--param", "reference=normalisation=xi, layers=2", "--param", "alpha=0.05")
    return study_root / "out"


# --- the results API --------------------------------------------------------------------------


def test_results_of_a_partial_study(res):
    t = res.trials
    reps = t.filter(t["phase"] == "replicate")
    assert reps.height == 6 * 2 and t.filter(t["phase"] == "tune").height == 6
    counts = reps["status"].value_counts().sort("status")
    assert dict(counts.iter_rows()) == {"complete": 7, "failed": 1, "pending": 4}
    failed = reps.filter(reps["status"] == "failed").row(0, named=True)
    assert failed["failure_kind"] == "error" and "injected fault" in failed["failure_message"]
    assert failed["model.normalisation"] == "gamma" and failed["seed"] == 1
    tune = t.filter((t["phase"] == "tune") & (t["status"] == "complete"))
    assert tune.height == 4 and tune["tune_index"].to_list() == [0] * 4
    assert all("train.lr" in json.loads(p) for p in tune["params"])
    done = reps.filter(reps["status"] == "complete")
    assert all(s and "/tune/0" in s for s in done["tuned_from"])
    # Metrics carry the phase, so curves can leave the tuning trials out.
    assert set(res.metrics["phase"].unique()) == {"tune", "replicate"}
    assert "val/accuracy" in set(res.metrics["name"].unique())


def test_tuning_summary_per_cell(res):
    tuning = res.tuning().to_pandas()
    assert len(tuning) == 6
    ran = tuning[tuning.complete == 1]
    assert len(ran) == 4 and ran.best_index.eq(0).all() and ran.best_value.between(0, 1).all()
    assert all(0.001 <= json.loads(p)["train.lr"] <= 0.01 for p in ran.best_params)
    pending = tuning[tuning.complete == 0]
    assert len(pending) == 2 and pending.unfinished.eq(1).all() and pending.best_params.isna().all()


def test_reference_cell_and_published_references(res):
    base_id, why = res.reference_cell()
    assert base_id == res.baseline_cell and "baseline" in why
    label = "normalisation=gamma, layers=2"
    cid, why = res.reference_cell(label)
    assert res.trials.filter(res.trials["cell_id"] == cid)["cell_label"][0] == label and "parameter" in why
    with pytest.raises(KeyError, match="cells are"):
        res.reference_cell("no such cell")
    refs = res.references().to_pandas()
    assert list(refs.source) == ["Made-up et al. 2024, Table 2", "Other paper", "Pending paper"]
    assert list(refs.confirmed) == [True, False, False]
    assert list(refs.cell_ids[0]) == [res.baseline_cell]
    assert list(refs.cell_labels[1]) == [label]
    assert sorted(refs.cell_labels[2]) == ["normalisation=none, layers=1", "normalisation=none, layers=2"]


def test_provenance_summary(res):
    prov = res.provenance()
    assert prov["spec_hash"] == res.spec_hash and prov["spec"]["name"] == NAME
    assert prov["counts"] == {"complete": 11, "pending": 6, "failed": 1}
    assert prov["items"] == 18 and prov["cells"] == 6
    assert sum(prov["git_commits"].values()) == 12  # every trial that ran recorded its commit
    assert "cpu" in next(iter(prov["devices"]))
    assert set(prov["versions"]) >= {"python", "torch", "optuna", "mlflow"}
    assert prov["first_started"] <= prov["last_finished"]


def test_provenance_redacts_credentials(res):
    from ablate.results import Results
    from ablate.stores import Stores

    stores = Stores("postgresql+psycopg://alice:s3cret-pw@db.example:5432/ablate",
                    "http://bob:tok3n@mlflow.example:5000", None)
    fake = Results(study=res.study, spec=res.spec, spec_hash=res.spec_hash, stores=stores.describe(),
                   factors=res.factors, trials=res.trials, trial_provenance=res.trial_provenance)
    text = json.dumps(fake.provenance(), default=str)
    assert "s3cret-pw" not in text and "tok3n" not in text
    assert "alice:***@db.example" in text and "bob:***@mlflow.example" in text
    # provenance() redacts again, whatever the caller put into ``stores``.
    raw = Results(study=res.study, spec=res.spec, spec_hash=res.spec_hash,
                  stores={"storage": "postgresql://u:pw123@h/db"}, factors=res.factors, trials=res.trials)
    assert "pw123" not in json.dumps(raw.provenance(), default=str)


# --- statistics and tables on the study -------------------------------------------------------


def test_anova_on_the_levels_with_results(res):
    trials = res.trials.to_pandas()
    factors = ["model.normalisation", "model.layers"]
    ok, why = stats.anova_applicable(trials, "test_accuracy", factors)
    assert not ok and "full factorial" in why
    subset, dropped = stats.anova_on_finished_levels(trials, "test_accuracy", factors)
    assert dropped == {"model.normalisation": ["none"]}
    table = stats.anova(subset, "test_accuracy", factors)
    assert list(table.term) == ["model.normalisation", "model.layers", "model.normalisation × model.layers",
                                "Residual"]
    assert table.loc[table.term == "Residual", "df"].item() == 7 - 4


def test_tables_from_the_study(res):
    trials = res.trials.to_pandas()
    chance = res.chance
    summary = stats.cell_summary(trials, "test_accuracy", chance)
    cells = tb.cell_table(summary, res.baseline_cell)
    assert list(cells.columns) == ["cell", "status", "n", "mean [95% CI]", "median", "sd", "diverged",
                                   "never learned", "failed", "pending"]
    assert cells.cell.iloc[0].endswith("(reference)")
    by = dict(zip(summary.cell_label, cells.to_dict("records"), strict=True))
    assert by["normalisation=gamma, layers=2"]["failed"] == "1" and by["normalisation=gamma, layers=2"]["n"] == 1
    assert by["normalisation=none, layers=1"]["status"] == "pending"
    assert by["normalisation=none, layers=1"]["mean [95% CI]"] == tb.DASH
    failures = tb.failure_table(trials)
    assert list(failures.columns) == ["cell", "phase", "seed", "kind", "attempts", "message"]
    assert failures.kind.tolist() == ["error"] and "injected fault" in failures.message[0]
    refs = tb.reference_table(res.references().to_pandas(), trials, {"test_accuracy": summary})
    assert refs.confirmed.tolist()[0] == "yes" and "no (unconfirmed)" in refs.confirmed.tolist()
    assert refs.source.tolist()[-2:] == ["Pending paper", ""]  # two matching cells, the source named once
    assert refs["ours: mean [95% CI]"].tolist()[-2:] == ["pending", "pending"]


# --- the rendered report ----------------------------------------------------------------------

HEADERS = [
    "Summary", "Test accuracy per cell", "mean [95% CI]", "median", "diverged", "never learned", "pending",
    "Comparisons with the reference", "effect size", "p (Holm)", "rank test",
    "Main effects", "marginal mean [95% CI]", "Interactions", "Analysis of variance", "partial η²",
    "Learning curves", "Tuning", "best setting", "Against published numbers", "published in our CI",
    "Failures", "message", "Provenance", "Package versions", "The spec as run",
]


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) is not installed")
def test_pdf_has_every_section_and_table_header(rendered):
    text = subprocess.run(["pdftotext", "-layout", str(rendered / "accuracy.pdf"), "-"], capture_output=True,
                          text=True, check=True).stdout
    flat = " ".join(text.split())
    missing = [h for h in HEADERS if h not in flat]
    assert not missing, f"not in the PDF text: {missing}"
    assert "Reference cell: normalisation=xi, layers=2 (chosen with the report parameter" in flat
    assert "Partial study" in flat and "model.normalisation: none" in flat  # the ANOVA says what it left out
    assert "injected fault" in flat and "Made-up et al. 2024" in flat and "Other paper" in flat
    assert "did not tune" not in flat and "train.lr" in flat
    assert "The study is partial" in flat


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) is not installed")
def test_pdf_text_stays_inside_the_page(rendered):
    bbox = subprocess.run(["pdftotext", "-bbox", str(rendered / "accuracy.pdf"), "-"], capture_output=True,
                          text=True, check=True).stdout
    pages = re.findall(r'<page width="([\d.]+)" height="([\d.]+)">(.*?)</page>', bbox, re.S)
    assert len(pages) >= 3
    for width, height, body in pages:
        for x0, _y0, x1, y1 in re.findall(r'xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)"', body):
            assert float(x0) >= 0 and float(x1) <= float(width) and float(y1) <= float(height)


def test_html_is_self_contained(rendered):
    html = (rendered / "accuracy.html").read_text(encoding="utf-8")
    assert "<script" not in html.lower()
    for tag in re.findall(r"<(?:img|link|script|iframe|source|video|audio|embed|object)\b[^>]*>", html, re.I):
        for url in re.findall(r'(?:src|href|data)\s*=\s*["\']([^"\']*)', tag, re.I):
            assert not re.match(r"(?i)(https?:)?//", url), f"external resource: {tag[:200]}"
    assert not re.search(r"@import\s+url\(\s*['\"]?(https?:)?//", html, re.I)
    assert html.count("data:image/png;base64") >= 5  # per cell, comparisons, effects, interaction, curves
    assert "<table class=\"ablate" in html


def test_report_cli_rejects_bad_options(study_root):
    res = _cli(study_root, "report", NAME, "--format", "docx", check=False)
    assert res.returncode == 2 and "docx" in res.stderr
    res = _cli(study_root, "report", NAME, "--reports", "accuracy", "--param", "nonsense=1", check=False)
    assert res.returncode == 2 and "reference" in res.stderr
    res = _cli(study_root, "report", NAME, "--reports", "accuracy", "--param", "alpha=lots", check=False)
    assert res.returncode == 2 and "not a float" in res.stderr


# --- formatting and sentences on constructed data ---------------------------------------------


def test_number_formatting():
    assert tb.num(np.nan) == tb.DASH and tb.num(None) == tb.DASH and tb.num(-0.5) == "−0.500"
    assert tb.with_ci(0.5, 0.4, 0.6) == "0.500 [0.400,\u00a00.600]"
    assert tb.with_ci(0.5, np.nan, np.nan) == "0.500"
    assert tb.with_ci(0.01, -0.02, 0.04, sign=True).startswith("+0.010")
    assert tb.pval(0.0001) == "<0.001" and tb.pval(0.0123) == "0.012" and tb.pval(0.5) == "0.50"
    assert tb.share(0, 4) == "0" and tb.share(1, 4) == "1/4\u00a0(25%)" and tb.share(1, 0) == tb.DASH


def _planted(effect: float, seeds: int = 8) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    rows = []
    for cell, shift in (("base", 0.0), ("better", effect), ("same", 0.0)):
        for seed in range(seeds):
            rows.append({"cell_id": cell, "cell_label": f"variant={cell}", "seed": seed, "phase": "replicate",
                         "status": "complete", "variant": cell,
                         "test_accuracy": 0.6 + shift + rng.normal(0, 0.01)})
    return pd.DataFrame(rows)


def test_sentences_report_only_what_the_numbers_say():
    trials = _planted(0.05)
    comp = stats.compare_to_reference(trials, "test_accuracy", "base")
    lines = tb.comparison_sentences(comp, "test_accuracy")
    assert lines[0].startswith("1 of 2 comparisons with the reference (variant=base) is significant")
    better = comp[comp.cell_id == "better"].iloc[0]
    assert lines[1].startswith(f"variant=better beats the reference on test accuracy by {tb.signed(better.mean_diff)}")
    assert f"p_adj = {tb.pval(better.p_adj)}" in lines[1] and "paired t, 8 shared seeds" in lines[1]
    assert "not significant" in lines[2] and "variant=same" in lines[2]
    table = tb.comparison_table(comp)
    assert table[""].tolist() == [better["mark"], "n.s."]
    # A loss: lower is better, so a positive difference trails.
    worse = tb.comparison_sentences(comp, "test_loss", higher_is_better=False)
    assert "variant=better trails the reference" in worse[1]


def test_sentences_when_nothing_can_be_tested():
    trials = _planted(0.0, seeds=1)
    comp = stats.compare_to_reference(trials, "test_accuracy", "base")
    lines = tb.comparison_sentences(comp, "test_accuracy")
    assert lines == ["0 of 0 comparisons with the reference (variant=base) are significant at α = 0.05 after "
                     "Holm's correction; 2 cells have too few completed seeds to test."]
    summary = stats.cell_summary(trials, "test_accuracy", chance=0.7)
    text = " ".join(tb.summary_sentences(summary, "test_accuracy", 0.7, 0.02))
    assert "3 runs in 3 cells never learned" in text
