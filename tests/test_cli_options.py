"""The shared options refuse, as a usage error (exit 2) before anything is read or written, a
device this machine lacks, a store URL of a kind no store opens, absurd worker counts and a
negative checkpoint interval."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ablate import cli_options
from ablate.stores import BadStoreUrl, checked_urls, resolve

ROOT = Path(__file__).resolve().parents[1]
SPEC = str(ROOT / "studies" / "quickstart.yaml")


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """An ABLATE_HOME that must not be created; cwd in tmp_path so nothing else is either."""
    monkeypatch.chdir(tmp_path)
    for var in ("ABLATE_STORAGE", "ABLATE_TRACKING_URI"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def cli(*args: str):
    from typer.testing import CliRunner

    from ablate.cli import app

    return CliRunner().invoke(app, list(args))


def refused(res, *words: str) -> None:
    """Exit 2 with a message naming each of ``words`` (rich wraps the box: compare unwrapped)."""
    flat = " ".join(line.strip(" │╭╮╰╯─") for line in res.output.splitlines())
    assert res.exit_code == 2, res.output
    for word in words:
        assert word in " ".join(flat.split()), (word, res.output)


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "CPU", "", "cuda:-1", "mps"])
def test_a_device_that_is_no_device_is_refused_naming_the_valid_ones(home, device) -> None:
    refused(cli("run", SPEC, "--device", device), "is not a device", "cpu, cuda, cuda:k, auto")
    refused(cli("worker", "x", "--device", device), "valid are cpu, cuda, cuda:k")
    refused(cli("plan", SPEC, "--estimate", "--device", device), "is not a device")
    assert not home.exists() and not list(home.parent.iterdir())


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_cuda_on_a_machine_without_it_is_refused_before_anything_is_queued(home) -> None:
    refused(cli("run", SPEC, "--device", "cuda"), "sees no CUDA device", "valid here: cpu, auto")
    refused(cli("worker", "x", "--device", "cuda:0"), "sees no CUDA device", "valid here: cpu")
    assert not home.exists()


def test_auto_and_cpu_are_devices_wherever_run_is() -> None:
    assert cli_options.checked_device("cpu") == "cpu"
    assert cli_options.checked_device("auto", auto=True) == "auto"
    with pytest.raises(Exception, match="is not a device"):
        cli_options.checked_device("auto")  # a worker has one device, not a pool's choice


def test_more_local_workers_than_four_per_core_are_refused(home, monkeypatch) -> None:
    monkeypatch.setattr(cli_options.os, "cpu_count", lambda: 2)
    refused(cli("run", SPEC, "--workers", "100000"), "100000 local workers on 2 cores: at most 8")
    refused(cli("plan", SPEC, "--estimate", "--workers", "9"), "at most 8")
    refused(cli("run", SPEC, "--checkpoint-every", "-5"), "--checkpoint-every")
    assert not home.exists()
    assert cli_options.checked_workers(8) == 8


@pytest.mark.parametrize(("option", "url", "said"), [
    ("--storage", "nope://", "unknown database kind 'nope' in storage URL nope://; expected e.g. postgresql+psycopg"),
    ("--storage", "postgres://u@h/d", "unknown database kind 'postgres' in storage URL postgres://u@h/d (did you mean "
                                      "'postgresql'?)"),
    ("--storage", "postgresql+psycopg//u@h/d", "malformed storage URL postgresql+psycopg//u@h/d (a missing ':'"),
    ("--storage", "optuna.db", "malformed storage URL optuna.db"),
    ("--tracking-uri", "ftp://x", "unknown store kind 'ftp' in tracking URI ftp://x; expected e.g. a folder, "
                                  "sqlite:///PATH"),
    ("--tracking-uri", "http//h:5000", "malformed tracking URI http//h:5000"),
])
def test_a_store_url_of_a_kind_no_store_opens_is_refused_by_every_command(home, option, url, said) -> None:
    commands = [["run", SPEC], ["plan", SPEC], ["status", "x"], ["ls"], ["rm", "x", "--yes"]]
    for args in [*commands, *([["gc"]] if option == "--storage" else [])]:
        res = cli(*args, option, url)
        assert res.exit_code == 2 and res.output.startswith(f"error {said}"), (args, res.output)
        assert len(res.output.splitlines()) == 1  # one line, as every store error
    assert not home.exists()


def test_a_bad_url_from_the_environment_is_refused_too(home, monkeypatch) -> None:
    monkeypatch.setenv("ABLATE_TRACKING_URI", "ftp://user:secret@x")
    res = cli("status", "x")
    assert res.exit_code == 2 and "unknown store kind 'ftp'" in res.output and "secret" not in res.output
    assert not home.exists()


def test_the_store_urls_ablate_uses_pass() -> None:
    for storage in ("sqlite:///x.db", "postgresql+psycopg://u:p@h:5432/d", "mysql://h/d", None):
        checked_urls(storage, None)
    for tracking in ("sqlite:///m.db", "postgresql://h/d", "http://h:5000", "https://h", "file:///tmp/r",
                     "mlruns", "/abs/folder", "databricks", None):
        checked_urls(None, tracking)
    with pytest.raises(BadStoreUrl):
        resolve("sqlite:///x.db", "gopher://x", create=False)


def test_an_empty_spec_path_is_refused_as_empty_by_every_command_taking_a_spec(home) -> None:
    # Typer's Path read "" as ".", and the commands answered ". is a folder, not a spec file".
    for args, named in ((["validate", ""], "FILE"), (["plan", ""], "FILE"), (["run", "", "--workers", "0"], "FILE"),
                        (["compare", "--spec", ""], "--spec")):
        res = cli(*args)
        assert res.exit_code == 2, (args, res.output)
        assert res.output == f"error {named} is an empty path: give the path of a spec file\n", (args, res.output)
    assert not list(home.parent.iterdir())  # nothing written, not even the home folder


def test_version_names_ablate_and_torch_without_importing_torch() -> None:
    import subprocess
    import sys
    from importlib.metadata import version

    import ablate

    code = ("import sys; from typer.testing import CliRunner; from ablate.cli import app; "
            "r = CliRunner().invoke(app, ['--version']); print(r.exit_code, r.output.strip(), 'torch' in sys.modules)")
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert said == f"0 ablate {ablate.__version__}, torch {version('torch')} False"


def test_help_shows_no_type_after_a_flag_and_plain_argument_names_in_usage() -> None:
    def usage(*cmd: str) -> str:
        res = cli(*cmd, "--help")
        assert res.exit_code == 0 and "<bool>" not in res.output, res.output
        return next(line for line in res.output.splitlines() if "Usage:" in line).split("[OPTIONS]")[1].strip()

    assert "<int range>" in cli("run", "--help").output  # an option taking a value keeps its type
    assert usage("run") == usage("plan") == "FILE"
    assert (usage("report"), usage("export"), usage("keep")) == ("[STUDY...]", "STUDY... DIR", "STUDY NEW")
    assert usage() == "COMMAND [ARGS]..."


def test_verbose_says_what_it_adds_to_each_command() -> None:
    def said(cmd: str) -> str:
        flat = " ".join(line.strip(" │╭╮╰╯─") for line in cli(cmd, "--help").output.splitlines())
        return " ".join(flat.split())

    assert "also print every item event (start, complete, …) as a line" in said("run")
    assert "also print each item's start and end (other events are printed anyway)" in said("worker")
