"""A study's results as tidy polars frames: the one way notebooks (and users) read results.

    res = ablate.results.load("quickstart")            # from any directory: see "Where" below
    res.trials      one row per (cell, phase, seed) of the spec, pending ones included
    res.metrics     every scalar logged: step, name, value per run
    res.curves      hidden-state probes (ablate.probes): step, layer, head, t, value, kind, quantity
    res.provenance()  what produced the results: spec, hash, commits, versions, devices, dates, stores
    res.tuning()      per tuned cell: the best setting, its objective value, trials used
    res.references()  the spec's published values and the cells they match
    export(res, DIR) / read_export(DIR)  the same as files (Parquet, the spec, a sha256 manifest) that
                      read back equal without a store: `ablate export`, `ablate report --data`
    read_exports([DIR, …])  several exports as one ``Studies``, as ``load([...])``: `ablate compare --data`
                      (``read_exports_in``: folders of exports, some studies of them, in order)
    export_many([...], DIR)  several studies exported into DIR/STUDY each, every directory checked and
                      every study read before anything is written: `ablate export`
    status("quickstart")  the items counted by status per cell and in total, read from the queue
                      alone (no MLflow, no frames): what `ablate status` prints

Every frame is polars (``.to_pandas()`` for pandas: Enum columns become ``Categorical``). The
columns and their dtypes (docs/results.md has the same with examples):

``trials``
    ``cell_id`` (String, 12 hex digits), ``cell_label`` (String), ``seed`` (Int64), ``phase``
    (String: ``replicate`` or ``tune``), one column per factor named as in the spec (``Enum`` of
    the level labels in the spec's order, so sorting follows the spec: ``2`` before ``16``; a
    conditional factor's cells where it does not apply show its baseline label), ``status``
    (String: complete, pruned, running, pending, diverged, failed, killed — the item's state,
    as ``ablate status`` counts it), ``attempts`` (Int64, trials the item took), ``tune_index``
    (Int64, null for replicates), ``trial_number`` (Int64, the Optuna trial standing for the
    item), ``failure_kind`` / ``failure_message`` (String), ``seconds`` (Float64, training wall
    time), ``steps`` (Int64, steps trained), ``mlflow_run_id`` (String), ``started`` /
    ``finished`` (Datetime[us]), ``val_accuracy``, ``val_loss``, ``val_bpc``, ``test_accuracy``,
    ``test_loss``, ``test_bpc``, ``chance`` (Float64, at the end of training; ``chance`` is the
    majority-class accuracy of the task), ``git_commit``, ``device``, ``host`` (String),
    ``params`` (String, JSON of a tuned setting), ``tuned_from`` (String). Null where a value does
    not apply or is not known yet (a pending item has no metrics). Convergence
    (``ablate.stats.convergence.last_fifth``; null for trials recorded before it): ``converged``
    (Boolean: the trial stopped early, or its validation metric did not rise over the last fifth
    of the steps run by more than ``train.converged_tol`` and its pass-to-pass noise),
    ``val_gain_last`` (Float64, the fitted gain over that fifth in metric units), ``val_gain_se``
    (Float64, its standard error; null for trials recorded before the trend test),
    ``stopped_early`` (Boolean: patience, or a pruned tuning trial), ``best_step`` (Int64).
    Budgets (``train.until_converged``, ``ablate.runner.study``): ``budget`` (Int64, the ``train.steps`` of the run standing
    for the item: its longest finished run), ``extended_from`` (Int64, the cell's declared
    ``train.steps`` when that run is an ``until_converged`` extension, else null),
    ``continued_from`` (String, the stable-phase checkpoint a WSD run branched from: ``label (cell)
    · seed s · step k``; null when trained from step 0).
``metrics``
    ``step`` (Int64), ``name`` (String: ``train/loss``, ``train/accuracy``, ``train/lr``,
    ``train_state_norm/layer<i>``, ``val/loss|accuracy|bpc``, ``test/…``, ``chance``, the per-layer
    probe summaries ``state_norm/layer<i>`` …, ``grad_norm/<group>``, the probe inputs'
    fingerprints ``probe/batch_fingerprint`` and ``probe/white_noise_fingerprint``), ``value``
    (Float64), then ``cell_id``, ``seed`` (Int64), ``phase``, ``cell_label`` and the factor
    columns as in ``trials``. Runs that completed or diverged only.
``curves``
    ``step`` (Int64, the training step of the probe), ``layer`` (Int32), ``head`` (Int32), ``t``
    (Int32), ``value`` (Float64), ``kind`` and ``quantity`` (String), then the run columns as in
    ``metrics``. ``layer``, ``head`` and ``t`` are null where they do not apply (a summary over t,
    a row that is not per head, a gradient norm of a whole parameter group); the artifacts store
    −1 there (``ablate.probes.SUMMARY``) and this reader maps it to null. The (kind, quantity)
    pairs:

    =========== ==================== ============ ============ ==============================="""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import re
import shutil
import stat
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import polars as pl
import yaml

from ablate import design
from ablate.runner import sequential, tracking
from ablate.runner.items import trials_by_item

# Re-exported: finding a study's stores and its status need no frames (ablate.runner.locate).
from ablate.runner.locate import locate as locate
from ablate.runner.locate import located_study as located_study
from ablate.runner.locate import status as status
from ablate.runner.locate import stored_specs as stored_specs
from ablate.runner.standing import representative
from ablate.runner.study import factor_distributions, open_study, run_budget
from ablate.spec import Spec, SpecError, get_path, parse_yaml
from ablate.spec.errors import clip
from ablate.stores import Stores, redact, sqlite_path

# The value the curve artifacts store where a coordinate does not apply (ablate.probes.SUMMARY:
# probes imports torch, which reading results does not need).
SUMMARY_SENTINEL = -1
SUMMARY = ("val_accuracy", "val_loss", "val_bpc", "test_accuracy", "test_loss", "test_bpc", "chance")
# Columns every trials frame has, typed, even before any trial ran.
TEXT_AND_COUNTS = {
    "tune_index": pl.Int64, "trial_number": pl.Int64, "failure_kind": pl.Utf8, "failure_message": pl.Utf8,
    "seconds": pl.Float64, "steps": pl.Int64, "mlflow_run_id": pl.Utf8, "git_commit": pl.Utf8, "device": pl.Utf8,
    "host": pl.Utf8, "params": pl.Utf8, "tuned_from": pl.Utf8, "reused_from": pl.Utf8,
    "converged": pl.Boolean, "val_gain_last": pl.Float64, "val_gain_se": pl.Float64, "stopped_early": pl.Boolean,
    "best_step": pl.Int64, "budget": pl.Int64, "extended_from": pl.Int64, "continued_from": pl.Utf8,
}
CONVERGENCE = ("converged", "val_gain_last", "val_gain_se", "stopped_early", "best_step")


