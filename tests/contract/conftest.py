"""The contract suite's driver fixture: ``open_queue`` opens a transport of each kind.

The suite is written against synchronous calls; the async twin is driven through a private
event loop, so one module proves both. A new transport adds a kind here.

Kinds: ``sync`` and ``async`` (SQLite), ``postgres`` and ``postgres-async``
(:class:`harel_sa.PostgresTransport` and its twin, on a fresh database of the session's
server). A test's ``db`` path names its PostgreSQL database there: the same path opens the same
database again, another path another database. ``raw`` is a plain connection on the same
database, to poke rows as another program would (sqlite3, or psycopg: ``tests/contract/
raw.py``), so the tests that use it run on every kind.

Tests marked ``sqlite_file`` run on the SQLite kinds only, because what they hold cannot exist
on PostgreSQL or is a file's own: the original stdlib transport's files (SQLite files), one
claim rolled back whole (a PostgreSQL claim commits per statement), and values only SQLite's
untyped columns hold (text that is not UTF-8, a BLOB or text in a number column). So are the
empty group rows another program left: PostgreSQL's claim walks past them and does not delete
them (a known gap, not a file property).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from typing import Any

import pytest

from harel_sa import SqliteTransport
from tests.conftest import FakeClock
from tests.contract.raw import Raw, connect


class Blocking:
    """An async transport's coroutine methods, called synchronously on one event loop."""

    def __init__(self, transport: Any, runner: asyncio.Runner) -> None:
        self._transport = transport
        self._runner = runner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._transport, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            # in the caller's context, as a sync call runs (a worker's settlement watcher)
            return self._runner.run(attr(*args, **kwargs), context=contextvars.copy_context())

        return call


OpenQueue = Callable[..., Any]

#: A running test's ``db`` paths that stand for PostgreSQL databases, and their URLs.
_POSTGRES: dict[str, str] = {}


def read(target: object, sql: str) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` on the database of the queue ``target`` names in this test: the
    SQLite file, or the PostgreSQL database that stands for it."""
    url = _POSTGRES.get(str(target))
    if url is None:
        with closing(sqlite3.connect(str(target))) as conn:
            return conn.execute(sql).fetchall()
    import psycopg

    with psycopg.connect(url) as pg:
        return pg.execute(sql).fetchall()


def write(target: object, sql: str) -> None:
    """Run ``sql`` (no parameters: a test's own literals) on that database, committed."""
    url = _POSTGRES.get(str(target))
    if url is None:
        with closing(sqlite3.connect(str(target))) as conn, conn:
            conn.execute(sql)
        return
    import psycopg

    with psycopg.connect(url) as pg:
        pg.execute(sql)


def tables(target: object) -> list[str]:
    """The tables of that database, by name."""
    if str(target) in _POSTGRES:
        sql = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
    return [str(r[0]) for r in read(target, sql)]


SQLITE_KINDS = ["sync", "async"]
KINDS = [*SQLITE_KINDS, "postgres", "postgres-async"]
#: SQLite-only options: the PostgreSQL transport has no such setting.
_SQLITE_OPTIONS = ("synchronous",)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "open_queue" not in metafunc.fixturenames:
        return
    sqlite_only = metafunc.definition.get_closest_marker("sqlite_file") is not None
    metafunc.parametrize("open_queue", SQLITE_KINDS if sqlite_only else KINDS, indirect=True)


@pytest.fixture
def open_queue(request: pytest.FixtureRequest) -> Iterator[OpenQueue]:
    opened: list[Any] = []
    runner = asyncio.Runner()
    databases: dict[str, str] = {}
    made: list[str] = []

    def database(target: object) -> str:
        """The PostgreSQL database that stands for ``target`` (a path) in this test."""
        key = str(target)
        if key not in databases:
            if not databases:
                databases[key] = request.getfixturevalue("pg_url")
            else:
                made.append(request.getfixturevalue("pg_server").create_database())
                databases[key] = made[-1]
            _POSTGRES[key] = databases[key]
        return databases[key]

    def open_queue(target: object, **kwargs: Any) -> Any:
        if request.param == "sync":
            queue: Any = SqliteTransport(target, **kwargs)
        elif request.param == "postgres":
            from harel_sa import PostgresTransport

            options = {k: v for k, v in kwargs.items() if k not in _SQLITE_OPTIONS}
            queue = PostgresTransport(database(target), **options)
        elif request.param == "postgres-async":
            from harel_sa import AsyncPostgresTransport

            options = {k: v for k, v in kwargs.items() if k not in _SQLITE_OPTIONS}
            created = AsyncPostgresTransport.create(database(target), **options)
            queue = Blocking(runner.run(created), runner)
        else:
            from harel_sa import AsyncSqliteTransport

            queue = Blocking(runner.run(AsyncSqliteTransport.create(target, **kwargs)), runner)
        opened.append(queue)
        return queue

    open_queue.kind = request.param  # type: ignore[attr-defined]
    yield open_queue
    for queue in opened:
        queue.close()
    runner.close()
    for key in databases:
        _POSTGRES.pop(key, None)
    for url in made:
        request.getfixturevalue("pg_server").drop_database(url)


@pytest.fixture
def q(open_queue: OpenQueue, db: str, clock: FakeClock) -> Any:
    """A queue of the kind under test on ``db``, its time moved by ``clock``."""
    return open_queue(db, clock=clock)


@pytest.fixture
def raw(q: Any, db: str) -> Iterator[Raw]:
    """A plain connection on the queue's database (autocommit), to read and poke rows as
    another program would: sqlite3 on the file, psycopg on PostgreSQL (``tests/contract/
    raw.py``)."""
    conn = connect(_POSTGRES.get(str(db)), db)
    yield conn
    conn.close()
