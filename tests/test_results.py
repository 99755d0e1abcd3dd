"""The results API on real (tiny) studies: the tidy frames, tuning summary, references and
provenance of a partial study, and the curves a norm study stores for it to read (Parquet
artifact, thinned MLflow metrics, one probe batch).

The studies are those of ``tests/real_studies.py``, built once per session (fixtures in conftest).
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import real_studies as studies

NAME = studies.ACCURACY_NAME
STEPS = studies.NORM_STEPS


@pytest.fixture(scope="module")
def res(accuracy_study):
    return studies.load(accuracy_study, NAME, curves=False, metrics=True)


@pytest.fixture(scope="module")
def study(norm_study):
    """The loaded norm study, its stores and its root."""
    from ablate.stores import resolve

    with pytest.MonkeyPatch.context() as mp:
        studies.study_env(mp, norm_study)
        stores = resolve()
    return studies.load(norm_study, studies.NORM["name"]), stores, norm_study


# --- a partial study: trials, tuning, references, provenance --------------------------------------


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


# --- a norm study: what the runs stored for the results API to read ---------------------------------


def test_results_give_one_tidy_frame_and_one_probe_batch(study):
    res, _, _ = study
    curves = res.curves
    for col in ("cell_id", "cell_label", "seed", "variant", "step", "layer", "head", "t", "value", "kind", "quantity"):
        assert col in curves.columns
    assert curves.select("cell_id", "seed").unique().height == 4
    fp = res.metrics.filter(pl.col("name") == "probe/batch_fingerprint")
    assert fp.height == 4 and fp["value"].n_unique() == 1
    assert res.metrics.filter(pl.col("name") == "probe/white_noise_fingerprint")["value"].n_unique() == 1


def test_curves_artifact_has_the_schema(study):
    from ablate.probes import CURVE_SCHEMA
    from ablate.runner import tracking

    res, stores, _ = study
    for run_id in res.trials["mlflow_run_id"]:
        curves = tracking.read_parquet_artifact(stores.tracking, run_id, tracking.CURVES_ARTIFACT)
        assert dict(curves.schema) == CURVE_SCHEMA
        assert set(curves["kind"].unique()) == {"probe", "white_noise", "theory", "spectrum", "grad", "train"}
        probe = curves.filter(pl.col("kind") == "probe")
        assert sorted(probe["step"].unique()) == STEPS
        assert sorted(curves.filter(pl.col("kind") == "grad")["step"].unique()) == STEPS[1:]
        assert sorted(curves.filter(pl.col("kind") == "train")["step"].unique()) == [2, 4, 6, 8]
        dense = probe.filter(pl.col("quantity") == "norm_sq")
        assert dense.height == len(STEPS) * 2 * 2 * dense["t"].n_unique()  # steps × layers × heads × t


def test_thinned_copy_in_mlflow(study):
    from mlflow.tracking import MlflowClient

    res, stores, _ = study
    mlc = MlflowClient(stores.tracking)
    run_id = res.trials["mlflow_run_id"][0]
    for name, steps in (("state_norm/layer1", STEPS), ("white_noise_state_norm/layer0", STEPS),
                        ("theory_state_norm/layer0", STEPS), ("grad_norm/total", STEPS[1:])):
        assert [m.step for m in mlc.get_metric_history(run_id, name)] == steps, name
    curves = res.curves.filter((pl.col("kind") == "probe") & (pl.col("quantity") == "norm_sq_mean")
                               & (pl.col("layer") == 1) & (pl.col("step") == 8)
                               & (pl.col("cell_id") == res.trials["cell_id"][0]) & (pl.col("seed") == res.trials["seed"][0]))
    thinned = mlc.get_metric_history(run_id, "state_norm/layer1")[-1].value
    assert thinned == pytest.approx(curves["value"].mean())


# --- several studies -------------------------------------------------------------------------------


def test_load_of_several_studies_gives_one_frame_with_a_study_column(studies_root):
    three = studies.load(studies_root, ["cmp-a", "cmp-b", "cmp-c"])
    t = three.trials
    assert t.columns[0] == "study" and three.names == ["cmp-a", "cmp-b", "cmp-c"]
    assert dict(t["study"].value_counts().iter_rows()) == {"cmp-a": 4, "cmp-b": 8, "cmp-c": 2}
    # Factor columns unioned: cmp-a and cmp-c do not vary the heads, so they hold their baseline's level.
    assert three.factors == ["model.normalisation", "model.heads"]
    assert set(t.filter(pl.col("study") != "cmp-b")["model.heads"]) == {"2"}
    b = t.filter(pl.col("study") == "cmp-b")
    assert b["reused_from"].to_list().count("cmp-a") == 4 and (b["status"] == "complete").all()
    for frame in (three.metrics, three.curves):
        assert frame.columns[0] == "study" and set(frame["study"]) == {"cmp-a", "cmp-b", "cmp-c"}
    # A reused run's curves are cmp-a's own: the same values under both studies.
    shared = b.filter(pl.col("reused_from") == "cmp-a")["mlflow_run_id"].to_list()
    a = t.filter(pl.col("study") == "cmp-a")
    assert set(shared) <= set(a["mlflow_run_id"].to_list())
    curves = three.curves.filter(pl.col("kind") == "probe")
    cell = b.filter(pl.col("reused_from") == "cmp-a").row(0, named=True)
    pick = curves.filter((pl.col("cell_id") == cell["cell_id"]) & (pl.col("seed") == cell["seed"]))
    per_study = {s: sorted(g["value"].to_list()) for (s,), g in pick.group_by(["study"])}
    assert per_study["cmp-a"] == per_study["cmp-b"] and per_study["cmp-a"]
    assert three["cmp-b"].provenance()["reused_from"] == {"cmp-a": 4} and not three["cmp-a"].provenance()["reused_from"]
    from ablate.report.provenance_tables import provenance_table

    rows = dict(provenance_table(three["cmp-b"].provenance()).itertuples(index=False, name=None))
    assert rows["reused"] == "4 items trained by study cmp-a"
    with pytest.raises(KeyError, match="studies: cmp-a, cmp-b, cmp-c"):
        three["nope"]


# --- dtypes, nulls, where the stores are found -------------------------------------------------------


def test_factor_columns_sort_as_the_spec_lists_levels(res):
    t = res.trials
    assert t.schema["model.normalisation"] == pl.Enum(["xi", "gamma", "none"])
    assert t.schema["model.layers"] == pl.Enum(["1", "2"])
    ordered = t.sort("model.normalisation")["model.normalisation"].unique(maintain_order=True).to_list()
    assert ordered == ["xi", "gamma", "none"]  # the spec's order, not the alphabet's
    assert res.metrics.schema["model.normalisation"] == t.schema["model.normalisation"]
    pandas = t.to_pandas()
    assert list(pandas["model.normalisation"].cat.categories) == ["xi", "gamma", "none"]
    assert pandas["model.normalisation"].cat.ordered or list(
        pandas.sort_values("model.normalisation")["model.normalisation"].drop_duplicates()) == ["xi", "gamma", "none"]


def test_numeric_levels_do_not_sort_as_text(tmp_path):
    """A factor 2 / 16 / 4 sorts 2, 16, 4 as listed (not "16" < "2"), even before anything ran."""
    from ablate import design, results
    from ablate.runner import study as st
    from ablate.stores import resolve

    spec = design.validate({"name": "order", "task": {"name": "listops", "max_length": 20, "train_size": 32},
                            "model": {"d_model": 8, "state_dim": 32, "layers": 1},
                            "factors": {"model.heads": [2, 16, 4]}})
    stores = resolve(home_dir=tmp_path / "h")
    st.prepare(spec, design.items(spec), stores)
    t = results.load("order", home=tmp_path / "h", curves=False).trials
    assert t.sort("model.heads")["model.heads"].to_list() == ["2", "16", "4"]
    assert t.schema["model.heads"] == pl.Enum(["2", "16", "4"])


def test_curves_have_nulls_where_a_coordinate_does_not_apply(study):
    res, _, _ = study
    c = res.curves
    assert c.schema["seed"] == pl.Int64 and c.schema["variant"] == pl.Enum(["RotRNN", "LRU"])
    summary = c.filter(pl.col("quantity").is_in(["norm_sq_mean", "norm_sq_last", "head_decay"]))
    assert summary.height and summary["t"].is_null().all() and summary["head"].is_not_null().all()
    groups = c.filter((pl.col("kind") == "grad") & pl.col("quantity").is_in(["total", "recurrent"]))
    assert groups.height and groups["layer"].is_null().all() and groups["head"].is_null().all()
    dense = c.filter(pl.col("quantity") == "norm_sq")
    assert dense["t"].min() == 0 and dense["t"].null_count() == 0 and dense["layer"].null_count() == 0
    assert (c.select("layer", "head", "t") == -1).sum().sum_horizontal().item() == 0


def test_load_from_another_directory(accuracy_study, tmp_path, monkeypatch):
    """ABLATE_HOME, home=, and a notebook in a subfolder of the project (the .ablate above it)."""
    from ablate import results
    from ablate.runner.study import StorageError

    for key in ("ABLATE_HOME", "ABLATE_STORAGE", "ABLATE_TRACKING_URI"):
        monkeypatch.delenv(key, raising=False)
    home = accuracy_study / ".ablate"
    elsewhere = tmp_path / "notebooks"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(StorageError) as info:
        results.load(NAME, curves=False)
    assert f"there is no store at sqlite:///{elsewhere / '.ablate' / 'optuna.db'}" in str(info.value)
    assert "$ABLATE_HOME" in str(info.value) and "home=" in str(info.value)
    assert not (elsewhere / ".ablate").exists()  # a failed read creates nothing
    assert results.load(NAME, curves=False, home=home).trials.height == 18
    monkeypatch.setenv("ABLATE_HOME", str(home))
    assert results.load(NAME, curves=False).trials.height == 18
    with pytest.raises(StorageError, match=r"no study named 'accrp' .*did you mean 'accrep'\?"):
        results.load("accrp", curves=False)
    monkeypatch.delenv("ABLATE_HOME")
    nested = accuracy_study / "analysis" / "nb"
    nested.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(nested)
    assert results.locate(NAME).storage == f"sqlite:///{home.resolve() / 'optuna.db'}"
    assert results.load(NAME, curves=False).trials.height == 18


def test_status_counts_a_queued_study_found_from_a_subfolder(tmp_path, monkeypatch):
    """``results.status`` (what ``ablate status`` prints) in process: a sequential study queued and
    not run, read from a subfolder of its project (the .ablate above), its first look's seeds
    counted per cell and its design's lines; a misspelt name says where it looked."""
    from ablate import design, results
    from ablate.runner import sequential_looks
    from ablate.runner import study as st
    from ablate.runner.study import StorageError
    from ablate.stores import resolve

    for key in ("ABLATE_HOME", "ABLATE_STORAGE", "ABLATE_TRACKING_URI"):
        monkeypatch.delenv(key, raising=False)
    spec = design.validate({"name": "seq", "task": {"name": "listops", "max_length": 20, "train_size": 32},
                            "model": {"d_model": 8, "state_dim": 8, "layers": 1, "heads": 2},
                            "factors": {"model.normalisation": ["xi", "gamma"]},
                            "seeds": {"min": 3, "max": 7, "step": 2, "measures": ["test_accuracy"]}})
    root = tmp_path / "project"
    st.prepare(spec, sequential_looks.items(spec), resolve(home_dir=root / ".ablate"))
    nested = root / "analysis"
    nested.mkdir()
    monkeypatch.chdir(nested)
    got = results.status("seq")
    assert got.counts() == {"done": 0, "running": 0, "waiting": 6, "failed": 0, "diverged": 0, "total": 6}
    cells = [(c["cell_label"], c["trials"], c["pending"]) for c in got.cells]
    assert cells == [("normalisation=xi", 3, 3), ("normalisation=gamma", 3, 3)]
    assert got.sequential[0].startswith("sequential seeds: looks at 3, 5, 7 seeds per cell"), got.sequential
    assert got.sequential[1].startswith("test: at each look the paired t test"), got.sequential  # which test, once
    assert got.extension_lines() == [] and got.seconds_per_item() is None
    stores, opt = results.located_study("seq")
    assert stores.storage == f"sqlite:///{(root / '.ablate').resolve() / 'optuna.db'}" and opt.study_name == "seq"
    with pytest.raises(StorageError, match=r"no study named 'seqq'.*did you mean 'seq' in "):
        results.status("seqq")
    assert not (nested / ".ablate").exists()  # a read creates nothing


