"""The stack of connections a PostgreSQL transport keeps between calls
(harel_sa.postgres.sessions): what it keeps, what it gives back to the pool, and that no caller
waits at the pool while a kept connection idles. Step by step, on real connections."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from harel_sa.postgres.sessions import RECYCLE, Session, Sessions

Stack = Sessions[psycopg.Connection[Any]]


@pytest.fixture
def conn(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_url, autocommit=True) as connection:
        yield connection


def session_on(conn: psycopg.Connection[Any]) -> Session[Any]:
    return Sessions.new(conn)


def test_a_healthy_session_is_kept_and_taken_again_last_in_first_out(pg_url: str) -> None:
    with (
        psycopg.connect(pg_url, autocommit=True) as a,
        psycopg.connect(pg_url, autocommit=True) as b,
    ):
        stack: Stack = Sessions()
        first, second = session_on(a), session_on(b)
        assert stack.keep(first) == [] and stack.keep(second) == []
        assert stack.take() is second and stack.take() is first
        assert stack.take() is None


def test_a_new_session_goes_back_to_the_pool_after_recycle(conn: psycopg.Connection[Any]) -> None:
    stack: Stack = Sessions()
    fresh = session_on(conn)
    assert time.monotonic() + RECYCLE - 1 < fresh.returns_at <= time.monotonic() + RECYCLE
    old = Session(conn, time.monotonic() - 0.001)
    assert stack.keep(old) == [old] and stack.take() is None


def test_a_connection_in_a_transaction_or_closed_goes_back_to_the_pool(
    conn: psycopg.Connection[Any],
) -> None:
    stack: Stack = Sessions()
    session = session_on(conn)
    conn.execute("BEGIN")
    assert stack.keep(session) == [session]
    conn.execute("ROLLBACK")
    assert stack.keep(session) == [] and stack.take() is session
    conn.close()
    assert stack.keep(session) == [session] and stack.take() is None


def test_a_broken_connection_goes_back_to_the_pool(pg_url: str) -> None:
    """The server ended the backend: ``keep`` reads the transaction status alone, which libpq
    reports as unknown on a broken connection."""
    with (
        psycopg.connect(pg_url, autocommit=True) as conn,
        psycopg.connect(pg_url, autocommit=True) as admin,
    ):
        stack: Stack = Sessions()
        session = session_on(conn)
        admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
        assert conn.broken
        assert stack.keep(session) == [session] and stack.take() is None


def test_a_call_that_ends_while_someone_waits_at_the_pool_gives_its_connection_there(
    conn: psycopg.Connection[Any],
) -> None:
    stack: Stack = Sessions()
    session = session_on(conn)
    with stack.waiting() as kept:
        assert kept is None  # nothing kept: this caller waits at the pool...
        assert stack.keep(session) == [session]  # ...where the ending call sends its connection
    assert stack.take() is None
    assert stack.keep(session) == [] and stack.take() is session  # nobody waits: kept


def test_a_caller_about_to_wait_at_the_pool_takes_what_was_kept_meanwhile(
    conn: psycopg.Connection[Any],
) -> None:
    stack: Stack = Sessions()
    session = session_on(conn)
    assert stack.take() is None  # the stack was empty when the caller looked...
    assert stack.keep(session) == []  # ...then a call ended and kept its connection
    with stack.waiting() as kept:
        assert kept is session  # the second look, once enlisted, finds it


def test_close_hands_back_every_kept_session_and_keeps_nothing_more(pg_url: str) -> None:
    with (
        psycopg.connect(pg_url, autocommit=True) as a,
        psycopg.connect(pg_url, autocommit=True) as b,
    ):
        stack: Stack = Sessions()
        first, late = session_on(a), session_on(b)
        stack.keep(first)
        assert stack.close() == [first]
        assert stack.keep(late) == [late]  # a call that ends after the close
        assert stack.take() is None
