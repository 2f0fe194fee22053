"""An idle worker on SQLite waits on its own events, never on ``wait_for_messages``.

SQLite's ``wait_for_messages`` only sleeps (a file tells no other process of a new message), so a
worker that waited there would see a stop only once that sleep ended. Only PostgreSQL's twins
hear of messages (tests/postgres/test_listen.py); on SQLite the worker polls on its own events.
Each test counts the calls on a real transport, for both worker kinds, batching or not.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from harel_sa import AsyncSqliteTransport, AsyncWorker, Event, Lease, SqliteTransport, Worker
from tests.worker.conftest import HANG, wait_until

POLLS = 3  # empty claims to see before stopping: the worker is idle by then


class CountingTransport(SqliteTransport[Event]):
    """A real SQLite transport that counts its empty claims and its waits for messages."""

    empty_claims = 0
    waits = 0

    def claim(self, *args: Any, **kwargs: Any) -> Lease[Event] | None:
        lease = super().claim(*args, **kwargs)
        self.empty_claims += lease is None
        return lease

    def claim_many(self, *args: Any, **kwargs: Any) -> list[Lease[Event]]:
        leases = super().claim_many(*args, **kwargs)
        self.empty_claims += not leases
        return leases

    def wait_for_messages(self, timeout: float) -> bool:
        self.waits += 1
        return super().wait_for_messages(timeout)


class AsyncCountingTransport(AsyncSqliteTransport[Event]):
    """The same for the async twin."""

    empty_claims = 0
    waits = 0

    async def claim(self, *args: Any, **kwargs: Any) -> Lease[Event] | None:
        lease = await super().claim(*args, **kwargs)
        self.empty_claims += lease is None
        return lease

    async def claim_many(self, *args: Any, **kwargs: Any) -> list[Lease[Event]]:
        leases = await super().claim_many(*args, **kwargs)
        self.empty_claims += not leases
        return leases

    async def wait_for_messages(self, timeout: float) -> bool:
        self.waits += 1
        return await super().wait_for_messages(timeout)


def handle(lease: Lease[Event]) -> None:
    raise AssertionError("nothing was published")


async def handle_async(lease: Lease[Event]) -> None:
    raise AssertionError("nothing was published")


@pytest.mark.parametrize("batch", [1, 4], ids=["one-at-a-time", "batching"])
def test_an_idle_worker_polls_without_waiting_on_the_transport(tmp_path: Path, batch: int) -> None:
    with CountingTransport(tmp_path / "q.db") as q:
        worker = Worker(q, handle, handle_signals=False, poll_interval=0.01, batch=batch)
        running = threading.Thread(target=worker.run)
        running.start()
        try:
            wait_until(lambda: q.empty_claims >= POLLS, "the idle worker's polls")
        finally:
            worker.stop()
            running.join(HANG)
        assert not running.is_alive()
        assert q.waits == 0


@pytest.mark.parametrize("batch", [1, 4], ids=["one-at-a-time", "batching"])
def test_an_idle_async_worker_polls_without_waiting_on_the_transport(
    tmp_path: Path, batch: int
) -> None:
    async def scenario() -> None:
        q = await AsyncCountingTransport.create(tmp_path / "q.db")
        try:
            worker = AsyncWorker(
                q, handle_async, handle_signals=False, poll_interval=0.01, batch=batch
            )
            running = asyncio.create_task(worker.run())

            async def idle() -> None:
                while q.empty_claims < POLLS:
                    await asyncio.sleep(0.005)

            await asyncio.wait_for(idle(), HANG)
            worker.stop()
            await asyncio.wait_for(running, HANG)
            assert q.waits == 0
        finally:
            await q.close()

    asyncio.run(scenario())
