"""What every command's output shares: a console as wide as its content in a pipe, a table that
is rich's on a terminal and plain aligned columns when piped, what a command has to say when done
(``Said``), a command's refusal with its exit status (``Refused``), and a command a signal
stopped (``Stopped``).

A leaf (rich, and ``stores.redact``), so that any layer's command function may print through it or refuse with it;
``ablate.cli`` prints a ``Refused`` or ``Stopped`` once, for every command, as it prints a store
error.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console, ConsoleDimensions
from rich.markup import escape
from rich.table import Table

from ablate.stores import redact

# Lines as long as they need in a pipe or log file (SLURM, `tee`): wrapped or truncated at 80
# columns, a table cell reads "parameterisatio…" and one event spans two lines.
PIPE_WIDTH = 10_000


class PipeConsole(Console):
    """A rich console that is as wide as its content when it does not write to a terminal, and
    never turns ``:name:`` into an emoji (echoed values such as ``a:b:c`` are printed as given)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("emoji", False)
        super().__init__(*args, **kwargs)

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        return size if self.is_terminal else ConsoleDimensions(PIPE_WIDTH, size.height)


class Refused(Exception):
    """A command that refuses (invalid input, a study at work, nothing removed): its ``lines``, as
    rich markup, each printed as an error (``error`` in red before it, unless not ``marked``), and
    the exit status ``code`` (2 for invalid input, 1 otherwise)."""

    def __init__(self, lines: str | list[str], code: int = 2, marked: bool = True) -> None:
        self.lines = [clip_words(line) for line in ([lines] if isinstance(lines, str) else lines)]
        self.code, self.marked = code, marked
        super().__init__("\n".join(self.lines))

    SHOWN = 20  # lines: past a screenful, the first errors are what a reader fixes first

    def print(self, console: Console) -> None:
        for line in self.lines[:self.SHOWN]:
            console.print(f"[red]error[/red] {line}" if self.marked else line, highlight=False, soft_wrap=True,
                          emoji=False)
        if len(self.lines) > self.SHOWN:
            console.print(f"… and {len(self.lines) - self.SHOWN} more", highlight=False, soft_wrap=True)


MAX_ECHOED = 200  # characters of one word of a message (an echoed name, path or value)


def count(n: int, word: str, many: str | None = None) -> str:
    """``n`` and ``word`` as a sentence says them: "1 item", "3 items" (``many``: an irregular plural)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def duration(seconds: float | None) -> str:
    """A time left as the ETA and the status say it: ``1m05s``, ``2h03m``; ``?`` when unknown."""
    if seconds is None:
        return "?"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def clip_words(line: str, most: int = MAX_ECHOED, keep: int = 100) -> str:
    """``line`` with each word (a run of non-blank characters outside markup's brackets, so that a
    cut never breaks a tag) longer than ``most`` shortened to its first ``keep`` and last 20
    characters, saying its length: a 100,000-character study name is echoed in one readable line."""
    return re.sub(rf"[^\s\[\]]{{{most + 1},}}", lambda m: f"{m[0][:keep]}… ({len(m[0]):,} characters) …{m[0][-20:]}",
                  line)


@dataclass(frozen=True)
class Said:
    """What a command says when it is done: plain lines for standard output."""

    lines: list[str]

    def print(self, console: Console) -> None:
        for line in self.lines:
            console.print(line, highlight=False, markup=False, soft_wrap=True)


def table(console: Console, title: str, headers: list[str], rows: list[list[str]],
          right: set[str] | frozenset[str] = frozenset()) -> None:
    """A table: rich's on a terminal; plain aligned columns, never truncated, when piped."""
    if console.is_terminal:
        shown = Table(title=title, title_justify="left")
        for h in headers:
            shown.add_column(h, justify="right" if h in right else "left", overflow="fold")
        for row in rows:
            shown.add_row(*row)
        console.print(shown)
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if h in right else c.ljust(w)
                         for c, w, h in zip(cells, widths, headers, strict=True)).rstrip()

    for text in (title, line(headers), *map(line, rows)):
        print(text, file=console.file)


class Stopped(Exception):
    """SIGINT or SIGTERM stopped a command: ``signum``, the labels of the items ``requeued``, and
    ``what`` was stopped; it prints ONE line, and its exit status is 128 + the signal."""

    def __init__(self, signum: int, requeued: list[str], what: str = "interrupted") -> None:
        super().__init__(f"{what} ({signal.Signals(signum).name})")
        self.signum, self.requeued, self.what = signum, requeued, what
        self.code = 128 + signum

    def print(self, console: Console) -> None:
        items = (f"re-queued {count(len(self.requeued), 'running item')}: {', '.join(self.requeued)}" if self.requeued
                 else "no running item to re-queue")
        console.print(f"{self}: {items}; run the same command to resume", highlight=False, markup=False,
                      soft_wrap=True)


