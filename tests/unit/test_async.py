"""The async twin under concurrency on one transport: gather, and cancellation mid-flight."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections import Counter

import pytest

from harel_sa import AsyncSqliteTransport, Event, schema_for
from tests.conftest import FakeClock

NAMES = schema_for().names


def rows(db: str, columns: str = "seq, group_id, locked_by") -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as raw:
        return raw.execute(f"SELECT {columns} FROM {NAMES.messages} ORDER BY seq").fetchall()


def test_gather_claim_ack_publish_claim_on_one_transport(db: str) -> None:
    async def main() -> tuple[Counter[str], list[str]]:
        t = await AsyncSqliteTransport.create(db)
        delivered: Counter[str] = Counter()
        published: list[str] = []
        for g in range(20):
            for i in range(5):
                await t.publish(f"g{g}", Event(kind=f"g{g}-{i}"))

        async def worker(name: str) -> None:
            while True:
                lease = await t.claim(name, 30.0)
                if lease is None:
                    return
                delivered[lease.event.kind] += 1
                await asyncio.gather(
                    t.ack(lease),
                    t.publish("late", Event(kind=f"late-{name}-{lease.seq}")),
                    t.claim(f"{name}-peek", 30.0),  # leases stay: released by the drain below
                )
                published.append(f"late-{name}-{lease.seq}")
                if len(published) > 40:
                    return

        async with t:
            await asyncio.gather(*(worker(f"w{i}") for i in range(8)))
            with sqlite3.connect(db, timeout=0.1) as other:  # no transaction left open
                other.execute("BEGIN IMMEDIATE")
                other.execute("ROLLBACK")
        clock = FakeClock(start=10**10)  # far past every lease taken above
        async with await AsyncSqliteTransport.create(db, clock=clock) as t:
            while (lease := await t.claim("drain", 30.0)) is not None:
                delivered[lease.event.kind] += 1
                assert await t.ack(lease)
        return delivered, published

    delivered, published = asyncio.run(main())
    expected = {f"g{g}-{i}" for g in range(20) for i in range(5)} | set(published)
    assert set(delivered) == expected  # nothing lost
    # Delivered twice only when a peeking claim's lease lapsed unacked: never acked twice.
    assert rows(db) == []


def test_cancelled_claims_lose_nothing_and_the_transport_keeps_working(db: str) -> None:
    clock = FakeClock()

    async def main() -> list[str]:
        handled: list[str] = []
        async with await AsyncSqliteTransport.create(db, clock=clock) as t:
            await t.publish_many([(f"g{i}", Event(kind=f"m{i}")) for i in range(30)])
            for round_ in range(30):
                task = asyncio.ensure_future(t.claim(f"w{round_}", 30.0))
                await asyncio.sleep(0)  # let it reach the driver (or not) before the cancel
                task.cancel()
                try:
                    lease = await task
                except asyncio.CancelledError:
                    continue
                if lease is not None:
                    handled.append(lease.event.kind)
                    assert await t.ack(lease)
            # No transaction was left open: a plain sqlite3 writer gets the lock at once.
            with sqlite3.connect(db, timeout=0.1) as other:
                other.execute("BEGIN IMMEDIATE")
                other.execute("ROLLBACK")
            clock.advance(31)  # any lease a cancelled claim took has lapsed by now
            while (lease := await t.claim("after", 30.0)) is not None:
                handled.append(lease.event.kind)
                assert await t.ack(lease)
        return handled

    handled = asyncio.run(main())
    assert sorted(handled) == sorted(f"m{i}" for i in range(30))
    assert rows(db) == []


class GateClock(FakeClock):
    """A clock that, once armed, holds the caller (inside the driver's transaction) at a gate."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.entered = threading.Event()
        self.gate = threading.Event()

    def __call__(self) -> float:
        if self.armed:
            self.entered.set()
            self.gate.wait(10)
        return self.now

    async def cancel_inside(self, task: asyncio.Future[object]) -> None:
        """Cancel ``task`` while it is inside the driver's transaction, then let it finish."""
        await asyncio.get_running_loop().run_in_executor(None, self.entered.wait, 10)
        assert self.entered.is_set()
        task.cancel()  # the call is inside BEGIN IMMEDIATE in aiosqlite's thread now
        self.armed = False
        self.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        self.entered.clear()
        self.gate.clear()


def deliveries(db: str) -> list[tuple[object, ...]]:
    return rows(db, "seq, locked_by, lock_expiry, deliveries")


def test_claims_cancelled_inside_the_driver_give_their_lease_back_uncounted(db: str) -> None:
    """A claim (or ack_and_claim) cancelled while the driver runs it commits a lease nobody
    receives: it is given back at once and its delivery is not counted, so max_deliveries
    never dead-letters a message no handler saw."""
    clock = GateClock()

    async def main() -> None:
        async with await AsyncSqliteTransport.create(db, clock=clock) as t:
            await t.publish("g", Event(kind="only"))
            await t.publish("h", Event(kind="first"))
            for _ in range(4):  # more than max_deliveries
                clock.armed = True
                await clock.cancel_inside(
                    asyncio.ensure_future(t.claim("w", 30.0, max_deliveries=3))
                )
                assert [row[1:] for row in deliveries(db)] == [(None, None, 0)] * 2
            first = await t.claim("w", 30.0, routing_keys=None, max_deliveries=3)
            assert first is not None and (first.event.kind, first.deliveries) == ("only", 1)
            for _ in range(2):
                clock.armed = True  # the ack lands; the claim it fuses is given back
                await clock.cancel_inside(
                    asyncio.ensure_future(t.ack_and_claim(first, "w", 30.0, max_deliveries=3))
                )
            assert [row[1:] for row in deliveries(db)] == [(None, None, 0)]
            # Claimable now, no clock advance, and still a first delivery.
            lease = await t.claim("w2", 30.0, max_deliveries=3)
            assert lease is not None and (lease.event.kind, lease.deliveries) == ("first", 1)
            assert await t.ack(lease)
            assert await t.dead() == []

    asyncio.run(main())


def test_batched_claims_cancelled_inside_the_driver_give_every_lease_back_uncounted(
    db: str,
) -> None:
    """``claim_many`` and ``ack_many_and_claim_many`` cancelled while the driver runs them:
    every lease of the batch is given back at once, uncounted; the acks of the fused call
    stay done."""
    clock = GateClock()

    async def main() -> None:
        async with await AsyncSqliteTransport.create(db, clock=clock) as t:
            for group in ("g", "h", "i"):
                await t.publish(group, Event(kind=f"{group}1"))
                await t.publish(group, Event(kind=f"{group}2"))
            clock.armed = True
            await clock.cancel_inside(asyncio.ensure_future(t.claim_many("w", 30.0, 3)))
            assert [row[1:] for row in deliveries(db)] == [(None, None, 0)] * 6
            held = await t.claim_many("w", 30.0, 2)
            assert [x.event.kind for x in held] == ["g1", "h1"]
            clock.armed = True
            await clock.cancel_inside(
                asyncio.ensure_future(t.ack_many_and_claim_many(held, "w", 30.0, 3))
            )
            # g1 and h1 acked; the three heads the fused claim took are free again
            assert [row[1:] for row in deliveries(db)] == [(None, None, 0)] * 4
            again = await t.claim_many("w2", 30.0, 3)
            assert sorted((x.event.kind, x.deliveries) for x in again) == [
                ("g2", 1),
                ("h2", 1),
                ("i1", 1),
            ]

    asyncio.run(main())


@pytest.mark.parametrize("name", ["AsyncSqliteTransport", "AsyncPostgresTransport"])
def test_an_async_transport_called_directly_says_to_await_create(name: str) -> None:
    import harel_sa

    with pytest.raises(harel_sa.InvalidArgumentTypeError, match=rf"await {name}\.create\(\.\.\.\)"):
        getattr(harel_sa, name)("a.db")
