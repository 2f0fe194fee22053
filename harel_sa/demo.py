"""The demo's machinery: producer and worker processes on one SQLite file, and the check.

Producers publish ``messages`` events over ``groups`` groups (each group belongs to one
producer, which publishes its messages ``n = 0, 1, ...`` in order, in batches); worker processes
drain them with :class:`~harel_sa.Worker` meanwhile. Each handler records ``(group, n,
monotonic_ns)`` at its start; the parent then checks that every message was delivered exactly
once and, ordering a group's deliveries by that clock (system-wide on one host), in order.
Children fork from a ``forkserver`` that imported harel_sa and opened nothing (:func:`_context`),
so no connection or lock crosses a fork. Children ignore SIGINT: a Ctrl-C reaches the whole
process group, and the parent alone decides, through ``done``.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from queue import Empty
from typing import Any, Literal

from harel_sa.errors import BusyError

_READY_TIMEOUT = 120.0
_BATCH = 100
# SQLite's lock is not fair between processes: a writer can wait long behind busy workers.
_BUSY_TIMEOUT = 60.0


@dataclass(frozen=True)
class DemoConfig:
    """What to run. ``api`` is a path or ``sqlite:///`` URL; ``work`` is seconds per handler."""

    api: str
    prefix: str = "harel"
    messages: int = 20_000
    groups: int = 200
    workers: int = 3
    producers: int = 2
    concurrency: int = 1
    work: float = 0.0
    synchronous: Literal["FULL", "NORMAL"] = "FULL"
    timeout: float = 120.0

    def per_group(self) -> list[int]:
        """How many messages each group gets (as even as can be)."""
        base, extra = divmod(self.messages, self.groups)
        return [base + (1 if g < extra else 0) for g in range(self.groups)]

    def group_name(self, g: int) -> str:
        return f"group-{g:05d}"


