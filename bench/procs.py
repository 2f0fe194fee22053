"""The workloads with several processes: 3 (worker processes draining one file) and 5 (the
queue in the same file as a busy second writer, against a file of its own).

Processes are started with ``spawn`` (nothing inherited but arguments), open their own
connections, then wait on a barrier, so start-up is not measured.
"""

from __future__ import annotations

import fcntl
import mmap
import multiprocessing as mp
import os
import queue
import random
import sqlite3
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from common import BASE, HAREL, VISIBILITY, Config, Queue, event, opened

import harel_sa

CTX = mp.get_context("spawn")

#: Worker variants of workload 3. ``plain`` is how a worker uses the transport today;
#: the others are fairness prototypes, done on the worker side without touching harel_sa.
VARIANTS = {
    "plain": "claim + ack, busy_timeout 5 s (SQLite's own busy handler)",
    "fused": "ack_and_claim: one write transaction per message",
    "pause": "claim + ack, then sleep 0.5 ms after each ack (a pause after the commit, or"
    " just as well a handler that takes 0.5 ms)",
    "retry": "claim + ack with busy_timeout=0: on BusyError sleep 50-250 µs and retry",
    "flock": "claim + ack, each transaction under an OS file lock (fcntl.flock) on a side file",
    "handoff": "as `flock`, and a process that had to wait counts itself in a shared waiters"
    " count; after its commit, a holder that sees waiters steps aside (sched_yield, at most"
    " 2 ms) until one of them has the lock",
    "baseline": "the baseline's claim + ack (the design's SQL)",
}


def _empty(probe: sqlite3.Connection) -> bool:
    return probe.execute("SELECT 1 FROM harel_transport_messages LIMIT 1").fetchone() is None


def _is_busy(exc: BaseException) -> bool:
    if isinstance(exc, harel_sa.BusyError):
        return True
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


class _Attempts:
    """Runs an operation until it is not refused for the lock, counting the refusals.

    With a busy_timeout of 5 s a refusal means the process waited 5 s for the write lock and
    lost it every time (a *timeout*: a real worker would log an error and retry). With
    busy_timeout=0 (the ``retry`` prototype) a refusal is immediate, and is retried after a
    short random sleep.
    """

    def __init__(self, short_retries: bool) -> None:
        self.short = short_retries
        self.refusals = 0
        self.give_up_at = float("inf")  # time.monotonic() after which a refusal is raised

    def __call__(self, fn: Any, *args: Any) -> Any:
        while True:
            try:
                return fn(*args)
            except Exception as exc:
                if not _is_busy(exc):
                    raise
                self.refusals += 1
                if time.monotonic() > self.give_up_at:
                    raise
                if self.short:
                    time.sleep(random.uniform(50e-6, 250e-6))


class _Flocked:
    """Each operation under an exclusive ``flock`` of a side file: a process waiting for it is
    woken by the kernel when the holder lets go, instead of polling in SQLite's busy handler."""

    def __init__(self, path: str, inner: _Attempts) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.inner = inner

    @property
    def refusals(self) -> int:
        return self.inner.refusals

    def __call__(self, fn: Any, *args: Any) -> Any:
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            return self.inner(fn, *args)
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)


class _Handoff(_Flocked):
    """``_Flocked``, passing the lock on: a process that had to wait for the flock counts
    itself in a waiters count kept in the lock file (``mmap``, updated under a second flock);
    after letting go, a holder that sees waiters yields its CPU (``sched_yield``, at most
    2 ms) until the count drops, i.e. until a waiter has taken the lock. Without contention
    it costs nothing more than ``_Flocked`` (the first try is non-blocking)."""

    def __init__(self, path: str, inner: _Attempts) -> None:
        super().__init__(path, inner)
        if os.fstat(self.fd).st_size < 8:
            os.pwrite(self.fd, bytes(8), 0)
        self.count = mmap.mmap(self.fd, 8)
        self.meta = os.open(path + ".meta", os.O_RDWR | os.O_CREAT, 0o644)

    def _waiting(self) -> int:
        return int(struct.unpack_from("q", self.count, 0)[0])

    def _add(self, delta: int) -> None:
        fcntl.flock(self.meta, fcntl.LOCK_EX)
        try:
            struct.pack_into("q", self.count, 0, self._waiting() + delta)
        finally:
            fcntl.flock(self.meta, fcntl.LOCK_UN)

    def __call__(self, fn: Any, *args: Any) -> Any:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._add(1)
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX)
            finally:
                self._add(-1)
        try:
            return self.inner(fn, *args)
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            waiting = self._waiting()
            if waiting:
                deadline = time.monotonic() + 0.002
                while self._waiting() >= waiting and time.monotonic() < deadline:
                    os.sched_yield()


