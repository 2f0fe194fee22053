"""A sync and an async transport open on one file see one queue, in both directions.

(Across processes, ``test_workers`` runs an async worker beside sync ones on one file.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from harel_sa import AsyncSqliteTransport, Event, SqliteTransport
from tests.conftest import FakeClock

VIS = 30.0


def test_sync_and_async_transports_on_one_file_share_one_queue(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = str(tmp_path / "queue.db")

    async def main() -> None:
        a = await AsyncSqliteTransport.create(path, clock=clock)
        s: SqliteTransport[Event] = SqliteTransport(path, clock=clock)
        try:
            # sync publishes, async claims and acks
            s.publish("g", Event(kind="s1"))
            s.publish("g", Event(kind="s2"))
            lease = await a.claim("async-worker", VIS)
            assert lease is not None and lease.event.kind == "s1"
            assert s.claim("sync-worker", VIS) is None  # g is in flight, seen from both
            assert await a.ack(lease)

            # async publishes, sync claims and acks
            await a.publish("h", Event(kind="a1"), priority=3, routing_key="k")
            got = s.claim("sync-worker", VIS, min_priority=3, routing_keys=["k"])
            assert got is not None and got.event.kind == "a1"
            assert s.ack(got)

            # a lease taken on one side is fenced, extended and acked on the other
            first = s.claim("sync-worker", VIS)
            assert first is not None and first.event.kind == "s2"
            assert await a.extend(first, 2 * VIS)
            clock.advance(VIS + 1)
            assert await a.claim("async-worker", VIS) is None  # the extension holds
            clock.advance(VIS)
            second = await a.claim("async-worker", VIS)  # lapsed: redelivered
            assert second is not None and second.seq == first.seq
            assert s.ack(first) is False
            assert s.ack(second) is True

            assert (await a.stats()).messages == s.stats().messages == 0
            assert s.claim("sync-worker", VIS) is None
            assert await a.claim("async-worker", VIS) is None
        finally:
            s.close()
            await a.close()

    asyncio.run(main())
