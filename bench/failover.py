"""Failover (issue 59): the time from a standby's promotion to the first message handled.

    .venv/bin/python bench/run.py --only failover --merge

Per repetition: a primary and a synchronous streaming standby (``tests/failover.py``), one
``Worker`` process on libpq's multi-host URL (``target_session_attrs=read-write``) with the
default settings, a producer publishing every 10 ms. The primary crashes (``pg_ctl stop -m
immediate``), the standby is promoted (``pg_ctl promote`` returns when it is), and the figure is
the time from then to the first message the worker starts after it; beside it, when the
producer's first publish after the promotion returned. The goal is 5 s.
"""

from __future__ import annotations

import multiprocessing
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import Config, Row, fmt, med, summary, verdict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harel_sa import Event, HarelSAError, PostgresTransport, Worker  # noqa: E402
from harel_sa.events import Lease  # noqa: E402
from tests import failover  # noqa: E402

GOAL = 5.0


def _work(url: str, log: str) -> None:
    out = open(log, "a", buffering=1)  # noqa: SIM115 - open for the process's life

    def handle(lease: Lease[Event]) -> None:
        out.write(f"{time.time()!r}\n")

    with PostgresTransport(url) as q:
        Worker(q, handle).run()


def once(workdir: Path) -> tuple[float, float]:
    """(seconds to the first message handled, to the first publish returned), after promotion."""
    primary, standby = failover.pair(synchronous=True)
    worker = None
    try:
        primary.execute('CREATE DATABASE "queue"')
        url = failover.url(primary, standby, "queue")
        log = workdir / f"handled-{time.monotonic_ns()}.log"
        q = PostgresTransport(url)
        worker = multiprocessing.get_context("spawn").Process(target=_work, args=(url, str(log)))
        worker.start()
        stop, published = threading.Event(), []

        def produce() -> None:
            i = 0
            while not stop.is_set():
                try:
                    q.publish(f"g{i % 8}", Event(kind=str(i)))
                    published.append(time.time())
                    i += 1
                except HarelSAError:
                    pass
                time.sleep(0.01)

        producer = threading.Thread(target=produce)
        producer.start()
        while not log.exists() or len(log.read_text().split()) < 20:
            time.sleep(0.05)
        failover.fail_over(primary, standby)
        promoted = time.time()
        deadline = time.monotonic() + 60
        while not [t for t in map(float, log.read_text().split()) if t > promoted]:
            assert time.monotonic() < deadline, "no message handled within a minute"
            time.sleep(0.02)
        stop.set()
        producer.join()
        q.close()
        handled = min(t for t in map(float, log.read_text().split()) if t > promoted)
        return handled - promoted, min(t for t in published if t > promoted) - promoted
    finally:
        if worker is not None and worker.pid is not None:
            worker.terminate()
            worker.join(30)
        standby.stop()
        primary.stop()


def run(cfg: Config) -> dict[str, Any]:
    handled, published = [], []
    workdir = Path(tempfile.mkdtemp(dir=cfg.workdir))
    for _ in range(cfg.reps):
        h, p = once(workdir)
        handled.append(h)
        published.append(p)
        cfg.log(f"  failover: first handled {h:.2f} s, first publish {p:.2f} s")
    return {"handled": handled, "published": published}


def targets(w: dict[str, Any]) -> list[Row]:
    return [
        (
            f"promotion to the first message handled ≤ {GOAL} s",
            f"{fmt(w['handled'])} s",
            verdict(med(w["handled"]) <= GOAL),
        ),
        ("to the first publish returned", f"{fmt(w['published'])} s", ""),
    ]


def section(w: dict[str, Any]) -> list[str]:
    return summary(
        "Failover (issue 59)",
        "A primary crashes under load; its synchronous standby is promoted. One `Worker`, one "
        "producer, multi-host URL, defaults: the pool's next connect, then a poll.",
        targets(w),
    )
