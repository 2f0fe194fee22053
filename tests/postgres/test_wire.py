"""The transports' statements sent through libpq (harel_sa.postgres.wire): each prepared once
per connection and parameter types, values and rows adapted as psycopg's cursor adapts them,
errors as psycopg's own, and a wait interrupted mid-statement ended as psycopg ends one (the
statement cancelled, its transaction rolled back, the connection kept)."""

from __future__ import annotations

import asyncio
import datetime as dt
import signal
import threading
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import psycopg
import pytest
from psycopg import errors as pg
from psycopg import pq

from harel_sa.postgres import wire
from harel_sa.postgres.compiled import positional
from harel_sa.postgres.driver import ADAPTERS, arun, run
from harel_sa.postgres.kinds import BEGIN_WRITE, Locked, One, Op
from harel_sa.postgres.wire import AsyncConnection, Connection, ServerSession, Unprepared, Wire
from harel_sa.seam import Program, Query, Result
from tests.postgres.relay import holding_the_close

SLEEP = positional("SELECT pg_sleep(:seconds)")
INSERT = positional("INSERT INTO marks (n) VALUES (:n)")
ECHO_INT = positional("SELECT :n ::integer")
ECHO = positional("SELECT :a, :b, :c, :d, :e ::text[], :f ::timestamptz")


def one(statement: Any, **params: Any) -> One[Result]:
    return One(Query(statement, params), lambda result: result)


def prepared(conn: psycopg.Connection[Any]) -> list[str]:
    rows = conn.execute("SELECT statement FROM pg_prepared_statements ORDER BY prepare_time")
    return [row[0] for row in rows.fetchall()]


def names(conn: psycopg.Connection[Any]) -> list[str]:
    rows = conn.execute("SELECT name FROM pg_prepared_statements ORDER BY prepare_time")
    return [row[0] for row in rows.fetchall()]


def count(conn: psycopg.Connection[Any]) -> int:
    (n,) = conn.execute("SELECT count(*) FROM marks").fetchone() or (0,)
    return int(n)


@pytest.fixture
def conn(pg_url: str) -> Iterator[Connection]:
    with Connection.connect(pg_url, autocommit=True, context=ADAPTERS) as connection:
        connection.wire = Wire(connection)
        connection.execute("CREATE TABLE marks (n integer)")
        yield connection


def test_values_and_rows_come_and_go_as_psycopgs_cursor_adapts_them(conn: Connection) -> None:
    when = dt.datetime(2026, 12, 3, 9, 30, 1, 250000, tzinfo=dt.UTC)
    params = {"a": 7, "b": 2.5, "c": "é'\"{,}", "d": None, "e": ["x", "NULL", 'q"'], "f": when}
    got = run(conn, one(ECHO, **params))
    with psycopg.RawCursor(conn) as cur:
        expected = cur.execute(ECHO.sql, ECHO.bind(params)).fetchall()
    assert got.rows == expected == [(7, 2.5, "é'\"{,}", None, ["x", "NULL", 'q"'], when)]
    assert got.rowcount == 1


def test_a_statement_is_prepared_once_per_connection_and_parameter_types(conn: Connection) -> None:
    for n in range(5):
        assert run(conn, one(INSERT, n=n)).rowcount == 1
    assert prepared(conn) == [INSERT.sql.decode()]
    run(conn, one(INSERT, n=None))  # another parameter type: another prepared statement
    run(conn, one(INSERT, n=None))
    assert prepared(conn) == [INSERT.sql.decode()] * 2
    assert conn.execute("SELECT count(*) FROM marks").fetchone() == (7,)


def test_an_error_is_psycopgs_and_leaves_the_connection_usable(conn: Connection) -> None:
    with pytest.raises(pg.UndefinedTable):
        run(conn, one(positional("SELECT * FROM nowhere WHERE n = :n"), n=1))
    with pytest.raises(pg.InvalidTextRepresentation):
        run(conn, one(positional("SELECT :n ::integer"), n="one"))
    assert conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
    assert run(conn, one(INSERT, n=1)).rowcount == 1


def _returns(value: int) -> Program[int]:
    yield from ()
    return value


def _insert_then(statement: Any, params: dict[str, Any]) -> Program[None]:
    yield Query(INSERT, {"n": 1})
    yield Query(statement, params)


