"""Fused replicates (ablate.training_fused) against the same replicates trained one by one
(ablate.training.run_trial): every logged metric, every probe row and every final parameter.

In float64 on the CPU they agree to float64 rounding (relative 1e-9 after a few dozen steps:
batched products sum in another order than one replicate's, nothing else differs); in float32
to 2e-4 relative (``F32``), what a few dozen Adam steps make of float32 rounding. Every family
and every parameterisation, normalisation and nonlinearity is covered; torch's GRU/LSTM and the
batch norm fuse by running their own module per replicate (``per_replicate`` says so).
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np
import polars as pl
import pytest
import torch

from ablate.models import build_model
from ablate.models.stacked import per_replicate, stacked_forward
from ablate.spec import ModelSpec, ProbeSpec
from ablate.tasks.data import TaskData, TaskInfo
from ablate.training import Trial, read_checkpoint, run_trial
from ablate.training_fused import CPU_FUSE, CUDA_FUSE, default_fuse, fusable, run_fused

CLASSES = TaskInfo("toy", "tokens", 12, 1, 3, "classification", "accuracy", 1 / 3, 10, "v0")
PER_STEP = TaskInfo("toy", "continuous", None, 3, 5, "per_step", "bpc", 5.0, 10, "v0")
F64 = 1e-9
F32 = 2e-4
PROBES = ProbeSpec(every=10, batch=8, white_noise_batch=4)

FAMILIES = [
    {"family": "linear_rnn", "parameterisation": "rotation", "normalisation": "xi", "heads": 2},
    {"family": "linear_rnn", "parameterisation": "rotation", "normalisation": "gamma", "heads": 2},
    {"family": "linear_rnn", "parameterisation": "complex_diagonal", "normalisation": "gamma"},
    {"family": "linear_rnn", "parameterisation": "complex_diagonal", "normalisation": "gamma_recomputed"},
    {"family": "linear_rnn", "parameterisation": "complex_diagonal", "normalisation": "xi", "heads": 2},
    {"family": "linear_rnn", "parameterisation": "real_diagonal", "normalisation": "none"},
    {"family": "linear_rnn", "parameterisation": "dense", "normalisation": "xi", "heads": 2},
    {"family": "linear_rnn", "parameterisation": "rotation", "normalisation": "xi", "nonlinearity": "tanh"},
    {"family": "linear_rnn", "parameterisation": "complex_diagonal", "normalisation": "none", "nonlinearity": "relu"},
    {"family": "mingru"},
    {"family": "minlstm", "state_dim": 6},
    {"family": "gru"},
    {"family": "lstm"},
]


def _data(info: TaskInfo, n: int = 40) -> TaskData:
    g = torch.Generator().manual_seed(1)

    def split(m: int) -> tuple[torch.Tensor, torch.Tensor]:
        if info.input_kind == "tokens":
            x = torch.randint(1, 12, (m, info.seq_len), generator=g)
            x[: m // 3, -3:] = 0  # padding: pooling must skip it in both paths
        else:
            x = torch.randn(m, info.seq_len, info.input_dim, generator=g, dtype=torch.get_default_dtype())
        shape = (m,) if info.output_kind == "classification" else (m, info.seq_len)
        y = torch.randint(0, info.num_classes, shape, generator=g)
        if info.output_kind == "per_step":
            y[:, :2] = -100  # ignored targets
        return x, y

    return TaskData(info, split(n), split(16), split(16))


def _config(model: dict, **train) -> dict:
    base = {"d_model": 8, "state_dim": 8, "layers": 2, "init": {"scheme": "ring", "r_min": 0.4, "r_max": 0.95}}
    if model.get("parameterisation") in ("rotation", "dense"):
        base["init"] = {"scheme": "rotrnn", "gamma_min": 0.5, "gamma_max": 0.95}
    spec = {"steps": 24, "batch_size": 6, "lr": 1e-2, "eval_every": 8, "log_every": 4, **train}
    return {"task": {"name": "toy"}, "model": {**base, **model}, "train": spec}


class Keep:
    def __init__(self) -> None:
        self.metrics: list[tuple[int, dict[str, float]]] = []
        self.curves: list[pl.DataFrame] = []

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        self.metrics.append((step, dict(values)))

    def log_curves(self, rows: pl.DataFrame) -> None:
        self.curves.append(rows)


@contextmanager
def default_dtype(dtype: torch.dtype):
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def _close(a: float, b: float, rtol: float, what: str) -> None:
    if isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), what
        return
    assert a == pytest.approx(b, rel=rtol, abs=rtol), what


def _same_reports(alone: Keep, fused: Keep, rtol: float) -> None:
    assert [s for s, _ in alone.metrics] == [s for s, _ in fused.metrics]
    for (step, a), (_, b) in zip(alone.metrics, fused.metrics, strict=True):
        assert a.keys() == b.keys(), step
        for key in a:
            _close(a[key], b[key], rtol, f"{key} at step {step}")
    assert len(alone.curves) == len(fused.curves)
    for a, b in zip(alone.curves, fused.curves, strict=True):
        assert a.drop("value").equals(b.drop("value"))
        np.testing.assert_allclose(b["value"].to_numpy(), a["value"].to_numpy(), rtol=rtol, atol=rtol)


@contextmanager
def final_parameters():
    """Every trial's parameters as it finishes (``Trial.finish``, which both paths end in), by seed."""
    kept: dict[int, dict[str, torch.Tensor]] = {}
    finish = Trial.finish

    def keeping(self, *args, **kwargs):
        result = finish(self, *args, **kwargs)
        kept[self.seed] = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        return result

    Trial.finish = keeping
    try:
        yield kept
    finally:
        Trial.finish = finish


