"""The registries are the one list of level names: each level resolves to an implementation that
builds, and the spec's choices are exactly the registry's names."""

from __future__ import annotations

import typing

import pytest
import torch
from torch import nn

from ablate import spec
from ablate.models import build_model, catalogue
from ablate.models.inits import InitScheme, make_init
from ablate.models.normalisations import Normalisation
from ablate.models.parameterisations import Parameterisation
from ablate.models.recurrent import LinearRecurrence, RecurrentLayer

SPEC_FIELD = {  # registry → the ModelSpec field whose choices it gives
    "model.family": "family", "model.parameterisation": "parameterisation", "model.normalisation": "normalisation",
    "model.nonlinearity": "nonlinearity", "model.activation": "activation", "model.norm": "norm",
    "model.pooling": "pooling",
}
TOKENS = type("Task", (), {"input_kind": "tokens", "vocab_size": 12, "input_dim": 1, "num_classes": 3,
                           "output_kind": "classification", "seq_len": 5})()


def _literal(field: str) -> tuple[str, ...]:
    return typing.get_args(spec.ModelSpec.model_fields[field].annotation)


@pytest.mark.parametrize("key", list(SPEC_FIELD))
def test_spec_choices_are_exactly_the_registry_names(key: str) -> None:
    levels = catalogue.MODEL_FACTORS[key]
    if levels.kind is None:  # a closed factor: a Literal of its names
        assert _literal(SPEC_FIELD[key]) == levels.names
        return
    # a factor that takes plug-ins: every registered name, and no other plain name
    field = SPEC_FIELD[key]
    for name in levels.names:
        assert getattr(spec.ModelSpec.model_validate({field: name}, context={"defer_combinations": True}),
                       field) == name
    with pytest.raises(spec.SpecError, match=f"'zzz' is not one of: {', '.join(levels.names)}; or a plug-in"):
        spec.parse({"name": "x", "task": {"name": "listops"}, "model": {field: "zzz"}})


def test_init_schemes_of_the_spec_are_the_registry_names() -> None:
    *builtin, plugin = typing.get_args(spec.InitSpec)  # a shape per built-in scheme, then the plug-ins' base
    assert tuple(m.model_fields["scheme"].default for m in builtin) == catalogue.INIT_SCHEMES.builtin_names
    assert plugin is spec.PluginInit
    with pytest.raises(spec.SpecError, match="is not one of: ring, rotrnn"):
        spec.parse({"name": "x", "task": {"name": "listops"}, "model": {"init": {"scheme": "circle"}}})


def test_every_registry_is_listed_and_every_level_documented() -> None:
    assert set(catalogue.MODEL_FACTORS) == {*SPEC_FIELD, "model.init.scheme"}
    for reg in catalogue.MODEL_FACTORS.values():
        assert reg.names and all(lvl.description for lvl in reg)
    # a parameterisation says what its state is made of: the spec's shape check reads it
    assert {lvl.modes for lvl in catalogue.PARAMETERISATIONS if lvl.plugin is None} <= {"real", "complex", "rotation"}


KINDS = {  # what each factor's implementations must be
    "model.family": lambda impl: issubclass(impl, RecurrentLayer),
    "model.parameterisation": lambda impl: issubclass(impl, Parameterisation),
    "model.normalisation": lambda impl: issubclass(impl, Normalisation),
    "model.nonlinearity": lambda impl: impl is None or callable(impl),
    "model.activation": lambda impl: issubclass(impl, nn.Module),
    "model.norm": lambda impl: issubclass(impl, nn.Module),
    "model.pooling": callable,
    "model.init.scheme": lambda impl: issubclass(impl, InitScheme),
}


