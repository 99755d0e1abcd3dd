"""The ``comparison`` report's presentation: several studies (or some of their cells) side by side.

The notebook (``ablate/report/notebooks/comparison.py``) loads the studies with
``ablate.results.load([...])``, keeps the chosen cells (``Studies.select``), and analyses the
variants (``Studies.frames``: each cell once, labelled by what differs) with the accuracy and
norm-stability analyses (``ablate.stats``, ``ablate.stats.norms``) and their presentation
(``ablate.report.accuracy``, ``ablate.report.norm_tables``), which it reuses as they are.
What is particular to a comparison is here: which studies and cells, which variants can be
compared (``stats.comparability``: same task and data version), which pairs share a data order
(``seed_pairing``), the settings the studies' variants differ in beyond their labels
(``setting_differences``), the comparison's one multiplicity family (``family_sentence``: the
studies' rule of ``stats.family``, over what this report tests), the page-one answer and per-study
provenance.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pandas as pd

from ablate import design, stats
from ablate.models import catalogue
from ablate.report import format as fmt
from ablate.report import norm_tables as ns
from ablate.report.accuracy.tables import comparison_table, floor_words
from ablate.report.accuracy.text import space_text
from ablate.results.frames import leaves
from ablate.stats import family as fam
from ablate.stats import norms as sn

__all__ = [
    "SEED_OFFSET",
    "answer_lines",
    "answer_table",
    "apart_seeds",
    "comparability_lines",
    "family_sentence",
    "header_lines",
    "in_comparison_words",
    "norm_sentences",
    "omitted_measures_note",
    "pairing_line",
    "reference_variant",
    "seed_pairing",
    "selection_text",
    "setting_differences",
    "settings_sentence",
    "settings_table",
    "short_commit",
    "studies_provenance_table",
    "stores_lines",
    "studies_table",
    "variants_table",
]


def selection_text(selectors: list[dict[str, Any]]) -> str:
    """Selectors as the command line writes them: ``model.heads=8; variant=RotRNN``."""
    if not selectors:
        return "every cell"
    return "; ".join(", ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in s.items())
                     for s in selectors)


def reference_variant(variants: pd.DataFrame, reference: str | None = None,
                      baselines: dict[str, str] | None = None) -> tuple[str, str]:
    """(cell id, why) of the variant the others are compared with: ``reference`` (a cell id, a
    variant label or a cell label) when given, else the first study's baseline cell when it is
    shown, else the first variant. KeyError names the variants."""
    if variants.empty:
        raise KeyError("no variants: no cell of the studies matches the selection")
    if reference:
        for _, v in variants.iterrows():
            if reference in (v["cell_id"], v["label"], v["cell_label"]):
                return str(v["cell_id"]), "chosen with the report parameter `reference`"
        known = ", ".join(repr(lbl) for lbl in variants["label"])
        raise KeyError(f"no variant with id or label {reference!r}; variants are: {known}")
    first = str(variants["study"].iloc[0])
    base = (baselines or {}).get(first)
    if base is not None and base in set(variants["cell_id"]):
        return base, f"the baseline of study {first}"
    return str(variants["cell_id"].iloc[0]), "the first variant shown"


def header_lines(title: str, names: list[str], variants: pd.DataFrame, trials: pd.DataFrame,
                 ref_label: str, ref_why: str) -> list[str]:
    """The opening paragraphs: what is compared, and with what."""
    done = int(((trials["status"] == "complete") & (trials["phase"] == "replicate")).sum())
    shared = int((variants["studies"].str.contains(",")).sum())
    lines = [f"**{title}** · studies {', '.join(f'`{n}`' for n in names)} · {len(variants)} variants "
             f"({shared} held by more than one study: trained once, shown once) · {done} completed replicate runs",
             f"Reference: **{ref_label}** ({ref_why}). A variant is a cell (its resolved configuration, data and "
             "code); labels name the factor levels that differ between the variants shown."]
    return lines


def studies_table(summaries: list[dict[str, Any]]) -> pd.DataFrame:
    """Per study: its spec hash, the cells shown of its cells, its selection, replicate runs
    complete, and how many of them it reused from another study. ``summaries``: one mapping per
    study with ``study``, ``spec_hash``, ``cells``, ``shown``, ``selection``, ``complete``,
    ``reused`` (a mapping source study → runs)."""
    rows = []
    for s in summaries:
        reused = ", ".join(f"{n} from {src}" for src, n in s["reused"].items()) or fmt.DASH
        rows.append({"study": s["study"], "spec hash": s["spec_hash"], "cells shown": f"{s['shown']} of {s['cells']}",
                     "selection": s["selection"], "complete runs": fmt.count(s["complete"]), "reused": reused})
    return pd.DataFrame(rows, columns=["study", "spec hash", "cells shown", "selection", "complete runs", "reused"])


def variants_table(variants: pd.DataFrame, comp: pd.DataFrame, reference_id: str) -> pd.DataFrame:
    """Per variant: its label, the studies holding it, its cell id, data version and code version,
    and whether it is compared with the reference."""
    ok = dict(zip(comp["cell_id"], comp["comparable"], strict=True))
    rows = []
    for _, v in variants.iterrows():
        rows.append({"variant": v["label"] + (" (reference)" if v["cell_id"] == reference_id else ""),
                     "studies": v["studies"], "cell id": v["cell_id"], "data version": str(v["data_version"])[:8],
                     "code version": v["code_version"],
                     "compared": "reference" if v["cell_id"] == reference_id else "yes" if ok.get(v["cell_id"]) else "no"})
    return pd.DataFrame(rows, columns=["variant", "studies", "cell id", "data version", "code version", "compared"])


def comparability_lines(variants: pd.DataFrame, comp: pd.DataFrame, reference_id: str) -> list[str]:
    """Which variants the statistics compare, and for the others why not (from ``stats.comparability``)."""
    ref = variants.loc[variants["cell_id"] == reference_id].iloc[0]
    ref_task = json.loads(ref["task"])
    merged = variants.merge(comp, on="cell_id")
    apart = merged[~merged["comparable"]]
    if apart.empty:
        # Only the data is claimed the same here: the models and their training may differ beyond
        # the labels, which ``settings_sentence`` says.
        return [f"All {len(variants)} variants are trained and tested on the same data (task `{ref_task.get('name')}`, "
                f"data version `{str(ref['data_version'])[:8]}`), and the statistics below take every one."]
    lines = [f"{len(merged) - len(apart)} of {len(variants)} variants share the reference's data (task "
             f"`{ref_task.get('name')}`, data version `{str(ref['data_version'])[:8]}`) and are compared with it. "
             f"{len(apart)} {'is' if len(apart) == 1 else 'are'} not — a difference on other data is not an effect "
             "of the factors:"]
    for _, v in apart.iterrows():
        task = json.loads(v["task"])
        if not v["same_task"]:
            why = f"another task ({task.get('name')} vs {ref_task.get('name')})"
        elif v["differs"]:
            why = "other data: " + ", ".join(f"{k} {task.get(k)} vs {ref_task.get(k)}" for k in v["differs"])
        else:
            why = "the same task parameters but another version of the task's generator"
        lines.append(f"- **{v['label']}** ({v['studies']}): {why}.")
    return lines


#: Added to the seeds of a variant whose seeds do not share the reference's data order
#: (``apart_seeds``): no seed is then shared, so the tests take the two unpaired.
SEED_OFFSET = 1_000_000_000


def _config(variant: pd.Series) -> dict[str, Any]:
    """A variant's resolved configuration without the model settings its family does not read."""
    config = json.loads(variant["config"]) if isinstance(variant["config"], str) else dict(variant["config"])
    model = config.get("model")
    return {**config, "model": catalogue.read_model(model)} if isinstance(model, dict) else config