@dataclass
class Results:
    study: str
    spec: Spec
    spec_hash: str
    stores: dict[str, str]  # redacted
    factors: list[str]
    trials: pl.DataFrame
    metrics: pl.DataFrame = field(default_factory=pl.DataFrame)
    curves: pl.DataFrame = field(default_factory=pl.DataFrame)
    #: item key → the trial's provenance tags (``ablate.git_commit``, ``ablate.version.*``, …)
    trial_provenance: dict[str, dict[str, str]] = field(default_factory=dict)
    #: what could not be read (a lost tracking store, runs it no longer has), one sentence each;
    #: the frames hold what remains
    missing: list[str] = field(default_factory=list)
    #: the spec as the study stored it (plain data): ``spec`` is it validated by this code, which
    #: may add settings of its own; an export keeps this one, what the study ran
    spec_data: dict[str, Any] = field(default_factory=dict)
    #: a sequential study's state (``ablate.runner.sequential.State`` as plain data: its looks'
    #: analyses and decisions), else None
    sequential: dict[str, Any] | None = None

    @property
    def chance(self) -> float | None:
        values = self.trials["chance"].drop_nulls().drop_nans() if "chance" in self.trials.columns else []
        return float(values[0]) if len(values) else None

    @property
    def baseline_cell(self) -> str:
        """The cell whose settings equal the baseline's, else the first cell."""
        base = self.spec.baseline()
        for cell in design.cells(self.spec):
            if cell.config == base:
                return cell.id
        return design.cells(self.spec)[0].id

    def reference_cell(self, reference: str | None = None) -> tuple[str, str]:
        """(cell id, why) of the cell comparisons are made against: ``reference`` (an id or a
        label) when given, else the baseline cell. KeyError names the known cells."""
        cells = self.trials.select("cell_id", "cell_label").unique("cell_id", maintain_order=True)
        if reference:
            for cid, label in cells.iter_rows():
                if reference in (cid, label):
                    return cid, "chosen with the report parameter `reference`"
            known = ", ".join(repr(lbl) for lbl in cells["cell_label"])
            raise KeyError(f"no cell with id or label {reference!r}; cells are: {known}")
        base = self.spec.baseline()
        grid = design.cells(self.spec)
        if any(c.config == base for c in grid):
            return self.baseline_cell, "the spec's baseline"
        return self.baseline_cell, "the first cell (the spec's baseline is not a cell of this design)"

    def provenance(self) -> dict[str, Any]:
        """What produced these results, for a report or a paper's appendix; no credentials.

        Keys: ``study``, ``spec_hash``, ``spec`` (as run, plain data), ``stores`` (redacted URLs),
        ``counts`` (trials per status, over every item of the spec), ``cells``, ``seeds``,
        ``git_commits`` / ``devices`` / ``hosts`` (value → trials), ``versions`` (package →
        {version: trials}), ``first_started`` / ``last_finished`` (datetimes or None),
        ``reused_from`` (study → items this study linked from it instead of training them),
        ``continued`` (items whose run continued a kept WSD stable-phase checkpoint) and
        ``extended`` (cell label → [(seed, declared steps, budget reached)] of the runs trained
        until converged, ``train.until_converged``).
        """
        ran = list(self.trial_provenance.values())

        def tally(key: str) -> dict[str, int]:
            return dict(Counter(str(p[key]) for p in ran if p.get(key)).most_common())

        versions: dict[str, dict[str, int]] = {}
        for p in ran:
            for key, value in p.items():
                if key.startswith("ablate.version."):
                    versions.setdefault(key.removeprefix("ablate.version."), Counter())[str(value)] += 1
        t = self.trials
        started = t["started"].drop_nulls() if "started" in t.columns else pl.Series([])
        finished = t["finished"].drop_nulls() if "finished" in t.columns else pl.Series([])
        return {
            "study": self.study,
            "spec_hash": self.spec_hash,
            "spec": self.spec.model_dump(mode="json", exclude_defaults=False),
            "stores": {k: redact(v) for k, v in self.stores.items()},
            "counts": dict(Counter(t["status"].to_list()).most_common()),
            "items": t.height,
            "cells": t["cell_id"].n_unique(),
            "seeds": self.spec.seed_list,
            "git_commits": tally("ablate.git_commit"),
            "devices": tally("ablate.device"),
            "hosts": tally("ablate.host"),
            "versions": {k: dict(v.most_common()) for k, v in sorted(versions.items())},
            "first_started": started.min() if len(started) else None,
            "last_finished": finished.max() if len(finished) else None,
            "reused_from": dict(Counter(x for x in t["reused_from"].to_list() if x).most_common())
            if "reused_from" in t.columns else {},
            **_lineage(t),
        }

    # A study is a one-element collection: what ``Studies`` answers, one study answers too, so that
    # ``load("a")`` and ``load(["a"])`` can be used alike.
    @property
    def names(self) -> list[str]:
        return [self.study]

    @property
    def results(self) -> list[Results]:
        return [self]

    def as_studies(self) -> Studies:
        """This study as a one-study ``Studies`` (its frames with a ``study`` column)."""
        return Studies.of([self])

    def __getitem__(self, name: str) -> Results:
        if name != self.study:
            raise KeyError(f"no study {name!r} here; studies: {self.study}")
        return self

    def summaries(self) -> list[dict[str, Any]]:
        return self.as_studies().summaries()

    def select(self, selectors: Selectors) -> Studies:
        return self.as_studies().select(selectors)

    @property
    def selectors(self) -> dict[str, list[dict[str, Any]]]:
        """The selectors applied, as ``Studies.selectors``: none (a loaded study shows every cell)."""
        return {}

    def variants(self) -> pl.DataFrame:
        return self.as_studies().variants()

    def frames(self) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        return self.as_studies().frames()

    def stability(self) -> pl.DataFrame:
        """One row per replicate run with probe data: its hidden-state norm measures, the unit of
        every test of the norm-stability report (``ablate.stats.norms.per_seed``: the CV over
        training steps and over layers, the final whole-state ‖x‖², the deviation over seeds, and
        their logs), with the factor columns — to fit a model of one's own, e.g.
        ``smf.ols("log_cv_training ~ C(Q('model.heads')) * C(variant)", res.stability().to_pandas())``."""
        from ablate.stats import norms

        df = norms.prepare(self.curves, self.trials)
        if df.empty:
            return pl.DataFrame()
        seeds = norms.per_seed(norms.layer_norms(df, "probe"), self.trials.to_pandas(), self.factors)
        return pl.from_pandas(seeds)

    def tuning(self) -> pl.DataFrame:
        """Per cell of a tuned study: tuning trials planned / complete / failed / unfinished, the
        best finished trial (index, objective value, setting) — the one its replicates take —
        and what the replicates record they ran (``tuned_from``). Empty when the study did not tune.

        Columns: ``cell_id``, ``cell_label``, ``planned``, ``complete``, ``pruned``, ``failed``, ``unfinished``,
        ``best_index``, ``best_value``, ``best_params`` (JSON), ``tuned_from``.
        """
        from ablate import tuning

        cols = {"cell_id": pl.Utf8, "cell_label": pl.Utf8, "planned": pl.Int64, "complete": pl.Int64,
                "pruned": pl.Int64, "failed": pl.Int64, "unfinished": pl.Int64, "best_index": pl.Int64, "best_value": pl.Float64,
                "best_params": pl.Utf8, "tuned_from": pl.Utf8}
        if self.spec.tune is None or "phase" not in self.trials.columns:
            return pl.DataFrame(schema=cols)
        objective = self.spec.tune.objective
        rows = []
        for (cid, label), group in self.trials.group_by(["cell_id", "cell_label"], maintain_order=True):
            tune = group.filter(pl.col("phase") == "tune")
            states = tune["status"].to_list()
            finished = []
            for r in tune.iter_rows(named=True):
                value = r.get(objective.metric)
                if r["status"] == "complete" and r.get("params") and _finite(value):
                    finished.append((int(r["tune_index"]), json.loads(r["params"]), float(value)))
            best = tuning.best(finished, objective.resolved_direction)
            reps = group.filter(pl.col("phase") == "replicate")
            sources = sorted({s for s in reps["tuned_from"].to_list() if s}) if "tuned_from" in reps.columns else []
            rows.append({
                "cell_id": cid, "cell_label": label, "planned": tune.height,
                "complete": states.count("complete"), "pruned": states.count("pruned"),
                "failed": sum(s in ("failed", "diverged", "killed") for s in states),
                "unfinished": sum(s in ("pending", "running") for s in states),
                "best_index": best[0] if best else None,
                "best_value": next(v for i, _, v in finished if i == best[0]) if best else None,
                "best_params": json.dumps(best[1], sort_keys=True) if best else None,
                "tuned_from": "; ".join(sources) or None,
            })
        return pl.DataFrame(rows, schema=cols)

    def references(self) -> pl.DataFrame:
        """The spec's published reference values, each with the cells it matches.

        Columns: ``metric``, ``value``, ``source``, ``confirmed``, ``note``, ``cell`` (the
        reference's cell selector as text), ``cell_ids`` / ``cell_labels`` (matched cells, a
        list; a selector ``{}`` means the baseline cell).
        """
        rows = []
        for ref in self.spec.references:
            if ref.cell:
                matched = design.select(self.spec, ref.cell)
            else:
                matched = [c for c in design.cells(self.spec) if c.id == self.baseline_cell]
            rows.append({
                "metric": ref.metric, "value": ref.value, "source": ref.source, "confirmed": ref.confirmed,
                "note": ref.note,
                "cell": ", ".join(f"{k}={v}" for k, v in ref.cell.items()) or "baseline",
                "cell_ids": [c.id for c in matched], "cell_labels": [c.label for c in matched],
            })
        schema = {"metric": pl.Utf8, "value": pl.Float64, "source": pl.Utf8, "confirmed": pl.Boolean,
                  "note": pl.Utf8, "cell": pl.Utf8, "cell_ids": pl.List(pl.Utf8), "cell_labels": pl.List(pl.Utf8)}
        return pl.DataFrame(rows, schema=schema)


