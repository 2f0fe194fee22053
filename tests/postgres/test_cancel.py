"""A cancelled async PostgreSQL claim gives its lease(s) back (harel_sa.cancels).

The claim is caught mid-statement: another connection holds the messages table's lock, so
the claim waits at the server; the task is cancelled there, then the lock is let go and the
claim's statement commits its lease. The caller sees the cancellation; the message is free
at once, its delivery uncounted.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from harel_sa import AsyncPostgresTransport, Event
from harel_sa.schema import Names

NAMES = Names()
M = NAMES.messages
VIS = 300.0


async def waiting_on_a_lock(url: str) -> None:
    """Return once some backend waits for a lock (the claim, behind the test's lock)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for _ in range(2000):  # a bound, not a timing: the claim is normally there at once
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            )
            row = await cur.fetchone()
            if row is not None and row[0] > 0:
                return
            await asyncio.sleep(0.005)
    raise AssertionError("the claim never reached the server")


async def cancel_mid_claim(url: str, call: str, **arguments: Any) -> list[tuple[Any, ...]]:
    """Cancel ``call`` while its statement waits at the server; the messages' rows after."""
    q = await AsyncPostgresTransport.create(url)
    try:
        await q.publish_many([(f"g{i}", Event(kind=f"m{i}")) for i in range(3)])
        async with await psycopg.AsyncConnection.connect(url) as locker:
            await locker.execute(f"LOCK TABLE {M} IN ACCESS EXCLUSIVE MODE")
            task = asyncio.create_task(getattr(q, call)("w", VIS, **arguments))
            await waiting_on_a_lock(url)
            task.cancel()
            await asyncio.sleep(0.05)  # the cancellation reaches the task first
            await locker.rollback()  # then the claim's statement runs and commits its lease
            with pytest.raises(asyncio.CancelledError):
                await task
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            cur = await conn.execute(f"SELECT seq, locked_by, deliveries FROM {M} ORDER BY seq")
            rows = await cur.fetchall()
        # Claimable at once, and counted once when it is delivered.
        again = await q.claim_many("w2", VIS, 3)
        assert sorted(lease.event.kind for lease in again) == ["m0", "m1", "m2"]
        assert [lease.deliveries for lease in again] == [1, 1, 1]
        return rows
    finally:
        await q.close()


@pytest.mark.parametrize(
    ("call", "arguments"), [("claim", {}), ("claim_many", {"limit": 2})], ids=["claim", "many"]
)
def test_a_cancelled_claim_gives_its_leases_back_uncounted(
    pg_url: str, call: str, arguments: dict[str, Any]
) -> None:
    rows = asyncio.run(cancel_mid_claim(pg_url, call, **arguments))
    assert [(locked_by, deliveries) for _, locked_by, deliveries in rows] == [(None, 0)] * 3


def test_a_cancelled_ack_finishes_its_statement(pg_url: str) -> None:
    """The ack's statement, caught waiting at the server when its caller is cancelled, runs
    to its end (the message is gone), and the caller sees the cancellation."""

    async def main() -> list[tuple[Any, ...]]:
        q = await AsyncPostgresTransport.create(pg_url)
        try:
            await q.publish("g", Event(kind="m"))
            lease = await q.claim("w", VIS)
            assert lease is not None
            async with await psycopg.AsyncConnection.connect(pg_url) as locker:
                await locker.execute(f"LOCK TABLE {M} IN ACCESS EXCLUSIVE MODE")
                task = asyncio.create_task(q.ack(lease))
                await waiting_on_a_lock(pg_url)
                task.cancel()
                await asyncio.sleep(0.05)
                await locker.rollback()
                with pytest.raises(asyncio.CancelledError):
                    await task
            async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as c:
                return await (await c.execute(f"SELECT seq FROM {M}")).fetchall()
        finally:
            await q.close()

    assert asyncio.run(main()) == []


def test_a_claim_past_its_timeout_raises_timeout_and_gives_its_lease_back(pg_url: str) -> None:
    """``asyncio.timeout`` turns its own cancellation into ``TimeoutError`` by the
    cancellation's exact class: the transport raises that very cancellation once its claim
    ended and its lease was given back."""

    async def main() -> list[tuple[Any, ...]]:
        q = await AsyncPostgresTransport.create(pg_url)
        try:
            await q.publish("g", Event(kind="m"))
            async with await psycopg.AsyncConnection.connect(pg_url) as locker:
                await locker.execute(f"LOCK TABLE {M} IN ACCESS EXCLUSIVE MODE")

                async def claim() -> None:
                    async with asyncio.timeout(0.2):
                        await q.claim("w", VIS)

                task = asyncio.create_task(claim())
                await waiting_on_a_lock(pg_url)
                await asyncio.sleep(0.3)  # past the timeout: the claim carries on
                await locker.rollback()
                with pytest.raises(TimeoutError):
                    await task
            async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as c:
                cur = await c.execute(f"SELECT locked_by, deliveries FROM {M}")
                return await cur.fetchall()
        finally:
            await q.close()

    assert asyncio.run(main()) == [(None, 0)]


def test_a_claim_cancelled_while_waiting_for_a_connection_ends_at_once(pg_url: str) -> None:
    """With the pool's one connection held by a claim waiting at the server, a second claim
    waits at the pool; cancelled there, it has taken nothing and ends before the first."""

    async def main() -> None:
        q = await AsyncPostgresTransport.create(pg_url, pool_size=1)
        try:
            await q.publish_many([("a", Event(kind="a")), ("b", Event(kind="b"))])
            async with await psycopg.AsyncConnection.connect(pg_url) as locker:
                await locker.execute(f"LOCK TABLE {M} IN ACCESS EXCLUSIVE MODE")
                first = asyncio.create_task(q.claim("w1", VIS))
                await waiting_on_a_lock(pg_url)
                second = asyncio.create_task(q.claim("w2", VIS))
                await asyncio.sleep(0.05)  # the second waits at the pool
                second.cancel()
                await asyncio.wait([second], timeout=30)  # a guard, not a timing
                assert second.cancelled()
                assert not first.done()  # the lock still holds the first claim
                await locker.rollback()
                lease = await first
            assert lease is not None and lease.event.kind == "a"
            again = await q.claim("w3", VIS)
            assert again is not None and again.event.kind == "b" and again.deliveries == 1
        finally:
            await q.close()

    asyncio.run(main())