def seed_pairing(variants: pd.DataFrame, reference_id: str) -> pd.DataFrame:
    """Per variant (``Studies.variants``): whether its seed s trains on the same batches in the same
    order as the reference's seed s (``same_order``), and ``why`` not. A run draws its batch order
    from a generator seeded by its seed over its task's training set, ``train.batch_size`` at a time
    (``training.Trial.batch``), so the order is shared exactly when the data version and the batch
    size are. Only then does pairing seed s with seed s pair something (the data order; the initial
    weights differ wherever the models do); otherwise the tests must take the runs unpaired."""
    ref = variants.loc[variants["cell_id"] == reference_id].iloc[0]
    ref_batch = _config(ref).get("train", {}).get("batch_size")
    rows = []
    for _, v in variants.iterrows():
        batch = _config(v).get("train", {}).get("batch_size")
        why = ("other data" if v["data_version"] != ref["data_version"] else
               f"batch size {batch} vs {ref_batch}" if batch != ref_batch else "")
        rows.append({"cell_id": v["cell_id"], "same_order": not why, "batch_size": batch, "why": why})
    return pd.DataFrame(rows, columns=["cell_id", "same_order", "batch_size", "why"])


def apart_seeds(frame: Any, cells: Iterable[str]) -> Any:
    """``frame`` (pandas or polars, with ``cell_id`` and ``seed``) with the seeds of ``cells`` moved
    by ``SEED_OFFSET``, so that no seed of theirs matches the reference's and every test takes them
    unpaired (``seed_pairing``: their seed s does not draw the reference's batches)."""
    cells = list(cells)
    if not cells or "seed" not in frame.columns or not len(frame):
        return frame
    if isinstance(frame, pd.DataFrame):
        out = frame.copy()
        moved = out["cell_id"].isin(cells)
        out.loc[moved, "seed"] = out.loc[moved, "seed"] + SEED_OFFSET
        return out
    import polars as pl

    return frame.with_columns(pl.when(pl.col("cell_id").is_in(cells)).then(pl.col("seed") + SEED_OFFSET)
                              .otherwise(pl.col("seed")).alias("seed"))