def _compare(configs: list[dict], seeds: list[int], info: TaskInfo, rtol: float, **kw) -> list:
    data = _data(info)
    alone_reports = [Keep() for _ in seeds]
    alone = []
    with final_parameters() as alone_params:
        for config, seed, rep in zip(configs, seeds, alone_reports, strict=True):
            alone.append(run_trial(config, seed, PROBES, rep, data=data, **kw))
    fused_reports = [Keep() for _ in seeds]
    with final_parameters() as fused_params:
        fused = run_fused(configs, seeds, PROBES, fused_reports, data=data, **kw)
    assert alone_params.keys() == fused_params.keys() == set(seeds)
    for seed in seeds:
        for name, value in alone_params[seed].items():
            torch.testing.assert_close(fused_params[seed][name], value, rtol=rtol, atol=rtol, msg=name)
    for a, f, ra, rf in zip(alone, fused, alone_reports, fused_reports, strict=True):
        assert not isinstance(f, BaseException), f
        assert (a.status, a.steps, a.reason) == (f.status, f.steps, f.reason)
        assert a.convergence.keys() == f.convergence.keys()
        for key, value in a.convergence.items():
            if isinstance(value, float):
                _close(value, f.convergence[key], rtol, key)
            else:
                assert value == f.convergence[key], key
        assert a.metrics.keys() == f.metrics.keys()
        for key in a.metrics:
            _close(a.metrics[key], f.metrics[key], rtol, key)
        _same_reports(ra, rf, rtol)
    return fused


@pytest.mark.parametrize("model", FAMILIES, ids=lambda m: "-".join(str(v) for v in m.values()))
def test_fused_equals_apart_in_float64_for_every_family(model):
    with default_dtype(torch.float64):
        _compare([_config(model, steps=16)] * 2, [0, 1], CLASSES, F64)


@pytest.mark.parametrize("model", [FAMILIES[0], FAMILIES[2], FAMILIES[9]], ids=["rotation", "lru", "mingru"])
def test_fused_equals_apart_in_float32_within_its_tolerance(model):
    _compare([_config(model)] * 2, [3, 4], CLASSES, F32)


def test_per_step_continuous_dropout_glu_bidirectional_accumulated_and_tuned_lrs():
    """Dropout masks from each replicate's own stream, micro-batches, per-step targets with
    ignored positions, a GLU, a backward layer, RMS norm, and replicates with their own lr."""
    model = {"family": "linear_rnn", "parameterisation": "complex_diagonal", "normalisation": "gamma",
             "dropout": 0.2, "activation": "glu", "bidirectional": True, "norm": "rms"}
    configs = [_config(model, lr=lr, weight_decay=wd) for lr, wd in ((1e-2, 0.0), (3e-3, 0.1), (2e-2, 0.05))]
    with default_dtype(torch.float64):
        _compare(configs, [0, 1, 2], PER_STEP, F64, accumulate=2)


def test_each_replicate_clips_to_its_own_bound_in_the_one_clipping_pass():
    """Replicates that differ in ``train.grad_clip`` only (clipped hard, lightly, not at all): one
    norm pass and one optimiser call for all of them, each replicate's update as it is apart."""
    model = {"family": "linear_rnn", "parameterisation": "complex_diagonal", "normalisation": "gamma"}
    configs = [_config(model, grad_clip=clip) for clip in (0.01, 0.5, 0.0)]
    with default_dtype(torch.float64):
        _compare(configs, [0, 1, 2], CLASSES, F64)


