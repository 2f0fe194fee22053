"""Running an operation's program on a transport's connection; the driver's errors as harel_sa's.

:func:`call` is the operation as one exchange of :mod:`~harel_sa.postgres.wire`: its statements
as :mod:`~harel_sa.postgres.statements` numbered them, each prepared once per connection, in one
transaction when the operation has a ``begin``, rolled back on any exception (``BaseException``
included). :func:`run` performs it blocking, :func:`arun` on the event loop: the same steps.
The transports' connections adapt with :data:`ADAPTERS`: a list parameter (an array) goes in
binary.
"""

from __future__ import annotations

import contextlib
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg
from psycopg.adapt import AdaptersMap
from psycopg.types.array import ListBinaryDumper

from harel_sa.errors import (
    BusyError,
    ConnectionLostError,
    HarelSAError,
    InvalidArgumentError,
    ReadOnlyError,
    StorageError,
    TransportClosedError,
)
from harel_sa.postgres import wire as wires
from harel_sa.postgres.compiled import Statement, positional
from harel_sa.postgres.kinds import Locked, One, Operation, operation
from harel_sa.postgres.wire import (
    AsyncConnection,
    Connection,
    Exchange,
    Unprepared,
    Wire,
    wait,
    wait_async,
)
from harel_sa.seam import Bound, Result

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


#: The planner's settings for a claim (a steered statement), in its own transaction. A queue
#: is often near-empty, or all leased, when (auto)ANALYZE samples it; with those statistics the
#: planner priced a claim's walk as a read of every group and chose a sort of the groups (or
#: the messages as the outer side of the join: a claim quadratic in the backlog), a plan kept
#: while the backlog grew. With no sort, only the index walks remain. Not for a whole session:
#: there the other statements' small sorts would give way to full index scans. JIT off: the
#: penalty on a disabled node prices a claim past ``jit_above_cost``, and compiling would cost
#: a new plan a fraction of a second.
PLANNER = (("enable_sort", "off"), ("jit", "off"))
#: :data:`PLANNER` for one transaction, sent before each steered statement in its round trip.
STEER = positional(
    "SELECT " + ", ".join(f"set_config('{name}', '{value}', true)" for name, value in PLANNER)
)


def _execute(
    wire: Wire, statement: Statement, params: Any, begin: Statement | None = None
) -> Exchange[tuple[list[Any], int]]:
    """``statement`` with ``params`` on ``wire``, in the round trip of the ``begin`` of its
    transaction (if it is the first); a steered one (a claim) planned and run after
    :data:`STEER`, in its transaction."""
    chain: list[tuple[bytes, Any]] = []
    if begin is not None:
        if wires.PIPELINES:
            chain.append((begin.sql, ()))
        else:  # a chain must not open a transaction then
            yield from wire.command(begin.sql)
    if statement.steered:
        chain.append((STEER.sql, ()))
    values = statement.bind(params)
    if not chain:
        return (yield from wire.execute(statement.sql, values))
    chain.append((statement.sql, values))
    return (yield from wire.execute_chain(chain))


def exchange(wire: Wire, op: Operation[T]) -> Exchange[T]:
    """``op`` as one exchange on ``wire``: its one statement, or its program, in one
    transaction when it has a ``begin`` (rolled back on any exception raised while the
    program runs, ``BaseException`` included)."""
    if isinstance(op, One):
        rows, count = yield from _execute(wire, op.query.statement, op.query.params)
        return op.read(Result(rows, count))
    if isinstance(op, Locked):
        lock, query = op.lock, op.query
        while True:
            rows, count = yield from wire.execute_chain(
                [
                    (lock.statement.sql, lock.statement.bind(lock.params)),
                    (query.statement.sql, query.statement.bind(query.params)),
                ]
            )
            read = op.read(Result(rows, count))
            if read is not None:
                return read
    program = op.start()
    begin = op.begin  # sent with the first statement
    ran = 0  # statements that ran (each committed on its own without a ``begin``)
    try:
        step = next(program)
        while True:
            rows, count = yield from _execute(wire, step.statement, step.params, begin)
            begin = None
            ran += 1
            step = program.send(Result(rows, count))
    except StopIteration as done:
        if op.begin is not None and begin is None:  # begun: a program of no statement is not
            yield from wire.command(b"COMMIT")
        value: T = done.value
        return value
    except GeneratorExit:  # dropped by a driver whose wait was interrupted: nothing to send
        raise
    except BaseException as exc:
        if isinstance(exc, Unprepared) and op.begin is None and ran:
            exc.repeatable = False  # what ran before it committed
        if op.begin is not None and wire.in_transaction:
            with contextlib.suppress(psycopg.Error):  # gone: the server rolls back
                yield from wire.command(b"ROLLBACK")
        raise


def run(connection: Connection, bound: Bound[T]) -> T:
    """Run ``bound`` (a PostgreSQL operation) on ``connection`` (an autocommit connection),
    blocking."""
    return wait(connection, exchange(connection.wire, operation(bound)))


async def arun(connection: AsyncConnection, bound: Bound[T], *, to_end: bool = False) -> T:
    """:func:`run`, awaited: the same exchange, its waits on the event loop (``to_end``: as
    :func:`~harel_sa.postgres.wire.wait_async`'s)."""
    return await wait_async(connection, exchange(connection.wire, operation(bound)), to_end=to_end)


def run_again(exc: BaseException, attempt: int, op: Bound[Any], conn: Any | None) -> bool:
    """Whether a transport runs ``op`` again after its first ``attempt`` raised ``exc`` (on
    ``conn``): a read whose connection was lost (on another connection), or a call a
    transaction pooler stopped before anything of it committed (its statements now go
    unprepared)."""
    if attempt != 1:
        return False
    if isinstance(exc, Unprepared):
        return exc.repeatable
    return operation(op).retry_safe and lost(exc, conn)


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


def standby(conn: Any | None) -> bool:
    """Whether ``conn``'s server is a standby, as it reports itself (``in_hot_standby``,
    PostgreSQL 14 and later; an older one is not known to be)."""
    return conn is not None and conn.info.parameter_status("in_hot_standby") == "on"


def translate(exc: psycopg.Error, conn: Any | None, where: str) -> HarelSAError:
    """The typed error for a psycopg error: :class:`~harel_sa.BusyError` for a lock or
    statement timeout (and deadlock or serialization victims), :class:`~harel_sa.
    ConnectionLostError` for a broken connection, :class:`~harel_sa.ReadOnlyError` for a
    database or server that refuses writes (``default_transaction_read_only``, a standby),
    :class:`~harel_sa.InvalidArgumentError` for a text holding NUL (refused before it was
    sent), else :class:`~harel_sa.StorageError`."""
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, _BUSY):
        return BusyError(f"{text} ({exc.sqlstate})")
    if lost(exc, conn):
        return ConnectionLostError(f"the connection to {where} was lost: {text}")
    if isinstance(exc, psycopg.DataError) and exc.sqlstate is None and "NUL" in text:
        # psycopg's refusal to send a text holding NUL, before anything reached the server.
        return InvalidArgumentError(f"PostgreSQL cannot store a text holding NUL (\\x00): {text}")
    if isinstance(exc, pg.ReadOnlySqlTransaction):
        if standby(conn):
            return ReadOnlyError(
                f"{where} is a standby (in recovery): writes go to the primary; give its URL, "
                f"or every host with target_session_attrs=read-write ({exc.sqlstate})"
            )
        return ReadOnlyError(f"{where} refuses writes: {text} ({exc.sqlstate})")
    state = getattr(exc, "sqlstate", None)
    return StorageError(f"{text} ({state})" if state else text)
