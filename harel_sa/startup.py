"""What a transport does to its connection and schema when it opens, for both drivers.

``prepare`` sets the connection up (WAL, ``busy_timeout``, durability); ``ensure_schema`` creates
what is missing from the metadata and runs the frozen in-place steps, under ``BEGIN IMMEDIATE``
so processes that start together do not race; ``check_schema`` only looks, and raises
:class:`~harel_sa.SchemaError` naming what is missing and the command that fixes it.
"""

from __future__ import annotations

import sqlite3
import time
from functools import lru_cache
from typing import Any

from sqlalchemy.dialects import sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from harel_sa import steps, watch
from harel_sa.core import Options
from harel_sa.errors import NotADatabaseError, SchemaError, StorageError
from harel_sa.operations import translate, write
from harel_sa.schema import HEAD_REVISION, Names, Schema, schema_for


class ConnectionRunner:
    """A :class:`~harel_sa.steps.Runner` over a sqlite3 connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def run(self, sql: str) -> None:
        self.conn.execute(sql)

    def rows(self, sql: str) -> list[tuple[object, ...]]:
        return self.conn.execute(sql).fetchall()


def run(conn: sqlite3.Connection, options: Options[Any], create_schema: bool, where: str) -> None:
    """Everything a transport does at open: :func:`prepare`, then ensure or check the schema."""
    try:
        prepare(conn, options.busy_timeout, options.synchronous)
    except StorageError as exc:
        raise type(exc)(f"cannot open {where}: {exc}") from exc  # name the file
    if create_schema:
        ensure_schema(conn, options.names)
    else:
        check_schema(conn, options.names, where)


def prepare(conn: sqlite3.Connection, busy_timeout: float, synchronous: str) -> None:
    """Autocommit mode (transactions are driven by hand), ``busy_timeout``, WAL with
    ``journal_size_limit``, durability.

    Errors are typed by SQLite's result code: only a file that is not a SQLite database gets
    :class:`~harel_sa.NotADatabaseError`; a full disk gets :class:`~harel_sa.StorageFullError`
    and a lock held past ``busy_timeout`` :class:`~harel_sa.BusyError`. Switching a file to WAL
    waits (up to ``busy_timeout``) while another connection holds a rollback-journal lock, as a
    ``harel-sa db upgrade`` creating the file does.
    """
    conn.isolation_level = None
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() not in ("wal", "memory"):
            _switch_to_wal(conn, time.monotonic() + busy_timeout)
        conn.execute(f"PRAGMA journal_size_limit = {watch.WAL_LIMIT}").fetchone()
        conn.execute(f"PRAGMA synchronous = {synchronous}")
    except sqlite3.DatabaseError as exc:
        error = translate(exc)
        if isinstance(error, NotADatabaseError):
            raise NotADatabaseError(f"not a SQLite database: {error}") from exc
        raise error from exc


def _switch_to_wal(conn: sqlite3.Connection, deadline: float) -> None:
    # SQLite answers SQLITE_BUSY at once, without its busy handler, while another connection
    # holds a rollback-journal lock: retry until the deadline, backing off up to 50 ms.
    pause = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
        pause = min(pause * 2, 0.05)


@lru_cache(maxsize=64)
def _ddl(prefix: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``CREATE TABLE/INDEX IF NOT EXISTS`` for the metadata of ``prefix``, compiled once."""
    dialect = sqlite.dialect()
    md = schema_for(prefix).metadata
    tables = tuple(
        str(CreateTable(t, if_not_exists=True).compile(dialect=dialect)).strip()
        for t in md.sorted_tables
    )
    indexes = tuple(
        str(CreateIndex(ix, if_not_exists=True).compile(dialect=dialect))
        for t in md.sorted_tables
        for ix in sorted(t.indexes, key=lambda ix: str(ix.name))
    )
    return tables, indexes


def ensure_schema(conn: sqlite3.Connection, names: Names) -> None:
    """Bring this prefix's tables to the metadata, keeping every row; then check it."""
    tables, indexes = _ddl(names.prefix)
    runner = ConnectionRunner(conn)
    with write(conn):
        before = _existing(conn, "table")
        for ddl in tables:
            conn.execute(ddl)
        altered = False
        if names.groups in before:
            altered |= steps.add_routing_key(runner, names)
        if names.messages in before:
            altered |= steps.add_deliveries(runner, names)
        for ddl in indexes:
            conn.execute(ddl)
        if altered:
            # A table from before this version was written by the original transport, whose
            # non-atomic publish can leave messages without a group row.
            steps.adopt_orphans(runner, names)
    check_schema(conn, names, where=None, require_head=False)


def check_schema(
    conn: sqlite3.Connection, names: Names, where: str | None, *, require_head: bool = True
) -> None:
    """Raise :class:`~harel_sa.SchemaError` unless every table, column and index is present
    and (with ``require_head``) any harel_sa revision recorded in a version table is the head."""
    schema = schema_for(names.prefix)
    missing = _missing(conn, schema)
    current = _recorded_revisions(conn, names)
    behind = require_head and bool(current) and current != [HEAD_REVISION]
    if not missing and not behind:
        return
    url = where or "sqlite:///PATH"
    if current and max(current) > HEAD_REVISION:  # ids are harel_sa_NNNN: they sort in order
        raise SchemaError(
            f"harel_sa schema for prefix {names.prefix!r} is at revision {max(current)}, newer "
            f"than this harel_sa knows ({HEAD_REVISION}): upgrade the harel-sa package."
        )
    parts = []
    if missing:
        parts.append("missing " + ", ".join(missing))
    parts.append(
        f"database at revision {', '.join(current) if current else '(none recorded)'}, "
        f"this harel_sa needs {HEAD_REVISION}"
    )
    raise SchemaError(
        f"harel_sa schema for prefix {names.prefix!r} is not at head: {'; '.join(parts)}. "
        f"Run `harel-sa db upgrade --url {url} --prefix {names.prefix}` "
        "(or `alembic upgrade heads` in your own pipeline), "
        "or open the transport with create_schema=True."
    )


def _existing(conn: sqlite3.Connection, kind: str) -> set[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,)).fetchall()
    return {str(row[0]) for row in rows}


def _missing(conn: sqlite3.Connection, schema: Schema) -> list[str]:
    tables, indexes = _existing(conn, "table"), _existing(conn, "index")
    missing: list[str] = []
    for table in schema.metadata.sorted_tables:
        if table.name not in tables:
            missing.append(f"table {table.name}")
            continue
        present = steps.columns(ConnectionRunner(conn), table.name) or set()
        missing += [f"column {table.name}.{c.name}" for c in table.c if c.name not in present]
        missing += [f"index {ix.name}" for ix in table.indexes if ix.name not in indexes]
    return missing


def _recorded_revisions(conn: sqlite3.Connection, names: Names) -> list[str]:
    """harel_sa revisions recorded for this prefix: its own version table, or a host's."""
    tables = _existing(conn, "table")
    for table in (names.version_table, "alembic_version"):
        if table in tables:
            rows = conn.execute(
                f"SELECT version_num FROM {table} WHERE version_num LIKE 'harel\\_sa\\_%' "
                "ESCAPE '\\'"
            ).fetchall()
            if rows:
                return sorted(str(r[0]) for r in rows)
    return []
