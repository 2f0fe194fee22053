"""The revisions' upgrade SQL, frozen, for a transport's start-up (``create_schema=True``).

A transport opens at every process start, so its start-up does not import Alembic: it runs this
copy of each revision's statements (:data:`REVISIONS`; PostgreSQL's:
:data:`POSTGRESQL_REVISIONS`), with the same guards. The tests hold the copy equal to the
revisions: statement for statement to the checked-in ``alembic upgrade --sql`` output of each
(``tests/migrations/golden/``), and object for object to what the revisions build. Like the
revisions, an entry never changes once released: a schema change is a new revision and a new
entry. ``{p}`` stands for the prefix.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from harel_sa.schema import Names


@dataclass(frozen=True)
class DDL:
    """One statement of a revision; skipped when ``unless_column`` (table, column) exists, as
    the revision's own look at ``PRAGMA table_info`` skips it."""

    sql: str
    unless_column: tuple[str, str] | None = None


#: SQLite's copy, held object for object to what the Alembic revisions build (``sqlite_master`` of
#: both paths, from every kind of starting file).
REVISIONS: tuple[tuple[str, tuple[DDL, ...]], ...] = (
    (
        "harel_sa_0001",
        (
            DDL(
                "CREATE TABLE IF NOT EXISTS {p}_transport_messages (\n"
                "    seq INTEGER PRIMARY KEY AUTOINCREMENT,\n"
                "    group_id TEXT NOT NULL,\n"
                "    event TEXT NOT NULL,\n"
                "    locked_by TEXT,\n"
                "    lock_expiry REAL\n"
                ")"
            ),
            DDL(
                "CREATE TABLE IF NOT EXISTS {p}_transport_groups (\n"
                "    group_id TEXT,\n"
                "    last_claimed_at REAL DEFAULT 0.0 NOT NULL,\n"
                "    priority INTEGER DEFAULT 0 NOT NULL,\n"
                "    PRIMARY KEY (group_id)\n"
                ")"
            ),
            DDL(
                "CREATE INDEX IF NOT EXISTS {p}_transport_groups_by_last_claimed "
                "ON {p}_transport_groups (last_claimed_at)"
            ),
            DDL(
                "CREATE INDEX IF NOT EXISTS {p}_transport_messages_by_group "
                "ON {p}_transport_messages (group_id, seq)"
            ),
            DDL(
                "INSERT OR IGNORE INTO {p}_transport_groups (group_id) "
                "SELECT DISTINCT group_id FROM {p}_transport_messages"
            ),
        ),
    ),
    (
        "harel_sa_0002",
        (
            DDL(
                "ALTER TABLE {p}_transport_groups ADD COLUMN routing_key TEXT",
                unless_column=("{p}_transport_groups", "routing_key"),
            ),
            DDL(
                "CREATE INDEX IF NOT EXISTS {p}_transport_groups_by_routing_key "
                "ON {p}_transport_groups (routing_key, last_claimed_at)"
            ),
        ),
    ),
    (
        "harel_sa_0003",
        (
            DDL(
                "ALTER TABLE {p}_transport_messages "
                "ADD COLUMN deliveries INTEGER NOT NULL DEFAULT 0",
                unless_column=("{p}_transport_messages", "deliveries"),
            ),
            DDL(
                "CREATE TABLE IF NOT EXISTS {p}_transport_dead (\n"
                "    seq INTEGER NOT NULL,\n"
                "    group_id TEXT NOT NULL,\n"
                "    event TEXT NOT NULL,\n"
                "    error TEXT NOT NULL,\n"
                "    dead_at REAL NOT NULL,\n"
                "    deliveries INTEGER NOT NULL,\n"
                "    priority INTEGER DEFAULT 0 NOT NULL,\n"
                "    routing_key TEXT,\n"
                "    PRIMARY KEY (seq)\n"
                ")"
            ),
            DDL(
                "CREATE INDEX IF NOT EXISTS {p}_transport_dead_by_group "
                "ON {p}_transport_dead (group_id, seq)"
            ),
        ),
    ),
    (
        "harel_sa_0004",
        (
            DDL(
                "CREATE INDEX IF NOT EXISTS {p}_transport_groups_by_priority "
                "ON {p}_transport_groups (priority, last_claimed_at) WHERE priority > 0"
            ),
        ),
    ),
    (
        "harel_sa_0005",
        (
            DDL(
                "ALTER TABLE {p}_transport_messages ADD COLUMN enqueued_at REAL",
                unless_column=("{p}_transport_messages", "enqueued_at"),
            ),
            DDL("DROP INDEX IF EXISTS {p}_transport_groups_by_routing_key"),
            DDL(
                "CREATE INDEX IF NOT EXISTS {p}_transport_groups_by_routing_key "
                "ON {p}_transport_groups (routing_key, last_claimed_at) "
                "WHERE routing_key IS NOT NULL"
            ),
        ),
    ),
    ("harel_sa_0006", ()),  # PostgreSQL's indexes only: nothing on SQLite
    (
        "harel_sa_0007",
        (
            DDL(
                "CREATE TABLE IF NOT EXISTS {p}_transport_scheduled (\n"
                "    seq INTEGER PRIMARY KEY AUTOINCREMENT,\n"
                "    group_id TEXT NOT NULL,\n"
                "    event TEXT NOT NULL,\n"
                "    due_at REAL NOT NULL,\n"
                "    priority INTEGER DEFAULT 0 NOT NULL,\n"
                "    routing_key TEXT,\n"
                "    message_key TEXT\n"
                ")"
            ),
            DDL(
                "CREATE INDEX IF NOT EXISTS {p}_transport_scheduled_by_due "
                "ON {p}_transport_scheduled (due_at)"
            ),
            DDL(
                "CREATE INDEX IF NOT EXISTS {p}_transport_scheduled_by_key "
                "ON {p}_transport_scheduled (message_key) WHERE message_key IS NOT NULL"
            ),
            DDL(
                "ALTER TABLE {p}_transport_messages ADD COLUMN message_key TEXT",
                unless_column=("{p}_transport_messages", "message_key"),
            ),
            DDL(
                "CREATE INDEX IF NOT EXISTS {p}_transport_messages_by_key "
                "ON {p}_transport_messages (message_key) WHERE message_key IS NOT NULL"
            ),
        ),
    ),
    (
        "harel_sa_0008",
        (
            DDL(
                "CREATE TABLE IF NOT EXISTS {p}_transport_periodic (\n"
                "    name TEXT NOT NULL,\n"
                "    tick_at REAL NOT NULL,\n"
                "    PRIMARY KEY (name)\n"
                ")"
            ),
        ),
    ),
    (
        "harel_sa_0009",
        (
            DDL(
                "CREATE TABLE IF NOT EXISTS {p}_transport_controls (\n"
                "    target TEXT NOT NULL,\n"
                "    paused_at REAL,\n"
                "    backoff_until REAL,\n"
                "    PRIMARY KEY (target)\n"
                ")"
            ),
        ),
    ),
    (
        "harel_sa_0010",
        (
            DDL(
                "ALTER TABLE {p}_transport_groups ADD COLUMN max_in_flight INTEGER",
                unless_column=("{p}_transport_groups", "max_in_flight"),
            ),
            DDL(
                "ALTER TABLE {p}_transport_scheduled ADD COLUMN max_in_flight INTEGER",
                unless_column=("{p}_transport_scheduled", "max_in_flight"),
            ),
            DDL(
                "ALTER TABLE {p}_transport_dead ADD COLUMN max_in_flight INTEGER",
                unless_column=("{p}_transport_dead", "max_in_flight"),
            ),
        ),
    ),
)

