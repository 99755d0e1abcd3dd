"""AdamW and its learning-rate schedule: torch.optim.AdamW's and LambdaLR's arithmetic, to the bit,
without torch.optim.

    optimiser = AdamW(groups, foreach)      # groups: [{"params", "lr", "weight_decay", ...}]
    scheduler = LRSchedule(optimiser, factor)  # lr of a group after k steps: its initial lr * factor(k)
    optimiser.step(); scheduler.step()
    adamw_(params, grads, states, ...)      # one update over any parameters with the same settings

Why not torch.optim: its ``Optimizer`` imports torch._dynamo (and sympy) when it is built, 0.8 s of
CPU in every worker before its first trial (issue 43); and updating K replicates in one call
(``ablate.training_fused``) reached into its private ``_init_group``. The update is torch's
(``_single_tensor_adam`` and ``_multi_tensor_adam``, decoupled weight decay, no amsgrad, not
maximised), op for op, and ``state_dict`` is in torch's format both ways, so checkpoints written
with torch.optim resume here: tests/test_optim.py checks both against torch.optim.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

BETAS = (0.9, 0.999)
EPS = 1e-8
# What torch.optim.AdamW's state_dict writes for each group (and reads back): settings this
# AdamW does not have take torch's defaults, and a checkpoint asking for others is refused.
_FIXED = {"amsgrad": False, "maximize": False, "capturable": False, "differentiable": False, "fused": None,
          "decoupled_weight_decay": True}


def _step_dtype() -> torch.dtype:
    """The dtype torch.optim keeps a parameter's step count in (a checkpoint's ``step`` tensors)."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


def _foreach_default(params: Iterable[torch.Tensor]) -> bool:
    """torch.optim's default: the multi-tensor update where every parameter is on a GPU."""
    return all(p.device.type in ("cuda", "xpu") for p in params)


def _real(t: torch.Tensor) -> torch.Tensor:
    """A complex tensor as its real view (torch's AdamW updates complex parameters so)."""
    return torch.view_as_real(t) if t.is_complex() else t


@torch.no_grad()
def adamw_(params: list[torch.Tensor], grads: list[torch.Tensor], states: list[dict[str, Any]], *, lr: float,
           weight_decay: float, betas: tuple[float, float] = BETAS, eps: float = EPS, foreach: bool = False) -> None:
    """One AdamW update of ``params`` in place (each ``states[i]``: its ``step`` count, a float,
    and its moments ``exp_avg``, ``exp_avg_sq``, all advanced here). ``foreach``: a few
    multi-tensor calls for all of them (torch's ``_multi_tensor_adam``), else tensor by tensor
    (``_single_tensor_adam``): the same elementwise arithmetic."""
    if not params:
        return
    beta1, beta2 = betas
    views, grads = [_real(t) for t in params], [_real(t) for t in grads]
    avgs, sqs = [_real(s["exp_avg"]) for s in states], [_real(s["exp_avg_sq"]) for s in states]
    for s in states:
        s["step"] += 1.0
    if not foreach:
        for param, grad, avg, sq, s in zip(views, grads, avgs, sqs, states, strict=True):
            if weight_decay != 0:
                param.mul_(1 - lr * weight_decay)
            avg.lerp_(grad, 1 - beta1)
            sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step_size = lr / (1 - beta1 ** s["step"])
            denom = (sq.sqrt() / (1 - beta2 ** s["step"]) ** 0.5).add_(eps)
            param.addcdiv_(avg, denom, value=-step_size)
        return
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, p in enumerate(views):  # foreach kernels take one device and dtype per call
        groups.setdefault((p.device, p.dtype), []).append(i)
    for index in groups.values():
        ps, gs = [views[i] for i in index], [grads[i] for i in index]
        ms, vs, steps = [avgs[i] for i in index], [sqs[i] for i in index], [states[i]["step"] for i in index]
        if weight_decay != 0:
            torch._foreach_mul_(ps, 1 - lr * weight_decay)
        torch._foreach_lerp_(ms, gs, 1 - beta1)
        torch._foreach_mul_(vs, beta2)
        torch._foreach_addcmul_(vs, gs, gs, 1 - beta2)
        step_size = [(lr / (1 - beta1 ** k)) * -1 for k in steps]
        denom = torch._foreach_sqrt(vs)
        torch._foreach_div_(denom, [(1 - beta2 ** k) ** 0.5 for k in steps])
        torch._foreach_add_(denom, eps)
        torch._foreach_addcdiv_(ps, ms, denom, step_size)