def pairing_line(pairing: pd.DataFrame, variants: pd.DataFrame, compared: Iterable[str], reference_id: str) -> str:
    """What the tests' pairs pair (``seed_pairing`` of the ``compared`` variants), in one sentence."""
    rows = pairing[pairing["cell_id"].isin(set(compared)) & (pairing["cell_id"] != reference_id)]
    if rows.empty:
        return ""
    batch = pairing.loc[pairing["cell_id"] == reference_id, "batch_size"].iloc[0]
    text = ("**Pairs.** A test pairs seed s of a variant with seed s of the reference where both ran it: the seed "
            f"draws the training batches (batch size {batch}) from the same training set, so each pair shares its "
            "data order — not its initial weights, which differ wherever the models do")
    apart = rows[~rows["same_order"]]
    if apart.empty:
        return text + "."
    labels = dict(zip(variants["cell_id"], variants["label"], strict=True))
    return (text + ". Taken unpaired, since the same seed draws other batches for them: "
            + "; ".join(f"{labels[c]} ({w})" for c, w in zip(apart["cell_id"], apart["why"], strict=True)) + ".")


def _group(path: str) -> str:
    """The setting a config leaf belongs to: its first two keys (``model.init`` for
    ``model.init.r_min``), so one setting's parts are said together."""
    return ".".join(path.split(".")[:2])


def _tune_text(tune: Any) -> str:
    """A study's tuning protocol in a few words: "tpe, 4 trials: train.lr [0.001, 0.01] log"."""
    if tune is None:
        return "not tuned"
    space = "; ".join(f"{path} {space_text(dim)}" for path, dim in tune.space.items())
    return f"{tune.sampler}, {tune.trials} trial{'s' if tune.trials != 1 else ''}: {space}"