# --- whatever the stores hold: duplicate runs, a lost tracking store --------------------------------


def copy_study(src, dst):
    """A copy of a study's folder, its stores pointed at the copy (as moving stores by hand needs)."""
    import shutil
    import sqlite3

    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.lock", "cache"))
    db = sqlite3.connect(dst / ".ablate" / "mlflow.db")
    with db:  # commits; the connection is closed below (a file open for writing keeps a mount busy)
        db.execute("UPDATE experiments SET artifact_location = replace(artifact_location, ?, ?)", (str(src), str(dst)))
        db.execute("UPDATE runs SET artifact_uri = replace(artifact_uri, ?, ?)", (str(src), str(dst)))
    db.close()
    return dst


def test_results_read_one_run_per_item_whatever_mlflow_holds(norm_study, tmp_path, monkeypatch):
    """A second FINISHED run for an item (what a kill between MLflow and Optuna left before the
    Optuna record became the commit point) is not read: the run Optuna recorded is."""
    from mlflow.tracking import MlflowClient

    from ablate import results
    from ablate.stores import resolve

    root = copy_study(norm_study, tmp_path / "study")
    studies.study_env(monkeypatch, root)
    before = results.load(studies.NORM["name"])
    mlc = MlflowClient(resolve().tracking)
    recorded = mlc.get_run(before.trials["mlflow_run_id"][0])
    orphan = mlc.create_run(recorded.info.experiment_id, run_name=recorded.info.run_name,
                            tags={k: v for k, v in recorded.data.tags.items() if k.startswith("ablate.")})
    history = pl.DataFrame({"step": [0], "name": ["train/loss"], "value": [999.0]})
    history.write_parquet(tmp_path / "metrics.parquet")
    mlc.log_artifact(orphan.info.run_id, str(tmp_path / "metrics.parquet"))
    mlc.set_terminated(orphan.info.run_id, "FINISHED")
    after = results.load(studies.NORM["name"])
    assert after.trials.height == before.trials.height
    assert after.metrics.sort(after.metrics.columns).equals(before.metrics.sort(before.metrics.columns))
    assert 999.0 not in after.metrics["value"].to_list()


