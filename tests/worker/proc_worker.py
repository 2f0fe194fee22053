"""A worker process for the signal tests: ``proc_worker.py KIND DB HOLD GRACE``.

Runs a ``Worker`` (KIND ``sync``) or an ``AsyncWorker`` (``async``) on DB with a 30 s lease,
signals handled as in production. The handler prints ``handling <seq>`` and then holds the
message ``HOLD`` seconds (``forever``: until cancelled or abandoned). When ``run`` returns,
the process prints the run's stats as JSON and exits 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import threading

from harel_sa import AsyncSqliteTransport, Event, Lease, SqliteTransport
from harel_sa.worker import AsyncWorker, Worker, WorkerStats


def announce(lease: Lease[Event]) -> None:
    print(f"handling {lease.seq}", flush=True)


def hold_seconds(hold: str) -> float | None:
    return None if hold == "forever" else float(hold)


def run_sync(db: str, hold: float | None, grace: float) -> WorkerStats:
    def handler(lease: Lease[Event]) -> None:
        announce(lease)
        threading.Event().wait(hold)

    with SqliteTransport(db) as transport:
        return Worker(transport, handler, visibility=30.0, grace=grace).run()


async def run_async(db: str, hold: float | None, grace: float) -> WorkerStats:
    async def handler(lease: Lease[Event]) -> None:
        announce(lease)
        if hold is None:
            await asyncio.Event().wait()
        else:
            await asyncio.sleep(hold)

    transport = await AsyncSqliteTransport.create(db)
    try:
        return await AsyncWorker(transport, handler, visibility=30.0, grace=grace).run()
    finally:
        await transport.close()


def main() -> None:
    kind, db, hold, grace = sys.argv[1], sys.argv[2], hold_seconds(sys.argv[3]), float(sys.argv[4])
    sync = kind == "sync"
    stats = run_sync(db, hold, grace) if sync else asyncio.run(run_async(db, hold, grace))
    print(json.dumps(dataclasses.asdict(stats)), flush=True)


if __name__ == "__main__":
    main()
