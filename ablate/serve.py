"""``ablate serve``: an MLflow tracking server that many workers share, bound to 127.0.0.1 by default.

The server keeps runs in a database (SQLite file or PostgreSQL) and proxies artifacts
(``--serve-artifacts``) to a folder, so workers on other machines upload and download Parquet
artifacts over HTTP and need no shared filesystem. The backend URL travels in the server's
environment (``MLFLOW_BACKEND_STORE_URI``), not on its command line, so a password in it does not
show in ``ps``; everything printed is redacted.
"""

from __future__ import annotations

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

from ablate.stores import home, redact

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5000
LOOPBACK = ("127.0.0.1", "localhost", "::1")


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


def _prepare_folders(cfg: ServerConfig) -> None:
    if cfg.backend.startswith("sqlite:///"):
        Path(cfg.backend.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
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


def port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def serve(cfg: ServerConfig, say: Callable[[str], object] = print) -> int:
    """Run the server in the foreground until it exits or SIGINT/SIGTERM; returns its exit code."""
    if not port_free(cfg.host, cfg.port):
        raise ServeError(f"port {cfg.port} on {cfg.host} is in use (another server?); choose one with --port")
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
