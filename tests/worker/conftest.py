"""Run a :class:`~harel_sa.Worker` or an :class:`~harel_sa.AsyncWorker` the same way.

A :class:`Behaviour` says what the handler does (fail its first deliveries, wait on a gate,
meet the other handlers at a rendezvous); :class:`Running` drives either worker kind on a
background thread over a real file, so each test is written once and runs on both kinds.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from harel_sa import AsyncSqliteTransport, Event, Lease, SqliteTransport
from harel_sa.worker import AsyncWorker, Observer, Worker, WorkerStats

HANG = 20.0  # a guard against hangs, never a timing assertion


def wait_until(condition: Callable[[], object], what: str, timeout: float = HANG) -> None:
    """Poll ``condition`` until true; fail the test (not hang) if it never becomes true."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.01)


class Durations(Observer):
    """An observer that keeps each handler duration it is told."""

    def __init__(self) -> None:
        self.seen: list[float] = []

    def handler_duration(self, seconds: float) -> None:
        self.seen.append(seconds)


@dataclass
class Behaviour:
    """What the handler does with each lease, identical for both worker kinds."""

    fail_first: int = 0  # raise on this many first calls
    gate: threading.Event | None = None  # wait for it before returning
    rendezvous: int = 0  # wait until this many handlers run at once (0: don't)
    does: Callable[[Lease[Event]], object] | None = None  # what else it does (after waiting)
    calls: list[Lease[Event]] = field(default_factory=list)
    running: int = 0
    most_running: int = 0
    started: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def enter(self, lease: Lease[Event]) -> bool:
        """Record the call; ``True`` if this call must fail."""
        with self._lock:
            self.calls.append(lease)
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            self.started.set()
            return len(self.calls) <= self.fail_first

    def waiting(self) -> bool:
        """Whether the handler must still wait (gate closed, rendezvous not met)."""
        gate = self.gate is not None and not self.gate.is_set()
        return gate or (self.rendezvous > 0 and self.most_running < self.rendezvous)

    def leave(self, fail: bool) -> None:
        with self._lock:
            self.running -= 1
        if fail:
            raise RuntimeError("handler failed on purpose")

    def sync_handler(self, lease: Lease[Event]) -> None:
        fail = self.enter(lease)
        deadline = time.monotonic() + HANG
        while self.waiting() and time.monotonic() < deadline:
            time.sleep(0.005)
        self.leave(fail or self.waiting())
        if self.does is not None:
            self.does(lease)

    async def async_handler(self, lease: Lease[Event]) -> None:
        fail = self.enter(lease)
        deadline = time.monotonic() + HANG
        while self.waiting() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        self.leave(fail or self.waiting())
        if self.does is not None:
            done = self.does(lease)
            if asyncio.iscoroutine(done):
                await done


class Running:
    """A worker of ``kind`` running on a thread of its own until it returns.

    ``clock``, ``busy_timeout`` and ``create_schema`` go to the transport, the rest to the
    worker; ``run`` holds the arguments of ``run()``.
    """

    def __init__(
        self, kind: str, db: str, behaviour: Behaviour, run: dict[str, Any], **options: Any
    ):
        self.kind = kind
        self.transport: SqliteTransport[Event] | AsyncSqliteTransport[Event] | None = None
        self.result: WorkerStats | None = None
        self.error: BaseException | None = None
        self._worker: Worker[Event] | AsyncWorker[Event] | None = None
        self._ready = threading.Event()
        options.setdefault("poll_interval", 0.01)
        self._open = {
            k: options.pop(k) for k in ("clock", "busy_timeout", "create_schema") if k in options
        }
        target = self._sync if kind == "sync" else self._async
        self._thread = threading.Thread(
            target=target, args=(db, behaviour, run, options), daemon=True
        )
        self._thread.start()
        self._ready.wait(HANG)

    def _sync(self, db: str, behaviour: Behaviour, run: dict[str, Any], options: Any) -> None:
        try:
            with SqliteTransport(db, **self._open) as transport:
                self.transport = transport
                worker = Worker(transport, behaviour.sync_handler, **options)
                self._worker = worker
                self._ready.set()
                self.result = worker.run(**run)
        except BaseException as exc:
            self.error = exc
        finally:
            self._ready.set()

    def _async(self, db: str, behaviour: Behaviour, run: dict[str, Any], options: Any) -> None:
        async def main() -> None:
            transport = await AsyncSqliteTransport.create(db, **self._open)
            self.transport = transport
            try:
                worker = AsyncWorker(transport, behaviour.async_handler, **options)
                self._worker = worker
                self._ready.set()
                self.result = await worker.run(**run)
            finally:
                await transport.close()

        try:
            asyncio.run(main())
        except BaseException as exc:
            self.error = exc
        finally:
            self._ready.set()

    def stop(self) -> None:
        if self._worker is not None:
            self._worker.stop()

    def join(self) -> WorkerStats:
        """Wait for ``run`` to return (fails the test rather than hang); its stats."""
        self._thread.join(HANG)
        if self._thread.is_alive():
            pytest.fail("the worker did not return")
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def start(kind: str, db: str) -> Iterator[Callable[..., Running]]:
    """``start(behaviour, run={...}, **options)``: a running worker of each kind on ``db``."""
    started: list[Running] = []

    def start(behaviour: Behaviour, run: dict[str, Any] | None = None, **options: Any) -> Running:
        running = Running(kind, db, behaviour, run or {}, **options)
        started.append(running)
        return running

    yield start
    for running in started:
        if running._thread.is_alive():
            running.stop()
            running._thread.join(HANG)