#: A PostgreSQL step: one statement run alone, or a tuple of statements run as one transaction.
OnlineStep = str | tuple[str, ...]
#: The routing-key index made anew, never missing in between (0005, 0006): built beside it,
#: the old one dropped, the new one renamed.
_ROUTING_KEY_INDEX, _BESIDE = (
    "{p}_transport_groups_by_routing_key",
    "{p}_transport_groups_by_key_next",
)


def _replace_routing_key_index(definition: str) -> tuple[str, ...]:
    return (
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {_BESIDE} {definition}",
        f"DROP INDEX CONCURRENTLY IF EXISTS {_ROUTING_KEY_INDEX}",
        f"ALTER INDEX IF EXISTS {_BESIDE} RENAME TO {_ROUTING_KEY_INDEX}",
    )


#: The same revisions on PostgreSQL, in its types, as the steps their ``_online`` runs (their
#: ``IF NOT EXISTS`` forms need no look at the catalog first); held equal to the
#: ``*.postgresql.sql`` golden files.
POSTGRESQL_REVISIONS: tuple[tuple[str, tuple[OnlineStep, ...]], ...] = (
    (
        "harel_sa_0001",
        (
            (
                "CREATE TABLE IF NOT EXISTS {p}_transport_messages (\n"
                "    seq BIGINT GENERATED BY DEFAULT AS IDENTITY,\n"
                "    group_id TEXT NOT NULL,\n"
                "    event TEXT NOT NULL,\n"
                "    locked_by TEXT,\n"
                "    lock_expiry DOUBLE PRECISION,\n"
                "    PRIMARY KEY (seq)\n"
                ")",
                "CREATE TABLE IF NOT EXISTS {p}_transport_groups (\n"
                "    group_id TEXT,\n"
                "    last_claimed_at DOUBLE PRECISION DEFAULT 0.0 NOT NULL,\n"
                "    priority BIGINT DEFAULT 0 NOT NULL,\n"
                "    arrival BIGINT GENERATED BY DEFAULT AS IDENTITY,\n"
                "    PRIMARY KEY (group_id)\n"
                ")",
                "CREATE INDEX IF NOT EXISTS {p}_transport_groups_by_last_claimed ON "
                "{p}_transport_groups (last_claimed_at, arrival)",
                "CREATE INDEX IF NOT EXISTS {p}_transport_messages_by_group ON "
                "{p}_transport_messages (group_id, seq)",
                "INSERT INTO {p}_transport_groups (group_id) SELECT group_id FROM "
                "{p}_transport_messages GROUP BY group_id ORDER BY min(seq) ON CONFLICT "
                "(group_id) DO NOTHING",
            ),
        ),
    ),
    (
        "harel_sa_0002",
        (
            "ALTER TABLE {p}_transport_groups ADD COLUMN IF NOT EXISTS routing_key TEXT",
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS {p}_transport_groups_by_routing_key ON "
            "{p}_transport_groups (routing_key, last_claimed_at)",
        ),
    ),
    (
        "harel_sa_0003",
        (
            "ALTER TABLE {p}_transport_messages ADD COLUMN IF NOT EXISTS deliveries "
            "BIGINT NOT NULL DEFAULT 0",
            (
                "CREATE TABLE IF NOT EXISTS {p}_transport_dead (\n"
                "    seq BIGINT NOT NULL,\n"
                "    group_id TEXT NOT NULL,\n"
                "    event TEXT NOT NULL,\n"
                "    error TEXT NOT NULL,\n"
                "    dead_at DOUBLE PRECISION NOT NULL,\n"
                "    deliveries BIGINT NOT NULL,\n"
                "    priority BIGINT DEFAULT 0 NOT NULL,\n"
                "    routing_key TEXT,\n"
                "    PRIMARY KEY (seq)\n"
                ")",
                "CREATE INDEX IF NOT EXISTS {p}_transport_dead_by_group ON "
                "{p}_transport_dead (group_id, seq)",
            ),
        ),
    ),
    (
        "harel_sa_0004",
        (
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS {p}_transport_groups_by_priority ON "
            "{p}_transport_groups (priority, last_claimed_at) WHERE priority > 0",
        ),
    ),
    (
        "harel_sa_0005",
        (
            "ALTER TABLE {p}_transport_messages ADD COLUMN IF NOT EXISTS "
            "enqueued_at DOUBLE PRECISION",
            *_replace_routing_key_index(
                "ON {p}_transport_groups (routing_key, last_claimed_at) "
                "WHERE routing_key IS NOT NULL"
            ),
        ),
    ),
    (
        "harel_sa_0006",
        (
            *(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {{p}}_transport_groups_by_floor{floor} "
                f"ON {{p}}_transport_groups (last_claimed_at, arrival) WHERE priority >= {floor}"
                for floor in (1, 2, 3, 4)
            ),
            "DROP INDEX CONCURRENTLY IF EXISTS {p}_transport_groups_by_priority",
            *_replace_routing_key_index(
                "ON {p}_transport_groups (routing_key, last_claimed_at, arrival) "
                "WHERE routing_key IS NOT NULL"
            ),
        ),
    ),
    (
        "harel_sa_0007",
        (
            (
                "CREATE TABLE IF NOT EXISTS {p}_transport_scheduled (\n"
                "    seq BIGINT GENERATED BY DEFAULT AS IDENTITY,\n"
                "    group_id TEXT NOT NULL,\n"
                "    event TEXT NOT NULL,\n"
                "    due_at DOUBLE PRECISION NOT NULL,\n"
                "    priority BIGINT DEFAULT 0 NOT NULL,\n"
                "    routing_key TEXT,\n"
                "    message_key TEXT,\n"
                "    PRIMARY KEY (seq)\n"
                ")",
                "CREATE INDEX IF NOT EXISTS {p}_transport_scheduled_by_due ON "
                "{p}_transport_scheduled (due_at, seq)",
                "CREATE INDEX IF NOT EXISTS {p}_transport_scheduled_by_key ON "
                "{p}_transport_scheduled (message_key) WHERE message_key IS NOT NULL",
            ),
            "ALTER TABLE {p}_transport_messages ADD COLUMN IF NOT EXISTS message_key TEXT",
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS {p}_transport_messages_by_key ON "
            "{p}_transport_messages (message_key) WHERE message_key IS NOT NULL",
        ),
    ),
    (
        "harel_sa_0008",
        (
            "CREATE TABLE IF NOT EXISTS {p}_transport_periodic (\n"
            "    name TEXT NOT NULL,\n"
            "    tick_at DOUBLE PRECISION NOT NULL,\n"
            "    PRIMARY KEY (name)\n"
            ")",
        ),
    ),
    (
        "harel_sa_0009",
        (
            "CREATE TABLE IF NOT EXISTS {p}_transport_controls (\n"
            "    target TEXT NOT NULL,\n"
            "    paused_at DOUBLE PRECISION,\n"
            "    backoff_until DOUBLE PRECISION,\n"
            "    PRIMARY KEY (target)\n"
            ")",
        ),
    ),
    (
        "harel_sa_0010",
        (
            "ALTER TABLE {p}_transport_groups ADD COLUMN IF NOT EXISTS max_in_flight BIGINT",
            "ALTER TABLE {p}_transport_scheduled ADD COLUMN IF NOT EXISTS max_in_flight BIGINT",
            "ALTER TABLE {p}_transport_dead ADD COLUMN IF NOT EXISTS max_in_flight BIGINT",
        ),
    ),
)

