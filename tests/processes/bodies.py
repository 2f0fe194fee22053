"""What the producer and worker processes of the process tests run, and how their logs are read.

Each process writes JSON lines to a file of its own with one unbuffered ``write(2)`` per line:
a SIGKILL cannot undo a write that returned, so every line present happened, and nothing a
process did after its last line is claimed. Producers log a publish only after ``publish()``
returned (the log of committed publishes); workers log a handling before calling ``ack``.

A process can be told to SIGKILL itself at a chosen point (:class:`Plan`): inside a
transaction (a statement of ``publish``/``claim``/``ack``, seen through the connection's trace
callback, which SQLite calls as each statement starts), right after a call returned, or in the
middle of handling. The parent also kills processes at random moments with ``os.kill``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harel_sa import AsyncSqliteTransport, Event, Lease, SqliteTransport, Worker, schema_for
from tests import checks

NAMES = schema_for().names
M, G = NAMES.messages, NAMES.groups

# What a process is doing, as the parent reads it from a shared array when it kills it.
PHASES = ["idle", "publish", "log", "claim", "handle", "ack", "extend", "wait"]
PHASE = {name: code for code, name in enumerate(PHASES)}

#: Points where a process can be told to kill itself: (operation, where). ``where`` is the
#: start of a statement the operation runs inside its transaction, or ``returned`` (the call
#: came back, nothing logged yet) or ``middle`` (handling).
PRODUCER_POINTS: list[tuple[str, str]] = [
    ("publish", f"INSERT OR IGNORE INTO {G}"),  # message inserted, group row not yet
    ("publish", "COMMIT"),
    ("publish", "returned"),  # committed, not logged: the log may miss it, the queue may not
    ("publish_many", f"INSERT INTO {M}"),  # part of a batch written
    ("publish_many", "COMMIT"),
]
WORKER_POINTS: list[tuple[str, str]] = [
    ("claim", f"UPDATE {G}"),  # head selected, lease not yet written
    ("claim", "COMMIT"),
    ("claim", "returned"),  # holding a lease, nothing logged
    ("handle", "middle"),
    ("ack", f"DELETE FROM {G}"),  # message deleted, group row not yet dropped
    ("ack", "COMMIT"),
    ("ack", "returned"),
    ("extend", "COMMIT"),
]


class Log:
    """Append-only JSON lines, one unbuffered write per line."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, **record: Any) -> None:
        os.write(self.fd, (json.dumps(record) + "\n").encode())


def read_log(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line]


@dataclass(frozen=True)
class Plan:
    """Kill this process at the ``nth`` passing of ``point``."""

    op: str
    where: str
    nth: int


class Killer:
    """Carries out a :class:`Plan` (or nothing), and tracks the current operation."""

    def __init__(self, plan: Plan | None, log: Log, phases: Any, slot: int) -> None:
        self.plan = plan
        self.log = log
        self.phases = phases
        self.slot = slot
        self.op = "idle"
        self.seen = 0

    def enter(self, op: str) -> None:
        self.op = op
        if self.phases is not None:
            self.phases[self.slot] = PHASE.get(op, PHASE["publish"])

    def trace(self, sql: str) -> None:
        if self.plan is not None and self.op == self.plan.op and sql.startswith(self.plan.where):
            self.hit()

    def imminent(self, op: str, passes: int) -> bool:
        """Whether a call of ``op`` passing the planned point ``passes`` times will kill."""
        plan = self.plan
        return plan is not None and plan.op == op and self.seen + passes >= plan.nth

    def at(self, op: str, where: str) -> None:
        if self.plan is not None and (op, where) == (self.plan.op, self.plan.where):
            self.hit()

    def hit(self) -> None:
        assert self.plan is not None
        self.seen += 1
        if self.seen >= self.plan.nth:
            self.log.write(kill=[self.plan.op, self.plan.where])
            os.kill(os.getpid(), signal.SIGKILL)


def _guard(errors: Path, body: Callable[[], None]) -> None:
    """Run ``body``; an exception is written to ``errors`` (the parent fails the test)."""
    try:
        body()
    except BaseException:
        with open(errors, "a") as f:
            f.write(traceback.format_exc())
        raise


