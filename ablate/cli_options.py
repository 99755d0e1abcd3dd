"""The options several ``ablate`` commands share, and the checks typer runs on a value as it
parses it: a value no command could use is a usage error (exit 2) before anything is read or
written, rather than a study queued and then failed by every worker."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperArgument, TyperOption

from ablate.stores import BadStoreUrl, checked_urls
from ablate.terminal import PipeConsole, Refused, store_refused
from ablate.terminal import count as plural

# Local workers beyond this many per core only take turns on the cores, each holding its own
# imports and model in memory; more workers belong on more machines (`ablate worker`).
WORKERS_PER_CORE = 4


# Typer's rich help writes a type after every option, "<bool>" after a flag, which takes no
# value; and names a required argument "{file}" in the usage line, where braces read as a choice.
# Both are changed here, for every command; tests/test_cli_options.py checks the help says neither.
_typed = TyperOption.display_type_rich


def _option_type(self: TyperOption, ctx: Any) -> str | None:
    return None if self.is_flag else _typed(self, ctx)


def _usage_name(self: TyperArgument) -> str:
    name = self.metavar or self.name.upper()
    name = name if self.required else f"[{name}]"
    return name if self.nargs == 1 or self.metavar else f"{name}..."  # a metavar says it itself, as in the panel


TyperOption.display_type_rich = _option_type  # type: ignore[method-assign]
TyperArgument._usage_display_name = _usage_name  # type: ignore[method-assign]

_DEVICE = re.compile(r"cpu|cuda(:\d+)?")


def max_workers() -> int:
    """The most local worker processes ``ablate run`` starts on this machine."""
    return WORKERS_PER_CORE * (os.cpu_count() or 1)


def checked_device(value: str, auto: bool = False) -> str:
    """``value`` when it names a device this machine has: cpu, cuda, cuda:k (``auto`` too where
    allowed); else a usage error listing the valid ones. torch is asked only about CUDA."""
    valid = "cpu, cuda, cuda:k" + (", auto" if auto else "")
    if value == "auto" and auto:
        return value
    if not _DEVICE.fullmatch(value):
        raise typer.BadParameter(f"{value!r} is not a device: valid are {valid}")
    if value == "cpu":
        return value
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not count:
        raise typer.BadParameter(f"{value}: torch {torch.__version__} sees no CUDA device on this machine; "
                                 f"valid here: cpu{', auto' if auto else ''}")
    index = int(value.partition(":")[2] or 0)
    if index >= count:
        raise typer.BadParameter(f"{value}: this machine has {plural(count, 'CUDA device')}, cuda:0 to cuda:{count - 1}")
    return value


def _device(value: str) -> str:
    return checked_device(value)


def _run_device(value: str) -> str:
    return checked_device(value, auto=True)


def _urls(storage: str | None, tracking: str | None) -> None:
    """A store URL of a kind no store opens: its one line, as every other store error is said."""
    try:
        checked_urls(storage, tracking)
    except BadStoreUrl as exc:
        store_refused(exc).print(PipeConsole(stderr=True))
        raise typer.Exit(exc.code) from None


def _storage(value: str | None) -> str | None:
    _urls(value, None)
    return value


def _tracking(value: str | None) -> str | None:
    _urls(None, value)
    return value


def spec_path(named: str) -> Callable[[Any], Path | None]:
    """The parser of a spec file's path, the argument or option ``named`` (FILE, --spec): every
    command taking a spec file parses it so. Typer's own Path turns "" into "." (the working
    folder), and the command then said ". is a folder": an empty path is refused here, while the
    text typed is still at hand, as one line naming the argument (exit 2)."""

    def parse(value: Any) -> Path | None:
        if value is None or isinstance(value, Path):  # no value given, or a default
            return value
        if value == "":
            Refused(f"{named} is an empty path: give the path of a spec file").print(PipeConsole(stderr=True))
            raise typer.Exit(2)
        return Path(value)

    return parse


def checked_workers(value: int) -> int:
    """``value`` local workers, unless more than ``max_workers``."""
    if value > (most := max_workers()):
        raise typer.BadParameter(
            f"{value} local workers on {plural(os.cpu_count() or 1, 'core')}: at most {most} ({WORKERS_PER_CORE} per core; "
            "more only take turns on the cores). Start `ablate worker` processes on more machines instead")
    return value


SpecFile = Annotated[Path, typer.Argument(parser=spec_path("FILE"), show_default=False, metavar="FILE")]
Set = Annotated[list[str] | None, typer.Option("--set", help="override a spec value: path=value (YAML)")]
Multi = Annotated[list[str] | None, typer.Option("-m", "--multirun", help="a factor for this study: path=level,"
                                                 "level,… (YAML each); recorded in the stored spec")]
Storage = Annotated[str | None, typer.Option("--storage", help="Optuna storage URL [env ABLATE_STORAGE]",
                                             callback=_storage)]
Tracking = Annotated[str | None, typer.Option("--tracking-uri", help="MLflow tracking URI [env ABLATE_TRACKING_URI]",
                                              callback=_tracking)]
Reuse = Annotated[bool, typer.Option("--reuse/--no-reuse", help="link items other studies on the stores "
                                                               "have finished instead of running them")]
ReuseStale = Annotated[bool, typer.Option("--reuse-stale", help="also reuse results of the same configs "
                                                                "run by another code version (stale)")]
Device = Annotated[str, typer.Option(help="cpu, cuda, cuda:k", callback=_device)]
RunDevice = Annotated[str, typer.Option("--device", help="cpu, cuda, cuda:k, or auto (one worker per visible GPU)",
                                        callback=_run_device)]
Workers = Annotated[int, typer.Option(min=0, callback=checked_workers,
                                      help="local worker processes; 0: only queue the items for `ablate worker` "
                                           "processes elsewhere")]
Checkpoint = Annotated[int, typer.Option("--checkpoint-every", min=0, help="steps between checkpoints (0: never)")]
Fuse = Annotated[int, typer.Option("--fuse", min=0, help="train up to K items of one cell (its seeds, or tuning "
                                   "trials differing only in lr, weight decay or clipping) as one model; 1: one at a "
                                   "time; 0: K chosen by device and model size (where fusing was measured to win)")]
# `ablate run` shows each item's start and end in its live view anyway; `ablate worker` has none.
Verbose = Annotated[bool, typer.Option("-v", "--verbose", help="also print every item event (start, complete, "
                                       "…) as a line; several workers: their own output on the terminal, not in "
                                       "their logs ($ABLATE_HOME/logs, default .ablate/logs)")]
WorkerVerbose = Annotated[bool, typer.Option("-v", "--verbose", help="also print each item's start and end "
                                             "(other events are printed anyway)")]
Format = Annotated[str, typer.Option("--format", help="comma-separated: html,pdf")]
Param = Annotated[list[str] | None, typer.Option(
    "--param", "-p", help="KEY=VALUE for the report notebooks, e.g. -p alpha=0.01 -p reference='model.heads=8' "
                          "(a cell's label, id, or a selector matching one cell)")]
Cells = Annotated[list[str] | None, typer.Option(
    "--cells", help="only cells matching a selector, e.g. 'model.heads=8' or 'model.heads=[4, 8], variant=RotRNN' "
                    "(the design's selector syntax); repeat for any of several")]


def _version(value: bool) -> None:
    """``ablate --version``: ablate's version, and torch's when installed, read from the installed
    metadata (importing torch takes seconds)."""
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    from ablate import __version__

    try:
        torch = f", torch {version('torch')}"
    except PackageNotFoundError:
        torch = ", torch not installed"
    PipeConsole().print(f"ablate {__version__}{torch}", highlight=False, markup=False)
    raise typer.Exit()


Version = Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                       help="print the versions of ablate and torch and exit")]
