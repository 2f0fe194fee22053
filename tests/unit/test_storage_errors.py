"""When SQLite says no: a busy lock, a full database, a read-only file, a file that is not a
database. Each gets a typed :class:`harel_sa.StorageError` at the call, nothing half-written,
and (busy, full) a transport that works again once the cause is gone. Both twins.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pwd
import random
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from harel_sa import (
    AsyncSqliteTransport,
    BusyError,
    Event,
    HarelSAError,
    NotADatabaseError,
    ReadOnlyError,
    SqliteTransport,
    StorageError,
    StorageFullError,
    schema_for,
)
from tests.checks import assert_nothing_stranded
from tests.conftest import FakeClock
from tests.contract.conftest import Blocking

NAMES = schema_for().names
M, G, D = NAMES.messages, NAMES.groups, NAMES.dead
VIS = 30.0


def ev(kind: str, size: int = 0) -> Event:
    return Event(kind=kind, data={"pad": "x" * size} if size else {})


class Twins:
    """Opens a transport of one kind, and runs SQL on that transport's own connection."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.runner = asyncio.Runner()
        self.opened: list[Any] = []

    def open(self, target: object, **kwargs: Any) -> Any:
        queue: Any
        if self.kind == "sync":
            queue = SqliteTransport(target, **kwargs)
        else:
            queue = Blocking(
                self.runner.run(AsyncSqliteTransport.create(target, **kwargs)), self.runner
            )
        self.opened.append(queue)
        return queue

    def own_sql(self, queue: Any, sql: str) -> list[tuple[Any, ...]]:
        """Run ``sql`` on the transport's private driver connection (tests only).

        Some pragmas are per connection (``max_page_count`` among them): they must be set on
        the very connection the transport writes with, which only these private attributes
        reach: ``SqliteTransport._db.raw``, or ``AsyncSqliteTransport._driver`` in its thread.
        """
        if self.kind == "sync":
            rows: list[tuple[Any, ...]] = queue._db.raw.execute(sql).fetchall()
            return rows
        transport = queue._transport

        async def in_its_thread() -> list[tuple[Any, ...]]:
            rows: list[tuple[Any, ...]] = await transport._driver.run(
                lambda raw: raw.execute(sql).fetchall()
            )
            return rows

        return self.runner.run(in_its_thread())

    def in_transaction(self, queue: Any) -> bool:
        if self.kind == "sync":
            return bool(queue._db.raw.in_transaction)
        return bool(queue._transport._driver.conn._conn.in_transaction)

    def close(self) -> None:
        for queue in self.opened:
            queue.close()
        self.runner.close()


@pytest.fixture(params=["sync", "async"])
def twins(request: pytest.FixtureRequest) -> Iterator[Twins]:
    t = Twins(request.param)
    yield t
    t.close()