class _AsyncAsSync:
    """An async transport driven from a plain loop, one private event loop per process."""

    def __init__(self, path: str, **kwargs: Any) -> None:
        self.runner = asyncio.Runner()
        self.t = self.runner.run(AsyncSqliteTransport.create(path, **kwargs))

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.t, name)
        return lambda *a, **k: self.runner.run(method(*a, **k))


def open_transport(path: str, kind: str, **kwargs: Any) -> Any:
    return SqliteTransport(path, **kwargs) if kind == "sync" else _AsyncAsSync(path, **kwargs)


# --- producer -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProducerConfig:
    path: str
    log_dir: str
    slot: int
    incarnation: int
    groups: tuple[str, ...]
    plan: Plan | None = None
    phases: Any = None
    stop: Any = None  # an Event: stop after the current publish
    count: int | None = None  # or stop after this many publish calls
    synchronous: str = "FULL"
    pause: float = 0.002  # between publishes, so workers keep up
    seed: int = 0


def producer_log(log_dir: str, slot: int, incarnation: int) -> Path:
    return Path(log_dir) / f"pub-{slot:02d}-{incarnation:05d}.log"


def producer_main(cfg: ProducerConfig) -> None:
    _guard(Path(cfg.log_dir) / f"error-pub-{cfg.slot}-{cfg.incarnation}", lambda: _produce(cfg))


def _produce(cfg: ProducerConfig) -> None:
    rng = random.Random(cfg.seed)
    log = Log(producer_log(cfg.log_dir, cfg.slot, cfg.incarnation))
    t = SqliteTransport(cfg.path, busy_timeout=60, synchronous=cfg.synchronous)  # type: ignore[arg-type]
    killer = Killer(cfg.plan, log, cfg.phases, cfg.slot)
    t._db.raw.set_trace_callback(killer.trace)  # type: ignore[union-attr]
    n = 0
    while not (cfg.stop is not None and cfg.stop.is_set()):
        if cfg.count is not None and n >= cfg.count:
            break
        size = 1 if rng.random() < 0.7 else rng.randint(2, 4)
        op = "publish" if size == 1 else "publish_many"
        # Some messages go to a group of their own that nothing will ever publish to again,
        # and so do those of a call the plan kills: there, a message stranded without its
        # group row (or a group row without messages) would stay stranded for everyone to see.
        once = killer.imminent(op, size) or rng.random() < 0.1
        events = []
        for k in range(size):
            event_id = f"{cfg.slot}.{cfg.incarnation}.{n}.{k}"
            group = f"once-{event_id}" if once else rng.choice(cfg.groups)
            events.append((group, Event(kind="job", id=event_id, data={"n": n})))
        killer.enter(op)
        if size == 1:
            t.publish(*events[0])
        else:
            t.publish_many(events)
        killer.at(op, "returned")
        killer.enter("log")
        for g, event in events:  # in publish order
            log.write(g=g, id=event.id, n=n)
        killer.enter("wait")
        n += 1
        if cfg.pause:
            time.sleep(rng.uniform(0, cfg.pause))
    t.close()


# --- worker ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerConfig:
    path: str
    log_dir: str
    slot: int
    incarnation: int
    visibility: float
    kind: str = "sync"  # or "async"
    plan: Plan | None = None
    phases: Any = None
    producers_done: Any = None  # a tests.flag.Flag or an Event: set and the queue empty, exit
    clock_offset: float = 0.0  # seconds added to time.time() (the drain looks past old leases)
    synchronous: str = "FULL"
    handle_max: float = 0.003  # seconds a handling takes at most (uniform)
    slow_share: float = 0.0  # share of handlings that outlast the visibility, kept by extend
    fused_share: float = 0.3  # share of acks done as ack_and_claim
    batch: int = 1  # above 1: a batching harel_sa Worker (batch = concurrency) instead
    seed: int = 0

    @property
    def name(self) -> str:
        return f"w{self.slot}.{self.incarnation}"


def worker_log(log_dir: str, slot: int, incarnation: int) -> Path:
    return Path(log_dir) / f"work-{slot:02d}-{incarnation:05d}.log"


