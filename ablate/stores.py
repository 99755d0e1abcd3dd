"""Where a study's results live: Optuna storage, MLflow tracking, artifacts; credentials redacted.

Defaults need no server: SQLite files under the home folder — ``home=`` where a function takes
it, else ``$ABLATE_HOME``, else ``.ablate/`` in the working directory (``HOME_DIR``).
``$ABLATE_STORAGE`` and ``$ABLATE_TRACKING_URI`` (or explicit URLs) point at shared stores
instead. ``homes_above`` lists the ``.ablate/`` folders of the directories above, for readers
(``ablate.results.load``) started in a subfolder of a project.
"""

from __future__ import annotations

import difflib
import errno
import os
import re
import urllib.parse
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

# The scheme's length is bounded: unbounded, every start in a long run of letters scanned the rest of
# it for "://" (a 100,000-character study name took 13 s to echo).
_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]{0,63}://)(?P<user>[^:/@\s]*):(?P<pw>[^@\s]*)@")
# Malformed URLs ("postgresql//u:pw@h", "u:pw@h") and secrets passed as query parameters.
_BARE_PASSWORD = re.compile(r"(?P<pre>^|[\s/'\"(])(?P<user>[^\s:/@'\"]+):(?P<pw>[^\s:/@'\"]*)@")
# Query parameters (?password=) and libpq key/value connection strings ("host=h password=pw").
_QUERY_SECRET = re.compile(r"(?P<key>(?:[?&\s]|^)(?:password|passwd|pwd|token|secret)=)[^&\s'\"]*", re.IGNORECASE)

# --- limits the stores impose on what ablate writes (checked when a spec is validated) -----------
# Optuna (optuna/storages/_rdb/models.py): StudyModel.study_name is String(MAX_INDEXED_STRING_LENGTH).
MAX_STUDY_NAME = 512
# MLflow (mlflow/store/tracking/dbmodels/models.py): SqlExperiment.name String(256), SqlRun.name
# String(250) (PostgreSQL and MySQL enforce them; mlflow/utils/validation.py allows 500 for an
# experiment name), and mlflow/utils/validation.py: MAX_ENTITY_KEY_LENGTH, MAX_PARAM_VAL_LENGTH,
# MAX_TAG_VAL_LENGTH.
MAX_EXPERIMENT_NAME = 256
MAX_RUN_NAME = 250
MAX_PARAM_KEY = 250
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
# Files are named after the study (checkpoints/<study>/, logs/<study>-worker<k>.log): 255 bytes
# per name on ext4, XFS, tmpfs and NFS, less what ablate appends.
MAX_FILE_NAME = 255
FILE_SUFFIX = len("-worker9999.log")
# A trial's MLflow run is named "<cell label> · seed <seed>".
RUN_NAME_SUFFIX = len(" · seed 2147483647")


def redact(url: str) -> str:
    """Hide the password of a URL's user info: postgresql://u:secret@h/db -> postgresql://u:***@h/db.

    Also hides ``?password=...`` query values and user info in malformed URLs; works on any text
    (error messages included)."""
    url = _PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:***@", url)
    url = _BARE_PASSWORD.sub(lambda m: f"{m['pre']}{m['user']}:***@" if m["pw"] != "***" else m[0], url)
    return _QUERY_SECRET.sub(lambda m: f"{m['key']}***", url)


