"""Tune-then-replicate on the study queue, with Optuna.

Every item of a tuned spec is enqueued up front (``study.prepare``): the tuning items of each
cell, then its replicate items. Claiming stays the one atomic WAITING → RUNNING flip of
``queue.claim`` (``claim`` here adds the rule below; ``claim_fusable`` takes more of a claimed
item's cell, for a worker that trains them fused); what changes is *when* an item's setting
is decided:

- a tuning item (``phase="tune"``) gets its setting when claimed: a sampler (TPE by default)
  is built in memory from the cell's finished tuning trials in the study (and its running ones,
  as constant liars), seeded per (cell, index), and asked once. In a finite space (lists of
  choices, int ranges) the random draws (``sampler: random``, a model's startup trials) are the
  cell's shuffled settings without repeats on a seed (``tuning.unrepeated``), and a model's ask
  for a setting its seed already ran is asked again: a repeat would replay a deterministic trial.
  The setting is stored on the trial (``params``, ``config``), so a retried item re-runs the
  same setting;
- a replicate item of a tuned cell is not claimable until every tuning item of its cell is
  finished (complete, or failed for good); when claimed it takes the best finished setting
  (objective and direction of ``tune.objective``; ties to the lowest index; the baseline if
  none finished, recorded in ``tuned_from``).

- a tuning item of a protocol with a ``pruner`` reports its validation passes (``Pruning``):
  after each one the pruner is asked about it in an in-memory study of its cell's tuning trials
  only (their intermediate values, stored on them as ``intermediate``, and the pruner's own
  bookkeeping, ``pruner_attrs``); a pruned trial ends PRUNED, a result. Replicates never prune.

No per-cell Optuna study is stored: the main study's trials are the history, so both phases
resume with the queue, and nothing here can disagree with what the results API reads. The
samplers, the pruners and the in-memory study they are asked in are runner/samplers.py's.

``record_params`` records a claimed item's factor levels (categorical, study.PARAM_DISTRIBUTIONS)
and its tuned values (the search space's distributions) as the trial's Optuna parameters, for
optuna-dashboard; the setting the worker runs is the one in the user attributes.
"""

from __future__ import annotations

import json
import math
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from ablate import tuning
from ablate.design import Item
from ablate.design.identity import lineage_key
from ablate.runner import items as its
from ablate.runner import queue
from ablate.runner.samplers import distributions, make_pruner, make_sampler, memory, remember
from ablate.spec import TrainSpec

UNFINISHED = ("waiting", "running", "new")
# Asks of a model whose setting its trial's seed already ran, before the seed's first untried one.
REASKS = 8
# One tuning item sampled at a time in a process, so that each sees its fused siblings' settings.
_SAMPLING = threading.Lock()


def _tune_trials(study: optuna.Study, cell_id: str) -> list[FrozenTrial]:
    return its.cell_trials(study, cell_id, "tune")


