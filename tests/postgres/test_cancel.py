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
