"""Frozen in-place schema steps, shared by the Alembic revisions and the start-up upgrade.

A released revision calls these, so each must mean the same forever: change a step and every
database upgraded by it differs from one upgraded before. A new schema change is a new step
(and a new revision), never an edit here. Each step is guarded (it looks before it writes), so
running it twice, or after a crash half-way through a revision, is harmless.

Steps speak to SQLite through a :class:`Runner`, so one body serves sqlite3, aiosqlite's thread
and Alembic's connection alike. An offline runner (``alembic upgrade --sql``) cannot look, so
``columns`` returns ``None`` there and the steps emit their DDL unconditionally.
"""

from __future__ import annotations

from typing import Protocol

from harel_sa.schema import Names


class Runner(Protocol):
    """Executes SQL on one SQLite connection, inside the caller's transaction."""

    def run(self, sql: str) -> None: ...

    def rows(self, sql: str) -> list[tuple[object, ...]] | None:
        """The result rows, or ``None`` when the runner cannot read (offline SQL)."""


def columns(runner: Runner, table: str) -> set[str] | None:
    """The column names of ``table`` (empty when it does not exist), ``None`` offline."""
    rows = runner.rows(f"PRAGMA table_info({table})")
    return None if rows is None else {str(row[1]) for row in rows}


def add_routing_key(runner: Runner, names: Names) -> bool:
    """Schema 3 -> 4: the groups' ``routing_key`` and the index that orders a routed claim.

    Returns whether the column was added. SQLite has no ADD COLUMN IF NOT EXISTS, hence the look.
    """
    present = columns(runner, names.groups)
    added = present is None or "routing_key" not in present
    if added:
        runner.run(f"ALTER TABLE {names.groups} ADD COLUMN routing_key TEXT")
    runner.run(
        f"CREATE INDEX IF NOT EXISTS {names.groups_by_routing_key} "
        f"ON {names.groups} (routing_key, last_claimed_at)"
    )
    return added


def drop_routing_key(runner: Runner, names: Names) -> None:
    """Undo :func:`add_routing_key`, keeping every row (SQLite >= 3.35 drops columns in place)."""
    runner.run(f"DROP INDEX IF EXISTS {names.groups_by_routing_key}")
    present = columns(runner, names.groups)
    if present is None or "routing_key" in present:
        runner.run(f"ALTER TABLE {names.groups} DROP COLUMN routing_key")


def adopt_orphans(runner: Runner, names: Names) -> None:
    """Give every message without a group row one, so a claim can reach it.

    The original stdlib transport published in two autocommit statements; a crash between them
    left a message that no claim could ever see. Adopted groups get priority 0, no routing key.
    """
    runner.run(
        f"INSERT OR IGNORE INTO {names.groups} (group_id) "
        f"SELECT DISTINCT group_id FROM {names.messages}"
    )


def add_deliveries(runner: Runner, names: Names) -> bool:
    """Dead letters: the messages' delivery count. Returns whether the column was added."""
    present = columns(runner, names.messages)
    added = present is None or "deliveries" not in present
    if added:
        runner.run(f"ALTER TABLE {names.messages} ADD COLUMN deliveries INTEGER NOT NULL DEFAULT 0")
    return added


def drop_deliveries(runner: Runner, names: Names) -> None:
    """Undo :func:`add_deliveries`, keeping every message."""
    present = columns(runner, names.messages)
    if present is None or "deliveries" in present:
        runner.run(f"ALTER TABLE {names.messages} DROP COLUMN deliveries")
