"""The in-process workloads: 1 (publish, drain), 2 (claim cost against backlog), 4 (async twin
against the sync transport), 6 (claims behind parked or lower-priority groups) and the fast
paths (``publish_many``, fused ``ack_and_claim``).

Every workload repeats ``cfg.reps`` times; within a repetition the implementations (or the
variants being compared) run back to back, in alternating order, so that the machine's noise
falls on both sides of each ratio.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from common import (
    BASE,
    HAREL,
    IMPLS,
    VISIBILITY,
    Config,
    Queue,
    X,
    claim_and_ack_all,
    drain,
    event,
    opened,
    order,
    per_op,
)

from harel_sa import AsyncSqliteTransport, SqliteTransport

SYNCS = ("FULL", "NORMAL")

# --- workload 1 ------------------------------------------------------------------------------


def w1_drain(cfg: Config) -> dict[str, Any]:
    """Publish N messages over G groups (one ``publish`` each), then drain with claim+ack."""
    n, g = cfg.size(400, 3000), cfg.size(20, 100)
    events = [event(i) for i in range(n)]
    out: dict[str, Any] = {"n": n, "groups": g, "FULL": {}, "NORMAL": {}}
    for sync in SYNCS:
        for phase in ("publish", "drain"):
            out[sync][phase] = {impl: [] for impl in IMPLS}
    for rep in range(cfg.reps):
        for sync in SYNCS:
            for impl in order(rep):
                path = cfg.fresh(f"w1-{impl}-{sync}")
                with opened(impl, path, sync) as q:
                    t0 = time.perf_counter()
                    for i, ev in enumerate(events):
                        q.publish(f"g{i % g}", ev)
                    t1 = time.perf_counter()
                    drained = drain(q)
                    t2 = time.perf_counter()
                assert drained == n, (impl, drained, n)
                out[sync]["publish"][impl].append(n / (t1 - t0))
                out[sync]["drain"][impl].append(n / (t2 - t1))
        cfg.log(f"  w1 rep {rep + 1}/{cfg.reps} done")
    out["pages"] = {impl: wal_pages(cfg, impl) for impl in IMPLS}
    return out


def wal_pages(cfg: Config, impl: str, groups: int = 100) -> dict[str, float]:
    """Pages each claim and each ack writes to the WAL (what a commit must write, and at FULL
    fsync): counted from the WAL's growth, checkpoints off, over one claim per group then
    their acks. Deterministic: not a timing."""
    path = cfg.fresh(f"pages-{impl}")
    with opened(impl, path, "NORMAL") as q:
        q.publish_many([(f"g{i % groups}", event(i)) for i in range(groups * 30)])
    with opened(impl, path, "NORMAL") as q:
        raw = q._raw if impl == HAREL else q.t.conn
        raw.execute("PRAGMA wal_autocheckpoint = 0")
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = raw.execute("PRAGMA page_size").fetchone()[0]
        wal = f"{path}-wal"

        def frames() -> float:
            size = os.path.getsize(wal)
            return (size - 32) / (page + 24) if size else 0.0

        f0 = frames()
        leases = [q.claim("w") for _ in range(groups)]
        f1 = frames()
        for lease in leases:
            q.ack(lease)
        f2 = frames()
    return {"claim": (f1 - f0) / groups, "ack": (f2 - f1) / groups}


# --- workloads 2 and 6: the cost of one claim ------------------------------------------------

#: A claim at synchronous=FULL (the default), one at NORMAL, and the claim's SELECT alone (no
#: write).
METRICS = ("claim_full", "claim_normal", "select")


def _claim_costs(
    cfg: Config, q_full: Queue, q_normal: Queue, min_priority: int, budget: float
) -> dict[str, float]:
    """Median seconds per claim on a queue kept steady: every claim is followed (untimed) by
    ``nack(0)``, which frees the message, so the backlog never changes while it is measured."""
    k_max = cfg.size(100, 400)
    out = {}
    for metric, q in (("claim_full", q_full), ("claim_normal", q_normal)):
        out[metric] = per_op(
            lambda q=q: q.claim("w", min_priority),
            lambda lease, q=q: q.nack(lease, 0.0),
            budget,
            k_max,
        )
    out["select"] = per_op(lambda: q_full.select_only(min_priority), None, budget, k_max * 2)
    return out


def _fill(q: Queue, groups: int, per_group: int, prefix: str, priority: int = 0) -> None:
    ev = event()
    batch: list[tuple[str, Any]] = []
    for m in range(per_group):
        for gi in range(groups):
            batch.append((f"{prefix}{gi}", ev))
            if len(batch) >= 50_000:
                q.publish_many(batch, priority)
                batch = []
        del m
    if batch:
        q.publish_many(batch, priority)


def _measure_cases(
    cfg: Config, name: str, cases: list[tuple[str, dict[str, Any]]], setup: Any
) -> dict[str, Any]:
    """Build every case's file once per implementation, then measure the cases in rounds."""
    files: dict[tuple[str, str], Any] = {}
    for label, spec in cases:
        for impl in IMPLS:
            path = cfg.fresh(f"{name}-{impl}-{label}")
            t0 = time.perf_counter()
            setup(impl, path, spec)
            full, normal = Queue(impl, path, "FULL"), Queue(impl, path, "NORMAL")
            for _ in range(5):  # warm the page cache and the statement caches
                lease = full.claim("w", spec.get("min_priority", 0))
                assert lease is not None, (impl, label)
                full.nack(lease, 0.0)
            files[impl, label] = (full, normal)
            cfg.log(f"  {name} {impl} {label}: set up in {time.perf_counter() - t0:.1f}s")
    res: dict[str, Any] = {
        m: {label: {i: [] for i in IMPLS} for label, _ in cases} for m in METRICS
    }
    try:
        for rep in range(cfg.reps):
            for label, spec in cases:
                for impl in order(rep):
                    full, normal = files[impl, label]
                    budget = 0.8 if impl == BASE else 0.5
                    costs = _claim_costs(cfg, full, normal, spec.get("min_priority", 0), budget)
                    for metric, value in costs.items():
                        res[metric][label][impl].append(value)
            cfg.log(f"  {name} rep {rep + 1}/{cfg.reps} done")
    finally:
        for full, normal in files.values():
            full.close()
            normal.close()
    return res


