"""The norm report's checks against the theory (``ablate.stats.norm_theory``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from frames import curve_frame

from ablate.stats import norm_theory


def test_the_theory_check_at_the_end_takes_each_runs_own_last_probe():
    """Seed 1 stopped early (its last probe at step 10, seed 0's at 20): "end" averages both runs'
    last probes, not only the one run that reached step 20."""
    df = curve_frame({"v": np.array([[[1.0, 2.0, 3.0]], [[1.0, 5.0, 7.0]]])})
    df = df[~((df["seed"] == 1) & (df["step"] == 20))]
    noise = df.assign(kind="white_noise", quantity="norm_sq_last")
    end = norm_theory.theory_check(pd.concat([df.assign(quantity="norm_sq_last"), noise]), [("c0", "v")])
    end = end[end["when"] == "end"].iloc[0]
    assert (end["step_first"], end["step"]) == (10, 20)
    assert end["probe_last"] == pytest.approx((3.0 + 5.0) / 2) and end["noise_last"] == pytest.approx(4.0)


def spectrum(cell: str, modes: dict[str, dict[int, list[float]]]) -> pd.DataFrame:
    """Spectrum rows of one variant, one seed and layer: modes[quantity][step] = value per mode."""
    return pd.DataFrame([{"cell_id": cell, "seed": 0, "layer": 0, "step": step, "t": t, "value": v,
                          "kind": "spectrum", "quantity": q}
                         for q, by_step in modes.items() for step, values in by_step.items()
                         for t, v in enumerate(values)])


def test_spectrum_drift_is_each_mode_s_change_between_the_first_and_last_probe():
    """Three modes: |λ| moves by 0.01, 0.02 and 0.09 (median 0.02, largest 0.09), phases by 0.1 each,
    and the input scale by 10 % and 30 % (median 20 %); a middle probe step is not used."""
    df = spectrum("c0", {"abs": {0: [0.90, 0.95, 0.80], 50: [0.5, 0.5, 0.5], 100: [0.91, 0.93, 0.89]},
                         "phase": {0: [0.0, 1.0, 2.0], 100: [0.1, 0.9, 2.1]},
                         "input_scale": {0: [1.0, 2.0], 100: [1.1, 2.6]}})
    row = norm_theory.spectrum_drift(df, [("c0", "v"), ("c1", "absent")]).iloc[0]
    assert (row["first"], row["last"]) == (0, 100)
    assert row["abs_init"] == pytest.approx(0.90) and row["abs_end"] == pytest.approx(0.91)
    assert row["abs_change_median"] == pytest.approx(0.02) and row["abs_change_max"] == pytest.approx(0.09)
    assert row["phase_change_median"] == pytest.approx(0.1)
    assert row["scale_change_median"] == pytest.approx(0.2)
    assert len(norm_theory.spectrum_drift(df, [("c0", "v"), ("c1", "absent")])) == 1  # no rows: no variant


def test_a_zero_input_scale_gives_no_relative_change_rather_than_infinity():
    df = spectrum("c0", {"abs": {0: [0.9], 10: [0.9]}, "phase": {0: [0.0], 10: [0.0]},
                         "input_scale": {0: [0.0], 10: [0.5]}})
    assert np.isnan(norm_theory.spectrum_drift(df, [("c0", "v")]).iloc[0]["scale_change_median"])
