"""Workload "cpu" (issue 16): where the batching ``AsyncWorker`` loses to the batching ``Worker``.

A batching ``AsyncWorker`` makes one hop per batch into aiosqlite's thread and one back; the
batching ``Worker``'s slot thread sends its batch itself, no hop. Each hop wakes a thread that
sleeps. Two measurements say how much of the gap that is:

- **drains**: workload "batch"'s ``Worker batched`` and ``AsyncWorker batched`` drains (same
  messages, groups and batch size), each in a child process of its own, free to use every CPU
  it may ("free") or held to one (``os.sched_setaffinity``, "one CPU"), back to back, the
  order turned every repetition;
- **hops**: ``harel_sa.sqlite.aio.in_thread``, the transport's own hop, carrying a function that
  holds the thread (and Python's lock, as a batch's decoding does) for each of ``HOP_WORK``
  seconds: the mean round trip beyond that work, free and on one CPU.

Linux only (``os.sched_setaffinity``: :func:`supported`).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import aiosqlite
import batches
from common import Config, Row, X, event, fmt_ratio, med, ratios, summary, verdict

from harel_sa.sqlite.aio import in_thread

PAIR = ("Worker batched", "AsyncWorker batched")
FREE, ONE = "free", "one CPU"
PLACES = (FREE, ONE)
#: What a hop's function holds the thread for, in seconds: nothing, and a millisecond (a
#: batch's work, as an order of magnitude).
HOP_WORK = (0.0, 0.001)
#: Round trips per measurement of a hop (its figure is their mean).
HOPS = 600


def _child(pipe: Connection, pin: bool, work: Callable[..., Any], args: tuple[Any, ...]) -> None:
    if pin:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    pipe.send(work(*args))
    pipe.close()


def in_child(pin: bool, work: Callable[..., Any], *args: Any) -> Any:
    """``work(*args)`` in a forked child process, held to one CPU if ``pin``."""
    reader, writer = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(
        target=_child, args=(writer, pin, work, args)
    )
    child.start()
    writer.close()
    try:
        return reader.recv()
    finally:
        child.join()


async def _hops(work: float) -> float:
    def hold(_: object) -> None:
        end = time.perf_counter() + work
        while time.perf_counter() < end:
            pass

    conn = await aiosqlite.connect(":memory:")
    try:
        await in_thread(conn, hold)  # the thread is up
        t0 = time.perf_counter()
        for _ in range(HOPS):
            await in_thread(conn, hold)
        return (time.perf_counter() - t0) / HOPS - work
    finally:
        await conn.close()


def hop(work: float) -> float:
    """The mean round trip of one hop beyond the ``work`` seconds it carries (seconds)."""
    return asyncio.run(_hops(work))


def supported() -> bool:
    return hasattr(os, "sched_setaffinity")


def run(cfg: Config) -> dict[str, Any]:
    n, g = cfg.size(2000, 20000), cfg.size(100, 1000)
    items = [(f"g{i % g}", event(i)) for i in range(n)]
    out: dict[str, Any] = {
        "n": n,
        "groups": g,
        "batch": batches.BATCH,
        "hops": {place: {str(w): [] for w in HOP_WORK} for place in PLACES},
        "drains": {place: {s: {v: [] for v in PAIR} for s in batches.SYNCS} for place in PLACES},
    }
    for rep in range(cfg.reps):
        places = PLACES if rep % 2 == 0 else PLACES[::-1]
        for work in HOP_WORK:
            for place in places:
                out["hops"][place][str(work)].append(in_child(place == ONE, hop, work))
        pair = PAIR if rep % 2 == 0 else PAIR[::-1]
        for sync in batches.SYNCS:
            for place, variant in [(place, variant) for place in places for variant in pair]:
                path = str(cfg.fresh(f"cpu-{place.replace(' ', '-')}-{variant.replace(' ', '-')}"))
                rate = in_child(place == ONE, batches.drain, variant, path, sync, items)
                out["drains"][place][sync][variant].append(rate)
        cfg.log(f"  cpu rep {rep + 1}/{cfg.reps} done")
    return out


def _ratio(drains: dict[str, list[float]]) -> list[float]:
    return ratios(drains["AsyncWorker batched"], drains["Worker batched"])


def targets(w: dict[str, Any]) -> list[Row]:
    """The issue's AsyncWorker bar with each process held to one CPU (a bar beside the
    issue's, which workload "batch" judges), and the hop's round trip."""
    rows: list[Row] = []
    for sync in batches.SYNCS:
        free, one = w["drains"][FREE][sync], w["drains"][ONE][sync]
        held = _ratio(one)
        rows.append(
            (
                f"`{PAIR[1]}` ÷ `{PAIR[0]}` ({sync}), each held to one CPU, ≥ 0.8{X}",
                f"{fmt_ratio(held)}; free {fmt_ratio(_ratio(free))}",
                verdict(med(held) >= 0.8, beyond=True),
            )
        )
    hops = w["hops"]
    cells = [
        f"{work * 1e3:g} ms: {med(hops[FREE][str(work)]) * 1e6:.1f} µs free,"
        f" {med(hops[ONE][str(work)]) * 1e6:.1f} one CPU"
        for work in HOP_WORK
    ]
    label = "A hop into aiosqlite's thread and back, beyond its work (medians)"
    rows.append((label, "; ".join(cells), "reported"))
    return rows


def section(w: dict[str, Any]) -> list[str]:
    return summary(
        "The batching AsyncWorker on one CPU (issue 16)",
        "Batching workers free or held to one CPU; the hop into aiosqlite's thread alone, with"
        f" {_ms(HOP_WORK)} of work.",
        targets(w),
    )


def _ms(works: tuple[float, ...]) -> str:
    """``(0.0, 0.001)`` as ``0 or 1 ms``."""
    return " or ".join(f"{1000 * w:g}" for w in works) + " ms"
