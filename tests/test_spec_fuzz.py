"""Fuzzing the spec loader: whatever the input, the user sees a SpecError (key path, message),
never a traceback. Deterministic (derandomized) so that it runs the same cases every time.

Cases: mutated specs (wrong types, unknown keys, empty and huge grids, contradictory and
malformed constraints, conditions, designs, tuning), YAML-ish text (anchors, aliases, tags,
flow/block mixtures), raw bytes (non-UTF-8), --set overrides, alias bombs; and a few through the
real command line. ``test_fuzz_case_count`` states how many ran.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import ABLATE, VARIANT, spec_dict

from ablate import design, spec
from ablate.spec import ModelSpec, TrainSpec

ROOT = Path(__file__).resolve().parents[1]
RAN: Counter = Counter()
FUZZ = settings(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.data_too_large])

# BASE with every kind of factor (named variants, a conditional one, a plain one), an exclusion and tuning.
VALID = spec_dict(name="fuzz", seeds=2, factors={
    "variant": VARIANT,
    "model.heads": {"levels": [1, 2], "when": {"model.parameterisation": "rotation"}},
    "model.layers": [1, 2],
}, exclude=[{"variant": "LRU", "model.layers": 2}],
    tune={"trials": 2, "space": {"train.lr": {"low": 1e-4, "high": 1e-2, "log": True}}})

PATHS = ["name", "description", "task", "task.name", "task.max_length", "task.seed", "model", "model.d_model",
         "model.heads", "model.state_dim", "model.init", "model.init.scheme", "model.init.r_min",
         "model.parameterisation", "train", "train.lr", "train.steps", "probes", "probes.every", "factors",
         "factors.variant", "factors.variant.LRU", "factors.model.heads", "factors.model.heads.when",
         "factors.model.heads.levels", "factors.model.layers", "design", "cells", "exclude", "include",
         "seeds", "tune", "tune.trials", "tune.space", "tune.space.train.lr", "tune.seeds", "tune.sampler",
         "tune.objective", "reports", "extends", "zzz", "model.zzz", "task.zzz"]
KEYS = st.sampled_from(["model.layers", "model.heads", "variant", "model.normalisation", "train.lr", "label",
                        "value", "levels", "when", "scheme", "low", "high", "choices", "x", "", "model",
                        "task.max_length", "model.init", "model.parameterisation", "RotRNN", "LRU"])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 70), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["rotation", "complex_diagonal", "xi", "gamma", "none", "ring", "rotrnn", "full",
                     "one_at_a_time", "cells", "tpe", "random", "gp", "RotRNN", "LRU", "listops", "val_loss"]),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(KEYS, inner, max_size=4)), max_leaves=12)


def _set(raw: dict, path: str, value) -> None:
    parts = path.split(".")
    if parts[0] == "factors" and len(parts) > 1:  # factor names are dotted themselves
        name = ".".join(parts[1:3]) if parts[1] == "model" else parts[1]
        rest = parts[3:] if parts[1] == "model" else parts[2:]
        parts = ["factors", name, *rest]
    if parts[:2] == ["tune", "space"] and len(parts) > 2:
        parts = ["tune", "space", ".".join(parts[2:])]
    node = raw
    for part in parts[:-1]:
        if not isinstance(node, dict):
            return
        node = node.setdefault(part, {})
    if isinstance(node, dict):
        node[parts[-1]] = value


def _del(raw: dict, path: str) -> None:
    node = raw
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(parts[-1], None)


MUTATION = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(PATHS), VALUES),
    st.tuples(st.just("del"), st.sampled_from(PATHS), st.none()),
    st.tuples(st.just("grid"), st.sampled_from(["model.layers", "model.d_model", "model.heads", "train.lr"]),
              st.integers(0, 6)),
    st.tuples(st.just("huge"), st.just("factors"), st.integers(22, 40)),
)


def _outcome(load) -> spec.Spec | None:
    """Run ``load``; a Spec must yield valid cells and items; anything but SpecError fails."""
    try:
        s = load()
    except spec.SpecError as exc:
        assert exc.problems and all(isinstance(p, str) and isinstance(m, str) and m for p, m in exc.problems)
        str(exc)
        return None
    items = design.items(s)
    assert items
    for cell in {i.cell.id: i.cell for i in items}.values():
        ModelSpec.model_validate(cell.config["model"])
        TrainSpec.model_validate(cell.config["train"])
        assert isinstance(cell.label, str) and set(cell.labels) == set(s.factors)
    return s


@settings(FUZZ, max_examples=300)
@given(st.lists(MUTATION, min_size=1, max_size=4))
def test_fuzz_mutated_specs(mutations):
    raw = copy.deepcopy(VALID)
    for kind, path, value in mutations:
        if kind == "set":
            _set(raw, path, value)
        elif kind == "del":
            _del(raw, path)
        elif kind == "grid":  # `value` levels on one factor: none, or a few
            _set(raw, f"factors.{path}", list(range(1, value + 1)) if path != "train.lr" else
                 [10.0 ** -(1 + i / 10) for i in range(value)])
        else:  # a grid past the limit: refused before it is enumerated
            for name in ("model.layers", "model.d_model", "train.steps"):
                _set(raw, f"factors.{name}", list(range(1, value + 1)))
    RAN["mutated specs"] += 1
    try:
        text = yaml.safe_dump(raw, allow_unicode=True)
    except (yaml.YAMLError, ValueError, OverflowError):
        return
    _outcome(lambda: design.loads(text, "fuzz.yaml"))


FRAGMENTS = st.sampled_from([
    "name: x\n", "task: {name: listops}\n", "task:\n  name: listops\n", "factors:\n", "  model.layers: [1, 2]\n",
    "  variant: {A: {model.layers: 2}}\n", "seeds: ", "3", "[1, 2]", "&a ", "*a", "*b", "&b [*a, *a, *a]",
    "<<: *a\n", "!!python/object/apply:os.system ['true']", "!!binary aGk=", "!!set {a}", "!custom ", "!!str ",
    "!!int ", "!!float ", "'", '"', "{", "}", "[", "]", ": ", "- ", "? ", "#", "\n", "  ", "\t", "---\n", "...\n",
    "%YAML 1.1\n", "%TAG ! tag:example.com,2000:\n", "é", "\u2028", "\x00", "\ufeff", "yes", "no", "~", ".nan",
    ".inf", "0x1F", "1e400", "2024-01-01", "model:", "design: cells\n", "cells: [{}]\n", "exclude: [{x: 1}]\n",
    "tune: {trials: 2, space: {train.lr: [0.1]}}\n", "extends: nope.yaml\n", "extends: [a.yaml, 3]\n",
])


@settings(FUZZ, max_examples=400)
@given(st.lists(FRAGMENTS, max_size=25).map("".join))
def test_fuzz_yaml_text(text):
    RAN["yaml text"] += 1
    _outcome(lambda: design.loads(text, "fuzz.yaml", base_dir=ROOT / "tests"))


@settings(FUZZ, max_examples=200)
@given(st.binary(max_size=200))
def test_fuzz_bytes(data):
    RAN["bytes"] += 1
    _outcome(lambda: design.loads(data, "fuzz.yaml", base_dir=ROOT / "tests"))
    _outcome(lambda: design.loads(b"name: x\ntask: {name: listops}\ndescription: " + data, "fuzz.yaml"))


@settings(FUZZ, max_examples=200)
@given(st.lists(st.tuples(st.sampled_from(PATHS + ["factors.model.heads.when", "tune.space.train.lr.high", "",
                                                   "a..b", ".", "factors."]),
                          st.sampled_from(["=", "", "=="]),
                          st.one_of(st.text(max_size=15), st.sampled_from(["[1, 2]", "{", "null", "0", "-1",
                                                                           "rotation", "&a [*a]", "!!binary x"]))),
                max_size=3))
def test_fuzz_overrides(overrides):
    RAN["overrides"] += 1
    text = yaml.safe_dump(VALID)
    _outcome(lambda: design.loads(text, "fuzz.yaml", [f"{p}{eq}{v}" for p, eq, v in overrides]))


@settings(FUZZ, max_examples=60)
@given(st.integers(1, 12), st.integers(1, 12))
def test_fuzz_alias_expansion(width, depth):
    RAN["alias bombs"] += 1
    lines = ["l0: &l0 [x]"]
    for i in range(1, depth + 1):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    text = "\n".join(lines) + "\n"
    if width**depth > spec.MAX_NODES:
        with pytest.raises(spec.SpecError, match="too large after expanding aliases"):
            spec.parse_yaml(text)
    else:
        _outcome(lambda: design.loads(text, "fuzz.yaml"))


CLI_CASES = {
    "bad_utf8.yaml": b"name: \xff\xfe\x00",
    "bomb.yaml": b"a: &a [x,x,x,x,x,x,x,x,x,x]\n" + b"".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n".encode() for p, c in zip("abcdef", "bcdefg", strict=True)),
    "python_tag.yaml": b"name: !!python/object/apply:os.system ['echo pwned']\n",
    "huge_grid.yaml": yaml.safe_dump({**VALID, "tune": None, "factors": {
        "model.layers": list(range(1, 30)), "model.d_model": list(range(1, 30)), "train.lr": [0.1, 0.2, 0.3, 0.4,
                                                                                             0.5, 0.6, 0.7, 0.8,
                                                                                             0.9, 0.95, 0.99,
                                                                                             0.999, 0.9999]}}).encode(),
    "deep.yaml": b"a: " + b"[" * 3000 + b"]" * 3000,
}


def test_fuzz_cli_cases(tmp_path):
    """A few of the nastiest inputs through the real command line: exit 2, an error, no traceback."""
    env = {**os.environ, "ABLATE_HOME": str(tmp_path / "home")}
    script = ("import sys\nfrom typer.testing import CliRunner\nfrom ablate.cli import app\n"
              "codes = []\nfor path in sys.argv[1:]:\n"
              "    for cmd in ('validate', 'plan', 'run'):\n"
              "        res = CliRunner().invoke(app, [cmd, path])\n"
              "        assert res.exception is None or isinstance(res.exception, SystemExit), res.exception\n"
              "        codes.append(res.exit_code)\n"
              "        assert 'Traceback' not in res.output and 'error' in res.output, res.output\n"
              "print(codes)\n")
    paths = []
    for name, data in CLI_CASES.items():
        (tmp_path / name).write_bytes(data)
        paths.append(str(tmp_path / name))
    res = subprocess.run([sys.executable, "-c", script, *paths], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip() == str([2] * 3 * len(CLI_CASES))
    # And one real process per kind of failure: the message, exit code 2, nothing else.
    for name in ("python_tag.yaml",):
        out = subprocess.run([*ABLATE, "validate", name], capture_output=True,
                             text=True, env=env, cwd=tmp_path, timeout=60)
        assert out.returncode == 2 and out.stderr.startswith("error") and "Traceback" not in out.stderr
    assert not (tmp_path / "home").exists()  # nothing was written to any store
    RAN["command line"] += 3 * len(CLI_CASES) + 1


def test_fuzz_case_count():
    """How many fuzz cases ran in this session (each test above adds its own)."""
    total = sum(RAN.values())
    print(f"\nfuzz cases: {total} ({', '.join(f'{k}: {v}' for k, v in RAN.items())})")
    if len(RAN) >= 6:  # the whole module ran
        assert total >= 1000


def test_malformed_spec_corpus_gets_clean_errors():
    """Every spec of tests/malformed_specs.py (wrong types where a user would be surprised,
    out-of-range values, unknown, long, complex and duplicate keys, bad names, tasks too large for
    this machine, broken factors, designs, tuning, non-YAML) gets a clean SpecError."""
    import malformed_specs

    cases = malformed_specs.cases()
    verdicts = {name: malformed_specs.verdict(lambda t=text: design.loads(t, "corpus.yaml"), spec.SpecError)
                for name, text in cases}
    bad = {name: v for name, v in verdicts.items() if v[0] != "clean"}
    print(f"\nmalformed corpus: {len(cases) - len(bad)} of {len(cases)} clean")
    assert not bad, bad
    RAN["malformed corpus"] += len(cases)


@pytest.mark.parametrize("kind", ["/dev/zero", "/dev/urandom", "fifo", "folder"])
def test_validate_reads_a_bounded_number_of_bytes_whatever_the_file(tmp_path, kind):
    """``ablate validate /dev/zero`` read forever (the size limit looked at the size on disk)."""
    if kind == "fifo":
        os.mkfifo(tmp_path / "fifo")  # no writer: it reads as empty instead of blocking
    if kind == "folder":
        (tmp_path / "folder").mkdir()
    path = kind if kind.startswith("/") else str(tmp_path / kind)
    res = subprocess.run([*ABLATE, "validate", path], capture_output=True, text=True,
                         cwd=tmp_path, env={**os.environ, "ABLATE_HOME": str(tmp_path / "home")}, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    expected = {"/dev/zero": "more than 1,000,000 bytes", "/dev/urandom": "more than 1,000,000 bytes",
                "fifo": "fifo is empty", "folder": "is a folder, not a spec file"}[kind]
    assert expected in res.stderr


TYPED = {"model.d_model": int, "model.layers": int, "model.heads": int, "train.steps": int,
         "train.batch_size": int, "probes.every": int, "task.train_size": int, "train.lr": float,
         "train.weight_decay": float, "model.dropout": float, "model.bidirectional": bool, "probes.enabled": bool}
CONFUSING = st.one_of(st.booleans(), st.integers(-2, 300), st.floats(-2, 300, allow_nan=False),
                      st.sampled_from(["16", "0.1", "1e-3", "true", "yes", "2.0", " 8", "0x10"]))


@settings(FUZZ, max_examples=300)
@given(st.sampled_from(sorted(TYPED)), CONFUSING, st.booleans())
def test_fuzz_what_is_accepted_has_its_declared_type(path, value, as_text):
    """Whatever value lands on a typed path, written as YAML or quoted, a spec that loads holds
    that path's type: never a boolean for a number, never text, never a float for an integer."""
    RAN["typed values"] += 1
    raw = copy.deepcopy(VALID)
    raw.pop("tune")
    _set(raw, path, str(value) if as_text else value)
    s = _outcome(lambda: design.loads(yaml.safe_dump(raw), "fuzz.yaml"))
    if s is None:
        return
    got = spec.get_path(s.baseline() if not path.startswith("probes") else {"probes": s.probes.model_dump()}, path)
    wanted = TYPED[path]
    assert type(got) is wanted or (wanted is float and type(got) is int), (path, value, got)
