"""Where a study's results live: Optuna storage, MLflow tracking, artifacts; credentials redacted.

Defaults need no server: SQLite files under ``.ablate/`` in the working directory (or
``$ABLATE_HOME``). ``$ABLATE_STORAGE`` and ``$ABLATE_TRACKING_URI`` point at shared stores.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@]*):(?P<pw>[^@/]*)@")


def redact(url: str) -> str:
    """Hide the password of a URL's user info: postgresql://u:secret@h/db -> postgresql://u:***@h/db."""
    return _PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:***@", url)


@dataclass(frozen=True)
class Stores:
    storage: str  # Optuna RDB URL
    tracking: str  # MLflow tracking URI
    artifacts: str | None  # artifact root for new experiments; None lets a tracking server decide

    def describe(self) -> dict[str, str]:
        return {"storage": redact(self.storage), "tracking": redact(self.tracking)}


def home() -> Path:
    return Path(os.environ.get("ABLATE_HOME", ".ablate"))


def resolve(storage: str | None = None, tracking: str | None = None) -> Stores:
    root = home().resolve()
    storage = storage or os.environ.get("ABLATE_STORAGE") or f"sqlite:///{root / 'optuna.db'}"
    tracking = tracking or os.environ.get("ABLATE_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}"
    local = not tracking.startswith(("http://", "https://", "databricks"))
    artifacts = (root / "mlartifacts").as_uri() if local else None
    for url in (storage, tracking):
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    return Stores(storage, tracking, artifacts)
