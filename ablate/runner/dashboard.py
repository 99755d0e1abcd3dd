"""What optuna-dashboard shows of an ablation study, so that it reads as an ablation rather than an
optimisation: ``describe`` names the objective (``val_accuracy``), says in the study's
``description`` attribute (and its dashboard note, when optuna-dashboard is installed:
``save_note``) what the trials are, and keeps the categorical distribution of every factor (its
level labels, in the spec's order) in ``PARAM_DISTRIBUTIONS``: a running trial records its levels
(and tuned values, runner/phases.py) as Optuna parameters, which the dashboard's importance,
parallel-coordinate and slice views read.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from ablate import design
from ablate.runner import queue
from ablate.runner.items import PARAM_DISTRIBUTIONS

if TYPE_CHECKING:
    from ablate.spec import Spec

# The objective every COMPLETE trial reports (worker.py tells the study this value).
OBJECTIVE = "val_accuracy"
# The description optuna-dashboard's note was last saved with: not read back from the dashboard's
# own attributes on every `ablate run` of a study that has nothing to do.
NOTE_SAVED = "ablate.dashboard_note"


def factor_distributions(spec: Spec, known: Mapping[str, Any] | None = None
                         ) -> dict[str, optuna.distributions.CategoricalDistribution]:
    """Per factor, a categorical distribution over its level labels in the spec's order (and the
    baseline's label, where a cell shows it: a conditional factor that does not apply, a factor
    left at the baseline by a one-at-a-time design). ``known`` (name → distribution
    JSON, as stored) keeps the labels recorded before: those the spec no longer lists follow its
    own, so that every recorded value stays a choice."""
    factors, _ = design.parse_factors(spec)
    shown = {f.name: {c.labels[f.name] for c in design.cells(spec)} for f in factors}
    out = {}
    for f in factors:
        labels = [lvl.label for lvl in f.levels]
        if f.baseline_label in shown[f.name] and f.baseline_label not in labels:
            labels.append(f.baseline_label)
        if known and f.name in known:
            old = optuna.distributions.json_to_distribution(known[f.name])
            if isinstance(old, optuna.distributions.CategoricalDistribution):
                labels += [c for c in old.choices if c not in labels]
        out[f.name] = optuna.distributions.CategoricalDistribution(labels)
    return out


def describe(study: optuna.Study, spec: Spec) -> None:
    """What optuna-dashboard needs to show an ablation (see the module docstring): the objective's
    name, the description and the factors' distributions (the note: ``save_note``); parameters
    recorded under distributions that changed (a level added) are re-encoded."""
    study.set_metric_names([OBJECTIVE])
    text = description(spec)
    if study.user_attrs.get("description") != text:
        study.set_user_attr("description", text)
    known = study.user_attrs.get(PARAM_DISTRIBUTIONS) or {}
    dists = factor_distributions(spec, known)
    stored = {name: optuna.distributions.distribution_to_json(d) for name, d in dists.items()}
    if {k: known.get(k) for k in stored} != stored:
        for name, dist in dists.items():
            if name in known and known[name] != stored[name]:
                queue.recode_params(study, name, dist)
        study.set_user_attr(PARAM_DISTRIBUTIONS, {**known, **stored})
    # Trials recorded before levels were parameters (older stores) get them now, so the
    # dashboard's importance and slice views read the whole study.
    queue.backfill_params(study, dists)


def save_note(study: optuna.Study, spec: Spec) -> None:
    """The description as optuna-dashboard's note on the study, if the dashboard is installed and
    the note is not already this text."""
    text = description(spec)
    if study.user_attrs.get(NOTE_SAVED) == text:
        return
    notes = _dashboard_notes()
    if notes is None:  # an optional tool: the description attribute says the same
        return
    if notes.get_note(study) != text:
        notes.save_note(study, text)
    study.set_user_attr(NOTE_SAVED, text)


def _dashboard_notes() -> Any:
    """optuna-dashboard's note functions (``get_note``, ``save_note``), or None without the
    dashboard. Its package imports its web app, Optuna's importance module and scikit-learn (1.6 s
    of CPU, beside the workers starting); its note module imports only Optuna, so it is run from
    its file alone, and the package imported only if that file moved or no longer runs alone."""
    import importlib.util

    found = importlib.util.find_spec("optuna_dashboard")
    if found is None:
        return None
    for folder in found.submodule_search_locations or []:
        path = Path(folder) / "_note.py"
        module_spec = importlib.util.spec_from_file_location("ablate_dashboard_note", path)
        if path.is_file() and module_spec is not None and module_spec.loader is not None:
            module = importlib.util.module_from_spec(module_spec)
            try:
                module_spec.loader.exec_module(module)
            except Exception:
                break
            if hasattr(module, "get_note") and hasattr(module, "save_note"):
                return module
    import optuna_dashboard

    return optuna_dashboard


def description(spec: Spec) -> str:
    """The study's description for optuna-dashboard (Markdown): an ablation queue, not a search."""
    factors = ", ".join(f"`{name}`" for name in spec.factors) or "none"
    lines = [
        f"**{spec.name}: an ablation study run by ablate** — a work queue, not an optimisation.",
        "",
        "Each trial trains one cell (a combination of factor levels) on one seed "
        "(`phase` replicate, or tune while a cell's tuning runs); trials run in queue order, so the "
        "best-so-far line and \"best trial\" mean only the highest validation accuracy so far.",
        f"Parameters are the factor levels ({factors}; categorical, in the spec's order) and, for "
        "tuned studies, the tuned values: importance, parallel coordinates and slices show how each "
        f"factor moves `{OBJECTIVE}`, the objective (validation accuracy at the end of training).",
        "User attributes hold the cell (`cell_label`, `cell_id`), `seed`, `phase`, its config and "
        "any failure. Test metrics, curves and statistics: `ablate report` or "
        f"`ablate.results.load({spec.name!r})`.",
    ]
    if spec.description:
        lines += ["", spec.description.strip()]
    return "\n".join(lines)