@pytest.mark.parametrize("key,name", [(k, lvl.name) for k, reg in catalogue.MODEL_FACTORS.items() for lvl in reg])
def test_every_level_resolves_and_builds_a_model(key: str, name: str) -> None:
    impl = catalogue.MODEL_FACTORS[key].load(name)
    assert KINDS[key](impl), (key, name, impl)
    field = key.removeprefix("model.")
    settings: dict = {"d_model": 8, "state_dim": 8, "heads": 2, "layers": 1}
    if field == "init.scheme":
        settings["init"] = {"scheme": name}
    else:
        settings[field] = name
    ms = spec.ModelSpec(**settings)
    torch.manual_seed(0)
    net = build_model(ms, TOKENS)
    logits = net(torch.randint(1, 12, (2, 5)))
    assert logits.shape == (2, 3) and torch.isfinite(logits).all()
    layer = net.recurrent_layers()[0]
    if key == "model.family":
        assert type(layer) is impl
    elif key == "model.parameterisation":
        assert type(layer.param) is impl
    elif key == "model.normalisation":
        assert type(layer.norm) is impl
    elif key == "model.nonlinearity":
        assert layer.act is impl
    elif key == "model.activation":
        assert type(net.blocks[0].activation) is impl
    elif key == "model.norm":
        assert type(net.blocks[0].norm) is impl
    elif key == "model.pooling":
        assert net.pool is impl
    else:
        assert type(make_init(ms.init)) is impl


def test_unknown_names_are_refused_with_the_valid_ones() -> None:
    valid = ", ".join(catalogue.PARAMETERISATIONS.names)
    with pytest.raises(ValueError, match=f"unknown parameterisation 'nope'; valid: {valid}; or a plug-in as "
                                         "package.module:attribute$"):
        catalogue.PARAMETERISATIONS.load("nope")
    with pytest.raises(ValueError, match="unknown normalisation 'zeta'"):
        LinearRecurrence(4, 4, 1, "rotation", "zeta", "none", spec.RotrnnInit(), horizon=16)
    with pytest.raises(ValueError, match="a level name appears twice"):
        catalogue.Registry("x", catalogue.Level("a", None, "one"), catalogue.Level("a", None, "two"))


def test_the_settings_each_family_reads_match_how_its_layer_is_built() -> None:
    """``FAMILY_READS`` (what a report leaves out of a minGRU cell's label) says what
    ``network.recurrent_layer`` does: the layer settings go to a LinearRecurrence family only."""
    assert set(catalogue.FAMILY_READS) == set(catalogue.FAMILIES.builtin_names)
    assert set(catalogue.RECURRENCE_SETTINGS) <= set(spec.ModelSpec.model_fields)
    for family, reads in catalogue.FAMILY_READS.items():
        linear = issubclass(catalogue.FAMILIES.load(family), LinearRecurrence)
        assert (reads == catalogue.RECURRENCE_SETTINGS) is linear and (reads == ()) is (not linear), family
        assert set(catalogue.unread_settings(family)) == set(catalogue.RECURRENCE_SETTINGS) - set(reads)
    assert catalogue.unread_settings("mypkg.layers:Custom") == ()  # a plug-in: assumed to read them


@pytest.mark.parametrize("parameterisation", catalogue.GROUPING_HEADS)
def test_heads_change_nothing_trained_where_the_levels_do_not_read_them(parameterisation: str) -> None:
    """``unread_by_levels``: under a per-mode normalisation these parameterisations' heads only
    group modes, so 1 and 4 heads draw the same parameters and give the same outputs; under ξ
    (which normalises each group) they do not, and the check says they are read."""
    u = torch.randn(2, 12, 8, generator=torch.Generator().manual_seed(1))

    def out(heads: int, normalisation: str) -> tuple[list[torch.Tensor], torch.Tensor]:
        torch.manual_seed(0)
        layer = LinearRecurrence(8, 8, heads, parameterisation, normalisation, "none", spec.RotrnnInit(), horizon=12)
        return [p.detach().clone() for p in layer.parameters()], layer(u)[0].detach()

    for normalisation in catalogue.NORMALISATIONS.builtin_names:
        model = {"family": "linear_rnn", "parameterisation": parameterisation, "normalisation": normalisation}
        (p1, y1), (p4, y4) = out(1, normalisation), out(4, normalisation)
        same = all(torch.equal(a, b) for a, b in zip(p1, p4, strict=True)) and torch.equal(y1, y4)
        assert same is (normalisation in catalogue.PER_MODE) is ("heads" in catalogue.unread_by_levels(model)), \
            normalisation
    assert catalogue.unread_by_levels({"family": "linear_rnn", "parameterisation": "rotation",
                                       "normalisation": "gamma"}) == ()
