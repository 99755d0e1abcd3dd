"""What ``ablate plan`` warns about (ablate.runner.plan_checks): a design that cannot reach significance, a
sequential study's price, a longer WSD cell that a setting keeps from continuing."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from support import RAW
from typer.testing import CliRunner

from ablate import design
from ablate.cli import app
from ablate.design.identity import lineage_key
from ablate.runner import plan as planning
from ablate.runner import plan_checks
from ablate.stats.comparisons import PERMUTATIONS, permutation_test
from ablate.stores import checkpoint_dir


@pytest.fixture
def tmp_path(shm_tmp_path: Path) -> Path:
    return shm_tmp_path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    monkeypatch.delenv("ABLATE_CHECKPOINT_DIR", raising=False)
    return tmp_path / "home"


def spec_of(seeds: object, widths: int = 12, reports: tuple[str, ...] = ("accuracy",), **extra: object):
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    raw["factors"] = {"model.d_model": [8 * (k + 1) for k in range(widths)]}
    return design.validate({**raw, "seeds": seeds, "reports": list(reports), **extra})


def smallest_seeds(threshold: float) -> int:
    # The sign-flip test's smallest two-sided p with n paired seeds is 2/2^n; Holm rejects below a threshold.
    return next(n for n in range(2, 64) if 2.0 / 2**n < threshold)


def lineage_folder(config: dict, seed: int) -> Path:
    return checkpoint_dir() / "stable" / lineage_key(config) / f"replicate-seed{seed}"


def test_the_floor_is_the_permutation_tests_own():
    assert plan_checks.PERMUTATIONS == PERMUTATIONS
    for n in (2, 3, 5, 8, 12, 13, 14, 16):
        real = permutation_test([float(k) for k in range(1, n + 1)], [0.0] * n, paired=True).p_min
        assert plan_checks.p_floor(n) == pytest.approx(real, rel=1e-12), n
    assert plan_checks.seeds_for(1e-5) is None  # below 2/(B + 1): the sampled test never gets there


def test_an_underpowered_design_is_warned_with_the_seeds_that_would_reach_significance():
    # 12 cells, one factor: 11 comparisons + 1 ANOVA term on the accuracy: m = 12. With the term rejected
    # first, Holm gives the first comparison α/11: the best it can get, the threshold the floor must pass.
    spec = spec_of(4)
    assert plan_checks.family_size(spec) == (12, "11 comparisons with the reference and 1 ANOVA term on 1 measure")
    assert plan_checks.family_counts(spec) == (11, 1, 1)
    (line,) = plan_checks.significance_lines(spec)
    need = smallest_seeds(0.05 / 11)
    assert line.startswith("warning: with 4 seeds no comparison can be significant: the exact test cannot give a p "
                           "below 0.13 on any comparison with the reference")
    assert "only the 1 ANOVA term (an F test, which has no floor) can come first" in line
    assert "α/11 = 0.005 at best (m = 11 comparisons with the reference and 1 ANOVA term on 1 measure)" in line
    assert f"; {need} seeds would reach it" in line and "sequential design" in line
    assert plan_checks.significance_lines(spec_of(need)) == []  # enough seeds: nothing to say
    # The norm report's measures join the family: 11 comparisons on each of 4 measures (one layer: no
    # depth), the ANOVA term on 3 (none over seeds), and more seeds are needed.
    both = spec_of(need, reports=("accuracy", "norm_stability"))
    assert plan_checks.family_size(both) == (47, "44 comparisons with the reference and 3 ANOVA terms on 4 measures")
    (line,) = plan_checks.significance_lines(both)
    assert f"; {smallest_seeds(0.05 / 44)} seeds would reach it" in line
    # A non-factorial design has no ANOVA terms: one_at_a_time over two factors.
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    raw.update(factors={"model.d_model": [8, 16, 32], "model.layers": [1, 2]}, design="one_at_a_time",
               reports=["accuracy"], seeds=3)
    assert plan_checks.family_size(design.validate(raw)) == (3, "3 comparisons with the reference on 1 measure")


def test_a_floor_between_the_first_threshold_and_the_best_is_a_note_not_a_warning():
    """4 cells with the norm report, 9 seeds: 12 comparisons and 3 ANOVA terms, m = 15. The floor
    2/2⁹ = 0.0039 is above α/15 but below α/12: a comparison can be significant once the 3 terms are
    rejected first. Plan had warned that none could."""
    spec = spec_of(9, widths=4, reports=("accuracy", "norm_stability"))
    assert plan_checks.family_counts(spec) == (12, 3, 4)  # one layer: no depth measure
    (line,) = plan_checks.significance_lines(spec)
    assert "no comparison" not in line and "warning" not in line
    assert line == ("note: with 9 seeds a comparison can be significant only when at least 3 of the study's 3 ANOVA "
                    "terms (F tests, which have no floor) have smaller p's and are rejected first: the exact test "
                    "cannot give a p below 0.004 on any comparison with the reference, above Holm's first threshold "
                    "over the study's 15 tests, α/15 = 0.003 (m = 12 comparisons with the reference and 3 ANOVA terms "
                    "on 4 measures); 10 seeds would need none (their smallest p, 0.002, is below α/15)")
    # 8 seeds: 0.008 is above α/12, the best any comparison gets; 9 seeds reach it behind the 3 terms.
    (line,) = plan_checks.significance_lines(spec_of(8, widths=4, reports=("accuracy", "norm_stability")))
    assert line.startswith("warning: with 8 seeds no comparison can be significant")
    assert line.endswith("α/12 = 0.004 at best (m = 12 comparisons with the reference and 3 ANOVA terms on 4 "
                         "measures); 9 seeds would reach it (their smallest p is 0.004) once at least 3 of the ANOVA "
                         "terms are rejected first, 10 with none ahead; or a sequential design (seeds: {min, max, "
                         "until: decided}) that stops each comparison once decided")


def test_two_cells_have_no_factor_term_their_comparison_is_its_one_contrast():
    """rotrnn_vs_lru_tokens' design: 2 cells, 8 seeds. The ANOVA of its one factor would test the one
    comparison again, unpaired: m = 5 comparisons, no terms, and 2/2⁸ = 0.0078 is below α/5."""
    two = spec_of(8, widths=2, reports=("accuracy", "norm_stability"))
    assert plan_checks.family_counts(two) == (4, 0, 4)
    assert plan_checks.significance_lines(two) == []
    rotrnn = design.load(Path(__file__).resolve().parents[1] / "reports" / "rotrnn_vs_lru_tokens" / "data" / "spec.yaml")
    assert plan_checks.family_counts(rotrnn) == (5, 0, 5) and plan_checks.significance_lines(rotrnn) == []
    (line,) = plan_checks.significance_lines(spec_of(7, widths=2, reports=("accuracy", "norm_stability")))
    assert line.startswith("warning: with 7 seeds no comparison can be significant: the exact test cannot give a p "
                           "below 0.016 on any comparison with the reference, above Holm's first threshold over the "
                           "study's 4 tests, α/4 = 0.013")


def test_plan_prints_the_warning_and_a_sequential_studys_price(tmp_path, home):
    path = tmp_path / "s.yaml"
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    raw.update(factors={"model.d_model": [8, 16, 32]}, reports=["accuracy"], seeds=3)
    path.write_text(yaml.safe_dump(raw))
    res = CliRunner().invoke(app, ["plan", str(path)])
    assert res.exit_code == 0, res.output
    assert "warning: with 3 seeds no comparison can be significant" in res.output
    raw["seeds"] = {"min": 3, "max": 9, "step": 3, "measures": ["test_accuracy"]}
    path.write_text(yaml.safe_dump(raw))
    res = CliRunner().invoke(app, ["plan", str(path)])
    assert res.exit_code == 0, res.output
    # Before the first look: 3 cells × 3 seeds pending now, and 3 × 9 at most to the last look.
    assert "sequential cost: now 9 trials pending" in res.output
    assert "at most 27 (18 beyond this look) to the last look (9 seeds per cell)" in res.output
    # Its looks' t test has no floor: no warning, even where an exact test on 4 seeds could not pass α/m.
    assert "can be significant" not in res.output
    assert plan_checks.significance_lines(spec_of({"min": 3, "max": 4, "step": 1, "measures": ["test_accuracy"]})) == []


def test_a_sequential_price_in_time_adds_each_cells_trials_at_its_own_cost(home):
    spec = spec_of({"min": 3, "max": 6, "step": 3, "measures": ["test_accuracy"]}, widths=3)
    plan = planning.build(spec)
    cost = {c.id: 10.0 * (k + 1) for k, c in enumerate(design.cells(spec))}  # 10, 20, 30 s a trial
    by_config = {json.dumps(c.config, sort_keys=True): cost[c.id] for c in design.cells(spec)}
    (line,) = plan_checks.sequential_price_lines(plan, lambda cfg: by_config[json.dumps(cfg, sort_keys=True)], 2)
    # now: 3 seeds × (10 + 20 + 30) = 180 s; at most: 6 seeds × 60 = 360 s; over 2 workers.
    assert "now 9 trials pending" in line and "at most 18 (9 beyond this look)" in line
    assert "≈ 1 min 30 s now, at most ≈ 3 min 00 s with 2 workers" in line


def test_a_tuned_sequential_price_counts_seeds_not_tuning_trials(home):
    """A tuned cell's items are its tuning trials and its seeds: the look and the last look count
    seeds only (the probe: lru_ablations, 9 tuning trials and 3 seeds a cell, read 'look at 12 seeds
    per cell' and 'at most 0 beyond this look' with looks to 9)."""
    raw = copy.deepcopy(RAW)
    raw["seeds"] = {"min": 3, "max": 9, "step": 3, "measures": ["test_accuracy"]}
    spec = design.validate(raw)
    plan = planning.build(spec)
    cells = len(plan.cells)
    (line,) = plan_checks.sequential_price_lines(plan)
    now = cells * (spec.tune.trials + 3)  # every tuning trial and the first look's seeds
    assert line.startswith(f"sequential cost: now {now} trials pending (look at 3 seeds per cell: 0 done); "
                           f"at most {now + cells * 6} ({cells * 6} beyond this look)"), line


def test_plan_names_the_setting_that_keeps_a_longer_wsd_cell_from_continuing(tmp_path, home):
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    del raw["factors"]
    raw.update(seeds=1, reports=["accuracy"],
               train={"steps": 120, "schedule": "wsd", "eval_every": 20, "warmup": 0.2})
    short = design.cells(design.validate(raw))[0]
    folder = lineage_folder(short.config, 0)
    folder.mkdir(parents=True)
    (folder / "120.json").write_text(json.dumps({"train": short.config["train"], "cell_id": short.id,
                                                 "cell_label": "short"}))
    (folder / "120.pt").write_bytes(b"")
    longer = design.validate({**raw, "train": {**raw["train"], "steps": 240}})
    (line,) = plan_checks.blocker_lines(planning.build(longer))
    assert line.startswith(f"{design.cells(longer)[0].id}: seed 0 trains from step 0, not from the kept 120-step run")
    assert "train.warmup: a fraction of the steps (0.2)" in line and "set train.warmup_steps: 24" in line
    # With the default warm-up (fixed in steps on wsd) the same doubling has nothing to warn about.
    raw["train"].pop("warmup")
    short = design.cells(design.validate(raw))[0]
    folder = lineage_folder(short.config, 0)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "120.json").write_text(json.dumps({"train": short.config["train"], "cell_id": short.id,
                                                 "cell_label": "short"}))
    longer = design.validate({**raw, "train": {**raw["train"], "steps": 240}})
    assert plan_checks.blocker_lines(planning.build(longer)) == []


