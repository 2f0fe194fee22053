"""Workload "batch" (issue 16): draining in batches against draining one message per commit.

N messages over G groups (filled with ``publish_many``, untimed), drained by one worker:

- **baseline**: the plain-sqlite3 baseline's ``claim`` + ``ack`` (two commits per message);
- **baseline batched**: the batched baseline (``BaselineTransport.ack_many_and_claim_many``:
  the design's statements for a batch of acks and up to B claims in one transaction, one
  statement for each kind of write, as harel_sa's batches send theirs);
- **harel_sa**: ``claim`` + ``ack``, one message per call;
- **harel_sa batched**: ``ack_many_and_claim_many`` of up to B, the sync transport;
- **harel_sa async batched**: the same calls on ``AsyncSqliteTransport`` (one hop per batch).

- **Worker**: a ``harel_sa.Worker`` with its defaults (one slot, unbatched: the fused
  ``ack_and_claim``), zero-work handler, ``run(until_empty=True)``;
- **Worker batched**: ``Worker(concurrency=B, batch=B)`` (default ``ack_wait``);
- **AsyncWorker batched**: the same on ``AsyncSqliteTransport``;

at ``synchronous`` FULL and NORMAL; and, at FULL, a deep single group (``DEEP`` messages in one
group: one in flight per group means no batch there) drained by the unbatched and the batched
``Worker``. Each repetition runs the variants back to back (``RUN_ORDER``: the pairs the
targets compare side by side), the order reversed every other repetition. Reported beside them,
with no bar: the batching ``Worker``'s own bookkeeping, in µs a message, draining a queue whose
batch calls hand out leases from memory (``FromMemory``: no SQL, so the Worker's cost shows
without the disk's noise).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from baseline import BaselineTransport
from common import (
    BATCH_PNG,
    VISIBILITY,
    Config,
    Row,
    X,
    claim_and_ack_all,
    event,
    fmt,
    fmt_ratio,
    med,
    ratios,
    summary,
    verdict,
)

from harel_sa import AsyncSqliteTransport, AsyncWorker, Lease, SqliteTransport, Worker
from harel_sa.events import tokens

VARIANTS = (
    "baseline",
    "baseline batched",
    "harel_sa",
    "harel_sa batched",
    "harel_sa async batched",
    "Worker",
    "Worker batched",
    "AsyncWorker batched",
)
#: The order of a repetition (reversed every other one): each pair a target compares runs back
#: to back, so the commit time's drift on this shared disk falls on both alike.
RUN_ORDER = (
    "baseline",
    "harel_sa",
    "Worker",
    "harel_sa async batched",
    "harel_sa batched",
    "baseline batched",
    "Worker batched",
    "AsyncWorker batched",
)
DEEP_VARIANTS = ("Worker", "Worker batched")
SYNCS = ("FULL", "NORMAL")
BATCH = 32


class FromMemory(SqliteTransport[Any]):
    """A ``SqliteTransport`` (so a ``Worker`` takes it) whose batch calls hand out the leases of
    :meth:`fill` in order and ack every lease at once, touching no file."""

    def fill(self, n: int, groups: int) -> None:
        ev = event(0)
        self._leases = [Lease(i, f"g{i % groups}", ev, "w", tokens.next()) for i in range(n)]
        self._leases.reverse()  # popped from the end

    def _take(self, limit: int) -> list[Lease[Any]]:
        taken = self._leases[-limit:][::-1]
        del self._leases[-limit:]
        return taken

    def claim_many(self, worker_id: str, visibility: float, limit: int, *a: Any, **k: Any) -> Any:
        return self._take(limit)

    def ack_many(self, leases: Any) -> list[bool]:
        return [True] * len(leases)

    def ack_many_and_claim_many(
        self, leases: Any, worker_id: str, visibility: float, limit: int, *a: Any, **k: Any
    ) -> Any:
        return [True] * len(leases), self._take(limit)


def bookkeeping(path: str, n: int, groups: int) -> float:
    """µs a message of the batching ``Worker`` (``concurrency=BATCH, batch=BATCH``, zero-work
    handler) draining ``n`` leases over ``groups`` groups from :class:`FromMemory`."""
    with FromMemory(path) as q:
        q.fill(n, groups)
        worker = Worker(q, _nothing, handle_signals=False, **_worker_options("Worker batched"))
        t0 = time.perf_counter()
        done = worker.run(until_empty=True).succeeded
        seconds = time.perf_counter() - t0
    assert done == n, (done, n)
    return seconds / n * 1e6


def _worker_options(variant: str) -> dict[str, Any]:
    if variant == "Worker":
        return {}
    return {"concurrency": BATCH, "batch": BATCH}


def _nothing(lease: Any) -> None:
    pass


async def _nothing_async(lease: Any) -> None:
    pass


def drain(variant: str, path: str, sync: str, items: list[tuple[str, Any]]) -> float:
    """Messages per second of one drain of ``items`` by ``variant``."""
    if variant.startswith("baseline"):
        base = BaselineTransport(path, synchronous=sync)
        try:
            base.publish_many(items)
            t0 = time.perf_counter()
            if variant == "baseline":
                n = claim_and_ack_all(base)
            else:
                n = 0
                leases = base.ack_many_and_claim_many([], "w", VISIBILITY, BATCH)
                while leases:
                    n += len(leases)
                    leases = base.ack_many_and_claim_many(leases, "w", VISIBILITY, BATCH)
            seconds = time.perf_counter() - t0
        finally:
            base.close()
    elif variant == "harel_sa async batched":
        n, seconds = asyncio.run(_async_drain(path, sync, items))
    elif variant == "AsyncWorker batched":
        n, seconds = asyncio.run(_async_worker_drain(path, sync, items))
    elif variant.startswith("Worker"):
        with SqliteTransport(path, synchronous=sync) as q:  # type: ignore[arg-type]
            q.publish_many(items)
            worker = Worker(q, _nothing, handle_signals=False, **_worker_options(variant))
            t0 = time.perf_counter()
            n = worker.run(until_empty=True).succeeded
            seconds = time.perf_counter() - t0
    else:
        with SqliteTransport(path, synchronous=sync) as q:  # type: ignore[arg-type]
            q.publish_many(items)
            t0 = time.perf_counter()
            if variant == "harel_sa":
                n = claim_and_ack_all(q)
            else:
                n = 0
                batch = q.claim_many("w", VISIBILITY, BATCH)
                while batch:
                    n += len(batch)
                    _, batch = q.ack_many_and_claim_many(batch, "w", VISIBILITY, BATCH)
            seconds = time.perf_counter() - t0
    assert n == len(items), (variant, n, len(items))
    return n / seconds


async def _async_drain(path: str, sync: str, items: list[tuple[str, Any]]) -> tuple[int, float]:
    q = await AsyncSqliteTransport.create(path, synchronous=sync)  # type: ignore[arg-type]
    try:
        await q.publish_many(items)
        t0 = time.perf_counter()
        n = 0
        batch = await q.claim_many("w", VISIBILITY, BATCH)
        while batch:
            n += len(batch)
            _, batch = await q.ack_many_and_claim_many(batch, "w", VISIBILITY, BATCH)
        return n, time.perf_counter() - t0
    finally:
        await q.close()


async def _async_worker_drain(
    path: str, sync: str, items: list[tuple[str, Any]]
) -> tuple[int, float]:
    q = await AsyncSqliteTransport.create(path, synchronous=sync)  # type: ignore[arg-type]
    try:
        await q.publish_many(items)
        options = _worker_options("AsyncWorker batched")
        worker = AsyncWorker(q, _nothing_async, handle_signals=False, **options)
        t0 = time.perf_counter()
        n = (await worker.run(until_empty=True)).succeeded
        return n, time.perf_counter() - t0
    finally:
        await q.close()


def run(cfg: Config) -> dict[str, Any]:
    n, g = cfg.size(2000, 20000), cfg.size(100, 1000)
    items = [(f"g{i % g}", event(i)) for i in range(n)]
    deep = cfg.size(1000, 10000)
    deep_items = [("deep", event(i)) for i in range(deep)]
    out: dict[str, Any] = {"n": n, "groups": g, "batch": BATCH, "deep_n": deep}
    for sync in SYNCS:
        out[sync] = {v: [] for v in VARIANTS}
    out["deep"] = {v: [] for v in DEEP_VARIANTS}
    out["bookkeeping_us"] = []
    for rep in range(cfg.reps):
        for sync in SYNCS:
            for variant in RUN_ORDER if rep % 2 == 0 else RUN_ORDER[::-1]:
                path = str(cfg.fresh(f"batch-{variant.replace(' ', '-')}-{sync}"))
                out[sync][variant].append(drain(variant, path, sync, items))
        for variant in DEEP_VARIANTS if rep % 2 == 0 else DEEP_VARIANTS[::-1]:
            path = str(cfg.fresh(f"batch-deep-{variant.replace(' ', '-')}"))
            out["deep"][variant].append(drain(variant, path, "FULL", deep_items))
        out["bookkeeping_us"].append(bookkeeping(str(cfg.fresh("batch-from-memory")), n, g))
        cfg.log(f"  batch rep {rep + 1}/{cfg.reps} done")
    return out


#: Each target's pair, ``a`` ÷ ``b``, and its bar at FULL and at NORMAL; whether the issue
#: sets it at each (it sets the raw batched statements' bar at FULL only: "the same at NORMAL:
#: >= 3x the baseline"; the transport's own calls' bars are this project's).
BARS = (
    ("Worker batched", "baseline", (8.0, 3.0), (True, True)),
    ("Worker batched", "baseline batched", (0.9, 0.9), (True, False)),
    ("AsyncWorker batched", "Worker batched", (0.8, 0.8), (True, True)),
    ("harel_sa batched", "baseline", (8.0, 3.0), (False, False)),
    ("harel_sa batched", "baseline batched", (0.9, 0.9), (False, False)),
    ("harel_sa async batched", "harel_sa batched", (0.8, 0.8), (False, False)),
)


def _judged(w: dict[str, Any]) -> list[tuple[str, str, list[tuple[str, str, str]]]]:
    """Per pair of :data:`BARS`: ``a``, ``b`` and per sync (its bar, its ratio, its verdict)."""
    out = []
    for a, b, bars, issue in BARS:
        cells = []
        for sync, bar, by_issue in zip(SYNCS, bars, issue, strict=True):
            x = ratios(w[sync][a], w[sync][b])
            cells.append((f"≥ {bar:g}{X}", fmt_ratio(x), verdict(med(x) >= bar, not by_issue)))
        out.append((a, b, cells))
    return out


def _others(w: dict[str, Any]) -> list[Row]:
    """The deep group's target and the Worker's own bookkeeping (reported, no bar)."""
    rows: list[Row] = []
    if "deep" in w:
        x = ratios(w["deep"]["Worker batched"], w["deep"]["Worker"])
        label = f"One group {w['deep_n']:,} deep (FULL): `Worker batched` ÷ `Worker` ≥ 0.9{X}"
        rows.append((label, fmt_ratio(x), verdict(med(x) >= 0.9)))
    if "bookkeeping_us" in w:
        label = "`Worker batched`'s own bookkeeping a message (leases from memory: no SQL)"
        rows.append((label, f"{fmt(w['bookkeeping_us'])} µs", "reported (no bar)"))
    return rows


def targets(w: dict[str, Any]) -> list[Row]:
    """Issue 16's bars on SQLite, and the bars this project added beside them (the raw
    batched statements at NORMAL; the transport's own calls): those are marked so."""
    rows: list[Row] = [
        (f"`{a}` ÷ `{b}` ({sync}) {bar}", x, said)
        for a, b, cells in _judged(w)
        for sync, (bar, x, said) in zip(SYNCS, cells, strict=True)
    ]
    return rows + _others(w)


def section(w: dict[str, Any]) -> list[str]:
    """The pairs' ratios at FULL and NORMAL side by side, each with its bar and verdict."""
    rows: list[Row] = []
    for a, b, cells in _judged(w):
        full, normal = (f"{x} {bar}: {said}" for bar, x, said in cells)
        rows.append((f"`{a}` ÷ `{b}`", full, normal))
    for label, x, said in _others(w):
        rows.append((label, f"{x}: {said}", ""))
    return summary(
        "Batches: claim_many / ack_many_and_claim_many (issue 16)",
        f"{w['n']:,} messages over {w['groups']:,} groups drained by one worker in batches of up"
        f" to {w['batch']} (the variants: `bench/batches.py`).",
        rows,
        f"![batched drains]({BATCH_PNG})",
        head=("", *SYNCS),
    )
