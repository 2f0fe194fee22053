"""What a PostgreSQL transport does to the schema when it opens.

``create_schema=True`` brings the prefix's tables to head with the revisions' frozen PostgreSQL
steps (:data:`harel_sa.revision_sql.POSTGRESQL_REVISIONS`; no Alembic import at open) as the
revisions run them, online (:func:`run_online`), holding the prefix's advisory lock (the one
``harel-sa db upgrade`` takes, so transports and migrations that start together take turns),
and records head where the database keeps harel_sa's revision. ``False`` only reads, and
raises :class:`~harel_sa.SchemaError` saying what is wrong and the command that fixes it. Both
read through :func:`harel_sa.revision_state.read`, the one reading every tool shares.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from harel_sa import revision_sql
from harel_sa.errors import BusyError, ConnectionLostError, SchemaError
from harel_sa.revision_state import State, read
from harel_sa.schema import HEAD_REVISION, Names, migration_lock

if TYPE_CHECKING:
    from harel_sa.postgres.connect import Pooler

#: As the revisions' own: the longest one step waits for a lock (the workers' calls queued
#: behind it then go on), the longest it runs, how long the upgrade keeps trying.
LOCK_TIMEOUT = "1s"
STATEMENT_TIMEOUT = "15min"
GIVE_UP_AFTER = 120.0


def open_schema(
    info: str, names: Names, where: str, create: bool, pooler: Pooler = "auto", strict: bool = True
) -> bool:
    """At a transport's open: on a connection of its own (libpq ``info``, set up as
    ``pooler`` says), :func:`ensure_schema` (``create``) or :func:`check_schema` (``strict``;
    else only look). Whether the schema is at head. A server that cannot be reached is a
    :class:`~harel_sa.ConnectionLostError`, other driver errors typed as in calls."""
    import psycopg

    from harel_sa.postgres.connect import set_up
    from harel_sa.postgres.driver import translate

    conn = None
    try:
        conn = psycopg.connect(info, autocommit=True)
        own = set_up(conn, pooler=pooler)
        if create:
            ensure_schema(conn, names, where, own_session=own)
        elif strict:
            check_schema(conn, names, where)
        else:
            return read(conn, names).ok
        return True
    except psycopg.Error as exc:
        if conn is None:
            raise ConnectionLostError(f"cannot connect to {where}: {exc}") from exc
        raise translate(exc, conn, where) from exc
    finally:
        if conn is not None:
            conn.close()


def schema_at_open(
    info: str, names: Names, where: str, create: bool, pooler: Pooler
) -> Callable[[], object] | None:
    """:func:`open_schema` at a transport's open, only looking unless ``create``: ``None`` when
    the schema is at head; else nothing was written, and the transport runs the returned check
    (a :class:`~harel_sa.SchemaError` until the schema is at head) before each call until one
    passes."""
    if open_schema(info, names, where, create, pooler, False):
        return None
    return partial(open_schema, info, names, where, False, pooler)


def ensure_schema(conn: Any, names: Names, where: str, *, own_session: bool = True) -> None:
    """Bring ``names``'s tables to head on ``conn`` (an autocommit psycopg connection), keeping
    every row, while workers run; a database already at head costs one reading and takes no
    lock. Records that disagree, or a revision newer than this harel_sa's, are refused, never
    overwritten.

    Through a transaction pooler (not ``own_session``) no session lock or setting holds from
    one statement to the next: the steps then run in one transaction (no ``CONCURRENTLY``)
    under the transaction's advisory lock, each try waiting at most ``LOCK_TIMEOUT`` for a
    lock. Upgrade a busy queue on a direct connection (``harel-sa db upgrade``).
    """
    if _usable(read(conn, names)):
        return
    if own_session:
        lock = migration_lock(names)
        wait_for_turn(
            lambda: bool(conn.execute("SELECT pg_try_advisory_lock(%s)", (lock,)).fetchone()[0])
        )
        try:
            state = _to_upgrade(conn, names, where)
            if state is not None:
                run_online(conn, revision_sql.postgresql_steps(names, after=_behind_head(state)))
                with conn.transaction():
                    _record(conn, state)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (lock,))
    else:
        _until_done(partial(_upgrade_in_one_transaction, conn, names, where))
    check_schema(conn, names, where)


#: How long an upgrade waits for another one of the same prefix to finish.
TURN_WAIT = 600.0


def wait_for_turn(try_lock: Callable[[], bool]) -> None:
    """Call ``try_lock`` (one try at the prefix's advisory lock, in a transaction of its own)
    until it takes the lock, pausing between tries; a :class:`~harel_sa.BusyError` after
    ``TURN_WAIT`` seconds. Tries, not a waiting ``pg_advisory_lock``: a session waiting in a
    statement holds a snapshot, which the holder's ``CREATE INDEX CONCURRENTLY`` waits for
    (a deadlock)."""
    deadline = time.monotonic() + TURN_WAIT
    while not try_lock():
        if time.monotonic() >= deadline:
            raise BusyError(
                f"another upgrade of this queue has run for over {TURN_WAIT:.0f} s; "
                "try again once it is done"
            )
        time.sleep(0.05)


def _to_upgrade(conn: Any, names: Names, where: str) -> State | None:
    """The state to upgrade from, read again under the lock (another process may have done
    it: then ``None``)."""
    state = read(conn, names)
    if _usable(state):
        return None
    if state.disagree or state.ahead:
        raise SchemaError(_problem(state, where))
    return state


def _behind_head(state: State) -> str | None:
    """The revision to upgrade from: the recorded one below head; else ``None`` (none recorded,
    or head recorded with objects missing: every step again, each one only makes what is
    missing)."""
    recorded = max(state.current) if state.current else None
    return None if recorded == HEAD_REVISION else recorded


def _upgrade_in_one_transaction(conn: Any, names: Names, where: str) -> None:
    with conn.transaction():
        conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        conn.execute(f"SET LOCAL statement_timeout = '{STATEMENT_TIMEOUT}'")
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (migration_lock(names),))
        state = _to_upgrade(conn, names, where)
        if state is None:
            return
        for sql in revision_sql.flat(
            revision_sql.postgresql_steps(names, after=_behind_head(state))
        ):
            conn.execute(sql.replace(" CONCURRENTLY", ""))
        _record(conn, state)


def run_online(conn: Any, steps: list[revision_sql.OnlineStep]) -> None:
    """Run ``steps`` as the revisions' ``_online`` does, on ``conn`` (an autocommit psycopg
    connection whose session is its own): each step alone (a tuple as one transaction), each
    waiting at most ``LOCK_TIMEOUT`` for a lock and tried again until ``GIVE_UP_AFTER``; an
    index a broken concurrent build left invalid is dropped first; the session's own timeouts
    are put back after."""
    saved = conn.execute(
        "SELECT current_setting('lock_timeout'), current_setting('statement_timeout')"
    ).fetchone()
    conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
    conn.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")
    try:
        for step in steps:
            _until_done(partial(_run_step, conn, step))
    finally:
        conn.execute(
            "SELECT set_config('lock_timeout', %s, false), "
            "set_config('statement_timeout', %s, false)",
            tuple(saved),
        )


def _run_step(conn: Any, step: revision_sql.OnlineStep) -> None:
    if isinstance(step, tuple):
        with conn.transaction():
            for sql in step:
                conn.execute(sql)
        return
    words = step.split()
    if words[:3] == ["CREATE", "INDEX", "CONCURRENTLY"] and _invalid(conn, words[6]):
        conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {words[6]}")
    conn.execute(step)


def _invalid(conn: Any, index: str) -> bool:
    """Whether ``index`` is one a failed or killed ``CONCURRENTLY`` build left (never used)."""
    row = conn.execute(
        "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE c.relname = %s AND NOT i.indisvalid "
        "AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())",
        (index,),
    ).fetchone()
    return bool(row[0])


def _until_done(attempt: Callable[[], None]) -> None:
    """``attempt`` again while it fails for a lock it could not take in time (or a deadlock:
    either way it gave its locks back), after a growing pause; a :class:`~harel_sa.BusyError`
    after ``GIVE_UP_AFTER`` seconds."""
    import psycopg.errors

    deadline = time.monotonic() + GIVE_UP_AFTER
    pause = 0.05
    while True:
        try:
            attempt()
            return
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected) as exc:
            if time.monotonic() + pause > deadline:
                raise BusyError(
                    f"the schema upgrade gave up after {GIVE_UP_AFTER:.0f} s: another session "
                    "kept a lock it needs (look for long or idle transactions in "
                    f"pg_stat_activity); it waited {LOCK_TIMEOUT} at a time and let the queue "
                    "go on between, what it did so far stays, and opening again resumes it"
                ) from exc
        time.sleep(pause)
        pause = min(pause * 2, 2.0)


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
        revision_sql.VERSION_TABLE.format(table=table).replace(
            "CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1
        )
    )
    conn.execute(f"DELETE FROM {table} WHERE version_num LIKE 'harel\\_sa\\_%%' ESCAPE '\\'")
    conn.execute(f"INSERT INTO {table} (version_num) VALUES (%s)", (HEAD_REVISION,))


def _problem(state: State, where: str) -> str:
    return state.problem(f"--url {where}") or "unexpected schema state"