@pytest.mark.parametrize("pipelines", [True, False])
def test_a_program_that_fails_is_rolled_back(
    conn: Connection, pipelines: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its ``BEGIN`` goes with its first statement (libpq's pipeline), or alone before it."""
    monkeypatch.setattr(wire, "PIPELINES", pipelines)
    failing = Op(partial(_insert_then, positional("SELECT 1 / :n"), {"n": 0}), begin=BEGIN_WRITE)
    with pytest.raises(pg.DivisionByZero):
        run(conn, failing)
    assert conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
    assert conn.execute("SELECT count(*) FROM marks").fetchone() == (0,)
    run(conn, Op(partial(_insert_then, SLEEP, {"seconds": 0}), begin=BEGIN_WRITE))
    assert conn.execute("SELECT count(*) FROM marks").fetchone() == (1,)
    # A program that sends nothing begins nothing, and commits nothing.
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
    assert run(conn, Op(partial(_returns, 7), begin=BEGIN_WRITE)) == 7
    assert conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
    assert notices == []


def test_a_statement_is_named_by_what_it_is_the_same_on_every_connection(
    conn: Connection, pg_url: str
) -> None:
    """A transaction pooler may run a statement on a server connection another client
    prepared on: a name there must mean the same statement."""
    run(conn, one(INSERT, n=1))
    run(conn, one(ECHO_INT, n=1))
    with Connection.connect(pg_url, autocommit=True, context=ADAPTERS) as other:
        other.wire = Wire(other)
        run(other, one(ECHO_INT, n=2))  # the other order: a counter would swap the names
        run(other, one(INSERT, n=2))
        run(other, one(INSERT, n=None))  # another parameter type: another name
        assert names(other)[:2] == names(conn)[::-1]
        assert len(set(names(other))) == 3
    assert all(name.startswith("harel_sa_") for name in names(conn))


def test_a_statement_found_missing_turns_the_statements_unprepared(
    conn: Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """What a transaction pooler does to a prepared statement (another server connection
    serves the next transaction), done here by hand: the statement did not run, the call may
    run again, and from then on every connection sharing the :class:`ServerSession` sends its
    statements unprepared."""
    run(conn, one(INSERT, n=1))
    conn.execute("DEALLOCATE ALL")
    with pytest.raises(Unprepared) as raised:
        run(conn, one(INSERT, n=2))
    assert raised.value.repeatable
    assert count(conn) == 1
    assert "transaction pooler" in caplog.text
    assert run(conn, one(INSERT, n=2)).rowcount == 1
    assert run(conn, one(ECHO_INT, n=5)).rows == [(5,)]
    assert prepared(conn) == [] and count(conn) == 2


def test_a_statement_already_there_turns_the_statements_unprepared(
    conn: Connection, pg_url: str
) -> None:
    """The other face of the same pooler: the name is prepared on the server connection
    already (another client's doing)."""
    with Connection.connect(pg_url, autocommit=True, context=ADAPTERS) as other:
        other.wire = Wire(other)
        run(other, one(INSERT, n=1))
        (name,) = names(other)
    conn.execute(f"PREPARE {name} (integer) AS {INSERT.sql.decode()}")
    with pytest.raises(Unprepared) as raised:
        run(conn, one(INSERT, n=2))
    assert raised.value.repeatable
    assert run(conn, one(INSERT, n=2)).rowcount == 1
    assert count(conn) == 2


def test_a_program_stopped_so_may_run_again_only_if_nothing_of_it_committed(
    conn: Connection, pg_url: str
) -> None:
    run(conn, one(ECHO_INT, n=1))  # prepared now
    conn.execute("DEALLOCATE ALL")
    echo_after_insert = partial(_insert_then, ECHO_INT, {"n": 1})
    with pytest.raises(Unprepared) as raised:  # its insert committed on its own
        run(conn, Op(echo_after_insert))
    assert not raised.value.repeatable and count(conn) == 1
    with Connection.connect(pg_url, autocommit=True, context=ADAPTERS) as other:
        other.wire = Wire(other, ServerSession())
        run(other, one(ECHO_INT, n=1))
        other.execute("DEALLOCATE ALL")
        with pytest.raises(Unprepared) as raised:  # in a transaction: rolled back
            run(other, Op(echo_after_insert, begin=BEGIN_WRITE))
        assert raised.value.repeatable and count(other) == 1
        assert other.pgconn.transaction_status == pq.TransactionStatus.IDLE


def test_the_connections_of_one_server_session_turn_unprepared_together(pg_url: str) -> None:
    shared = ServerSession()
    with (
        Connection.connect(pg_url, autocommit=True, context=ADAPTERS) as first,
        Connection.connect(pg_url, autocommit=True, context=ADAPTERS) as second,
    ):
        first.wire, second.wire = Wire(first, shared), Wire(second, shared)
        run(first, one(ECHO_INT, n=1))
        first.execute("DEALLOCATE ALL")
        with pytest.raises(Unprepared):
            run(first, one(ECHO_INT, n=1))
        assert run(second, one(ECHO_INT, n=3)).rows == [(3,)]
        assert prepared(second) == []


LOCK = positional("SELECT pg_advisory_xact_lock(:lock ::bigint)")
COUNT = positional("SELECT count(*) FROM marks")


def locked(first: Any, query: Any, read: Any = None, **params: Any) -> Locked[Any]:
    return Locked(Query(first, params), Query(query, params), read or (lambda result: result))


def test_a_locked_statement_sees_what_committed_while_its_lock_waited(
    conn: Connection, pg_url: str
) -> None:
    """The lock and the statement go together (one round trip), but the statement's snapshot
    is taken once the lock is held: a row the lock's holder committed is seen (in one
    statement, it would not be: its snapshot is taken before the lock is)."""
    with psycopg.connect(pg_url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(7)")
        holder.execute("INSERT INTO marks (n) VALUES (1)")
        timer = threading.Timer(0.3, holder.commit)
        timer.start()
        try:
            started = time.monotonic()
            result = run(conn, locked(LOCK, COUNT, lock=7))
        finally:
            timer.join()
    assert time.monotonic() - started >= 0.25  # it waited for the lock
    assert result.rows == [(1,)]
    assert conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
    assert conn.pgconn.pipeline_status == pq.PipelineStatus.OFF


def test_a_locked_statement_that_fails_rolls_back_its_lock_statement_too(
    conn: Connection,
) -> None:
    with pytest.raises(pg.DivisionByZero):
        run(conn, locked(INSERT, positional("SELECT 1 / :n"), n=0))
    assert count(conn) == 0
    assert conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
    # Both statements were prepared in the failed pipeline's turn: sent by name from now on.
    assert run(conn, locked(INSERT, COUNT, n=1)).rows == [(1,)]
    assert len(names(conn)) == 3 and count(conn) == 1
    with pytest.raises(pg.UndefinedTable):  # the lock's statement fails: the other never runs
        run(conn, locked(positional("SELECT * FROM nowhere WHERE n = :n"), INSERT, n=5))
    assert count(conn) == 1 and run(conn, one(ECHO_INT, n=2)).rows == [(2,)]


def test_without_pipelines_a_locked_statement_is_a_transaction_of_its_own(
    conn: Connection, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libpq before 14 has no pipeline: BEGIN, the two statements, COMMIT (or ROLLBACK)."""
    monkeypatch.setattr(wire, "PIPELINES", False)
    test_a_locked_statement_sees_what_committed_while_its_lock_waited(conn, pg_url)
    conn.execute("DELETE FROM marks")
    with pytest.raises(pg.DivisionByZero):
        run(conn, locked(INSERT, positional("SELECT 1 / :n"), n=0))
    assert count(conn) == 0
    assert conn.pgconn.transaction_status == pq.TransactionStatus.IDLE


def test_a_locked_statement_runs_again_while_its_read_says_so(conn: Connection) -> None:
    seen: list[int] = []

    def read(result: Result) -> int | None:
        seen.append(result.rows[0][0])
        return None if len(seen) < 3 else seen[-1]

    assert run(conn, locked(INSERT, COUNT, read, n=1)) == 3
    assert seen == [1, 2, 3]  # each run its own transaction, committed


def test_a_locked_statement_goes_unprepared_behind_a_pooler(
    conn: Connection, caplog: pytest.LogCaptureFixture
) -> None:
    run(conn, locked(INSERT, COUNT, n=1))
    conn.execute("DEALLOCATE ALL")
    with pytest.raises(Unprepared) as raised:
        run(conn, locked(INSERT, COUNT, n=2))
    assert raised.value.repeatable and count(conn) == 1
    assert run(conn, locked(INSERT, COUNT, n=2)).rows == [(2,)]
    assert prepared(conn) == []


@pytest.mark.usefixtures("ctrl_c")
def test_ctrl_c_in_a_locked_statements_wait_ends_its_pipeline(
    conn: Connection, pg_url: str
) -> None:
    pid = conn.info.backend_pid
    with psycopg.connect(pg_url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(8)")
        timer = _interrupt_soon(0.3)
        try:
            with pytest.raises(KeyboardInterrupt):
                run(conn, locked(LOCK, INSERT, lock=8, n=1))
        finally:
            timer.cancel()
    assert not conn.closed and conn.info.backend_pid == pid
    assert conn.pgconn.pipeline_status == pq.PipelineStatus.OFF
    assert conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
    assert count(conn) == 0 and run(conn, one(INSERT, n=2)).rowcount == 1


@pytest.fixture
def ctrl_c() -> Iterator[None]:
    """SIGINT raises ``KeyboardInterrupt``, as in a terminal (a background job, as CI's runs
    are, starts with SIGINT ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _interrupt_soon(seconds: float) -> threading.Timer:
    main = threading.main_thread().ident
    assert main is not None
    timer = threading.Timer(seconds, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    return timer


@pytest.mark.parametrize("in_transaction", [False, True])
@pytest.mark.usefixtures("ctrl_c")
def test_ctrl_c_cancels_the_statement_in_flight_and_keeps_the_connection(
    conn: Connection, in_transaction: bool
) -> None:
    """As psycopg's own wait: the statement is cancelled at the server (the interruption
    comes at once, not after the statement), its transaction rolled back, and the connection
    stays open, out of any transaction, ready for the next call."""
    op: Any = (
        Op(partial(_insert_then, SLEEP, {"seconds": 30}), begin=BEGIN_WRITE)
        if in_transaction
        else one(SLEEP, seconds=30)
    )
    pid = conn.info.backend_pid
    started = time.monotonic()
    timer = _interrupt_soon(0.3)
    try:
        with pytest.raises(KeyboardInterrupt):
            run(conn, op)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 10
    assert not conn.closed and conn.info.backend_pid == pid
    assert conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
    assert conn.execute("SELECT count(*) FROM marks").fetchone() == (0,)
    assert run(conn, one(INSERT, n=2)).rowcount == 1


def test_a_cancelled_wait_on_the_loop_cancels_the_statement_too(pg_url: str) -> None:
    async def main() -> None:
        async with await AsyncConnection.connect(
            pg_url, autocommit=True, context=ADAPTERS
        ) as aconn:
            aconn.wire = Wire(aconn)
            await aconn.execute("CREATE TABLE marks (n integer)")
            op = Op(partial(_insert_then, SLEEP, {"seconds": 30}), begin=BEGIN_WRITE)
            started = time.monotonic()
            task = asyncio.create_task(arun(aconn, op))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert time.monotonic() - started < 10
            assert not aconn.closed
            assert aconn.pgconn.transaction_status == pq.TransactionStatus.IDLE
            count = await (await aconn.execute("SELECT count(*) FROM marks")).fetchone()
            assert count == (0,)
            assert (await arun(aconn, one(INSERT, n=2))).rowcount == 1

    asyncio.run(main())


def test_a_session_the_server_said_its_last_words_to_is_ended_before_its_socket_closes(
    pg_url: str,
) -> None:
    """The server ends an idle session (``idle_session_timeout``): it sends its FATAL error,
    leaves ``pg_stat_activity``, then closes the socket. A call that looks between the two
    finds the connection ended (before, only the end of the stream told it, so the call was
    sent and failed with the lost connection)."""
    with holding_the_close(pg_url) as relay:
        with Connection.connect(relay.url, autocommit=True, context=ADAPTERS) as connection:
            connection.execute("SET idle_session_timeout = '50ms'")
            connection.wire = Wire(connection)
            assert relay.server_closed.wait(30), "the server never ended the idle session"
            assert connection.wire.ended()
        with Connection.connect(relay.url, autocommit=True, context=ADAPTERS) as connection:
            connection.wire = Wire(connection)
            connection.execute("SELECT 1")  # a notice that is not a FATAL one ends nothing
            connection.execute("DO $$ BEGIN RAISE WARNING 'not the end'; END $$")
            assert not connection.wire.ended()
