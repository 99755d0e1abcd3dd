"""Report tables and generated sentences: numbers from ``ablate.stats`` formatted for print.

Every function takes a frame from ``ablate.stats`` (or the results API) and returns a display
frame (strings, one header per column) or a list of sentences. Sentences are made only from the
numbers in those frames; nothing here computes a statistic. ``html`` renders a display frame as
a plain HTML table the report's print stylesheet can wrap and shrink.
"""

from __future__ import annotations

import html as _html
import json
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

DASH = "—"
NBSP = "\u00a0"  # keeps "[low, high]", "paired t", "3 pairs" on one line in a narrow column


# --- numbers -----------------------------------------------------------------------------------


def _finite(x: Any) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def num(x: Any, digits: int = 3) -> str:
    """``x`` with ``digits`` decimals; ``—`` for missing; ``±inf`` spelled out."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(v):
        return DASH
    if math.isinf(v):
        return "∞" if v > 0 else "−∞"
    return f"{v:.{digits}f}".replace("-", "−")


def signed(x: Any, digits: int = 3) -> str:
    """``num`` with an explicit sign (``+0.012``)."""
    if not _finite(x):
        return num(x, digits)
    return ("+" if float(x) >= 0 else "") + num(x, digits)


def ci(low: Any, high: Any, digits: int = 3) -> str:
    """``[low, high]``, or ``—`` when either bound is missing."""
    if not (_finite(low) and _finite(high)):
        return DASH
    return f"[{num(low, digits)},{NBSP}{num(high, digits)}]"


def with_ci(value: Any, low: Any, high: Any, digits: int = 3, sign: bool = False) -> str:
    """``value [low, high]``; the value alone when the interval is missing."""
    text = signed(value, digits) if sign else num(value, digits)
    if text == DASH:
        return DASH
    bounds = ci(low, high, digits)
    return text if bounds == DASH else f"{text} {bounds}"


def pval(p: Any) -> str:
    """A p-value: ``<0.001``, else three significant digits; ``—`` when missing."""
    if not _finite(p):
        return DASH
    p = float(p)
    if p < 0.001:
        return "<0.001"
    return f"{p:.3f}" if p < 0.1 else f"{p:.2f}"


def share(k: Any, n: Any) -> str:
    """``k/n (p%)``; ``0`` when k is 0; ``—`` when n is 0 or missing."""
    if not _finite(n) or int(n) == 0 or not _finite(k):
        return DASH
    k, n = int(k), int(n)
    return "0" if k == 0 else f"{k}/{n}{NBSP}({k / n:.0%})"


def count(k: Any) -> str:
    return str(int(k)) if _finite(k) and int(k) else ""


def metric_name(metric: str) -> str:
    return metric.replace("_", " ").replace("/", " ")


# --- tables ------------------------------------------------------------------------------------


def cell_table(summary: pd.DataFrame, reference_id: str | None = None, confidence: float = 0.95,
               chance_known: bool = True) -> pd.DataFrame:
    """Per cell (``stats.cell_summary``): status, n, mean [CI], median, sd, and the diverged /
    never-learned / failed / pending counts, each in its own column."""
    level = f"{confidence:.0%}"
    rows = []
    for _, r in summary.iterrows():
        label = str(r["cell_label"]) + (" (reference)" if r["cell_id"] == reference_id else "")
        rows.append({
            "cell": label,
            "status": str(r["status"]).replace("_", " "),
            "n": int(r["n"]),
            f"mean [{level} CI]": with_ci(r["mean"], r["ci_low"], r["ci_high"]),
            "median": num(r["median"]),
            "sd": num(r["sd"]),
            "diverged": share(r["n_diverged"], r["n_finished"]),
            "never learned": share(r["n_never_learned"], r["n_finished"]) if chance_known else "n/a",
            "failed": count(r["n_failed"]),
            "pending": count(r["n_pending"]),
        })
    cols = ["cell", "status", "n", f"mean [{level} CI]", "median", "sd", "diverged", "never learned", "failed",
            "pending"]
    return pd.DataFrame(rows, columns=cols)


_ES = {"d_z": "d_z", "hedges_g": "g"}


def comparison_table(comp: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per compared cell (``stats.compare_to_reference``): test, n, difference [CI], effect size
    [CI], p, Holm-adjusted p with its mark, and the rank test's adjusted p."""
    level = f"{confidence:.0%}"
    rows = []
    for _, r in comp.iterrows():
        if r["paired"]:
            n = f"{int(r['n_pairs'])}{NBSP}pairs"
        else:
            n = f"{int(r['n_cell'])}{NBSP}vs{NBSP}{int(r['n_ref'])}"
        es = DASH
        if _finite(r["effect_size"]):
            es = f"{_ES.get(r['effect_size_kind'], r['effect_size_kind'])}{NBSP}" + with_ci(
                r["effect_size"], r["es_ci_low"], r["es_ci_high"], digits=2, sign=True)
        robust = DASH
        if r["robust_test"] and _finite(r["robust_p_adj"]):
            robust = f"{pval(r['robust_p_adj'])} ({r['robust_test']})"
        rows.append({
            "cell": str(r["cell_label"]),
            "test": str(r["test"]).replace(" ", NBSP) if len(str(r["test"])) < 10 else r["test"],
            "n": n,
            "mean": num(r["mean_cell"]),
            f"Δ vs reference [{level} CI]": with_ci(r["mean_diff"], r["diff_ci_low"], r["diff_ci_high"], sign=True),
            f"effect size [{level} CI]": es,
            "p": pval(r["p"]),
            "p (Holm)": pval(r["p_adj"]),
            "": r["mark"] if r["mark"] else ("n.s." if _finite(r["p_adj"]) else ""),
            "rank test p (Holm)": robust,
        })
    cols = ["cell", "test", "n", "mean", f"Δ vs reference [{level} CI]", f"effect size [{level} CI]", "p",
            "p (Holm)", "", "rank test p (Holm)"]
    return pd.DataFrame(rows, columns=cols)


