"""build_model and Network: every factor combination builds and trains."""

from __future__ import annotations

import itertools
from types import SimpleNamespace as NS

import pytest
import torch

from ablate import models
from ablate.models import build_model, catalogue

TOKENS = NS(input_kind="tokens", vocab_size=12, input_dim=1, num_classes=5, output_kind="classification", seq_len=5)
CONTINUOUS = NS(input_kind="continuous", vocab_size=None, input_dim=3, num_classes=7, output_kind="per_step",
                seq_len=5)


def spec(**kw: object) -> NS:
    """A ModelSpec stand-in (build_model is duck-typed); ModelSpec itself is exercised below."""
    base = dict(
        family="linear_rnn",
        d_model=8,
        state_dim=8,
        layers=2,
        parameterisation="rotation",
        normalisation="xi",
        heads=2,
        nonlinearity="none",
        activation="gelu",
        norm="layer",
        dropout=0.0,
        bidirectional=False,
        pooling="mean",
        init=NS(scheme="rotrnn", gamma_min=0.5, gamma_max=0.99, max_phase=0.1, identity_basis=False),
    )
    base.update(kw)
    return NS(**base)


def _train_step(net: models.Network, x: torch.Tensor, y: torch.Tensor) -> float:
    opt = torch.optim.AdamW(net.param_groups(1e-2, 0.5, 0.05))
    logits, norms = net(x, return_norms=True)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, -2), y.flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)
    return loss.item()


@pytest.mark.parametrize(
    "param,norm", list(itertools.product(catalogue.PARAMETERISATIONS.names, catalogue.NORMALISATIONS.names))
)
def test_every_parameterisation_and_normalisation_trains(param: str, norm: str) -> None:
    torch.manual_seed(0)
    net = build_model(spec(parameterisation=param, normalisation=norm), TOKENS)
    x, y = torch.randint(1, 12, (4, 10)), torch.randint(0, 5, (4,))
    loss = _train_step(net, x, y)
    assert torch.isfinite(torch.tensor(loss))
    logits, norms = net(x, return_norms=True)
    assert logits.shape == (4, 5)
    assert len(norms) == len(net.recurrent_layers()) == 2
    assert all(n.shape == (4, 10, 2) and (n >= 0).all() for n in norms)


@pytest.mark.parametrize("family", catalogue.FAMILIES.names)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_every_family_per_step_continuous(family: str, bidirectional: bool) -> None:
    torch.manual_seed(0)
    net = build_model(spec(family=family, bidirectional=bidirectional, state_dim=6, heads=1), CONTINUOUS)
    x, y = torch.randn(3, 9, 3), torch.randint(0, 7, (3, 9))
    _train_step(net, x, y)
    logits, norms = net(x, return_norms=True)
    assert logits.shape == (3, 9, 7)
    assert len(norms) == (4 if bidirectional else 2) == len(net.recurrent_layers())
    assert all(n.shape == (3, 9, 1) for n in norms)
    for layer in net.recurrent_layers():  # the layer interface others code against
        y_, states = layer(torch.randn(2, 5, 8), return_states=True)
        assert y_.shape == (2, 5, 8) and states.shape == (2, 5, 6)
        y_t, _ = layer.step(torch.randn(2, 8), layer.initial_state(2))
        assert y_t.shape == (2, 8)
        assert layer.eigenvalues().is_complex()


@pytest.mark.parametrize(
    "factor",
    [
        {"nonlinearity": "tanh"},
        {"nonlinearity": "relu"},
        {"activation": "glu"},
        {"activation": "half_glu"},
        {"norm": "batch"},
        {"norm": "rms"},
        {"norm": "none"},
        {"pooling": "last"},
        {"dropout": 0.2},
        {"init": NS(scheme="ring", r_min=0.4, r_max=0.99, max_phase=6.28, identity_basis=True)},
    ],
)
def test_other_factor_levels_train(factor: dict) -> None:
    torch.manual_seed(0)
    net = build_model(spec(**factor), TOKENS)
    assert torch.isfinite(
        torch.tensor(_train_step(net, torch.randint(1, 12, (4, 10)), torch.randint(0, 5, (4,))))
    )