def test_a_wsd_study_run_at_120_steps_then_planned_at_240_continues_with_default_settings(tmp_path, home):
    # Issue 43's done criterion: the natural edit (double train.steps, nothing else) continues.
    from io import StringIO

    from rich.console import Console
    from support import stores

    from ablate.runner.launch import run_study

    raw = copy.deepcopy(RAW)
    del raw["tune"]
    del raw["factors"]
    raw.update(name="wsd120", seeds=1, reports=["accuracy"], probes={"every": 60, "batch": 8},
               train={"steps": 120, "schedule": "wsd", "eval_every": 20, "log_every": 20, "batch_size": 8})
    where = stores(tmp_path)
    quiet = Console(file=StringIO())
    outcome = run_study(design.validate(raw), where, quiet, quiet, workers=1)
    assert outcome is not None and outcome.done == 1
    longer = design.validate({**raw, "name": "wsd240", "train": {**raw["train"], "steps": 240}})
    plan = planning.build(longer, where.storage, where.tracking)
    lines = planning.continuation_lines(plan)
    assert len(lines) == 1 and "continues" in lines[0] and "from step 96: 144 of 240 steps to train" in lines[0]
    assert plan_checks.blocker_lines(plan) == []


@pytest.mark.parametrize("seeds", [1, 2, [0, 1]])
def test_below_three_seeds_plan_says_nothing_is_tested_not_that_the_anova_comes_first(seeds):
    """The reports compare cells and run the ANOVA only from stats.MIN_N_TEST seeds a cell: below it
    the family is empty, and the warning must not say the ANOVA terms can come first. The seeds it
    names are those the warning names at 3 seeds, where the family is tested."""
    from ablate.design.family import MIN_N_TEST, tested
    from ablate.stats import MIN_N_TEST as STATS_MIN_N_TEST

    assert MIN_N_TEST == STATS_MIN_N_TEST
    spec = spec_of(seeds)
    n = len(spec.seed_list)
    assert not tested(spec) and tested(spec_of(3))
    (line,) = plan_checks.significance_lines(spec)
    per = "1 seed a cell" if n == 1 else f"{n} seeds a cell"
    assert line.startswith(f"warning: with {per} nothing will be tested: the reports compare cells and run the "
                           "ANOVA only when every cell has at least 3 seeds, so the family is empty (m = 0)"), line
    assert "1 seeds" not in line and "can come first" not in line and "exact test cannot give" not in line
    assert "from 3 seeds they test m = 12 (11 comparisons with the reference and 1 ANOVA term on 1 measure)" in line
    (at_three,) = plan_checks.significance_lines(spec_of(3))
    need = smallest_seeds(0.05 / 11)
    assert f"; {need} seeds would reach it" in at_three
    assert f"a comparison can be significant from {need} seeds (their smallest p is" in line


