"""A handler's writes and its ack in one transaction (:mod:`harel_sa.transactional`): a worker
process SIGKILLed at random moments, many times, between a handler's writes and the commit,
leaves every message's effect exactly once; an exception rolls the writes back and the worker
retries as usual; sync and async, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import sessionmaker

from harel_sa import AsyncWorker, Event, Retry, SqliteTransport, Worker
from harel_sa.transactional import in_async_transaction, in_transaction

MESSAGES = 120

#: A worker process: each message's effect is a row in ``effects``, written in the handler's
#: transaction, then a pause (the window a kill falls into), then the ack and the commit.
BODY = """
import sys, time
from sqlalchemy import create_engine, text
from harel_sa import SqliteTransport, Worker
from harel_sa.postgres.transport import PostgresTransport
from harel_sa.transactional import in_transaction

url = sys.argv[1]
sqlite = url.startswith("sqlite")
queue = SqliteTransport(url, create_schema=False) if sqlite else PostgresTransport(
    url.replace("+psycopg", ""), create_schema=False)
engine = create_engine(url)

@in_transaction(queue, engine)
def handle(lease, conn):
    conn.execute(text("INSERT INTO effects (n) VALUES (:n)"), {"n": lease.event.data["n"]})
    time.sleep(0.004)

Worker(queue, handle, visibility=0.5, poll_interval=0.05, max_deliveries=None).run(
    until_empty=True)
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'app.db'}"
    return str(request.getfixturevalue("pg_url")).replace("postgresql://", "postgresql+psycopg://")


def transport(url: str) -> Any:
    if url.startswith("sqlite"):
        return SqliteTransport(url)
    from harel_sa import PostgresTransport

    return PostgresTransport(url.replace("+psycopg", ""))


def effects(url: str) -> Counter[int]:
    engine = create_engine(url)
    with engine.connect() as conn:
        found = Counter(n for (n,) in conn.execute(text("SELECT n FROM effects")))
    engine.dispose()
    return found


def prepare(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (n INTEGER NOT NULL)"))
    engine.dispose()
    with transport(url) as q:
        q.publish_many([(f"g{n % 7}", Event(kind="e", data={"n": n})) for n in range(MESSAGES)])


def test_a_worker_killed_between_its_writes_and_the_commit_leaves_each_effect_once(
    url: str,
) -> None:
    prepare(url)
    kills = 0
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        before = sum(effects(url).values())
        worker = subprocess.Popen([sys.executable, "-c", BODY, url])
        # Once it has committed a few, kill it a moment later: mostly inside a handler's
        # transaction (the handler pauses there), sometimes between transactions.
        while worker.poll() is None and sum(effects(url).values()) < before + 3:
            time.sleep(0.005)
        if worker.poll() is None:
            time.sleep(0.001 * (kills % 7))
            os.kill(worker.pid, signal.SIGKILL)
            worker.wait()
            kills += 1
            continue
        assert worker.returncode == 0
        with transport(url) as q:
            if q.stats().messages == 0:
                break
    assert kills >= 10  # the kills did fall inside the run
    assert effects(url) == Counter(range(MESSAGES))  # every effect once: none lost, none twice


def test_an_exception_rolls_the_handlers_writes_back_and_the_worker_retries(url: str) -> None:
    prepare(url)
    engine = create_engine(url)
    failed: set[int] = set()

    with transport(url) as q:

        @in_transaction(q, sessionmaker(engine))
        def handle(lease: Any, session: Any) -> None:
            n = lease.event.data["n"]
            session.execute(text("INSERT INTO effects (n) VALUES (:n)"), {"n": n})
            if n % 10 == 0 and n not in failed:
                failed.add(n)
                raise Retry(0.0)

        Worker(q, handle, handle_signals=False, max_deliveries=None).run(until_empty=True)
        assert q.stats().messages == 0
    engine.dispose()
    assert failed and effects(url) == Counter(range(MESSAGES))


def test_the_async_worker_too(url: str) -> None:
    prepare(url)
    async_url = url.replace("sqlite:", "sqlite+aiosqlite:").replace("+psycopg:", "+psycopg_async:")

    async def main() -> None:
        engine = create_async_engine(async_url)
        if url.startswith("sqlite"):
            from harel_sa import AsyncSqliteTransport

            q: Any = await AsyncSqliteTransport.create(url.removeprefix("sqlite:///"))
        else:
            from harel_sa import AsyncPostgresTransport

            q = await AsyncPostgresTransport.create(url.replace("+psycopg", ""))
        try:
            for begin in (engine, async_sessionmaker(engine)):

                @in_async_transaction(q, begin)
                async def handle(lease: Any, conn: Any) -> None:
                    n = lease.event.data["n"]
                    await conn.execute(text("INSERT INTO effects (n) VALUES (:n)"), {"n": n})

                await AsyncWorker(q, handle, handle_signals=False).run(max_messages=MESSAGES // 2)
            assert (await q.stats()).messages == 0
        finally:
            await q.close()
            await engine.dispose()

    asyncio.run(main())
    assert effects(url) == Counter(range(MESSAGES))
