"""The worker's policy, written once for both drivers (see :mod:`harel_sa.worker`).

Everything a worker decides is here: the options and backoff, the state of one run
(:class:`RunState`: budget, stop and grace, held leases, counters) and the two programs,
:func:`slot_program` (one handler slot) and :func:`heartbeat_program`. A program is a
generator that yields *steps* (``Claim``, ``Handle``, ``AckAndClaim``, ``Nack``, ``Extend``,
``Sleep`` ...) and receives each step's result; it never touches the database or the clock of
the queue. A driver only performs steps: :mod:`~harel_sa.worker.threads` with blocking calls,
:mod:`~harel_sa.worker.tasks` with awaited ones.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field, fields
from typing import Any, TypedDict, TypeVar

from harel_sa import validate
from harel_sa.errors import (
    BusyError,
    HarelSAError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    TransportClosedError,
)
from harel_sa.events import Lease

log = logging.getLogger("harel_sa.worker")

T = TypeVar("T")
H = TypeVar("H")


@dataclass(frozen=True, slots=True)
class Backoff:
    """The delay before a failed message is retried, from how often it was delivered.

    ``delay(deliveries) = min(cap, base * factor ** (deliveries - 1))``, then shortened by a
    random fraction of at most ``jitter`` (so retries of many messages spread out and never
    exceed ``cap``). ``jitter=0`` makes it exact.
    """

    base: float = 1.0
    factor: float = 2.0
    cap: float = 300.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if not (self.base >= 0 and self.factor >= 1 and self.cap >= 0 and 0 <= self.jitter <= 1):
            raise InvalidArgumentError(
                "Backoff needs base >= 0, factor >= 1, cap >= 0 and 0 <= jitter <= 1"
            )

    def delay(self, deliveries: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to park a message that failed on its ``deliveries``-th delivery."""
        exponent = max(0, deliveries - 1)
        try:
            raw = self.base * self.factor**exponent
        except OverflowError:
            raw = self.cap
        return min(self.cap, raw) * (1.0 - self.jitter * rand())


def default_worker_id() -> str:
    """``host:pid:random``: unique per worker, readable in ``peek``'s ``locked_by``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """A worker's settings, checked once (``InvalidArgumentError`` on a bad value)."""

    worker_id: str = field(default_factory=default_worker_id)
    visibility: float = 30.0
    concurrency: int = 1
    min_priority: int = 0
    routing_keys: tuple[str, ...] | None = None
    max_deliveries: int | None = None
    backoff: Backoff = field(default_factory=Backoff)
    poll_interval: float = 0.1
    grace: float = 10.0

    def __post_init__(self) -> None:
        validate.text("worker_id", self.worker_id)
        validate.seconds("visibility", self.visibility, allow_zero=False)
        validate.count("concurrency", self.concurrency)
        validate.priority("min_priority", self.min_priority)
        validate.routing_keys(self.routing_keys)
        if self.max_deliveries is not None:
            validate.count("max_deliveries", self.max_deliveries)
        if not isinstance(self.backoff, Backoff):
            raise InvalidArgumentTypeError("backoff must be a Backoff")
        validate.seconds("poll_interval", self.poll_interval, allow_zero=False)
        validate.seconds("grace", self.grace, allow_zero=True)

    @property
    def heartbeat_period(self) -> float:
        """Held leases are extended this often: three chances before one lapses."""
        return self.visibility / 3

    def claim_args(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "visibility": self.visibility,
            "min_priority": self.min_priority,
            "routing_keys": self.routing_keys,
            "max_deliveries": self.max_deliveries,
        }


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """What one :meth:`Worker.run` did.

    ``claimed`` leases received; ``succeeded`` handlers returned and their ack took;
    ``failed`` handlers raised (their message was nacked with a backoff delay); ``lost`` leases
    found lost (an extend or the ack/nack returned ``False``); ``released`` leases given back
    with ``nack(0)`` when the grace ran out.
    """

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    lost: int = 0
    released: int = 0


# The steps a program yields; the driver performs each and sends back its result.
@dataclass(frozen=True, slots=True)
class Claim:
    """-> ``Lease | None``"""