def test_results_say_what_is_missing_when_the_tracking_store_is_lost(norm_study, tmp_path, monkeypatch):
    """Before: results (and reports) failed outright once mlflow.db was gone."""
    import sqlite3

    from ablate import results

    root = copy_study(norm_study, tmp_path / "study")
    studies.study_env(monkeypatch, root)
    full = results.load(studies.NORM["name"])
    gone = full.trials["mlflow_run_id"][1]
    with sqlite3.connect(root / ".ablate" / "mlflow.db") as db:
        db.execute("DELETE FROM runs WHERE run_uuid = ?", (gone,))
    partial = results.load(studies.NORM["name"])
    assert len(partial.missing) == 1 and partial.missing[0].startswith("1 of 4 MLflow runs could not be read")
    assert partial.curves["seed"].len() < full.curves["seed"].len()
    # The report says so on its first page, from what the renderer's one load found.
    from ablate.report import render

    render.render(studies.NORM["name"], ["norm_stability"], tmp_path / "pages", formats=("html",))
    page = (tmp_path / "pages" / "norm_stability.html").read_text()
    assert 'class="ablate-missing"' in page and "1 of 4 MLflow runs could not be read" in page
    (root / ".ablate" / "mlflow.db").unlink()
    lost = results.load(studies.NORM["name"])
    assert lost.trials["status"].to_list() == full.trials["status"].to_list()
    assert lost.metrics.is_empty() and lost.curves.is_empty()
    assert lost.missing == [f"the MLflow tracking store {root / '.ablate' / 'mlflow.db'} is missing: the metrics and "
                            "curves of 4 finished trials are not available; the trials' outcomes (from the Optuna "
                            "storage) are"]
    assert not (root / ".ablate" / "mlflow.db").exists()  # reading created no new, empty store


