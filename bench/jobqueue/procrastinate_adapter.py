#!/usr/bin/env python3
"""procrastinate under the job-queue benchmark's protocol: the worker settings of the
harness's own procrastinate adapter (polling 50 ms, LISTEN/NOTIFY, jobs kept), with its
documented bulk path (``batch_defer_async``) for the producer."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import procrastinate
from protocol import Counters, Latencies, Pacer, Settings, descriptor, sample_forever

SYSTEM = "procrastinate"
QUEUE = "bench"


async def main() -> None:
    settings = Settings()
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=settings.url))
    counters, latencies = Counters(), Latencies()
    work = settings.work_ms / 1000

    @app.task(queue=QUEUE, name="job")
    async def job(seq: int, t: float, pad: str = "") -> None:
        latencies.add([(time.time() - t) * 1000])
        if work:
            await asyncio.sleep(work)
        counters.completed += 1

    async with app.open_async():
        try:
            await app.schema_manager.apply_schema_async()
        except Exception as exc:  # already applied: a second run on the database
            print(f"[procrastinate] schema: {exc}", file=sys.stderr)
        descriptor(SYSTEM, ["public.procrastinate_jobs", "public.procrastinate_events"],
                   procrastinate.__version__, settings.url)  # fmt: skip
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        worker = asyncio.create_task(
            app.run_worker_async(
                queues=[QUEUE], concurrency=settings.workers, wait=True,
                fetch_job_polling_interval=0.05, abort_job_polling_interval=0.05,
                listen_notify=True, delete_jobs="never", install_signal_handlers=False,
                update_heartbeat_interval=5, stalled_worker_timeout=15,
            )
        )  # fmt: skip
        connector: Any = app.connector

        async def depth() -> None:
            while not stop.is_set():
                try:
                    row = await connector.execute_query_one_async(
                        "SELECT count(*) AS n FROM procrastinate_jobs "
                        "WHERE queue_name = %(q)s AND status = 'todo'",
                        q=QUEUE,
                    )
                    counters.depth = int(row["n"])
                except Exception as exc:
                    print(f"[procrastinate] depth: {exc}", file=sys.stderr)
                await asyncio.sleep(0.5)

        pacer = Pacer(settings, lambda: counters.depth)
        import threading

        stopped = threading.Event()
        sampler = threading.Thread(
            target=sample_forever,
            args=(SYSTEM, settings, counters, latencies, pacer, stopped),
            daemon=True,
        )
        sampler.start()
        depth_task = asyncio.create_task(depth())
        pad = "x" * max(0, settings.payload - 64)
        deferrer = job.configure(queue=QUEUE)
        seq = 0
        while not stop.is_set():
            n = await asyncio.to_thread(pacer.next_batch)
            if n == 0:
                continue
            now = time.time()
            try:
                await deferrer.batch_defer_async(
                    *({"seq": seq + i, "t": now, "pad": pad} for i in range(n))
                )
            except Exception as exc:
                print(f"[procrastinate] defer: {exc}", file=sys.stderr)
                await asyncio.sleep(0.05)
                continue
            seq += n
            counters.enqueued += n
        stopped.set()
        depth_task.cancel()
        worker.cancel()
        await asyncio.gather(worker, depth_task, return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(main())