def worker_main(cfg: WorkerConfig) -> None:
    _guard(Path(cfg.log_dir) / f"error-work-{cfg.slot}-{cfg.incarnation}", lambda: _work(cfg))


def _work(cfg: WorkerConfig) -> None:
    rng = random.Random(cfg.seed)
    log = Log(worker_log(cfg.log_dir, cfg.slot, cfg.incarnation))

    def clock() -> float:
        return time.time() + cfg.clock_offset

    t = open_transport(
        cfg.path, cfg.kind, clock=clock, busy_timeout=60, synchronous=cfg.synchronous
    )
    killer = (ThreadKiller if cfg.batch > 1 else Killer)(cfg.plan, log, cfg.phases, cfg.slot)
    if cfg.kind == "sync":
        t._db.raw.set_trace_callback(killer.trace)
    if cfg.batch > 1:
        _work_batched(cfg, t, killer, log, rng, clock)
        return
    # A connection of the worker's own, to look at its group from outside the transport.
    check = sqlite3.connect(cfg.path, isolation_level=None, timeout=60)
    lease: Lease[Any] | None = None
    vis = cfg.visibility
    while True:
        if lease is None:
            killer.enter("claim")
            lease = t.claim(cfg.name, vis)
            killer.at("claim", "returned")
        if lease is None:
            killer.enter("wait")
            done = cfg.producers_done is None or cfg.producers_done.is_set()
            if done and t.stats().messages == 0:
                break
            time.sleep(0.002)
            continue
        t1 = time.monotonic()
        expiry, verdict = _check_group(check, lease, clock)
        killer.enter("handle")
        slow = killer_wants(killer, "extend") or rng.random() < cfg.slow_share
        if slow:
            # A handler that outlives its lease, heartbeating: extend every 0.3 visibility.
            for i in range(4):
                time.sleep(0.3 * vis)
                if i == 2:
                    killer.at("handle", "middle")
                killer.enter("extend")
                before = clock()
                if t.extend(lease, vis):
                    expiry = max(expiry or 0.0, before + vis)
                killer.enter("handle")
        else:
            time.sleep(rng.uniform(0, cfg.handle_max / 2))
            killer.at("handle", "middle")
            time.sleep(rng.uniform(0, cfg.handle_max / 2))
        t2 = time.monotonic()
        live = expiry is not None and clock() < expiry  # the lease held all through [t1, t2]
        _log_handling(log, cfg, lease, t1, t2, live, verdict)
        killer.enter("ack")
        if rng.random() < cfg.fused_share:
            ok, nxt = t.ack_and_claim(lease, cfg.name, vis)
        else:
            ok, nxt = t.ack(lease), None
        killer.at("ack", "returned")
        log.write(acked=lease.event.id, ok=ok, live=live)
        lease = nxt
    t.close()
    check.close()


class ThreadKiller(Killer):
    """A :class:`Killer` whose current operation is the calling thread's: in a worker with
    a batcher, slot threads and a heartbeat, the statement the trace callback sees runs in
    the thread that made the call."""

    _local = threading.local()

    @property
    def op(self) -> str:
        return getattr(self._local, "op", "idle")

    @op.setter
    def op(self, value: str) -> None:
        self._local.op = value