def test_saved_results_read_back_as_they_were(study, tmp_path):
    """The renderer reads the stores once and every report notebook reads that file: it must hold
    the same frames (dtypes, the factors' level order), spec and notes as the load."""
    from ablate import results

    res = study[0]
    res.missing.append("a note the reports must repeat")
    try:
        results.save(res, tmp_path / "r.pickle")
        back = results.read(tmp_path / "r.pickle")
    finally:
        res.missing.pop()
    for name in ("trials", "metrics", "curves"):
        assert getattr(back, name).equals(getattr(res, name)) and getattr(back, name).schema == getattr(res, name).schema
    assert back.spec == res.spec and back.factors == res.factors and back.stores == res.stores
    assert back.missing == [*res.missing, "a note the reports must repeat"]
    assert back.provenance() == res.provenance()
    (tmp_path / "other.pickle").write_bytes(__import__("pickle").dumps({"not": "results"}))
    with pytest.raises(TypeError, match="not results saved by ablate.results.save"):
        results.read(tmp_path / "other.pickle")


def test_results_saved_when_the_classes_lived_in_ablate_results_still_read(tmp_path, monkeypatch):
    """A pickle names a class by its module: what ``save`` wrote before ``ablate/results.py`` became
    a package names ``ablate.results.Results`` / ``.Studies``, which the package still holds."""
    import pickle

    from ablate import results

    res = results.read_export(Path(__file__).resolve().parents[1] / "reports" / "norm_heads" / "data")
    for obj in (res, results.Studies.of([res])):
        cls = type(obj)
        for old in (results.Results, results.Studies):  # as the old module wrote them
            monkeypatch.setattr(old, "__module__", "ablate.results")
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        monkeypatch.undo()
        assert b"ablate.results.frames" not in data and b"ablate.results" in data
        (tmp_path / "old.pickle").write_bytes(data)
        back = results.read(tmp_path / "old.pickle")
        assert type(back) is cls
        for name in ("trials", "metrics", "curves"):
            assert getattr(back, name).equals(getattr(obj, name))