def w2_backlog(cfg: Config) -> dict[str, Any]:
    """Claim cost against backlog: groups of one message, and a few deep groups."""
    if cfg.quick:
        cases = [
            ("1k", 1_000, 1),
            ("10k", 10_000, 1),
            (f"deep 10{X}1k", 10, 1_000),
        ]
    else:
        cases = [
            ("1k", 1_000, 1),
            ("10k", 10_000, 1),
            ("100k", 100_000, 1),
            (f"deep 10{X}10k", 10, 10_000),
        ]

    def setup(impl: str, path: Any, spec: dict[str, Any]) -> None:
        with opened(impl, path, "NORMAL") as q:
            _fill(q, spec["groups"], spec["per_group"], "g")

    specs = [(label, {"groups": g, "per_group": p}) for label, g, p in cases]
    res = _measure_cases(cfg, "w2", specs, setup)
    res["cases"] = [
        {"label": label, "groups": g, "per_group": p, "messages": g * p} for label, g, p in cases
    ]
    return res


def w6_walk(cfg: Config) -> dict[str, Any]:
    """A claim behind P parked groups, and claim(min_priority=2) behind P groups of priority 0,
    against a plain claim on a queue holding only the R ready groups."""
    p, r = cfg.size(5_000, 50_000), cfg.size(200, 1_000)

    def setup(impl: str, path: Any, spec: dict[str, Any]) -> None:
        # Built through each queue's own API (synchronous=NORMAL to save time): for P groups,
        # publish one message, claim it and nack(delay=1h) -- the park of a suspended group.
        with opened(impl, path, "NORMAL") as q:
            kind = spec["kind"]
            if kind == "parked":
                _fill(q, p, 1, "parked")
                for _ in range(p):
                    lease = q.claim("setup")
                    q.nack(lease, 3600.0)
                _fill(q, r, 1, "ready")
                # Claim each ready group once, so all of them have been claimed after the parks
                # (the steady state of a live queue: parked groups were claimed earlier).
                for _ in range(r):
                    q.nack(q.claim("setup"), 0.0)
            elif kind == "priority":
                _fill(q, p, 1, "low", priority=0)
                _fill(q, r, 1, "high", priority=2)
            else:
                _fill(q, r, 1, "ready")

    specs = [
        ("plain claim", {"kind": "plain"}),
        (f"behind {p:,} parked", {"kind": "parked"}),
        (f"min_priority=2 behind {p:,} of priority 0", {"kind": "priority", "min_priority": 2}),
    ]
    res = _measure_cases(cfg, "w6", specs, setup)
    res["cases"] = [{"label": label, **spec} for label, spec in specs]
    res["parked"], res["ready"] = p, r
    return res


# --- workload 4: the async twin --------------------------------------------------------------


async def _async_drain(path: str, sync: str, n: int, fused: bool) -> float:
    t = await AsyncSqliteTransport.create(path, synchronous=sync)  # type: ignore[arg-type]
    try:
        t0 = time.perf_counter()
        done = 0
        lease = await t.claim("w", VISIBILITY)
        while lease is not None:
            if fused:
                _, lease = await t.ack_and_claim(lease, "w", VISIBILITY)
            else:
                await t.ack(lease)
                lease = await t.claim("w", VISIBILITY)
            done += 1
        elapsed = time.perf_counter() - t0
    finally:
        await t.close()
    assert done == n, (done, n)
    return n / elapsed