def main_effects_table(effects: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per factor and level (``stats.main_effects``): cells with results, runs, marginal mean [CI]."""
    level = f"{confidence:.0%}"
    rows = []
    for _, r in effects.iterrows():
        rows.append({
            "factor": r["factor"],
            "level": str(r["level"]),
            "cells": f"{int(r['n_cells'])}/{int(r['n_cells_total'])}",
            "runs": int(r["n"]),
            f"marginal mean [{level} CI]": with_ci(r["mean"], r["ci_low"], r["ci_high"]),
        })
    return pd.DataFrame(rows, columns=["factor", "level", "cells", "runs", f"marginal mean [{level} CI]"])


def interaction_grid(wide: pd.DataFrame, f1: str, f2: str) -> pd.DataFrame:
    """``stats.interaction_table(wide=True)`` with formatted means and the factors in the corner."""
    out = wide.map(num) if hasattr(wide, "map") else wide.applymap(num)
    out = out.reset_index()
    out.columns = [f"{f1} \\ {f2}", *[str(c) for c in wide.columns]]
    out.iloc[:, 0] = out.iloc[:, 0].astype(str)
    return out


def anova_table(table: pd.DataFrame) -> pd.DataFrame:
    """``stats.anova`` formatted: term, df, sums of squares, F, p with mark, partial η²."""
    rows = []
    for _, r in table.iterrows():
        resid = r["term"] == "Residual"
        rows.append({
            "term": r["term"],
            "df": f"{r['df']:.0f}" if _finite(r["df"]) else DASH,
            "sum sq": f"{r['sum_sq']:.4g}",
            "mean sq": f"{r['mean_sq']:.4g}",
            "F": "" if resid else num(r["F"], 2),
            "p": "" if resid else f"{pval(r['p'])} {r['mark']}".strip(),
            "partial η²": "" if resid else num(r["eta_sq_partial"], 3),
        })
    return pd.DataFrame(rows, columns=["term", "df", "sum sq", "mean sq", "F", "p", "partial η²"])


FAILED = ("diverged", "failed", "killed")


def failure_table(trials: pd.DataFrame, max_message: int = 300) -> pd.DataFrame:
    """Runs that did not complete (diverged, failed, killed): cell, phase, seed, kind, attempts,
    message (shortened to ``max_message`` characters)."""
    bad = trials[trials["status"].isin(FAILED)]
    rows = []
    for _, r in bad.iterrows():
        message = str(r.get("failure_message") or "")
        if len(message) > max_message:
            message = message[: max_message - 1] + "…"
        rows.append({
            "cell": str(r["cell_label"]),
            "phase": str(r.get("phase", "replicate")),
            "seed": int(r["seed"]),
            "kind": str(r.get("failure_kind") or r["status"]),
            "attempts": int(r.get("attempts") or 1),
            "message": message,
        })
    return pd.DataFrame(rows, columns=["cell", "phase", "seed", "kind", "attempts", "message"])


def _params_text(params: Any, digits: int = 4) -> str:
    if not isinstance(params, str | dict) or not params:
        return DASH
    data = json.loads(params) if isinstance(params, str) else params
    parts = []
    for k, v in data.items():
        v = f"{v:.{digits}g}" if isinstance(v, float) else str(v)
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def tuning_table(tuning: pd.DataFrame, objective: str) -> pd.DataFrame:
    """Per cell (``Results.tuning``): trials used, the best setting and its objective value."""
    rows = []
    for _, r in tuning.iterrows():
        used = f"{int(r['complete'])} of {int(r['planned'])}"
        extra = [f"{int(r[k])} {k}" for k in ("failed", "unfinished") if int(r[k])]
        rows.append({
            "cell": str(r["cell_label"]),
            "trials complete": used + (f" ({', '.join(extra)})" if extra else ""),
            "best trial": str(int(r["best_index"])) if _finite(r["best_index"]) else DASH,
            f"best {metric_name(objective)}": num(r["best_value"]),
            "best setting": _params_text(r["best_params"]),
            "replicates ran": _replicated(r["tuned_from"]),
        })
    return pd.DataFrame(rows, columns=["cell", "trials complete", "best trial", f"best {metric_name(objective)}",
                                       "best setting", "replicates ran"])


def _replicated(source: Any) -> str:
    if not isinstance(source, str) or not source:
        return "not yet"
    parts = []
    for s in str(source).split("; "):
        _, _, rest = s.partition("/tune/")
        parts.append(f"tuning trial {rest}" if rest else s)
    return "; ".join(parts)


def reference_table(refs: pd.DataFrame, trials: pd.DataFrame, summary_by_metric: dict[str, pd.DataFrame],
                    confidence: float = 0.95) -> pd.DataFrame:
    """Published values (``Results.references``) next to this study's mean [CI] for the matching
    cell(s): source, whether confirmed, cell, metric, published, ours, difference, and whether the
    published value lies in our CI."""
    level = f"{confidence:.0%}"
    rows = []
    for _, r in refs.iterrows():
        summary = summary_by_metric.get(r["metric"])
        ids = list(r["cell_ids"]) if r["cell_ids"] is not None else []
        matched = summary[summary["cell_id"].isin(ids)] if summary is not None and ids else pd.DataFrame()
        base = {
            "source": r["source"] + (f" ({r['note']})" if r["note"] else ""),
            "confirmed": "yes" if r["confirmed"] else "no (unconfirmed)",
            "metric": metric_name(r["metric"]),
            "published": num(r["value"]),
        }
        if matched.empty:
            rows.append({**base, "cell": f"{r['cell']}: no matching cell", "ours": DASH, "n": "",
                         "ours − published": DASH, "published in our CI": DASH})
            continue
        for k, (_, m) in enumerate(matched.iterrows()):
            if k:  # one reference, several cells: name the source once
                base = {key: "" for key in base}
            inside = DASH
            if _finite(m["ci_low"]) and _finite(m["ci_high"]):
                inside = "yes" if m["ci_low"] <= r["value"] <= m["ci_high"] else "no"
            rows.append({**base, "cell": str(m["cell_label"]),
                         "ours": with_ci(m["mean"], m["ci_low"], m["ci_high"]) if m["n"] else str(m["status"]),
                         "n": str(int(m["n"])),
                         "ours − published": signed(m["mean"] - r["value"]) if m["n"] else DASH,
                         "published in our CI": inside})
    cols = ["source", "confirmed", "cell", "metric", "published", f"ours: mean [{level} CI]", "n",
            "ours − published", "published in our CI"]
    out = pd.DataFrame(rows).rename(columns={"ours": f"ours: mean [{level} CI]"})
    return out.reindex(columns=cols)


# --- sentences ---------------------------------------------------------------------------------


def _direction(diff: float, higher_is_better: bool) -> str:
    if higher_is_better is None:
        return "above" if diff > 0 else "below"
    better = (diff > 0) == higher_is_better
    return "beats" if better else "trails"


def comparison_sentences(comp: pd.DataFrame, metric: str, alpha: float = 0.05, confidence: float = 0.95,
                         higher_is_better: bool | None = True) -> list[str]:
    """One sentence per significant comparison, one for the rest; only numbers from ``comp``."""
    if comp.empty:
        return ["There is no other cell to compare with the reference."]
    ref = comp["reference_label"].iloc[0]
    tested = comp[comp["p_adj"].notna()]
    untested = comp[comp["p_adj"].isna()]
    name = metric_name(metric)
    out = []
    sig = tested[tested["p_adj"] < alpha]
    out.append(f"{len(sig)} of {len(tested)} comparison{'s' if len(tested) != 1 else ''} with the reference "
               f"({ref}) {'is' if len(sig) == 1 else 'are'} significant at α = {alpha:g} after Holm's correction"
               + (f"; {len(untested)} cell{'s' if len(untested) != 1 else ''} "
                  f"{'has' if len(untested) == 1 else 'have'} too few completed seeds to test." if len(untested)
                  else "."))
    for _, r in sig.sort_values("p_adj").iterrows():
        diff = float(r["mean_diff"])
        verb = _direction(diff, higher_is_better)
        es = ""
        if _finite(r["effect_size"]):
            es = (f", {_ES.get(r['effect_size_kind'], r['effect_size_kind'])} = "
                  f"{with_ci(r['effect_size'], r['es_ci_low'], r['es_ci_high'], digits=2, sign=True)}")
        n = f"{int(r['n_pairs'])} shared seeds" if r["paired"] else f"{int(r['n_cell'])} vs {int(r['n_ref'])} seeds"
        out.append(f"{r['cell_label']} {verb} the reference on {name} by {signed(diff)} "
                   f"{ci(r['diff_ci_low'], r['diff_ci_high'])} ({r['test']}, {n}{es}, "
                   f"p_adj = {pval(r['p_adj'])} {r['mark']}).")
    rest = tested[~(tested["p_adj"] < alpha)]
    if len(rest):
        big = rest.loc[rest["mean_diff"].abs().idxmax()]
        out.append(f"Of the differences that are not significant, the largest is {big['cell_label']}: "
                   f"{signed(big['mean_diff'])} {ci(big['diff_ci_low'], big['diff_ci_high'])}, "
                   f"p_adj = {pval(big['p_adj'])}.")
    return out


def summary_sentences(summary: pd.DataFrame, metric: str, chance: float | None, margin: float,
                      higher_is_better: bool | None = True, confidence: float = 0.95) -> list[str]:
    """What the per-cell table says, in words: best cell, never-learned and diverged runs, pending."""
    out = []
    name = metric_name(metric)
    have = summary[summary["n"] > 0]
    if len(have) and higher_is_better is not None:
        best = have.loc[have["mean"].idxmax() if higher_is_better else have["mean"].idxmin()]
        out.append(f"Highest mean {name}: {best['cell_label']}, {with_ci(best['mean'], best['ci_low'], best['ci_high'])}"
                   f" ({confidence:.0%} CI, n = {int(best['n'])})." if higher_is_better else
                   f"Lowest mean {name}: {best['cell_label']}, {with_ci(best['mean'], best['ci_low'], best['ci_high'])}"
                   f" ({confidence:.0%} CI, n = {int(best['n'])}).")
    never = summary[pd.to_numeric(summary["n_never_learned"], errors="coerce").fillna(0) > 0]
    if chance is not None and len(never):
        total = int(never["n_never_learned"].sum())
        out.append(f"{total} run{'s' if total != 1 else ''} in {len(never)} cell{'s' if len(never) != 1 else ''} "
                   f"never learned ({name} ≤ chance {num(chance)} + {margin:g}); they count in the means.")
    div = summary[summary["n_diverged"] > 0]
    if len(div):
        total = int(div["n_diverged"].sum())
        out.append(f"{total} run{'s' if total != 1 else ''} in {len(div)} cell{'s' if len(div) != 1 else ''} "
                   f"diverged; diverged runs have no {name} and are left out of the means.")
    pending = summary[summary["status"] == "pending"]
    partial = summary[summary["status"] == "partial"]
    if len(pending) or len(partial):
        out.append(f"The study is partial: {len(pending)} cell{'s' if len(pending) != 1 else ''} without results yet, "
                   f"{len(partial)} with some seeds still to run. Numbers will change as runs finish.")
    return out


# --- HTML --------------------------------------------------------------------------------------

#: Columns of text, left-aligned (numbers are right-aligned).
LEFT = frozenset({"cell", "factor", "level", "term", "source", "message", "best setting", "kind", "phase", "value",
                  "package", "version", "confirmed", "metric", "test", "replicates ran", "status"})


def inline_markdown(text: str) -> str:
    """``**bold**``, ``*emphasis*`` and ```code``` of one paragraph as escaped HTML; ``\\*`` is a star."""
    import re

    star = "\x00"
    out = _html.escape(text.replace("\\*", star), quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)
    out = re.sub(r"\*([^*]+)\*", r"<em>\1</em>", out)
    return out.replace(star, "*")


def html(frame: pd.DataFrame, *, classes: str = "", align_left: Iterable[str] = (), caption: str = "") -> str:
    """A display frame as a plain HTML table (escaped); text columns left-aligned, numbers right."""
    left = set(align_left) or {c for c in frame.columns if c in LEFT}
    classes = " ".join(filter(None, [classes, "wide" if len(frame.columns) > 5 else ""]))
    lcls = ' class="l"'
    head = "".join(f"<th{lcls if c in left or i == 0 else ''}>{_html.escape(str(c))}</th>"
                   for i, c in enumerate(frame.columns))
    body = []
    for _, row in frame.iterrows():
        cells = []
        for c in frame.columns:
            v = row[c]
            text = DASH if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)
            cls = ' class="l"' if c in left or c == frame.columns[0] else ""
            cells.append(f"<td{cls}>{_html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    cap = f"<caption>{_html.escape(caption)}</caption>" if caption else ""
    cols = ""
    if "wide" in classes.split():  # fixed layout: columns share the page by their content, never overflow it
        widths = column_widths(frame, soft=left | {frame.columns[0]})
        cols = "<colgroup>" + "".join(f'<col style="width: {w:.1f}%">' for w in widths) + "</colgroup>"
    return (f'<table class="ablate {classes}">{cap}{cols}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


#: Approximate advance widths (em) of DejaVu Sans, the report's font, for sizing table columns.
_WIDE = {"m": 0.97, "w": 0.82, "M": 0.86, "W": 0.99, "−": 0.84, "=": 0.84, "+": 0.84, "%": 0.95, "Δ": 0.68,
         "η": 0.63, "²": 0.4, "…": 1.0}
_NARROW = {"i": 0.28, "l": 0.28, "j": 0.28, "f": 0.35, "t": 0.39, "r": 0.41, " ": 0.32, NBSP: 0.32, ".": 0.32,
           ",": 0.32, ":": 0.34, ";": 0.34, "[": 0.39, "]": 0.39, "(": 0.39, ")": 0.39, "/": 0.34, "|": 0.34,
           "'": 0.28, "_": 0.5, "-": 0.36}


def text_em(text: str) -> float:
    """Rough width of ``text`` in em (DejaVu Sans): enough to size columns, not to typeset."""
    return sum(_WIDE.get(ch) or _NARROW.get(ch) or (0.64 if ch.isdigit() or ch.isupper() else 0.6)
               for ch in text)


def column_widths(frame: pd.DataFrame, available_em: float = 68.0, cap_em: float = 24.0, pad_em: float = 1.2,
                  slack: float = 1.08, soft: Iterable[str] = (), soft_min_em: float = 8.0,
                  first_min_em: float = 13.0) -> list[float]:
    """Percent widths for a fixed-layout table that fills ``available_em`` (A4 text width at the
    table font size).

    Every column is at least as wide as its longest unbreakable token (a number, ``[low, high]``,
    a header word in bold); a ``soft`` (text) column may break inside a long word, so its floor is
    at most ``soft_min_em`` (``first_min_em`` for the first column, the row's name). What is left
    goes to the columns whose text is longer than their floor, text columns first (up to the 90th
    percentile of their length, at most ``cap_em``). ``slack`` covers the estimate's error.
    """
    mins, wants = [], []
    for i, c in enumerate(frame.columns):
        texts = [DASH if v is None or (isinstance(v, float) and np.isnan(v)) else str(v) for v in frame[c]]
        tokens = [t for text in texts for t in text.split(" ")]
        header = 1.12 * max((text_em(w) for w in str(c).split()), default=0.0)  # bold
        low = slack * max([header, 1.0, *(text_em(t) for t in tokens)])
        filled = [text_em(t) for t in texts if t]  # blank cells (a repeated source) say nothing of width
        typical = slack * float(np.percentile(filled, 90)) if filled else 0.0
        if c in soft:  # text may break inside a long word; numbers may not
            low = max(slack * header, min(low, first_min_em if i == 0 else soft_min_em))
            want = max(low, min(cap_em, typical))
        else:  # numbers: room to keep "value [low, high]" on one line, no more
            want = max(low, min(typical, 1.6 * low))
        mins.append(low)
        wants.append(want)
    room = available_em - pad_em * len(mins)
    flex = sum(w - m for w, m in zip(wants, mins, strict=True))
    if sum(wants) <= room:
        widths = [w * room / sum(wants) for w in wants]
    elif sum(mins) < room and flex > 0:
        share = (room - sum(mins)) / flex
        widths = [m + (w - m) * share for w, m in zip(wants, mins, strict=True)]
    else:
        widths = mins  # too many columns for the page: break inside tokens rather than overflow
    widths = [w + pad_em for w in widths]
    total = sum(widths)
    return [100.0 * w / total for w in widths]