def test_a_spec_without_seeds_runs_one_and_is_warned_that_nothing_is_tested():
    raw = copy.deepcopy(RAW)
    del raw["tune"]
    raw.pop("seeds", None)
    spec = design.validate({**raw, "reports": ["accuracy"]})
    assert spec.seed_list == [0]
    (line,) = plan_checks.significance_lines(spec)
    assert line.startswith("warning: with 1 seed a cell nothing will be tested")


def test_a_sequential_plan_whose_first_look_is_reused_says_so_not_running(tmp_path):
    """Every seed of the first look is another study's: nothing runs yet, none is done here, and
    the trials are reused, not pending (the probe: 'look 1 of 4 running', '0 pending, 0 done')."""
    from cell_store import finish_all, where
    from cell_store import spec as cell_spec

    from ablate.runner import study as st

    stores = where(tmp_path)
    source = cell_spec("source", seeds=3)
    finish_all(st.prepare(source, design.items(source), stores).study)
    seq = cell_spec("seq", seeds={"min": 3, "max": 6, "step": 3, "measures": ["test_accuracy"]})
    plan = planning.build(seq, stores.storage, stores.tracking)
    assert plan.tally()["reused"] == 6 and not plan.pending()
    (line,) = plan_checks.sequential_price_lines(plan)
    assert line.startswith("sequential cost: now 0 trials pending (look at 3 seeds per cell: 0 done, 6 reused from "
                           "other studies); at most 6 (6 beyond this look)"), line
    said = planning.sequential_lines(seq, stores.storage)
    assert ("state: look 1 of 2 (3 seeds) not analysed yet (`ablate run` analyses a look once its seeds are done); "
            "0 of 1 comparison decided") in said, said
    # One comparison is said as one ("1 comparisons with", "open: 1 comparisons, cells LRU" before).
    assert "; 1 comparison with RotRNN on test_accuracy;" in said[0], said
    assert "open: 1 comparison, cell LRU (and the reference RotRNN)" in said, said