_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306}
STORAGE_EXAMPLE = "postgresql+psycopg://USER@HOST:5432/DATABASE"


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception that caused ``exc`` (``raise ... from``: Optuna wraps a database's
    own error in a StorageInternalError whose message guesses at "invalid data"). An exception
    merely being handled when another was raised (``__context__``) is not its cause."""
    seen = {id(exc)}
    while exc.__cause__ is not None and id(exc.__cause__) not in seen:
        exc = exc.__cause__
        seen.add(id(exc))
    return exc


class StorageError(Exception):
    """The study's storage cannot be reached or opened; the message is safe to show. Here, with
    the message's maker (``storage_problem``), so that every layer may raise and catch it;
    ``ablate.runner.queue``, ``runner.study`` and ``runner.locate`` re-export it."""

    code = 1  # the exit status: a store that fails


class BadStoreUrl(StorageError):
    """A store URL of a kind ablate cannot use: invalid input (exit 2), found before it is stored
    with a study or handed to a worker."""

    code = 2


# What the stores accept (a scheme's "+driver" aside): Optuna's RDB storage is SQLAlchemy's, and
# MLflow's tracking store is a folder, a database of its own or a tracking server.
_STORAGE_KINDS = ("sqlite", "postgresql", "mysql", "mariadb", "mssql", "oracle")
#: The databases MLflow's SQL tracking store keeps runs in.
MLFLOW_DATABASES = ("sqlite", "postgresql", "mysql", "mssql")
_TRACKING_KINDS = ("file", *MLFLOW_DATABASES, "http", "https", "databricks")


def checked_urls(storage: str | None, tracking: str | None) -> None:
    """Refuse (``BadStoreUrl``) a storage or tracking URL of a kind neither store can open: a
    malformed one (no ``KIND://`` at its start: a missing ``:``) or an unknown kind, the closest
    one named. A tracking URI without a scheme is a folder."""
    for url, kinds, what, expected in (
            (storage, _STORAGE_KINDS, "storage URL", f"{STORAGE_EXAMPLE} or sqlite:///PATH"),
            (tracking, _TRACKING_KINDS, "tracking URI", "a folder, sqlite:///PATH, postgresql://… or "
                                                        "http://HOST:PORT (`ablate serve`)")):
        if not url:
            continue
        scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", url)
        if scheme is None and (what == "storage URL" or re.match(r"[A-Za-z][A-Za-z0-9+.-]*//", url)):
            raise BadStoreUrl(f"malformed {what} {redact(url)} (a missing ':' after the scheme?); expected e.g. "
                              f"{expected}")
        kind = scheme[1].split("+")[0].lower() if scheme else ""
        if kind and kind not in kinds:
            close = difflib.get_close_matches(kind, kinds, n=1, cutoff=0.6)
            raise BadStoreUrl(f"unknown {'database' if what == 'storage URL' else 'store'} kind {kind!r} in "
                              f"{what} {redact(url)}{f' (did you mean {close[0]!r}?)' if close else ''}; "
                              f"expected e.g. {expected}")
        if what == "tracking URI" and kind in ("", "file"):
            # MLflow takes it for a file store's folder and fails only when the first item is
            # recorded, after the study was written and queued: refused before anything is.
            path = Path(urllib.parse.urlparse(url).path if kind else url).expanduser()
            if path.exists() and not path.is_dir():
                raise BadStoreUrl(f"tracking URI {redact(url)} is a file, not a folder or a database URL; "
                                  f"expected e.g. {expected}")


def storage_problem(url: str, exc: BaseException) -> str:
    """One line, without the password, saying why a storage URL could not be opened and where."""
    safe = redact(url)
    exc = root_cause(exc)
    lines = [s for s in redact(str(exc)).splitlines() if s.strip()]
    detail = re.sub(r"^\([\w.]+\)\s*", "", lines[0]) if lines else type(exc).__name__
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception:
        return f"malformed storage URL {safe} ({detail}); expected e.g. {STORAGE_EXAMPLE}"
    backend = parsed.drivername.split("+")[0]
    if type(exc).__name__ == "NoSuchModuleError":
        return (f"unknown database kind {parsed.drivername!r} in storage URL {safe}; "
                f"expected e.g. {STORAGE_EXAMPLE} or sqlite:///PATH")
    if parsed.host:
        where = f"{parsed.host}:{parsed.port or _DEFAULT_PORTS.get(backend, '?')}"
        return f"cannot open storage at {where} ({safe}): {detail}"
    if "readonly" in detail.replace(" ", "").lower() or "read-only" in detail.lower():
        detail += " (the file, or the filesystem it is on, is read-only)"
    return f"cannot open storage {safe}: {detail}"


_FULL = ("no space left", "database or disk is full", "disk quota exceeded")
# A write failed without saying why: torch.save's stream writer, its C++ stream, SQLite's I/O.
_WRITE_FAILED = ("file write failed", "iostream error", "disk i/o error")


def _free_bytes(path: Path) -> int | None:
    for p in (path, *path.parents):  # the nearest folder that exists
        try:
            st = os.statvfs(p)
        except OSError:
            continue
        return st.f_bavail * st.f_frsize
    return None


def no_space(exc: BaseException, paths: Iterable[str | Path]) -> str | None:
    """"no space left on PATH (N bytes free)" when ``exc`` (or what caused it) is a full disk, PATH
    being the one of ``paths`` (folders ablate writes to) with the least space left; else None.

    Python says errno ENOSPC, SQLite "database or disk is full" (or "disk I/O error"), torch only
    "file write failed" or "iostream error" (then the free space decides)."""
    verdict: str | None = None  # "full": the error says so; "write": a write failed, cause unsaid
    named, chain, seen = None, [exc], set()
    while chain:
        e = chain.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        text = str(e).lower()
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT) or any(t in text for t in _FULL):
            verdict = "full"
            named = named or (e.filename if isinstance(e, OSError) and e.filename else None)
        elif verdict is None and any(t in text for t in _WRITE_FAILED):
            verdict = "write"
        chain += [e.__cause__, e.__context__]
    if verdict is None:
        return None
    candidates = [Path(p) for p in paths] + ([Path(str(named))] if named else [])
    spaces = [(free, p) for p in candidates if (free := _free_bytes(p)) is not None]
    if not spaces:
        return "no space left on device" if verdict == "full" else None
    free, where = min(spaces, key=lambda fp: fp[0])
    if verdict == "write" and free > 1 << 20:
        return None
    return f"no space left on {where} ({free:,} bytes free)"


@dataclass(frozen=True)
class Stores:
    storage: str  # Optuna RDB URL
    tracking: str  # MLflow tracking URI
    artifacts: str | None  # artifact root for new experiments; None lets a tracking server decide

    def describe(self) -> dict[str, str]:
        return {"storage": redact(self.storage), "tracking": redact(self.tracking)}


HOME_DIR = ".ablate"


def home(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The folder of the default stores, logs and checkpoints: ``explicit``, else ``$ABLATE_HOME``,
    else ``.ablate`` in the working directory (relative paths stay relative)."""
    if explicit is not None:
        return Path(explicit).expanduser()
    return Path(os.environ.get("ABLATE_HOME") or HOME_DIR).expanduser()


def checkpoint_dir() -> Path:
    """Where trials checkpoint (and WSD runs keep their stable phase's end, under ``stable/``);
    share it between hosts (ABLATE_CHECKPOINT_DIR) to resume anywhere."""
    return Path(os.environ.get("ABLATE_CHECKPOINT_DIR") or home() / "checkpoints").resolve()


def user_cache() -> Path:
    """ablate's folder in the user's cache (``$XDG_CACHE_HOME/ablate``, else ``~/.cache/ablate``):
    what is built once per user and safe to delete (the tracking-store template, measured timings)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ablate"


def home_is_default(explicit: str | os.PathLike[str] | None = None) -> bool:
    """Whether the home folder is only the default (no ``home=``, no ``$ABLATE_HOME``)."""
    return explicit is None and not os.environ.get("ABLATE_HOME")


def homes_above(start: Path | None = None) -> list[Path]:
    """The ``.ablate`` folders holding an Optuna database in the directories above ``start``
    (default: the working directory), nearest first."""
    here = (start or Path.cwd()).resolve()
    return [d / HOME_DIR for d in here.parents if (d / HOME_DIR / "optuna.db").is_file()]


def resolve(storage: str | None = None, tracking: str | None = None,
            home_dir: str | os.PathLike[str] | None = None, create: bool = True) -> Stores:
    """The stores to use: explicit URLs, else ``$ABLATE_STORAGE`` / ``$ABLATE_TRACKING_URI``, else
    SQLite files in the home folder (``home``; its folder created unless ``create`` is False)."""
    storage = storage or os.environ.get("ABLATE_STORAGE")
    tracking = tracking or os.environ.get("ABLATE_TRACKING_URI")
    checked_urls(storage, tracking)
    root = home(home_dir).resolve()
    storage = storage or f"sqlite:///{root / 'optuna.db'}"
    tracking = tracking or f"sqlite:///{root / 'mlflow.db'}"
    local = not tracking.startswith(("http://", "https://", "databricks"))
    artifacts = (root / "mlartifacts").as_uri() if local else None
    for url in (storage, tracking) if create else ():
        if url.startswith("sqlite:///"):
            folder = Path(url.removeprefix("sqlite:///")).parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a store where no folder can be: say which, not an internal error
                raise StorageError(redact(f"cannot make the folder of the store {url}: {exc.strerror or exc}")) from None
    return Stores(storage, tracking, artifacts)


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///PATH`` URL (None for other URLs and in-memory databases)."""
    path = url.removeprefix("sqlite:///").split("?")[0] if url.startswith("sqlite:///") else ""
    return Path(path) if path and path != ":memory:" else None


@contextmanager
def sqlite_lock(url: str) -> Iterator[None]:
    """Hold an exclusive lock file beside a SQLite database (nothing for other URLs).

    Processes starting together on a fresh file would otherwise race to create its tables
    ("table ... already exists"), and two `ablate run`s would both queue every item."""
    path = sqlite_path(url)
    if path is None:
        yield
        return
    lock = f"{path}.lock"
    try:  # FileLock takes a lock file it cannot create for one held elsewhere, and waits forever
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock, "a"):
            pass
    except OSError as exc:
        raise StorageError(redact(f"cannot write beside the store {url}: {exc.strerror or exc}")) from None
    with FileLock(lock):
        yield


