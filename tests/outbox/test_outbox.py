"""Publish and settle in the application's own transaction (:mod:`harel_sa.outbox`), on a
real SQLite file and a real PostgreSQL, through the application's own engine (its defaults:
``create_engine(url)``), sync and async, on a ``Connection`` and an ORM ``Session``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from harel_sa import Event, InvalidArgumentError, InvalidArgumentTypeError, SqliteTransport
from harel_sa.outbox import AsyncOutbox, Outbox

VIS = 30.0


#: The application's driver for each database, sync; its async one (:func:`async_url`).
DRIVERS = {"sqlite": "sqlite", "psycopg": "postgresql+psycopg", "psycopg2": "postgresql+psycopg2"}
ASYNC = {"sqlite": "sqlite+aiosqlite", "postgresql+psycopg": "postgresql+psycopg_async",
         "postgresql+psycopg2": "postgresql+asyncpg"}  # fmt: skip


@pytest.fixture(params=list(DRIVERS))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database as the application's engine names it: a SQLite file, or PostgreSQL
    through psycopg 3 or psycopg2 (and, async, through psycopg 3 or asyncpg)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'app.db'}"
    pg = str(request.getfixturevalue("pg_url"))
    return pg.replace("postgresql://", f"{DRIVERS[request.param]}://")


def async_url(url: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{ASYNC[scheme]}://{rest}"


def own_url(url: str) -> str:
    """The URL the transport is given (its own driver)."""
    return url.replace("+psycopg2", "").replace("+psycopg", "")


@pytest.fixture
def queue(url: str) -> Iterator[Any]:
    """The transport on the same database (its own connection): it makes the schema, claims
    and looks."""
    if url.startswith("sqlite"):
        q: Any = SqliteTransport(url)
    else:
        from harel_sa import PostgresTransport

        q = PostgresTransport(own_url(url))
    with q:
        yield q


@pytest.fixture
def engine(url: str, queue: Any) -> Iterator[Engine]:
    made = create_engine(url)
    yield made
    made.dispose()


def kinds(q: Any) -> list[str]:
    return [json.loads(m.event)["kind"] for m in q.peek(limit=100)]


@pytest.mark.parametrize("through", ["connection", "session"])
def test_a_publish_commits_with_the_application_and_a_rollback_leaves_nothing(
    engine: Engine, queue: Any, through: str
) -> None:
    outbox: Outbox[Event] = Outbox()
    with engine.connect() as conn:
        conn.execute(text("CREATE TABLE orders (id INTEGER PRIMARY KEY)"))
        conn.commit()
    for keep in (False, True):
        if through == "session":
            with Session(engine) as session:
                session.execute(text("INSERT INTO orders (id) VALUES (:id)"), {"id": int(keep)})
                outbox.publish(session, "order", Event(kind=f"paid-{keep}"))
                outbox.publish_many(session, [("other", Event(kind=f"many-{keep}"))])
                session.commit() if keep else session.rollback()
        else:
            with engine.connect() as conn:
                conn.execute(text("INSERT INTO orders (id) VALUES (:id)"), {"id": int(keep)})
                outbox.publish(conn, "order", Event(kind=f"paid-{keep}"))
                outbox.publish_many(conn, [("other", Event(kind=f"many-{keep}"))])
                conn.commit() if keep else conn.rollback()
    assert sorted(kinds(queue)) == ["many-True", "paid-True"]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT id FROM orders")).all() == [(1,)]


def test_an_ack_in_the_handlers_transaction_takes_effect_with_its_commit(
    engine: Engine, queue: Any
) -> None:
    outbox: Outbox[Event] = Outbox()
    queue.publish("g", Event(kind="one"))
    queue.publish("g", Event(kind="two"))
    lease = queue.claim("w", VIS)
    with engine.connect() as conn:
        assert outbox.ack(conn, lease)
        conn.rollback()  # the handler failed: the ack goes with it
    assert queue.claim("other", VIS) is None  # still leased: its group is still in flight
    with engine.connect() as conn:
        assert outbox.ack(conn, lease)
        conn.commit()
    following = queue.claim("w", VIS)
    assert following is not None and following.event.kind == "two"
    with engine.connect() as conn:  # a stale lease (already acked) takes nothing
        assert not outbox.ack(conn, lease)
        assert outbox.nack(conn, following, delay=5.0)
        conn.commit()
    assert queue.stats().parked == 1
    assert [m.state for m in queue.peek()] == ["parked"]


def test_a_dead_letter_in_the_application_transaction(engine: Engine, queue: Any) -> None:
    outbox: Outbox[Event] = Outbox()
    queue.publish("g", Event(kind="poison"))
    lease = queue.claim("w", VIS)
    with engine.connect() as conn:
        assert outbox.dead_letter(conn, lease, "cannot be handled")
        assert outbox.ack_many(conn, [lease]) == [False]  # it is dead: nothing to ack
        conn.commit()
    (dead,) = queue.dead()
    assert (dead.seq, dead.error) == (lease.seq, "cannot be handled")
    assert queue.stats().messages == 0


def test_what_is_not_a_connection_or_is_closed_is_refused(engine: Engine, queue: Any) -> None:
    outbox: Outbox[Event] = Outbox()
    with pytest.raises(InvalidArgumentTypeError, match="Connection or ORM Session"):
        outbox.publish(engine, "g", Event(kind="x"))  # type: ignore[arg-type]
    conn = engine.connect()
    conn.close()
    with pytest.raises(InvalidArgumentError, match="closed"):
        outbox.publish(conn, "g", Event(kind="x"))
    with engine.connect() as live, pytest.raises(InvalidArgumentTypeError):
        outbox.publish(live, "g", {"kind": "not an event"})  # type: ignore[arg-type]
    assert queue.stats().messages == 0


def test_a_sqlite_connection_that_could_lose_a_commit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    SqliteTransport(path).close()
    engine = create_engine(f"sqlite:///{path}")

    @event.listens_for(engine, "connect")
    def _fast_and_loose(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute("PRAGMA synchronous = OFF")

    with engine.connect() as conn, pytest.raises(InvalidArgumentError, match="synchronous=0"):
        Outbox().publish(conn, "g", Event(kind="x"))
    engine.dispose()
    with SqliteTransport(path) as q:
        assert q.stats().messages == 0


def test_on_postgresql_a_publish_is_invisible_until_the_commit(
    request: pytest.FixtureRequest,
) -> None:
    from harel_sa import PostgresTransport

    url = str(request.getfixturevalue("pg_url"))
    with PostgresTransport(url) as queue:
        engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
        with engine.connect() as conn:
            Outbox().publish(conn, "g", Event(kind="later"))
            assert queue.claim("w", VIS) is None  # not committed yet
            conn.commit()
        lease = queue.claim("w", VIS)
        assert lease is not None and lease.event.kind == "later"
        engine.dispose()


def test_async_connection_and_session(url: str, queue: Any) -> None:
    async def main() -> None:
        outbox: AsyncOutbox[Event] = AsyncOutbox()
        engine = create_async_engine(async_url(url))
        try:
            async with engine.connect() as conn:
                await outbox.publish(conn, "a", Event(kind="kept"))
                await conn.commit()
            async with AsyncSession(engine) as session:
                await outbox.publish(session, "a", Event(kind="dropped"))
                await session.rollback()
            lease = queue.claim("w", VIS)
            async with AsyncSession(engine) as session:
                assert await outbox.ack(session, lease)
                await session.commit()
            async with engine.connect() as conn:
                assert not await outbox.ack(conn, lease)
        finally:
            await engine.dispose()

    asyncio.run(main())
    assert queue.stats().messages == 0
    assert queue.claim("w", VIS) is None


def test_a_transport_takes_the_applications_connection_to_its_own_database(
    url: str, engine: Engine, queue: Any
) -> None:
    """``connection=`` on the transport's writes: the same outbox, and a connection to another
    database is refused before anything is written."""
    with engine.connect() as conn:
        queue.publish("g", Event(kind="first"), connection=conn)
        queue.publish_many([("g", Event(kind="second"))], connection=conn)
        if not url.startswith("sqlite"):  # SQLite: the claim would wait for the write lock
            assert queue.claim("w", VIS) is None  # not committed yet
        conn.commit()
    lease = queue.claim("w", VIS)
    assert lease is not None and lease.event.kind == "first"
    with engine.connect() as conn:
        assert queue.ack(lease, connection=conn)
        conn.rollback()
    with engine.connect() as conn:
        assert queue.ack(lease, connection=conn) and not queue.ack(lease, connection=conn)
        conn.commit()
    assert [json.loads(m.event)["kind"] for m in queue.peek()] == ["second"]


def test_a_connection_to_another_database_is_refused(
    url: str, queue: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if url.startswith("sqlite"):
        other_url = f"sqlite:///{tmp_path / 'other.db'}"
        SqliteTransport(other_url).close()
    else:
        other_url = str(request.getfixturevalue("pg_server").create_database())
        from harel_sa import PostgresTransport

        PostgresTransport(other_url).close()
        other_url = other_url.replace("postgresql://", "postgresql+psycopg://")
    other = create_engine(other_url)
    with other.connect() as conn, pytest.raises(InvalidArgumentError, match="another database"):
        queue.publish("g", Event(kind="lost"), connection=conn)
    other.dispose()
    assert queue.stats().messages == 0


def test_an_async_transport_takes_the_applications_async_session(url: str, queue: Any) -> None:
    async def main() -> None:
        if url.startswith("sqlite"):
            from harel_sa import AsyncSqliteTransport

            transport: Any = await AsyncSqliteTransport.create(url.removeprefix("sqlite:///"))
        else:
            from harel_sa import AsyncPostgresTransport

            transport = await AsyncPostgresTransport.create(own_url(url))
        engine = create_async_engine(async_url(url))
        try:
            async with AsyncSession(engine) as session:
                await transport.publish("g", Event(kind="kept"), connection=session)
                await transport.publish_many([("g", Event(kind="too"))], connection=session)
                await session.commit()
            async with AsyncSession(engine) as session:
                await transport.publish("g", Event(kind="dropped"), connection=session)
                await session.rollback()
            lease = await transport.claim("w", VIS)
            async with engine.connect() as conn:
                assert await transport.nack(lease, connection=conn)
                await conn.commit()
            lease = await transport.claim("w", VIS)
            async with engine.connect() as conn:
                assert await transport.dead_letter(lease, "no", connection=conn)
                assert await transport.ack_many([lease], connection=conn) == [False]
                await conn.commit()
        finally:
            await engine.dispose()
            await transport.close()

    asyncio.run(main())
    assert [json.loads(m.event)["kind"] for m in queue.peek()] == ["too"]
    assert [d.error for d in queue.dead()] == ["no"]


@pytest.mark.parametrize("configured", [False, True])
def test_sqlite_transactions_make_a_read_and_its_writes_one_transaction(
    tmp_path: Path, configured: bool
) -> None:
    """With the driver's defaults an application's reads run outside its transaction (pysqlite
    begins one at the first write): another writer commits between its read and its publish.
    With ``sqlite_transactions`` its ``BEGIN IMMEDIATE`` holds the write lock from the start,
    and the other writer waits for its commit."""
    import threading

    from harel_sa.outbox import sqlite_transactions

    path = tmp_path / "q.db"
    SqliteTransport(path).close()
    engine = create_engine(f"sqlite:///{path}")
    if configured:
        sqlite_transactions(engine, busy_timeout=5.0)
    other = SqliteTransport(path, busy_timeout=10.0)
    writer = threading.Thread(target=lambda: other.publish("other", Event(kind="meanwhile")))
    with engine.connect() as conn:
        seen = conn.execute(text("SELECT count(*) FROM harel_transport_messages")).scalar()
        writer.start()
        writer.join(0.5)
        assert writer.is_alive() == configured  # configured: waiting for this transaction
        Outbox().publish(conn, "mine", Event(kind="mine"), priority=int(seen or 0))
        conn.commit()
    writer.join(10)
    assert not writer.is_alive()
    order = [m.group_id for m in other.peek()]
    assert order == (["mine", "other"] if configured else ["other", "mine"])
    other.close()
    engine.dispose()


def test_on_postgresql_a_waiting_worker_wakes_at_the_applications_commit(
    request: pytest.FixtureRequest,
) -> None:
    """The publish's NOTIFY rides the application's transaction: nothing wakes a listener
    before its commit, and the commit does."""
    import threading

    from harel_sa import PostgresTransport

    url = str(request.getfixturevalue("pg_url"))
    with PostgresTransport(url) as queue:
        assert queue.wait_for_messages(0.1)  # the first wait connects the listener
        woke: list[bool] = []
        waiter = threading.Thread(target=lambda: woke.append(queue.wait_for_messages(20.0)))
        engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
        with engine.connect() as conn:
            waiter.start()
            Outbox().publish(conn, "g", Event(kind="news"))
            waiter.join(1.0)
            assert waiter.is_alive()  # published, not committed: nothing to wake for
            conn.commit()
        waiter.join(10.0)
        assert woke == [True]
        engine.dispose()


def test_every_statement_on_the_applications_connection_is_a_compiled_text_construct(
    url: str, engine: Engine, queue: Any
) -> None:
    """What the application's engine sees (its ``before_cursor_execute`` event, as its logging
    and instrumentation do) is, statement for statement, SQLAlchemy's compilation of one of the
    outbox's ``text()`` constructs for that dialect: no string that skipped SQLAlchemy."""
    from sqlalchemy import TextClause

    outbox: Outbox[Event] = Outbox()
    seen: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda c, cur, sql, *rest: seen.append(sql))
    queue.publish("g", Event(kind="one"))
    lease = queue.claim("w", VIS)
    with engine.connect() as conn:
        outbox.publish(conn, "g", Event(kind="two"))
        outbox.publish_many(conn, [("h", Event(kind="three")), ("i", Event(kind="four"))])
        assert outbox.nack(conn, lease, 0.0)
        conn.commit()
    lease, other = queue.claim("w", VIS), queue.claim("w", VIS)
    with engine.connect() as conn:
        assert outbox.ack(conn, lease)
        assert outbox.dead_letter(conn, other, "x")
        conn.commit()
    plan = outbox._plan(engine.dialect.name)
    found: list[object] = []
    for value in vars(plan).values():  # the plan's constructs, in its dicts, its statements'
        found += list(value.values()) if isinstance(value, dict) else [value]
        found += [getattr(v, "clause", None) for v in getattr(value, "__dict__", {}).values()]
    clauses = [value for value in found if isinstance(value, TextClause)]
    compiled = {str(clause.compile(dialect=engine.dialect)) for clause in clauses}
    assert seen and all(sql in compiled for sql in seen), [s for s in seen if s not in compiled]
