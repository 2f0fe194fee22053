"""The steps a driver performs (``Worker._perform``, ``AsyncWorker._perform``), on a real SQLite
queue: a slot's thread or task watches for its handlers' settles, and the worker's own calls
(``Perform``) are never reported as a handler's, whichever way the driver performs them."""

from __future__ import annotations

import asyncio
from typing import Any

from harel_sa import AsyncSqliteTransport, Event, Lease, SqliteTransport, settlements
from harel_sa.worker import AsyncWorker, Worker, WorkerOptions
from harel_sa.worker.operations import Ack, Batch, Done, Nack, Sent
from harel_sa.worker.steps import Handle, Perform

OPTIONS = WorkerOptions(worker_id="w")
VIS = 30.0


class Seen(list[tuple[str, str]]):
    """A watcher: the ``(group_id, how)`` of each settle reported to it."""

    def __call__(self, lease: Lease[Any], how: str, delay: float) -> None:
        self.append((lease.group_id, how))


def _claimed(q: SqliteTransport[Event], groups: str) -> list[Lease[Event]]:
    for group in groups:
        q.publish(group, Event(kind=group))
    return q.claim_many("w", VIS, len(groups))


def test_the_workers_own_calls_are_unwatched_and_a_handlers_settle_is_reported(db: str) -> None:
    seen = Seen()
    with SqliteTransport(db) as q:
        first, second, third, fourth = _claimed(q, "abcd")

        def handler(lease: Lease[Event]) -> None:
            q.ack(lease)  # the handler settles its lease itself

        driver = Worker(q, handler)
        token = settlements.watch(seen)
        try:
            ack, batch = (
                Perform(Ack(first, OPTIONS, fused=False)),
                Perform(Batch((second,), OPTIONS, 0)),
            )
            nack = Perform(Nack(third, 0.0))
            for step in (ack, batch, nack):
                driver._perform(step)
                assert settlements._watcher.get() is seen  # put back as the call found it
            driver._perform(Handle(fourth))
        finally:
            settlements.unwatch(token)
        results = (ack.result, batch.result, nack.result)
        assert results == (Done(True), Sent((True,), ()), Done(True))
        assert seen == [("d", "acked")]  # the handler's, and none of the worker's own


def test_the_async_steps_do_the_same(db: str) -> None:
    with SqliteTransport(db) as q:
        first, second, third, fourth = _claimed(q, "abcd")
    seen = Seen()

    async def main() -> list[Any]:
        q = await AsyncSqliteTransport.create(db)
        try:

            async def handler(lease: Lease[Event]) -> None:
                await q.nack(lease, 0.0)

            driver = AsyncWorker(q, handler)
            settlements.watch(seen)
            ack, batch = (
                Perform(Ack(first, OPTIONS, fused=False)),
                Perform(Batch((second,), OPTIONS, 0)),
            )
            park = Perform(Nack(third, 5.0))
            for step in (ack, batch, park):
                await driver._perform(step)
                assert settlements._watcher.get() is seen
            await driver._perform(Handle(fourth))
            return [ack.result, batch.result, park.result]
        finally:
            await q.close()

    # asyncio.run's own context: the watcher set in it ends with it
    assert asyncio.run(main()) == [Done(True), Sent((True,), ()), Done(True)]
    assert seen == [("d", "nacked")]
