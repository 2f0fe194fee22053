"""Workload 7: the write-ahead log under a producer and a reader polling ``stats()`` back to back.

Two ``spawn``ed processes on one file for a fixed time: a producer publishing one small message
per call (synchronous=NORMAL, so writes come fast), and a reader calling ``stats()`` in a loop
(each call one read transaction). The producer records the largest ``-wal`` size it saw after
each publish. Variant ``harel_sa``: the transport as shipped (forced ``RESTART`` checkpoint past
``watch.WAL_LIMIT``); variant ``no forced checkpoint``: the same transport with that check turned
off in the producer (``journal_size_limit`` still set), i.e. what SQLite's passive automatic
checkpoints achieve alone.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from typing import Any

from common import Config, Row, X, event, fmt, fmt_ratio, ratios, summary, verdict

MiB = 1024 * 1024
CTX = mp.get_context("spawn")
WAL_VARIANTS = ("harel_sa", "no forced checkpoint", "no reader")


def _poll(db: str, ready: Any, stop: Any, polls: Any) -> None:
    from harel_sa import SqliteTransport

    with SqliteTransport(db) as q:
        ready.set()
        n = 0
        while not stop.is_set():
            q.stats()
            n += 1
        polls.value = n


def _produce(db: str, seconds: float, forced: bool, out: Any) -> None:
    from harel_sa import SqliteTransport
    from harel_sa.sqlite import watch

    if not forced:
        watch.WAL_CHECK_EVERY = 1 << 62  # never look at the log's size
    wal, largest, n = f"{db}-wal", 0, 0
    with SqliteTransport(db, synchronous="NORMAL") as q:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            q.publish(f"g{n % 100}", event(n))
            n += 1
            largest = max(largest, os.stat(wal).st_size)
        elapsed = time.perf_counter() - t0
        at_end = os.stat(wal).st_size
    out.put({"published": n, "rate": n / elapsed, "largest": largest, "wal_at_end": at_end})


def _one(cfg: Config, variant: str, seconds: float) -> dict[str, float]:
    from harel_sa import SqliteTransport

    db = str(cfg.fresh(f"w7-{variant.replace(' ', '-')}"))
    SqliteTransport(db).close()
    ready, stop, polls, out = CTX.Event(), CTX.Event(), CTX.Value("q", 0), CTX.Queue()
    poller = CTX.Process(target=_poll, args=(db, ready, stop, polls))
    if variant != "no reader":
        poller.start()
        assert ready.wait(120)
    forced = variant != "no forced checkpoint"
    producer = CTX.Process(target=_produce, args=(db, seconds, forced, out))
    producer.start()
    result = out.get(timeout=seconds + 120)
    producer.join(120)
    stop.set()
    if variant != "no reader":
        poller.join(120)
    return {**result, "polls": polls.value / seconds, "db": os.path.getsize(db)}


def w7_wal(cfg: Config) -> dict[str, Any]:
    from harel_sa.sqlite import watch

    seconds = 2.0 if cfg.quick else 8.0
    out: dict[str, Any] = {"seconds": seconds, "limit": watch.WAL_LIMIT}
    for v in WAL_VARIANTS:
        out[v] = {k: [] for k in ("largest", "rate", "polls", "db", "wal_at_end", "published")}
    for rep in range(cfg.reps):
        for v in WAL_VARIANTS if rep % 2 == 0 else tuple(reversed(WAL_VARIANTS)):
            for k, x in _one(cfg, v, seconds).items():
                out[v][k].append(x)
        cfg.log(f"  w7 rep {rep + 1}/{cfg.reps} done")
    return out


def targets(w: dict[str, Any]) -> list[Row]:
    """The target row: the log's largest size stays within twice the limit."""
    h, off = w["harel_sa"], w["no forced checkpoint"]
    figs = (
        f"largest {fmt(h['largest'], 1 / MiB)} MiB (limit {w['limit'] / MiB:g}); without the"
        f" forced checkpoint {fmt(off['largest'], 1 / MiB)} MiB"
    )
    return [
        (
            f"WAL bounded under a producer and a stats() poller (≤ 2{X} WAL_LIMIT)",
            figs,
            verdict(max(h["largest"]) <= 2 * w["limit"]),
        )
    ]


def section(w: dict[str, Any]) -> list[str]:
    h, off, alone = w["harel_sa"], w["no forced checkpoint"], w["no reader"]
    rows = [
        *targets(w),
        (
            "Publishes/s ÷ without the forced checkpoint",
            fmt_ratio(ratios(h["rate"], off["rate"])),
            "",
        ),
        ("Publishes/s ÷ with no reader", fmt_ratio(ratios(h["rate"], alone["rate"])), ""),
    ]
    return summary(
        "7. The write-ahead log under a producer and a polling reader",
        f"For {w['seconds']:g} s a process publishes (NORMAL) while another calls `stats()`"
        " back to back: the `-wal` file with harel_sa's forced checkpoint, without it, and"
        " with no reader.",
        rows,
    )