def _sync_drain(path: str, sync: str, n: int, fused: bool) -> float:
    t = SqliteTransport(path, synchronous=sync)  # type: ignore[arg-type]
    try:
        t0 = time.perf_counter()
        done = 0
        lease = t.claim("w", VISIBILITY)
        while lease is not None:
            if fused:
                _, lease = t.ack_and_claim(lease, "w", VISIBILITY)
            else:
                t.ack(lease)
                lease = t.claim("w", VISIBILITY)
            done += 1
        elapsed = time.perf_counter() - t0
    finally:
        t.close()
    assert done == n, (done, n)
    return n / elapsed


async def _hops(path: str, k: int) -> float:
    """Median seconds of one no-op call into the async twin's connection thread: the cost
    of the thread hop alone, on this machine."""
    t = await AsyncSqliteTransport.create(path)
    try:
        conn = t._driver.conn  # type: ignore[union-attr]
        times = []
        for _ in range(k):
            t0 = time.perf_counter()
            await conn._execute(lambda: None)
            times.append(time.perf_counter() - t0)
    finally:
        await t.close()
    return sorted(times)[len(times) // 2]


W4_VARIANTS = ("sync", "async", "sync fused", "async fused")


def w4_async(cfg: Config) -> dict[str, Any]:
    """Claim+ack throughput (one coroutine, awaited in turn) of the async twin and the sync
    transport, draining the same backlog; and the same with ``ack_and_claim``."""
    n, g = cfg.size(400, 3000), cfg.size(20, 100)
    items = [(f"g{i % g}", event(i)) for i in range(n)]
    out: dict[str, Any] = {"n": n, "groups": g, "hop": []}
    for sync in SYNCS:
        out[sync] = {v: [] for v in W4_VARIANTS}
    for rep in range(cfg.reps):
        for sync in SYNCS:
            for variant in W4_VARIANTS if rep % 2 == 0 else tuple(reversed(W4_VARIANTS)):
                path = cfg.fresh(f"w4-{variant.replace(' ', '-')}-{sync}")
                with opened(HAREL, path, "NORMAL") as q:
                    q.publish_many(items)
                fused = variant.endswith("fused")
                if variant.startswith("async"):
                    rate = asyncio.run(_async_drain(str(path), sync, n, fused))
                else:
                    rate = _sync_drain(str(path), sync, n, fused)
                out[sync][variant].append(rate)
        out["hop"].append(asyncio.run(_hops(str(cfg.fresh("w4-hop")), 2000)))
        cfg.log(f"  w4 rep {rep + 1}/{cfg.reps} done")
    return out


# --- fast paths ------------------------------------------------------------------------------


def fast_paths(cfg: Config) -> dict[str, Any]:
    """``publish_many`` of B messages against B ``publish`` calls; fused ``ack_and_claim``
    against separate ``ack`` + ``claim`` draining N messages."""
    b, n, g = 1000, cfg.size(400, 2000), cfg.size(20, 100)
    items = [(f"g{i % g}", event(i)) for i in range(b)]
    out: dict[str, Any] = {"batch": b, "n": n, "groups": g, "publish": {}, "fused": {}}
    for sync in SYNCS:
        out["publish"][sync] = {"calls": [], "many": []}
        out["fused"][sync] = {"separate": [], "fused": []}
    for rep in range(cfg.reps):
        for sync in SYNCS:
            for variant in ("calls", "many") if rep % 2 == 0 else ("many", "calls"):
                path = cfg.fresh(f"fast-publish-{variant}-{sync}")
                with opened(HAREL, path, sync) as q:
                    t0 = time.perf_counter()
                    if variant == "calls":
                        for group_id, ev in items:
                            q.publish(group_id, ev)
                    else:
                        q.publish_many(items)
                    out["publish"][sync][variant].append(time.perf_counter() - t0)
            for variant in ("separate", "fused") if rep % 2 == 0 else ("fused", "separate"):
                path = cfg.fresh(f"fast-fused-{variant}-{sync}")
                t_ = SqliteTransport(str(path), synchronous=sync)  # type: ignore[arg-type]
                try:
                    t_.publish_many([(f"g{i % g}", event(i)) for i in range(n)])
                    t0 = time.perf_counter()
                    if variant == "separate":
                        done = claim_and_ack_all(t_)
                    else:
                        done = 0
                        lease = t_.claim("w", VISIBILITY)
                        while lease is not None:
                            _, lease = t_.ack_and_claim(lease, "w", VISIBILITY)
                            done += 1
                    rate = n / (time.perf_counter() - t0)
                finally:
                    t_.close()
                assert done == n, (variant, done)
                out["fused"][sync][variant].append(rate)
        cfg.log(f"  fast paths rep {rep + 1}/{cfg.reps} done")
    return out