@dataclass(frozen=True, slots=True)
class Handle:
    """Run the handler -> the ``Exception`` it raised, or ``None``."""

    lease: Lease[Any]


@dataclass(frozen=True, slots=True)
class Ack:
    """-> ``bool``"""

    lease: Lease[Any]


@dataclass(frozen=True, slots=True)
class AckAndClaim:
    """-> ``(bool, Lease | None)``"""

    lease: Lease[Any]


@dataclass(frozen=True, slots=True)
class Nack:
    """-> ``bool``"""

    lease: Lease[Any]
    delay: float


@dataclass(frozen=True, slots=True)
class Extend:
    """-> ``bool``"""

    lease: Lease[Any]


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``seconds``; end early when the worker stops (``wake_on_stop``) or is done."""

    seconds: float
    wake_on_stop: bool


Step = Claim | Handle | Ack | AckAndClaim | Nack | Extend | Sleep
Program = Generator[Step, object, None]

#: The result of a transport step that did not win SQLite's write lock in time (``BusyError``):
#: nothing happened, and the program tries again later.
BUSY = object()


class RunState:
    """The decisions of one run, shared by its slots and heartbeat (thread-safe)."""

    def __init__(self, options: WorkerOptions, max_messages: int | None, until_empty: bool):
        if max_messages is not None and max_messages < 1:
            raise InvalidArgumentError(f"max_messages must be >= 1, not {max_messages!r}")
        self.options = options
        self._lock = threading.RLock()  # RLock: a signal handler may stop mid-section
        self._budget = max_messages
        self._until_empty = until_empty
        self._held: dict[str, Lease[Any]] = {}
        self._lost: set[str] = set()
        self._in_handlers = 0
        self._counts = {f.name: 0 for f in fields(WorkerStats)}
        self.stopping = False
        self.done = False
        self.fatal: BaseException | None = None  # see crashed()
        self._deadline: float | None = None
        self._settle_by: float | None = None
        self.on_stop: Callable[[], None] = lambda: None  # the driver's wake-up

    # -- stop and grace --------------------------------------------------------------------
    def request_stop(self) -> None:
        """First call: stop claiming, grace starts. A second call ends the grace now."""
        with self._lock:
            now = time.monotonic()
            self._deadline = now if self.stopping else now + self.options.grace
            self.stopping = True
        self.on_stop()

    def grace_left(self) -> float | None:
        """Seconds of grace left once stopping (never negative); ``None`` while running."""
        with self._lock:
            return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def may_abandon(self, alive: int) -> bool:
        """Once the grace is over: may the driver abandon (threads) or cancel (tasks) its
        ``alive`` slots now? Yes when each is inside its handler; a slot outside it is in a
        quick transport call (an ack, a claim) that should land first, so it gets up to
        ``SETTLE`` seconds more."""
        with self._lock:
            if self._settle_by is None:
                self._settle_by = time.monotonic() + SETTLE
            return alive <= self._in_handlers or time.monotonic() > self._settle_by

    def release_all(self) -> list[Lease[Any]]:
        """The leases still held when the run ends: the driver gives them back (``nack(0)``)."""
        with self._lock:
            leases, self._held = list(self._held.values()), {}
            return leases

    # -- claiming --------------------------------------------------------------------------
    def reserve(self) -> bool:
        """May a slot claim (again)? Takes one from ``max_messages`` if set."""
        with self._lock:
            if self.stopping or self.done or self._budget == 0:
                return False
            if self._budget is not None:
                self._budget -= 1
            return True

    def unreserve(self) -> None:
        """A reserved claim did not happen (the write lock was busy): give it back."""
        with self._lock:
            if self._budget is not None:
                self._budget += 1

    def nothing_claimed(self) -> float | None:
        """A claim found nothing: the idle sleep, or ``None`` when the slot should end."""
        self.unreserve()
        with self._lock:
            if self._until_empty or self.stopping:
                return None
        return self.options.poll_interval

    def claimed(self, lease: Lease[Any]) -> None:
        with self._lock:
            self._held[lease.locked_by] = lease
            self._counts["claimed"] += 1

    # -- after the handler -----------------------------------------------------------------
    def handling(self) -> None:
        with self._lock:
            self._in_handlers += 1

    def in_handlers(self) -> int:
        """How many slots are inside their handler now (the others are between quick steps)."""
        with self._lock:
            return self._in_handlers

    def handled(self, lease: Lease[Any], error: BaseException | None) -> float | None:
        """The handler finished: ``None`` to ack, else the delay of the nack.

        The lease leaves the held set *before* the ack or nack, so a heartbeat racing it
        cannot mistake the settled lease for a lost one.
        """
        with self._lock:
            self._in_handlers -= 1
            self._held.pop(lease.locked_by, None)
            if error is None:
                return None
            self._counts["failed"] += 1
        log.warning(
            "handler failed on %s seq %d (delivery %d)",
            lease.group_id,
            lease.seq,
            lease.deliveries,
            exc_info=error,
        )
        return self.options.backoff.delay(lease.deliveries)

    def settled(self, lease: Lease[Any], ok: bool, *, acked: bool) -> None:
        """The ack (``acked``) or nack of ``lease`` returned ``ok``."""
        with self._lock:
            if ok and acked:
                self._counts["succeeded"] += 1
            elif not ok:
                self._note_lost(lease, "ack" if acked else "nack")

    def extended(self, lease: Lease[Any], ok: bool) -> None:
        """A heartbeat's extend returned ``ok``; ``False`` on a still-held lease means lost."""
        with self._lock:
            if not ok and lease.locked_by in self._held:
                self._note_lost(lease, "extend")

    def _note_lost(self, lease: Lease[Any], what: str) -> None:
        if lease.locked_by in self._lost:
            return
        self._lost.add(lease.locked_by)
        self._counts["lost"] += 1
        log.warning("lease on %s seq %d lost (%s returned False)", lease.group_id, lease.seq, what)

    def released(self, ok: bool) -> None:
        with self._lock:
            self._counts["released" if ok else "lost"] += 1

    def held(self) -> list[Lease[Any]]:
        with self._lock:
            return list(self._held.values())

    # -- transport errors ------------------------------------------------------------------
    def transport_failed(self, step: Step, exc: HarelSAError) -> object:
        """A transport call raised: log, stop if the transport is gone, and return the result
        that makes the program carry on: :data:`BUSY` when the write lock was busy (the
        program tries again), else nothing claimed, nothing acked."""
        if isinstance(exc, InvalidArgumentError):  # a bug, not weather: stop, don't spin
            self.crashed(exc)
        elif isinstance(exc, BusyError):
            log.warning("%s: %s; will retry", type(step).__name__, exc)
            return BUSY
        else:
            log.warning("%s failed: %s", type(step).__name__, exc)
        if isinstance(exc, TransportClosedError) and not self.stopping:
            self.request_stop()
        if isinstance(step, Claim):
            return None
        if isinstance(step, AckAndClaim):
            return (False, None)
        return False

    def crashed(self, exc: BaseException) -> None:
        """A slot or the heartbeat died of an unexpected error: log it and stop the run
        (what the worker holds is then released, as on any stop). A ``KeyboardInterrupt``,
        ``SystemExit`` or other exception that is not an ``Exception`` is kept, and the run
        raises it again once it has released what it held (:meth:`raise_fatal`)."""
        if not isinstance(exc, Exception):
            with self._lock:
                if self.fatal is None:
                    self.fatal = exc
        log.error("worker %s: %r; stopping", self.options.worker_id, exc, exc_info=exc)
        self.request_stop()

    def raise_fatal(self) -> None:
        """At the end of a run: raise again the first ``BaseException`` a slot died of."""
        if self.fatal is not None:
            raise self.fatal

    def stats(self) -> WorkerStats:
        with self._lock:
            return WorkerStats(**self._counts)