def test_several_studies_hold_each_cells_own_setting_where_another_study_varies_it(tmp_path):
    """A study that sets a dotted path through a named factor holds each cell's own value in the
    stacked column, not its baseline's (an LRU variant must not read as rotation); the other
    study's rows have no level of that named factor."""
    from ablate import design, results
    from ablate.runner import study as st
    from ablate.stores import resolve

    base = {"task": {"name": "listops", "max_length": 20, "train_size": 32},
            "model": {"d_model": 8, "state_dim": 32, "layers": 1, "heads": 2}}
    a = design.validate({**base, "name": "by-path", "factors": {"model.heads": [2, 4]}})
    b = design.validate({**base, "name": "by-name",
                         "factors": {"variant": {"X": {"model.heads": 8}, "Y": {"model.heads": 4}}}})
    stores = resolve(home_dir=tmp_path / "h")
    for s in (a, b):
        st.prepare(s, design.items(s), stores)
    both = results.load(["by-path", "by-name"], home=tmp_path / "h", curves=False)
    t = both.trials
    named = t.filter(pl.col("study") == "by-name")
    assert dict(named.select("variant", "model.heads").unique().iter_rows()) == {"X": "8", "Y": "4"}
    assert t.filter(pl.col("study") == "by-path")["variant"].null_count() == t.filter(pl.col("study") == "by-path").height
    assert t.schema["model.heads"] == pl.Enum(["2", "4", "8"])
    # variant Y is the cell heads=4 of the other study (the same config): one variant, held by both.
    v = both.variants()
    assert set(v["label"]) == {"heads=2", "heads=4", "heads=8, variant=X"}
    assert v.filter(pl.col("label") == "heads=4")["studies"].to_list() == ["by-path, by-name"]


def test_variants_across_studies_name_each_value_one_way_and_leave_out_settings_a_family_ignores(tmp_path):
    """One study labels its levels (RotRNN-rot, ξ), the other varies the family and the
    normalisation by value: a cell only the second holds reads "RotRNN-rot" as the first names it
    (not "rotation"), and a minGRU cell says nothing of a parameterisation or normalisation it does
    not read (catalogue.FAMILY_READS)."""
    from ablate import design, results
    from ablate.runner import study as st
    from ablate.stores import resolve

    base = {"task": {"name": "listops", "max_length": 20, "train_size": 32},
            "model": {"d_model": 8, "state_dim": 32, "layers": 1, "heads": 2}}
    labelled = design.validate({**base, "name": "labelled", "factors": {
        "model.parameterisation": {"RotRNN-rot": "rotation", "LRU-c": "complex_diagonal"},
        "model.normalisation": {"ξ": "xi", "γ": "gamma"}}})
    plain = design.validate({**base, "name": "plain", "factors": {
        "model.family": ["linear_rnn", "mingru"],
        "model.normalisation": {"levels": ["xi", "none"], "when": {"model.family": "linear_rnn"}}}})
    stores = resolve(home_dir=tmp_path / "h")
    for s in (labelled, plain):
        st.prepare(s, design.items(s), stores)
    v = results.load(["labelled", "plain"], home=tmp_path / "h", curves=False).variants()
    by_label = dict(v.select("label", "studies").iter_rows())
    assert by_label == {
        "parameterisation=RotRNN-rot, normalisation=ξ, family=linear_rnn": "labelled, plain",
        "parameterisation=RotRNN-rot, normalisation=γ, family=linear_rnn": "labelled",
        "parameterisation=LRU-c, normalisation=ξ, family=linear_rnn": "labelled",
        "parameterisation=LRU-c, normalisation=γ, family=linear_rnn": "labelled",
        "parameterisation=RotRNN-rot, normalisation=none, family=linear_rnn": "plain",
        "family=mingru": "plain",
    }
    mingru = json.loads(v.filter(pl.col("label") == "family=mingru")["config"].item())["model"]
    assert mingru["family"] == "mingru" and mingru["parameterisation"] == "rotation"  # kept in the config


def test_variants_with_equal_settings_and_other_tuning_are_told_apart_by_their_study(tmp_path):
    """Cells whose configurations are equal but whose tuning differs (rotation_heads tuned by TPE
    draws, then on a grid): the same factor levels and settings, two cells — labelled by study."""
    from ablate import design, results
    from ablate.runner import study as st
    from ablate.stores import resolve

    base = {"task": {"name": "listops", "max_length": 20, "train_size": 32},
            "model": {"d_model": 8, "state_dim": 32, "layers": 1, "heads": 2}, "factors": {"model.heads": [2, 4]}}
    tpe = design.validate({**base, "name": "tpe", "tune": {"trials": 2, "space": {"train.lr": {"low": 1e-3, "high": 1e-2}}}})
    grid = design.validate({**base, "name": "grid",
                            "tune": {"trials": 2, "sampler": "grid", "space": {"train.lr": [1e-3, 1e-2]}}})
    stores = resolve(home_dir=tmp_path / "h")
    for s in (tpe, grid):
        st.prepare(s, design.items(s), stores)
    v = results.load(["tpe", "grid"], home=tmp_path / "h", curves=False).variants()
    assert v.height == 4 and sorted(v["label"]) == ["heads=2 [grid]", "heads=2 [tpe]", "heads=4 [grid]", "heads=4 [tpe]"]