def setting_differences(variants: pd.DataFrame, tunes: dict[str, Any], named: Iterable[str]) -> pd.DataFrame:
    """The settings the studies' variants differ in beyond the factors their labels name: one row
    per setting (a config section's key, ``model.init``; ``tune`` for the tuning protocol) whose
    values differ between the studies, with per variant its value (``value`` columns keyed by cell
    id: ``value:<id>`` columns) and per study the list of values its variants have (a column per study).
    ``variants``: ``Studies.variants``; ``tunes``: study → its spec's ``tune`` (None: not tuned), in
    the studies' order; ``named``: the factor paths the labels name (left out, as is a setting every
    label names by its last key, ``heads=4``). A setting a study
    tunes reads "tuned" there (its config value is not what ran). Empty with one study."""
    studies = list(tunes)
    named = [str(p) for p in named]
    values: dict[str, dict[str, Any]] = {}  # setting → cell id → its value (a leaf, or a dict of leaves)
    holders: dict[str, list[str]] = {}
    for _, v in variants.iterrows():
        cid = str(v["cell_id"])
        holders[cid] = [s.strip() for s in str(v["studies"]).split(",")]
        tuned = set(tunes.get(holders[cid][0]).space) if tunes.get(holders[cid][0]) is not None else set()
        for path, value in leaves(_config(v)).items():
            if any(path == p or path.startswith(p + ".") for p in named):
                continue
            group = _group(path)
            shown = "tuned" if any(path == t or path.startswith(t + ".") for t in tuned) else value
            if group == path:
                values.setdefault(group, {})[cid] = shown
            else:
                values.setdefault(group, {}).setdefault(cid, {})[path[len(group) + 1:]] = shown
        values.setdefault("tune", {})[cid] = _tune_text(tunes.get(holders[cid][0]))
    labels = [str(x) for x in variants["label"]]
    rows = []
    for setting, per_cell in values.items():
        if all(f"{setting.rsplit('.', 1)[-1]}=" in lbl for lbl in labels):
            continue  # every label names it (a setting that told the variants apart: Studies.variants)
        texts = _value_texts(per_cell)
        by_study = {s: list(dict.fromkeys(texts[c] for c in per_cell if s in holders[c])) for s in studies}
        if len({tuple(sorted(t)) for t in by_study.values() if t}) < 2:
            continue
        rows.append({"setting": setting, **by_study, **{f"value:{c}": texts.get(c, fmt.DASH) for c in holders}})
    out = pd.DataFrame(rows, columns=["setting", *studies, *[f"value:{c}" for c in holders]])
    out.attrs["studies"] = studies
    out.attrs["holders"] = holders
    return out


def _value_texts(per_cell: dict[str, Any]) -> dict[str, str]:
    """Each cell's value of one setting as text; a section of several keys (``model.init``) by the
    keys whose value differs between the cells (``{scheme: ring, r_min: 0.9}``), not the ones all share."""
    if not any(isinstance(v, dict) for v in per_cell.values()):
        return {c: v if isinstance(v, str) else design.level_label(v) for c, v in per_cell.items()}
    keys = list(dict.fromkeys(k for v in per_cell.values() if isinstance(v, dict) for k in v))
    keys.sort(key=lambda k: not any(isinstance(v, dict) and isinstance(v.get(k), str) for v in per_cell.values()))
    # (a named choice — an init's scheme — before the numbers it comes with)
    varying = [k for k in keys if len({design.canonical_json(v.get(k)) for v in per_cell.values()}) > 1] or keys
    return {c: "{" + ", ".join(f"{k}: {design.level_label(v[k])}" for k in varying if k in v) + "}"
            for c, v in per_cell.items()}


def settings_sentence(diffs: pd.DataFrame, table: str = "Table 4") -> str:
    """Page one's sentence on ``setting_differences``: which settings differ between the studies,
    each with the studies' values in the studies' order (a value every study has said once, "in
    each", and a study's others after it); "" when none does. ``table``: the one giving each
    variant's (``settings_table``)."""
    if diffs.empty:
        return ""
    studies = [s for s in diffs.attrs["studies"] if any(len(r[s]) for _, r in diffs.iterrows())]
    parts = []
    for _, r in diffs.iterrows():
        common = [v for v in r[studies[0]] if all(v in r[s] for s in studies)]
        if common:
            extra = [f"{s} also {', '.join(v for v in r[s] if v not in common)}" for s in studies
                     if any(v not in common for v in r[s])]
            parts.append(f"{r['setting']} ({', '.join(common)} in each; {'; '.join(extra)})")
        else:
            parts.append(f"{r['setting']} ({' vs '.join(', '.join(r[s]) or fmt.DASH for s in studies)})")
    return (f"**Not only the factors differ.** {' and '.join(f'`{s}`' for s in studies)} (in that order) differ in "
            f"{'; '.join(parts)}: a difference between their variants is a difference between configurations, not "
            f"only in the factors the labels name ({table} gives each variant's).")


