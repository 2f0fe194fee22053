"""What a transport does to its connection and schema when it opens, for both drivers.

``prepare`` sets the connection up (``busy_timeout``, durability, WAL); ``ensure_schema`` brings
the prefix's tables to head by running the revisions' frozen SQL (:mod:`harel_sa.revision_sql`)
under ``BEGIN IMMEDIATE``, so processes that start together do not race, and records the
revision it reached; ``check_schema`` only looks, and raises :class:`~harel_sa.SchemaError`
saying what is wrong and the command that fixes it. Both read the file through
:func:`harel_sa.revision_state.read`, the one reading every tool shares.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from functools import partial

from harel_sa import revision_sql
from harel_sa.errors import NotADatabaseError, ReadOnlyError, SchemaError, StorageError
from harel_sa.revision_state import State, read
from harel_sa.schema import DEFAULT_PREFIX, HEAD_REVISION, Names
from harel_sa.sqlite import watch
from harel_sa.sqlite.connection import connect_read_only, display, file_of, sqlite_url
from harel_sa.sqlite.driver import immediate_transaction, storage_errors, translate


def at_open(
    conn: sqlite3.Connection,
    names: Names,
    busy_timeout: float,
    synchronous: str,
    create_schema: bool,
    where: str,
) -> Callable[[sqlite3.Connection], None] | None:
    """Everything a transport does at open: :func:`prepare`, then ensure the schema of
    ``names``' prefix (``create_schema``) or look at it. ``None`` when it is at head; else
    nothing was written, and the transport runs the returned :func:`check` before each call
    until one passes."""
    try:
        prepare(conn, busy_timeout, synchronous, wal=create_schema)
    except StorageError as exc:
        raise type(exc)(f"cannot open {where}: {exc}") from exc  # name the file
    if create_schema:
        ensure_schema(conn, names, where)
        return None
    if not read(conn, names).ok:
        return partial(check, names=names, busy_timeout=busy_timeout, where=where)
    use_wal(conn, busy_timeout)  # only once the file is known to hold this queue
    return None


def check(conn: sqlite3.Connection, names: Names, busy_timeout: float, where: str) -> None:
    """Before the first call of a transport whose schema was not at head at open: raise
    :class:`~harel_sa.SchemaError` unless it is now, then switch the file to WAL."""
    check_schema(conn, names, where)
    use_wal(conn, busy_timeout)


def prepare(
    conn: sqlite3.Connection, busy_timeout: float, synchronous: str, *, wal: bool = True
) -> None:
    """Autocommit mode (transactions are driven by hand), ``busy_timeout``, durability,
    ``journal_size_limit``, and (with ``wal``) WAL: see :func:`use_wal`.

    Errors are typed by SQLite's result code: only a file that is not a SQLite database gets
    :class:`~harel_sa.NotADatabaseError`; a full disk gets :class:`~harel_sa.StorageFullError`
    and a lock held past ``busy_timeout`` :class:`~harel_sa.BusyError`.
    """
    conn.isolation_level = None
    with storage_errors():
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    readable(conn)
    with storage_errors():
        conn.execute(f"PRAGMA journal_size_limit = {watch.WAL_LIMIT}").fetchone()
        conn.execute(f"PRAGMA synchronous = {synchronous}")
    if wal:
        use_wal(conn, busy_timeout)


#: SQLITE_READONLY_DIRECTORY: reading a WAL file needs its -shm, which cannot be created here.
_READONLY_DIRECTORY = 1544


def readable(conn: sqlite3.Connection) -> None:
    """Read the schema once, and say exactly why the file cannot be read when it cannot:
    :class:`~harel_sa.NotADatabaseError` for a file that is not a database, and for a WAL file
    in a directory this user may not write, what SQLite needs; else the error of its code."""
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        code = getattr(exc, "sqlite_errorcode", sqlite3.SQLITE_NOTADB)
        if code & 0xFF in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT):
            raise NotADatabaseError(f"not a SQLite database: {exc}") from exc
        if code == _READONLY_DIRECTORY:
            raise ReadOnlyError(
                "cannot read it: the file is in WAL mode, and SQLite reads a WAL file only with "
                "its -shm and -wal files beside it, which do not exist and cannot be created "
                "because this user may not write the directory (SQLITE_READONLY_DIRECTORY). "
                "Read it as a user who may write the directory, make the directory writable, "
                "or read a copy"
            ) from exc
        if code & 0xFF == sqlite3.SQLITE_CANTOPEN and _on_read_only_mount(conn):
            raise ReadOnlyError(
                "cannot read it: the file is in WAL mode, its directory is on a read-only mount, "
                "and SQLite reads a WAL file that has a -wal file only with a -shm file beside "
                "it, which cannot be created there (SQLITE_CANTOPEN). Mount it read-write, or "
                "read a copy"
            ) from exc
        raise translate(exc) from exc


def _on_read_only_mount(conn: sqlite3.Connection) -> bool:
    """Whether the main database of ``conn`` is a file in a directory on a read-only mount."""
    path = conn.execute("PRAGMA database_list").fetchone()[2]
    if not path or not os.path.exists(path):
        return False
    return bool(os.statvfs(os.path.dirname(path)).f_flag & os.ST_RDONLY)


def use_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch the file to WAL (it stays so), unless it is already, in memory, or read-only (a
    ``mode=ro`` connection or a file it may not write: it cannot be switched, nor written).

    Waits up to ``busy_timeout`` while another connection holds a rollback-journal lock, as a
    ``harel-sa db upgrade`` creating the file does: SQLite answers that switch SQLITE_BUSY at
    once, without its busy handler, so it is retried here, backing off up to 50 ms.
    """
    deadline = time.monotonic() + busy_timeout
    pause = 0.001
    with storage_errors():
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() in ("wal", "memory"):
            return
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL").fetchone()
                return
            except sqlite3.OperationalError as exc:
                primary = getattr(exc, "sqlite_errorcode", 0) & 0xFF
                if primary == sqlite3.SQLITE_READONLY:
                    return
                if primary != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                    raise
            time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
            pause = min(pause * 2, 0.05)