def worker(path: str, variant: str, wid: str, barrier: Any, results: Any) -> None:
    """Drain the queue at ``path`` until it is empty; report (wid, count, start, end,
    refusals)."""
    impl = BASE if variant == "baseline" else HAREL
    q = Queue(impl, path, "FULL")
    if variant == "retry":  # after the open: start-up itself must wait for the lock
        q.t._db.raw.execute("PRAGMA busy_timeout = 0")
    attempt: Any = _Attempts(short_retries=variant == "retry")
    if variant == "flock":
        attempt = _Flocked(path + ".lock", attempt)
    elif variant == "handoff":
        attempt = _Handoff(path + ".lock", attempt)
    probe = sqlite3.connect(path, timeout=5.0)
    count = 0
    barrier.wait()
    start = end = time.monotonic()
    try:
        lease = None
        while True:
            if lease is None:
                lease = attempt(q.claim, wid)
                if lease is None:
                    if _empty(probe):
                        break
                    time.sleep(0.0005)  # every group with messages is in flight elsewhere
                    continue
            if variant == "fused":
                _, lease = attempt(q.t.ack_and_claim, lease, wid, VISIBILITY)
            else:
                attempt(q.ack, lease)
                lease = None
            count += 1
            end = time.monotonic()
            if variant == "pause":
                time.sleep(0.0005)
    finally:
        q.close()
        probe.close()
    results.put((wid, count, start, end, attempt.refusals))


def _run_workers(cfg: Config, variant: str, procs: int, n: int, groups: int) -> dict[str, Any]:
    path = cfg.fresh(f"w3-{variant}-{procs}")
    impl = BASE if variant == "baseline" else HAREL
    with opened(impl, path, "NORMAL") as q:
        q.publish_many([(f"g{i % groups}", event(i)) for i in range(n)])
    barrier, results = CTX.Barrier(procs), CTX.Queue()
    ps = [
        CTX.Process(target=worker, args=(str(path), variant, f"p{k}", barrier, results))
        for k in range(procs)
    ]
    for p in ps:
        p.start()
    rows = _collect(ps, results)
    total = sum(r[1] for r in rows)
    assert total == n, (variant, procs, total, n)
    elapsed = max(r[3] for r in rows) - min(r[2] for r in rows)
    shares = sorted((r[1] / n for r in rows), reverse=True)
    return {"rate": n / elapsed, "shares": shares, "refusals": sum(r[4] for r in rows)}


def _collect(ps: list[Any], results: Any) -> list[Any]:
    """One result per process; if one dies first, stop the others and raise."""
    with reaped(ps):
        return gather(results, len(ps), ps)