def settings_table(diffs: pd.DataFrame, variants: pd.DataFrame) -> pd.DataFrame:
    """The settings of ``setting_differences`` by variant: a row per set of values, naming the
    variants that have it — all of a study's ("the 8 variants of s") or their labels — so that every
    variant's settings can be read, including those its label leaves out."""
    shown = [str(c) for c in variants["cell_id"]]
    holders: dict[str, list[str]] = diffs.attrs.get("holders", {})
    labels = dict(zip(variants["cell_id"].astype(str), variants["label"], strict=True))
    groups: dict[tuple[str, ...], list[str]] = {}
    for c in shown:
        key = tuple(str(d.get(f"value:{c}", fmt.DASH)) for _, d in diffs.iterrows())
        groups.setdefault(key, []).append(c)
    rows = []
    for key, cells in groups.items():
        studies = {holders.get(c, [""])[0] for c in cells}
        study = next(iter(studies)) if len(studies) == 1 else None
        whole = study is not None and len(cells) > 1 and set(cells) == {c for c in shown if holders.get(c, [""])[0] == study}
        rows.append({"variants": f"the {len(cells)} variants of {study}" if whole else "; ".join(labels[c] for c in cells),
                     **dict(zip(diffs["setting"], key, strict=True))})
    return pd.DataFrame(rows, columns=["variants", *diffs["setting"]])


def family_sentence(adjusted: pd.DataFrame, alpha: float = 0.05) -> str:
    """The comparison's one sentence on its family (the rule of ``stats.family``: every test the
    report makes, Holm-adjusted together), in this comparison's words: the studies' own reports
    correct over their own families, so a shared test's p (Holm) differs."""
    if not len(adjusted):
        return ("**Multiplicity.** Nothing is tested (too few seeds or no spread), so no p-value is corrected or "
                "printed.")
    return fam.policy_sentence(adjusted, alpha, comparison=True)


#: The accuracy report's words for its family, and this report's (``in_comparison_words``).
_FAMILY_WORDS = {"the study's": "this comparison's"}
_FAMILY_RE = re.compile("|".join(re.escape(k) for k in _FAMILY_WORDS))


def in_comparison_words(lines: Iterable[str]) -> list[str]:
    """The accuracy report's sentences (``acc.comparison_intro``, ``acc.comparison_sentences``) as
    this report says them: their family is this comparison's (``family_sentence``), not a study's.
    The numbers are theirs, unchanged (the m they quote is the family's ``power_alpha``)."""
    return [_FAMILY_RE.sub(lambda m: _FAMILY_WORDS[m.group(0)], line) for line in lines]


def answer_table(comparisons: pd.DataFrame, confidence: float = 0.95, alpha: float = 0.05) -> pd.DataFrame:
    """Page one's table: each variant's difference from the reference on the primary metric with its
    interval, p (Holm) over the comparison's family and the verdict — the cells of
    ``acc.comparison_table``, which the body prints in full."""
    table = comparison_table(comparisons, confidence, alpha=alpha)
    delta = f"Δ vs reference [{fmt.level(confidence)} CI]"
    return table[["cell", "n", "mean", delta, "p (Holm)", "verdict"]].rename(columns={"cell": "variant",
                                                                                       "n": "seeds"})


