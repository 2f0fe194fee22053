"""``Worker`` and ``AsyncWorker`` on the PostgreSQL transports: the same workers, the same rules.

The worker's own behaviour is tested on SQLite (tests/worker/); here it drives PostgreSQL's
twins: every message handled, failures retried, FIFO per group, the queue empty afterwards,
and the wrong twin refused before anything runs. Each drain runs unbatched and batching
(``batch=4``: ``claim_many`` and ``ack_many_and_claim_many`` on PostgreSQL, single nacks beside
the batches).
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict

import pytest

from harel_sa import (
    AsyncPostgresTransport,
    AsyncWorker,
    Event,
    InvalidArgumentTypeError,
    Lease,
    PostgresTransport,
    Worker,
)
from harel_sa.worker import Backoff

GROUPS, PER_GROUP = 12, 8


def publish_all(q: PostgresTransport[Event]) -> None:
    q.publish_many(
        [(f"g{g}", Event(kind=f"{g}:{n}")) for n in range(PER_GROUP) for g in range(GROUPS)]
    )


class Handled:
    """What the handler saw: per group, the kinds it finished, in the order it finished them;
    every message's first delivery fails once."""

    def __init__(self) -> None:
        self.done: dict[str, list[str]] = defaultdict(list)
        self.failed: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, lease: Lease[Event]) -> None:
        with self.lock:
            if lease.event.kind not in self.failed:
                self.failed.add(lease.event.kind)
                raise RuntimeError("first delivery fails")
            self.done[lease.group_id].append(lease.event.kind)

    def check(self) -> None:
        assert self.done == {f"g{g}": [f"{g}:{n}" for n in range(PER_GROUP)] for g in range(GROUPS)}


OPTIONS = {"concurrency": 4, "visibility": 30.0, "backoff": Backoff(base=0, jitter=0)}
BATCHES = pytest.mark.parametrize("batch", [1, 4], ids=["one-at-a-time", "batching"])


@BATCHES
def test_a_worker_drains_a_postgres_queue_in_order_per_group_retrying_failures(
    pg_url: str, batch: int
) -> None:
    handled = Handled()
    with PostgresTransport(pg_url) as q:
        publish_all(q)
        worker = Worker(q, handled, handle_signals=False, batch=batch, **OPTIONS)
        stats = worker.run(until_empty=True)
        assert q.stats().messages == 0
    handled.check()
    assert stats.succeeded == GROUPS * PER_GROUP
    assert stats.failed == GROUPS * PER_GROUP


@BATCHES
def test_an_async_worker_drains_a_postgres_queue_in_order_per_group_retrying_failures(
    pg_url: str, batch: int
) -> None:
    handled = Handled()

    async def handler(lease: Lease[Event]) -> None:
        handled(lease)

    async def main() -> None:
        q = await AsyncPostgresTransport.create(pg_url)
        try:
            worker = AsyncWorker(q, handler, handle_signals=False, batch=batch, **OPTIONS)
            stats = await worker.run(until_empty=True)
            assert (await q.stats()).messages == 0
            assert stats.succeeded == GROUPS * PER_GROUP
        finally:
            await q.close()

    with PostgresTransport(pg_url) as q:
        publish_all(q)
    asyncio.run(main())
    handled.check()


def test_each_worker_refuses_the_other_twin(pg_url: str) -> None:
    async def main() -> None:
        q = await AsyncPostgresTransport.create(pg_url)
        try:
            with pytest.raises(InvalidArgumentTypeError, match="AsyncPostgresTransport"):
                Worker(q, lambda lease: None)  # type: ignore[arg-type]
        finally:
            await q.close()

    asyncio.run(main())
    with (
        PostgresTransport(pg_url) as q,
        pytest.raises(InvalidArgumentTypeError, match="PostgresTransport"),
    ):
        AsyncWorker(q, handler=lambda lease: None)  # type: ignore[arg-type]
