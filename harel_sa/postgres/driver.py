"""Running an operation's program on a psycopg connection; the driver's errors as harel_sa's.

:func:`run` is the sync driver (the async twin awaits the same steps). Every statement is sent
as :mod:`~harel_sa.postgres.statements` numbered it, on a raw cursor (psycopg parses nothing),
and prepared (``prepare=True``): PostgreSQL plans it once per connection. A transaction is
rolled back on any exception, ``BaseException`` included. The transports' connections adapt
with :data:`ADAPTERS`: a list parameter (an array) goes in binary.
"""

from __future__ import annotations

import contextlib
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg
from psycopg import pq
from psycopg.adapt import AdaptersMap
from psycopg.types.array import ListBinaryDumper

from harel_sa.errors import (
    BusyError,
    ConnectionLostError,
    HarelSAError,
    StorageError,
    TransportClosedError,
)
from harel_sa.postgres.operations import Call, One, Result

T = TypeVar("T")

#: SQLSTATEs that mean "busy, retry later": a lock or statement timeout, a deadlock victim, a
#: serialization failure. Nothing was written.
_BUSY = (pg.LockNotAvailable, pg.QueryCanceled, pg.DeadlockDetected, pg.SerializationFailure)

#: How the transports' connections adapt parameters (``context=`` at connect): psycopg's
#: adapters, but a ``list`` (an array: a ``publish_many``'s groups and events, a batch's
#: tokens) is sent in binary. psycopg's text form quotes and escapes every element with a
#: regular expression in Python, about 150,000 instructions for one event's JSON, most of a
#: ``publish_many``'s client work; the binary form copies each element's bytes. An empty list,
#: or one of ``None`` only, still goes as text (no element to type the array by).
ADAPTERS = AdaptersMap(psycopg.adapters)
ADAPTERS.register_dumper(list, ListBinaryDumper)


def run(conn: psycopg.Connection[Any], cur: psycopg.RawCursor[Any], op: Call[T]) -> T:
    """Run ``op`` with ``cur``, a cursor of ``conn`` (an autocommit connection): its one
    statement, or its program, in one transaction when it has a ``begin``."""
    if isinstance(op, One):
        statement = op.query.statement
        cur.execute(statement.sql, statement.bind(op.query.params), prepare=True)
        return op.read(Result(cur.fetchall() if _has_rows(cur) else [], cur.rowcount))
    program = op.start()
    if op.begin is not None:
        cur.execute(op.begin)
    try:
        step = next(program)
        while True:
            statement = step.statement
            cur.execute(statement.sql, statement.bind(step.params), prepare=True)
            rows = cur.fetchall() if _has_rows(cur) else []
            step = program.send(Result(rows, cur.rowcount))
    except StopIteration as done:
        if op.begin is not None:
            cur.execute("COMMIT")
        value: T = done.value
        return value
    except BaseException:
        if op.begin is not None and not conn.closed and not conn.broken:
            with contextlib.suppress(psycopg.Error):  # gone: the server rolls back
                conn.execute("ROLLBACK")
        raise


async def arun(
    conn: psycopg.AsyncConnection[Any], cur: psycopg.AsyncRawCursor[Any], op: Call[T]
) -> T:
    """:func:`run`, awaited on an async connection: the same statement, or the same program
    step for step."""
    if isinstance(op, One):
        statement = op.query.statement
        await cur.execute(statement.sql, statement.bind(op.query.params), prepare=True)
        return op.read(Result(await cur.fetchall() if _has_rows(cur) else [], cur.rowcount))
    program = op.start()
    if op.begin is not None:
        await cur.execute(op.begin)
    try:
        step = next(program)
        while True:
            statement = step.statement
            await cur.execute(statement.sql, statement.bind(step.params), prepare=True)
            rows = await cur.fetchall() if _has_rows(cur) else []
            step = program.send(Result(rows, cur.rowcount))
    except StopIteration as done:
        if op.begin is not None:
            await cur.execute("COMMIT")
        value: T = done.value
        return value
    except BaseException:
        if op.begin is not None and not conn.closed and not conn.broken:
            with contextlib.suppress(psycopg.Error):  # gone: the server rolls back
                await conn.execute("ROLLBACK")
        raise


def _has_rows(cur: psycopg.RawCursor[Any] | psycopg.AsyncRawCursor[Any]) -> bool:
    # Not ``cur.description``: it builds the columns' descriptions on every look.
    result = cur.pgresult
    return result is not None and result.status == pq.ExecStatus.TUPLES_OK


def no_connection(
    exc: Exception, stats: dict[str, int] | None, where: str, *, closed: bool = False
) -> HarelSAError:
    """A pool that gave no connection in time: :class:`~harel_sa.TransportClosedError` when
    the transport closed meanwhile (``closed``), busy when the pool has connections (all in
    use), lost when it has none (the server cannot be reached)."""
    if closed:
        return TransportClosedError("the transport is closed")
    if stats is not None and stats.get("pool_size", 0) > 0:
        return BusyError(f"no connection of the pool was free within busy_timeout: {exc}")
    return ConnectionLostError(f"cannot connect to {where}: {exc}")


def lost(exc: BaseException, conn: Any | None) -> bool:
    """Whether ``exc`` (raised on ``conn``) means the connection broke: the server went away,
    terminated this backend, or the network dropped."""
    if conn is not None and (conn.closed or conn.broken):
        return True
    state = getattr(exc, "sqlstate", None)
    return isinstance(exc, psycopg.OperationalError) and (
        state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")
    )


def translate(exc: psycopg.Error, conn: Any | None, where: str) -> HarelSAError:
    """The typed error for a psycopg error: :class:`~harel_sa.BusyError` for a lock or
    statement timeout (and deadlock or serialization victims), :class:`~harel_sa.
    ConnectionLostError` for a broken connection, else :class:`~harel_sa.StorageError`."""
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, _BUSY):
        return BusyError(f"{text} ({exc.sqlstate})")
    if lost(exc, conn):
        return ConnectionLostError(f"the connection to {where} was lost: {text}")
    state = getattr(exc, "sqlstate", None)
    return StorageError(f"{text} ({state})" if state else text)