#: The version table exactly as Alembic creates it online (so both paths leave the same file;
#: its ``--sql`` output shows the tabs as four spaces).
VERSION_TABLE = (
    "CREATE TABLE {table} (\n"
    "\tversion_num VARCHAR(32) NOT NULL, \n"
    "\tCONSTRAINT {table}_pkc PRIMARY KEY (version_num)\n"
    ")"
)


def statements(names: Names, revision: str, conn: sqlite3.Connection | None = None) -> list[str]:
    """``revision``'s statements under ``names``; with ``conn``, the guarded ones that would be
    skipped there are left out (without it, all of them, as ``alembic upgrade --sql`` prints)."""
    body = dict(REVISIONS)[revision]
    chosen = []
    for statement in body:
        if statement.unless_column is not None and conn is not None:
            table, column = (part.format(p=names.prefix) for part in statement.unless_column)
            present = {str(r[1]).lower() for r in conn.execute(f"PRAGMA table_info({table})")}
            if column in present:
                continue
        chosen.append(statement.sql.format(p=names.prefix))
    return chosen


def upgrade(conn: sqlite3.Connection, names: Names) -> None:
    """Run every revision's statements, guarded, inside the caller's transaction.

    Every statement is ``IF NOT EXISTS``, guarded, or (the orphans' adoption) harmless when
    repeated, so running all of them on a file at any revision, or on a file of the original
    transport that recorded none, brings it to head and re-creates whatever is missing.
    """
    for revision, _ in REVISIONS:
        for sql in statements(names, revision, conn):
            conn.execute(sql)


def postgresql_steps(names: Names, after: str | None = None) -> list[OnlineStep]:
    """The PostgreSQL steps under ``names`` of every revision after ``after`` (of all of them
    when it is ``None`` or no revision's), in order: run them on a database at ``after`` (any
    revision, for all of them: each is ``IF NOT EXISTS`` or harmless when repeated) and it is
    at head. Only what is needed: a step of an older revision may take a lock that the running
    workers' calls wait for."""
    revisions = [revision for revision, _ in POSTGRESQL_REVISIONS]
    first = revisions.index(after) + 1 if after in revisions else 0
    return [
        step.format(p=names.prefix)
        if isinstance(step, str)
        else tuple(sql.format(p=names.prefix) for sql in step)
        for _, body in POSTGRESQL_REVISIONS[first:]
        for step in body
    ]


def flat(steps: tuple[OnlineStep, ...] | list[OnlineStep]) -> list[str]:
    """The statements of ``steps``, in order (a transaction's in its place)."""
    return [sql for step in steps for sql in ((step,) if isinstance(step, str) else step)]


def head() -> str:
    return REVISIONS[-1][0]