@pytest.mark.parametrize("param", ["rotation", "complex_diagonal", "real_diagonal", "dense"])
def test_norms_equal_the_squared_norm_of_the_returned_states(param: str) -> None:
    """The probe's per-head norms (computed in the scan basis) equal ‖x^h‖² of the natural states."""
    torch.manual_seed(0)
    layer = build_model(spec(parameterisation=param, state_dim=12, heads=3), TOKENS).recurrent_layers()[0]
    y, states, norms = layer(torch.randn(2, 7, 8), return_states=True, return_norms=True)
    assert (states.view(2, 7, 3, 4).square().sum(-1) - norms).abs().max() < 1e-5


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_pooling_ignores_right_padding(pooling: str) -> None:
    torch.manual_seed(0)
    net = build_model(spec(pooling=pooling), TOKENS).eval()
    x = torch.randint(1, 12, (3, 10))
    padded = torch.cat([x, torch.zeros(3, 6, dtype=torch.long)], 1)
    assert (net(x) - net(padded)).abs().max() < 1e-5
    assert (net(x) - net(torch.cat([x, x], 1))).abs().max() > 1e-4  # real tokens do count


def test_param_groups_split_recurrent_parameters() -> None:
    torch.manual_seed(0)
    for param, norm, expected in [
        ("rotation", "xi", {"M", "gamma_log", "theta", "B"}),
        ("complex_diagonal", "gamma", {"nu_log", "theta_log", "B_re", "B_im", "gamma_log"}),
        ("dense", "none", {"A", "B"}),
    ]:
        net = build_model(spec(parameterisation=param, normalisation=norm, layers=1), TOKENS)
        groups = {g["name"]: g for g in net.param_groups(1e-3, 0.25, 0.1)}
        names = {id(p): n.rsplit(".", 1)[-1] for n, p in net.named_parameters()}
        assert {names[id(p)] for p in groups["recurrent"]["params"]} == expected
        assert groups["recurrent"]["lr"] == pytest.approx(2.5e-4) and groups["recurrent"]["weight_decay"] == 0
        assert groups["decay"]["weight_decay"] == 0.1 and groups["decay"]["lr"] == 1e-3
        flat = [id(p) for g in groups.values() for p in g["params"]]
        assert sorted(flat) == sorted(id(p) for p in net.parameters()) and len(set(flat)) == len(flat)


def test_identity_basis_freezes_p() -> None:
    init = NS(scheme="rotrnn", gamma_min=0.5, gamma_max=0.99, max_phase=0.1, identity_basis=True)
    layer = build_model(spec(init=init), TOKENS).recurrent_layers()[0]
    assert "param.M" not in dict(layer.named_parameters())
    assert (layer.param.basis() == torch.eye(4)).all()


def test_eigenvalues_and_head_decay() -> None:
    torch.manual_seed(0)
    rot = build_model(spec(), TOKENS).recurrent_layers()[0]
    ev = rot.eigenvalues()
    assert ev.shape == (8,) and (ev[:4].conj() - ev[4:]).abs().max() == 0
    assert (rot.head_decay() - rot.param.gamma()).abs().max() == 0
    lru = build_model(spec(parameterisation="complex_diagonal"), TOKENS).recurrent_layers()[0]
    assert lru.eigenvalues().shape == (4,) and (lru.eigenvalues().abs() < 1).all()


@pytest.mark.parametrize(
    "bad,match",
    [
        (
            {"parameterisation": "complex_diagonal", "state_dim": 8, "heads": 8},
            "heads=8 must divide the 4 complex modes",
        ),
        ({"state_dim": 12, "heads": 4}, "even"),
        ({"parameterisation": "nope"}, "valid: rotation, complex_diagonal"),
        ({"activation": "swish"}, "valid: gelu, glu, half_glu"),
    ],
)
def test_invalid_settings_raise_clear_errors(bad: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_model(spec(**bad), TOKENS)


def test_builds_from_a_model_spec() -> None:
    from ablate import spec as spec_module  # a broken import is a failure, not a skip

    ms = spec_module.ModelSpec(d_model=8, state_dim=8, heads=2, layers=1)
    net = build_model(ms, TOKENS)
    assert net(torch.randint(1, 12, (2, 5))).shape == (2, 5)
    for p in catalogue.PARAMETERISATIONS.names:
        ms = spec_module.ModelSpec(
            d_model=8, state_dim=8, heads=2, layers=1, parameterisation=p, init={"scheme": "ring"}
        )
        assert build_model(ms, TOKENS)(torch.randint(1, 12, (2, 5))).shape == (2, 5)
