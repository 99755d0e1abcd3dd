"""Timing tools the benchmark scripts share (not part of the ablate package): ``harness.ops`` the
scan benchmark and the scan clocks, ``harness.models`` the layer and training-step tables.

The scripts in benchmarks/ import it as ``harness`` (their own folder is first on ``sys.path``
when run as ``python benchmarks/<script>.py``)."""
