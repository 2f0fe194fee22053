"""A batching ``Worker`` and ``AsyncWorker`` on the PostgreSQL transports: its batches
(``claim_many``, ``ack_many_and_claim_many``) are PostgreSQL's too. Every message handled,
failures retried (single nacks beside the batches), FIFO per group, the queue empty after."""

from __future__ import annotations

import asyncio

from harel_sa import AsyncPostgresTransport, AsyncWorker, Event, Lease, PostgresTransport, Worker
from tests.postgres.test_workers import GROUPS, OPTIONS, PER_GROUP, Handled, publish_all

BATCHING = {**OPTIONS, "batch": 4}


def test_a_batching_worker_drains_a_postgres_queue(pg_url: str) -> None:
    handled = Handled()
    with PostgresTransport(pg_url) as q:
        publish_all(q)
        stats = Worker(q, handled, handle_signals=False, **BATCHING).run(until_empty=True)
        assert q.stats().messages == 0
    handled.check()
    assert stats.succeeded == stats.failed == GROUPS * PER_GROUP


def test_a_batching_async_worker_drains_a_postgres_queue(pg_url: str) -> None:
    handled = Handled()

    async def handler(lease: Lease[Event]) -> None:
        handled(lease)

    async def main() -> None:
        q = await AsyncPostgresTransport.create(pg_url)
        try:
            worker = AsyncWorker(q, handler, handle_signals=False, **BATCHING)
            stats = await worker.run(until_empty=True)
            assert (await q.stats()).messages == 0
            assert stats.succeeded == GROUPS * PER_GROUP
        finally:
            await q.close()

    with PostgresTransport(pg_url) as q:
        publish_all(q)
    asyncio.run(main())
    handled.check()
