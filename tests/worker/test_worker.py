"""The worker loop on real files, each test run on :class:`Worker` and :class:`AsyncWorker`."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from harel_sa import AsyncSqliteTransport, AsyncWorker, Event, Lease, SqliteTransport
from harel_sa.worker import Backoff, WorkerStats
from tests.conftest import FakeClock
from tests.worker.conftest import HANG, Behaviour, Running, wait_until

Start = Callable[..., Running]


def publish(db: str, *groups: str, per_group: int = 1) -> None:
    with SqliteTransport(db) as q:
        for n in range(per_group):
            for group in groups:
                q.publish(group, Event(kind="job", data={"n": n}))


def test_acks_what_the_handler_took_in_order_until_empty(start: Start, db: str) -> None:
    publish(db, "a", "b", per_group=3)
    behaviour = Behaviour()
    stats = start(behaviour, run={"until_empty": True}).join()
    assert stats.claimed == stats.succeeded == 6 and stats.failed == stats.lost == 0
    by_group = {
        g: [c.event.data["n"] for c in behaviour.calls if c.group_id == g] for g in ("a", "b")
    }
    assert by_group == {"a": [0, 1, 2], "b": [0, 1, 2]}
    with SqliteTransport(db) as q:
        assert q.stats().messages == 0


def test_max_messages_bounds_the_run(start: Start, db: str) -> None:
    publish(db, "a", "b", "c")
    stats = start(Behaviour(), run={"max_messages": 2}).join()
    assert stats.succeeded == 2
    with SqliteTransport(db) as q:
        assert q.stats().messages == 1


def test_a_failing_handlers_message_comes_back_after_a_growing_delay(
    start: Start, db: str, clock: FakeClock
) -> None:
    publish(db, "g")
    behaviour = Behaviour(fail_first=2)
    backoff = Backoff(base=5.0, factor=2.0, cap=60.0, jitter=0.0)
    running = start(behaviour, run={"max_messages": 3}, clock=clock, backoff=backoff)
    with SqliteTransport(db, clock=clock) as probe:
        for failures, delay in ((1, 5.0), (2, 10.0)):

            def parked(failures: int = failures) -> bool:
                [m] = probe.peek("g")
                return len(behaviour.calls) == failures and m.state == "parked"

            wait_until(parked, f"the park after failure {failures}")
            [message] = probe.peek("g")
            assert message.lock_expiry == clock.now + delay  # deliveries -> backoff delay
            assert probe.claim("thief", 30.0) is None  # parked: nobody gets it before then
            clock.advance(delay + 0.5)  # a park lasts until its end, inclusive
        stats = running.join()
        assert [c.deliveries for c in behaviour.calls] == [1, 2, 3]
        assert (stats.failed, stats.succeeded) == (2, 1)
        assert probe.stats().messages == 0


def test_a_slow_handler_keeps_its_lease_past_the_visibility(start: Start, db: str) -> None:
    publish(db, "g", per_group=2)
    gate = threading.Event()
    behaviour = Behaviour(gate=gate)
    running = start(behaviour, run={"max_messages": 1}, visibility=0.3)
    wait_until(behaviour.started.is_set, "the handler to start")
    with SqliteTransport(db) as other:
        [first, _] = other.peek("g")
        assert first.state == "leased" and first.lock_expiry is not None
        lapse = first.lock_expiry + 0.3  # one more visibility past the first lease's end
        wait_until(lambda: time.time() > lapse, "the first lease to be long over")
        assert other.claim("thief", 30.0) is None  # the group is still in flight
        [now, _] = other.peek("g")
        assert now.state == "leased" and now.lock_expiry > first.lock_expiry  # extended
        gate.set()
        stats = running.join()
        assert (stats.succeeded, stats.lost) == (1, 0)
        assert [m.seq for m in other.peek("g")] == [first.seq + 1]


def test_a_lost_lease_is_noted_and_its_ack_changes_nothing(start: Start, db: str) -> None:
    publish(db, "g")
    gate = threading.Event()
    behaviour = Behaviour(gate=gate)
    running = start(behaviour, run={"max_messages": 1}, visibility=0.3)
    wait_until(behaviour.started.is_set, "the handler to start")
    with SqliteTransport(db) as other:
        assert other.purge("g") == 1  # the message goes while the handler runs
        publish(db, "g")  # and the group has a new one, which the late ack must not touch
        gate.set()
        stats = running.join()
        assert (stats.succeeded, stats.lost) == (0, 1)
        assert other.stats().messages == 1


@pytest.mark.parametrize("concurrency", [1, 3])
def test_concurrency_runs_that_many_handlers_at_once(
    start: Start, db: str, concurrency: int
) -> None:
    publish(db, "a", "b", "c", "d")
    behaviour = Behaviour(rendezvous=concurrency)
    stats = start(behaviour, run={"until_empty": True}, concurrency=concurrency).join()
    assert behaviour.most_running == concurrency
    assert (stats.succeeded, stats.failed) == (4, 0)


def test_stop_from_another_thread_finishes_the_handler_in_flight(start: Start, db: str) -> None:
    publish(db, "a", "b")
    gate = threading.Event()
    behaviour = Behaviour(gate=gate)
    running = start(behaviour)
    wait_until(behaviour.started.is_set, "the handler to start")
    running.stop()  # stop claiming; the handler in flight may finish (grace 10 s)
    gate.set()
    stats = running.join()
    assert (stats.claimed, stats.succeeded, stats.released) == (1, 1, 0)
    with SqliteTransport(db) as q:
        assert q.stats().messages == 1  # the second was never claimed


def test_when_the_grace_runs_out_what_is_held_is_released(start: Start, db: str) -> None:
    publish(db, "g")
    behaviour = Behaviour(gate=threading.Event())  # never opened
    running = start(behaviour, visibility=30.0, grace=0.2)
    wait_until(behaviour.started.is_set, "the handler to start")
    running.stop()
    stats = running.join()
    assert (stats.succeeded, stats.released) == (0, 1)
    with SqliteTransport(db) as q:
        lease = q.claim("next", 30.0)  # at once: not after the 30 s lease
        assert lease is not None and lease.deliveries == 2


@pytest.mark.parametrize("run", [{"max_messages": 1}, {"until_empty": True}])
def test_an_ack_that_finds_the_write_lock_busy_is_retried_not_lost(
    start: Start, db: str, run: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    publish(db, "g")
    gate = threading.Event()
    behaviour = Behaviour(gate=gate)
    running = start(behaviour, run=run, busy_timeout=0.05)
    wait_until(behaviour.started.is_set, "the handler to start")
    lock = WriteLock(db)
    try:
        gate.set()
        wait_until(lambda: "will retry" in caplog.text, "the ack to meet the busy lock")
    finally:
        lock.release()
    stats = running.join()
    assert (stats.succeeded, stats.lost) == (1, 0)
    with SqliteTransport(db) as q:
        assert q.stats().messages == 0


class WriteLock:
    """SQLite's write lock, held by the test (``BEGIN IMMEDIATE``) until released."""

    def __init__(self, db: str) -> None:
        self.conn = sqlite3.connect(db, isolation_level=None)
        self.conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        self.conn.execute("COMMIT")
        self.conn.close()