def intermediate(trial: FrozenTrial) -> dict[int, float]:
    """A tuning trial's reported validation values by step (kept as a user attribute, which a
    re-queued copy inherits, unlike Optuna's own intermediate values)."""
    raw = trial.user_attrs.get("intermediate")
    return {int(k): float(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


class Pruning:
    """``run_trial``'s ``on_eval`` for a tuning item whose protocol prunes: records each pass's
    objective value on the trial and raises ``queue.Pruned`` (Optuna's ``TrialPruned``) when the
    pruner, asked in an in-memory study of the cell's other tuning trials (finished, pruned and
    running) plus this one, says stop. ``step`` is the last pass reported."""

    def __init__(self, study: optuna.Study, trial: optuna.Trial, attrs: dict[str, Any]) -> None:
        protocol, train = attrs["tune"], attrs["config"]["train"]
        self.study, self.trial, self.attrs = study, trial, attrs
        self.metric = protocol["objective"]["metric"]
        self.direction = protocol["objective"]["direction"]
        self.pruner = make_pruner(protocol["pruner"], int(train["steps"]), int(train["eval_every"]))
        own = queue.trial(study, trial.number)  # a re-queued copy carries what its predecessor reported
        self.values = intermediate(own)
        raw = own.user_attrs.get("pruner_attrs")
        self.pruner_attrs: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
        self.step = max(self.values, default=0)

    def __call__(self, step: int, val: dict[str, float]) -> None:
        value = float(val[self.metric.removeprefix("val_")])
        self.values[step], self.step = value, step
        self.trial.set_user_attr("intermediate", {str(s): v for s, v in sorted(self.values.items())})
        if self.should_prune():
            raise queue.Pruned(f"pruned at step {step}: {self.metric} {value:.4g}")

    def should_prune(self) -> bool:
        dists = distributions(self.attrs["tune"]["space"])
        history = memory(self.direction)
        for t in _tune_trials(self.study, self.attrs["cell_id"]):
            params, value = t.user_attrs.get("params"), _value(t, self.metric)
            if t.number == self.trial.number or not isinstance(params, dict) or t.state not in (
                    TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING):
                continue
            if t.state == TrialState.COMPLETE and value is None:
                continue
            remember(history, t.state, params, dists, intermediate(t),
                     value if t.state == TrialState.COMPLETE else None, t.user_attrs.get("pruner_attrs"))
        if not remember(history, TrialState.RUNNING, self.attrs["params"], dists, self.values, None,
                        self.pruner_attrs):
            return False  # this trial's own setting is outside the space: nothing to compare it with
        current = history.get_trials(deepcopy=False)[-1]
        prune = self.pruner.prune(history, current)
        # The pruner's bookkeeping (successive halving's rungs) lives on the trial it concerns.
        kept = dict(history.get_trials(deepcopy=False)[-1].system_attrs)
        if kept != self.pruner_attrs:
            self.pruner_attrs = kept
            self.trial.set_user_attr("pruner_attrs", kept)
        return prune


def pruning(study: optuna.Study, trial: optuna.Trial, attrs: dict[str, Any]) -> Pruning | None:
    """The ``on_eval`` of a tuning item whose protocol has a pruner; None for every other item."""
    protocol = attrs.get("tune") or {}
    if attrs.get("phase") != "tune" or protocol.get("pruner", "none") == "none":
        return None
    return Pruning(study, trial, attrs)


def _value(trial: FrozenTrial, metric: str) -> float | None:
    v = trial.user_attrs.get(metric)
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def sample(study: optuna.Study, number: int, attrs: dict[str, Any]) -> dict[str, Any]:
    """A setting for tuning item ``attrs`` (trial ``number``) given its cell's history."""
    protocol = attrs["tune"]
    if protocol.get("sampler") == "grid":  # trial i: combination i // k on tuning seed i mod k (design.items)
        return tuning.grid_point(protocol["space"], int(attrs["index"]) // len(protocol.get("seeds") or [0]))
    index, k = int(attrs["index"]), len(protocol.get("seeds") or [0])
    startup = int(protocol.get("startup_trials", 10))
    combos = tuning.combinations(protocol["space"])
    if combos is not None and (protocol.get("sampler") == "random" or index < startup):
        return tuning.unrepeated(combos, attrs["cell_id"], index, k)
    dists = distributions(protocol["space"])
    objective = protocol["objective"]
    history = memory(objective["direction"],
                     make_sampler(protocol, startup, tuning.sampler_seed(attrs["cell_id"], attrs["index"])))
    for t in _tune_trials(study, attrs["cell_id"]):
        params = t.user_attrs.get("params")
        if t.number == number or not isinstance(params, dict):
            continue
        # A setting outside today's space is not this protocol's history: remember() skips it.
        value = _value(t, objective["metric"])
        if t.state == TrialState.COMPLETE and value is not None:
            remember(history, TrialState.COMPLETE, params, dists, value=value)
        elif t.state == TrialState.PRUNED:  # TPE ranks a pruned trial by how far it got
            remember(history, TrialState.PRUNED, params, dists, intermediate(t))
        elif t.state == TrialState.RUNNING:
            remember(history, TrialState.RUNNING, params, dists)
    params = dict(history.ask(dists).params)
    if combos is None:
        return params
    # The model may ask again for a setting this seed ran: a repeat that would only replay it. Asked
    # again (the repeat now a running liar in its history), then the first the seed has not run.
    ran = _ran_on_seed(study, attrs["cell_id"], index, k)
    for _ in range(REASKS):
        if params not in ran:
            return params
        params = dict(history.ask(dists).params)
    untried = [c for c in tuning.shuffled(combos, attrs["cell_id"]) if c not in ran]
    return params if params not in ran or not untried else untried[0]


def _ran_on_seed(study: optuna.Study, cell_id: str, index: int, k: int) -> list[dict[str, Any]]:
    """The settings the cell's other tuning trials on trial ``index``'s tuning seed ran, run or wait
    to run (a failed attempt's retry carries its setting and index: it is this item's)."""
    ran = []
    for t in _tune_trials(study, cell_id):
        i, params = t.user_attrs.get("index"), t.user_attrs.get("params")
        if isinstance(i, int) and i != index and i % k == index % k and isinstance(params, dict) and \
                t.state != TrialState.FAIL:
            ran.append(dict(params))
    return ran


def best_score(study: optuna.Study, cell_id: str, protocol: dict[str, Any]) -> tuning.Score | None:
    """The best tuning setting of a cell so far (``tuning.best``: by its mean over the trials that
    ran it) under ``protocol`` (an item's ``tune``); None before one finished with a value."""
    objective = protocol["objective"]
    results = []
    for t in _tune_trials(study, cell_id):
        if isinstance(t.user_attrs.get("params"), dict):
            value = _value(t, objective["metric"]) if t.state == TrialState.COMPLETE else None
            results.append((int(t.user_attrs.get("index", t.number)), t.user_attrs["params"], value))
    return tuning.best(results, objective["direction"])


def best(study: optuna.Study, attrs: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The best tuning setting of the item's cell (``best_score``), and where it came from."""
    objective = attrs["tune"]["objective"]
    score = best_score(study, attrs["cell_id"], attrs["tune"])
    if score is None:
        return {}, "baseline: no tuning trial of this cell finished"
    over = score.over(len(attrs["tune"].get("seeds") or [0]))
    return dict(score.params), f"{attrs['cell_id']}/tune/{score.index} ({objective['metric']} {score.mean:.4g}{over})"


@dataclass(frozen=True)
class Pick:
    """A cell's tuning outcome once every tuning item of it finished: the setting its replicates
    train (``phases.best_score``), its mean objective over the trials that ran it, and the note when
    it lies at the edge of the search space (``tuning.edge_note``; "" when not)."""

    params: dict[str, Any]
    metric: str
    mean: float
    trials: int  # the tuning trials its mean is over
    seeds: int  # the tuning seeds they ran on
    edge: str
    at: str = ""  # its edges in a few words: "train.lr at the largest end of its space"

    def line(self, cell: str) -> str:
        """"tuned CELL: lr=0.012 (val_accuracy 0.837, the mean over 3 tuning seeds)", and where it lies
        at an edge of its space " · train.lr at the largest end of its space" (``EDGE_NOTE`` says what that means,
        once: a 32-cell study's picks had read 64 lines)."""
        at = f" · {self.at}" if self.at else ""
        return f"tuned {cell}: {tuning.setting_words([self.params])} ({self.metric} {self.mean:.3f}{tuning.mean_words(self.trials, self.seeds)}){at}"


#: Said once under the picks when some lies at an edge of its space.
EDGE_NOTE = ("note: a pick at the edge of its search space (its largest or smallest choice, or the outer 5% of a "
             "range) may have its best beyond it: a wider tune.space would tell")


def picks(study: optuna.Study, items: Sequence[Item], known: frozenset[str] = frozenset()) -> dict[str, Pick]:
    """Cell label → its ``Pick``, for each cell of the current spec (``items``) whose tuning items all
    finished, but those labelled in ``known``. ``ablate run``'s view and ``ablate status`` say it as
    soon as it is made, before the replicates start: a tuned study's tuning runs first (lru_ablations'
    first cell waited 1.5 hours for its replicates), and an edge pick had waited for a replicate to
    show. A narrower space's trials of an earlier spec are not its (their items are not in ``items``)."""
    keys = {i.key for i in items}
    expected = Counter(i.cell.id for i in items if i.phase == "tune")
    cells: dict[str, dict[str, Any]] = {}
    for e in queue.entries(study, keys=("item", its.DROPPED, "phase", "tune", "cell_id", "cell_label")):
        a = e.user_attrs
        if a.get("phase") == "tune" and a.get("item") in keys and not a.get(its.DROPPED) and \
                a.get("cell_label") not in known:
            cell = cells.setdefault(str(a.get("cell_id")), {"label": str(a.get("cell_label", "?")), "tune": a.get("tune"),
                                                           "items": set(), "open": False})
            cell["items"].add(a["item"])
            cell["open"] |= e.state in (TrialState.WAITING, TrialState.RUNNING)
    out: dict[str, Pick] = {}
    for cell_id, cell in cells.items():
        protocol = cell["tune"]
        if cell["open"] or len(cell["items"]) < expected[cell_id] or not isinstance(protocol, dict):
            continue
        score = best_score(study, cell_id, protocol)
        if score is not None:
            k = len(protocol.get("seeds") or [0])
            out[cell["label"]] = Pick(dict(score.params), str(protocol["objective"]["metric"]), score.mean,
                                      score.finished, len({i % k for i in score.indices}),
                                      tuning.edge_note(dict(score.params), protocol.get("space") or {}),
                                      "; ".join(f"{path} at the {edge} end of its space" for path, _, edge in
                                                tuning.edges(dict(score.params), protocol.get("space") or {})))
    return out


def prepare_item(study: optuna.Study, trial: optuna.Trial) -> dict[str, Any]:
    """The claimed item's attributes with its setting decided (tuning: sampled; replicate after
    tuning: the best). Untuned items come back unchanged. Raises on a broken protocol."""
    attrs = dict(trial.user_attrs)
    if not attrs.get("tune"):
        return attrs
    params = attrs.get("params")
    if not isinstance(params, dict) and attrs.get("phase") == "tune":
        with _SAMPLING:  # stored before the next is sampled: fused items are prepared in threads at once
            params = sample(study, trial.number, attrs)
            trial.set_user_attr("params", params)
    elif not isinstance(params, dict):
        params, source = best(study, attrs)
        trial.set_user_attr("tuned_from", source)
        attrs["tuned_from"] = source
        trial.set_user_attr("params", params)
    config = tuning.apply(attrs["config"], params)
    trial.set_user_attr("config", config)
    attrs.update(params=params, config=config)
    return attrs


def record_params(study: optuna.Study, trial: optuna.Trial, attrs: Mapping[str, Any]) -> None:
    """The item's factor levels and tuned values as Optuna parameters of its running trial.
    Display only: a distribution the study's history does not accept (a search space that
    changed type) is left out rather than failing the trial."""
    params: dict[str, tuple[Any, BaseDistribution]] = its.level_params(study, attrs.get("settings"))
    tuned = attrs.get("params")
    if attrs.get("tune") and isinstance(tuned, dict):
        dists = distributions(attrs["tune"]["space"])
        for name, value in tuned.items():
            if name in dists:
                params[name] = (value, dists[name])
    try:
        queue.set_params(study, trial.number, params)
    except ValueError:  # some distribution differs from the study's under its name: the others
        for name, entry in params.items():
            try:
                queue.set_params(study, trial.number, {name: entry})
            except ValueError:
                continue


class _TuningGate:
    """Holds back the replicates of a tuned cell while some tuning item of theirs is not
    finished (queue.Gate): one lookup of the cell's tuning items per cell and claim."""

    keys = ("cell_id", "after_tune")

    def __init__(self, study: optuna.Study) -> None:
        self._study = study
        self._tuning: dict[str, bool] = {}  # cell id -> some tuning item unfinished

    def hold(self, attrs: Mapping[str, Any]) -> Mapping[str, Any] | None:
        if not attrs.get("after_tune"):
            return None
        cell = attrs.get("cell_id")
        if cell not in self._tuning:
            states = its.states_by_item(self._study, {"cell_id": cell, "phase": "tune"})
            self._tuning[cell] = any(s in UNFINISHED for s in states.values())
        return {"cell_id": cell, "after_tune": True} if self._tuning[cell] else None


def claim(study: optuna.Study) -> optuna.Trial | None:
    """Atomically take the oldest claimable WAITING item (RUNNING from now on), or None: a
    replicate of a tuned cell is claimable once every tuning item of its cell is finished."""
    return queue.claim(study, _TuningGate(study))


def fusable_item(attrs: Mapping[str, Any]) -> bool:
    """Whether a claimed item may train fused with others of its cell (``ablate worker --fuse``,
    ablate.training_fused): a replicate or tuning item that neither extends a shorter budget
    (``until_converged``) nor is a WSD replicate (those continue from, and keep, stable-phase
    checkpoints: ``run_trial``'s alone), and has no plug-in metrics."""
    config = attrs.get("config")
    if attrs.get("phase") not in ("replicate", "tune") or attrs.get(its.BUDGET) or not isinstance(config, dict):
        return False
    train = TrainSpec.model_validate(config.get("train", {}))
    return not (attrs["phase"] == "replicate" and train.schedule == "wsd") and not train.metrics


class _FusableGate(_TuningGate):
    """The tuning gate, and items that cannot fuse held back one by one (queue.Gate)."""

    keys = ("cell_id", "after_tune", "item", "phase", "config", its.BUDGET)

    def hold(self, attrs: Mapping[str, Any]) -> Mapping[str, Any] | None:
        held = super().hold(attrs)
        if held is not None or fusable_item(attrs):
            return held
        return {"cell_id": attrs.get("cell_id"), "item": attrs.get("item")}


def claim_fusable(study: optuna.Study, first: optuna.Trial, k: int) -> list[optuna.Trial]:
    """Up to ``k`` more WAITING items that may train fused with ``first`` (claimed already): of
    its cell and phase, claimable (``claim``'s rule) and ``fusable_item``, oldest first, each
    taken by the queue's atomic flip. None when ``first`` itself cannot fuse. Whether their
    settings really fuse is known once each is prepared (a tuning item's sampled setting):
    ``ablate.training_fused.fusable`` decides, and what cannot fuse trains apart."""
    attrs = first.user_attrs
    if k < 1 or not fusable_item(attrs):
        return []
    where = {"cell_id": attrs["cell_id"], "phase": attrs["phase"]}
    return queue.claim_many(study, k, _FusableGate(study), where)


# --- continuation: WSD runs kept at the end of their stable phase ------------------------------


@dataclass(frozen=True)
class Branch:
    """A kept stable-phase checkpoint a longer run of its lineage can start from."""

    path: Path
    cell_id: str
    cell_label: str
    seed: int
    step: int  # the shorter run's stable end: the longer run trains step + 1 … its steps
    steps: int  # the shorter run's budget

    def attr(self) -> dict[str, Any]:
        """``continued_from`` as recorded on the trial."""
        return {"cell": self.cell_id, "label": self.cell_label, "seed": self.seed, "step": self.step}

    def tag(self) -> str:
        return f"{self.cell_label} ({self.cell_id}) · seed {self.seed} · step {self.step}"


def _lineage_dir(root: Path, config: dict[str, Any], seed: int) -> Path:
    # Replicates only: a tuning item's seed is shared by the cell's tuning trials of other settings.
    return root / "stable" / lineage_key(config) / f"replicate-seed{seed}"


def keep_stable(root: Path, attrs: Mapping[str, Any]) -> Path | None:
    """Where a replicate item of a WSD cell saves its stable-phase checkpoint (``<root>/stable/
    <lineage>/replicate-seed<seed>/<steps>.pt``; kept when the trial finishes), with the run's
    cell and train settings written beside it for ``find_branch``; None for other items."""
    train = TrainSpec.model_validate(attrs["config"]["train"])
    if attrs.get("phase") != "replicate" or train.schedule != "wsd":
        return None
    path = _lineage_dir(root, attrs["config"], attrs["seed"]) / f"{train.steps}.pt"
    meta = path.with_suffix(".json")
    if not meta.exists():
        meta.parent.mkdir(parents=True, exist_ok=True)
        tmp = meta.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"cell_id": attrs["cell_id"], "cell_label": attrs["cell_label"],
                                   "seed": attrs["seed"], "train": attrs["config"]["train"]}))
        tmp.replace(meta)
    return path


def find_branch(root: Path, config: dict[str, Any], seed: int, phase: str = "replicate") -> Branch | None:
    """The kept stable-phase checkpoint of the shorter run of ``config``'s lineage and ``seed``
    that a run of ``config`` can continue from (the latest sound such stable end), or None."""
    return checked_branch(root, config, seed, phase)[0]


def checked_branch(root: Path, config: dict[str, Any], seed: int, phase: str = "replicate",
                   load: bool = False) -> tuple[Branch | None, list[str]]:
    """``find_branch``'s checkpoint, verified, and what is wrong with the kept checkpoints that a
    run of ``config`` would have continued from instead (each naming its file): missing, damaged
    (its checksum, ``seal_stable``, does not match), its description unreadable, or (with
    ``load``, for one not sealed yet: its run was killed after its stable end) not loadable."""
    from ablate.training import continuable

    if phase != "replicate":
        return None, []
    long = TrainSpec.model_validate(config["train"])
    found, problems = None, []
    folder = _lineage_dir(root, config, seed)
    for meta in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        path = meta.with_suffix(".pt")
        try:
            kept = json.loads(meta.read_text())
            short = TrainSpec.model_validate(kept["train"])
        except (OSError, ValueError, KeyError, TypeError):
            if path.exists():
                problems.append((math.inf, f"kept checkpoint {path}: its description {meta.name} is unreadable"))
            continue
        step = continuable(short, long)
        if step is None or found is not None and step <= found.step:
            continue
        problem = _unsound(path, kept, load)
        if problem:
            problems.append((step, problem))
        elif path.exists():
            found = Branch(path, kept["cell_id"], kept["cell_label"], seed, step, short.steps)
    return found, [text for step, text in problems if found is None or step > found.step]


# The key of a kept checkpoint's description that holds the checkpoint's SHA-256 (``seal_stable``).
CHECKSUM = "sha256"


def _digest(path: Path) -> str:
    import hashlib

    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _unsound(path: Path, kept: Mapping[str, Any], load: bool) -> str:
    """What is wrong with a kept checkpoint ("" when it can be continued from, or when it was never
    written: its run had not reached its stable end)."""
    if not path.exists():
        return f"kept checkpoint {path} is missing" if kept.get(CHECKSUM) else ""
    if kept.get(CHECKSUM):
        return "" if _digest(path) == kept[CHECKSUM] else f"kept checkpoint {path} is damaged (checksum mismatch)"
    if load:
        import torch

        try:
            torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:
            return f"kept checkpoint {path} is damaged ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
    return ""


def seal_stable(path: Path | None) -> None:
    """Record the SHA-256 of a kept stable-phase checkpoint in its description, once its run ended
    (the checkpoint is complete): a run that continues from it verifies it first."""
    meta = path.with_suffix(".json") if path is not None else None
    if meta is None or not path.exists():
        return
    try:
        kept = json.loads(meta.read_text())
    except (OSError, ValueError):
        return  # reported by the next run that looks for a branch of this lineage
    if kept.get(CHECKSUM):
        return
    tmp = meta.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({**kept, CHECKSUM: _digest(path)}))
    tmp.replace(meta)