#: What one study has and a collection of several does not (``Studies.__getattr__``).
_ONE_STUDY = frozenset({"study", "spec", "spec_hash", "stores", "trial_provenance", "missing", "spec_data",
                        "sequential", "chance", "baseline_cell", "reference_cell", "provenance", "stability",
                        "tuning", "references"})


def _lineage(t: pl.DataFrame) -> dict[str, Any]:
    """``Results.provenance``'s ``continued`` and ``extended`` from the trials frame (frames read
    from exports written before the columns existed: none)."""
    continued = int(t["continued_from"].drop_nulls().len()) if "continued_from" in t.columns else 0
    extended: dict[str, list[tuple[int, int, int]]] = {}
    if "extended_from" in t.columns and "budget" in t.columns:
        for r in t.filter(pl.col("extended_from").is_not_null()).select("cell_label", "seed", "extended_from",
                                                                        "budget").iter_rows():
            extended.setdefault(str(r[0]), []).append((int(r[1]), int(r[2]), int(r[3])))
    return {"continued": continued, "extended": extended}


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@overload
def load(study: str, storage: str | None = None, tracking_uri: str | None = None, curves: bool = True,
         metrics: bool | None = None, home: str | Path | None = None) -> Results: ...


@overload
def load(study: Sequence[str], storage: str | None = None, tracking_uri: str | None = None, curves: bool = True,
         metrics: bool | None = None, home: str | Path | None = None) -> Studies: ...


def load(
    study: str | Sequence[str],
    storage: str | None = None,
    tracking_uri: str | None = None,
    curves: bool = True,
    metrics: bool | None = None,
    home: str | Path | None = None,
) -> Results | Studies:
    """Read a study (a name) or several (a list of names: ``Studies``, one frame each with a
    ``study`` column) from its Optuna storage and MLflow tracking store, found as ``locate`` says
    (``home``: the folder holding ``optuna.db`` and ``mlflow.db``, as ``$ABLATE_HOME``).

    ``curves`` reads the dense hidden-state curves, ``metrics`` the logged scalars (default: as
    ``curves``); both come from MLflow artifacts and cost a download per run."""
    if not isinstance(study, str):
        names = list(dict.fromkeys(study))
        if not names:
            raise ValueError("load() needs at least one study name")
        cache: dict[tuple[str, str], Any] = {}  # a run two studies share is downloaded once
        return Studies.of([_load_one(n, storage, tracking_uri, curves, metrics, cache, home) for n in names])
    return _load_one(study, storage, tracking_uri, curves, metrics, None, home)


def save(res: Results | Studies, path: str | Path) -> None:
    """``res`` as one file that ``read`` returns as it was (frames, spec, what could not be read):
    the report renderer reads the stores once, in its own process while the notebook kernel starts,
    and every report of the render reads this file instead of the stores."""
    Path(path).write_bytes(pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL))


def read(path: str | Path) -> Results | Studies:
    """What ``save`` wrote. A pickle: only for files this package wrote itself."""
    res = pickle.loads(Path(path).read_bytes())
    if not isinstance(res, (Results, Studies)):
        raise TypeError(f"{path} holds a {type(res).__name__}, not results saved by ablate.results.save")
    return res


# --- exports: a study's results as plain files, readable without ablate or its stores ---------------

EXPORT_FORMAT = "ablate-export"
EXPORT_VERSION = 1
MANIFEST = "manifest.json"
FRAMES = ("trials", "metrics", "curves")
PROVENANCE_FILE = "provenance.parquet"
SPEC_FILE = "spec.yaml"
STUDY_FILE = "study.json"
#: Every file of an export but the manifest, which lists them; a reader opens no other name, so a
#: manifest cannot lead it out of the directory.
EXPORT_FILES = (*(f"{name}.parquet" for name in FRAMES), PROVENANCE_FILE, SPEC_FILE, STUDY_FILE)
PROVENANCE_SCHEMA = {"item": pl.Utf8, "tag": pl.Utf8, "value": pl.Utf8}
# The JSON files hold names, notes and column types: far below this for any real study, and a
# hostile or damaged file is refused before it is parsed.
MAX_JSON_BYTES = 16_000_000
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ExportError(ValueError):
    """An export that cannot be written or read; the message is one line naming the path and why."""


def _shown(path: str | Path) -> str:
    """A path as an error message shows it: a 10,000-character name must not fill the terminal."""
    text = str(path)
    return text if len(text) <= 200 else f"{text[:120]}…({len(text):,} characters)…{text[-60:]}"


