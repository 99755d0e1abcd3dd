"""When a trial evaluates, checks convergence, logs, probes and measures gradients.

One object answers for every step of a trial, so the training loop (``ablate.training``), the
prober (``ablate.probes``) and the cost estimate (``ablate.runner.estimate``) cannot count differently.

    validation   every ``train.eval_every`` steps before the last (the passes early stopping and
                 the tuning pruner watch), then the final pass at the last step
    convergence  extra passes inside the convergence window, so that the window the
                 convergence flag reads (``ablate.stats.convergence``) starts exactly at its
                 boundary and holds at least ``CONVERGENCE_PASSES`` passes whatever
                 ``eval_every`` is. They feed the convergence flag only: early stopping, best
                 weights and pruning see the periodic passes, so training is what it was.
                 The window is the last fifth of the steps; on a WSD schedule the last fifth
                 of its stable phase (``stable_end``), because its decay raises the metric
                 whether or not a longer run would: what a longer budget adds is what the
                 constant learning rate was still gaining when the decay began
    logging      every ``train.log_every`` steps and the last
    probes       step 0, every ``probes.every`` steps, the last (when probes are enabled)
    gradients    the probe steps from 1 on (when probes record gradients)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

#: Fewest validation passes the last fifth holds (its boundary and its last step included): the
#: trend test of the convergence flag fits a line through them and needs residual degrees of freedom.
CONVERGENCE_PASSES = 6


def window_start(steps: int) -> int:
    """The first step of the last fifth of ``steps`` (the convergence window ``[start, steps]``)."""
    return steps - steps // 5


def _get(obj: Any, key: str, default: Any) -> Any:
    return obj.get(key, default) if isinstance(obj, dict) else getattr(obj, key, default)


def warmup_steps(train: Any) -> int:
    """Steps of linear warm-up: ``warmup_steps`` when set, else ``warmup · steps``; at least 1
    (a warm-up of one step is none: its factor is 1 from the first step). ``train``: a ``TrainSpec`` or its dict."""
    explicit = _get(train, "warmup_steps", None)
    return max(1, int(explicit) if explicit is not None else int(float(_get(train, "warmup", 0.1)) * int(_get(train, "steps", 0))))


def stable_end(train: Any) -> int | None:
    """The last step of a WSD schedule's stable phase, ``steps − D`` for a decay of D steps
    (``decay_steps``, else ``decay · steps``, at least 1); None for the other schedules. The
    factor is 1 from the warm-up's end up to and including scheduler step ``stable_end``, so two
    runs with the same warm-up in steps have the same learning rate up to the smaller stable end:
    the longer can continue from the shorter's checkpoint there. ``train``: a ``TrainSpec`` or its dict."""
    if _get(train, "schedule", "cosine") != "wsd":
        return None
    steps, decay_steps = int(_get(train, "steps", 0)), _get(train, "decay_steps", None)
    return steps - (int(decay_steps) if decay_steps is not None else max(1, int(float(_get(train, "decay", 0.2)) * steps)))


