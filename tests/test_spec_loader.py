"""The YAML loader (``ablate.spec.loader``): safe, bounded, strict, with line numbers."""

from __future__ import annotations

import pytest

from ablate import spec


def test_yaml_tags_refused_and_syntax_errors_located():
    with pytest.raises(spec.SpecError, match="not valid YAML"):
        spec.parse_yaml("name: !!python/object/apply:os.system ['true']")
    with pytest.raises(spec.SpecError, match=r"line 2"):
        spec.parse_yaml("name: a\n  bad: [1\n")
    with pytest.raises(spec.SpecError, match="not UTF-8"):
        spec.parse_yaml(b"name: \xff\xfe")


def test_duplicate_keys_and_non_text_keys_are_errors():
    with pytest.raises(spec.SpecError, match=r"line 3.*duplicate key 'model' \(first at line 2\)"):
        spec.parse_yaml("name: a\nmodel: {}\nmodel: {}\n")
    with pytest.raises(spec.SpecError, match="duplicate key 'layers'"):
        spec.parse_yaml("model: {layers: 1, layers: 2}\n")
    with pytest.raises(spec.SpecError, match="mapping keys must be text; 'no' reads as False"):
        spec.parse_yaml("no: 1\n")
    # Merge keys are not duplicates: the explicit key wins, as YAML says.
    assert spec.parse_yaml("a: &a {x: 1, y: 2}\nb: {<<: *a, x: 3}\n")["b"] == {"x": 3, "y": 2}


def test_tags_other_than_plain_data_are_refused():
    for text in ("name: !!python/object/apply:os.system ['true']", "x: !!python/name:os.system",
                 "x: !!binary aGVsbG8=", "x: !!set {a, b}", "x: !!timestamp 2024-01-01", "x: !custom 3",
                 "x: !!omap [{a: 1}]"):
        with pytest.raises(spec.SpecError, match="is not allowed: a spec holds plain data"):
            spec.parse_yaml(text)
    assert spec.parse_yaml("d: 2024-01-01\nn: !!str 3\n") == {"d": "2024-01-01", "n": "3"}  # dates stay text


def test_alias_bombs_recursion_and_depth_are_bounded():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for i, name in enumerate("bcdefgh"):
        prev = "abcdefgh"[i]
        bomb += f"{name}: &{name} [{', '.join(['*' + prev] * 10)}]\n"
    with pytest.raises(spec.SpecError, match="too large after expanding aliases"):
        spec.parse_yaml(bomb)
    with pytest.raises(spec.SpecError, match="an alias refers to itself"):
        spec.parse_yaml("a: &a [1, *a]\n")
    with pytest.raises(spec.SpecError, match="nesting deeper than"):
        spec.parse_yaml("a: " + "[" * 60 + "]" * 60)
    with pytest.raises(spec.SpecError, match="nesting"):
        spec.parse_yaml("a: " + "[" * 5000 + "]" * 5000)
    # Modest aliases are fine.
    assert spec.parse_yaml("a: &a [1, 2]\nb: *a\n") == {"a": [1, 2], "b": [1, 2]}


def test_non_utf8_is_refused():
    with pytest.raises(spec.SpecError, match="not UTF-8"):
        spec.parse_yaml(b"name: \xff\xfe")


def test_line_numbers_follow_key_paths():
    data, lines = spec.parse_yaml_lines("name: a\nmodel:\n  layers: 2\nfactors:\n  model.heads: [1, 2]\n")
    assert data["factors"] == {"model.heads": [1, 2]}
    assert lines == {"name": 1, "model": 2, "model.layers": 3, "factors": 4, "factors.model.heads": 5,
                     "factors.model.heads[0]": 5, "factors.model.heads[1]": 5}
    with pytest.raises(spec.SpecError, match="is 1,000,001 bytes; a spec is at most 1,000,000"):
        spec.parse_yaml("#" * (spec.MAX_BYTES + 1))


def test_yaml_12_floats_without_a_dot_are_numbers():
    """PyYAML (YAML 1.1) reads ``lr: 3e-3`` as text; users write it: it is a float here."""
    data = spec.parse_yaml("a: 3e-3\nb: 1E5\nc: -2e+3\nd: .5e-2\ne: 3.0e-3\nf: 12\ng: 1e3x\nh: '1e-3'\ni: 1_0e2\n")
    assert data == {"a": 3e-3, "b": 1e5, "c": -2e3, "d": 0.5e-2, "e": 3e-3, "f": 12, "g": "1e3x", "h": "1e-3",
                    "i": 1e3}
    assert isinstance(data["b"], float) and isinstance(data["f"], int)


def test_keys_in_messages_are_described_and_shortened():
    with pytest.raises(spec.SpecError) as info:
        spec.parse_yaml("model: {? {a: 1}: 2}\n")
    assert "this key is a mapping" in str(info.value) and "Node" not in str(info.value)
    with pytest.raises(spec.SpecError, match="this key is a list"):
        spec.parse_yaml("? [a, b]\n: 1\n")
    key = "k" * 100_000
    with pytest.raises(spec.SpecError) as info:
        spec.parse_yaml(f"? {key}\n: 1\n? {key}\n: 2\n")
    assert "duplicate key" in str(info.value) and len(str(info.value)) < 300
    with pytest.raises(spec.SpecError, match=r"at most 1024 characters"):
        spec.parse_yaml("model: {" + key + ": 1}\n")
