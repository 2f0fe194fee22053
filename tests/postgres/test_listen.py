"""Idle workers wait, not poll: ``LISTEN``/``NOTIFY`` on the prefix's channel.

What makes a message claimable now (publish, publish_many, nack without delay, release)
notifies in its own transaction; ``wait_for_messages`` hears it, sync and async alike; an idle
worker with a 30-second poll interval, batching or not, handles a message another process
published long before its next poll (the order of events, not a timing: the deadline is far
past a notification and far short of the poll interval).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from harel_sa import (
    AsyncPostgresTransport,
    AsyncWorker,
    Event,
    InvalidArgumentError,
    Lease,
    PostgresTransport,
    Worker,
)
from harel_sa.postgres.compiled import channel
from harel_sa.schema import Names
from tests import forkserver

POLL = 30.0  # the workers' poll interval: far longer than the test waits
DEADLINE = 20.0  # seconds to wait for a notified worker: a bound, not a timing


def publish_one(url: str, kind: str) -> None:
    with PostgresTransport(url, create_schema=False, pool_size=1) as q:
        q.publish("g", Event(kind=kind))


def listening(url: str) -> None:
    """Return once a connection of the database has run LISTEN on the channel."""
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(4000):
            (found,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query = %s",
                (f"LISTEN {channel(Names())}",),
            ).fetchone() or (0,)
            if found:
                return
            threading.Event().wait(0.005)
    raise AssertionError("nobody listens")


def test_each_operation_that_frees_a_message_notifies_and_the_others_do_not(
    pg_url: str,
) -> None:
    with PostgresTransport(pg_url) as q, PostgresTransport(pg_url) as other:
        assert q.wait_for_messages(0) is True  # the first wait connects: one spurious wake
        assert q.wait_for_messages(0) is False
        steps: list[tuple[str, Callable[[], object], bool]] = [
            ("publish", lambda: other.publish("a", Event(kind="a1")), True),
            ("publish_many", lambda: other.publish_many([("b", Event(kind="b1"))]), True),
        ]
        for name, step, notifies in steps:
            step()
            assert q.wait_for_messages(DEADLINE) is notifies, name
        lease = other.claim("w", 30.0)
        assert lease is not None and q.wait_for_messages(0) is False  # a claim: nothing
        assert other.nack(lease, 0)
        assert q.wait_for_messages(DEADLINE) is True  # freed now
        lease = other.claim("w", 30.0)
        assert lease is not None and other.nack(lease, 60)
        assert q.wait_for_messages(0.3) is False  # parked: not claimable now
        assert other.release() == 1
        assert q.wait_for_messages(DEADLINE) is True  # the park ended
        with pytest.raises(InvalidArgumentError):
            q.wait_for_messages(-1)


def test_the_async_twin_hears_the_same(pg_url: str) -> None:
    async def scenario() -> None:
        q = await AsyncPostgresTransport.create(pg_url)
        try:
            assert await q.wait_for_messages(0) is True
            assert await q.wait_for_messages(0) is False
            waiting = asyncio.create_task(q.wait_for_messages(DEADLINE))
            await asyncio.to_thread(listening, pg_url)
            await asyncio.to_thread(publish_one, pg_url, "x")
            assert await waiting is True
        finally:
            await q.close()

    asyncio.run(scenario())


def publish_from_another_process(url: str) -> None:
    ctx = forkserver.context()
    p = ctx.Process(target=publish_one, args=(url, "wake"))
    p.start()
    p.join(60)
    assert p.exitcode == 0


@pytest.mark.parametrize("batch", [1, 4], ids=["one-at-a-time", "batching"])
def test_an_idle_worker_handles_a_message_published_by_another_process_before_its_poll(
    pg_url: str, batch: int
) -> None:
    handled = threading.Event()

    def handler(lease: Lease[Event]) -> None:
        assert lease.event.kind == "wake"
        handled.set()

    with PostgresTransport(pg_url) as q:
        worker = Worker(
            q, handler, handle_signals=False, poll_interval=POLL, concurrency=2, batch=batch
        )
        running = threading.Thread(target=worker.run)
        running.start()
        try:
            listening(pg_url)  # idle: nothing claimed, waiting on the channel
            publish_from_another_process(pg_url)
            assert handled.wait(DEADLINE), "the idle worker slept through the notification"
        finally:
            worker.stop()
            running.join(60)
        assert not running.is_alive()
        assert q.stats().messages == 0


@pytest.mark.parametrize("batch", [1, 4], ids=["one-at-a-time", "batching"])
def test_an_idle_async_worker_handles_it_too(pg_url: str, batch: int) -> None:
    async def scenario() -> None:
        handled = asyncio.Event()

        async def handler(lease: Lease[Event]) -> None:
            handled.set()

        q: Any = await AsyncPostgresTransport.create(pg_url)
        try:
            worker = AsyncWorker(
                q, handler, handle_signals=False, poll_interval=POLL, concurrency=2, batch=batch
            )
            running = asyncio.create_task(worker.run())
            await asyncio.to_thread(listening, pg_url)
            await asyncio.to_thread(publish_from_another_process, pg_url)
            await asyncio.wait_for(handled.wait(), DEADLINE)
            worker.stop()
            await asyncio.wait_for(running, 60)
            assert (await q.stats()).messages == 0
        finally:
            await q.close()

    asyncio.run(scenario())
