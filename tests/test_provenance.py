"""Provenance: what a trial records of the code that produced it, plug-ins included."""

from __future__ import annotations

from ablate import plugins, provenance


def test_record_names_the_installed_plugins_and_their_distributions() -> None:
    tags = provenance.record("cpu")
    assert tags["ablate.version.torch"] and tags["ablate.device"].startswith("cpu")
    installed = plugins.installed()
    assert installed, "the example plug-in package (examples/ablate-cayley) is installed by scripts/setup.sh"
    for plugin in installed:
        tag = tags[f"ablate.plugin.{plugin.kind}.{plugin.name}"]
        assert tag.startswith(plugin.target) and plugins.source_hash(plugin) in tag
        assert tags[f"ablate.version.{plugin.distribution}"] == plugin.version
