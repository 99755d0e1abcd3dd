"""The norm-stability analysis (``ablate.stats_norms``) on constructed frames and on a real study."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from frames import curve_frame, steady_and_wild

from ablate import stats
from ablate.stats import norms as sn


def test_stability_comes_from_the_numbers():
    df, steady = steady_and_wild()
    order = sn.variants(df)
    table = sn.stability(sn.layer_norms(df), order, n_resamples=300)
    ratios = sn.stability_ratios(sn.layer_norms(df), table, n_resamples=300)
    # The per-unit CVs equal a direct computation.
    direct = np.mean([np.std(steady[s, l_], ddof=1) / steady[s, l_].mean() for s in range(4) for l_ in range(3)])
    assert table.loc[0, "cv_training"] == pytest.approx(direct)
    assert (table.loc[0, [f"cv_{m}" for m in sn.MEASURES]].to_numpy() <
            table.loc[1, [f"cv_{m}" for m in sn.MEASURES]].to_numpy()).all()
    wild_rows = ratios[ratios["variant"] == "wild"]
    assert (wild_rows["reference"] == "steady").all() and (wild_rows["ratio_low"] > 10).all()
    again = sn.stability(sn.layer_norms(df), order, n_resamples=300)
    pd.testing.assert_frame_equal(again, table)  # deterministic


def test_units_use_the_statistics_coefficient_of_variation():
    rng = np.random.default_rng(2)
    df = curve_frame({"a": np.exp(rng.standard_normal((3, 2, 5)))})
    norms = sn.layer_norms(df)
    for measure, keys in sn.UNITS.items():
        units = sn.stability_units(norms, measure)
        assert len(units) == norms.groupby(list(keys)).ngroups
        for _, unit in units.iterrows():
            mask = np.logical_and.reduce([norms[k] == unit[k] for k in keys])
            assert unit["cv"] == stats.cv_with_ci(norms.loc[mask, "value"], n_resamples=0).value
    # A unit whose CV is undefined (one value, or a zero mean) is dropped, not counted.
    flat = curve_frame({"a": np.zeros((2, 1, 3))})
    assert sn.stability_units(sn.layer_norms(flat), "training").empty


def test_factor_table_averages_cells_per_level():
    cells = {"p=rot, n=xi": 1.0, "p=rot, n=gamma": 2.0, "p=diag, n=xi": 3.0, "p=diag, n=gamma": 6.0}
    table = pd.DataFrame({"cell_id": [f"c{i}" for i in range(4)], "variant": list(cells),
                          **{f"cv_{m}": list(cells.values()) for m in sn.MEASURES}})
    trials = pd.DataFrame({"cell_id": [f"c{i}" for i in range(4)], "p": ["rot", "rot", "diag", "diag"],
                           "n": ["xi", "gamma", "xi", "gamma"]})
    out = sn.stability_by_factor(table, trials, ["p", "n"]).set_index(["factor", "level"])["cv_training"]
    assert out.to_dict() == {("p", "rot"): 1.5, ("p", "diag"): 4.5, ("n", "xi"): 2.0, ("n", "gamma"): 4.0}


# --- on a real study (tests/real_studies.py) ---------------------------------------------------------


@pytest.fixture(scope="module")
def res(norm_study):
    import real_studies as studies

    return studies.load(norm_study, studies.NORM["name"])


def test_analysis_of_the_study(res):
    df = sn.prepare(res.curves, res.trials)
    order = sn.variants(df, res.trials)
    assert [label for _, label in order] == ["RotRNN", "LRU"]
    table = sn.stability(sn.layer_norms(df), order, n_resamples=200)
    assert table["seeds"].tolist() == [2, 2] and table["steps"].tolist() == [3, 3]
    assert (table["n_training"] == 4).all() and (table["n_depth"] == 6).all() and (table["n_seeds"] == 6).all()
    assert sn.stability_by_factor(table, res.trials, res.factors).empty  # one cell per level: Table 1 says it
    check = sn.theory_check(df, order)
    rot = check[check["variant"] == "RotRNN"]
    assert np.allclose(rot["stationary"], 1.0)
    assert sn.probe_batch_check(res.metrics) == (4, True)
