"""Statistics for ablation studies: per-cell summaries, comparisons, main effects, ANOVA, norms.

Everything here is a pure function of the tidy *trials* frame the results API produces (one row
per (cell, seed)): ``cell_id``, ``cell_label``, ``seed``, ``phase``, ``status``, metric columns
(``test_accuracy``, ...; NaN unless the run completed) and one column per factor, named by its
dotted path (``model.layers``) and holding the level's label. All tests come from scipy and
statsmodels; nothing here imports torch.

Conventions, decided once for every function:

* **Which runs count.** Only rows whose ``phase`` is ``"replicate"`` (when the column exists; pass
  ``phase=None`` to use every row) and whose ``status`` is ``"complete"`` with a finite metric.
  Tuning trials explore hyper-parameters and would bias a cell's estimate.
* **Diverged, never learned, failed.** A *diverged* run has no metric; it is counted apart and
  never enters a mean. A run that completed but whose metric is ``≤ chance + margin`` *never
  learned*: it is a genuine outcome of the configuration, so ``mean`` (and every test) includes it,
  as is standard; its share is reported next to the mean, and ``mean_learned`` gives the mean over
  the runs that did learn so a reader can see how much the never-learned runs pull the mean down.
  A *failed* run (infrastructure: crash, lost worker) says nothing about the configuration: counted
  apart, left out of every share's denominator. Shares are over the *finished* runs
  (complete + diverged), so ``learned + never_learned + diverged`` shares sum to one.
* **Order.** Cells and factor levels keep their order of first appearance in ``trials`` (or the
  category order of a categorical column), which is the plan's order when the results API wrote
  it.
* **Determinism.** Every bootstrap takes a ``seed`` (default 0); equal inputs give equal outputs.
* **Few seeds.** Comparisons are tested by exact permutation tests (valid under ties and zero
  spread, no normality assumed), never on fewer than ``MIN_N_TEST`` values; the t-test sits beside
  them, rliable's few-run estimates (t, trimmed-t and Newcombe intervals, probability of improvement,
  performance profiles) beside both, and a power line says how many seeds a difference of
  ``stats.min_effect`` would need.

One module a job, each a set of pure functions of tidy frames (no formatting, no figures, no
storage, no torch):

    selection     which runs count (the conventions above), cells in order, a cell by id or label
    estimators    t interval, bootstrap, coefficient of variation, marks, the per-cell summary
    comparisons   tests against a declared reference: permutation, t, effect sizes, Holm, power
    few_run       rliable's few-run estimates: IQM, intervals, probability of improvement, profiles
    convergence   whether a trial's validation curve still rose over its last fifth, per run and cell
    factorial     marginal means, main effects, interactions, the factorial ANOVA
    norms         the norm-stability analysis: per-seed stability values and their comparisons
    words         how a family's size is said (no imports: ``ablate plan`` uses it before a run)
    rules         numbers a decision rule is made of that ``ablate plan`` says (no imports)

``from ablate import stats`` gives every public name of those modules (``stats.cv``,
``stats.compare_to_reference``, ...), imported on first use, so that a process that needs one
module (the training loop needs ``convergence``) does not import the others' libraries. The
accuracy report's tables, sentences and figures are ``ablate.report.accuracy``, the norm report's
``ablate.report.norm_tables``.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Modules whose public names ``ablate.stats`` re-exports (``norms`` is used as a module).
MODULES = ("selection", "estimators", "comparisons", "few_run", "convergence", "factorial")
_NAMES: dict[str, str] = {}


def _index() -> dict[str, str]:
    if not _NAMES:
        for mod in MODULES:
            for name in importlib.import_module(f"ablate.stats.{mod}").__all__:
                _NAMES[name] = mod
    return _NAMES


def __getattr__(name: str) -> Any:
    if name in ("norms", "family"):
        return importlib.import_module(f"ablate.stats.{name}")
    mod = _index().get(name)
    if mod is None:
        raise AttributeError(f"module 'ablate.stats' has no attribute {name!r}")
    return getattr(importlib.import_module(f"ablate.stats.{mod}"), name)


def __dir__() -> list[str]:
    return sorted([*_index(), "norms", "family", *MODULES])
