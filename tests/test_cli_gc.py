"""`ablate gc`: the stable-phase checkpoints WSD runs keep are removed once no study has their
cell, all of them with --all, none without a store to ask (ablate.runner.phases.kept_checkpoints)."""

from __future__ import annotations

import yaml
from support import kept_checkpoint
from test_cli import BASE, cli

from ablate.runner import phases, queue
from ablate.runner import study as st


def test_gc_removes_the_checkpoints_of_cells_no_study_has(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("ABLATE_HOME", str(home))
    monkeypatch.delenv("ABLATE_CHECKPOINT_DIR", raising=False)
    monkeypatch.delenv("ABLATE_STORAGE", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    root = home / "checkpoints"
    gone = kept_checkpoint(root, "deadbeef0000", size=3 * 2**20)
    assert cli("gc", "--yes").exit_code == 1  # no store yet: cannot tell which cells are studied

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({**BASE, "name": "gcstudy", "factors": {"model.normalisation": ["xi"]}, "seeds": 1}))
    queued = cli("run", str(spec), "--workers", "0")
    assert queued.exit_code == 0, queued.output
    found = queue.find(st.storage(f"sqlite:///{home / 'optuna.db'}"), None, (), ("cell_id",))
    studied = {e.user_attrs["cell_id"] for e in found if e.user_attrs.get("cell_id")}
    assert len(studied) == 1
    stays = [kept_checkpoint(root, next(iter(studied)), seed=s) for s in (0, 1)]
    assert len(phases.kept_checkpoints(root)) == 3

    res = cli("gc", "--yes")
    assert res.exit_code == 0, res.output
    assert "removed 1 kept checkpoint, 3.0 MiB; kept 2" in res.output
    assert not gone.exists() and not gone.with_suffix(".json").exists() and not gone.parent.parent.exists()
    assert all(p.exists() for p in stays)
    again = cli("gc", "--yes")
    assert again.exit_code == 0 and "nothing to remove" in again.output

    assert cli("gc", "--all").exit_code == 1 and all(p.exists() for p in stays)  # no terminal, no --yes
    res = cli("gc", "--all", "--yes")
    assert res.exit_code == 0 and "removed 2 kept checkpoints" in res.output
    assert phases.kept_checkpoints(root) == []
    assert not any((root / "stable").rglob("*.pt"))
