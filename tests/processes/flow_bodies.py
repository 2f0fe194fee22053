"""A worker process for tests/processes/test_flow.py: a harel_sa ``Worker`` (threads) or
``AsyncWorker`` of concurrency 8, batched or not, on a SQLite file or a PostgreSQL URL; its
handler writes each message's seq to the process's log, one line each."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from harel_sa import AsyncWorker, Event, Lease, Worker

CONCURRENCY = 8
HANDLING = 0.02  # seconds: the backlog lasts long enough to pause it half-way


def _open(target: str, asynchronous: bool) -> Any:
    postgres = target.startswith("postgresql://")
    if asynchronous:
        from harel_sa import AsyncPostgresTransport, AsyncSqliteTransport

        kind: Any = AsyncPostgresTransport if postgres else AsyncSqliteTransport
        return kind.create(target, busy_timeout=60)
    from harel_sa import PostgresTransport, SqliteTransport

    return (PostgresTransport if postgres else SqliteTransport)(target, busy_timeout=60)


def work(target: str, log: str, asynchronous: bool, batch: int) -> None:
    """Run until SIGTERM; append ``seq start`` lines to ``log`` as each handling starts."""
    out = open(log, "a", buffering=1)  # noqa: SIM115 - open for the process's life

    def handle(lease: Lease[Event]) -> None:
        out.write(f"{lease.seq} {time.time()!r}\n")
        time.sleep(HANDLING)

    options: dict[str, Any] = {
        "concurrency": CONCURRENCY,
        "visibility": 60.0,
        "poll_interval": 0.05,
        "batch": batch,
    }
    if asynchronous:

        async def ahandle(lease: Lease[Event]) -> None:
            out.write(f"{lease.seq} {time.time()!r}\n")
            await asyncio.sleep(HANDLING)

        async def main() -> None:
            transport = await _open(target, True)
            try:
                await AsyncWorker(transport, ahandle, **options).run()
            finally:
                await transport.close()

        asyncio.run(main())
    else:
        transport = _open(target, False)
        try:
            Worker(transport, handle, **options).run()
        finally:
            transport.close()
    out.close()