def _work_batched(
    cfg: WorkerConfig,
    t: Any,
    killer: Killer,
    log: Log,
    rng: random.Random,
    clock: Callable[[], float],
) -> None:
    """The worker as a batching :class:`~harel_sa.Worker` (``batch`` slots and leases a
    batch): its handler checks the group and logs the handling, its calls are marked for the
    kill points (a batch that acks is an ``ack``, one that only claims a ``claim``) and its
    acks logged as they return. It runs until killed."""
    vis = cfg.visibility
    local = threading.local()  # a connection of each handler thread, to look at its group
    live_at_ack: dict[str, bool] = {}

    def checker() -> sqlite3.Connection:
        if not hasattr(local, "check"):
            local.check = sqlite3.connect(cfg.path, isolation_level=None, timeout=60)
        conn: sqlite3.Connection = local.check
        return conn

    def marked(op: str, call: Callable[..., Any], acks: bool = False) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            killer.enter(op)
            result = call(*args, **kwargs)
            killer.at(op, "returned")
            if acks:
                oks = result[0] if isinstance(result, tuple) else result
                for lease, ok in zip(args[0], oks, strict=True):
                    log.write(acked=lease.event.id, ok=ok, live=live_at_ack.pop(lease.token, False))
            killer.enter("idle")
            return result

        return run

    t.claim_many = marked("claim", t.claim_many)
    t.ack_many = marked("ack", t.ack_many, acks=True)
    t.ack_many_and_claim_many = marked("ack", t.ack_many_and_claim_many, acks=True)
    t.extend = marked("extend", t.extend)

    def handle(lease: Lease[Any]) -> None:
        try:
            t1 = time.monotonic()
            _, verdict = _check_group(checker(), lease, clock)
            killer.enter("handle")
            if killer_wants(killer, "extend") or rng.random() < cfg.slow_share:
                time.sleep(0.6 * vis)  # outlives its lease: the heartbeat keeps it
                killer.at("handle", "middle")
                time.sleep(0.6 * vis)
            else:
                time.sleep(rng.uniform(0, cfg.handle_max / 2))
                killer.at("handle", "middle")
                time.sleep(rng.uniform(0, cfg.handle_max / 2))
            t2 = time.monotonic()
            # Still ours at the end: nobody claimed the message meanwhile (a claim re-tokens it).
            mine = (
                checker()
                .execute(
                    f"SELECT lock_expiry FROM {M} WHERE seq = ? AND locked_by = ?",
                    (lease.seq, lease.locked_by),
                )
                .fetchone()
            )
            live = verdict == "ok" and mine is not None and clock() < float(mine[0])
            live_at_ack[lease.token] = live
            _log_handling(log, cfg, lease, t1, t2, live, verdict)
            killer.enter("idle")
        except BaseException:
            with open(Path(cfg.log_dir) / f"error-handle-{cfg.slot}-{cfg.incarnation}", "a") as f:
                f.write(traceback.format_exc())
            raise

    worker = Worker(
        t,
        handle,
        worker_id=cfg.name,
        visibility=vis,
        concurrency=cfg.batch,
        batch=cfg.batch,
        max_deliveries=None,  # as the plain loop: kills may deliver a message many times
        poll_interval=0.002,
        handle_signals=False,
    )
    worker.run()


def _log_handling(
    log: Log, cfg: WorkerConfig, lease: Lease[Any], t1: float, t2: float, live: bool, check: str
) -> None:
    """One handling, logged before its ack is sent."""
    log.write(
        g=lease.group_id,
        seq=lease.seq,
        id=lease.event.id,
        t1=t1,
        t2=t2,
        live=live,
        check=check,
        d=lease.deliveries,
        w=cfg.name,
    )


def killer_wants(killer: Killer, op: str) -> bool:
    return killer.plan is not None and killer.plan.op == op


def _check_group(
    check: sqlite3.Connection, lease: Lease[Any], clock: Callable[[], float]
) -> tuple[float | None, str]:
    """Right after a claim: the lease's expiry as written, and whether the group has exactly
    one live lease, this one ("ok"), or the lease already lapsed ("lapsed"), or a violation."""
    mine = check.execute(
        f"SELECT lock_expiry FROM {M} WHERE seq = ? AND locked_by = ?",
        (lease.seq, lease.locked_by),
    ).fetchone()
    now = clock()
    live = check.execute(
        f"SELECT seq, locked_by FROM {M} WHERE group_id = ? "
        "AND locked_by IS NOT NULL AND lock_expiry >= ?",
        (lease.group_id, now),
    ).fetchall()
    if mine is None:
        return None, "lapsed"  # lapsed and re-claimed (or acked by ... nobody else can)
    expiry = float(mine[0])
    if now >= expiry:
        return expiry, "lapsed"
    if live != [(lease.seq, lease.locked_by)]:
        return expiry, f"VIOLATION: live leases in {lease.group_id}: {live}"
    return expiry, "ok"


# --- reading the logs -----------------------------------------------------------------------


@dataclass
class Handling:
    group: str
    seq: int
    id: str
    t1: float
    t2: float
    live: bool
    check: str
    worker: str