def _lease(result: object) -> Lease[Any] | None:
    return result if isinstance(result, Lease) else None


def _idle(state: RunState) -> Generator[Step, object, bool]:
    """After an empty claim: sleep and return ``True`` to go on, or ``False`` to end."""
    pause = state.nothing_claimed()
    if pause is None:
        return False
    yield Sleep(pause, wake_on_stop=True)
    return True


def _settle(state: RunState, step: Step) -> Generator[Step, object, object]:
    """Perform an ack or nack; while SQLite's write lock stays busy, try again every
    ``poll_interval`` (the lease is not given up for a busy moment) until the run is done."""
    while True:
        result = yield step
        if result is not BUSY or state.done:
            return result
        yield Sleep(state.options.poll_interval, wake_on_stop=False)
        if isinstance(step, AckAndClaim) and state.stopping:  # stopped meanwhile: no claim
            state.unreserve()
            step = Ack(step.lease)


def slot_program(state: RunState) -> Program:
    """One handler slot: claim, handle, then ack-and-claim / ack / nack, until told to end."""
    lease: Lease[Any] | None = None
    while True:
        if lease is None:
            if not state.reserve():
                return
            result = yield Claim()
            if result is BUSY:
                state.unreserve()
                yield Sleep(state.options.poll_interval, wake_on_stop=True)
                continue
            lease = _lease(result)
            if lease is None:
                if (yield from _idle(state)):
                    continue
                return
            state.claimed(lease)
        state.handling()
        result = yield Handle(lease)
        delay = state.handled(lease, result if isinstance(result, BaseException) else None)
        if delay is not None:
            state.settled(
                lease, (yield from _settle(state, Nack(lease, delay))) is True, acked=False
            )
            lease = None
        elif state.reserve():
            pair = yield from _settle(state, AckAndClaim(lease))
            ok, following = pair if isinstance(pair, tuple) else (pair, None)
            state.settled(lease, ok is True, acked=True)
            lease = _lease(following)
            if lease is not None:
                state.claimed(lease)
            elif not (yield from _idle(state)):
                return
        else:
            state.settled(lease, (yield from _settle(state, Ack(lease))) is True, acked=True)
            lease = None


