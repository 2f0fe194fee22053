#!/usr/bin/env python3
"""harel_sa under the job-queue benchmark's protocol, through its public API only.

A producer (``PostgresTransport.publish_many`` each tick) in this process; consumers in
``HAREL_SA_PROCESSES`` processes (default 1), each a ``Worker`` (what ``harel-sa worker`` runs)
with ``WORKER_COUNT / HAREL_SA_PROCESSES`` slots and ``batch=HAREL_SA_BATCH`` (default 8: the
configuration docs/postgresql.md advises at high load). ``HAREL_SA_GROUPS``: 0
publishes each job in a group of its own (a job queue), N > 0 spreads them over N ordered
groups. Run by ``bench/pressure.py``, or by the harness as any adapter.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from protocol import Counters, Latencies, Pacer, Settings, descriptor, env_int, sample_forever

import harel_sa
from harel_sa import Event, PostgresTransport, Worker

SYSTEM = "harel_sa"
REPORT_EVERY = 0.25
READY = "ready"  # a consumer's first word: the producer starts once each has said it


def consume(url: str, slots: int, batch: int, work_ms: int, out: Any) -> None:
    """One worker process: a Worker until SIGTERM, its completions and pickup latencies sent
    to the adapter every REPORT_EVERY seconds."""
    done: list[float] = []
    lock = threading.Lock()
    work = work_ms / 1000

    def handle(lease: Any) -> None:
        started = time.time()
        with lock:
            done.append((started - lease.event.data["t"]) * 1000)
        if work:
            time.sleep(work)

    stopped = threading.Event()

    def report() -> None:
        while not stopped.wait(REPORT_EVERY):
            with lock:
                batch_, done[:] = done[:], []
            if batch_:
                out.put(batch_)

    reporter = threading.Thread(target=report, daemon=True)
    reporter.start()
    with PostgresTransport(url, create_schema=False, pool_size=slots + 2) as q:
        worker = Worker(q, handle, concurrency=slots, batch=batch, visibility=30.0)
        out.put(READY)
        worker.run()
    stopped.set()
    reporter.join()


def main() -> None:
    settings = Settings()
    groups = env_int("HAREL_SA_GROUPS", 0)
    processes = max(1, env_int("HAREL_SA_PROCESSES", 1))
    batch = max(1, env_int("HAREL_SA_BATCH", 8))
    url = settings.url
    descriptor(
        SYSTEM,
        ["public.harel_transport_messages", "public.harel_transport_groups"],
        getattr(harel_sa, "__version__", "main"),
        url,
    )
    producer_q = PostgresTransport(url, create_schema=True)
    counters, latencies = Counters(), Latencies()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    ctx = mp.get_context("spawn")
    out: Any = ctx.Queue()
    per = [settings.workers // processes + (i < settings.workers % processes)
           for i in range(processes)]  # fmt: skip
    children = [
        ctx.Process(target=consume, args=(url, n, batch, settings.work_ms, out), daemon=True)
        for n in per
        if n > 0
    ]
    for child in children:
        child.start()
    for _ in children:
        assert out.get(timeout=60) == READY

    def collect() -> None:
        while not stop.is_set() or any(c.is_alive() for c in children):
            try:
                values = out.get(timeout=0.2)
            except queue.Empty:
                continue
            counters.completed += len(values)
            latencies.add(values)

    def depth() -> None:
        while not stop.wait(0.5):
            try:
                counters.depth = producer_q.stats().ready
            except harel_sa.HarelSAError as exc:
                print(f"[harel_sa] depth: {exc}", file=sys.stderr)

    pacer = Pacer(settings, lambda: counters.depth)
    pad = "x" * max(0, settings.payload - 64)
    threads = [
        threading.Thread(target=collect, daemon=True),
        threading.Thread(target=depth, daemon=True),
        threading.Thread(
            target=sample_forever,
            args=(SYSTEM, settings, counters, latencies, pacer, stop),
            daemon=True,
        ),
    ]
    for t in threads:
        t.start()
    seq = 0
    while not stop.is_set():
        n = pacer.next_batch()
        if n == 0:
            continue
        now = time.time()
        items = [
            (f"g{(seq + i) % groups}" if groups else f"j{seq + i}",
             Event(kind="job", data={"seq": seq + i, "t": now, "pad": pad}))
            for i in range(n)
        ]  # fmt: skip
        try:
            producer_q.publish_many(items)
        except harel_sa.HarelSAError as exc:
            print(f"[harel_sa] publish: {exc}", file=sys.stderr)
            time.sleep(0.05)
            continue
        seq += n
        counters.enqueued += n
    for child in children:
        if child.pid is not None:
            os.kill(child.pid, signal.SIGTERM)
    for child in children:
        child.join(timeout=15)
    producer_q.close()


if __name__ == "__main__":
    main()
