"""A corpus of malformed specs, each of which must get a clean error: a SpecError whose messages
name what is wrong in at most a couple of thousand characters, without PyYAML's node reprs — never
a traceback, never silent acceptance, never a hang.

``cases()`` lists (name, spec text as bytes); ``verdict(load)`` runs one and says ``clean``,
``accepted`` (a malformed spec passed), ``unclean`` (a SpecError unfit to show) or ``crash``
(another exception). ``python tests/malformed_specs.py`` prints the tally for the ablate on the
path (how the count before and after a change is measured).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from typing import Any

import yaml
from support import spec_dict

# support's base spec with a value at every section a case writes into (init, probes, a factor).
BASE: dict[str, Any] = spec_dict(
    name="corpus", factors={"model.layers": [1, 2]}, seeds=2, probes={"every": 5},
    sets={"model.init": {"scheme": "rotrnn"}, "train.batch_size": 8, "train.lr": 0.003})
INT_PATHS = ["model.d_model", "model.state_dim", "model.layers", "model.heads", "train.steps", "train.batch_size",
             "train.eval_every", "train.log_every", "probes.every", "probes.batch", "task.train_size",
             "task.max_length", "task.max_depth", "task.seed", "probes.white_noise_batch"]
FLOAT_PATHS = ["train.lr", "train.weight_decay", "train.warmup", "train.grad_clip", "train.recurrent_lr_factor",
               "train.divergence_norm", "model.dropout", "model.init.gamma_min", "task.op_prob"]
BOOL_PATHS = ["model.bidirectional", "probes.enabled", "probes.white_noise", "model.init.identity_basis"]
CHOICE_PATHS = ["model.family", "model.parameterisation", "model.normalisation", "model.nonlinearity",
                "model.activation", "model.norm", "model.pooling", "model.init.scheme", "task.name", "design",
                "reports"]
# YAML that reads as a wrong type where a user would be surprised if it were accepted.
NOT_AN_INT = ["true", "false", "'16'", "2.0", "1e3", "[1]", "{a: 1}", "null", "''", "sixteen", "0x10x"]
NOT_A_FLOAT = ["true", "'0.1'", "[0.1]", "{a: 1}", ".nan", ".inf", "-.inf", "1e999", "abc"]
NOT_A_BOOL = ["1", "0", "'yes'", "'true'", "2.0", "[true]", "abc"]
OUT_OF_RANGE = ["0", "-1", "-1000000"]
HUGE = ["1000000000000000000000", "99999999999"]
BOUNDED_PATHS = ["model.d_model", "model.state_dim", "model.layers", "model.heads", "train.steps", "train.batch_size",
                 "task.train_size", "task.max_length", "task.max_depth", "probes.white_noise_batch"]


def _dump(raw: Any) -> bytes:
    return yaml.safe_dump(raw, allow_unicode=True, sort_keys=False).encode()


def _set(raw: dict, path: str, text: str) -> bytes:
    """BASE with the value at ``path`` written as the YAML ``text``."""
    raw = copy.deepcopy(raw)
    *parents, key = path.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
    node[key] = "@@VALUE@@"
    return _dump(raw).replace(b"'@@VALUE@@'", text.encode())


def cases() -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for path in INT_PATHS:
        out += [(f"{path}={v}", _set(BASE, path, v)) for v in NOT_AN_INT]
        if path != "task.seed":
            out += [(f"{path}={v}", _set(BASE, path, v)) for v in OUT_OF_RANGE]
        if path in BOUNDED_PATHS:
            out += [(f"{path}={v}", _set(BASE, path, v)) for v in HUGE]
    for path in FLOAT_PATHS:
        out += [(f"{path}={v}", _set(BASE, path, v)) for v in NOT_A_FLOAT]
        out += [(f"{path}=-1", _set(BASE, path, "-1"))]
    for path in BOOL_PATHS:
        out += [(f"{path}={v}", _set(BASE, path, v)) for v in NOT_A_BOOL]
    for path in CHOICE_PATHS:
        out += [(f"{path}={v}", _set(BASE, path, v)) for v in ("nope", "1", "true", "[]", "{a: b}", "null")
                if not (path == "reports" and v == "[]")]
    # Unknown, long, complex and duplicate keys at each level.
    for parent in ("", "model.", "train.", "probes.", "task.", "model.init.", "factors."):
        out.append((f"unknown {parent}zzz", _set(BASE, f"{parent}zzz", "1")))
        out.append((f"long key in {parent or 'top'}", _set(BASE, f"{parent}{'k' * 2000}", "1")))
    big = "k" * 100_000
    out.append(("100k-character key", b"name: x\ntask: {name: listops}\nmodel:\n  ? " + big.encode() + b"\n  : 1\n"))
    out.append(("100k-character duplicate keys", b"name: x\ntask: {name: listops}\n? " + big.encode() + b"\n: 1\n? "
                + big.encode() + b"\n: 2\n"))
    out.append(("100k-character factor name", _dump({**BASE, "factors": {big: {"A": {"model.layers": 1}}}})))
    out.append(("100k-character level label", _dump({**BASE, "factors": {"model.layers": {big: 1, "b": 2}}})))
    out.append(("100k-character value", _set(BASE, "model.norm", "'" + big + "'")))
    out.append(("100k-character name", _set(BASE, "name", big)))
    for key in ("{a: 1}", "[a, b]", "1", "true", "null", "2024-01-01", "1.5"):
        out.append((f"key {key}", b"name: x\ntask: {name: listops}\nmodel: {? " + key.encode() + b" : 2}\n"))
    out.append(("duplicate top key", _dump(BASE) + b"model: {}\n"))
    out.append(("duplicate nested key", b"name: x\ntask: {name: listops}\nmodel: {layers: 1, layers: 2}\n"))
    # Names and tasks.
    for name in ("''", "'-x'", "'a b'", "'a/b'", "'" + "a" * 600 + "'", "'é'", "null", "3", "'..'"):
        out.append((f"name={name[:20]}", _set(BASE, "name", name)))
    for task in ("nope", "{}", "{name: nope}", "[listops]", "null", "{name: listops, train_size: 1000000000000}",
                 "{name: listops, max_length: 10000000}", "{name: adding, seq_len: 1000000, train_size: 10000000}",
                 "{name: listops, min_length: 50, max_length: 40}", "{name: [listops]}"):
        out.append((f"task={task[:40]}", _set(BASE, "task", task)))
    # Factors, designs, constraints.
    for factors in ("[]", "{model.layers: []}", "{model.layers: [1, 1]}", "{model.zzz: [1, 2]}", "{'': [1]}",
                    "{model.layers: {levels: [1, 2], when: {zzz: 1}}}", "{model.layers: {levels: []}}",
                    "{variant: {A: {model.zzz: 1}}}", "{variant: {A: 1}}", "{model.layers: [1, true]}",
                    "{model.layers: ['1', 2]}", "{model.layers: [{label: a, value: 1}, {label: a, value: 2}]}",
                    "{model.heads: [3]}", "{model.state_dim: [7]}", "{train.lr: [-1]}", "{model: [1]}",
                    "{model.layers: {levels: [1, 2], when: {model.layers: 1}}}", "{task.name: [nope]}",
                    "{model.layers: [1, 2], model.d_model: " + str(list(range(1, 200))) + ", train.steps: "
                    + str(list(range(1, 200))) + "}"):
        out.append((f"factors={factors[:40]}", _set(BASE, "factors", factors)))
    for extra in ("design: cells\n", "design: nope\n", "cells: [{model.layers: 3}]\n", "cells: [{zzz: 1}]\n",
                  "exclude: [{model.layers: [1, 2]}]\n", "include: [{model.layers: 9}]\n", "exclude: [{zzz: 1}]\n",
                  "seeds: 0\n", "seeds: -1\n", "seeds: true\n", "seeds: [1, 1]\n", "seeds: []\n", "seeds: 1000000\n",
                  "seeds: [-1]\n", "seeds: '3'\n", "seeds: 2.0\n", "reports: [nope]\n", "reports: nope\n",
                  "extends: nope.yaml\n", "extends: [3]\n", "extends: /dev/zero\n", "references: [{value: 1}]\n",
                  "references: [{value: 0.5, source: x, cell: {zzz: 1}}]\n", "references: [{value: x, source: y}]\n"):
        out.append((f"extra {extra.strip()[:40]}", _dump(BASE) + extra.encode()))
    for tune in ("{trials: 0, space: {train.lr: [0.1]}}", "{trials: 2, space: {}}",
                 "{trials: 2, space: {train.lr: {low: 1, high: 0}}}", "{trials: 2, space: {train.lr: {low: 0, "
                 "high: 1, log: true}}}", "{trials: 2, space: {train.lr: []}}", "{trials: 2, space: {zzz: [1]}}",
                 "{trials: 2, space: {model.layers: [1, 2]}}", "{trials: 2, sampler: nope, space: {train.lr: [0.1]}}",
                 "{trials: true, space: {train.lr: [0.1]}}", "{trials: 2, seeds: [0], space: {train.lr: [0.1]}}",
                 "{trials: 2, space: {train.steps: {low: 1.5, high: 3}}}", "{trials: 2, space: {model.norm: "
                 "{low: 1, high: 2}}}", "{trials: 2, objective: {metric: test_accuracy}, space: {train.lr: [0.1]}}"):
        out.append((f"tune={tune[:40]}", _set(BASE, "tune", tune)))
    # Not YAML, or YAML that is not plain data.
    for text in (b"name: [unclosed\n", b"name: x\n\ttask: 1\n", b"a: b: c\n", b"- a\nb: 1\n", b"{", b"'",
                 b"name: !!python/object/apply:os.system ['true']\n", b"name: !!binary aGk=\n", b"x: !custom 1\n",
                 b"a: &a [*a]\n", b"a: &a [x]\nb: [*a, *a, *b]\n", b"\xff\xfe\x00", b"name: \xc3\x28\n",
                 b"a: " + b"[" * 5000 + b"]" * 5000, b"---\na: 1\n---\nb: 2\n", b"%YAML 9.9\n---\na: 1\n",
                 b"3\n", b"[1, 2]\n", b"null\n", b"", b"\x00\x00\x00", b"name: x\ntask: {name: listops}\n" + b"#" * 1_000_001,
                 b"a: &a [x,x,x,x,x,x,x,x,x,x]\n" + b"".join(f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n".encode()
                                                          for p, c in zip("abcdef", "bcdefg", strict=True))):
        out.append((f"text {text[:20]!r}", text))
    return out


def verdict(load: Callable[[], Any], spec_error: type[BaseException]) -> tuple[str, str]:
    """(clean / accepted / unclean / crash, what was said)."""
    try:
        load()
    except spec_error as exc:
        text = str(exc)
        problems = getattr(exc, "problems", [])
        if not problems or any(not msg for _, msg in problems):
            return "unclean", text[:300]
        longest = max(len(path) + len(msg) for path, msg in problems)
        if longest > 2_500:
            return "unclean", f"a problem of {longest:,} characters"
        if any(marker in text for marker in ("Node(", "tag:yaml.org", "Traceback", "<object")):
            return "unclean", text[:300]
        return "clean", text[:300]
    except Exception as exc:  # noqa: BLE001 (what is being measured)
        return "crash", f"{type(exc).__name__}: {str(exc)[:200]}"
    return "accepted", ""


def main() -> None:
    from collections import Counter

    from ablate import design
    from ablate.spec import SpecError

    tally: Counter = Counter()
    for name, text in cases():
        kind, said = verdict(lambda text=text: design.loads(text, "corpus.yaml"), SpecError)
        tally[kind] += 1
        if kind != "clean" and "-v" in sys.argv:
            print(f"{kind:9} {name[:60]!r}: {said[:160]!r}")
    total = sum(tally.values())
    print(f"{tally['clean']} of {total} malformed specs got a clean error ({dict(tally)})")


if __name__ == "__main__":
    main()
