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

from ablate.results.exports import (
    EXPORT_FILES,
    EXPORT_FORMAT,
    EXPORT_VERSION,
    FRAMES,
    MANIFEST,
    MAX_JSON_BYTES,
    PROVENANCE_FILE,
    PROVENANCE_SCHEMA,
    SPEC_FILE,
    STUDY_FILE,
    Exported,
    ExportError,
    check_export_dir,
    export,
    export_many,
    exports_in,
    read_export,
    read_exports,
    read_exports_in,
    read_manifest,
)
from ablate.results.frames import (
    CONVERGENCE,
    SUMMARY,
    SUMMARY_SENTINEL,
    TEXT_AND_COUNTS,
    Results,
    Selectors,
    Studies,
    difference_labels,
)
from ablate.results.loading import load, read, save

# Re-exported: finding a study's stores and its status need no frames (ablate.runner.locate).
from ablate.runner.locate import locate, located_study, status, stored_specs

__all__ = [
    "CONVERGENCE", "EXPORT_FILES", "EXPORT_FORMAT", "EXPORT_VERSION", "FRAMES", "MANIFEST", "MAX_JSON_BYTES",
    "PROVENANCE_FILE", "PROVENANCE_SCHEMA", "SPEC_FILE", "STUDY_FILE", "SUMMARY", "SUMMARY_SENTINEL",
    "TEXT_AND_COUNTS", "ExportError", "Exported", "Results", "Selectors", "Studies", "check_export_dir",
    "difference_labels", "export", "export_many", "exports_in", "load", "locate", "located_study", "read",
    "read_export", "read_exports", "read_exports_in", "read_manifest", "save", "status", "stored_specs",
]
