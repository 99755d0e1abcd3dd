"""Spec files (``ablate.spec.files``): file:line in errors, ``extends`` chains, ``--set`` overrides,
and shape-only reading (``spec.read``) beside the whole validation (``design.load``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from support import BASE

from ablate import design, spec

GOOD = textwrap.dedent("""\
    name: t
    task: {name: listops, max_length: 40, train_size: 100, val_size: 50, test_size: 50}
    model:
      d_model: 16
      state_dim: 8
      layers: 1
    train: {steps: 5}
    factors:
      model.normalisation: [xi, gamma]
      model.layers: [1, 2]
    seeds: 2
""")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def load_error(path: Path, overrides: list[str] | None = None) -> str:
    with pytest.raises(spec.SpecError) as info:
        design.load(path, overrides)
    return str(info.value)


def test_errors_carry_file_and_line(tmp_path):
    path = write(tmp_path, "s.yaml", GOOD.replace("[xi, gamma]", "[xi, zeta]").replace("layers: 1", "layer: 1"))
    msg = load_error(path)
    assert f"{path}:9: factors.model.normalisation[1]: 'zeta' is not one of: xi, gamma" in msg or \
        f"{path}:6: model.layer: unknown key; did you mean 'layers'?" in msg
    path = write(tmp_path, "s.yaml", GOOD.replace("[xi, gamma]", "[xi, zeta]"))
    assert load_error(path) == (f"{path}:9: factors.model.normalisation[1]: 'zeta' is not one of: "
                                "xi, gamma, gamma_recomputed, none; or a plug-in as package.module:attribute")
    path = write(tmp_path, "s.yaml", GOOD.replace("layers: 1", "layer: 1"))
    assert load_error(path).startswith(f"{path}:6: model.layer: unknown key; did you mean 'layers'?")


def test_file_limits_and_what_a_file_must_hold(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (spec.MAX_BYTES + 10))
    assert "a spec is at most" in load_error(big)
    assert "cannot read" in load_error(tmp_path / "missing.yaml")
    empty = write(tmp_path, "empty.yaml", "")
    assert load_error(empty) == f"{empty} is empty: a spec holds at least its name and task (see studies/quickstart.yaml)"
    scalar = write(tmp_path, "scalar.yaml", "3\n")
    assert "must be a mapping" in load_error(scalar)


def test_extends_chain_merges_and_locates_errors(tmp_path):
    write(tmp_path, "base.yaml", GOOD)
    write(tmp_path, "sub/mid.yaml", "") if False else (tmp_path / "sub").mkdir()
    write(tmp_path, "sub/mid.yaml", """\
        extends: ../base.yaml
        name: mid
        model: {layers: 2}
        factors: {model.layers: null}
    """)
    child = write(tmp_path, "sub/child.yaml", """\
        extends: mid.yaml
        name: child
        model: {init: {scheme: ring, r_min: 0.5}}
        train: {steps: 7}
    """)
    s = design.load(child)
    assert s.name == "child" and s.model.d_model == 16 and s.model.layers == 2 and s.train.steps == 7
    assert list(s.factors) == ["model.normalisation"]  # null removed the inherited factor
    assert s.model.init.scheme == "ring" and s.model.init.r_min == 0.5  # a new scheme replaces the mapping
    assert s.model_dump().get("extends") is None
    bad = write(tmp_path, "sub/bad.yaml", "extends: mid.yaml\ntrain: {steps: 0}\n")
    assert load_error(bad) == f"{bad}:2: train.steps: must be ≥ 1; got 0 — optimiser steps"
    # An error written in a base file points at the base file.
    write(tmp_path, "base2.yaml", GOOD.replace("d_model: 16", "d_model: -1"))
    child2 = write(tmp_path, "child2.yaml", "extends: base2.yaml\nname: c2\n")
    assert load_error(child2).startswith(f"{(tmp_path / 'base2.yaml').resolve()}:4: model.d_model:")


def test_extends_errors(tmp_path):
    a = write(tmp_path, "a.yaml", "extends: b.yaml\nname: a\n")
    write(tmp_path, "b.yaml", "extends: c.yaml\n")
    write(tmp_path, "c.yaml", "extends: a.yaml\n")
    msg = load_error(a)
    assert msg == f"{tmp_path / 'c.yaml'}:1: extends: a cycle: a.yaml → b.yaml → c.yaml → a.yaml"
    self_ref = write(tmp_path, "self.yaml", "extends: self.yaml\n")
    assert "a cycle: self.yaml → self.yaml" in load_error(self_ref)
    missing = write(tmp_path, "m.yaml", "name: m\nextends: nope.yaml\n")
    assert f"{missing}:2: extends: cannot read 'nope.yaml'" in load_error(missing)
    typed = write(tmp_path, "t.yaml", "extends: {a: 1}\n")
    assert "extends: must be a file name or a list of file names" in load_error(typed)
    with pytest.raises(spec.SpecError, match="only a spec file can extend"):
        design.validate({"extends": "x.yaml", "name": "x"})


def test_extends_from_text_resolves_against_base_dir(tmp_path):
    write(tmp_path, "base.yaml", GOOD)
    s = design.loads("extends: base.yaml\nname: from-text\n", base_dir=tmp_path)
    assert s.name == "from-text" and s.seed_list == [0, 1]


def test_overrides_reach_dotted_factor_and_space_keys(tmp_path):
    path = write(tmp_path, "s.yaml", GOOD + "tune: {trials: 2, space: {train.lr: {low: 1.0e-4, high: 1.0e-2}}}\n")
    s = design.load(path, ["factors.model.normalisation=[xi, gamma, none]", "train.steps=9",
                         "tune.space.train.lr.high=0.1", "factors.model.heads.levels=[1, 2]",
                         "factors.model.heads.when={model.parameterisation: rotation}"])
    assert s.factors["model.normalisation"] == ["xi", "gamma", "none"]
    assert s.factors["model.heads"] == {"levels": [1, 2], "when": {"model.parameterisation": "rotation"}}
    assert s.tune.space["train.lr"].high == 0.1 and s.train.steps == 9
    assert len(design.cells(s)) == 3 * 2 * 2
    msg = load_error(path, ["train.steps=0"])
    assert msg == "--set train.steps: must be ≥ 1; got 0 — optimiser steps"
    assert "is not of the form path=value" in load_error(path, ["train.steps"])
    assert "cannot set inside 'name'" in load_error(path, ["name.x=1"])
    assert "not valid YAML" in load_error(path, ["train.steps=[1"])



def test_overrides_apply_and_parse_yaml_values():
    raw = spec.apply_overrides(BASE, ["train.steps=7", "model.parameterisation=complex_diagonal", "seeds=[4, 5]"])
    s = design.validate(raw)
    assert s.train.steps == 7 and s.model.parameterisation == "complex_diagonal" and s.seed_list == [4, 5]


def test_read_checks_the_shape_and_load_everything(tmp_path):
    """spec.read is shape-only; design.load also checks what the design implies; both locate errors."""
    path = write(tmp_path, "s.yaml", GOOD.replace("[xi, gamma]", "[xi, zeta]"))
    assert spec.read(path).factors["model.normalisation"] == ["xi", "zeta"]
    assert load_error(path).startswith(f"{path}:9: factors.model.normalisation[1]: 'zeta'")
    with pytest.raises(spec.SpecError) as info:
        spec.read(path, ["train.steps=0"])
    assert str(info.value) == "--set train.steps: must be ≥ 1; got 0 — optimiser steps"
    s = spec.reads(GOOD, "text.yaml", ["model.layers=3"])
    assert s.model.layers == 3 and list(s.factors) == ["model.normalisation", "model.layers"]
    raw, origins = spec.read_raw(path, ["train.steps=9"])
    assert raw["train"] == {"steps": 9} and origins["train.steps"] == "--set train.steps"
    assert origins["factors.model.normalisation"] == f"{path}:9"


def test_an_error_in_a_multirun_level_names_the_m_the_user_typed(tmp_path):
    from ablate.spec.files import multirun_overrides

    path = write(tmp_path, "s.yaml", "name: s\ntask: {name: listops}\n")
    said = load_error(path, multirun_overrides(["model.heds=1,2"]))
    assert said.startswith("-m model.heds: factors.model.heds: 'heds' is not a key of the baseline"), said
    assert load_error(path, multirun_overrides(["train.lr=[1,2"])).startswith("-m train.lr is not valid YAML")
    assert load_error(path, ["train.lr=abc"]).startswith("--set train.lr: must be a number")


def test_a_list_replaced_from_the_command_line_takes_its_items_lines_with_it(tmp_path):
    """-m or --set replacing a list that the file also wrote: an error in one of its items is the
    command line's, not the file's line of the item it replaced."""
    from ablate.spec.files import multirun_overrides

    path = write(tmp_path, "s.yaml", GOOD)
    assert design.load(path).origins["factors.model.normalisation[1]"] == f"{path}:9"  # for the plug-in contract
    said = load_error(path, multirun_overrides(["model.normalisation=xi,zeta"]))
    assert said.startswith("-m model.normalisation: factors.model.normalisation[1]: 'zeta'"), said
    said = load_error(path, ["factors.model.normalisation=[xi, zeta]"])
    assert said.startswith("--set factors.model.normalisation: factors.model.normalisation[1]: 'zeta'"), said
    said = load_error(path, ["seeds=[1, x]"])
    assert said.startswith("--set seeds: seeds"), said
    raw, origins = spec.read_raw(path, multirun_overrides(["model.normalisation=xi,zeta"]))
    assert not any(k.startswith("factors.model.normalisation[") for k in origins)


def test_a_problem_of_the_whole_factors_mapping_names_the_m_that_added_a_factor_to_it(tmp_path):
    """Two cells training one model is a problem of ``factors`` as a whole: the file's line that
    opened it and the ``-m`` that added the factor both wrote it. Naming the file alone sent the
    user to a file that does not hold model.heads; with no factors in the file it named nothing."""
    from ablate.spec.files import multirun_overrides

    lru_gamma = GOOD.replace("  layers: 1\n", "  layers: 1\n  parameterisation: complex_diagonal\n"
                                              "  normalisation: gamma\n  init: {scheme: ring}\n")
    lru_gamma = lru_gamma.replace("  model.normalisation: [xi, gamma]\n", "  model.d_model: [16, 32]\n")
    path = write(tmp_path, "s.yaml", lru_gamma)
    line = next(i for i, text in enumerate(lru_gamma.splitlines(), 1) if text == "factors:")
    said = load_error(path, multirun_overrides(["model.heads=1,4"]))
    assert said.startswith(f"{path}:{line} and -m model.heads: factors: the cell ("), said
    assert "does not read model.heads" in said
    alone = write(tmp_path, "alone.yaml", lru_gamma.split("factors:")[0] + "seeds: 2\n")
    said = load_error(alone, multirun_overrides(["model.heads=1,4"]))
    assert said.startswith("-m model.heads: factors: the cell ("), said


def test_locate_takes_the_longest_prefix_and_the_command_lines_keys_inside_it():
    from ablate.spec.files import locate

    origins = {"model": "s.yaml:3", "model.layers": "s.yaml:5", "factors": "s.yaml:9",
               "factors.model.layers": "-m model.layers", "factors.train.lr": "--set factors.train.lr"}
    problems = [("model.layers", "x"), ("model.heads", "x"), ("factors.model.layers[1]", "x"), ("factors", "x"),
                ("seeds", "x")]
    found = locate(spec.SpecError(problems), origins).where
    assert found == ["s.yaml:5", "s.yaml:3", "-m model.layers",
                     "s.yaml:9, -m model.layers and --set factors.train.lr", None]
