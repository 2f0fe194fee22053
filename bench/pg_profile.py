"""Workload "pgprofile" (issue 62): where a message's time goes on PostgreSQL.

A ``Worker`` (8 slots, a no-op handler) drains 10,000 messages, a group each, one at a time
and in batches of 8; per message: the CPU of the worker's own process (Python, psycopg,
libpq), of the whole machine while it drains (the server's backends and WAL writer besides),
and the wall time. The difference is the server's share. Run in a process of its own, on one
throw-away cluster (``synchronous_commit = on``), in turns per repetition.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MESSAGES, SLOTS = 10_000, 8
BATCHES = (1, 8)


def _busy() -> int:
    """The machine's busy CPU time so far, in clock ticks (``/proc/stat``)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return sum(values) - values[3] - values[4]  # all but idle and iowait


def _drain(url: str, batch: int) -> dict[str, float]:
    from harel_sa import Event, PostgresTransport, Worker

    with PostgresTransport(url, pool_size=SLOTS + 2) as q:
        for k in range(0, MESSAGES, 1000):
            q.publish_many([(f"j{k + i}", Event(kind="job")) for i in range(1000)])
        r0, b0, t0 = resource.getrusage(resource.RUSAGE_SELF), _busy(), time.perf_counter()
        stats = Worker(q, lambda lease: None, concurrency=SLOTS, batch=batch,
                       handle_signals=False).run(until_empty=True)  # fmt: skip
        wall, b1 = time.perf_counter() - t0, _busy()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
    assert stats.succeeded == MESSAGES, stats
    client = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    machine = (b1 - b0) / 100  # USER_HZ
    us = 1e6 / MESSAGES
    return {"client": client * us, "server": max(0.0, machine - client) * us, "wall": wall * us}


def run(cfg: Any) -> dict[str, Any]:
    from pg_server import Server

    server = Server(cfg.workdir)
    out: dict[str, Any] = {"messages": MESSAGES, "slots": SLOTS, "batches": {}}
    try:
        for rep in range(cfg.reps):
            for batch in BATCHES if rep % 2 == 0 else BATCHES[::-1]:
                url = server.database()
                done = subprocess.run(
                    [sys.executable, __file__, url, str(batch)],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                figures = json.loads(done.stdout)
                for key, value in figures.items():
                    out["batches"].setdefault(str(batch), {}).setdefault(key, []).append(value)
                cfg.log(f"  pgprofile batch {batch}: {figures}")
                server.drop(url)
    finally:
        server.stop()
    return out


def section(w: dict[str, Any]) -> list[str]:
    from common import med

    per = "; ".join(
        f"{'one at a time' if batch == '1' else f'batches of {batch}'}"
        f" {med(f['client']):.0f}/{med(f['server']):.0f}/{med(f['wall']):.0f}"
        for batch, f in w["batches"].items()
    )
    return [
        "## Where a message's time goes on PostgreSQL (issue 62)",
        "",
        f"One `Worker` ({w['slots']} slots, a no-op handler), {w['messages']:,} messages; µs a"
        f" message, client CPU / server CPU / wall: {per}.",
        "",
    ]


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    print(json.dumps(_drain(sys.argv[1], int(sys.argv[2]))))