def _oserror(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _regular(path: Path) -> os.stat_result:
    """``path``'s stat; ExportError unless it is a regular file (a link, a device or a FIFO could
    point a reader anywhere, or never end)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise ExportError(f"{_shown(path)} is missing") from None
    except OSError as exc:
        raise ExportError(f"cannot read {_shown(path)}: {_oserror(exc)}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ExportError(f"{_shown(path)} is not a regular file")
    return info


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _json_file(path: Path) -> Any:
    if _regular(path).st_size > MAX_JSON_BYTES:
        raise ExportError(f"{_shown(path)} is larger than {MAX_JSON_BYTES:,} bytes: not one an export writes")
    try:
        return json.loads(path.read_bytes())
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ExportError(f"{_shown(path)} is not valid JSON ({str(exc).splitlines()[0][:200]})") from None
    except OSError as exc:
        raise ExportError(f"cannot read {_shown(path)}: {_oserror(exc)}") from None


def _export_dir(path: Path) -> Path:
    """``path`` if it is a directory; ExportError otherwise."""
    try:
        if not path.exists():
            raise ExportError(f"there is no export at {_shown(path)}: it does not exist")
        if not path.is_dir():
            raise ExportError(f"{_shown(path)} is not a directory (an export is a directory holding {MANIFEST})")
    except OSError as exc:
        raise ExportError(f"cannot read {_shown(path)}: {_oserror(exc)}") from None
    return path


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of the export in the directory ``path``, its shape checked (not the files':
    ``read_export`` checks them). ExportError says what is wrong, on one line."""
    folder = _export_dir(Path(path))
    where = folder / MANIFEST
    if not os.path.lexists(where):
        raise ExportError(f"{_shown(folder)} has no {MANIFEST}: it is not an ablate export "
                          "(`ablate export STUDY DIR` writes one)")
    data = _json_file(where)
    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise ExportError(f"{_shown(where)} is not the manifest of an ablate export (no \"format\": \"{EXPORT_FORMAT}\")")
    version = data.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ExportError(f"{_shown(where)}: format_version must be a positive integer")
    if version > EXPORT_VERSION:
        raise ExportError(f"{_shown(where)}: format version {version} is newer than this ablate reads "
                          f"({EXPORT_VERSION}); update ablate")
    if not isinstance(data.get("study"), str) or not data["study"]:
        raise ExportError(f"{_shown(where)}: \"study\" must name the study")
    files = data.get("files")
    if not isinstance(files, dict):
        raise ExportError(f"{_shown(where)}: \"files\" must map each file to its sha256 and size")
    unknown = [name for name in files if name not in EXPORT_FILES]
    if unknown:
        raise ExportError(f"{_shown(where)} lists {_shown(repr(unknown[0]))}, which is not a file of an export "
                          f"(those are {', '.join(EXPORT_FILES)})")
    for name in EXPORT_FILES:
        entry = files.get(name)
        if not isinstance(entry, dict):
            raise ExportError(f"{_shown(where)} does not list {name}")
        size = entry.get("bytes")
        if not isinstance(entry.get("sha256"), str) or not _SHA256.fullmatch(entry["sha256"]) or \
                not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ExportError(f"{_shown(where)}: {name} needs a \"sha256\" (64 hex digits) and \"bytes\"")
    rows = data.get("rows")
    if not isinstance(rows, dict) or any(not isinstance(rows.get(n), int) or isinstance(rows.get(n), bool)
                                         for n in (*FRAMES, "provenance")):
        raise ExportError(f"{_shown(where)}: \"rows\" must count the rows of {', '.join(FRAMES)} and provenance")
    return data


def check_export_dir(path: str | Path, study: str) -> list[str]:
    """The files a previous export of ``study`` left in the directory ``path`` (none for a new or
    empty one); ExportError when it holds anything else, so an export never deletes or overwrites
    what it did not write. ``export`` calls it first; a caller writing several exports calls it
    for each before writing any."""
    target = Path(path)
    try:
        try:
            os.lstat(target)  # not lexists: a name too long, or under a file, is an error, not "new"
        except FileNotFoundError:
            return []
        if not target.is_dir():
            raise ExportError(f"{_shown(target)} exists and is not a directory")
        entries = sorted(os.listdir(target))
    except OSError as exc:
        raise ExportError(f"cannot use {_shown(target)} as an export directory: {_oserror(exc)}") from None
    if not entries:
        return []
    refuse = f"{_shown(target)} is not empty and is not an export of study {study!r}"
    advice = "give a new or empty directory"
    try:
        manifest = read_manifest(target)
    except ExportError as exc:
        raise ExportError(f"{refuse} ({exc}); {advice}") from None
    if manifest["study"] != study:
        raise ExportError(f"{refuse} (it holds study {_shown(repr(manifest['study']))}); {advice}")
    try:  # what it did not write, or a name of it that is now a folder or a link
        extra = [e for e in entries if e != MANIFEST and e not in manifest["files"]
                 or not stat.S_ISREG(os.lstat(target / e).st_mode)]
    except OSError as exc:
        raise ExportError(f"cannot use {_shown(target)} as an export directory: {_oserror(exc)}") from None
    if extra:
        more = f" and {len(extra) - 1} more" if len(extra) > 1 else ""
        raise ExportError(f"{_shown(target)} holds an export of {study!r} and also {_shown(repr(extra[0]))}{more}, "
                          f"which an export did not write; {advice}")
    return [*manifest["files"], MANIFEST]


def _columns(frame: pl.DataFrame) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, dtype in frame.schema.items():
        out[name] = {"dtype": str(dtype)}
        if isinstance(dtype, pl.Enum):
            out[name]["categories"] = list(dtype.categories)
    return out


def _provenance_frame(provenance: dict[str, dict[str, str]]) -> pl.DataFrame:
    rows = [(item, tag, value) for item, tags in provenance.items() for tag, value in tags.items()]
    return pl.DataFrame(rows, schema=PROVENANCE_SCHEMA, orient="row")


def export(res: Results, path: str | Path) -> dict[str, Any]:
    """Write ``res`` into the directory ``path`` as files any Parquet and JSON reader opens, with
    nothing of ablate, and return the manifest (docs/results.md, "Exports"). ``read_export`` gives
    the same ``Results`` back.

    ``path`` must be new, empty, or a previous export of the same study (its files are replaced);
    anything else is an ExportError, raised before anything is written. The files are written
    beside ``path`` first and moved in, the manifest last."""
    if not isinstance(res, Results):
        raise TypeError(f"export takes one study's Results, not a {type(res).__name__}: export each of them")
    target = Path(path)
    old = check_export_dir(target, res.study)
    spec_data = res.spec_data or res.spec.model_dump(mode="json")
    spec_text = yaml.safe_dump(spec_data, sort_keys=False, allow_unicode=True, width=100)
    if parse_yaml(spec_text, SPEC_FILE) != spec_data:  # a value YAML would read back as another
        raise ExportError(f"the spec of {res.study!r} does not read back from YAML as it was stored")
    frames = {name: getattr(res, name) for name in FRAMES}
    info = {
        "study": res.study, "spec_hash": res.spec_hash, "stores": {k: redact(v) for k, v in res.stores.items()},
        "factors": list(res.factors), "missing": list(res.missing), "sequential": res.sequential,
        "columns": {name: _columns(frame) for name, frame in frames.items()},
    }
    provenance = _provenance_frame(res.trial_provenance)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".ablate-export-", dir=target.parent))
    except OSError as exc:
        raise ExportError(f"cannot write an export beside {_shown(target)}: {_oserror(exc)}") from None
    try:
        for name, frame in frames.items():
            frame.write_parquet(scratch / f"{name}.parquet", compression="zstd", compression_level=9)
        provenance.write_parquet(scratch / PROVENANCE_FILE, compression="zstd", compression_level=9)
        (scratch / SPEC_FILE).write_text(spec_text, encoding="utf-8")
        (scratch / STUDY_FILE).write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        manifest = {
            "format": EXPORT_FORMAT, "format_version": EXPORT_VERSION, "ablate_version": _ablate_version(),
            "study": res.study, "spec_hash": res.spec_hash,
            "rows": {**{name: frame.height for name, frame in frames.items()}, "provenance": provenance.height},
            "files": {name: {"sha256": _sha256(scratch / name), "bytes": (scratch / name).stat().st_size}
                      for name in EXPORT_FILES},
        }
        (scratch / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        target.mkdir(exist_ok=True)
        for name in (*EXPORT_FILES, MANIFEST):  # the manifest last: until then the old one stands
            os.replace(scratch / name, target / name)
        for name in old:
            if name not in manifest["files"] and name != MANIFEST:
                (target / name).unlink(missing_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot write the export to {_shown(target)}: {_oserror(exc)}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return manifest


def _ablate_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("ablate")
    except metadata.PackageNotFoundError:
        return "unknown"


def read_export(path: str | Path) -> Results:
    """The ``Results`` an export holds (``export``), equal to what ``load`` gave when it was written:
    the same frames (dtypes, the factors' level order), spec, provenance and notes. Reads no store.

    Every file is checked against the manifest's sha256 first; ExportError says, on one line,
    what is missing, changed or malformed."""
    folder = Path(path)
    manifest = read_manifest(folder)
    for name in EXPORT_FILES:
        file, entry = folder / name, manifest["files"][name]
        if _regular(file).st_size != entry["bytes"] or _sha256(file) != entry["sha256"]:
            raise ExportError(f"{_shown(file)} does not match the sha256 in its manifest: it changed after the export")
    info = _json_file(folder / STUDY_FILE)
    shape = {"study": str, "spec_hash": str, "stores": dict, "factors": list, "missing": list, "columns": dict}
    bad = [k for k, kind in shape.items() if not isinstance(info, dict) or not isinstance(info.get(k), kind)]
    if bad:
        raise ExportError(f"{_shown(folder / STUDY_FILE)}: \"{bad[0]}\" is missing or not a {shape[bad[0]].__name__}")
    if info["study"] != manifest["study"]:
        raise ExportError(f"{_shown(folder)}: the manifest names study {_shown(repr(manifest['study']))}, "
                          f"{STUDY_FILE} {_shown(repr(info['study']))}")
    try:
        spec_data = parse_yaml((folder / SPEC_FILE).read_bytes(), str(folder / SPEC_FILE))
        spec = design.validate(spec_data, f"the spec of export {folder}")
    except SpecError as exc:
        lines = str(exc).splitlines() or [""]
        more = f" (and {len(lines) - 1} more problems)" if len(lines) > 1 else ""
        raise ExportError(f"{_shown(folder / SPEC_FILE)}: {clip(lines[0])}{more}") from None
    frames = {}
    for name in FRAMES:
        file = folder / f"{name}.parquet"
        frames[name] = _restore(_parquet(file), info["columns"].get(name), file)
        if frames[name].height != manifest["rows"][name]:
            raise ExportError(f"{_shown(file)} has {frames[name].height} rows, the manifest says "
                              f"{manifest['rows'][name]}")
    prov_frame = _parquet(folder / PROVENANCE_FILE)
    if dict(prov_frame.schema) != PROVENANCE_SCHEMA:
        raise ExportError(f"{_shown(folder / PROVENANCE_FILE)} does not have the columns item, tag, value (String)")
    provenance: dict[str, dict[str, str]] = {}
    for item, tag, value in prov_frame.iter_rows():
        provenance.setdefault(item, {})[tag] = value
    return Results(
        study=info["study"], spec=spec, spec_hash=info["spec_hash"],
        stores={str(k): str(v) for k, v in info["stores"].items()}, factors=[str(f) for f in info["factors"]],
        trials=frames["trials"], metrics=frames["metrics"], curves=frames["curves"],
        trial_provenance=provenance, missing=[str(m) for m in info["missing"]], spec_data=spec_data,
        sequential=info.get("sequential") if isinstance(info.get("sequential"), dict) else None,
    )


def read_exports(paths: Sequence[str | Path]) -> Studies:
    """Several exports as one ``Studies``, in the order given: what ``load`` of their studies gave
    when they were written (a comparison report rendered from exports is the one rendered from the
    stores). Every export is checked as ``read_export`` checks it; two exports of one study are an
    ExportError (which to show is not this function's guess)."""
    folders = [Path(p) for p in paths]
    if not folders:
        raise ExportError("no export given: name at least one directory `ablate export` wrote")
    read: dict[str, tuple[Path, Results]] = {}
    for folder in folders:
        res = read_export(folder)
        if res.study in read:
            raise ExportError(f"{_shown(read[res.study][0])} and {_shown(folder)} are both exports of study "
                              f"{_shown(repr(res.study))}: give one of them")
        read[res.study] = (folder, res)
    return Studies.of([res for _, res in read.values()])


def exports_in(folder: str | Path) -> list[Path]:
    """The exports a ``--data`` folder names: the folder itself when it is one (or is not a
    folder), else its subfolders that are exports (what ``ablate export A B DIR`` writes), in name
    order; none: the folder itself, whose reading says why it is not an export."""
    folder = Path(folder)
    try:
        if os.path.lexists(folder / MANIFEST) or not folder.is_dir():
            return [folder]
        found = sorted(d for d in folder.iterdir() if d.is_dir() and os.path.lexists(d / MANIFEST))
    except OSError as exc:
        raise ExportError(f"cannot read {folder}: {exc.strerror or type(exc).__name__}") from None
    return found or [folder]


def read_exports_in(folders: Sequence[str | Path], studies: Sequence[str] = ()) -> Studies:
    """The exports under ``folders`` (each an export or a folder of them, ``exports_in``) as one
    ``Studies``, as ``read_exports`` reads them: those of ``studies`` in that order when it names
    some, else all in the order found. Every export is verified before this returns; ExportError
    for one that cannot be read, or a study they do not hold."""
    read = read_exports([export for folder in folders for export in exports_in(folder)])
    if not studies:
        return read
    absent = [s for s in studies if s not in read.names]
    if absent:
        raise ExportError(f"the exports hold no study {absent[0]!r} (they hold: {', '.join(read.names)})")
    return Studies.of([read[s] for s in studies])


@dataclass(frozen=True)
class Exported:
    """A study ``export_many`` wrote: into ``path``, its ``manifest`` (``export``'s) and what
    could not be read of it (``Results.missing``)."""

    study: str
    path: Path
    manifest: dict[str, Any]
    missing: list[str]

    @property
    def rows(self) -> dict[str, int]:
        """Rows written per frame (``trials``, ``metrics``, ``curves``) and of provenance."""
        return self.manifest["rows"]

    @property
    def files(self) -> int:
        """The files written, the manifest included."""
        return len(self.manifest["files"]) + 1

    @property
    def size(self) -> int:
        """The bytes of the files the manifest lists (its own not counted)."""
        return sum(f["bytes"] for f in self.manifest["files"].values())


def export_many(studies: Sequence[str], path: str | Path, storage: str | None = None,
                tracking_uri: str | None = None, home: str | Path | None = None) -> Iterator[Exported]:
    """Export each of ``studies`` (each once, found as ``locate`` says): one into the directory
    ``path``, several into ``path/STUDY`` each (``ablate export``). Every directory is checked
    (``check_export_dir``: new, empty, or an export of the same study) and every study read before
    anything is written: this call raises ExportError or StorageError. The iterator it returns
    writes one study at a time and yields it written; an ExportError there leaves the studies
    before it written."""
    names = list(dict.fromkeys(studies))
    if not names:
        raise ValueError("export_many() needs at least one study name")
    dest = Path(path)
    targets = {name: dest if len(names) == 1 else dest / name for name in names}
    try:
        if len(names) > 1 and os.path.lexists(dest) and not dest.is_dir():
            raise ExportError(f"{dest} exists and is not a directory")
        for name, target in targets.items():
            check_export_dir(target, name)
    except OSError as exc:
        raise ExportError(str(exc)) from None
    read = {name: load(name, storage, tracking_uri, home=home) for name in names}
    return (Exported(name, targets[name], export(res, targets[name]), list(res.missing)) for name, res in read.items())


def _parquet(file: Path) -> pl.DataFrame:
    try:
        return pl.read_parquet(file)
    except Exception as exc:  # polars raises its own kinds for a file that is not Parquet
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ExportError(f"{_shown(file)} cannot be read as Parquet: {type(exc).__name__}: {first}") from None


def _restore(frame: pl.DataFrame, columns: Any, file: Path) -> pl.DataFrame:
    """``frame`` with the factor columns' Enum (and its level order) that ``study.json`` records:
    Parquet keeps it for polars, but another writer of the file may not have."""
    if not isinstance(columns, dict) or list(columns) != frame.columns:
        raise ExportError(f"{_shown(file)} does not have the columns {STUDY_FILE} lists for it")
    enums = {name: c["categories"] for name, c in columns.items()
             if isinstance(c, dict) and isinstance(c.get("categories"), list)}
    casts = [pl.col(name).cast(pl.Enum([str(x) for x in cats])) for name, cats in enums.items()
             if frame.schema[name] != pl.Enum([str(x) for x in cats])]
    try:
        return frame.with_columns(casts) if casts else frame
    except pl.exceptions.PolarsError as exc:
        raise ExportError(f"{_shown(file)}: a factor column holds a value its levels do not "
                          f"({(str(exc).splitlines() or [''])[0][:200]})") from None


def _load_one(study: str, storage: str | None, tracking_uri: str | None, curves: bool, metrics: bool | None,
              cache: dict[tuple[str, str], Any] | None, home: str | Path | None = None) -> Results:
    metrics = curves if metrics is None else metrics
    stores: Stores = locate(study, storage, tracking_uri, home)
    opt = open_study(study, stores, read_only=True)
    spec = design.validate(opt.user_attrs["spec"], f"study {study}")
    by_item = trials_by_item(opt)
    rows: list[dict[str, Any]] = []
    run_ids: dict[str, tuple[str, int, str]] = {}
    provenance: dict[str, dict[str, str]] = {}
    for item in sequential.items(spec, opt):  # a sequential study: the seeds its looks planned
        row: dict[str, Any] = {
            "cell_id": item.cell.id,
            "cell_label": item.cell.label,
            "seed": item.seed,
            "phase": item.phase,
            **item.cell.labels,
            "status": "pending",
            "attempts": 0,
            "tune_index": item.index,
        }
        trials = by_item.get(item.key, [])
        if trials:
            trial, status = representative(trials)
            attrs = trial.user_attrs
            row.update(
                status=status,
                attempts=len(trials),
                trial_number=trial.number,
                failure_kind=attrs.get("failure_kind"),
                failure_message=attrs.get("failure_message"),
                seconds=attrs.get("seconds"),
                steps=attrs.get("steps"),
                mlflow_run_id=attrs.get("mlflow_run_id"),
                started=trial.datetime_start,
                finished=trial.datetime_complete,
            )
            row.update({k: attrs.get(k) for k in SUMMARY})
            row.update({k: attrs.get(k) for k in CONVERGENCE})
            prov = attrs.get("provenance") or {}
            row.update(git_commit=prov.get("ablate.git_commit"), device=prov.get("ablate.device"),
                       host=prov.get("ablate.host"))
            if prov:
                provenance[item.key] = {str(k): str(v) for k, v in prov.items()}
            params = attrs.get("params")
            origin = attrs.get("reused_from")
            branch = attrs.get("continued_from")
            reached = run_budget(attrs) or None
            declared = int(item.cell.config["train"]["steps"])
            row.update(budget=reached, extended_from=declared if reached and reached > declared else None,
                       continued_from=f"{branch.get('label')} ({branch.get('cell')}) · seed {branch.get('seed')} · "
                                      f"step {branch.get('step')}" if isinstance(branch, dict) else None)
            row.update(params=json.dumps(params, sort_keys=True) if isinstance(params, dict) else None,
                       tuned_from=attrs.get("tuned_from"),
                       reused_from=str(origin.get("study")) if isinstance(origin, dict) else None)
            if attrs.get("mlflow_run_id") and row["status"] in ("complete", "diverged"):
                run_ids[attrs["mlflow_run_id"]] = (item.cell.id, item.seed, item.phase)
        rows.append(row)
    frame = pl.DataFrame(rows, infer_schema_length=None)
    # The columns a reader looks for first: the cell, then its factors in the spec's order.
    first = ["cell_id", "cell_label", *[f for f in spec.factors if f in frame.columns]]
    frame = frame.select([*first, *[c for c in frame.columns if c not in first]]) if frame.height else frame
    for col in SUMMARY:
        if col not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=pl.Float64).alias(col))
    for col, dtype in TEXT_AND_COUNTS.items():
        if col not in frame.columns or frame[col].dtype == pl.Null:
            frame = frame.with_columns(pl.col(col).cast(dtype) if col in frame.columns
                                       else pl.lit(None, dtype=dtype).alias(col))
    # Factor columns sort as the spec lists their levels (a polars Enum, pandas Categorical).
    frame = frame.with_columns(pl.col(name).cast(pl.Enum(list(dist.choices)))
                               for name, dist in factor_distributions(spec).items() if name in frame.columns)
    res = Results(
        study=study,
        spec=spec,
        spec_hash=str(opt.user_attrs.get("spec_hash", "")),
        stores=stores.describe(),
        factors=list(spec.factors),
        trials=frame,
        trial_provenance=provenance,
        spec_data=dict(opt.user_attrs["spec"]),
        sequential=_sequential_state(opt),
    )
    lost = _lost_tracking(stores)
    if lost and (metrics or curves) and run_ids:
        res.missing.append(f"{lost}: the metrics and curves of {len(run_ids)} finished trial(s) are not available; "
                           "the trials' outcomes (from the Optuna storage) are")
    elif metrics or curves:
        unread: dict[str, str] = {}
        if metrics:
            res.metrics = _artifacts(stores, run_ids, tracking.METRICS_ARTIFACT, frame, res.factors, cache, unread)
        if curves:
            res.curves = _artifacts(stores, run_ids, tracking.CURVES_ARTIFACT, frame, res.factors, cache, unread)
        if unread:
            first = next(iter(unread.values()))
            res.missing.append(f"{len(unread)} of {len(run_ids)} MLflow run(s) could not be read from "
                               f"{redact(stores.tracking)} ({first}): their metrics and curves are missing")
    return res


