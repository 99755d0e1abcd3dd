"""Where a study's results live: Optuna storage, MLflow tracking, artifacts; credentials redacted.

Defaults need no server: SQLite files under the home folder — ``home=`` where a function takes
it, else ``$ABLATE_HOME``, else ``.ablate/`` in the working directory (``HOME_DIR``).
``$ABLATE_STORAGE`` and ``$ABLATE_TRACKING_URI`` (or explicit URLs) point at shared stores
instead. ``homes_above`` lists the ``.ablate/`` folders of the directories above, for readers
(``ablate.results.load``) started in a subfolder of a project.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@\s]*)@")
# Malformed URLs ("postgresql//u:pw@h", "u:pw@h") and secrets passed as query parameters.
_BARE_PASSWORD = re.compile(r"(?P<pre>^|[\s/'\"(])(?P<user>[^\s:/@'\"]+):(?P<pw>[^\s:/@'\"]*)@")
_QUERY_SECRET = re.compile(r"(?P<key>[?&](?:password|passwd|pwd|token|secret)=)[^&\s'\"]*", re.IGNORECASE)


def redact(url: str) -> str:
    """Hide the password of a URL's user info: postgresql://u:secret@h/db -> postgresql://u:***@h/db.

    Also hides ``?password=...`` query values and user info in malformed URLs; works on any text
    (error messages included)."""
    url = _PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:***@", url)
    url = _BARE_PASSWORD.sub(lambda m: f"{m['pre']}{m['user']}:***@" if m["pw"] != "***" else m[0], url)
    return _QUERY_SECRET.sub(lambda m: f"{m['key']}***", url)


_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306}
STORAGE_EXAMPLE = "postgresql+psycopg://USER@HOST:5432/DATABASE"


def storage_problem(url: str, exc: BaseException) -> str:
    """One line, without the password, saying why a storage URL could not be opened and where."""
    safe = redact(url)
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
    return f"cannot open storage {safe}: {detail}"


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
    root = home(home_dir).resolve()
    storage = storage or os.environ.get("ABLATE_STORAGE") or f"sqlite:///{root / 'optuna.db'}"
    tracking = tracking or os.environ.get("ABLATE_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}"
    local = not tracking.startswith(("http://", "https://", "databricks"))
    artifacts = (root / "mlartifacts").as_uri() if local else None
    for url in (storage, tracking) if create else ():
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    return Stores(storage, tracking, artifacts)


@contextmanager
def sqlite_lock(url: str) -> Iterator[None]:
    """Hold an exclusive lock file beside a SQLite database (nothing for other URLs).

    Processes starting together on a fresh file would otherwise race to create its tables
    ("table ... already exists"), and two `ablate run`s would both queue every item."""
    path = url.removeprefix("sqlite:///").split("?")[0] if url.startswith("sqlite:///") else ""
    if not path or path == ":memory:":
        yield
        return
    with open(f"{path}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        yield