# --- exports: the results as plain files, read back without a store -----------------------------------


def _same_results(back, res) -> None:
    from polars.testing import assert_frame_equal

    for name in ("trials", "metrics", "curves"):
        assert_frame_equal(getattr(back, name), getattr(res, name))  # dtypes, Enum levels and their order
    assert back.spec == res.spec and back.spec_data == res.spec_data and back.spec_hash == res.spec_hash
    assert back.stores == res.stores and back.factors == res.factors and back.missing == res.missing
    assert back.trial_provenance == res.trial_provenance and back.provenance() == res.provenance()
    assert_frame_equal(back.tuning(), res.tuning())
    assert_frame_equal(back.references(), res.references())


def test_an_export_reads_back_as_the_load_frame_for_frame(study, tmp_path, monkeypatch):
    """With curves and metrics (the norm study), then the stores pointed at nothing: the export is
    all a reader needs, and every file is what the manifest says."""
    import hashlib

    import pandas as pd

    from ablate import results

    res = study[0]
    res.missing.append("a note the export must keep")
    try:
        manifest = results.export(res, tmp_path / "export")
        for key in ("ABLATE_STORAGE", "ABLATE_TRACKING_URI"):
            monkeypatch.delenv(key, raising=False)
        monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "no-store"))
        back = results.read_export(tmp_path / "export")
        _same_results(back, res)
        # Written again over itself: the same bytes (a committed export changes only with its data).
        assert results.export(res, tmp_path / "export") == manifest
    finally:
        res.missing.pop()
    assert not (tmp_path / "no-store").exists()
    files = sorted(p.name for p in (tmp_path / "export").iterdir())
    assert files == sorted([*results.EXPORT_FILES, results.MANIFEST])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]  # no scratch folder left beside it
    for name, entry in manifest["files"].items():
        data = (tmp_path / "export" / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"] and len(data) == entry["bytes"]
        assert not data.startswith(b"\x80")  # no pickle
    assert manifest["rows"] == {"trials": res.trials.height, "metrics": res.metrics.height,
                                "curves": res.curves.height, "provenance": sum(map(len, res.trial_provenance.values()))}
    assert manifest["study"] == res.study and manifest["format_version"] == results.EXPORT_VERSION
    # Without ablate: pandas sees the factor as a categorical in the spec's level order.
    trials = pd.read_parquet(tmp_path / "export" / "trials.parquet")
    assert list(trials["variant"].cat.categories) == ["RotRNN", "LRU"]
    assert len(pd.read_parquet(tmp_path / "export" / "curves.parquet")) == res.curves.height


def test_an_export_of_a_partial_study_and_of_one_that_never_ran(res, tmp_path):
    """Pending and failed items, tuning, no curves read (an empty frame); then a study only queued:
    columns of nulls, no metrics at all."""
    from ablate import design, results
    from ablate.runner import study as st
    from ablate.stores import resolve

    results.export(res, tmp_path / "partial")
    _same_results(results.read_export(tmp_path / "partial"), res)
    spec = design.validate({"name": "queued", "task": {"name": "listops", "max_length": 20, "train_size": 32},
                            "model": {"d_model": 8, "state_dim": 32, "layers": 1}, "factors": {"model.heads": [2, 16, 4]}})
    st.prepare(spec, design.items(spec), resolve(home_dir=tmp_path / "h"))
    queued = results.load("queued", home=tmp_path / "h")
    assert queued.metrics.is_empty() and queued.trials["started"].dtype == pl.Null
    results.export(queued, tmp_path / "queued")
    back = results.read_export(tmp_path / "queued")
    _same_results(back, queued)
    assert back.trials.schema["model.heads"] == pl.Enum(["2", "16", "4"])


def test_export_many_checks_and_reads_everything_first_then_writes_each(tmp_path):
    """``export_many`` (``ablate export``) and ``read_exports_in`` (``--data``) in process, on two
    studies only queued: every directory checked and every study read before anything is written,
    then one study at a time into DIR/STUDY; read back from the folder in the order asked."""
    import os

    from ablate import design, results
    from ablate.runner import study as st
    from ablate.runner.study import StorageError
    from ablate.stores import resolve

    home = tmp_path / "h"
    items = {}
    for name, heads in (("qa", [2, 4]), ("qb", [2])):
        spec = design.validate({"name": name, "task": {"name": "listops", "max_length": 20, "train_size": 32},
                                "model": {"d_model": 8, "state_dim": 8, "layers": 1}, "factors": {"model.heads": heads}})
        items[name] = len(design.items(spec))
        st.prepare(spec, design.items(spec), resolve(home_dir=home))
    data = tmp_path / "data"
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "mine.txt").write_text("")
    (tmp_path / "file").write_text("")
    refused = {(("qa",), "busy"): "is not empty and is not an export of study 'qa'",
               (("qa", "qb"), "file"): "file exists and is not a directory"}
    for (names, where), message in refused.items():
        with pytest.raises(results.ExportError, match=message):
            results.export_many(names, tmp_path / where, home=home)
    with pytest.raises(StorageError, match="no study named 'nope'"):
        results.export_many(["qa", "nope"], data, home=home)
    written = results.export_many(["qa", "qb", "qa"], data, home=home)
    assert not data.exists()  # checked and read; each is written as the iterator is taken
    done = list(written)
    assert [(d.study, d.path) for d in done] == [("qa", data / "qa"), ("qb", data / "qb")]
    for d in done:
        assert d.files == len(os.listdir(d.path)) and d.missing == []
        assert d.rows["trials"] == items[d.study]
        assert d.size == sum((d.path / f).stat().st_size for f in d.manifest["files"])
    assert results.exports_in(data) == [data / "qa", data / "qb"]
    assert results.exports_in(data / "qa") == [data / "qa"] and results.exports_in(tmp_path / "busy") == [tmp_path / "busy"]
    assert results.read_exports_in([data]).names == ["qa", "qb"]
    assert results.read_exports_in([data], ["qb", "qa"]).names == ["qb", "qa"]
    with pytest.raises(results.ExportError, match=r"the exports hold no study 'nope' \(they hold: qa, qb\)"):
        results.read_exports_in([data], ["qa", "nope"])
    with pytest.raises(results.ExportError, match="has no manifest.json"):
        results.read_exports_in([tmp_path / "busy"])


