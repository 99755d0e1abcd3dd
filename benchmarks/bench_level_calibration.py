"""Coverage of the norm report's factor-level intervals (``stats.norms.main_effects``) on studies whose
factors have effects.

    python benchmarks/bench_level_calibration.py [--studies 400] [--seeds 3 4 6 8] [--designs 2x2 2x3]
        [--processes gaussian "lognormal 0.5" "lognormal 1" "late run"]
        [--settings paired unpaired "lost p1.q1" "lost any" "unpaired m 4.5" "stopped p1.q1" "stopped p0"] [--truth-runs 20000] [--seed 11]
        [--quick]

Each study is a full factorial of factors p and q (2 × 2, or 2 × 3) whose runs come from the process of
``bench_norm_calibration`` (its ``Process``, ``simulate`` and nulls: normal, skewed log-normal seed effects,
a run that grew 10⁴× late), every cell changed on the log scale by its factors (``DESIGNS``):

    log ‖x‖² = g·log(1 + 3k/K) + d·l + s + m·(a(s) + b(s)·k/K + c(s, l) + e(s, l, k))

so p changes the growth over training g (the CV over training and the final norm) and the spread m of
everything random (a level whose runs vary more: the pooled t of unpaired studies assumes equal spreads),
q the slope over layers d (the CV over layers) and the level s (the final norm), and the p1 · q1 cell has
an interaction besides. The runs go through exactly the report's functions (``per_seed`` with the factor
columns, ``main_effects`` of its ``primary`` runs) at each number of seeds, in the ``--settings`` (``SETTINGS``;
default the first two): paired (all cells share their seeds: the seed-blocked t), unpaired (every cell its
own: Welch's t), a paired study that lost one run of p1 · q1 (the cell whose runs vary most) or of a random
cell (a seed flagged out, a failed trial: the seed-blocked t jackknifed over seeds), and unpaired with
p1's spread 4.5 and p0's 1 (on the final norm p1's runs then vary about 4.5× as much as p0's; the CVs, which
a seed's offset does not move, 1.2–2×), and a paired study whose p1 · q1 cell, or p0's two cells, stopped at
the first 3 seeds while the others ran them all (a sequential design's early decision: seed sets that
overlap in part).

A level's true value is what ``main_effects`` estimates: the unweighted mean over the level's cells of
each cell's expected per-run value on the measure's scale (``stats.norms.mean_scale``: log CV over
training and log final norm, √CV over layers), mapped back (exp; the square). Each cell's expectation is a
Monte Carlo over ``--truth-runs`` runs drawn as the setting draws them (paired runs' seed effects are a sum
of a shared and an own part, which for log-normal effects is not the unpaired runs' distribution), the
late run left out (the report leaves it out: its estimand is the other runs'). Printed per process,
setting, measure and level: the share of studies whose 95% interval covers the true value, of those that
print one (and w, the intervals' mean width on the measure's scale), with the 99.9% Monte-Carlo band of a
coverage of exactly 0.95 over that many studies.
``--quick`` runs a few studies at 3 seeds (seconds; tests/ runs it).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_norm_calibration import NULLS, Process, _band, simulate  # noqa: E402

from ablate.stats import norms as sn  # noqa: E402


@dataclass(frozen=True)
class Cell:
    """What a cell's factor levels do to the process's log ‖x‖² (module docstring)."""

    growth: float = 1.0  # g: multiplies the growth over training, log(1 + 3k/K)
    slope: float = 0.4  # d: log ‖x‖² per layer
    shift: float = 0.0  # s: added everywhere
    spread: float = 1.0  # m: multiplies every seed effect and the noise

    def profile(self, p: Process) -> np.ndarray:
        k = np.linspace(0, 1, p.steps)
        return self.growth * np.log(1 + 3 * k)[None, :] + self.slope * np.arange(p.layers)[:, None] + self.shift


def _design(q_levels: int) -> dict[tuple[str, str], Cell]:
    slope, shift = (0.4, 0.8, 1.2), (0.0, 1.0, -0.5)
    out = {}
    for i, (growth, spread) in enumerate(((1.0, 1.0), (1.5, 1.6))):
        for j in range(q_levels):
            extra = 0.3 if (i, j) == (1, 1) else 0.0  # an interaction: p1 · q1 is not additive
            out[(f"p{i}", f"q{j}")] = Cell(growth, slope[j] + extra, shift[j] + extra, spread)
    return out


#: The designs: (level of p, level of q) → what the cell does.
DESIGNS = {"2x2": _design(2), "2x3": _design(3)}


def _name(levels: tuple[str, str]) -> str:
    return f"{levels[0]}.{levels[1]}"


def apply(p: Process, norms: pd.DataFrame, cells: dict[str, Cell]) -> pd.DataFrame:
    """``norms`` of ``simulate`` (every cell the process's) with each cell's levels applied: the
    process's profile swapped for the cell's and its random part scaled by the cell's spread."""
    base = p.profile()
    layer, k = norms["layer"].to_numpy(int), (norms["step"].to_numpy(int) // 100)
    log = np.log(norms["value"].to_numpy(float))
    out = np.empty_like(log)
    for cid, cell in cells.items():
        at = (norms["cell_id"] == cid).to_numpy()
        mu_base, mu_cell = base[layer[at], k[at]], cell.profile(p)[layer[at], k[at]]
        out[at] = mu_cell + cell.spread * (log[at] - mu_base)
    return norms.assign(value=np.exp(out))


def study(p: Process, design: dict[tuple[str, str], Cell], seeds: int, paired: bool, rng: np.random.Generator
          ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(``layer_norms`` rows, trials with the factor columns ``f.p``, ``f.q``) of one study."""
    names = {_name(lv): c for lv, c in design.items()}
    norms = apply(p, simulate(p, seeds, paired, rng, cells=tuple(names)), names)
    trials = pd.DataFrame([{"cell_id": _name(lv), "f.p": lv[0], "f.q": lv[1]} for lv in design])
    return norms, trials


def cell_values(p: Process, cell: Cell, paired: bool, runs: int, rng: np.random.Generator) -> dict[str, float]:
    """A cell's expected per-run value of each measure on its ``mean_scale`` (``runs`` runs, late run
    left out, in batches of 2,000; paired: seed effects drawn as a paired study draws them)."""
    p = replace(p, late=False)
    sums = dict.fromkeys(sn.OWN_MEASURES, 0.0)
    for done in range(0, runs, 2000):
        norms = apply(p, simulate(p, min(2000, runs - done), paired, rng, cells=("x",)), {"x": cell})
        ps = sn.per_seed(norms)
        for m in sn.OWN_MEASURES:
            data, col, _ = sn.mean_scale(ps, m)
            sums[m] += float(np.nansum(data[col].to_numpy(float)))
    return {m: s / runs for m, s in sums.items()}


def truth(p: Process, design: dict[tuple[str, str], Cell], paired: bool, runs: int, rng: np.random.Generator
          ) -> dict[tuple[str, str, str], float]:
    """(measure, factor, level) → the level's true value: the unweighted mean over its cells of their
    expected values on the measure's scale, mapped back (what ``main_effects`` estimates)."""
    per_cell = {lv: cell_values(p, c, paired, runs, rng) for lv, c in design.items()}
    out = {}
    for m in sn.OWN_MEASURES:
        back = sn.mean_scale(pd.DataFrame({"cv_depth": [1.0]}), m)[2]
        for i, factor in enumerate(("f.p", "f.q")):
            for level in sorted({lv[i] for lv in design}):
                mean = np.mean([v[m] for lv, v in per_cell.items() if lv[i] == level])
                out[(m, factor, level)] = float(back(mean))
    return out


def closed_form(p: Process, design: dict[tuple[str, str], Cell]) -> dict[tuple[str, str, str], float]:
    """The true final norm of each level, exactly: E log ‖x‖² at the last probe step is the cell's
    profile there (every seed effect and the noise have mean 0), and a run's log final norm is its
    mean over layers (a check of ``truth``)."""
    out = {}
    for i, factor in enumerate(("f.p", "f.q")):
        for level in sorted({lv[i] for lv in design}):
            logs = [c.profile(p)[:, -1].mean() for lv, c in design.items() if lv[i] == level]
            out[("final", factor, level)] = float(np.exp(np.mean(logs)))
    return out


def batch(p: Process, design: dict[tuple[str, str], Cell], studies: int, seeds: int, paired: bool,
          rng: np.random.Generator) -> list[pd.DataFrame]:
    """``per_seed`` (with the factor columns) of ``studies`` studies, one frame each. One ``per_seed``
    call for all of them (a run's values depend on its own variant's runs only, so each study's cell
    ids prefixed ``"i|"`` keep them apart): the same values, a fifth of the time."""
    norms, trials = zip(*(study(p, design, seeds, paired, rng) for _ in range(studies)), strict=True)
    tag = [f"{i}|" for i in range(studies)]
    ps = sn.per_seed(pd.concat([n.assign(cell_id=t + n["cell_id"]) for t, n in zip(tag, norms, strict=True)],
                               ignore_index=True),
                     pd.concat([tr.assign(cell_id=t + tr["cell_id"]) for t, tr in zip(tag, trials, strict=True)],
                               ignore_index=True))
    which = ps["cell_id"].str.split("|").str[0].astype(int)
    return [ps[which == i].assign(cell_id=ps.loc[which == i, "cell_id"].str.split("|").str[1]) for i in range(studies)]


#: The settings (``--settings``): how a study's seeds are drawn, and what happens to its runs afterwards.
#: "lost p1.q1" and "lost any" are paired studies that lost one run (a random seed's) of the cell whose
#: runs vary most (p1 · q1: p1's spread and the interaction) or of a random cell — a seed that blew up
#: and was flagged out, or a failed trial; "unpaired m 4.5" is unpaired with p1's spread m 4.5 and
#: p0's 1 (one level's runs vary 4.5× as much as the other's); "stopped p1.q1" and "stopped p0" are
#: paired studies in which p1 · q1, or both of p0's cells, kept only their first ``STOP_AT`` seeds while
#: the others ran them all (a sequential design whose first look decided those cells: the seed sets
#: overlap in part, and the jackknife's one df per seed counts seeds that cell never ran).
SETTINGS = ("paired", "unpaired", "lost p1.q1", "lost any", "unpaired m 4.5", "stopped p1.q1", "stopped p0")
HETERO_SPREAD = 4.5
STOP_AT = 3


def setting_design(design: dict[tuple[str, str], Cell], setting: str) -> dict[tuple[str, str], Cell]:
    """The design a setting runs: ``design`` itself, or for "unpaired m 4.5" with p0's cells at spread 1
    and p1's at ``HETERO_SPREAD``."""
    if setting != "unpaired m 4.5":
        return design
    return {lv: replace(c, spread=HETERO_SPREAD if lv[0] == "p1" else 1.0) for lv, c in design.items()}


def lose_a_run(ps: pd.DataFrame, setting: str, rng: np.random.Generator) -> pd.DataFrame:
    """``ps`` (one study's ``per_seed``) without the runs the setting loses: a random seed's run of
    p1.q1 ("lost p1.q1") or of a random cell ("lost any"); every run after the first ``STOP_AT`` seeds
    of p1.q1 ("stopped p1.q1") or of p0's cells ("stopped p0"); ``ps`` itself in the other settings."""
    if setting.startswith("stopped"):
        stopped = ps["f.p"].eq("p0") if setting == "stopped p0" else ps["cell_id"].eq("p1.q1")
        first = sorted(ps["seed"].unique())[:STOP_AT]
        return ps[~stopped | ps["seed"].isin(first)]
    if not setting.startswith("lost"):
        return ps
    cells = list(dict.fromkeys(ps["cell_id"]))
    cell = "p1.q1" if setting == "lost p1.q1" else cells[int(rng.integers(len(cells)))]
    seeds = ps.loc[ps["cell_id"] == cell, "seed"].to_numpy()
    seed = seeds[int(rng.integers(len(seeds)))]
    return ps[~((ps["cell_id"] == cell) & (ps["seed"] == seed))]


def coverage(p: Process, design: dict[tuple[str, str], Cell], studies: int, seeds: int, setting: str,
             true: dict[tuple[str, str, str], float], rng: np.random.Generator) -> pd.DataFrame:
    """Per (measure, factor, level): studies whose ``main_effects`` interval covers the true value
    (``hit``), studies that print one (``shown``), those whose interval lies wholly below or above
    it (``below``, ``above``: which way a miss goes), and the intervals' mean width on the measure's
    scale of ``mean_scale`` (``width``: log of the ratio high / low, or for depth √high − √low)."""
    tally = {key: [0, 0, 0, 0, 0.0] for key in true}
    paired = not setting.startswith("unpaired")
    for done in range(0, studies, 50):
        for ps in batch(p, design, min(50, studies - done), seeds, paired, rng):
            for r in sn.main_effects(lose_a_run(ps, setting, rng), ["f.p", "f.q"]).itertuples():
                t, target = tally[(r.measure, r.factor, r.level)], true[(r.measure, r.factor, r.level)]
                if np.isfinite(r.low) and np.isfinite(r.high):
                    t[0] += bool(r.low <= target <= r.high)
                    t[1] += 1
                    t[2] += bool(r.high < target)
                    t[3] += bool(r.low > target)
                    t[4] += (np.sqrt(r.high) - np.sqrt(r.low)) if r.measure == "depth" else np.log(r.high / r.low)
    rows = [{"measure": m, "factor": f, "level": lv, "hit": h, "shown": s, "below": b, "above": a,
             "width": w / s if s else np.nan}
            for (m, f, lv), (h, s, b, a, w) in tally.items()]
    return pd.DataFrame(rows)


def run(args: argparse.Namespace) -> pd.DataFrame:
    """Every process × design × setting's coverage rows, printed as they come."""
    rng = np.random.default_rng(args.seed)
    lo, hi = _band(args.studies, 0.05)
    print(f"Coverage of stats.norms.main_effects' 95% intervals, per factor level: {args.studies} studies per "
          f"process, design and setting; 99.9% band of a coverage of 0.95 over {args.studies} studies "
          f"[{1 - hi:.3f}, {1 - lo:.3f}]. Truth: {args.truth_runs:,} runs per cell.")
    for name, cells in ((d, DESIGNS[d]) for d in args.designs):
        print(f"design {name}: " + "; ".join(f"{_name(lv)} g {c.growth:g} d {c.slope:g} s {c.shift:g} m {c.spread:g}"
                                             for lv, c in cells.items()))
    out = []
    for proc in args.processes:
        tail, late = NULLS[proc]
        p = replace(Process(), tail=tail, late=late)
        for dname in args.designs:
            design = DESIGNS[dname]
            for setting in args.settings:
                used = setting_design(design, setting)
                paired = not setting.startswith("unpaired")
                true = truth(p, used, paired, args.truth_runs, rng)
                for seeds in args.seeds:
                    start = time.perf_counter()
                    c = coverage(p, used, args.studies, seeds, setting, true, rng)
                    c = c.assign(process=proc, design=dname, setting=setting, paired=paired, seeds=seeds)
                    out.append(c)
                    _print_rows(c, time.perf_counter() - start)
    return pd.concat(out, ignore_index=True)


def _print_rows(c: pd.DataFrame, took: float) -> None:
    r0 = c.iloc[0]
    setting = f"{r0['process']:<14}{r0['design']:<5}{r0['seeds']:>2} {r0['setting']:<15}"
    for m, rows in c.groupby("measure", sort=False):
        cells = "  ".join(f"{r.factor[2:]}={r.level} {r.hit / r.shown if r.shown else np.nan:.3f} "
                          f"({r.below}↓{r.above}↑/{r.shown}, w {r.width:.3g})" for r in rows.itertuples())
        print(f"{setting}{m:>9}  {cells}", flush=True)
    print(f"{'':<31}({took:.0f} s)", flush=True)


def summary(table: pd.DataFrame, studies: int) -> None:
    """The lowest coverage of each measure per process and setting over the design's levels, and
    every level below the band."""
    lo, hi = _band(studies, 0.05)
    floor = 1 - hi
    t = table.assign(coverage=table["hit"] / table["shown"].where(table["shown"] > 0))
    print()
    print("Lowest coverage over the levels (and which level), per process, design and setting:")
    for (proc, dname, setting), g in t.groupby(["process", "design", "setting"], sort=False):
        for m, gm in g.groupby("measure", sort=False):
            per_n = gm.groupby("seeds")["coverage"].min()
            print(f"{proc:<14}{dname:<5}{setting:<15}{m:>9}  "
                  + "  ".join(f"n={n}: {v:.3f}" for n, v in per_n.items()))
    bad = t[t["coverage"] < floor]
    print()
    if bad.empty:
        print(f"No level's coverage is below the band's floor {floor:.3f}.")
    else:
        print(f"Below the band's floor {floor:.3f}:")
        for r in bad.itertuples():
            print(f"  {r.process}, {r.design}, {r.seeds} seeds {r.setting}, {r.measure}, "
                  f"{r.factor}={r.level}: {r.coverage:.3f} ({r.hit}/{r.shown}; {r.below} below, {r.above} above)")


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser()
    parser.add_argument("--studies", type=int, default=400, help="studies per process, design and setting")
    parser.add_argument("--seeds", type=int, nargs="+", default=[3, 4, 6, 8])
    parser.add_argument("--designs", nargs="+", choices=list(DESIGNS), default=["2x2"])
    parser.add_argument("--processes", nargs="+", choices=list(NULLS), default=list(NULLS))
    parser.add_argument("--settings", nargs="+", choices=SETTINGS, default=["paired", "unpaired"],
                        help="how studies draw and lose runs (SETTINGS)")
    parser.add_argument("--truth-runs", type=int, default=20000, help="runs per cell of the true values' Monte Carlo")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--quick", action="store_true", help="20 studies at 3 seeds, 2,000 truth runs: seconds")
    args = parser.parse_args(argv)
    if args.quick:
        args.studies, args.seeds, args.truth_runs = 20, [3], 2000
    warnings.simplefilter("ignore")
    table = run(args)
    summary(table, args.studies)
    return table


if __name__ == "__main__":
    main()
