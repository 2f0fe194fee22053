"""A worker process for the hostile-world tests: ``proc_hostile.py KIND DB RAISE``.

Runs a ``Worker`` (KIND ``sync``) or an ``AsyncWorker`` (``async``) on DB until the queue is
empty, printing ``handled <kind>`` for each message. RAISE is ``none``, or the exception the
handler raises on a message of kind ``boom``: ``SystemExit`` (code 7) or ``KeyboardInterrupt``.
When ``run`` returns, the process prints the run's stats as JSON and exits 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys

from harel_sa import AsyncSqliteTransport, Event, Lease, SqliteTransport
from harel_sa.worker import AsyncWorker, Worker, WorkerStats

RAISES: dict[str, BaseException] = {
    "SystemExit": SystemExit(7),
    "KeyboardInterrupt": KeyboardInterrupt(),
}


def handle(lease: Lease[Event], raise_: str) -> None:
    if lease.event.kind == "boom" and raise_ in RAISES:
        raise RAISES[raise_]
    print(f"handled {lease.event.kind}", flush=True)


def run_sync(db: str, raise_: str) -> WorkerStats:
    with SqliteTransport(db) as transport:
        worker = Worker(transport, lambda lease: handle(lease, raise_), grace=0.0)
        return worker.run(until_empty=True)


async def run_async(db: str, raise_: str) -> WorkerStats:
    async def handler(lease: Lease[Event]) -> None:
        handle(lease, raise_)

    transport = await AsyncSqliteTransport.create(db)
    try:
        return await AsyncWorker(transport, handler, grace=0.0).run(until_empty=True)
    finally:
        await transport.close()


def main() -> None:
    kind, db, raise_ = sys.argv[1], sys.argv[2], sys.argv[3]
    stats = run_sync(db, raise_) if kind == "sync" else asyncio.run(run_async(db, raise_))
    print(json.dumps(dataclasses.asdict(stats)), flush=True)


if __name__ == "__main__":
    main()