def _listing(folder):
    return sorted((str(p.relative_to(folder)), p.stat().st_size if p.is_file() else -1) for p in folder.rglob("*"))


def test_an_export_writes_only_where_it_wrote_before(res, tmp_path):
    """A folder holding anything else, a file, a device, another study's export, a name too
    long: refused on one line, before anything is written."""
    from ablate import results

    results.export(res, tmp_path / "mine")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep me")
    (tmp_path / "a-file").write_text("x")
    other = results.Results(study="other", spec=res.spec, spec_hash=res.spec_hash, stores=res.stores,
                            factors=res.factors, trials=res.trials)
    results.export(other, tmp_path / "theirs")
    (tmp_path / "mine-plus").mkdir()
    results.export(res, tmp_path / "mine-plus")
    (tmp_path / "mine-plus" / "extra.csv").write_text("1")
    before = _listing(tmp_path)
    cases = {
        tmp_path / "notes": "is not empty and is not an export of study 'accrep' (",
        tmp_path / "a-file": "exists and is not a directory",
        Path("/dev/null"): "/dev/null exists and is not a directory",
        tmp_path / "theirs": "(it holds study 'other')",
        tmp_path / "mine-plus": "and also 'extra.csv', which an export did not write",
        tmp_path / "a-file" / "under": "Not a directory",
        tmp_path / ("x" * 5000): "characters)",
    }
    for target, message in cases.items():
        with pytest.raises(results.ExportError) as info:
            results.export(res, target)
        text = str(info.value)
        assert message in text and "\n" not in text and len(text) < 700, text
    assert _listing(tmp_path) == before


def test_a_damaged_export_is_refused_on_one_line(res, tmp_path):
    import shutil

    from ablate import results

    good = tmp_path / "good"
    results.export(res, good)

    def damaged(name: str, change) -> Path:
        folder = tmp_path / name
        shutil.copytree(good, folder)
        change(folder)
        return folder

    def manifest(folder: Path, **edit) -> None:
        data = json.loads((folder / "manifest.json").read_text())
        data.update(edit)
        (folder / "manifest.json").write_text(json.dumps(data))

    def relink(folder: Path) -> None:
        (folder / "study.json").unlink()
        (folder / "study.json").symlink_to("/dev/zero")

    files = json.loads((good / "manifest.json").read_text())["files"]
    cases = {
        tmp_path / "none": "does not exist",
        good / "spec.yaml": "is not a directory",
        damaged("empty", lambda f: [p.unlink() for p in f.iterdir()]): "has no manifest.json: it is not an ablate export",
        damaged("tampered", lambda f: (f / "trials.parquet").write_bytes((f / "trials.parquet").read_bytes()[:-9] + b"123456789")):
            "trials.parquet does not match the sha256 in its manifest",
        damaged("gone", lambda f: (f / "curves.parquet").unlink()): "curves.parquet is missing",
        damaged("linked", relink): "study.json is not a regular file",
        damaged("newer", lambda f: manifest(f, format_version=99)): "format version 99 is newer",
        damaged("escape", lambda f: manifest(f, files={**files, "../../etc/passwd": files["spec.yaml"]})):
            "which is not a file of an export",
        damaged("not-json", lambda f: (f / "manifest.json").write_text("{")): "is not valid JSON",
        damaged("huge", lambda f: (f / "manifest.json").write_bytes(b" " * (results.MAX_JSON_BYTES + 1))):
            "is larger than",
        tmp_path / ("y" * 5000): "characters)",
    }
    for folder, message in cases.items():
        with pytest.raises(results.ExportError) as info:
            results.read_export(folder)
        text = str(info.value)
        assert message in text and "\n" not in text and len(text) < 700, (folder.name[:20], text)