def snapshot(db: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the queue's tables, read on a connection of its own."""
    with sqlite3.connect(db) as raw:
        return {t: raw.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in (M, G, D)}


def assert_consistent(db: str) -> None:
    """No message without its group row, no group row without a message."""
    with sqlite3.connect(db) as raw:
        assert_nothing_stranded(raw)


def drain(q: Any) -> dict[str, list[str]]:
    got: dict[str, list[str]] = {}
    while (lease := q.claim("drain", VIS)) is not None:
        got.setdefault(lease.group_id, []).append(lease.event.kind)
        assert q.ack(lease)
    return got


# --- busy -----------------------------------------------------------------------------------


def test_a_held_write_lock_raises_busy_error_and_the_transport_stays_usable(
    twins: Twins, db: str, clock: FakeClock
) -> None:
    q = twins.open(db, clock=clock, busy_timeout=0.05)
    q.publish("g", ev("m1"))
    q.publish("h", ev("h1"))
    lease = q.claim("w", VIS)
    before = snapshot(db)

    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's writer, holding the lock
    try:
        calls: dict[str, Callable[[], object]] = {
            "publish": lambda: q.publish("g", ev("m2")),
            "publish_many": lambda: q.publish_many([("g", ev("m3")), ("k", ev("k1"))]),
            "claim": lambda: q.claim("w", VIS),
            "ack": lambda: q.ack(lease),
            "nack": lambda: q.nack(lease, 5),
            "extend": lambda: q.extend(lease, VIS),
            "ack_and_claim": lambda: q.ack_and_claim(lease, "w", VIS),
        }
        for name, call in calls.items():
            with pytest.raises(BusyError) as caught:
                call()
            assert isinstance(caught.value, StorageError), name
            assert isinstance(caught.value, HarelSAError), name
            assert not isinstance(caught.value, sqlite3.Error), name
            assert "SQLITE_BUSY" in str(caught.value), name
            assert not twins.in_transaction(q), name
        # Reads do not need the write lock (WAL): the operator still sees the queue.
        assert q.stats().messages == 2
    finally:
        holder.execute("ROLLBACK")
        holder.close()

    assert snapshot(db) == before  # nothing written by any refused call
    assert q.ack(lease) is True  # the same lease still acks: nothing was lost meanwhile
    q.publish("g", ev("m2"))
    assert drain(q) == {"h": ["h1"], "g": ["m2"]}
    assert_consistent(db)


def test_opening_while_the_lock_is_held_raises_busy_error_only_when_it_must_write(
    twins: Twins, db: str, clock: FakeClock
) -> None:
    """A file at head opens with no write (start-up only reads it); one whose schema start-up
    must write waits ``busy_timeout`` for the lock, then raises BusyError."""
    twins.open(db, clock=clock).publish("g", ev("m1"))
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        twins.open(db, clock=clock, busy_timeout=0.05)
        holder.execute("ROLLBACK")
        holder.execute("UPDATE harel_transport_alembic_version SET version_num = 'harel_sa_0003'")
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(BusyError):
            twins.open(db, clock=clock, busy_timeout=0.05)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    q = twins.open(db, clock=clock, busy_timeout=0.05)
    assert drain(q) == {"g": ["m1"]}


# --- full -----------------------------------------------------------------------------------


def cap(twins: Twins, q: Any, pages: int | None = None) -> int:
    """Cap the transport's file at its current size (or ``pages``); returns the cap.

    ``PRAGMA max_page_count`` is per connection and not stored in the file: set through a
    second connection it would bind only that one, so it goes on the transport's own.
    """
    if pages is None:
        pages = int(twins.own_sql(q, "PRAGMA page_count")[0][0])
    got = int(twins.own_sql(q, f"PRAGMA max_page_count = {pages}")[0][0])
    assert got == pages
    return pages


def test_a_full_database_raises_storage_full_error_and_nothing_partial_is_left(
    twins: Twins, db: str, clock: FakeClock
) -> None:
    q = twins.open(db, clock=clock)
    published: dict[str, list[str]] = {"g": ["keep1", "keep2"]}
    q.publish("g", ev("keep1"))
    q.publish("g", ev("keep2"))
    pages = cap(twins, q)
    before = snapshot(db)

    big = 200_000  # bytes: far more than the free room in the capped file
    with pytest.raises(StorageFullError) as caught:
        q.publish("g", ev("too-big", big))
    assert "SQLITE_FULL" in str(caught.value)
    with pytest.raises(StorageFullError):
        q.publish("new-group", ev("too-big", big))
    with pytest.raises(StorageFullError):
        q.publish_many([("a", ev("a1")), ("b", ev("b1")), ("g", ev("g3")), ("c", ev("c1", big))])
    assert not twins.in_transaction(q)
    assert snapshot(db) == before  # no message, no group row, from any of the three calls
    assert int(twins.own_sql(q, "PRAGMA page_count")[0][0]) <= pages

    # Fill the last free bytes one small publish at a time, in fresh groups, until refused:
    # every publish that returned is whole, the refused one left nothing.
    for i in range(10_000):
        try:
            q.publish(f"fill{i}", ev(f"f{i}", 200))
        except StorageFullError:
            break
        published[f"fill{i}"] = [f"f{i}"]
    else:
        pytest.fail("a capped file never filled up")
    assert_consistent(db)
    full = snapshot(db)
    assert len(full[M]) == sum(len(v) for v in published.values())
    assert {g for g, *_ in full[G]} == set(published)

    # Room is made: the queue works again and every published message is there, in order.
    cap(twins, q, 1_000_000)
    q.publish("g", ev("after", big))
    q.publish_many([("a", ev("a1")), ("g", ev("g4"))])
    published["g"] += ["after", "g4"]
    published["a"] = ["a1"]
    assert drain(q) == published
    assert snapshot(db) == {M: [], G: [], D: []}


# --- read-only ------------------------------------------------------------------------------


def make_queue(path: str) -> dict[str, list[tuple[Any, ...]]]:
    with SqliteTransport(path) as q:
        q.publish("g", ev("m1"))
        q.publish("g", ev("m2"))
    return snapshot(path)


READ_ONLY_URLS = ["sqlite:///file:{}?mode=ro&uri=true", "sqlite:///{}?mode=ro"]


@pytest.mark.parametrize("form", READ_ONLY_URLS, ids=["file-uri", "plain-mode-ro"])
@pytest.mark.parametrize("create_schema", [True, False])
def test_a_read_only_database_raises_read_only_error_and_writes_nothing(
    twins: Twins, tmp_path: Path, create_schema: bool, form: str
) -> None:
    """A ``mode=ro`` URL is honoured as SQLite's, also without ``uri=true`` (SQLAlchemy alone
    would drop it with a warning and open the file for writing)."""
    path = str(tmp_path / "ro.db")
    before = make_queue(path)
    url = form.format(path)
    q = twins.open(url, create_schema=create_schema)
    calls: dict[str, Callable[[], object]] = {
        "publish": lambda: q.publish("g", ev("m3")),
        "publish_many": lambda: q.publish_many([("g", ev("m3")), ("h", ev("h1"))]),
        "claim": lambda: q.claim("w", VIS),
    }
    for name, call in calls.items():
        with pytest.raises(ReadOnlyError) as caught:
            call()
        assert isinstance(caught.value, StorageError), name
        assert "SQLITE_READONLY" in str(caught.value), name
        assert not twins.in_transaction(q), name
    assert q.stats().messages == 2  # reading still works
    assert [m.state for m in q.peek()] == ["ready", "ready"]
    assert snapshot(path) == before


def publish_to(path: str, kind: str) -> str:
    """Open ``path`` and publish; the outcome as ``"<error type>: <message>"`` (or "written")."""
    try:
        if kind == "sync":
            with SqliteTransport(path, create_schema=False) as q:
                q.publish("g", ev("m3"))
        else:

            async def run() -> None:
                q = await AsyncSqliteTransport.create(path, create_schema=False)
                try:
                    await q.publish("g", ev("m3"))
                finally:
                    await q.close()

            asyncio.run(run())
    except HarelSAError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "written"


def drop_privileges() -> None:
    nobody = pwd.getpwnam("nobody")
    os.setgid(nobody.pw_gid)
    os.setuid(nobody.pw_uid)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_file_without_write_permission_raises_read_only_error(kind: str) -> None:
    # A directory of its own that the unprivileged user can reach (pytest's tmp_path sits
    # under a directory only its owner may enter).
    base = tempfile.mkdtemp(prefix="harel-ro-")
    try:
        os.chmod(base, 0o777)
        path = os.path.join(base, "ro.db")
        before = make_queue(path)
        os.chmod(path, 0o444)
        if os.geteuid() == 0:
            # root writes through file modes: publish from a process that gave root up.
            spawn = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(1, mp_context=spawn, initializer=drop_privileges) as pool:
                outcome = pool.submit(publish_to, path, kind).result(timeout=120)
        else:
            outcome = publish_to(path, kind)
        assert outcome.startswith("ReadOnlyError: ")
        assert "SQLITE_READONLY" in outcome
        assert snapshot(path) == before
    finally:
        shutil.rmtree(base)


# --- not a database -------------------------------------------------------------------------

NOT_A_DATABASE = {
    "random-bytes": random.Random(5).randbytes(8192),
    "text": b"group,event\n" + b"g,hello this is a csv file and not a database\n" * 200,
}


@pytest.mark.parametrize("content", list(NOT_A_DATABASE), ids=list(NOT_A_DATABASE))
@pytest.mark.parametrize("create_schema", [True, False])
def test_a_file_that_is_not_a_database_is_refused_at_open(
    twins: Twins, tmp_path: Path, content: str, create_schema: bool
) -> None:
    path = tmp_path / "queue.db"
    path.write_bytes(NOT_A_DATABASE[content])
    with pytest.raises(NotADatabaseError) as caught:
        twins.open(str(path), create_schema=create_schema)
    message = str(caught.value)
    assert isinstance(caught.value, StorageError)
    assert "not a SQLite database" in message
    assert str(path) in message  # names the file it refused
    assert path.read_bytes() == NOT_A_DATABASE[content]  # refused, not "repaired"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["queue.db"]


# --- durability setting ---------------------------------------------------------------------


@pytest.mark.parametrize(("synchronous", "level"), [(None, 2), ("FULL", 2), ("NORMAL", 1)])
def test_the_durability_setting_reaches_the_connection(
    twins: Twins, db: str, synchronous: str | None, level: int
) -> None:
    """FULL (the default) fsyncs every commit; NORMAL can lose the last commits on power loss,
    never on a process crash (the crash tests run both)."""
    kwargs = {} if synchronous is None else {"synchronous": synchronous}
    q = twins.open(db, **kwargs)
    assert twins.own_sql(q, "PRAGMA synchronous") == [(level,)]
    assert twins.own_sql(q, "PRAGMA journal_mode") == [("wal",)]