@contextmanager
def from_template(path: Path | None, template: Path) -> Iterator[None]:
    """Around a library opening (and, when new, building) the SQLite store at ``path``: a new store
    starts as a copy of ``template``, an empty store that library built once (``runner.rdb`` and
    ``runner.tracking``'s ``store_template``: Optuna's table creation, MLflow's ~100 migrations);
    with no template yet, the store the library built becomes it. Nothing for a store that exists
    or is not a SQLite file (``path`` None)."""
    fresh = path is not None and not path.exists()
    if fresh and template.is_file():
        copy_sqlite(template, path, from_template=True)
    yield
    if fresh and not template.is_file() and path.is_file():
        copy_sqlite(path, template)


def copy_sqlite(source: Path, target: Path, from_template: bool = False) -> None:
    """Copy a store's SQLite database through SQLite's backup API, into a temporary file renamed
    into place (a reader never sees half a file). A copy that fails leaves no target (the library
    then builds the store itself; a template is only not written); a ``from_template`` source that
    is not a stamped database is removed."""
    import sqlite3
    import tempfile

    tmp: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
        os.close(fd)
        tmp = Path(name)
        with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(tmp)) as dst:
            src.backup(dst)
            if not dst.execute("SELECT version_num FROM alembic_version").fetchone():
                raise sqlite3.DatabaseError("no schema version")
        os.replace(tmp, target)
    except sqlite3.DatabaseError:
        if from_template:
            source.unlink(missing_ok=True)
    except OSError:
        pass
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