def test_the_stability_frame_is_one_row_per_run_with_the_reports_measures(norm_study):
    from ablate.stats import norms

    res = studies.load(norm_study, studies.NORM["name"])
    frame = res.stability()
    assert frame.height == 4 and set(frame["cell_label"]) == {"RotRNN", "LRU"}
    assert {"log_cv_training", "log_cv_depth", "log_final_norm", "log_dev_seeds", "variant"} <= set(frame.columns)
    direct = norms.per_seed(norms.layer_norms(norms.prepare(res.curves, res.trials)), res.trials, res.factors)
    assert frame.sort(["cell_id", "seed"])["cv_training"].to_list() == pytest.approx(
        direct.sort_values(["cell_id", "seed"])["cv_training"].to_list())


def test_one_study_and_a_collection_of_one_answer_the_same(study):
    """Before: ``load("a").summaries()`` raised AttributeError and ``load(["a"]).spec`` did too."""
    from ablate import results

    res = study[0]
    one = results.Studies.of([res])
    assert res.names == one.names == [res.study] and res[res.study] is res
    assert res.summaries() == one.summaries()
    assert res.variants().equals(one.variants())
    for mine, theirs in zip(res.frames(), one.frames(), strict=True):
        assert mine.equals(theirs)
    assert one.spec is res.spec and one.chance == res.chance and one.stability().equals(res.stability())
    two = results.Studies.of([res, res])
    with pytest.raises(AttributeError, match=r"take one, e\.g\. studies\["):
        _ = two.spec
    with pytest.raises(AttributeError):
        _ = one.no_such_member
    # Every public member of either answers on both (dir() included: what a notebook completes).
    members = {m for m in dir(res) if not m.startswith("_")} | {m for m in dir(one) if not m.startswith("_")}
    members -= {"of", "as_studies"}  # constructors: Studies.of builds a collection, Results.as_studies one of one
    assert {m for m in members if not hasattr(res, m)} == set() and {m for m in members if not hasattr(one, m)} == set()
    assert {m for m in dir(one) if not m.startswith("_")} >= {m for m in dir(res) if not m.startswith("_")} - {"as_studies"}
    assert res.selectors == one.selectors == {}
    # The columns a reader looks for come first: the cell, then its factors in the spec's order.
    assert res.trials.columns[: 2 + len(res.spec.factors)] == ["cell_id", "cell_label", *res.spec.factors]


def test_the_tuning_summary_gives_a_grid_s_best_mean_over_its_tuning_seeds():
    """Two learning rates on two tuning seeds: the summary's best is the setting with the best mean
    (0.6 against 0.5), not the luckiest trial (0.9), and its value is that mean — as the replicates
    take it (runner.phases.best)."""
    from support import make

    from ablate.results import Results

    s = make(tune={"trials": 4, "seeds": 2, "sampler": "grid", "space": {"train.lr": [1e-3, 3e-3]}})
    rows = [(0, 1e-3, 0.9, "complete"), (1, 1e-3, 0.1, "complete"), (2, 3e-3, 0.6, "complete"),
            (3, 3e-3, 0.6, "complete")]
    trials = pl.DataFrame({
        "cell_id": ["c"] * 4, "cell_label": ["baseline"] * 4, "phase": ["tune"] * 4,
        "status": [r[3] for r in rows], "tune_index": [r[0] for r in rows],
        "params": [json.dumps({"train.lr": r[1]}) for r in rows], "val_accuracy": [r[2] for r in rows],
        "tuned_from": [None] * 4}, schema_overrides={"tuned_from": pl.Utf8})
    res = Results(study="s", spec=s, spec_hash="", stores={}, factors=[], trials=trials)
    [row] = res.tuning().to_dicts()
    assert row["best_index"] == 2 and json.loads(row["best_params"]) == {"train.lr": 3e-3}
    assert row["best_value"] == pytest.approx(0.6) and row["complete"] == 4
    # A seed on which the better setting diverged: the setting that finished on both is chosen.
    diverged = trials.with_columns(pl.when(pl.col("tune_index") == 3).then(pl.lit("diverged"))
                                   .otherwise(pl.col("status")).alias("status"))
    [row] = Results(study="s", spec=s, spec_hash="", stores={}, factors=[], trials=diverged).tuning().to_dicts()
    assert row["best_index"] == 0 and row["best_value"] == pytest.approx(0.5) and row["failed"] == 1