def store_refused(exc: BaseException) -> Refused:
    """A store that fails (unreachable, refusing, not ablate's): its message, without a password;
    exit 1 (2 for a URL of a kind no store opens: ``stores.BadStoreUrl``)."""
    return Refused(escape(redact(str(exc))), getattr(exc, "code", 1))


def asking(yes: bool, ask: Callable[[str], bool]) -> Callable[[str], None]:
    """The question a removal asks (``ask`` puts it on the terminal): none with ``yes``; refused
    (exit 1) when no one can answer it, or the answer is no."""

    def confirm(question: str) -> None:
        if yes:
            return
        if not sys.stdin.isatty():
            raise Refused("not a terminal: nothing removed; pass --yes to remove without a question", 1)
        if not ask(question):
            raise Refused("nothing removed", 1, marked=False)

    return confirm


#: Set (to anything) to print tracebacks: of a bug, and of a plug-in's own failure.
TRACEBACK_ENV = "ABLATE_TRACEBACK"
ONE_LINE_CHARS = 2000  # of an exception's message in one line: past that, a traceback's business


def wants_traceback() -> bool:
    return bool(os.environ.get(TRACEBACK_ENV))


def one_line(text: object, limit: int = ONE_LINE_CHARS) -> str:
    """An exception's message in one line: its lines joined with "; " (the lines after the first
    are often the useful part: the paths a template was looked for in), cut at ``limit`` chars."""
    joined = "; ".join(line.strip() for line in str(text).strip().splitlines() if line.strip())
    return joined if len(joined) <= limit else joined[:limit - 1] + "…"


#: Libraries whose frames are never the plug-in's line: the error's message speaks for them.
LIBRARIES = frozenset({"ablate", "torch", "numpy", "polars", "pandas", "pyarrow", "pydantic", "matplotlib", "scipy",
                       "sklearn", "importlib_metadata"})


def raised_at(exc: BaseException) -> str:
    """Where a plug-in's own code raised ``exc``, as ``path:line in function``: the innermost frame
    outside ablate, the standard library and the LIBRARIES (a researcher's bug is in their file, not
    in torch's); a SyntaxError's own file and line. "" when no frame qualifies."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return f"{_shown(exc.filename)}:{exc.lineno}"
    import traceback

    at = ""
    for frame, line in traceback.walk_tb(exc.__traceback__):
        top = str(frame.f_globals.get("__name__", "")).partition(".")[0]
        if top and top not in LIBRARIES and top not in sys.stdlib_module_names:
            at = f"{_shown(frame.f_code.co_filename)}:{line} in {frame.f_code.co_name}"
    return at


def _shown(path: str) -> str:
    """A path relative to the working directory where it lies under it, else as it is."""
    rel = os.path.relpath(path) if os.path.isabs(path) else path
    return path if rel.startswith("..") else rel


def plugin_traceback(exc: BaseException | None, who: str) -> str:
    """A plug-in's own failure ``exc`` (the exception its code raised): with ABLATE_TRACEBACK=1 its
    traceback is printed on standard error, headed by ``who``, and "" is returned; without it, where
    the plug-in's code raised it (``raised_at``) and the hint, to add to the one-line error. "" for no exception (a promise broken without one)."""
    if exc is None:
        return ""
    if not wants_traceback():
        at = raised_at(exc)
        return f"{f'; at {at}' if at else ''}; {TRACEBACK_ENV}=1 shows its traceback"
    import traceback

    print(f"traceback of {who}:\n{redact(''.join(traceback.format_exception(exc))).rstrip()}", file=sys.stderr)
    return ""


def database_failure(exc: BaseException) -> BaseException | None:
    """The database driver's own error in the chain of ``exc``'s causes (a damaged file, a lost
    server), which Optuna wraps in a StorageInternalError guessing at "invalid data"; None when
    there is none (sqlalchemy is imported only where it already is)."""
    dbapi = getattr(sys.modules.get("sqlalchemy.exc"), "DBAPIError", None)
    seen: set[int] = set()
    while dbapi is not None and exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, dbapi):
            return exc.orig if isinstance(getattr(exc, "orig", None), BaseException) else exc
        exc = exc.__cause__  # type: ignore[assignment]
    return None


def internal_error(console: Console, exc: BaseException) -> int:
    """A bug: one line (the traceback first with ABLATE_TRACEBACK=1); exit 1. A store's database
    that failed under a read no command wrapped (``runner.rdb.opening`` wraps a command's first) is
    said as the database's fault, in its own words, not as ablate's."""
    import traceback

    if wants_traceback():
        console.print(redact("".join(traceback.format_exception(exc))), highlight=False, markup=False)
    failed = database_failure(exc)
    if failed is not None:
        console.print(f"error a store's database failed: {redact(one_line(failed))} ({type(failed).__name__}); "
                      f"{TRACEBACK_ENV}=1 shows where", highlight=False, markup=False, soft_wrap=True)
        return 1
    console.print(f"error (internal) {type(exc).__name__}: {redact(one_line(exc))}; {TRACEBACK_ENV}=1 shows where",
                  highlight=False, markup=False, soft_wrap=True)
    return 1
