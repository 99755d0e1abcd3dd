"""The ``comparison`` report's presentation: several studies (or some of their cells) side by side.

The notebook (``ablate/report/notebooks/comparison.py``) loads the studies with
``ablate.results.load([...])``, keeps the chosen cells (``Studies.select``), and analyses the
variants (``Studies.frames``: each cell once, labelled by what differs) with the accuracy and
norm-stability analyses (``ablate.stats``, ``ablate.stats.norms``) and their presentation
(``ablate.report.accuracy``, ``ablate.report.norm_tables``), which it reuses as they are.
What is particular to a comparison is here: which studies and cells, which variants can be
compared (``stats.comparability``: same task and data version), and per-study provenance.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from ablate import stats
from ablate.report import format as fmt
from ablate.report import norm_tables as ns
from ablate.stats import norms as sn

__all__ = [
    "comparability_lines",
    "header_lines",
    "norm_sentences",
    "omitted_measures_note",
    "reference_variant",
    "selection_text",
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
        return [f"All {len(variants)} variants are trained and tested on the same data (task `{ref_task.get('name')}`, "
                f"data version `{str(ref['data_version'])[:8]}`): their accuracies and state norms compare directly, "
                "and the statistics below take every one."]
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


def norm_sentences(comp: pd.DataFrame, reference: str, alpha: float = 0.05, confidence: float = 0.95) -> list[str]:
    """The norm comparisons with the reference (``stats.norms.compare``) in words, one line per
    measure, quoting the cells of ``norm_stability.ratio_table``: how many tested comparisons are
    significant and which, the furthest from 1× of the rest, what was not tested, and when no
    comparison can be significant (the exact test's floor above Holm's first threshold); a measure
    the reference has no value of says so. The study's own norm report adds the factor analysis."""
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
            out.append(f"{words}: the reference {reference} has no value (a dash in Table 4), so nothing is "
                       "compared with it; Table 4 gives the other variants' values.")
            continue
        rows = kept.index[kept["measure"] == m]
        if not len(rows):
            continue
        tested = [i for i in rows if bool(kept.at[i, "testable"])]
        sig = [i for i in tested if bool(kept.at[i, "significant"])]
        rest = [i for i in tested if i not in sig]
        few = len(rows) - len(tested)
        if not tested:
            out.append(f"{words}: none of the {len(rows)} comparisons can be tested (fewer than {stats.MIN_N_TEST} "
                       "seeds); the ratios in the table are description, not evidence.")
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
        floor, holm = float(kept.loc[tested, "p_min"].min()), alpha / len(tested)
        if floor > holm:
            text += (f". With {int(kept.loc[tested, 'n'].max())} seeds none can be: the exact test cannot give a p "
                     f"below {fmt.pval(floor)}, above Holm's first threshold {fmt.pval(holm)}")
        out.append(text + ".")
    return out