class AdamW:
    """torch.optim.AdamW over ``groups`` (each: ``params``, ``lr``, ``weight_decay``; any other key,
    such as a ``name``, is kept): ``step``, ``zero_grad``, ``state_dict``, ``load_state_dict`` and
    ``param_groups`` as torch's. ``foreach`` None: torch's default (multi-tensor on a GPU)."""

    def __init__(self, groups: Iterable[dict[str, Any]], foreach: bool | None = None) -> None:
        self.param_groups: list[dict[str, Any]] = []
        for group in groups:
            params = list(group["params"])
            self.param_groups.append({"betas": BETAS, "eps": EPS, "weight_decay": 0.01, **group, "params": params,
                                      "foreach": foreach})
        self.state: dict[torch.Tensor, dict[str, Any]] = {}

    def state_of(self, p: torch.Tensor) -> dict[str, Any]:
        """``p``'s step count and moments, zero before its first update."""
        if p not in self.state:
            self.state[p] = {"step": 0.0, "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                             "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
        return self.state[p]

    def zero_grad(self) -> None:
        """Every gradient set to None (torch's default)."""
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    def foreach(self, group: dict[str, Any]) -> bool:
        return group["foreach"] if group["foreach"] is not None else _foreach_default(group["params"])

    def step(self) -> None:
        """One update of every parameter with a gradient, group by group."""
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            adamw_(params, [p.grad for p in params], [self.state_of(p) for p in params], lr=group["lr"],
                   weight_decay=group["weight_decay"], betas=group["betas"], eps=group["eps"],
                   foreach=self.foreach(group))

    def state_dict(self) -> dict[str, Any]:
        """torch.optim.AdamW's ``state_dict``: parameters by their index across the groups."""
        index = {p: i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        dtype = _step_dtype()
        state = {index[p]: {"step": torch.tensor(s["step"], dtype=dtype), "exp_avg": s["exp_avg"],
                            "exp_avg_sq": s["exp_avg_sq"]} for p, s in self.state.items()}
        groups = [{**g, **_FIXED, "params": [index[p] for p in g["params"]]} for g in self.param_groups]
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Settings and state from ``saved`` (this class's, or torch.optim.AdamW's: the same groups)."""
        groups = saved["param_groups"]
        if [len(g["params"]) for g in groups] != [len(g["params"]) for g in self.param_groups]:
            raise ValueError("the saved optimiser state has other parameter groups than this model's")
        for key, value in _FIXED.items():
            if key != "fused" and any(g.get(key, value) != value for g in groups):
                raise ValueError(f"the saved optimiser has {key} set, which this AdamW does not do")
        params = [p for g in self.param_groups for p in g["params"]]
        for i, (mine, theirs) in enumerate(zip(self.param_groups, groups, strict=True)):
            kept = {k: v for k, v in theirs.items() if k not in _FIXED and k not in ("params", "foreach")}
            self.param_groups[i] = {**mine, **kept}
        self.state = {}
        for i, s in saved["state"].items():
            p = params[int(i)]
            step = s["step"]
            self.state[p] = {"step": float(step.item() if isinstance(step, torch.Tensor) else step),
                             "exp_avg": s["exp_avg"].to(device=p.device, dtype=p.dtype),
                             "exp_avg_sq": s["exp_avg_sq"].to(device=p.device, dtype=p.dtype)}


class LRSchedule:
    """torch's LambdaLR over an ``AdamW``: after k steps each group's lr is its initial lr times
    ``factor(k)`` (k = 0 on creation); ``state_dict`` in LambdaLR's format."""

    def __init__(self, optimiser: AdamW, factor: Callable[[int], float]) -> None:
        self.optimiser, self.factor = optimiser, factor
        for group in optimiser.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base_lrs = [group["initial_lr"] for group in optimiser.param_groups]
        self.last_epoch = -1
        self.step()

    def step(self) -> None:
        self.last_epoch += 1
        for group, base in zip(self.optimiser.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * self.factor(self.last_epoch)
        self._last_lr = [group["lr"] for group in self.optimiser.param_groups]

    def get_last_lr(self) -> list[float]:
        return self._last_lr

    def state_dict(self) -> dict[str, Any]:
        return {"base_lrs": list(self.base_lrs), "last_epoch": self.last_epoch, "_step_count": self.last_epoch + 1,
                "_get_lr_called_within_step": False, "_last_lr": list(self._last_lr),
                "lr_lambdas": [None] * len(self.base_lrs)}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        self.base_lrs, self.last_epoch = list(saved["base_lrs"]), int(saved["last_epoch"])
        self._last_lr = list(saved.get("_last_lr", [g["lr"] for g in self.optimiser.param_groups]))
