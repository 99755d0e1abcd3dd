"""The comparison report (``ablate.report.comparison_tables`` and its notebook) over real studies on one
store (``tests/real_studies.py``: cmp-a, its follow-up cmp-b that reuses half of it, and cmp-c on
other data): what it compares, what it refuses to, and that the rendered PDF shows both studies."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
import real_studies as studies
from pdfs import page_problems
from typer.testing import CliRunner

from ablate import stats
from ablate.report import comparison_tables as cmp
from ablate.stats import norms as sn

NAMES = [studies.FIRST["name"], studies.FOLLOW_UP["name"], studies.OTHER_DATA["name"]]


@pytest.fixture(scope="module")
def three(studies_root):
    return studies.load(studies_root, NAMES)


def test_the_follow_up_reused_what_it_shares(studies_root):
    outcomes = json.loads((studies_root / "outcomes.json").read_text())
    assert outcomes["cmp-a"] == {"queued": 4, "linked": {}, "ran": {"complete": 4}}
    assert outcomes["cmp-b"] == {"queued": 4, "linked": {"cmp-a": 4}, "ran": {"complete": 4}}
    assert outcomes["cmp-c"]["queued"] == 2  # other data: nothing to reuse


def test_variants_comparability_and_reference(three):
    variants = three.variants().to_pandas()
    assert len(variants) == 5  # 2 shared by cmp-a and cmp-b, 2 of cmp-b alone, 1 of cmp-c
    assert list(variants.studies).count("cmp-a, cmp-b") == 2
    assert list(variants.label) == ["normalisation=xi, heads=2, max_length=24", "normalisation=gamma, heads=2",
                                    "normalisation=xi, heads=4", "normalisation=gamma, heads=4",
                                    "normalisation=xi, heads=2, max_length=20"]  # factors first, then what else differs
    ref_id, why = cmp.reference_variant(variants, None, {r.study: r.baseline_cell for r in three.results})
    assert ref_id == three["cmp-a"].baseline_cell and "cmp-a" in why
    comp = stats.comparability(variants, ref_id)
    assert list(comp.comparable) == [True, True, True, True, False]
    assert comp.differs.iloc[-1] == ["max_length"]
    lines = cmp.comparability_lines(variants, comp, ref_id)
    assert "4 of 5 variants share the reference's data" in lines[0]
    assert "max_length 20 vs 24" in lines[1]


def test_frames_hold_each_item_once_with_curves_from_both_studies(three):
    trials, metrics, curves = three.frames()
    assert trials.height == 5 * 2  # five cells × two seeds, a shared one once
    assert trials.select("cell_id", "seed").unique().height == trials.height
    assert set(trials["study"]) == {"cmp-a, cmp-b", "cmp-b", "cmp-c"}
    df = sn.prepare(curves, trials)
    order = sn.variants(df, trials)
    assert len(order) == 5  # every variant's norm curves reach the figure
    per = sn.layer_norms(df, "probe")
    assert set(per.merge(trials.select("cell_id", "study").unique().to_pandas(), on="cell_id").study) == {
        "cmp-a, cmp-b", "cmp-b", "cmp-c"}


def test_a_selection_by_the_design_selector_syntax(three):
    heads = three.select([{"model.heads": 4}])
    assert set(heads.trials["study"]) == {"cmp-b"} and heads.trials["cell_id"].n_unique() == 2
    per_study = three.select({"cmp-a": [{"model.normalisation": "gamma"}]})
    assert per_study.trials.filter(per_study.trials["study"] == "cmp-a")["cell_id"].n_unique() == 1
    assert per_study.trials.filter(per_study.trials["study"] == "cmp-b")["cell_id"].n_unique() == 4
    with pytest.raises(ValueError, match="names what no study knows.*did you mean 'model.heads'"):
        three.select([{"model.haeds": 4}])
    # As the command line and the guide write them: text, or one mapping.
    for one in ("model.heads=4", {"model.heads": 4}, ["model.heads=4"], {"model.heads": [4]}):
        assert three.select(one).trials["cell_id"].to_list() == heads.trials["cell_id"].to_list(), one
    with pytest.raises(ValueError, match="select"):
        three.select("model.heads")  # not key=value


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) is not installed")
def test_a_comparison_of_two_studies_renders_with_both_studies_curves(studies_root, tmp_path, monkeypatch):
    studies.study_env(monkeypatch, studies_root)
    res = CliRunner().invoke(app_cli(), ["report", "cmp-a", "cmp-b", "--compare", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "comparison.html").read_text()
    assert not re.search(r"<script[^>]+src=\"https?://", html), "the HTML must be self-contained"
    assert html.count("data:image/svg+xml;base64") >= 3  # figures as vector graphics
    text = subprocess.run(["pdftotext", "-layout", str(tmp_path / "comparison.pdf"), "-"], capture_output=True,
                          text=True).stdout
    for words in ("cmp-a-cmp-b", "Hidden-state norms in shared axes", "4 from cmp-a", "normalisation=gamma, heads=4",
                  "All 4 variants are trained and tested on the same data", "Comparisons with the reference"):
        assert words in " ".join(text.split()), words
    assert page_problems(tmp_path / "comparison.pdf") == []  # no split identifier, no near-empty page
    # A selection with another study's cell: the report says which variant is not compared, and why.
    res = CliRunner().invoke(app_cli(), ["compare", "cmp-a", "cmp-c", "--cells", "model.normalisation=xi",
                                         "--out", str(tmp_path / "c"), "--format", "pdf"])
    assert res.exit_code == 0, res.output
    text = " ".join(subprocess.run(["pdftotext", str(tmp_path / "c" / "comparison.pdf"), "-"], capture_output=True,
                                   text=True).stdout.split())
    assert "1 of 2 variants share the reference's data" in text and "1 is not" in text
    assert "max_length 20 vs 24" in text and "No other variant is on the reference's data" in text


def test_comparison_commands_refuse_bad_input_with_exit_2(studies_root, monkeypatch, tmp_path):
    studies.study_env(monkeypatch, studies_root)
    res = CliRunner().invoke(app_cli(), ["compare", "cmp-a", "cmp-b", "--cells", "model.haeds=4", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "did you mean 'model.heads'" in res.output
    res = CliRunner().invoke(app_cli(), ["compare", "cmp-a", "--cells", "model.heads=16", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "matches no cell" in res.output
    res = CliRunner().invoke(app_cli(), ["compare", "cmp-a", "nope", "--out", str(tmp_path)])
    assert res.exit_code == 1 and "no study named 'nope'" in res.output
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\ntask: {name: listops}\n")
    res = CliRunner().invoke(app_cli(), ["compare", "--spec", str(spec)])
    assert res.exit_code == 2 and "no `compare:` section" in res.output
    assert not list(tmp_path.glob("*.html"))


def app_cli():
    from ablate.cli import app

    return app


# --- what a comparison of differently configured studies says (no store: variants as Studies.variants gives them)

TASK = {"name": "listops", "max_length": 24, "seed": 0}
ROT_INIT = {"scheme": "rotrnn", "gamma_min": 0.5, "gamma_max": 0.999, "identity_basis": False}
RING_INIT = {"scheme": "ring", "r_min": 0.9, "r_max": 0.999, "identity_basis": False}


def _variant(cid: str, study: str, label: str, model: dict, batch: int = 8, data: str = "d1") -> dict:
    config = {"model": {"family": "linear_rnn", "layers": 1, "d_model": 32, "state_dim": 32, "heads": 4,
                        "normalisation": "xi", "init": ROT_INIT, **model},
              "task": TASK, "train": {"batch_size": batch, "lr": 0.003, "steps": 8}}
    return {"cell_id": cid, "study": study, "studies": study, "cell_label": label, "label": label,
            "task": json.dumps(TASK), "data_version": data, "code_version": "1", "config": json.dumps(config)}


def _two_studies() -> tuple[pd.DataFrame, dict]:
    """Study A: two normalisations at d_model 32, 4 heads, grid-tuned lr; study B: a RotRNN and an
    LRU at d_model 64 (8 and 1 heads, the LRU on a ring init), lr by TPE — as the ListOps pair."""
    from ablate.spec.tune import TuneSpec

    variants = pd.DataFrame([
        _variant("a1", "A", "normalisation=xi", {}),
        _variant("a2", "A", "normalisation=gamma", {"normalisation": "gamma"}),
        _variant("b1", "B", "normalisation=xi, variant=RotRNN", {"d_model": 64, "heads": 8}),
        _variant("b2", "B", "normalisation=gamma, variant=LRU",
                 {"d_model": 64, "heads": 1, "normalisation": "gamma", "init": RING_INIT}),
    ])
    tunes = {"A": TuneSpec.model_validate({"trials": 2, "sampler": "grid", "space": {"train.lr": {"choices": [0.005, 0.01]}}}),
             "B": TuneSpec.model_validate({"trials": 4, "sampler": "tpe",
                                           "space": {"train.lr": {"low": 1e-3, "high": 1e-2, "log": True}}})}
    return variants, tunes


def test_the_settings_the_labels_leave_out_are_said_per_study():
    variants, tunes = _two_studies()
    diffs = cmp.setting_differences(variants, tunes, ["model.normalisation"])
    # the factor the labels name is left out, and so is the lr both studies tune (its config value never ran)
    assert list(diffs.setting) == ["model.d_model", "model.heads", "model.init", "tune"]
    text = cmp.settings_sentence(diffs, "Table 4")
    assert "model.d_model (32 vs 64)" in text and "model.heads (4 vs 8, 1)" in text
    assert ("model.init ({scheme: rotrnn, gamma_min: 0.5, gamma_max: 0.999} in each; B also "
            "{scheme: ring, r_min: 0.9, r_max: 0.999})") in text  # the keys all share (identity_basis) left out
    assert "tune (grid, 2 trials: train.lr choices 0.005, 0.01 vs tpe, 4 trials: train.lr [0.001, 0.01] log)" in text
    assert "a difference between configurations, not only in the factors the labels name (Table 4" in text
    table = cmp.settings_table(diffs, variants)
    assert list(table.variants) == ["the 2 variants of A", "normalisation=xi, variant=RotRNN",
                                    "normalisation=gamma, variant=LRU"]
    assert list(table["model.heads"]) == ["4", "8", "1"]
    # One study, or a setting every label names: nothing to say.
    assert cmp.setting_differences(variants[variants.study == "B"], {"B": tunes["B"]}, []).empty
    named = variants.assign(label=[f"{lbl}, heads={h}" for lbl, h in zip(variants.label, [4, 4, 8, 1], strict=True)])
    assert "model.heads" not in set(cmp.setting_differences(named, tunes, ["model.normalisation"]).setting)
    # The data sentence claims the data only, not that the variants compare directly.
    line = cmp.comparability_lines(variants, stats.comparability(variants, "a1"), "a1")[0]
    assert line.startswith("All 4 variants are trained and tested on the same data") and "directly" not in line


def _trials(cells: dict[str, list[float]]) -> pd.DataFrame:
    return pd.DataFrame([{"cell_id": c, "cell_label": c, "seed": s, "phase": "replicate", "status": "complete",
                          "test_accuracy": v} for c, values in cells.items() for s, v in enumerate(values)])


def test_seeds_pair_only_where_they_draw_the_same_batches():
    variants = pd.DataFrame([_variant("r", "A", "batch=8", {}), _variant("s", "B", "same", {}),
                             _variant("o", "B", "batch=16", {}, batch=16)])
    pairing = cmp.seed_pairing(variants, "r")
    assert list(pairing.same_order) == [True, True, False] and pairing.why.iloc[2] == "batch size 16 vs 8"
    trials = _trials({"r": [0.50, 0.52, 0.55, 0.51], "s": [0.53, 0.55, 0.58, 0.54], "o": [0.53, 0.55, 0.58, 0.54]})
    apart = set(pairing.loc[~pairing.same_order, "cell_id"])
    comp = stats.compare_to_reference(cmp.apart_seeds(trials, apart), "test_accuracy", "r")
    assert dict(zip(comp.cell_id, comp.paired, strict=True)) == {"s": True, "o": False}
    assert set(trials.seed) == {0, 1, 2, 3}  # the frame given is left as it was
    line = cmp.pairing_line(pairing, variants, {"r", "s", "o"}, "r")
    assert "batch size 8" in line and "Taken unpaired" in line and "batch=16 (batch size 16 vs 8)" in line
    assert "Taken unpaired" not in cmp.pairing_line(pairing, variants, {"r", "s"}, "r")


def test_one_family_over_every_test_the_comparison_makes_said_in_its_words():
    from ablate.stats import family as fam

    trials = _trials({"r": [0.50, 0.52, 0.55, 0.51, 0.49], "s": [0.53, 0.55, 0.58, 0.54, 0.52],
                      "t": [0.50, 0.53, 0.54, 0.52, 0.48]})
    comp = stats.compare_to_reference(trials, "test_accuracy", "r")
    norms = pd.DataFrame({"measure": ["training", "final", "depth"], "cell_id": ["s", "s", "s"],
                          "cell_label": ["s"] * 3, "p": [0.0625, 0.0625, np.nan]})
    family = fam.adjust(fam.members([("test_accuracy", comp), ("norm", norms)]), 0.05)
    assert len(family) == 4  # two accuracy comparisons and two tested norm ones; an untested one takes no share
    text = cmp.family_sentence(family, 0.05)
    assert "One family for this comparison: 4 comparisons with the reference on 3 measures" in text
    assert "m = 4 tests" in text and "α/m = 0.013" in text and "study" not in text.split("Each study")[0]
    shared = fam.apply(comp, family, "test_accuracy", "comparison", 0.05)
    # Holm over all four: the accuracy p's are adjusted beyond what Holm over their own two gives.
    assert (shared.p_adj >= comp.p_adj).all() and (shared.p_adj > comp.p_adj).any()
    words = cmp.in_comparison_words(["Holm's first threshold over the study's 4 tests"])
    assert words == ["Holm's first threshold over this comparison's 4 tests"]
    table = cmp.answer_table(shared)
    assert list(table.columns) == ["variant", "seeds", "mean", "Δ vs reference [95% CI]", "p (Holm)", "verdict"]
    lines = cmp.answer_lines(shared, None, "r", "0.514 [0.48, 0.55]", "test_accuracy")
    assert lines[0].startswith("Against the reference, **r** (test accuracy 0.514 [0.48, 0.55]), 0 of 2 tested "
                               "differences are significant at α = 0.05 (Table 1)")
    i = int(shared.mean_diff.abs().idxmax())
    assert (f"the largest is {table.at[i, 'variant']}: {table.at[i, 'Δ vs reference [95% CI]']}, p (Holm) "
            f"{table.at[i, 'p (Holm)']}") in lines[0]


def test_a_norm_measure_whose_one_comparison_is_untested_says_so_in_the_singular():
    # Two variants on two seeds: "none of the 1 comparisons can be tested" before.
    import numpy as np
    from frames import curve_frame

    from ablate.report import comparison_tables
    from ablate.stats import norms as sn

    df = curve_frame({"a": np.exp(np.random.default_rng(3).standard_normal((2, 2, 5))),
                      "b": 1 + 0.01 * np.random.default_rng(4).standard_normal((2, 2, 5))})
    norms = sn.layer_norms(df)
    comp = sn.compare(sn.per_seed(norms), norms, "c0", sn.variants(df))
    said = comparison_tables.norm_sentences(comp, "a")
    assert said and all(": the one comparison cannot be tested (fewer than 3 seeds)" in s for s in said), said
