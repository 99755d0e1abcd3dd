#!/usr/bin/env bash
# Run the test suite. When the Debian packages are present, starts a throwaway PostgreSQL server
# on 127.0.0.1 (as the postgres user when root: initdb refuses root) and, in the background, a
# real MLflow tracking server (`ablate serve`, its runs in that PostgreSQL) for the multi-machine
# tests, and, where SLURM is installed, a one-node SLURM cluster (scripts/slurm.sh) for the tests
# of deploy/slurm/. All use free ports, so several checkouts can run this at once; all go on exit.
# Set ABLATE_TEST_POSTGRES / ABLATE_TEST_MLFLOW / ABLATE_TEST_SLURM (a slurm.conf) to use your own.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
free_port() { $PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pg_admin() {  # one SQL statement on $ABLATE_TEST_POSTGRES
  $PY -c 'import os, sys, psycopg; from sqlalchemy.engine import make_url
url = make_url(os.environ["ABLATE_TEST_POSTGRES"]).set(drivername="postgresql")
psycopg.connect(url.render_as_string(hide_password=False), autocommit=True).execute(sys.argv[1])' "$1"
}

SCRATCH=$(mktemp -d); chmod 755 "$SCRATCH"
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
RUNAS=(); [ "$(id -u)" -eq 0 ] && RUNAS=(runuser -u postgres --)
PG_DATA=""; MLFLOW_PID=""; MLFLOW_DB=""; SLURM_DIR=""
cleanup() {
  if [ -n "$SLURM_DIR" ]; then scripts/slurm.sh stop "$SLURM_DIR" || true; fi
  if [ -n "$MLFLOW_PID" ]; then kill "$MLFLOW_PID" 2>/dev/null || true; wait "$MLFLOW_PID" 2>/dev/null || true; fi
  if [ -n "$PG_DATA" ]; then
    "${RUNAS[@]}" "$PGBIN/pg_ctl" -D "$PG_DATA" -m fast stop >/dev/null 2>&1 || true
  elif [ -n "$MLFLOW_DB" ]; then
    pg_admin "DROP DATABASE IF EXISTS $MLFLOW_DB WITH (FORCE)" || true
  fi
  rm -rf "$SCRATCH"
}
trap cleanup EXIT

if [ -z "${ABLATE_TEST_POSTGRES:-}" ] && [ -n "$PGBIN" ] && [ -x "$PGBIN/initdb" ]; then
  PG="$SCRATCH/pg"; mkdir -m 700 "$PG" "$PG/data"
  [ "$(id -u)" -eq 0 ] && chown -R postgres:postgres "$PG"
  PORT=${ABLATE_TEST_PG_PORT:-$(free_port)}
  "${RUNAS[@]}" "$PGBIN/initdb" -D "$PG/data" -U postgres --auth=trust --no-instructions >/dev/null
  "${RUNAS[@]}" "$PGBIN/pg_ctl" -D "$PG/data" -l "$PG/log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -c unix_socket_directories=$PG -c max_connections=300" start >/dev/null
  PG_DATA="$PG/data"
  export ABLATE_TEST_POSTGRES="postgresql+psycopg://postgres@127.0.0.1:$PORT/postgres"
fi

if [ -z "${ABLATE_TEST_MLFLOW:-}" ]; then
  BACKEND="sqlite:///$SCRATCH/mlflow/mlflow.db"
  if [ -n "${ABLATE_TEST_POSTGRES:-}" ]; then
    MLFLOW_DB="ablate_test_mlflow_$$"
    pg_admin "CREATE DATABASE $MLFLOW_DB"
    BACKEND="${ABLATE_TEST_POSTGRES%/*}/$MLFLOW_DB"
  fi
  MLFLOW_PORT=$(free_port)
  # The tests wait for it to answer (tests/conftest.py): it starts while the first ones run.
  $PY -m ablate.cli serve --port "$MLFLOW_PORT" --backend-store-uri "$BACKEND" \
    --artifacts-destination "$SCRATCH/mlflow/artifacts" >"$SCRATCH/mlflow.log" 2>&1 &
  MLFLOW_PID=$!
  export ABLATE_TEST_MLFLOW="http://127.0.0.1:$MLFLOW_PORT" ABLATE_TEST_MLFLOW_LOG="$SCRATCH/mlflow.log"
fi

if [ -z "${ABLATE_TEST_SLURM:-}" ] && { command -v slurmctld || [ -x /usr/sbin/slurmctld ]; } >/dev/null 2>&1; then
  SLURM_DIR="$SCRATCH/slurm"
  # 8 CPUs whatever the host has: the tests' array tasks (tiny trials) start at once, not in turns.
  # A cluster that will not start (a sandbox without the cgroup mounts SLURM wants) skips the
  # SLURM tests, saying why, rather than failing everything else.
  if ABLATE_TEST_SLURM=$(ABLATE_SLURM_CPUS=${ABLATE_SLURM_CPUS:-8} scripts/slurm.sh start "$SLURM_DIR"); then
    export ABLATE_TEST_SLURM
  else
    echo "scripts/test.sh: the one-node SLURM cluster did not start (see $SLURM_DIR): the SLURM tests are skipped" >&2
    unset ABLATE_TEST_SLURM
  fi
fi

# Bytecode on, whatever the session says: the suite starts hundreds of Python processes (workers,
# zygotes, CLI calls), and without ablate's .pyc files each compiled its modules again (~0.5 s of
# CPU per worker start, measured). They go to __pycache__/ beside the sources, which git ignores.
unset PYTHONDONTWRITEBYTECODE

# Three processes on two cores: the cluster, server and subprocess tests spend much of their time
# waiting (SLURM's scheduling, a time limit, workers starting), which a third process overlaps
# (measured on this machine with other work on it: 1,783 s with -n 2, 1,572 s with -n 3).
# --dist worksteal: a worker that runs out of tests takes some of another's. With the default
# (tests handed out in fixed shares) one worker was left with the slow kill tests of two files and
# ran them alone for the suite's last 135 s while the other two sat idle.
# -rs: the reason of every skip, grouped, so a CI log shows whether the SLURM and server tests ran.
$PY -m pytest -q -rs -n 3 --dist worksteal "$@"