def handlings(log_dir: Path) -> list[Handling]:
    out = []
    for path in sorted(log_dir.glob("work-*.log")):
        for r in read_log(path):
            if "t1" in r:
                out.append(
                    Handling(
                        r["g"], r["seq"], r["id"], r["t1"], r["t2"], r["live"], r["check"], r["w"]
                    )
                )
    return out


def acks(log_dir: Path) -> list[dict[str, Any]]:
    return [r for p in sorted(log_dir.glob("work-*.log")) for r in read_log(p) if "acked" in r]


def kills(log_dir: Path) -> list[tuple[str, str]]:
    return [
        (r["kill"][0], r["kill"][1])
        for p in sorted(log_dir.glob("*.log"))
        for r in read_log(p)
        if "kill" in r
    ]


def published(log_dir: Path) -> dict[str, list[str]]:
    """Per group, the ids of committed publishes in publish order (incarnations in order)."""
    out: dict[str, list[str]] = {}
    for path in sorted(log_dir.glob("pub-*.log")):  # slot, then incarnation: their order
        for r in read_log(path):
            if "id" in r:
                out.setdefault(r["g"], []).append(r["id"])
    return out


def errors(log_dir: Path) -> list[str]:
    return [p.read_text() for p in sorted(log_dir.glob("error-*"))]


def overlaps(items: Iterable[Handling]) -> list[tuple[Handling, Handling]]:
    """Pairs of handlings of one group, both under a live lease, whose intervals overlap."""
    by_group: dict[str, list[Handling]] = {}
    for h in items:
        if h.live:
            by_group.setdefault(h.group, []).append(h)
    bad = []
    for hs in by_group.values():
        hs.sort(key=lambda h: h.t1)
        latest = hs[0] if hs else None
        for h in hs[1:]:
            assert latest is not None
            if h.t1 <= latest.t2:
                bad.append((latest, h))
            if h.t2 > latest.t2:
                latest = h
    return bad


def successors_too_early(items: Iterable[Handling]) -> list[tuple[Handling, Handling]]:
    """Pairs (a handling of a message, a later message's handling that began before it ended),
    both of one group under a live lease: every delivery of a message, redeliveries included,
    must end before its successor's first one begins."""
    by_group: dict[str, list[Handling]] = {}
    for h in items:
        if h.live:
            by_group.setdefault(h.group, []).append(h)
    bad = []
    for hs in by_group.values():
        hs.sort(key=lambda h: (h.seq, h.t1))
        latest: Handling | None = None  # the latest-ending handling of the smaller seqs
        i = 0
        while i < len(hs):
            same = [h for h in hs[i:] if h.seq == hs[i].seq]
            if latest is not None:
                bad += [(latest, h) for h in same if h.t1 <= latest.t2]
            ends = max(same, key=lambda h: h.t2)
            if latest is None or ends.t2 > latest.t2:
                latest = ends
            i += len(same)
    return bad


def first_handlings(items: Iterable[Handling]) -> dict[str, list[Handling]]:
    """Per group, the first handling of each message, in the order they happened."""
    by_group: dict[str, list[Handling]] = {}
    for h in sorted(items, key=lambda h: h.t1):
        by_group.setdefault(h.group, []).append(h)
    out: dict[str, list[Handling]] = {}
    for g, hs in by_group.items():
        seen: set[str] = set()
        out[g] = [h for h in hs if not (h.id in seen or seen.add(h.id))]  # type: ignore[func-returns-value]
    return out


def stranded(path: str) -> dict[str, int]:
    """Rows no claim can reach or that say a group is busy with nothing in it (none yet when
    every process of a round was killed before one of them made the tables: a loaded machine)."""
    with sqlite3.connect(path, timeout=60) as raw:
        made = raw.execute("SELECT count(*) FROM sqlite_master WHERE name = ?", (M,)).fetchone()
        if not made[0]:
            return dict.fromkeys(checks.stranded_names(), 0)
        return checks.stranded(raw)


def join_all(procs: list[Any], timeout: float) -> None:
    """Wait for ``procs`` to end by themselves; kill and fail on the first that does not."""
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            for q in procs:
                if q.is_alive():
                    os.kill(q.pid, signal.SIGKILL)
                    q.join()
            raise AssertionError(f"{p.name} did not finish within {timeout} s")
