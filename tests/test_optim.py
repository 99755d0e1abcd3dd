"""ablate.optim: AdamW and its schedule against torch.optim.AdamW and LambdaLR, to the bit, and
checkpoints from either resumed by the other."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from ablate.optim import AdamW, LRSchedule


def _factor(k: int) -> float:
    return min((k + 1) / 3, 1.0) * 0.5 * (1 + math.cos(math.pi * min(k / 12, 1.0)))


def _params(dtype: torch.dtype, seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(4, 3), (5,), (2, 3, 2), (6,)]
    ps = [torch.nn.Parameter(torch.randn(s, generator=g, dtype=dtype)) for s in shapes]
    complex_dtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    ps.append(torch.nn.Parameter(torch.randn(3, generator=g, dtype=complex_dtype)))
    return [{"name": "recurrent", "params": [ps[0], ps[4]], "lr": 3e-3, "weight_decay": 0.0},
            {"name": "decay", "params": [ps[2]], "lr": 1e-2, "weight_decay": 0.1},
            {"name": "no_decay", "params": [ps[1], ps[3]], "lr": 1e-2, "weight_decay": 0.0}]


def _grads(groups: list[dict], step: int) -> None:
    g = torch.Generator().manual_seed(100 + step)
    for group in groups:
        for i, p in enumerate(group["params"]):
            p.grad = None if (step + i) % 4 == 3 else torch.randn(p.shape, generator=g, dtype=p.dtype)


def _flat(groups: list[dict]) -> list[torch.Tensor]:
    return [p.detach().clone() for g in groups for p in g["params"]]


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_adamw_and_its_schedule_are_torch_optims_to_the_bit(dtype, foreach):
    """Every parameter (one of them complex, some steps without a gradient) and every learning
    rate equal torch.optim.AdamW's under LambdaLR over 14 steps, in float32 and float64, tensor by
    tensor and multi-tensor."""
    ours, theirs = _params(dtype), _params(dtype)
    mine = AdamW(ours, foreach=foreach)
    ref = torch.optim.AdamW(theirs, foreach=foreach)
    schedule, ref_schedule = LRSchedule(mine, _factor), torch.optim.lr_scheduler.LambdaLR(ref, _factor)
    assert schedule.get_last_lr() == ref_schedule.get_last_lr()
    for step in range(14):
        _grads(ours, step)
        _grads(theirs, step)
        mine.step()
        ref.step()
        schedule.step()
        ref_schedule.step()
        assert schedule.get_last_lr() == ref_schedule.get_last_lr()
        for a, b in zip(_flat(ours), _flat(theirs), strict=True):
            assert torch.equal(a, b), (step, (a - b).abs().max())
    mine.zero_grad()
    assert all(p.grad is None for g in ours for p in g["params"])


@pytest.mark.parametrize("direction", ["torch to ablate", "ablate to torch"])
def test_a_checkpoint_of_either_resumes_in_the_other_to_the_bit(direction):
    """state_dicts in torch's format both ways (checkpoints written before ablate.optim resume),
    through torch.save; the resumed run equals one never interrupted."""
    whole = _params(torch.float32)
    whole_opt = torch.optim.AdamW(whole)
    whole_schedule = torch.optim.lr_scheduler.LambdaLR(whole_opt, _factor)
    first, second = _params(torch.float32), _params(torch.float32)
    if direction == "torch to ablate":
        opt1 = torch.optim.AdamW(first)
        s1 = torch.optim.lr_scheduler.LambdaLR(opt1, _factor)
        opt2 = AdamW(second)
        s2 = LRSchedule(opt2, _factor)
    else:
        opt1 = AdamW(first)
        s1 = LRSchedule(opt1, _factor)
        opt2 = torch.optim.AdamW(second)
        s2 = torch.optim.lr_scheduler.LambdaLR(opt2, _factor)
    for step in range(10):
        for groups, opt, schedule in ((whole, whole_opt, whole_schedule), (first, opt1, s1)):
            if groups is first and step >= 5:
                continue
            _grads(groups, step)
            opt.step()
            schedule.step()
        if step == 4:  # interrupted here: the second run starts from the first's checkpoint
            import io

            buffer = io.BytesIO()
            torch.save({"model": _flat(first), "optimiser": opt1.state_dict(), "scheduler": s1.state_dict()}, buffer)
            buffer.seek(0)
            saved = torch.load(buffer, weights_only=True)
            with torch.no_grad():
                for p, value in zip([p for g in second for p in g["params"]], saved["model"], strict=True):
                    p.copy_(value)
            opt2.load_state_dict(saved["optimiser"])
            s2.load_state_dict(saved["scheduler"])
        if step >= 5:
            _grads(second, step)
            opt2.step()
            s2.step()
    assert s2.get_last_lr() == whole_schedule.get_last_lr()
    for a, b in zip(_flat(second), _flat(whole), strict=True):
        assert torch.equal(a, b)


def test_a_checkpoint_of_other_groups_or_settings_is_refused():
    opt = AdamW(_params(torch.float32))
    saved = opt.state_dict()
    with pytest.raises(ValueError, match="other parameter groups"):
        AdamW(_params(torch.float32)[:2]).load_state_dict(saved)
    saved["param_groups"][0]["amsgrad"] = True
    with pytest.raises(ValueError, match="amsgrad"):
        AdamW(_params(torch.float32)).load_state_dict(saved)


def test_a_trial_never_imports_torch_dynamo():
    """What ablate.optim is for: torch.optim's optimisers import torch._dynamo (0.8 s of CPU) in
    every worker; a trial (forward, backward through the serial scan, clipping, AdamW) does not."""
    code = """
import sys
from ablate import design, training
from ablate.spec import parse
spec = parse({"name": "d", "task": {"name": "parity", "seq_len": 16, "train_size": 64, "val_size": 32,
              "test_size": 32}, "model": {"d_model": 8, "layers": 1},
              "train": {"steps": 3, "batch_size": 8, "eval_every": 3, "grad_clip": 1.0}})
training.run_trial(design.items(spec)[0].cell.config, 0, spec.probes)
print("torch._dynamo" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"]