def test_a_diverging_replicate_is_frozen_and_the_others_train_on():
    """A learning rate that blows replicate 1 up: it is recorded diverged at the step it would be
    alone, and replicates 0 and 2 end exactly as they do alone."""
    model = {"family": "linear_rnn", "parameterisation": "real_diagonal", "normalisation": "none",
             "layers": 1}
    configs = [_config(model), _config(model, lr=10.0, grad_clip=0.0, divergence_norm=1e3), _config(model)]
    with default_dtype(torch.float64):
        fused = _compare(configs, [0, 1, 2], CLASSES, F64)
    assert [r.status for r in fused] == ["complete", "diverged", "complete"]


def test_early_stopping_and_a_pruned_replicate_end_alone():
    model = {"family": "mingru"}
    configs = [_config(model, patience=1, min_delta=0.5, steps=40)] * 3

    class Pruned(Exception):
        pass

    def prune(step: int, val: dict) -> None:
        raise Pruned(step)

    data = _data(CLASSES)
    with default_dtype(torch.float64):
        alone = [run_trial(c, s, PROBES, data=data) for c, s in zip(configs[:2], (0, 1), strict=True)]
        fused = run_fused(configs, [0, 1, 2], PROBES, data=data, on_evals=[None, None, prune])
    assert isinstance(fused[2], Pruned) and fused[2].args == (8,)
    for a, f in zip(alone, fused[:2], strict=True):
        assert f.convergence["stopped_early"] and a.steps == f.steps < 40
        assert a.metrics == pytest.approx(f.metrics, rel=F64)


def test_fused_checkpoints_are_what_apart_writes_and_resume_apart_or_fused_to_the_fused_result(tmp_path):
    """Each replicate's checkpoint (every 8 steps but the last: the one at step 16 is left) holds
    what ``run_trial`` alone writes at that step, its dropout stream included; ``run_trial``
    resumes it, and so does ``run_fused`` given them all, to the fused run's result and reports
    (replayed history included)."""
    model = {"family": "linear_rnn", "parameterisation": "complex_diagonal", "normalisation": "gamma",
             "dropout": 0.2}
    configs, seeds, data = [_config(model, lr=1e-2), _config(model, lr=3e-3)], [0, 1], _data(CLASSES)
    with default_dtype(torch.float64):
        fused_reports = [Keep() for _ in seeds]
        paths = [tmp_path / f"fused-{seed}.pt" for seed in seeds]
        fused = run_fused(configs, seeds, PROBES, fused_reports, data=data, checkpoints=paths, checkpoint_every=8)
        for config, seed, path, result, report in zip(configs, seeds, paths, fused, fused_reports, strict=True):
            alone_path = tmp_path / f"alone-{seed}.pt"
            run_trial(config, seed, PROBES, data=data, checkpoint=alone_path, checkpoint_every=8)
            mine, theirs = torch.load(path, weights_only=False), torch.load(alone_path, weights_only=False)
            assert mine.keys() == theirs.keys() and mine["step"] == theirs["step"] == 16
            assert torch.equal(mine["rng"], theirs["rng"]) and torch.equal(mine["sampler"], theirs["sampler"])
            for name, value in theirs["model"].items():
                torch.testing.assert_close(mine["model"][name], value, rtol=F64, atol=F64, msg=name)
            resumed_report = Keep()
            resumed = run_trial(config, seed, PROBES, resumed_report, data=data, checkpoint=path, checkpoint_every=8)
            assert (resumed.status, resumed.steps, resumed.resumed_at) == (result.status, result.steps, 16)
            for key in result.metrics:
                _close(resumed.metrics[key], result.metrics[key], F64, key)
            _same_reports(resumed_report, report, F64)
        # and resumed fused (a worker that claims the killed group's items again), from step 16
        saved = [read_checkpoint(path) for path in paths]
        resumed_reports = [Keep() for _ in seeds]
        again = run_fused(configs, seeds, PROBES, resumed_reports, data=data, checkpoints=paths, checkpoint_every=8,
                          saved=saved)
        for resumed, result, resumed_report, report in zip(again, fused, resumed_reports, fused_reports, strict=True):
            assert (resumed.status, resumed.steps, resumed.resumed_at) == (result.status, result.steps, 16)
            for key in result.metrics:
                _close(resumed.metrics[key], result.metrics[key], F64, key)
            _same_reports(resumed_report, report, F64)
        with pytest.raises(ValueError, match="resume from different steps"):
            run_fused(configs, seeds, PROBES, data=data, saved=[saved[0], None])