def _sequential_state(opt: Any) -> dict[str, Any] | None:
    st = sequential.load_state(opt)
    return None if st is None else json.loads(st.dump())


def _lost_tracking(stores: Stores) -> str | None:
    """Why the tracking store cannot be read at all (a SQLite file that is gone), else None."""
    path = sqlite_path(stores.tracking)
    if path is not None and not path.is_file():
        return f"the MLflow tracking store {path} is missing"
    return None


def _artifacts(stores: Stores, run_ids: dict[str, tuple[str, int, str]], name: str,
               trials: pl.DataFrame, factors: list[str] | tuple[str, ...] = (),
               cache: dict[tuple[str, str], Any] | None = None,
               unread: dict[str, str] | None = None) -> pl.DataFrame:
    """One artifact of every run as one frame (``cache``: frames already read, by run and name);
    runs that cannot be read go to ``unread`` (run id → why) instead: a report renders what remains."""
    parts = []
    unread = unread if unread is not None else {}
    todo = [r for r in run_ids if r not in unread and (cache is None or (r, name) not in cache)]
    frames = tracking.read_parquet_artifacts(stores.tracking, todo, name)
    for run_id, (cell_id, seed, phase) in run_ids.items():
        if run_id in unread:
            continue
        part = cache[(run_id, name)] if cache is not None and (run_id, name) in cache else frames[run_id]
        if isinstance(part, Exception):  # the run, its artifacts or the whole store is gone or unreachable
            unread[run_id] = redact(f"{type(part).__name__}: {(str(part).strip().splitlines() or [''])[0]}")[:300]
            continue
        if cache is not None:
            cache[(run_id, name)] = part
        if part is not None:
            parts.append(part.with_columns(pl.lit(cell_id).alias("cell_id"), pl.lit(seed, dtype=pl.Int64).alias("seed"),
                                           pl.lit(phase).alias("phase")))
    if not parts:
        return pl.DataFrame()
    factor_cols = [c for c in trials.columns if "." in c or c in factors]  # named factors have no dot
    labels = trials.select(["cell_id", "cell_label", *factor_cols]).unique("cell_id")
    frame = pl.concat(parts, how="diagonal_relaxed")
    # The artifacts write SUMMARY (-1) where a coordinate does not apply; a frame says null.
    sentinels = [c for c in ("layer", "head", "t") if c in frame.columns]
    frame = frame.with_columns(pl.when(pl.col(c) == SUMMARY_SENTINEL).then(None).otherwise(pl.col(c)).alias(c)
                               for c in sentinels)
    return frame.join(labels, on="cell_id", how="left", maintain_order="left")