def gather(results: Any, count: int, ps: list[Any]) -> list[Any]:
    """``count`` items from the queue ``results``; raises if one of ``ps`` died first."""
    rows: list[Any] = []
    while len(rows) < count:
        try:
            rows.append(results.get(timeout=1.0))
        except queue.Empty:
            dead = [p.exitcode for p in ps if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a benchmark process failed (exit {dead[0]})") from None
    return rows


@contextmanager
def reaped(ps: list[Any]) -> Iterator[None]:
    """The processes ``ps`` joined when the block ends; those still alive after 60 s, or when
    the block raised, terminated."""
    try:
        yield
        for p in ps:
            p.join(timeout=60)
    finally:
        for p in ps:
            if p.is_alive():
                p.terminate()
                p.join()


def jain(shares: list[float]) -> float:
    """Jain's fairness index: 1 when every process did the same, 1/n when one did all."""
    return sum(shares) ** 2 / (len(shares) * sum(s * s for s in shares))


def w3_processes(cfg: Config, variants: tuple[str, ...]) -> dict[str, Any]:
    """1, 2 and 4 worker processes draining one file (synchronous=FULL): total msgs/s and
    each process's share of the messages."""
    n, groups = cfg.size(300, 3000), cfg.size(50, 200)
    counts = (1, 2, 4)
    out: dict[str, Any] = {"n": n, "groups": groups, "procs": list(counts), "variants": {}}
    for v in variants:
        out["variants"][v] = {
            str(c): {"rate": [], "shares": [], "jain": [], "refusals": []} for c in counts
        }
    for rep in range(cfg.reps):
        for c in counts:
            vs = variants if rep % 2 == 0 else tuple(reversed(variants))
            for v in vs:
                r = _run_workers(cfg, v, c, n, groups)
                slot = out["variants"][v][str(c)]
                slot["rate"].append(r["rate"])
                slot["shares"].append(r["shares"])
                slot["jain"].append(jain(r["shares"]))
                slot["refusals"].append(r["refusals"])
        cfg.log(f"  w3 rep {rep + 1}/{cfg.reps} done")
    return out


# --- workload 5 ------------------------------------------------------------------------------


def second_writer(path: str, pause: float, barrier: Any, stop: Any, results: Any) -> None:
    """Write transactions on a table of its own until told to stop; ``pause`` s between."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=W5_BUSY_TIMEOUT)
    conn.execute(f"PRAGMA busy_timeout = {int(W5_BUSY_TIMEOUT * 1000)}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS store_rows (id INTEGER PRIMARY KEY, body TEXT)")
    body = "x" * 200
    attempt = _Attempts(short_retries=False)

    def one() -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO store_rows (body) VALUES (?)", (body,))
        conn.execute("COMMIT")

    barrier.wait()
    n, t0 = 0, time.monotonic()
    while not stop.is_set():
        attempt(one)
        n += 1
        if pause:
            time.sleep(pause)
    results.put((n / (time.monotonic() - t0), attempt.refusals))
    conn.close()


#: busy_timeout of both sides in workload 5: a refusal there is a 1 s wait that ended in
#: BusyError (shorter than the default 5 s, to bound the run's length).
W5_BUSY_TIMEOUT = 1.0

WRITERS = {"flat out": 0.0, "paced (1 ms between commits)": 0.001}


def w5_second_writer(cfg: Config) -> dict[str, Any]:
    """The queue working (claim+ack, FULL) for a fixed window while another process commits
    one-row write transactions on another table: in the queue's file, or in a file of its own
    (same CPU and disk load, no shared lock)."""
    window = cfg.size(0.5, 2.0)
    n, g = cfg.size(4000, 12000), 100
    items = [(f"g{i % g}", event(i)) for i in range(n)]
    wheres = ("own file", "same file")
    out: dict[str, Any] = {"window": window, "groups": g, "writers": {}}
    for name in WRITERS:
        out["writers"][name] = {w: {"queue": [], "writer": [], "refusals": []} for w in wheres}
    for rep in range(cfg.reps):
        for name, pause in WRITERS.items():
            for where in wheres if rep % 2 == 0 else tuple(reversed(wheres)):
                path = cfg.fresh(f"w5-{where.replace(' ', '-')}")
                other = path if where == "same file" else path.with_name("store.db")
                with opened(HAREL, path, "NORMAL") as q:
                    q.publish_many(items)
                q = Queue(HAREL, path, "FULL", busy_timeout=W5_BUSY_TIMEOUT)
                barrier, stop, results = CTX.Barrier(2), CTX.Event(), CTX.Queue()
                p = CTX.Process(
                    target=second_writer, args=(str(other), pause, barrier, stop, results)
                )
                p.start()
                attempt = _Attempts(short_retries=False)
                try:
                    barrier.wait(timeout=120)
                    time.sleep(0.05)  # let the writer get going
                    done, t0 = 0, time.perf_counter()
                    attempt.give_up_at = time.monotonic() + window
                    try:
                        while time.perf_counter() - t0 < window:
                            lease = attempt(q.claim, "w")
                            if lease is None:
                                break
                            attempt(q.ack, lease)
                            done += 1
                    except harel_sa.BusyError:
                        pass  # starved past the window: counted in the refusals
                    rate = done / (time.perf_counter() - t0)
                finally:
                    stop.set()
                    q.close()
                writer_rate, writer_refusals = _collect([p], results)[0]
                slot = out["writers"][name][where]
                slot["queue"].append(rate)
                slot["writer"].append(writer_rate)
                slot["refusals"].append(attempt.refusals + writer_refusals)
        cfg.log(f"  w5 rep {rep + 1}/{cfg.reps} done")
    return out
