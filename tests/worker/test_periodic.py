"""A worker's ``periodic=`` schedules: the ticker publishes each tick the clock reaches, once,
and the worker handles it as any message; two workers on one file share the ticks; a worker
started after a gap publishes one catch-up tick. The transport's clock is the test's (the
ticker reads it each ``SLICE``, made short here); a stop ends the ticker promptly."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime
from pathlib import Path

import pytest

from harel_sa import (
    AsyncSqliteTransport,
    AsyncWorker,
    Event,
    Lease,
    Periodic,
    SqliteTransport,
    Worker,
)
from harel_sa.worker import ticker
from tests.conftest import FakeClock
from tests.worker.conftest import HANG, wait_until


def stamped(at: datetime) -> Event:
    return Event(kind="tick", data={"at": at.timestamp()})


EVERY = Periodic("beat", every=10, group_id="ticks", event=stamped)


@pytest.fixture(autouse=True)
def quick_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ticker, "SLICE", 0.005)


def test_workers_publish_each_tick_once_and_handle_it(tmp_path: Path) -> None:
    clock = FakeClock(1_000_005.0)
    handled: list[float] = []
    lock = threading.Lock()

    def handle(lease: Lease[Event]) -> None:
        with lock:
            handled.append(lease.event.data.get("at", -1.0))

    with (
        SqliteTransport(tmp_path / "q.db", clock=clock) as a,
        SqliteTransport(tmp_path / "q.db", clock=clock) as b,
    ):
        workers = [
            Worker(q, handle, handle_signals=False, poll_interval=0.005, periodic=[EVERY])
            for q in (a, b)
        ]
        threads = [threading.Thread(target=w.run) for w in workers]
        for t in threads:
            t.start()
        try:
            # Each worker handled a message: its ticker started (at 1_000_005), so 1_000_010
            # is no tick from before it started.
            for q in (a, b):
                q.publish("warm-up", Event(kind="warm-up"))
            wait_until(lambda: len(handled) == 2, "both workers running")
            assert workers[0].options.periodic == (EVERY,)
            handled.clear()
            for n in range(1, 6):
                clock.advance(10)
                wait_until(lambda n=n: len(handled) >= n, f"tick {n} handled")  # type: ignore[misc]
            clock.advance(1000)  # a long stall: one tick, the last
            wait_until(lambda: len(handled) >= 6, "the tick after the stall")
        finally:
            for w in workers:
                w.stop()
            for t in threads:
                t.join(HANG)
        assert not any(t.is_alive() for t in threads)
        assert handled == [1_000_010.0 + 10 * k for k in range(5)] + [1_001_050.0]
        assert a.stats().messages == 0


def test_a_worker_started_after_a_gap_publishes_one_catch_up_tick(tmp_path: Path) -> None:
    clock = FakeClock(1_000_005.0)
    with SqliteTransport(tmp_path / "q.db", clock=clock) as q:
        first = ticker.Ticker(q, [EVERY], q.clock)
        clock.advance(10)
        assert first.step() == [("beat", 1_000_010.0)]
        clock.advance(95.5)  # no worker for 95.5 s: nine ticks missed
        worker = Worker(
            q, lambda lease: None, handle_signals=False, min_priority=4, periodic=[EVERY]
        )
        running = threading.Thread(target=worker.run)
        running.start()
        try:
            wait_until(lambda: q.stats().messages == 2, "the catch-up tick")
        finally:
            worker.stop()
            running.join(HANG)
        ats = [Event.model_validate_json(m.event).data["at"] for m in q.peek()]
        assert ats == [1_000_010.0, 1_000_110.0]


@pytest.mark.parametrize("private", [False, True], ids=["file", "memory"])
def test_an_async_worker_publishes_its_ticks(tmp_path: Path, private: bool) -> None:
    """On a file through the transport's sync twin; on a private ``:memory:`` queue (no twin)
    through the worker's loop."""
    clock = FakeClock(1_000_005.0)
    where = ":memory:" if private else tmp_path / "q.db"
    handled: list[float] = []

    async def handle(lease: Lease[Event]) -> None:
        handled.append(lease.event.data.get("at", -1.0))

    async def main() -> None:
        q = await AsyncSqliteTransport.create(where, clock=clock)
        worker = AsyncWorker(q, handle, handle_signals=False, poll_interval=0.005, periodic=[EVERY])
        running = asyncio.create_task(worker.run())
        try:
            await q.publish("warm-up", Event(kind="warm-up"))
            async with asyncio.timeout(HANG):
                while not handled:  # the worker runs: its ticker started
                    await asyncio.sleep(0.005)
            handled.clear()
            for n in range(1, 4):
                clock.advance(10)
                async with asyncio.timeout(HANG):
                    while len(handled) < n:
                        await asyncio.sleep(0.005)
        finally:
            worker.stop()
            await asyncio.wait_for(running, HANG)
            await q.close()

    asyncio.run(main())
    assert handled == [1_000_010.0, 1_000_020.0, 1_000_030.0]