@pytest.mark.parametrize("mode", ["scan", "conv"])
def test_stacked_forward_equals_each_model(mode):
    data = _data(CLASSES)
    spec = ModelSpec.model_validate(_config(FAMILIES[0])["model"])
    with default_dtype(torch.float64):
        models = []
        for seed in (0, 1):
            torch.manual_seed(seed)
            models.append(build_model(spec, data.info))
            models[-1].set_mode(mode)
        x = torch.stack([data.train[0][:5], data.train[0][5:10]])
        logits, norms = stacked_forward(models, x)
        for k, m in enumerate(models):
            alone, alone_norms = m(x[k], return_norms=True)
            torch.testing.assert_close(logits[k], alone, rtol=1e-12, atol=1e-12)
            for a, b in zip(alone_norms, norms, strict=True):
                torch.testing.assert_close(b[k], a, rtol=1e-12, atol=1e-12)
        logits.sum().backward()
        for m in models:
            assert all(p.grad is not None for p in m.parameters() if p.requires_grad)


def test_per_replicate_names_what_does_not_fuse():
    spec = ModelSpec.model_validate({**_config({"family": "gru"})["model"], "norm": "batch"})
    names = per_replicate(build_model(spec, CLASSES))
    assert names == ["norm SeqBatchNorm", "recurrent layer TorchGRU"]
    assert per_replicate(build_model(ModelSpec.model_validate(_config(FAMILIES[0])["model"]), CLASSES)) == []


def test_fusable_refuses_replicates_that_differ_in_more_than_seed_and_rates():
    a = _config(FAMILIES[0])
    assert fusable([a, _config(FAMILIES[0], lr=1e-3, weight_decay=0.2)]) is None
    assert "train.steps" in fusable([a, _config(FAMILIES[0], steps=10)])
    assert "model" in fusable([a, _config(FAMILIES[2])])
    with pytest.raises(ValueError, match="cannot train fused"):
        run_fused([a, _config(FAMILIES[0], steps=10)], [0, 1], data=_data(CLASSES))
    with pytest.raises(ValueError, match="2 configs but 1 seeds"):
        run_fused([a, a], [0], data=_data(CLASSES))


def test_default_fuse_fuses_the_quickstart_s_size_on_the_cpu_not_l_784_and_on_cuda():
    """Where ``benchmarks/bench_fused.py`` measured fusing to win on the CPU (the quickstart's
    shape), and not where it lost (L 784) or where the length is unknown before the data load."""
    from pathlib import Path

    from ablate import design

    studies = Path(__file__).resolve().parents[1] / "studies"
    quickstart = design.load(studies / "quickstart.yaml", []).baseline()
    fashion = design.load(studies / "lru_ablations.yaml", []).baseline()
    assert default_fuse("cpu", quickstart) == CPU_FUSE > 1
    assert default_fuse("cpu", fashion) == 1  # a fixed data set's length: known once loaded only
    long = {**quickstart, "task": {**quickstart["task"], "max_length": 784}}
    assert default_fuse("cpu", long) == 1
    wide = {**quickstart, "model": {**quickstart["model"], "d_model": 512}}
    assert default_fuse("cpu", wide) == 1
    assert default_fuse("cpu", {**quickstart, "task": {"name": "no_such_task"}}) == 1
    assert default_fuse("cuda", fashion) == default_fuse("cuda:1", quickstart) == CUDA_FUSE > 1


def test_a_replicate_gets_the_same_bits_whatever_trains_beside_it():
    """Alone, beside one or two others, or beside one that diverges at its first step: replicate
    0's final parameters and every metric are bit for bit the same (float32). A pass of one
    replicate had summed some gradients in another order, so a seed's run depended on whether its
    worker claimed it alone or on when the others of its group stopped."""
    data = _data(CLASSES, n=80)
    config = _config(FAMILIES[0], batch_size=16, steps=24)
    diverges = {**config, "train": {**config["train"], "divergence_norm": 1e-6}}

    def replicate0(configs: list[dict], seeds: list[int]) -> tuple[dict, list]:
        reports = [Keep() for _ in seeds]
        with final_parameters() as params:
            run_fused(configs, seeds, PROBES, reports, data=data)
        return params[0], reports[0].metrics

    alone, alone_metrics = replicate0([config], [0])
    for configs, seeds in (([config] * 2, [0, 1]), ([config] * 3, [0, 1, 2]), ([config, diverges], [0, 1])):
        params, metrics = replicate0(configs, seeds)
        assert metrics == alone_metrics, seeds
        for name, value in alone.items():
            assert torch.equal(params[name], value), (seeds, name)
