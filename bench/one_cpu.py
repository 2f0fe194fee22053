"""Part of workload "batch" (issue 16): where the batching ``AsyncWorker`` loses to the ``Worker``.

A batching ``AsyncWorker`` makes one hop per batch into aiosqlite's thread and one back (the
``Worker``'s slot thread runs its batch itself: no hop). Each hop wakes a thread that sleeps;
on a machine with more than one CPU the sleeper may sit on another CPU, idle, and waking an
idle CPU (on a virtual machine, an interrupt through the hypervisor) costs far more than
switching threads on one. Two measurements say how much of the gap that is:

- **hops**: ``harel_sa.sqlite.aio.in_thread``, the transport's own hop, carrying a function that
  holds the thread (and Python's lock, as a batch's decoding does) for ``HOP_WORK`` seconds
  each; the mean round trip beyond that work, in µs, with the process free to use every CPU
  it may ("spread") and held to one ("one CPU");
- **one CPU**: the ``Worker batched`` and ``AsyncWorker batched`` drains of the workload, each
  in a child process held to one CPU (``os.sched_setaffinity``), back to back with the rest.

Linux only (``os.sched_setaffinity``); elsewhere nothing is measured and nothing reported.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiosqlite
from common import BEYOND, X, fmt, fmt_ratio, med, ratios

from harel_sa.sqlite.aio import in_thread

#: The drains measured on one CPU (workload "batch"'s variants of the same names).
PAIR = ("Worker batched", "AsyncWorker batched")
#: What the hop's function holds the thread for: nothing, and about a batch of 32 at NORMAL.
HOP_WORK = (0.0, 0.001)
#: Round trips per measurement of one hop (a repetition's figure is their mean).
HOPS = 600
SPREAD, ONE = "spread", "one CPU"

Drain = Callable[[str, str, str, list[tuple[str, Any]]], float]


def supported() -> bool:
    return hasattr(os, "sched_setaffinity")


def _one_cpu() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def _child(pipe: Connection, pin: bool, work: Callable[..., Any], args: tuple[Any, ...]) -> None:
    if pin:
        _one_cpu()
    pipe.send(work(*args))
    pipe.close()


def in_child(pin: bool, work: Callable[..., Any], *args: Any) -> Any:
    """``work(*args)`` in a forked child process (held to one CPU if ``pin``)."""
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


def empty(syncs: tuple[str, ...]) -> dict[str, Any]:
    return {
        "hops": {place: {str(w): [] for w in HOP_WORK} for place in (SPREAD, ONE)},
        "drains": {sync: {v: [] for v in PAIR} for sync in syncs},
    }


def measure(
    out: dict[str, Any],
    rep: int,
    syncs: tuple[str, ...],
    fresh: Callable[[str], Path],
    drain: Drain,
    items: list[tuple[str, Any]],
) -> None:
    """One repetition of both measurements into ``out`` (made by :func:`empty`)."""
    places = (SPREAD, ONE) if rep % 2 == 0 else (ONE, SPREAD)
    for work in HOP_WORK:
        for place in places:
            out["hops"][place][str(work)].append(in_child(place == ONE, hop, work))
    for sync in syncs:
        for variant in PAIR if rep % 2 == 0 else PAIR[::-1]:
            path = str(fresh(f"batch-one-cpu-{variant.replace(' ', '-')}-{sync}"))
            out["drains"][sync][variant].append(in_child(True, drain, variant, path, sync, items))


def targets(w: dict[str, Any], spread: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Reported beside the issue's bar: the pair on one CPU, and the hop's round trip."""
    rows = []
    for sync, pair in w["drains"].items():
        a, s = pair["AsyncWorker batched"], pair["Worker batched"]
        rows.append(
            (
                f"Batched AsyncWorker drain ({sync}) ≥ 0.8{X} the batched Worker, each process"
                " held to one CPU (why the bar above is missed)",
                f"{fmt(a)} vs {fmt(s)} msgs/s: {fmt_ratio(ratios(a, s))}; the AsyncWorker on one"
                f" CPU ÷ the Worker free: {fmt_ratio(ratios(a, spread[sync]['Worker batched']))}",
                f"{'**met**' if med(ratios(a, s)) >= 0.8 else '**NOT met**'} ({BEYOND})",
            )
        )
    hops = w["hops"]
    cells = [
        f"{work * 1e3:g} ms of work: {fmt(hops[SPREAD][str(work)], 1e6)} µs free,"
        f" {fmt(hops[ONE][str(work)], 1e6)} µs on one CPU"
        for work in HOP_WORK
    ]
    rows.append(
        (
            "A hop into aiosqlite's thread and back, beyond the work it carries (mean)",
            "; ".join(cells),
            "reported",
        )
    )
    return rows


def section(w: dict[str, Any], syncs: tuple[str, ...]) -> list[str]:
    head = ["variant", *(f"{sync} msgs/s, one CPU" for sync in syncs)]
    return [
        "",
        "The batching `Worker` and `AsyncWorker` again, each drain in a child process held to"
        " one CPU (`os.sched_setaffinity`; `bench/one_cpu.py`), back to back with the drains"
        " above: the `AsyncWorker`'s one hop per batch into aiosqlite's thread, and the hop"
        " back, then switch threads on one CPU instead of waking an idle one.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
        *(
            "| " + " | ".join([v, *(fmt(w["drains"][sync][v]) for sync in syncs)]) + " |"
            for v in PAIR
        ),
    ]


def says(w: dict[str, Any], spread: dict[str, Any]) -> str:
    """What the measurements say of the batching AsyncWorker's gap, from this run's figures."""
    hops, work = w["hops"], str(HOP_WORK[-1])
    free, one = med(hops[SPREAD][work]) * 1e6, med(hops[ONE][work]) * 1e6
    held = "; ".join(
        f"{sync} {_ratio(pair):.2f}{X} (free: {_ratio(spread[sync]):.2f}{X})"
        for sync, pair in w["drains"].items()
    )
    return (
        "- **The batching AsyncWorker.** It makes one hop into aiosqlite's thread per batch and"
        " one back; the batching Worker's slot thread sends its batch itself. A hop that holds"
        f" the thread for {float(work) * 1e3:g} ms comes back {free:.0f} µs later than that"
        f" with the process free to use every CPU, {one:.0f} µs held to one CPU, where waking"
        " the other thread is a switch on the same CPU, not the wake-up of another. With both"
        f" processes held to one CPU the AsyncWorker reaches {held} the Worker. Python's lock"
        " lets one thread run at a time, so an AsyncWorker process gives up little by being"
        " held to one CPU (`taskset -c N`, `os.sched_setaffinity`)."
    )


def _ratio(drains: dict[str, list[float]]) -> float:
    return med(ratios(drains["AsyncWorker batched"], drains["Worker batched"]))
