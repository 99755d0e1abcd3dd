"""``ablate serve``: an MLflow tracking server that many workers share, bound to 127.0.0.1 by default.

The server keeps runs in a database (SQLite file or PostgreSQL) and proxies artifacts
(``--serve-artifacts``) to a folder, so workers on other machines upload and download Parquet
artifacts over HTTP and need no shared filesystem. The backend URL travels in the server's
environment (``MLFLOW_BACKEND_STORE_URI``), not on its command line, so a password in it does not
show in ``ps``; everything printed is redacted.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from rich.markup import escape

from ablate.stores import MLFLOW_DATABASES, STORAGE_EXAMPLE, home, redact
from ablate.terminal import Refused

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5000
LOOPBACK = ("127.0.0.1", "localhost", "::1")
BACKEND_FORMS = f"sqlite:///PATH or {STORAGE_EXAMPLE}"


class ServeError(Exception):
    """The server did not start or answer; the message is safe to show."""


@dataclass(frozen=True)
class ServerConfig:
    backend: str  # sqlite:///PATH or postgresql+psycopg://USER@HOST:PORT/DB
    artifacts: str  # folder (or URI) where proxied artifacts are stored
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    workers: int = 1
    allowed_hosts: str | None = None  # Host headers accepted besides localhost and private IPs

    @classmethod
    def default(cls, **overrides: object) -> ServerConfig:
        """SQLite backend and artifact folder under ``$ABLATE_HOME/server``."""
        root = (home() / "server").resolve()
        values = {"backend": f"sqlite:///{root / 'mlflow.db'}", "artifacts": str(root / "artifacts")}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]

    @property
    def url(self) -> str:
        """The tracking URI clients use (on this machine)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            sys.executable, "-m", "mlflow", "server",
            "--host", self.host, "--port", str(self.port), "--workers", str(self.workers),
            "--serve-artifacts", "--artifacts-destination", self.artifacts,
        ]
        if self.allowed_hosts:
            cmd += ["--allowed-hosts", self.allowed_hosts]
        return cmd

    def environment(self) -> dict[str, str]:
        env = {**os.environ, "MLFLOW_BACKEND_STORE_URI": self.backend}
        # Optional background job runner: off, the server is healthy in ~12 s instead of ~25 s.
        env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
        return env


def _refused(option: str, value: str, why: str) -> Refused:
    """Invalid input (exit 2): one line naming the option, its value (without a password) and why."""
    return Refused(f"{option} {escape(redact(value))}: {why}")


def _folder_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot be (created and) written into, or None."""
    if folder.exists():
        if not folder.is_dir():
            return f"{folder} is not a folder"
        return None if os.access(folder, os.W_OK | os.X_OK) else "a folder this user cannot write to"
    above = next(p for p in folder.parents if p.exists())  # "/" exists
    if not above.is_dir():
        return f"{above} is not a folder"
    return None if os.access(above, os.W_OK | os.X_OK) else f"cannot create it: {above} is not writable"


def _backend_problem(backend: str) -> str | None:
    """Why MLflow could not keep its runs at ``backend``, or None. MLflow itself would say so only
    after it starts, in two tracebacks."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        url = make_url(backend)
    except ArgumentError:
        return f"not a database URL; give {BACKEND_FORMS}"
    if url.get_backend_name() not in MLFLOW_DATABASES:  # file stores, Databricks: nothing serve can prepare
        return f"{url.get_backend_name()!r} is not a database MLflow keeps runs in; give {BACKEND_FORMS}"
    if url.get_backend_name() == "sqlite":
        if not backend.startswith("sqlite:///") or not url.database or url.database == ":memory:":
            return "an SQLite backend is a file (an in-memory one loses every run); give sqlite:///PATH"
        path = Path(url.database)
        if path.is_dir():
            return f"{path} is a folder; give the database file's path, e.g. {path / 'mlflow.db'}"
        problem = _folder_problem(path.parent)
        return None if problem is None else f"cannot create the database there: {problem}"
    try:
        url.get_dialect().import_dbapi()
    except NoSuchModuleError:
        return f"unknown database driver {url.drivername!r}; give {BACKEND_FORMS}"
    except ImportError as exc:
        return f"the driver of {url.drivername!r} is not installed ({exc})"
    return None


