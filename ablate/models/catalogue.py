"""The levels of every model factor: its name, where it is implemented, and what it means.

This is the one list of level names. ``ablate.spec`` builds its choices from it (so validation
names the valid levels), ``ablate.schema`` documents it, and the layer and network code look the
implementations up through it. It imports nothing heavy: an implementation ("module:attribute")
is imported on first use, so ``ablate validate`` never imports torch.

Adding a level is one implementation (a class or function with the same signature as the other
levels of its factor) and one line here. Levels from outside the package — entry points of an
installed distribution, or ``"module:attribute"`` written in a spec — join the registries of the
factors ``ablate.plugins.GROUPS`` names (docs/plugins.md); a built-in name is never replaced.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ablate import plugins


@dataclass(frozen=True)
class Level:
    """One level of a factor.

    ``target``: ``"module:attribute"`` of the implementation, or None where the level is the
    absence of one (no nonlinearity). ``modes``: for a parameterisation, what its state is made
    of, which decides the state sizes and heads it accepts: ``real`` (one coordinate per mode),
    ``complex`` (a complex mode is two coordinates, heads group modes) or ``rotation`` (heads of
    even size made of 2×2 rotation blocks). ``version``: bump it when the implementation changes
    so that results trained before are not comparable; it then enters the id of every cell that
    uses the level (``ablate.design.identity``), and only of those.
    """

    name: str
    target: str | None
    description: str
    modes: str = ""
    version: int = 1
    plugin: plugins.Plugin | None = None
    """Set for a level from outside the package: its identity enters the cell id."""

    def load(self) -> Any:
        if self.plugin is not None:
            return self.plugin.load()
        if self.target is None:
            return None
        module, _, attribute = self.target.partition(":")
        return getattr(importlib.import_module(module), attribute)


class Registry:
    """The levels of one factor, in the order specs, errors and docs list them."""

    def __init__(self, factor: str, *levels: Level, kind: str | None = None):
        names = [lvl.name for lvl in levels]
        if len(set(names)) != len(names):
            raise ValueError(f"{factor}: a level name appears twice in {names}")
        self.factor = factor
        self.kind = kind
        """The plug-in kind (``ablate.plugins.GROUPS``) whose levels join this factor; None: closed."""
        self._builtin = {lvl.name: lvl for lvl in levels}
        self._all: dict[str, Level] | None = None

    @property
    def _levels(self) -> dict[str, Level]:
        """Built-in levels, then installed plug-ins (read once per process, on first need: a
        built-in name is found without looking for plug-ins)."""
        if self.kind is None:
            return self._builtin
        if self._all is None:
            self._all = {**self._builtin, **{p.name: Level(p.name, p.target, f"plug-in from {p.origin}", plugin=p)
                                             for p in self.plugins()}}
        return self._all

    def plugins(self) -> tuple[plugins.Plugin, ...]:
        """The installed plug-ins of this factor whose names do not shadow a built-in level."""
        if self.kind is None:
            return ()
        return tuple(p for p in plugins.installed_of(self.kind) if p.name not in self._builtin)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._levels)

    @property
    def builtin_names(self) -> tuple[str, ...]:
        return tuple(self._builtin)

    def __iter__(self) -> Iterator[Level]:
        return iter(self._levels.values())

    def __contains__(self, name: object) -> bool:
        return name in self._builtin or name in self._levels

    def accepts(self, name: object) -> bool:
        """A level name, or (for a factor that takes plug-ins) ``module:attribute``."""
        return name in self or (self.kind is not None and plugins.is_target(name))

    def level(self, name: str) -> Level:
        """The level called ``name`` (or a plug-in by path); ValueError naming the valid ones otherwise."""
        if name in self._builtin:
            return self._builtin[name]
        if name in self._levels:
            return self._levels[name]
        if self.kind is not None and plugins.is_target(name):
            plugin = plugins.by_path(self.kind, name)
            return Level(name, name, f"plug-in by path from {plugin.origin}", plugin=plugin)
        raise ValueError(f"unknown {self.factor} {name!r}; valid: {', '.join(self._levels)}"
                         + ("; or a plug-in as package.module:attribute" if self.kind else ""))

    def load(self, name: str) -> Any:
        """The implementation of ``name`` (imported on first use)."""
        return self.level(name).load()


FAMILIES = Registry(
    "family",
    Level("linear_rnn", "ablate.models.recurrent:LinearRecurrence",
          "the composed linear recurrence: parameterisation × normalisation × heads × nonlinearity"),
    Level("mingru", "ablate.models.minrnn:MinGRU", "minGRU: gates from the input only, log-space scan"),
    Level("minlstm", "ablate.models.minrnn:MinLSTM", "minLSTM: normalised forget and input gates, log-space scan"),
    Level("gru", "ablate.models.baselines:TorchGRU", "torch's GRU, a nonlinear baseline"),
    Level("lstm", "ablate.models.baselines:TorchLSTM", "torch's LSTM, a nonlinear baseline"),
)

#: The model settings only the composed linear recurrence reads: ``network.recurrent_layer`` passes
#: them to a family whose layer is a ``LinearRecurrence`` and builds every other family from the
#: sizes alone, so a minGRU cell's parameterisation is a default that changes nothing in it.
RECURRENCE_SETTINGS = ("parameterisation", "normalisation", "heads", "nonlinearity", "init")
#: Built-in family → the ``RECURRENCE_SETTINGS`` it reads (a test checks it against the layers).
FAMILY_READS: dict[str, tuple[str, ...]] = {
    "linear_rnn": RECURRENCE_SETTINGS, "mingru": (), "minlstm": (), "gru": (), "lstm": (),
}


def unread_settings(family: str) -> tuple[str, ...]:
    """The model settings (keys of ``model``) that ``family`` does not read. A plug-in family is
    assumed to read them all: whether its layer is a ``LinearRecurrence`` is known only once it is
    imported, and saying a setting matters when it does not is the safer error."""
    reads = FAMILY_READS.get(family, RECURRENCE_SETTINGS)
    return tuple(s for s in RECURRENCE_SETTINGS if s not in reads)


def read_model(model: dict[str, Any]) -> dict[str, Any]:
    """A resolved ``model`` section without the settings its family does not read: two configs
    equal here train the same model."""
    unread = unread_settings(model["family"]) if "family" in model else ()
    return {k: v for k, v in model.items() if k not in unread}


#: Built-in parameterisations whose recurrence is the same at any head count: heads only group their
#: modes, for a normalisation that reads the groups (ξ) and for the per-head norm probes.
GROUPING_HEADS = ("complex_diagonal", "real_diagonal")
#: Built-in normalisations that scale each mode on its own: they never read the heads' groups.
PER_MODE = ("gamma", "gamma_recomputed", "none")


def unread_by_levels(model: dict[str, Any]) -> tuple[str, ...]:
    """The settings of a resolved ``model`` its family reads but its levels do not: ``heads`` of a
    parameterisation whose heads only group modes under a normalisation that scales each mode (a
    test trains both head counts and finds the same model). Plug-in levels are assumed to read
    every setting, as plug-in families are."""
    if (model.get("family") == "linear_rnn" and model.get("parameterisation") in GROUPING_HEADS
            and model.get("normalisation") in PER_MODE):
        return ("heads",)
    return ()


PARAMETERISATIONS = Registry(
    "parameterisation",
    Level("rotation", "ablate.models.parameterisations:Rotation",
          "RotRNN: per head γ_h P_h Θ_h P_hᵀ, one decay per head, a learned orthogonal basis", modes="rotation"),
    Level("complex_diagonal", "ablate.models.parameterisations:ComplexDiagonal",
          "LRU: diagonal complex eigenvalues exp(−exp(ν) + i·exp(θ))", modes="complex"),
    Level("real_diagonal", "ablate.models.parameterisations:RealDiagonal",
          "diagonal real eigenvalues exp(−exp(ν)) in (0, 1)", modes="real"),
    # version 2: ξ normalises the state power at the task's sequence length (finite past the
    # unit circle, where the stationary ξ went 0·∞); the init's basis by skew_expm
    Level("dense", "ablate.models.parameterisations:Dense",
          "an unconstrained block per head (sequential only)", modes="real", version=2),
    kind="parameterisation",
)

NORMALISATIONS = Registry(
    "normalisation",
    Level("xi", "ablate.models.normalisations:Xi", "RotRNN's ξ: unit stationary state power per head, every pass"),
    Level("gamma", "ablate.models.normalisations:Gamma", "LRU's learned γ, initialised to sqrt(1 − |λ|²)"),
    Level("gamma_recomputed", "ablate.models.normalisations:GammaRecomputed",
          "sqrt(1 − |λ|²) from the live eigenvalues every pass"),
    Level("none", "ablate.models.normalisations:NoNormalisation", "no input scaling"),
    kind="normalisation",
)

NONLINEARITIES = Registry(
    "nonlinearity",
    Level("none", None, "linear: the parallel scan applies"),
    Level("tanh", "torch:tanh", "tanh inside the recurrence (sequential)"),
    Level("relu", "torch:relu", "ReLU inside the recurrence (sequential)"),
    kind="nonlinearity",
)

ACTIVATIONS = Registry(
    "activation",
    Level("gelu", "ablate.models.network:Gelu", "GELU"),
    Level("glu", "ablate.models.network:GLU", "GELU then W₁x ⊙ σ(W₂x): the LRU block's full GLU"),
    Level("half_glu", "ablate.models.network:HalfGLU", "GELU then x ⊙ σ(Wx): one matrix instead of two"),
    kind="activation",
)

NORMS = Registry(
    "norm",
    Level("layer", "torch.nn:LayerNorm", "LayerNorm over features"),
    Level("batch", "ablate.models.network:SeqBatchNorm", "BatchNorm over batch and time"),
    Level("rms", "ablate.models.network:RMSNorm", "RMSNorm over features"),
    Level("none", "ablate.models.network:NoNorm", "no pre-norm"),
)

POOLINGS = Registry(
    "pooling",
    Level("mean", "ablate.models.network:mean_pool", "mean over the non-pad positions"),
    Level("last", "ablate.models.network:last_pool", "the last non-pad position"),
)

INIT_SCHEMES = Registry(
    "init scheme",
    Level("ring", "ablate.models.inits:RingInit", "LRU ring: |λ|² ~ U[r_min², r_max²], phase ~ U[0, max_phase]"),
    Level("rotrnn", "ablate.models.inits:RotrnnInit",
          "RotRNN: −log γ log-uniform between −log γ_max and −log γ_min, θ ~ U[0, max_phase]"),
    kind="initialisation",
)

#: spec key → the registry of its levels (``model.init.scheme`` is the init scheme).
MODEL_FACTORS: dict[str, Registry] = {
    "model.family": FAMILIES,
    "model.parameterisation": PARAMETERISATIONS,
    "model.normalisation": NORMALISATIONS,
    "model.nonlinearity": NONLINEARITIES,
    "model.activation": ACTIVATIONS,
    "model.norm": NORMS,
    "model.pooling": POOLINGS,
    "model.init.scheme": INIT_SCHEMES,
}