@dataclass(frozen=True)
class Schedule:
    steps: int
    eval_every: int
    log_every: int
    probe_every: int | None = None  # None: probes disabled
    grads: bool = False
    #: The last step of the convergence window: ``steps``, or a WSD schedule's stable end (None: ``steps``).
    window_end: int | None = None

    @classmethod
    def of(cls, train: Any, probes: Any = None) -> Schedule:
        """From a ``TrainSpec`` (or its dict) and a ``ProbeSpec`` (or None: probes as by default)."""
        enabled = bool(_get(probes, "enabled", True)) if probes is not None else True
        every = int(_get(probes, "every", 100)) if probes is not None else 100
        return cls(int(_get(train, "steps", 0)), int(_get(train, "eval_every", 50)), int(_get(train, "log_every", 25)),
                   every if enabled else None, enabled and bool(_get(probes, "grads", True) if probes is not None else True),
                   stable_end(train))

    # --- per step ----------------------------------------------------------------------------

    def validates(self, step: int) -> bool:
        """A periodic validation pass (early stopping and pruning watch these; not the last step's)."""
        return step >= 1 and step % self.eval_every == 0 and step != self.steps

    @property
    def window(self) -> tuple[int, int]:
        """The convergence window ``[start, end]``: the last fifth of the steps, on a WSD schedule of
        its stable phase."""
        end = self.steps if self.window_end is None else self.window_end
        return window_start(end), end

    def checks(self, step: int) -> bool:
        """A validation pass for the convergence flag only (in the window, not periodic, not last)."""
        return step in self._checks and not self.validates(step)

    def logs(self, step: int) -> bool:
        return step % self.log_every == 0 or step == self.steps

    def probes(self, step: int) -> bool:
        """A probe step: 0, every ``probe_every``, the last."""
        return self.probe_every is not None and (step == 0 or step == self.steps or step % self.probe_every == 0)

    def measures_grads(self, step: int) -> bool:
        return self.grads and step >= 1 and self.probes(step)

    # --- counts (what ``ablate plan --estimate`` prices) -------------------------------------

    def count(self, what: str) -> int:
        """Steps of 0..steps at which ``what`` (``validates``, ``checks``, ``logs``, ``probes``,
        ``measures_grads``) holds."""
        test = getattr(self, what)
        return sum(1 for s in range(self.steps + 1) if test(s))

    @cached_property
    def _checks(self) -> frozenset[int]:
        start, end = self.window
        periodic = {s for s in range(start, end) if self.validates(s)} | {end}
        if len(periodic | {start}) >= CONVERGENCE_PASSES:
            extra = {start, end}  # end: the final pass, or a stable end's pass for the flag
        elif end - start < CONVERGENCE_PASSES - 1:  # a tiny run: every step of its window
            extra = set(range(start, end + 1))
        else:  # evenly from the boundary to the end (the final pass is the last of them)
            k = CONVERGENCE_PASSES - 1
            extra = {start + round(i * (end - start) / k) for i in range(k)} | {end}
        return frozenset(s for s in extra if 0 < s < self.steps)


def continuation_blocker(short: Any, long: Any) -> str | None:
    """Which setting keeps a run of ``long`` from continuing a run of ``short`` (the same cell but for
    its budget; ``TrainSpec``s or their dicts) from the shorter's stable end, in words naming it; None
    where none does. The conditions are ``ablate.training.continuable``'s: both WSD, ``long`` longer,
    the warm-ups equal in steps, the stable end inside ``long``'s stable phase, and every pass
    ``long``'s convergence window makes before it one that ``short`` made."""
    end, long_end = stable_end(short), stable_end(long)
    if end is None or long_end is None:
        return "train.schedule: only a wsd schedule continues a shorter run (its learning rate is constant up to its decay)"
    steps, long_steps = int(_get(short, "steps", 0)), int(_get(long, "steps", 0))
    if long_steps <= steps:
        return f"train.steps: {long_steps} is not longer than the kept run's {steps}"
    warm, long_warm = warmup_steps(short), warmup_steps(long)
    if warm != long_warm:
        if _get(long, "warmup_steps", None) is None:
            return (f"train.warmup: a fraction of the steps ({_get(long, 'warmup', 0.1):g}), so the warm-up is "
                    f"{long_warm} steps here and was {warm} in the {steps}-step run; set train.warmup_steps: {warm} "
                    f"(or leave train.warmup at its default: a fixed warm-up on wsd)")
        return f"train.warmup_steps: {long_warm} here, {warm} in the {steps}-step run"
    if not warm <= end <= long_end:
        return (f"train.decay/decay_steps: the {steps}-step run's stable phase ends at step {end}, "
                f"past this run's ({long_end})")
    short_when, long_when = Schedule.of(short), Schedule.of(long)
    early = [s for s in range(end + 1) if long_when.checks(s) and not (short_when.validates(s) or short_when.checks(s))]
    if early:
        return (f"train.eval_every: this run's convergence window starts at step {long_when.window[0]}, before the "
                f"checkpoint at {end}, at validation passes the {steps}-step run never made (e.g. step {early[0]})")
    return None
