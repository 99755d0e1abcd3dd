"""What ``ablate plan`` warns about before a run: a design whose comparisons cannot reach
significance (or only behind its ANOVA terms), the price of a sequential study (now and at most),
and the longer WSD cells whose kept shorter runs a setting keeps them from continuing; and ``report``, the whole of ``ablate plan``
as a library call (a ``PlanReport`` that prints itself).

Kept apart from ``ablate.runner.plan`` (which builds and renders the plan) and ``ablate.runner.estimate``: these
read the plan and say what it implies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ablate import tuning
from ablate.design.family import MIN_N_TEST, family_counts, family_size, tested
from ablate.design.space import resolve_space
from ablate.runner import plan as planning
from ablate.runner.estimate import Estimate, duration, estimate, measure, render_estimate, trial_seconds
from ablate.runner.plan import FINISHED, Plan
from ablate.runner.pool import estimate_threads
from ablate.spec import Spec
from ablate.stats.words import Reach, p_text

#: The family-wise α the reports' Holm family is adjusted at (``ablate.stats.family.adjust``'s default).
REPORT_ALPHA = 0.05
#: ``ablate.stats.comparisons.PERMUTATIONS``: past this many arrangements the test draws this many, and
#: its smallest p is 2/(B + 1). Mirrored, not imported: plan does not load SciPy (tests hold them equal).
PERMUTATIONS = 9999


def p_floor(seeds: int) -> float:
    """The smallest two-sided p the reports' exact sign-flip test (``stats.comparisons.permutation_test``,
    paired on shared seeds) can give with ``seeds`` seeds: 2/2^n, or 2/(B + 1) once it samples."""
    return max(2.0 ** (1 - seeds), 2.0 / (PERMUTATIONS + 1)) if 2**seeds > PERMUTATIONS else 2.0 ** (1 - seeds)


def seeds_for(threshold: float) -> int | None:
    """Fewest seeds whose ``p_floor`` is below ``threshold`` (Holm rejects a p below its threshold,
    ``stats.family.adjust``); None where no count reaches it."""
    return next((n for n in range(2, 64) if p_floor(n) < threshold), None)


def significance_lines(spec: Spec) -> list[str]:
    """What the exact sign-flip test's floor with the study's seeds (``ablate.stats.comparisons``:
    2^(1−n) for n paired seeds) leaves within reach in the reports' Holm family, by the one rule
    (``ablate.stats.words.Reach``): a warning when no comparison with the reference can be
    significant — the floor at or above α/C, C the family's comparisons (the tests with a floor),
    the best threshold Holm can give one, once every ANOVA term is rejected first — with the seeds
    that would reach it, or a sequential design; a note when the floor is between α/C and α/m, where
    a comparison can be significant only behind the ANOVA terms Holm rejects first. Below
    ``MIN_N_TEST`` seeds a warning that nothing is tested at all (m = 0), with the seeds the same
    rule asks for. Nothing when the floor is below α/m (or nothing is compared), and nothing for a
    sequential design: its looks test with the t statistic against boundaries at α/m, which have no
    floor (the reports give its comparisons no exact test)."""
    comparisons, terms, _ = family_counts(spec)
    if not comparisons or spec.sequential is not None:
        return []
    m, how = family_size(spec)
    n = len(spec.seed_list)
    floor = p_floor(n)
    reach = Reach.of([floor] * comparisons, terms, REPORT_ALPHA)
    if not tested(spec):
        # The floor is not the reason here: with too few seeds the reports run neither test, so
        # saying "only the ANOVA terms can come first" would promise tests that never run.
        per = "seed" if n == 1 else "seeds"
        return [f"warning: with {n} {per} a cell nothing will be tested: the reports compare cells and run "
                f"the ANOVA only when every cell has at least {MIN_N_TEST} seeds, so the family is empty "
                f"(m = 0) and no comparison can be significant; from {MIN_N_TEST} seeds they test m = {m} "
                f"({how}), where "
                + _seeds_to_decide(reach, "a comparison can be significant from {needed} seeds (their smallest p is "
                                   "{floor})", "no seed count lets a comparison be significant")]
    said = reach.floor_words(floor, f"{n} seeds", on="on any comparison with the reference")
    if said is None:
        return []
    claim, reason = said
    if reach.can(floor):
        free = seeds_for(reach.first)  # none needed ahead
        more = (f"{free} seeds would need none (their smallest p, {p_text(p_floor(free), REPORT_ALPHA, bound=True)}, "
                f"is below α/{m})" if free is not None else f"no seed count takes the exact test below α/{m}")
        return [f"note: {claim[:1].lower()}{claim[1:]}: {reason} (m = {how}); {more}"]
    return [f"warning: {claim[:1].lower()}{claim[1:]}: {reason} (m = {how}); {_seeds_to_decide(reach)}"]


def tuning_lines(spec: Spec) -> list[str]:
    """A warning when a sampler other than grid has more tuning trials on a tuning seed than its
    finite space has settings: those past the settings replay one that seed ran (``phases.sample``
    draws none twice on a seed before each ran there, and a trial is a deterministic function of
    its setting and seed)."""
    if spec.tune is None or spec.tune.sampler == "grid":
        return []
    combos = tuning.combinations(resolve_space(spec))
    if combos is None:
        return []
    k, n = len(spec.tune.seed_list), len(combos)
    per_seed = [len(range(s, spec.tune.trials, k)) for s in range(k)]
    replays = sum(max(0, t - n) for t in per_seed)
    if not replays:
        return []
    on = f"each of its {k} tuning seeds" if k > 1 else "its tuning seed"
    return [f"warning: tune.trials ({spec.tune.trials}) runs up to {max(per_seed)} trials on {on}, and tune.space "
            f"has {n} setting{'s' if n > 1 else ''}: {replays} trial{'s' if replays > 1 else ''} a cell would replay "
            f"a setting its seed already ran; sampler: grid with trials {n * k} runs each once on every seed, "
            f"tune.seeds: {-(-spec.tune.trials // n)} spreads them over more seeds, or widen tune.space"]


def _seeds_to_decide(reach: Reach, said: str = "{needed} seeds would reach it (their smallest p is {floor})",
                     none: str = "no seed count reaches it") -> str:
    """The seeds that would let a comparison out of ``reach`` be significant — the fewest whose floor
    is below ``reach.limit`` (``said``, given ``needed`` and ``floor``), and how many ANOVA terms must
    be rejected before it, against the seeds that need none (below α/m) — or a sequential design; or
    that no seed count reaches it (``none``)."""
    needed, free = seeds_for(reach.limit), seeds_for(reach.first)
    if needed is None:
        return (f"{none} (the test samples {PERMUTATIONS} arrangements past 13 seeds): test fewer "
                f"comparisons or measures")
    what = said.format(needed=needed, floor=p_text(p_floor(needed), REPORT_ALPHA, bound=True))
    if free is not None and free != needed:  # only behind ANOVA terms rejected first: say how many
        k = reach.ahead(p_floor(needed))
        what += (f" once at least {k} of the ANOVA terms {'is' if k == 1 else 'are'} rejected first, {free} "
                 "with none ahead")
    return what + "; or a sequential design (seeds: {min, max, until: decided}) that stops each comparison once decided"


def sequential_price_lines(plan: Plan, seconds_of: Callable[[dict[str, Any]], float] | None = None,
                           workers: int = 1) -> list[str]:
    """A sequential study's cost now (its pending seed items) and the most it may still cost (every
    cell to the last look), in trials and, given ``seconds_of`` (a cell config → one trial's seconds,
    from ``plan --estimate``'s timings), in time with ``workers`` workers. Nothing for a fixed count."""
    seq = plan.spec.sequential
    if seq is None:
        return []
    pending = plan.pending()
    # Seeds are replicate items: a tuned cell's tuning trials count toward neither look nor max.
    seeds = {c.cell.id: [i for i in c.items if i.phase == "replicate"] for c in plan.cells}
    planned = {cid: len(items) for cid, items in seeds.items()}
    finished = {c.cell.id: sum(c.states.get(i.key) in FINISHED for i in seeds[c.cell.id]) for c in plan.cells}
    more = {c.cell.id: max(0, seq.max - planned[c.cell.id]) for c in plan.cells}
    now_trials, most_trials = len(pending), len(pending) + sum(more.values())
    reused = plan.tally()["reused"]  # the look's seeds other studies hold: neither pending nor done here
    line = (f"sequential cost: now {now_trials} trial{'s' if now_trials != 1 else ''} pending (look at "
            f"{max(planned.values(), default=0)} seeds per cell: {sum(finished.values())} done"
            + (f", {reused} reused from other studies" if reused else "")
            + f"); at most {most_trials} ({most_trials - now_trials} beyond this look) to the last look "
            f"({seq.max} seeds per cell), were no comparison decided early")
    if seconds_of is not None:
        configs = {c.cell.id: c.cell.config for c in plan.cells}
        now = sum(seconds_of(i.cell.config) for i in pending)
        most = now + sum(k * seconds_of(configs[cid]) for cid, k in more.items())
        who = "one worker" if workers == 1 else f"{workers} workers"
        line += f"; ≈ {duration(now / workers)} now, at most ≈ {duration(most / workers)} with {who}"
    return [line]


def blocker_lines(plan: Plan) -> list[str]:
    """For each pending replicate of a WSD cell that continues nothing although a shorter run of its
    lineage kept a stable-phase checkpoint: which setting prevents it (``schedule.continuation_blocker``)."""
    from ablate.design.identity import lineage_key
    from ablate.schedule import continuation_blocker
    from ablate.stores import checkpoint_dir

    root, lines = checkpoint_dir(), []
    for c in plan.cells:
        train = c.cell.config.get("train", {})
        if train.get("schedule") != "wsd":
            continue
        for item in c.items:
            if item.phase != "replicate" or item.tune or item.key in c.branches or item.key in c.reusable \
                    or c.states.get(item.key) in FINISHED:
                continue
            # where ablate.runner.phases keeps a lineage's stable-phase checkpoints: <steps>.pt and .json
            folder = root / "stable" / lineage_key(c.cell.config) / f"replicate-seed{item.seed}"
            kept = sorted(folder.glob("*.json"), key=lambda p: -_steps(p)) if folder.is_dir() else []
            for meta in kept:
                short = _train_of(meta)
                if short is None or int(short.get("steps", 0)) >= int(train["steps"]):
                    continue
                why = continuation_blocker(short, train)
                if why:
                    lines.append(f"{c.cell.id}: seed {item.seed} trains from step 0, not from the kept "
                                 f"{short['steps']}-step run: {why}")
                break
    return lines


def _steps(meta: Any) -> int:
    try:
        return int(meta.stem)
    except ValueError:
        return 0


def _train_of(meta: Any) -> dict[str, Any] | None:
    import json

    try:
        return dict(json.loads(meta.read_text())["train"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def measured_seconds(plan: Plan, device: str = "cpu") -> Callable[[dict[str, Any]], float]:
    """A cell config → one trial's seconds, each model shape timed once (``estimate.measure``)."""
    from ablate.design import canonical_json

    timings: dict[str, Any] = {}

    def seconds_of(config: dict[str, Any]) -> float:
        key = canonical_json([config["task"], config["model"], config["train"]["batch_size"]])
        if key not in timings:
            timings[key] = measure(config, plan.spec.probes, device)
        return trial_seconds(config, plan.spec.probes, timings[key])

    return seconds_of


@dataclass
class PlanReport:
    """What ``ablate plan`` prints: the plan's table and lines, what it implies (a sequential study's
    looks, extensions until converged, blocked continuations, unreachable significance), the
    estimate when asked for, and a sequential study's price."""

    plan: Plan
    reuse_stale: bool
    notes: list[str]
    estimate: Estimate | None
    prices: list[str]

    def print(self, console: Any) -> None:
        planning.render(self.plan, console, self.reuse_stale)
        for line in self.notes:
            console.print(line, highlight=False, soft_wrap=True)
        if self.estimate is not None:
            render_estimate(self.estimate, console)
        for line in self.prices:
            console.print(line, highlight=False, soft_wrap=True)


def report(spec: Spec, storage: str | None = None, tracking_uri: str | None = None, reuse: bool = True,
           reuse_stale: bool = False, timed: bool = False, device: str = "cpu", workers: int = 1) -> PlanReport:
    """``ablate plan`` as a library call: the plan of ``spec`` (its storage read only if it exists)
    and, ``timed``, the measured estimate of what is pending with ``workers`` local workers."""
    plan = planning.build(spec, storage, tracking_uri, reuse=reuse, reuse_stale=reuse_stale)
    notes = (planning.sequential_lines(spec, storage) + planning.until_converged_lines(spec, storage)
             + blocker_lines(plan) + tuning_lines(spec) + significance_lines(spec))
    # Each worker of a CPU pool gets its share of the cores: the estimate times a trial with that share.
    est = estimate(plan, device, workers=workers, threads=estimate_threads(workers, device)) if timed else None
    prices = sequential_price_lines(plan, measured_seconds(plan, device) if timed else None, workers)
    return PlanReport(plan, reuse_stale, notes, est, prices)
