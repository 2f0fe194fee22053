"""The batcher's bell as each driver performs ``WaitBell`` (``Worker._perform``,
``AsyncWorker._perform``), on a real SQLite queue: a ring wakes the waiter at once, a ring
before the wait is not lost, a timeout ends the wait quietly, and each wait clears the ring."""

from __future__ import annotations

import asyncio
import threading

from harel_sa import AsyncSqliteTransport, Event, Lease, SqliteTransport
from harel_sa.worker import AsyncWorker, Worker
from harel_sa.worker.steps import WaitBell

LONG = 30.0  # a wait the test never lets run out
GUARD = 5.0  # a mutant that misses a ring fails here, long before LONG


def _nothing(lease: Lease[Event]) -> None:
    pass


async def _nothing_async(lease: Lease[Event]) -> None:
    pass


def test_the_threads_bell(db: str) -> None:
    with SqliteTransport(db) as q:
        worker = Worker(q, _nothing)
        bell = worker._bell
        bell.set()  # rung before the wait
        worker._perform(WaitBell(LONG, idle=True))
        assert not bell.is_set()  # the wait took the ring

        waiting = threading.Thread(target=worker._perform, args=(WaitBell(LONG),))
        waiting.start()
        waiting.join(0.05)
        assert waiting.is_alive()  # no ring yet: it waits
        bell.set()
        waiting.join(GUARD)
        assert not waiting.is_alive() and not bell.is_set()

        quiet = WaitBell(0.01)
        worker._perform(quiet)  # a timeout: no error, no ring, nothing heard
        assert not quiet.heard and not bell.is_set()


def test_the_tasks_bell(db: str) -> None:
    async def main() -> None:
        q = await AsyncSqliteTransport.create(db)
        try:
            worker = AsyncWorker(q, _nothing_async)
            bell = worker._bell = asyncio.Event()
            bell.set()
            await asyncio.wait_for(worker._perform(WaitBell(LONG, idle=True)), GUARD)
            assert not bell.is_set()

            waiting = asyncio.ensure_future(worker._perform(WaitBell(LONG)))
            await asyncio.sleep(0.01)
            assert not waiting.done()
            bell.set()
            await asyncio.wait_for(waiting, GUARD)
            assert not bell.is_set()

            quiet = WaitBell(0.01)
            await asyncio.wait_for(worker._perform(quiet), GUARD)
            assert not quiet.heard and not bell.is_set()
        finally:
            await q.close()

    asyncio.run(main())