def test_a_claim_that_finds_the_write_lock_busy_is_not_an_empty_queue(
    start: Start, db: str, caplog: pytest.LogCaptureFixture
) -> None:
    publish(db, "g")
    lock = WriteLock(db)
    try:
        running = start(  # opening only reads: the schema is there
            Behaviour(), run={"until_empty": True}, busy_timeout=0.05, create_schema=False
        )
        wait_until(lambda: "Claim: database is locked" in caplog.text, "a busy claim")
    finally:
        lock.release()
    stats = running.join()
    assert stats.succeeded == 1  # until_empty did not take the busy lock for "empty"


def test_a_heartbeat_that_finds_the_write_lock_busy_does_not_lose_the_lease(
    start: Start, db: str, caplog: pytest.LogCaptureFixture
) -> None:
    publish(db, "g")
    gate = threading.Event()
    behaviour = Behaviour(gate=gate)
    running = start(behaviour, run={"max_messages": 1}, visibility=0.3, busy_timeout=0.05)
    wait_until(behaviour.started.is_set, "the handler to start")
    lock = WriteLock(db)
    try:
        wait_until(lambda: "Extend: database is locked" in caplog.text, "a busy heartbeat")
    finally:
        lock.release()
    gate.set()
    stats = running.join()
    assert (stats.succeeded, stats.lost) == (1, 0)


def test_a_busy_claim_gives_back_the_max_messages_reservation(
    start: Start, db: str, caplog: pytest.LogCaptureFixture
) -> None:
    publish(db, "g")
    lock = WriteLock(db)
    try:
        running = start(
            Behaviour(), run={"max_messages": 1}, busy_timeout=0.05, create_schema=False
        )
        wait_until(lambda: "Claim: database is locked" in caplog.text, "a busy claim")
    finally:
        lock.release()
    stats = running.join()
    assert (stats.claimed, stats.succeeded) == (1, 1)  # the one claim allowed still happened


