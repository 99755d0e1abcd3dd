#!/usr/bin/env bash
# Run the test suite. Starts a throwaway PostgreSQL server on 127.0.0.1 when the Debian
# packages are present, so the multi-machine tests run against a real database.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "${ABLATE_TEST_POSTGRES:-}" ] && [ -n "$PGBIN" ] && [ -x "$PGBIN/initdb" ]; then
  PG=$(mktemp -d); chmod 755 "$PG"
  install -d -o postgres -g postgres -m 700 "$PG/data"
  chown postgres "$PG"
  PORT=${ABLATE_TEST_PG_PORT:-5433}
  runuser -u postgres -- "$PGBIN/initdb" -D "$PG/data" -U postgres --auth=trust --no-instructions >/dev/null
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PG/data" -l "$PG/log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -c unix_socket_directories=$PG -c max_connections=200" start >/dev/null
  trap 'runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PG/data" -m fast stop >/dev/null 2>&1; rm -rf "$PG"' EXIT
  export ABLATE_TEST_POSTGRES="postgresql+psycopg://postgres@127.0.0.1:$PORT/postgres"
fi
$PY -m pytest -q -n 2 "$@"