@pytest.mark.parametrize("sampler, trials, seeds, replays", [
    ("tpe", 6, 1, 2), ("random", 4, 1, 0), ("random", 10, 2, 2), ("grid", 4, 1, 0), ("tpe", 3, 1, 0)])
def test_the_plan_warns_when_tuning_trials_outnumber_a_finite_space_s_settings_on_a_seed(sampler, trials, seeds,
                                                                                        replays):
    raw = copy.deepcopy(RAW)
    raw["tune"] = {"sampler": sampler, "trials": trials, "seeds": seeds,
                   "space": {"train.lr": [1e-3, 3e-3], "train.batch_size": [8, 16]}}
    lines = plan_checks.tuning_lines(design.validate(raw))
    if not replays:
        assert lines == []
        return
    (line,) = lines
    assert line.startswith(f"warning: tune.trials ({trials}) runs up to {-(-trials // seeds)} trials on ")
    assert f"has 4 settings: {replays} trials a cell would replay" in line and f"grid with trials {4 * seeds}" in line


def test_a_continuous_space_gives_no_replay_warning():
    raw = copy.deepcopy(RAW)
    raw["tune"] = {**raw["tune"], "trials": 40}  # train.lr is a float range: no draw repeats
    assert plan_checks.tuning_lines(design.validate(raw)) == []
