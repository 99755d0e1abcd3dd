"""The factor-level coverage benchmark (benchmarks/bench_level_calibration.py): its true values are
main_effects' estimand (checked against closed forms), its batched per_seed is per_seed, and --quick
gives a coverage row for every measure, level and setting."""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.stats import norms as sn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_level_calibration as bench  # noqa: E402


def _cv(x: np.ndarray) -> float:
    return float(np.std(x, ddof=1) / np.mean(x))


def test_truth_is_the_unweighted_mean_over_cells_on_each_measures_scale():
    # With only a seed offset random, every run's CVs are the profile's (an offset scales every layer and step
    # alike) and its log final norm is the profile's end plus the offset: closed forms for every measure.
    p = replace(bench.Process(), sigma_b=0.0, sigma_c=0.0, sigma_e=0.0, tail=1.0)
    design = bench.DESIGNS["2x3"]
    true = bench.truth(p, design, True, 4000, np.random.default_rng(1))
    for factor, i in (("f.p", 0), ("f.q", 1)):
        for level in sorted({lv[i] for lv in design}):
            cells = [c.profile(p) for lv, c in design.items() if lv[i] == level]
            training = math.exp(np.mean([np.log(np.mean([_cv(np.exp(row)) for row in mu])) for mu in cells]))
            depth = np.mean([np.sqrt(np.mean([_cv(np.exp(col)) for col in mu.T])) for mu in cells]) ** 2
            assert math.isclose(true[("training", factor, level)], training, rel_tol=1e-9)
            assert math.isclose(true[("depth", factor, level)], depth, rel_tol=1e-9)
            # the Monte Carlo mean of the offsets (sd 0.35 · spread, 4,000 runs) is within 0.03 of 0
            assert math.isclose(true[("final", factor, level)], bench.closed_form(p, design)[("final", factor, level)],
                                rel_tol=0.03)
    # the levels differ, so a mean on another scale (arithmetic CVs, weighted cells) would not pass
    assert true[("training", "f.p", "p1")] > 1.2 * true[("training", "f.p", "p0")]
    assert true[("depth", "f.q", "q2")] > 2 * true[("depth", "f.q", "q0")]


def test_final_truth_matches_its_closed_form_under_every_random_part():
    p = replace(bench.Process(), tail=0.5)
    design = bench.DESIGNS["2x2"]
    true = bench.truth(p, design, False, 6000, np.random.default_rng(2))
    for key, value in bench.closed_form(p, design).items():
        assert math.isclose(true[key], value, rel_tol=0.04), (key, true[key], value)


def test_one_per_seed_call_for_many_studies_gives_each_studys_own():
    p = replace(bench.Process(), late=True)
    design = bench.DESIGNS["2x3"]
    got = bench.batch(p, design, 3, 4, False, np.random.default_rng(5))
    rng = np.random.default_rng(5)
    for one in got:
        norms, trials = bench.study(p, design, 4, False, rng)
        want = sn.per_seed(norms, trials)
        pd.testing.assert_frame_equal(one.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False)
        assert (one["flag"] != "").sum() == 1  # the late run, flagged in its own study


def test_quick_gives_every_measure_level_and_setting_a_coverage(capsys):
    table = bench.main(["--quick", "--processes", "gaussian"])
    out = capsys.readouterr().out
    keys = {(m, f, lv) for m in sn.OWN_MEASURES for f, lv in (("f.p", "p0"), ("f.p", "p1"), ("f.q", "q0"), ("f.q", "q1"))}
    for paired in (True, False):
        rows = table[(table["paired"] == paired) & (table["seeds"] == 3)]
        assert set(zip(rows["measure"], rows["factor"], rows["level"], strict=True)) == keys
        assert (rows["shown"] > 0).all()
        assert (rows["hit"] + rows["below"] + rows["above"] == rows["shown"]).all()
    for m in sn.OWN_MEASURES:
        assert out.count("gaussian      2x2   3 ") >= 6 and f"{m}  n=3: " in out
    assert "band's floor" in out


def test_the_lost_seed_and_unequal_spread_settings_do_what_they_say():
    p = bench.Process()
    design = bench.DESIGNS["2x2"]
    ps = bench.batch(p, design, 1, 4, True, np.random.default_rng(3))[0]
    rng = np.random.default_rng(4)
    lost = bench.lose_a_run(ps, "lost p1.q1", rng)
    gone = pd.concat([ps, lost]).drop_duplicates(["cell_id", "seed"], keep=False)
    assert len(lost) == len(ps) - 1 and gone["cell_id"].tolist() == ["p1.q1"]
    cells = {bench.lose_a_run(ps, "lost any", rng).groupby("cell_id").size().idxmin() for _ in range(40)}
    assert cells == {"p0.q0", "p0.q1", "p1.q0", "p1.q1"}  # a random cell each time
    assert bench.lose_a_run(ps, "paired", rng) is ps
    hetero = bench.setting_design(design, "unpaired m 4.5")
    assert {lv: c.spread for lv, c in hetero.items()} == {
        ("p0", "q0"): 1.0, ("p0", "q1"): 1.0, ("p1", "q0"): bench.HETERO_SPREAD, ("p1", "q1"): bench.HETERO_SPREAD}
    assert bench.setting_design(design, "lost any") is design


def test_the_stopped_settings_keep_only_the_first_seeds_of_the_cells_they_stop():
    ps = bench.batch(bench.Process(), bench.DESIGNS["2x2"], 1, 6, True, np.random.default_rng(5))[0]
    rng = np.random.default_rng(6)
    seeds = sorted(ps["seed"].unique())
    ran = bench.lose_a_run(ps, "stopped p1.q1", rng).groupby("cell_id")["seed"].apply(sorted).to_dict()
    assert ran == {"p0.q0": seeds, "p0.q1": seeds, "p1.q0": seeds, "p1.q1": seeds[: bench.STOP_AT]}
    ran = bench.lose_a_run(ps, "stopped p0", rng).groupby("cell_id")["seed"].apply(sorted).to_dict()
    assert ran == {"p0.q0": seeds[:3], "p0.q1": seeds[:3], "p1.q0": seeds, "p1.q1": seeds}
    levels = sn.main_effects(bench.lose_a_run(ps, "stopped p0", rng), ["f.p", "f.q"]).set_index(["factor", "level"])
    assert levels.loc[("f.q", "q0"), "n"].tolist() == [9, 9, 9]  # one stopped cell and one that ran on