def continuation(root: Path, attrs: Mapping[str, Any], resumes: bool) -> tuple[Path | None, Branch | None, str]:
    """For a claimed item: where it keeps its stable-phase checkpoint (``keep_stable``), the kept
    checkpoint it continues from (none when it ``resumes`` a checkpoint of its own), and a warning
    when kept checkpoints it would have continued from are unsound ("" when none is)."""
    stable = keep_stable(root, attrs)
    if stable is None or resumes:
        return stable, None, ""
    branch, problems = checked_branch(root, attrs["config"], attrs["seed"], attrs["phase"], load=True)
    if not problems:
        return stable, branch, ""
    return stable, branch, "; ".join(problems) + (f" — continues from step {branch.step} instead" if branch
                                                  else " — trains from step 0")


@dataclass(frozen=True)
class Kept:
    """One kept stable-phase checkpoint (``keep_stable``) as ``ablate gc`` lists it."""

    path: Path
    cell_id: str
    cell_label: str
    seed: int
    steps: int  # the budget of the run that kept it
    size: int  # bytes of the checkpoint file (0 when only its description is left)


def kept_checkpoints(root: Path) -> list[Kept]:
    """Every kept stable-phase checkpoint under ``<root>/stable/``, by cell, seed and budget; a
    description whose checkpoint never got written (the run died before its stable end) counts with size 0."""
    out: list[Kept] = []
    base = root / "stable"
    for meta in sorted(base.glob("*/replicate-seed*/*.json")) if base.is_dir() else []:
        try:
            kept = json.loads(meta.read_text())
            steps = int(kept["train"]["steps"])
            cell_id, label, seed = str(kept["cell_id"]), str(kept["cell_label"]), int(kept["seed"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not one keep_stable wrote: left alone
        path = meta.with_suffix(".pt")
        out.append(Kept(path, cell_id, label, seed, steps, path.stat().st_size if path.exists() else 0))
    return out


def drop_kept(kept: list[Kept]) -> int:
    """Delete these kept checkpoints (each with its description, and its folders once empty);
    the bytes freed. A longer run of their cells then trains from step 0."""
    freed = 0
    for k in kept:
        freed += k.size
        for path in (k.path, k.path.with_suffix(".json")):
            path.unlink(missing_ok=True)
        for folder in (k.path.parent, k.path.parent.parent):
            try:
                folder.rmdir()
            except OSError:  # not empty: other seeds' or budgets' checkpoints stay
                break
    return freed


class NoStores(Exception):
    """``ablate gc`` cannot tell which cells are still studied: there are no stores here."""


@dataclass
class Garbage:
    """What ``ablate gc`` would remove: of the ``kept`` checkpoints under ``root``, those to ``drop``."""

    root: Path
    kept: list[Kept]
    drop: list[Kept]

    @property
    def size(self) -> int:
        """Bytes of every kept checkpoint."""
        return sum(k.size for k in self.kept)

    @property
    def drop_size(self) -> int:
        """Bytes of those to drop."""
        return sum(k.size for k in self.drop)


def garbage(storage_url: str | None, every: bool = False, root: Path | None = None) -> Garbage:
    """The kept stable-phase checkpoints under ``root`` (the checkpoint folder) whose cell no study
    on the storage has any more (``every``: all of them), read-only; ``drop_kept`` removes them.
    Raises NoStores when there is no store to ask (unless ``every``: the studies may be on
    another storage), StorageError when it cannot be read."""
    from ablate.runner.housekeeping import studied_cells
    from ablate.runner.standing import existing_store_url
    from ablate.stores import checkpoint_dir

    root = root or checkpoint_dir()
    kept = kept_checkpoints(root)
    if not kept:
        return Garbage(root, [], [])
    url = existing_store_url(storage_url)
    if url is None and not every:
        raise NoStores("no stores here to tell which cells are still studied: pass --storage, or --all")
    live = studied_cells(url) if not every else set()
    return Garbage(root, kept, [k for k in kept if every or k.cell_id not in live])
