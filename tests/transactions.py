"""The write transactions code makes on SQLAlchemy engines, as the database sees them: for tests of
how many writes a step of the runner takes and what each one holds."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

WRITES = ("INSERT", "UPDATE", "DELETE")


@dataclass
class Transaction:
    """One committed transaction that wrote: its statements, with their parameters."""

    statements: list[tuple[str, Any]] = field(default_factory=list)

    def rows(self, table: str) -> list[dict[str, Any]]:
        """The rows its INSERTs into ``table`` wrote, column → value."""
        out = []
        for statement, params in self.statements:
            head = statement.split("VALUES", 1)[0]
            if not head.lstrip().upper().startswith(f"INSERT INTO {table.upper()} "):
                continue
            columns = [c.strip().strip('"`') for c in head[head.index("(") + 1 : head.rindex(")")].split(",")]
            flat = [v for p in params for v in p] if params and isinstance(params[0], list | tuple) else list(params)
            out += [dict(zip(columns, flat[i : i + len(columns)], strict=True))
                    for i in range(0, len(flat), len(columns))]
        return out

    def attrs(self, trial_id: int | None = None) -> set[str]:
        """The user-attribute keys it wrote (of ``trial_id``'s trial only, if given)."""
        return {r["key"] for r in self.rows("trial_user_attributes") if trial_id is None or r["trial_id"] == trial_id}


@contextmanager
def write_transactions() -> Iterator[list[Transaction]]:
    """Within the block, every committed transaction that wrote, on any engine of this process (in
    the order of their commits); each connection's open transaction is followed on its own."""
    done: list[Transaction] = []

    def begin(conn: Any) -> None:
        conn.info["ablate_test_txn"] = Transaction()

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        txn = conn.info.get("ablate_test_txn")
        if txn is not None and statement.lstrip().split(None, 1)[0].upper() in WRITES:
            txn.statements.append((statement, parameters))

    def commit(conn: Any) -> None:
        txn = conn.info.pop("ablate_test_txn", None)
        if txn is not None and txn.statements:
            done.append(txn)

    def rollback(conn: Any) -> None:
        conn.info.pop("ablate_test_txn", None)

    hooks = {"begin": begin, "before_cursor_execute": before, "commit": commit, "rollback": rollback}
    for name, fn in hooks.items():
        event.listen(Engine, name, fn)
    try:
        yield done
    finally:
        for name, fn in hooks.items():
            event.remove(Engine, name, fn)