@dataclass
class DemoReport:
    """What happened: timings, each worker's share, and the problems found (none = ok)."""

    messages: int
    seconds: float  # from the start signal until the last message was handled
    publish_seconds: float
    shares: dict[str, int]
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def throughput(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    def json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("seconds", "publish_seconds"):
            data[key] = round(data[key], 3)
        return {**data, "ok": self.ok, "throughput": round(self.throughput, 1)}


Delivery = tuple[int, int, int]  # (group, n, monotonic_ns at the handler's start)


def verify(expected: list[int], deliveries: Iterable[Delivery]) -> list[str]:
    """The problems with ``deliveries`` against ``expected[g]`` messages per group: missing,
    duplicated or out-of-order messages, and unknown ones. Empty when all is well."""
    by_group: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for g, n, at in deliveries:
        by_group[g].append((at, n))
    problems: list[str] = []
    missing = duplicated = 0
    disordered: list[int] = []
    for g in set(by_group) - set(range(len(expected))):
        problems.append(f"group {g}: {len(by_group[g])} deliveries of an unknown group")
    for g, count in enumerate(expected):
        order = [n for _, n in sorted(by_group.get(g, []))]
        missing += len(set(range(count)) - set(order))
        duplicated += len(order) - len(set(order))
        unknown = [n for n in order if not 0 <= n < count]
        if unknown:
            problems.append(f"group {g}: unknown message(s) {unknown[:5]}")
        firsts = list(dict.fromkeys(order))
        if firsts != sorted(firsts):
            disordered.append(g)
    if missing:
        problems.append(f"{missing} message(s) never delivered")
    if duplicated:
        problems.append(f"{duplicated} message(s) delivered more than once")
    if disordered:
        problems.append(f"{len(disordered)} group(s) delivered out of order, e.g. {disordered[:5]}")
    return problems


def _open(config: DemoConfig) -> Any:
    from harel_sa.sqlite.transport import SqliteTransport

    if config.api.split("://", 1)[0].split("+", 1)[0] in ("postgresql", "postgres"):
        # Workers on PostgreSQL claim in parallel, each process on its own connections.
        from harel_sa.postgres.transport import PostgresTransport

        return PostgresTransport(
            config.api, prefix=config.prefix, create_schema=False, busy_timeout=_BUSY_TIMEOUT
        )
    return SqliteTransport(
        config.api,
        prefix=config.prefix,
        create_schema=False,
        synchronous=config.synchronous,
        busy_timeout=_BUSY_TIMEOUT,
    )


class _Shared:
    """What the parent and its children share: readiness, the start, the end, the counts."""

    def __init__(self, ctx: Any, config: DemoConfig) -> None:
        self.ready = ctx.Value("i", 0)
        self.go = ctx.Event()
        self.done = ctx.Event()
        self.published = ctx.Array("q", config.producers, lock=False)
        self.handled = ctx.Array("q", config.workers, lock=False)
        self.results = ctx.Queue()

    def set_ready_and_wait(self) -> bool:
        """A child is set up; wait for the start. ``False``: the demo ended meanwhile."""
        with self.ready.get_lock():
            self.ready.value += 1
        while not self.go.wait(0.1):
            if self.done.is_set():
                return False
        return not self.done.is_set()


def producer_main(index: int, config: DemoConfig, shared: _Shared) -> None:
    """Publish the messages of groups ``index, index + producers, ...``, in batches: each
    group's in order, interleaved across the groups."""
    from harel_sa.events import Event

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    transport = _open(config)
    counts = config.per_group()
    mine = range(index, config.groups, config.producers)
    items = [
        (config.group_name(g), Event(kind="demo", data={"g": g, "n": n}))
        for n in range(max((counts[g] for g in mine), default=0))
        for g in mine
        if n < counts[g]
    ]
    if shared.set_ready_and_wait():
        for start in range(0, len(items), _BATCH):
            if shared.done.is_set():
                break
            chunk = items[start : start + _BATCH]
            while True:
                try:
                    transport.publish_many(chunk)  # all or none: safe to try again
                    break
                except BusyError:
                    continue
            shared.published[index] += len(chunk)
    transport.close()


def worker_main(index: int, config: DemoConfig, shared: _Shared) -> None:
    """Run a :class:`~harel_sa.Worker` until the parent sets ``done``; send back what it
    delivered."""
    from harel_sa.events import Event, Lease

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Imported here: harel-sa imports this module for every command, and only this needs it.
    from harel_sa.worker import Worker

    transport = _open(config)
    deliveries: list[Delivery] = []
    lock = threading.Lock()

    def handle(lease: Lease[Event]) -> None:
        data = lease.event.data
        deliveries.append((data["g"], data["n"], time.monotonic_ns()))
        if config.work:
            time.sleep(config.work)
        with lock:
            shared.handled[index] += 1

    worker = Worker(
        transport,
        handle,
        worker_id=f"worker-{index + 1}",
        concurrency=config.concurrency,
        poll_interval=0.005,
        grace=30.0,
        handle_signals=False,  # SIGINT stays ignored: the parent stops us with ``done``
    )

    def stop_when_done() -> None:
        shared.done.wait()
        worker.stop()

    threading.Thread(target=stop_when_done, daemon=True).start()
    if shared.set_ready_and_wait():
        worker.run()
    shared.results.put((index, deliveries))
    transport.close()


def run(config: DemoConfig, tick: Callable[[int, int], None] = lambda d, p: None) -> DemoReport:
    """Run the demo on a file whose queue (under the prefix) is empty and at head; ``tick``
    gets (handled, published) about every 50 ms. Every child is gone when this returns."""
    ctx = _context()
    shared = _Shared(ctx, config)
    producers = [
        ctx.Process(target=producer_main, args=(i, config, shared), daemon=True)
        for i in range(config.producers)
    ]
    workers = [
        ctx.Process(target=worker_main, args=(i, config, shared), daemon=True)
        for i in range(config.workers)
    ]
    children = producers + workers
    # The forkserver, started by the first start, and spawned children inherit SIGINT
    # ignored (then ignored even while they import); each child also ignores it itself.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for process in children:
            process.start()
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        return _watch(config, shared, children, len(workers), tick)
    finally:
        _end(shared, children)


def _context() -> Any:
    """Where the children come from: a ``forkserver`` that preloads this module and the
    worker (a child forked from the server starts with harel_sa imported, where a fresh
    interpreter would import it anew), else ``spawn``."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__, "harel_sa.worker.threads"])
    return ctx


def _end(shared: _Shared, children: list[Any]) -> None:
    """Stop the children (reading what they still send, so none blocks on a full pipe)."""
    shared.done.set()
    deadline = time.monotonic() + 10.0
    while any(p.is_alive() for p in children) and time.monotonic() < deadline:
        with suppress(Empty):
            shared.results.get(timeout=0.05)
    for process in children:
        if process.is_alive():
            process.terminate()
        process.join()


def _started(config: DemoConfig, shared: _Shared, children: list[Any]) -> str | None:
    """Wait until every child is ready, then start them all; or say why not."""
    deadline = time.monotonic() + _READY_TIMEOUT
    while shared.ready.value < len(children):
        if any(p.exitcode is not None for p in children):
            return "a demo process died while starting: " + _exit_codes(children)
        if time.monotonic() > deadline:
            return f"the demo processes were not ready after {_READY_TIMEOUT:.0f}s"
        time.sleep(0.02)
    shared.go.set()
    return None


def _watch(
    config: DemoConfig,
    shared: _Shared,
    children: list[Any],
    workers: int,
    tick: Callable[[int, int], None],
) -> DemoReport:
    failed = _started(config, shared, children)
    start = time.perf_counter()
    publish_end = end = start if failed else None
    problems = [failed] if failed else []
    while end is None:
        time.sleep(0.05)
        now = time.perf_counter()
        total, pub = sum(shared.handled), sum(shared.published)
        tick(total, pub)
        if publish_end is None and pub >= config.messages:
            publish_end = now
        if total >= config.messages and publish_end is not None:
            end = now
        elif now - start > config.timeout:
            problems.append(f"timed out after {config.timeout:g}s: {total} handled")
            end = now
        elif any(p.exitcode not in (None, 0) for p in children):
            problems.append("a demo process died: " + _exit_codes(children))
            end = now
    shared.done.set()
    deliveries: list[Delivery] = []
    shares: dict[str, int] = {}
    for _ in range(workers if not failed else 0):
        try:
            index, got = shared.results.get(timeout=60)
        except Empty:
            problems.append("a worker sent no report")
            break
        deliveries += got
        shares[f"worker-{index + 1}"] = len(got)
    if not problems:
        problems = verify(config.per_group(), deliveries)
    return DemoReport(
        messages=config.messages,
        seconds=end - start,
        publish_seconds=(publish_end or end) - start,
        shares=dict(sorted(shares.items())),
        problems=problems,
    )


def _exit_codes(processes: list[Any]) -> str:
    return ", ".join(f"{p.name}={p.exitcode}" for p in processes if p.exitcode not in (None, 0))