# --- several studies ---------------------------------------------------------------------------------

Selectors = Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Mapping[str, Any]]]


def _with_study(frame: pl.DataFrame, res: Results, levels: dict[str, list[str]]) -> pl.DataFrame:
    if frame.is_empty() and not frame.columns:
        return frame
    cols = [pl.lit(res.study).alias("study")]
    for f, names in levels.items():
        if f in frame.columns:
            value = pl.col(f).cast(pl.Utf8)
        else:  # each cell's own setting (a named factor of this study may set it), else null
            own = _cell_labels(res, f)
            value = pl.col("cell_id").replace_strict(own, default=None, return_dtype=pl.Utf8) if own else \
                pl.lit(None, dtype=pl.Utf8)
        cols.append(value.cast(pl.Enum(names)).alias(f))
    out = frame.with_columns(cols)
    return out.select(["study", *[c for c in out.columns if c != "study"]])


def _cell_labels(res: Results, factor: str) -> dict[str, str]:
    """Cell id → the label of the cell's value at the dotted path ``factor`` (none for a named factor)."""
    if "." not in factor:
        return {}
    out = {}
    for cell in design.cells(res.spec):
        try:
            out[cell.id] = design.level_label(get_path(cell.config, factor))
        except KeyError:
            continue
    return out


def _factor_levels(results: list[Results]) -> dict[str, list[str]]:
    """Factor → its levels over every study (each study's order, then first appearance), so the
    stacked columns stay an Enum that sorts as the specs list their levels."""
    factors = list(dict.fromkeys(f for r in results for f in r.factors))
    out: dict[str, list[str]] = {f: [] for f in factors}
    for f in factors:
        for r in results:
            col = r.trials[f] if f in r.trials.columns else None
            if col is not None and isinstance(col.dtype, pl.Enum):
                names = list(col.dtype.categories)
            elif col is not None:
                names = [str(x) for x in col.unique(maintain_order=True).to_list() if x is not None]
            else:
                names = list(dict.fromkeys(_cell_labels(r, f).values()))
            out[f] += [x for x in names if x not in out[f]]
    return out


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    frames = [f for f in frames if f.columns]
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