def test_a_worker_stopped_while_retrying_a_busy_ack_and_claim_does_not_claim_again(
    start: Start, db: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="harel_sa")
    publish(db, "a", "b")
    gate = threading.Event()
    behaviour = Behaviour(gate=gate)
    # The retry waits out poll_interval before it looks at the run again: long enough that the
    # stop below lands before the retry is sent (a retry already sent when the stop comes
    # finishes, claim included, as any call in flight does).
    running = start(behaviour, busy_timeout=0.05, poll_interval=2.0)
    wait_until(behaviour.started.is_set, "the handler to start")
    lock = WriteLock(db)
    try:
        gate.set()
        wait_until(lambda: "AckAndClaim: database is locked" in caplog.text, "a busy fused ack")
        running.stop()
        wait_until(lambda: "stopping" in caplog.text, "the stop")
    finally:
        lock.release()
    stats = running.join()
    assert (stats.claimed, stats.succeeded, stats.lost) == (1, 1, 0)
    with SqliteTransport(db) as q:
        [left] = q.peek()
        assert (left.state, left.deliveries) == ("ready", 0)  # never claimed


def test_an_async_handler_that_blocks_the_loop_keeps_its_lease_and_is_warned_about(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    publish(db, "g")
    calls: list[Lease[Event]] = []
    blocking = threading.Event()
    stolen: list[Lease[Event]] = []

    def thief() -> None:  # another worker, claiming all the while the loop is blocked
        with SqliteTransport(db) as other:
            blocking.wait(HANG)
            while blocking.is_set():
                if (taken := other.claim("thief", 30.0)) is not None:
                    stolen.append(taken)
                time.sleep(0.05)

    async def handler(lease: Lease[Event]) -> None:
        calls.append(lease)
        blocking.set()
        time.sleep(2.0)  # blocks the loop for 10 heartbeats, over 3 visibilities
        blocking.clear()

    async def main() -> WorkerStats:
        transport = await AsyncSqliteTransport.create(db)
        try:
            worker = AsyncWorker(transport, handler, visibility=0.6, poll_interval=0.01)
            return await worker.run(until_empty=True)
        finally:
            await transport.close()

    other = threading.Thread(target=thief)
    other.start()
    stats = asyncio.run(main())
    blocking.clear()
    other.join(HANG)
    assert stolen == []  # the lease never lapsed
    assert (stats.succeeded, stats.lost, len(calls)) == (1, 0, 1)
    assert "the event loop has not run for" in caplog.text
    assert "the heartbeat thread keeps the leases alive" in caplog.text


def test_an_async_worker_on_a_private_memory_queue_extends_through_the_loop() -> None:
    calls: list[Lease[Event]] = []

    async def slow(lease: Lease[Event]) -> None:
        calls.append(lease)
        await asyncio.sleep(1.0)  # over 3 visibilities, without blocking the loop

    async def main() -> WorkerStats:
        async with await AsyncSqliteTransport.create(":memory:") as transport:
            await transport.publish("g", Event(kind="job"))
            worker = AsyncWorker(transport, slow, visibility=0.3, poll_interval=0.01)
            return await worker.run(until_empty=True)

    stats = asyncio.run(main())
    assert (stats.succeeded, stats.lost, len(calls)) == (1, 0, 1)


def test_a_worker_on_a_queue_whose_schema_is_not_there_raises_schema_error(
    tmp_path: Path,
) -> None:
    """``create_schema=False`` builds the transport before the migration has run; the worker's
    first claim says so, and ``run()`` raises that SchemaError instead of retrying for ever."""
    from harel_sa import SchemaError, Worker

    path = tmp_path / "q.db"
    sqlite3.connect(path).close()
    with (
        SqliteTransport(path, create_schema=False) as q,
        pytest.raises(SchemaError, match="no harel_sa queue"),
    ):
        Worker(q, lambda event: None).run(until_empty=True)

    async def main() -> None:
        queue = await AsyncSqliteTransport.create(path, create_schema=False)
        try:
            with pytest.raises(SchemaError, match="no harel_sa queue"):
                await AsyncWorker(queue, _noop).run(until_empty=True)
        finally:
            await queue.close()

    asyncio.run(asyncio.wait_for(main(), HANG))


async def _noop(event: Event) -> None:
    pass
