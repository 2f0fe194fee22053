"""A worker process for tests/processes/test_failover.py: a harel_sa ``Worker`` (threads) or
``AsyncWorker`` on a multi-host PostgreSQL URL; its handler appends ``kind start`` to the
process's log as each handling starts (the kind is the message's id)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from harel_sa import AsyncWorker, Event, Lease, Worker

OPTIONS: dict[str, Any] = {"concurrency": 4, "visibility": 30.0, "poll_interval": 0.05}


def idle_work(url: str, log: str, asynchronous: bool, batch: int) -> None:
    """:func:`work` polling only every 30 s: what it handles sooner, a wake-up brought."""
    work(url, log, asynchronous, batch, poll_interval=30.0)


def work(url: str, log: str, asynchronous: bool, batch: int, poll_interval: float = 0.05) -> None:
    """Run until SIGTERM."""
    options = {**OPTIONS, "poll_interval": poll_interval}
    logging.basicConfig(filename=log + ".stderr", level=logging.WARNING)
    out = open(log, "a", buffering=1)  # noqa: SIM115 - open for the process's life

    def handle(lease: Lease[Event]) -> None:
        out.write(f"{lease.event.kind} {time.time()!r}\n")
        time.sleep(0.005)

    if asynchronous:
        from harel_sa import AsyncPostgresTransport

        async def ahandle(lease: Lease[Event]) -> None:
            out.write(f"{lease.event.kind} {time.time()!r}\n")
            await asyncio.sleep(0.005)

        async def main() -> None:
            transport = await AsyncPostgresTransport.create(url)
            try:
                await AsyncWorker(transport, ahandle, batch=batch, **options).run()
            finally:
                await transport.close()

        asyncio.run(main())
    else:
        from harel_sa import PostgresTransport

        transport = PostgresTransport(url)
        try:
            Worker(transport, handle, batch=batch, **options).run()
        finally:
            transport.close()
    out.close()