def _leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_leaves(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data}


def difference_labels(configs: Sequence[dict[str, Any]]) -> list[str]:
    """A label per config naming its values at the paths where the configs differ
    (``parameterisation=rotation, heads=8``); a path is shortened to its last key unless two
    differing paths share it. One config, or none differing: ``baseline``."""
    flat = [_leaves(c) for c in configs]
    paths = list(dict.fromkeys(p for f in flat for p in f))
    differ = [p for p in paths if len({design.canonical_json(f.get(p)) for f in flat}) > 1]
    last = Counter(p.rsplit(".", 1)[-1] for p in differ)
    short = {p: p.rsplit(".", 1)[-1] if last[p.rsplit(".", 1)[-1]] == 1 else p for p in differ}
    return [", ".join(f"{short[p]}={design.level_label(f.get(p)) if p in f else '-'}" for p in differ) or "baseline"
            for f in flat]


@dataclass
class Studies:
    """Several studies' results: each one's ``Results`` and their frames stacked with a ``study``
    column (see the module's docstring)."""

    results: list[Results]
    trials: pl.DataFrame
    metrics: pl.DataFrame = field(default_factory=pl.DataFrame)
    curves: pl.DataFrame = field(default_factory=pl.DataFrame)
    selectors: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # study → applied (none: every cell)

    @classmethod
    def of(cls, results: list[Results], selectors: dict[str, list[dict[str, Any]]] | None = None) -> Studies:
        levels = _factor_levels(results)
        return cls(results, _concat([_with_study(r.trials, r, levels) for r in results]),
                   _concat([_with_study(r.metrics, r, levels) for r in results]),
                   _concat([_with_study(r.curves, r, levels) for r in results]), dict(selectors or {}))

    @property
    def names(self) -> list[str]:
        return [r.study for r in self.results]

    @property
    def factors(self) -> list[str]:
        """Every study's factors, in order of first appearance."""
        return list(dict.fromkeys(f for r in self.results for f in r.factors))

    def __getitem__(self, name: str) -> Results:
        for r in self.results:
            if r.study == name:
                return r
        raise KeyError(f"no study {name!r} here; studies: {', '.join(self.names)}")

    def __dir__(self) -> list[str]:  # a collection of one lists the one study's members it answers
        return sorted(set(super().__dir__()) | (_ONE_STUDY if len(self.results) == 1 else set()))

    def __getattr__(self, name: str) -> Any:
        # One study's members (spec, chance, stability(), …) on a collection of one answer as that
        # study's; on several, the error says how to pick one.
        if name.startswith("_") or name not in _ONE_STUDY:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        if len(self.results) == 1:
            return getattr(self.results[0], name)
        raise AttributeError(f"{name!r} belongs to one study and these are {len(self.results)} "
                             f"({', '.join(self.names)}): take one, e.g. studies[{self.names[0]!r}].{name}")

    def summaries(self) -> list[dict[str, Any]]:
        """Per study: ``study``, ``spec_hash``, ``cells`` (of its spec), ``shown`` (selected),
        ``selectors`` (applied; none: every cell), ``complete`` (completed replicate items shown)
        and ``reused`` (source study → how many of those it linked from there)."""
        out = []
        for res in self.results:
            t = self.trials.filter(pl.col("study") == res.study) if self.trials.height else self.trials
            done = t.filter((pl.col("status") == "complete") & (pl.col("phase") == "replicate")) if t.height else t
            reused = Counter(x for x in done["reused_from"].to_list() if x) if done.height else Counter()
            out.append({"study": res.study, "spec_hash": res.spec_hash, "cells": len(design.cells(res.spec)),
                        "shown": t["cell_id"].n_unique() if t.height else 0,
                        "selectors": self.selectors.get(res.study, []), "complete": done.height,
                        "reused": dict(reused)})
        return out

    def select(self, selectors: Selectors) -> Studies:
        """Only the cells matching any of the selectors (the design's syntax: factor or dotted
        path → level label or value, lists meaning any of): the same for every study, or per
        study (name → selectors; a study not named keeps every cell). ValueError when a selector
        names what no study knows."""
        per = ({name: [dict(s) for s in sels] for name, sels in selectors.items()} if isinstance(selectors, Mapping)
               else {name: [dict(s) for s in selectors] for name in self.names})
        unknown = [n for n in per if n not in self.names]
        if unknown:
            raise ValueError(f"selectors for {', '.join(map(repr, unknown))}, which are not among the studies "
                             f"({', '.join(self.names)})")
        applied: dict[str, list[str]] = {}  # selector (as text) → studies it applies to
        problems: dict[str, list[str]] = {}  # selector → its problems, by study
        for name, sels in per.items():
            for sel in sels:
                text = design.canonical_json(sel)
                applied.setdefault(text, []).append(name)
                found = design.selection_problems(self[name].spec, sel, "cells")
                if found:
                    problems.setdefault(text, []).append(f"in {name}: " + "; ".join(f"{p}: {m}" for p, m in found))
        for text, studies in applied.items():
            if len(problems.get(text, [])) == len(studies):  # a typo: no study knows what it names
                raise ValueError(f"selector {text} names what no study knows: " + " | ".join(problems[text]))
        keep: dict[str, set[str]] = {}
        for res in self.results:
            sels = per.get(res.study)
            if not sels:
                keep[res.study] = set(res.trials["cell_id"].to_list())
                continue
            keep[res.study] = {c.id for sel in sels for c in design.select(res.spec, sel)}
        picked = [pl.struct(pl.col("study"), pl.col("cell_id")).is_in(
            [{"study": s, "cell_id": c} for s, ids in keep.items() for c in ids])]

        def cut(frame: pl.DataFrame) -> pl.DataFrame:
            return frame.filter(*picked) if "cell_id" in frame.columns and frame.height else frame

        return Studies(self.results, cut(self.trials), cut(self.metrics), cut(self.curves),
                       {**self.selectors, **{k: v for k, v in per.items() if v}})

    def variants(self) -> pl.DataFrame:
        """One row per distinct cell of the selection (a cell several studies hold is one), in
        study then design order: ``cell_id``, ``study`` (the first holding it), ``studies``
        (all, comma-separated), ``cell_label`` (the first study's), ``label`` (the factor levels
        that differ between the selected cells, then any other setting that tells two of them
        apart), ``task`` (JSON), ``data_version``, ``code_version``, ``config`` (JSON)."""
        configs: dict[str, dict[str, Any]] = {}
        for res in self.results:
            for cell in design.cells(res.spec):
                configs.setdefault(cell.id, cell.config)
        factors = [f for f in self.factors if f in self.trials.columns]
        rows: dict[str, dict[str, Any]] = {}
        for row in self.trials.select("study", "cell_id", "cell_label", *factors).unique(maintain_order=True).iter_rows(named=True):
            cid, study = row["cell_id"], row["study"]
            if cid in rows:
                if study not in rows[cid]["studies"]:
                    rows[cid]["studies"].append(study)
                continue
            config = configs.get(cid, {})
            task = config.get("task", {})
            rows[cid] = {"cell_id": cid, "study": study, "studies": [study], "cell_label": row["cell_label"],
                         "config": config, "levels": {f: row[f] for f in factors},
                         "task": design.canonical_json(task), "data_version": design.data_version(task) if task else None,
                         "code_version": design.code_version(config) if config else None}
        varied = [f for f in factors if len({r["levels"][f] for r in rows.values()}) > 1]
        for r in rows.values():
            r["label"] = ", ".join(f"{f.rsplit('.', 1)[-1]}={r['levels'][f]}" for f in varied
                                   if r["levels"][f] is not None)  # a named factor of another study: not this cell's
        by_label: dict[str, list[dict[str, Any]]] = {}
        for r in rows.values():
            by_label.setdefault(r["label"], []).append(r)
        for same in by_label.values():  # cells the factors do not tell apart: say what does
            if len(same) > 1:
                for r, extra in zip(same, difference_labels([x["config"] for x in same]), strict=True):
                    r["label"] = ", ".join(x for x in (r["label"], extra) if x and x != "baseline")
        # Cells whose configurations are equal differ where no setting shows (their tuning protocol,
        # their code): the study that holds each tells them apart.
        counts = Counter(r["label"] for r in rows.values())
        for r in rows.values():
            if counts[r["label"]] > 1:
                r["label"] = f"{r['label'] or 'baseline'} [{r['study']}]"
        schema = {"cell_id": pl.Utf8, "study": pl.Utf8, "studies": pl.Utf8, "cell_label": pl.Utf8, "label": pl.Utf8,
                  "task": pl.Utf8, "data_version": pl.Utf8, "code_version": pl.Utf8, "config": pl.Utf8}
        return pl.DataFrame([{**{k: v for k, v in r.items() if k != "levels"}, "studies": ", ".join(r["studies"]),
                              "label": r["label"] or "baseline", "config": design.canonical_json(r["config"])}
                             for r in rows.values()], schema=schema)

    def frames(self) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        """(trials, metrics, curves) with each item once — a finished row before an unfinished
        one, then the first study's — ``cell_label`` the variant's ``label`` and ``study`` the
        studies holding the cell."""
        v = self.variants().select("cell_id", "studies", "label")
        order = {name: i for i, name in enumerate(self.names)}
        item = ["cell_id", "phase", "seed", "tune_index"]
        trials = (self.trials.with_row_index("_row")
                  .with_columns(pl.col("study").replace_strict(order, return_dtype=pl.Int64).alias("_order"),
                                (pl.col("status") == "pending").alias("_pending"),
                                pl.col("_row").min().over(item).alias("_first"))
                  .sort("_pending", "_order").unique(item, keep="first").sort("_first")
                  .drop("_row", "_order", "_pending", "_first"))
        # Curves and metrics come from the run of the row kept for (cell, phase, seed).
        chosen = trials.select("cell_id", "phase", "seed", pl.col("study").alias("_from")).unique(
            ["cell_id", "phase", "seed"], keep="first")

        def relabel(frame: pl.DataFrame) -> pl.DataFrame:
            out = frame.join(v, on="cell_id", how="inner")
            return out.with_columns(pl.col("label").alias("cell_label"), pl.col("studies").alias("study")).drop(
                "studies", "label")

        def one(frame: pl.DataFrame) -> pl.DataFrame:
            if "cell_id" not in frame.columns or not frame.height:
                return frame
            kept = frame.join(chosen, on=["cell_id", "phase", "seed"], how="inner").filter(pl.col("study") == pl.col("_from"))
            return relabel(kept.drop("_from"))

        original = self.trials.columns
        return relabel(trials).select(original), one(self.metrics), one(self.curves)