def check(cfg: ServerConfig) -> None:
    """Refuse (exit 2) a configuration the server could not run with, before anything starts."""
    if not 1 <= cfg.port <= 65535:  # not 0 ("any free port"): the URL printed for workers needs the port
        raise _refused("--port", str(cfg.port), "give a port from 1 to 65535")
    if cfg.workers < 1:
        raise _refused("--workers", str(cfg.workers), "give at least 1 server worker process")
    problem = _backend_problem(cfg.backend)
    if problem is not None:
        raise _refused("--backend-store-uri", cfg.backend, problem)
    if "://" not in cfg.artifacts:
        problem = _folder_problem(Path(cfg.artifacts))
        if problem is not None:
            raise _refused("--artifacts-destination", cfg.artifacts, f"{problem}; give a folder (created if missing)")


def _prepare_folders(cfg: ServerConfig) -> None:
    if cfg.backend.startswith("sqlite:///"):
        Path(cfg.backend.removeprefix("sqlite:///").split("?")[0]).parent.mkdir(parents=True, exist_ok=True)
    if "://" not in cfg.artifacts:
        Path(cfg.artifacts).mkdir(parents=True, exist_ok=True)


def start(cfg: ServerConfig, log: IO[str] | int | None = None) -> subprocess.Popen:
    """Start the server in its own process group (so that stop() reaches its workers)."""
    _prepare_folders(cfg)
    stderr = subprocess.STDOUT if log is not None else None
    return subprocess.Popen(cfg.command(), env=cfg.environment(), stdout=log, stderr=stderr, start_new_session=True)


def healthy(url: str, timeout: float = 2.0) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy for our own server
    try:
        with opener.open(f"{url}/health", timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def wait_healthy(url: str, proc: subprocess.Popen | None = None, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if healthy(url):
            return
        if proc is not None and proc.poll() is not None:
            raise ServeError(f"the MLflow server exited with code {proc.returncode} before answering at {url}")
        time.sleep(0.5)
    raise ServeError(f"the MLflow server did not answer at {url} within {timeout:.0f} s")


def stop(proc: subprocess.Popen, timeout: float = 15.0) -> None:
    """SIGTERM the server's process group; SIGKILL what is left after ``timeout``."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def describe(cfg: ServerConfig) -> list[str]:
    lines = [
        f"MLflow tracking server on {cfg.url} (bound to {cfg.host})",
        f"  runs      {redact(cfg.backend)}",
        f"  artifacts {redact(cfg.artifacts)} (proxied: workers need no shared folder)",
        f"  workers:  --tracking-uri http://<this host>:{cfg.port}  or  ABLATE_TRACKING_URI",
    ]
    if cfg.host not in LOOPBACK:
        lines.append("  warning: reachable from the network and without authentication; "
                     "restrict access (firewall, SSH tunnel, --allowed-hosts)")
    return lines


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def bind_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on ``host``:``port``, or None. Refuses (exit 2) a host that
    does not resolve or is not an address of this machine; a port in use or reserved is a
    ServeError's message (the machine's state, not the input, is at fault)."""
    try:
        # The family as the server (uvicorn) picks it; AI_PASSIVE: "" is every interface
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        family, kind, proto, _, address = socket.getaddrinfo(host or None, port, family, socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise _refused("--host", host, f"cannot be resolved ({getattr(exc, 'strerror', None) or exc}); "
                       "give an address of this machine, e.g. 127.0.0.1 or 0.0.0.0") from None
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} on {host} is in use (another server?); choose one with --port"
            if exc.errno == errno.EACCES:
                return f"port {port} on {host} is reserved (below 1024: root only); choose one with --port"
            if exc.errno == errno.EADDRNOTAVAIL:
                raise _refused("--host", host, f"{address[0]} is not an address of this machine; give one of "
                               "its addresses, e.g. 127.0.0.1 or 0.0.0.0") from None
            raise _refused("--host", host, f"cannot bind port {port} there ({exc.strerror or exc})") from None
    return None


def serve(cfg: ServerConfig, say: Callable[[str], object] = print) -> int:
    """Run the server in the foreground until it exits or SIGINT/SIGTERM; returns its exit code.
    Refused (exit 2) on invalid input, ServeError when the port is taken or the server fails."""
    check(cfg)
    problem = bind_problem(cfg.host, cfg.port)
    if problem is not None:
        raise ServeError(problem)
    proc = start(cfg)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        wait_healthy(cfg.url, proc)
        for line in describe(cfg):
            say(line)
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        stop(proc)
        signal.signal(signal.SIGTERM, previous)