def ensure_schema(conn: sqlite3.Connection, names: Names, where: str) -> None:
    """Bring this prefix's tables to head, keeping every row, and record head where the file
    keeps harel_sa's revision (its own version table, or the host's); then check it.

    A file already at head costs one reading and takes no write lock. Records that disagree
    are refused, never overwritten. A file a newer harel_sa upgraded opens as it is when it
    holds everything this version uses (an older process during a rolling deploy).
    """
    if _usable(read(conn, names)):
        return
    with immediate_transaction(conn):
        state = read(conn, names)  # again, under the write lock
        if _usable(state):
            return
        if state.disagree or state.ahead:
            raise SchemaError(_problem(state, where))
        revision_sql.upgrade(conn, names)
        _record(conn, state)
    check_schema(conn, names, where)


def _usable(state: State) -> bool:
    return state.ok or (state.ahead and state.present and not state.missing and not state.disagree)


def _record(conn: sqlite3.Connection, state: State) -> None:
    """Record head where the revision was recorded (Alembic's own statements' effect)."""
    record = state.record
    table = record.table if record is not None else state.names.version_table
    if record is None and table not in {r.table for r in state.records}:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND lower(name) = ?", (table,)
        ).fetchone()
        if exists is None:
            conn.execute(revision_sql.VERSION_TABLE.format(table=table))
    conn.execute(f"DELETE FROM {table} WHERE version_num LIKE 'harel\\_sa\\_%' ESCAPE '\\'")
    conn.execute(f"INSERT INTO {table} (version_num) VALUES (?)", (HEAD_REVISION,))


def check_schema(conn: sqlite3.Connection, names: Names, where: str | None) -> None:
    """Raise :class:`~harel_sa.SchemaError` unless the prefix's queue is exactly at head: every
    table, column and index present, and its one recorded revision is harel_sa's head."""
    state = read(conn, names)
    if not state.ok:
        raise SchemaError(_problem(state, where or "sqlite:///PATH"))


def _problem(state: State, where: str) -> str:
    return state.problem(f"--url {where}") or "unexpected schema state"


def read_target(
    target: object, *, prefix: str = DEFAULT_PREFIX, version_table: str | None = None
) -> State:
    """What :func:`harel_sa.revision_state.read` finds for ``prefix`` in ``target`` (a path or URL),
    through a read-only connection: nothing is written, and a file that does not exist reads
    as empty (and is not created)."""
    names = Names(prefix)
    url = sqlite_url(target)
    path = file_of(url)
    if path is not None and not os.path.exists(path):
        return State(names, present=False, missing=(), records=(), others=())
    with closing(connect_read_only(url)) as conn:
        try:
            readable(conn)
        except (NotADatabaseError, ReadOnlyError) as exc:
            raise type(exc)(f"cannot open {display(url)}: {exc}") from exc
        return read(conn, names, version_table)