def heartbeat_program(state: RunState) -> Program:
    """Extend every held lease each ``visibility / 3`` seconds until the run is done."""
    while True:
        yield Sleep(state.options.heartbeat_period, wake_on_stop=False)
        if state.done:
            return
        for lease in state.held():
            result = yield Extend(lease)
            if result is not BUSY:  # a busy lock is not a lost lease: next beat tries again
                state.extended(lease, result is True)


class WorkerKwargs(TypedDict, total=False):
    """The keyword options of :class:`Worker` and :class:`AsyncWorker` (see
    :class:`WorkerOptions`), plus ``handle_signals`` (default ``True``)."""

    worker_id: str
    visibility: float
    concurrency: int
    min_priority: int
    routing_keys: Iterable[str] | None
    max_deliveries: int | None
    backoff: Backoff
    poll_interval: float
    grace: float
    handle_signals: bool


def checked(transport: T, kind: type, handler: H) -> tuple[T, H]:
    """The driver's ``transport`` (of ``kind``) and ``handler``, or ``InvalidArgumentTypeError``."""
    if not isinstance(transport, kind):
        raise InvalidArgumentTypeError(
            f"transport must be a {kind.__name__}, not {type(transport).__name__}"
        )
    if not callable(handler):
        raise InvalidArgumentTypeError(f"handler must be callable, not {type(handler).__name__}")
    return transport, handler


def options_from(kwargs: WorkerKwargs) -> tuple[WorkerOptions, bool]:
    given: dict[str, Any] = dict(kwargs)
    handle_signals = bool(given.pop("handle_signals", True))
    if given.get("routing_keys") is not None:
        given["routing_keys"] = tuple(given["routing_keys"])
    return WorkerOptions(**given), handle_signals


POLL = 0.05  # how often a driver's run looks at its slots, the grace and signals
SIGNALS = (signal.SIGTERM, signal.SIGINT)  # each asks the run to stop
SETTLE = 5.0  # after the grace, how long slots between steps get to finish their call


def on_main_thread(enabled: bool) -> bool:
    """Whether a run should handle signals: asked to, and able to (main thread only)."""
    return enabled and threading.current_thread() is threading.main_thread()
