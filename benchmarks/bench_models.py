"""Training-step time of every family at the issue-3 speed floor size (not a test).

    python benchmarks/bench_models.py [--length 1024] [--batch 16] [--repeats 3]
    python benchmarks/bench_models.py --tiny      # every row at L=16, batch 2, one layer, one timed step: seconds

One step = forward + backward + AdamW on a 4-layer network, d_model 64, state 64, token input,
mean-pooled classification. Each row gives the fastest of ``--repeats`` steps after a warm-up
(the least disturbed by other processes on a shared machine), the process CPU seconds of that step,
and — per the design's performance model, ratios measured side by side in one process — its ratio
to the RotRNN row and a memory-copy yardstick (reading and writing the states once per layer).
The load average is printed: on a loaded 2-core machine absolute times mean little.
"""

from __future__ import annotations

import argparse
import os
import time
from types import SimpleNamespace as NS

import torch

from ablate.models import build_model
from ablate.spec import ModelSpec

FLOOR_S = 1.0

ROWS: list[tuple[str, dict]] = [
    ("linear_rnn rotation xi (RotRNN)", {"parameterisation": "rotation", "normalisation": "xi", "heads": 8}),
    ("linear_rnn rotation gamma", {"parameterisation": "rotation", "normalisation": "gamma", "heads": 8}),
    (
        "linear_rnn complex_diagonal gamma (LRU)",
        {"parameterisation": "complex_diagonal", "normalisation": "gamma"},
    ),
    (
        "linear_rnn complex_diagonal xi",
        {"parameterisation": "complex_diagonal", "normalisation": "xi", "heads": 8},
    ),
    (
        "linear_rnn complex_diagonal conv mode",
        {"parameterisation": "complex_diagonal", "normalisation": "gamma", "mode": "conv"},
    ),
    ("linear_rnn real_diagonal xi", {"parameterisation": "real_diagonal", "normalisation": "xi"}),
    ("linear_rnn dense xi (sequential)", {"parameterisation": "dense", "normalisation": "xi"}),
    (
        "linear_rnn rotation xi tanh (sequential)",
        {"parameterisation": "rotation", "nonlinearity": "tanh", "heads": 8},
    ),
    ("mingru (log-space scan)", {"family": "mingru"}),
    ("minlstm (log-space scan)", {"family": "minlstm"}),
    ("gru (torch)", {"family": "gru"}),
    ("lstm (torch)", {"family": "lstm"}),
]


def make(overrides: dict, length: int, layers: int = 4) -> tuple[torch.nn.Module, str]:
    """The row's network: the spec's own defaults (``ModelSpec``) at the floor size, the row's levels over them."""
    mode = overrides.pop("mode", "scan")
    spec = ModelSpec(d_model=64, state_dim=64, layers=layers, **overrides)
    task = NS(input_kind="tokens", vocab_size=16, input_dim=1, num_classes=10, output_kind="classification",
              seq_len=length)
    net = build_model(spec, task)
    net.set_mode(mode)
    return net, mode


def step_time(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, repeats: int) -> tuple[float, float]:
    """(wall, CPU) seconds of the fastest step; the first step pays one-off start-up and is dropped."""
    opt = torch.optim.AdamW(net.param_groups(1e-3, 0.5, 0.05))
    best = (float("inf"), float("inf"))
    for i in range(repeats + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i:
            best = min(best, (time.perf_counter() - t0, time.process_time() - c0))
    return best


def copy_yardstick(batch: int, length: int, width: int, layers: int) -> float:
    """Seconds to copy a (B, L, width) float32 tensor once per layer: the scan's memory-bound floor."""
    a = torch.randn(batch, length, width)
    b = torch.empty_like(a)
    b.copy_(a)
    t0 = time.perf_counter()
    for _ in range(layers * 10):
        b.copy_(a)
    return (time.perf_counter() - t0) / 10


def main(argv: list[str] | None = None) -> list[tuple[str, float, float]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument(
        "--skip-baselines", action="store_true", help="leave out torch's GRU and LSTM (slow on CPU)"
    )
    ap.add_argument("--layers", type=int, default=4, help=argparse.SUPPRESS)
    ap.add_argument("--tiny", action="store_true",
                    help="every row at L=16, batch 2, one layer, one timed step (a check it runs)")
    args = ap.parse_args(argv)
    if args.tiny:
        args.length, args.batch, args.repeats, args.layers = 16, 2, 1, 1
    if min(args.length, args.batch, args.repeats) < 1:
        ap.error("--length, --batch and --repeats: at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x = torch.randint(1, 16, (args.batch, args.length))
    y = torch.randint(0, 10, (args.batch,))
    load0 = os.getloadavg()[0]
    results = []
    for name, overrides in ROWS:
        if args.skip_baselines and overrides.get("family") in ("gru", "lstm"):
            continue
        net, _ = make(dict(overrides), args.length, args.layers)
        results.append((name, *step_time(net, x, y, args.repeats)))
    ref = results[0][1]
    copy = copy_yardstick(args.batch, args.length, 64, args.layers)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {load0:.1f} → "
        f"{os.getloadavg()[0]:.1f}; B={args.batch} L={args.length}, {args.layers} layers, d_model 64, state 64"
    )
    print(f"state-copy yardstick {copy * 1e3:.1f} ms per step; speed floor {FLOOR_S:.1f} s (linear families)")
    print(f"{'model':44s} {'wall s':>7s} {'cpu s':>7s} {'/RotRNN':>8s} {'/copy':>7s}  floor")
    for name, wall, cpu in results:
        print(
            f"{name:44s} {wall:7.3f} {cpu:7.3f} {wall / ref:8.2f} {wall / copy:7.0f}  {'ok' if wall < FLOOR_S else 'OVER'}"
        )
    return results


if __name__ == "__main__":
    main()
