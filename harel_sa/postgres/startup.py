"""What a PostgreSQL transport does to the schema when it opens.

``create_schema=True`` brings the prefix's tables to head with the revisions' frozen PostgreSQL
statements (:data:`harel_sa.frozen.POSTGRESQL_REVISIONS`; no Alembic import at open), in one
transaction holding the prefix's advisory lock (the same one ``harel-sa db upgrade`` takes, so
transports and migrations that start together take turns), and records head where the
database keeps harel_sa's revision. ``False`` only reads, and raises
:class:`~harel_sa.SchemaError` saying what is wrong and the command that fixes it. Both read
through :func:`harel_sa.state.read`, the one reading every tool shares.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harel_sa import frozen
from harel_sa.errors import ConnectionLostError, SchemaError
from harel_sa.schema import HEAD_REVISION, Names, migration_lock
from harel_sa.state import State, read

if TYPE_CHECKING:
    from harel_sa.postgres.connect import Pooler


def open_schema(info: str, names: Names, where: str, create: bool, pooler: Pooler = "auto") -> None:
    """At a transport's open: on a connection of its own (libpq ``info``, set up as
    ``pooler`` says), :func:`ensure_schema` (``create``) or :func:`check_schema`; a server that
    cannot be reached is a :class:`~harel_sa.ConnectionLostError`, other driver errors typed
    as in calls."""
    import psycopg

    from harel_sa.postgres.connect import set_up
    from harel_sa.postgres.driver import translate

    conn = None
    try:
        conn = psycopg.connect(info, autocommit=True)
        set_up(conn, pooler=pooler)
        if create:
            ensure_schema(conn, names, where)
        else:
            check_schema(conn, names, where)
    except psycopg.Error as exc:
        if conn is None:
            raise ConnectionLostError(f"cannot connect to {where}: {exc}") from exc
        raise translate(exc, conn, where) from exc
    finally:
        if conn is not None:
            conn.close()


def ensure_schema(conn: Any, names: Names, where: str) -> None:
    """Bring ``names``'s tables to head on ``conn`` (an autocommit psycopg connection), keeping
    every row; a database already at head costs one reading and takes no lock. Records that
    disagree, or a revision newer than this harel_sa's, are refused, never overwritten."""
    if _usable(read(conn, names)):
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (migration_lock(names),))
        state = read(conn, names)  # again, under the lock: another process may have done it
        if _usable(state):
            return
        if state.disagree or state.ahead:
            raise SchemaError(_problem(state, where))
        for sql in frozen.postgresql_statements(names):
            conn.execute(sql)
        _record(conn, state)
    check_schema(conn, names, where)


def check_schema(conn: Any, names: Names, where: str) -> None:
    """Raise :class:`~harel_sa.SchemaError` unless the prefix's queue is exactly at head."""
    state = read(conn, names)
    if not state.ok:
        raise SchemaError(_problem(state, where))


def _usable(state: State) -> bool:
    # A database a newer harel_sa upgraded opens as it is when it holds everything used here.
    return state.ok or (state.ahead and state.present and not state.missing and not state.disagree)


def _record(conn: Any, state: State) -> None:
    """Record head where the revision was recorded (what Alembic's own statements do)."""
    record = state.record
    table = record.table if record is not None else state.names.version_table
    conn.execute(
        frozen.VERSION_TABLE.format(table=table).replace(
            "CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1
        )
    )
    conn.execute(f"DELETE FROM {table} WHERE version_num LIKE 'harel\\_sa\\_%%' ESCAPE '\\'")
    conn.execute(f"INSERT INTO {table} (version_num) VALUES (%s)", (HEAD_REVISION,))


def _problem(state: State, where: str) -> str:
    return state.problem(f"--url {where}") or "unexpected schema state"