def answer_lines(comparisons: pd.DataFrame, norms: pd.DataFrame | None, reference: str, ref_mean: str,
                 metric: str, alpha: float = 0.05, confidence: float = 0.95,
                 tables: tuple[str, str] = ("Table 1", "Table 9")) -> list[str]:
    """Page one's answer in sentences, quoting ``answer_table`` (and ``ns.ratio_table`` for the
    norms): how many variants differ significantly from the reference, which, and the largest
    difference of the rest; then the same for the norm ratios. ``tables``: the answer table's name
    and the norm ratios' (where each number is printed)."""
    name = fmt.metric_name(metric)
    table = answer_table(comparisons, confidence, alpha)
    delta = f"Δ vs reference [{fmt.level(confidence)} CI]"
    tested = comparisons.index[comparisons["testable"].astype(bool)]
    sig = [i for i in tested if bool(comparisons.at[i, "significant"])]
    at = f"α = {alpha:g}"
    text = (f"Against the reference, **{reference}** ({name} {ref_mean}), {len(sig)} of {len(tested)} tested "
            f"difference{'s' if len(tested) != 1 else ''} {'is' if len(sig) == 1 else 'are'} {fmt.verdict(True, at)} "
            f"({tables[0]})")
    if sig:
        text += ": " + "; ".join(f"{table.at[i, 'variant']} {table.at[i, delta]}, p (Holm) {table.at[i, 'p (Holm)']}"
                                 for i in sig)
    rest = [i for i in tested if i not in sig]
    if rest:
        i = max(rest, key=lambda j: abs(float(comparisons.at[j, "mean_diff"])))
        text += (f"; {'of the rest, ' if sig else ''}the largest is {table.at[i, 'variant']}: "
                 f"{table.at[i, delta]}, p (Holm) {table.at[i, 'p (Holm)']}")
    out = [text + "."]
    if norms is not None and len(norms):
        kept = norms[~norms["measure"].isin(ns.unreferenced(norms))].reset_index(drop=True)
        ratios = ns.ratio_table(kept, confidence)
        col = f"ratio to the reference [{fmt.level(confidence)} CI]"
        on = kept.index[kept["testable"].astype(bool)]
        hits = [i for i in on if bool(kept.at[i, "significant"])]
        line = (f"On the hidden-state norms, {len(hits)} of {len(on)} tested ratios to the reference "
                f"{'is' if len(hits) == 1 else 'are'} {fmt.verdict(True, at)} ({tables[1]})")
        if hits:
            line += ": " + "; ".join(f"{kept.at[i, 'cell_label']} {ns.MEASURE_WORDS[kept.at[i, 'measure']]} "
                                     f"{ratios.at[i, col]}, p (Holm) {ratios.at[i, 'p (Holm)']}" for i in hits)
        out.append(line + ".")
    return out


def studies_provenance_table(provenances: list[dict[str, Any]]) -> pd.DataFrame:
    """Per study (``Results.provenance()`` of each): spec hash, commits, devices, dates."""
    def tally(counts: dict[str, int], short: Callable[[str], str] = str) -> str:
        return "; ".join(f"{short(k)} ({v})" for k, v in counts.items()) or fmt.DASH

    rows = []
    for p in provenances:
        rows.append({"study": p["study"], "spec hash": p["spec_hash"],
                     "commits (runs)": tally(p["git_commits"], short_commit), "devices (runs)": tally(p["devices"]),
                     "first started": str(p["first_started"])[:16] if p["first_started"] else fmt.DASH,
                     "last finished": str(p["last_finished"])[:16] if p["last_finished"] else fmt.DASH})
    return pd.DataFrame(rows, columns=["study", "spec hash", "commits (runs)", "devices (runs)", "first started",
                                       "last finished"])


def short_commit(commit: str) -> str:
    """A commit as the provenance table prints it: 10 hex digits, and ``+dirty`` when the runs'
    tree had uncommitted changes (else a clean and a dirty run of one commit read as one commit twice)."""
    return commit[:10] + ("+dirty" if commit.endswith("+dirty") and len(commit) > 10 else "")


