"""deploy/kubernetes: every manifest validated offline against the Kubernetes API schemas that
kubernetes-validate ships (strict: a misspelt field is an error, as `kubectl apply` rejects it),
since no cluster can run here; a broken copy shows the check can fail."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")

MANIFESTS = sorted((Path(__file__).resolve().parents[1] / "deploy" / "kubernetes").glob("*.yaml"))


def resources(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def validate(resource: dict) -> None:
    kubernetes_validate.validate(resource, kubernetes_validate.latest_version(), strict=True)


def test_there_are_manifests_each_with_resources():
    assert len(MANIFESTS) >= 4, MANIFESTS
    assert all(resources(p) for p in MANIFESTS)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_each_manifest_is_valid_against_the_kubernetes_schemas(path: Path):
    for resource in resources(path):
        validate(resource)


def test_a_broken_manifest_fails(tmp_path: Path):
    """A Job with a misspelt container field and a string where a count goes, written to
    a copy: both are rejected."""
    source = next(p for p in MANIFESTS if any(r["kind"] == "Job" for r in resources(p)))
    job = next(r for r in resources(source) if r["kind"] == "Job")
    typo = yaml.safe_load(yaml.safe_dump(job))
    container = typo["spec"]["template"]["spec"]["containers"][0]
    container["imagee"] = container.pop("image")
    wrong_type = yaml.safe_load(yaml.safe_dump(job))
    wrong_type["spec"]["backoffLimit"] = "three"
    for broken in (typo, wrong_type):
        copy = tmp_path / source.name
        copy.write_text(yaml.safe_dump(broken))
        with pytest.raises(kubernetes_validate.ValidationError):
            validate(resources(copy)[0])
