"""A study on the queue as optuna-dashboard reads it (ablate.runner.dashboard.describe, phases.record_params):
factor levels and tuned values as parameters with distributions, the objective's name, the note —
through the dashboard's own WSGI JSON API on real studies — and the message for a misspelt study."""

from __future__ import annotations

import copy
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from support import RAW, dashboard_api, finish, stores

from ablate import design
from ablate.runner import dashboard, phases
from ablate.runner import study as st


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path


def test_factor_distributions_in_the_specs_order():
    raw = {**copy.deepcopy(RAW), "tune": None,
           "factors": {"model.heads": {"levels": [2, 4], "when": {"model.parameterisation": "rotation"}},
                       "model.parameterisation": ["rotation", "complex_diagonal"],
                       "model.layers": [16, 2]}}
    dists = dashboard.factor_distributions(design.validate(raw))
    # A conditional factor's cells where it does not apply show its baseline label: a choice too.
    assert dists["model.heads"] == CategoricalDistribution(["2", "4", "1"])
    assert dists["model.layers"] == CategoricalDistribution(["16", "2"])
    known = {"model.layers": optuna.distributions.distribution_to_json(CategoricalDistribution(["2", "8"]))}
    kept = dashboard.factor_distributions(design.validate(raw), known)
    assert kept["model.layers"] == CategoricalDistribution(["16", "2", "8"])  # recorded labels stay choices


def test_levels_and_tuned_values_are_parameters_and_survive_a_new_level(tmp_path):
    spec = design.validate(RAW)
    study, _ = st.prepare(spec, design.items(spec), stores(tmp_path))
    assert study.metric_names == [dashboard.OBJECTIVE]
    assert "an ablation study" in study.user_attrs["description"]
    done = []
    while (trial := phases.claim(study)) is not None:
        attrs = phases.prepare_item(study, trial)
        phases.record_params(study, trial, attrs)
        finish(study, trial, attrs)
        done.append(trial.number)
    for t in study.get_trials():
        assert t.params["variant"] == t.user_attrs["settings"]["variant"]
        assert t.distributions["variant"] == CategoricalDistribution(["RotRNN", "LRU"])
        assert t.params["train.lr"] == pytest.approx(t.user_attrs["params"]["train.lr"])
        assert t.distributions["train.lr"] == FloatDistribution(1e-4, 1e-1, log=True)
        assert t.distributions["train.batch_size"] == CategoricalDistribution([8, 16])
    # The grid grows a level, listed first: recorded values are re-encoded, not misread.
    grown = copy.deepcopy(RAW)
    grown["factors"]["variant"] = {"Hybrid": {"model.parameterisation": "rotation", "model.normalisation": "gamma"},
                                   **grown["factors"]["variant"]}
    spec2 = design.validate(grown)
    study, queued = st.prepare(spec2, design.items(spec2), stores(tmp_path))
    assert queued == 4 + 2
    trial = phases.claim(study)
    attrs = phases.prepare_item(study, trial)
    phases.record_params(study, trial, attrs)
    fresh = optuna.load_study(study_name=spec.name, storage=stores(tmp_path).storage)
    for t in fresh.get_trials():
        if t.number in done or t.number == trial.number:
            assert t.params["variant"] == t.user_attrs["settings"]["variant"]
            assert t.distributions["variant"] == CategoricalDistribution(["Hybrid", "RotRNN", "LRU"])


def test_dashboard_api_on_a_real_tuned_study(accuracy_study):
    """The accuracy study of tests/real_studies.py: two factors, a tuned lr, a level added later."""
    get = dashboard_api(f"sqlite:///{accuracy_study / '.ablate' / 'optuna.db'}")
    study_id = next(s["study_id"] for s in get("/api/studies")["study_summaries"] if s["study_name"] == "accrep")
    detail = get(f"/api/studies/{study_id}")
    assert detail["objective_names"] == ["val_accuracy"]
    assert detail["note"]["body"] == ""  # built by prepare and work, not run: no note (test_runner_launch)
    space = {p["name"]: p["distribution"] for p in detail["union_search_space"]}
    assert set(space) == {"model.normalisation", "model.layers", "train.lr"}
    ran = [t for t in detail["trials"] if t["state"] in ("Complete", "Fail")]
    assert ran and all({p["name"] for p in t["params"]} == set(space) for t in ran)
    for t in ran:
        attrs = {a["key"]: a["value"] for a in t["user_attrs"]}
        params = {p["name"]: p for p in t["params"]}
        norm, layers, lr = params["model.normalisation"], params["model.layers"], params["train.lr"]
        # Each trial's distributions as recorded: the levels in the spec's order, the third added later.
        assert [c["value"] for c in norm["distribution"]["choices"]] == ["xi", "gamma", "none"]
        assert [c["value"] for c in layers["distribution"]["choices"]] == ["1", "2"]
        assert lr["distribution"]["type"] == "FloatDistribution" and lr["distribution"]["log"]
        assert norm["param_external_value"] == attrs["cell_label"].split(",")[0].split("=")[1]
    importances = get(f"/api/studies/{study_id}/param_importances")["param_importances"][0]
    assert {i["name"] for i in importances} == set(space)


def test_a_misspelt_study_gets_the_closest_names(tmp_path):
    spec = design.validate({**RAW, "name": "heads_norm"})
    st.prepare(spec, design.items(spec), stores(tmp_path))
    with pytest.raises(st.StorageError, match=r"no study named 'heads_nrom' .*did you mean 'heads_norm'\?"):
        st.open_study("heads_nrom", stores(tmp_path))


def test_the_note_is_saved_without_the_dashboards_app_and_reads_back_through_it(tmp_path):
    # The dashboard package imports its web app and scikit-learn (seconds); save_note runs its
    # note module alone. In a subprocess: this one has imported the dashboard already.
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    code = (
        "import sys, optuna\n"
        "from support import RAW\n"
        "from ablate import design\n"
        "from ablate.runner import dashboard\n"
        f"s = optuna.create_study(storage={url!r}, study_name='noted')\n"
        "dashboard.save_note(s, design.validate(RAW))\n"
        "print(sorted(m for m in sys.modules if m.startswith(('optuna_dashboard', 'sklearn'))))\n"
    )
    tests = Path(__file__).parent
    res = subprocess.run([sys.executable, "-c", code], cwd=tests.parent, capture_output=True, text=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(tests)}, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[]"
    import optuna_dashboard

    study = optuna.load_study(study_name="noted", storage=url)
    assert optuna_dashboard.get_note(study) == dashboard.description(design.validate(RAW))