def stores_lines(provenances: list[dict[str, Any]]) -> list[str]:
    """The stores the studies were read from (credentials redacted by the results API)."""
    stores = list(dict.fromkeys((p["stores"].get("storage", ""), p["stores"].get("tracking", "")) for p in provenances))
    return [f"- storage `{s}`, tracking `{t}`" for s, t in stores]


def omitted_measures_note(comp: pd.DataFrame) -> str:
    """The measures ``norm_stability.ratio_table`` leaves out of the norm comparison table (the
    reference has no value: over layers, with a one-layer reference), as a sentence; "" if none."""
    gone = ns.unreferenced(comp)
    if not gone:
        return ""
    words = " and ".join(ns.MEASURE_WORDS[m] for m in gone)
    return f" Not in the table: {words} — the reference has no value there (sentences below)."


def norm_sentences(comp: pd.DataFrame, reference: str, alpha: float = 0.05, confidence: float = 0.95,
                   stability: str = "Table 4") -> list[str]:
    """The norm comparisons with the reference (``stats.norms.compare``) in words, one line per
    measure, quoting the cells of ``norm_stability.ratio_table``: how many tested comparisons are
    significant and which, the furthest from 1× of the rest, what was not tested, and what the
    exact test's floor leaves within reach over the comparison's family (``acc.floor_words``); a measure
    the reference has no value of says so (``stability``: the table of the variants' values). The
    study's own norm report adds the factor analysis."""
    if comp.empty:
        return []
    gone = ns.unreferenced(comp)
    kept = comp[~comp["measure"].isin(gone)].reset_index(drop=True)
    table = ns.ratio_table(kept, confidence)
    ratio = f"ratio to the reference [{fmt.level(confidence)} CI]"
    at = f"α = {alpha:g}"
    out = []
    for m in sn.MEASURES:
        words = f"**{ns.MEASURE_WORDS[m][:1].upper() + ns.MEASURE_WORDS[m][1:]}** ({ns.VALUE_WORDS[m]})"
        if m in gone:
            out.append(f"{words}: the reference {reference} has no value (a dash in {stability}), so nothing is "
                       f"compared with it; {stability} gives the other variants' values.")
            continue
        rows = kept.index[kept["measure"] == m]
        if not len(rows):
            continue
        tested = [i for i in rows if bool(kept.at[i, "testable"])]
        sig = [i for i in tested if bool(kept.at[i, "significant"])]
        rest = [i for i in tested if i not in sig]
        few = len(rows) - len(tested)
        if not tested:
            what = f"none of the {len(rows)} comparisons can" if len(rows) > 1 else "the one comparison cannot"
            out.append(f"{words}: {what} be tested (fewer than {stats.MIN_N_TEST} seeds); the ratios in the table "
                       "are description, not evidence.")
            continue
        text = (f"{words}: {len(sig)} of {len(tested)} tested comparisons {'is' if len(sig) == 1 else 'are'} "
                f"{fmt.verdict(True, at)}")
        if sig:
            text += ": " + "; ".join(f"{kept.at[i, 'cell_label']} {table.at[i, ratio]} the reference's "
                                     f"(p_adj = {table.at[i, 'p (Holm)']})" for i in sig)
        if rest:
            far = max(rest, key=lambda i: abs(float(np.log(kept.at[i, "ratio"]))) if fmt.finite(kept.at[i, "ratio"])
                      else -1.0)
            text += (f"; {'of the rest, ' if sig else ''}the furthest from the reference is {kept.at[far, 'cell_label']}, "
                     f"{table.at[far, ratio]} the reference's (p_adj = {table.at[far, 'p (Holm)']})")
        if few:
            text += f"; {few} not tested (fewer than {stats.MIN_N_TEST} seeds)"
        # What the seeds allow, by the one rule (``acc.floor_words``) over this comparison's family.
        said = floor_words(kept.loc[tested], alpha, on="on any comparison")
        if said is not None:
            text += ". " + in_comparison_words([f"{said[0][:1].upper()}{said[0][1:]}: {said[1]}"])[0]
        out.append(text + ".")
    return out
