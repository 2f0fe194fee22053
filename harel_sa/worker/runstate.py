"""The state of one worker run and the decisions it makes, for both drivers.

:class:`RunState` holds the budget (``max_messages``), the stop and the grace, the leases held,
the counters and the exception that must leave ``run()``. Its methods decide what follows each
event (a claim, a handler's outcome, a settle, a transport error), log it and tell the observer.
It never touches the database: the programs ask it, the drivers perform what they yield.
Thread-safe: the slots, the heartbeat and a signal handler call it at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from harel_sa.errors import (
    HarelSAError,
    InvalidArgumentError,
    SchemaError,
    TransportClosedError,
)
from harel_sa.events import Lease
from harel_sa.rules import count_dead_at_claim, take_dead_at_claim
from harel_sa.settlements import How
from harel_sa.worker.operations import RETRIED, Ack, Bury, Done, Nack, Settle, Verdict
from harel_sa.worker.options import WorkerOptions
from harel_sa.worker.outcomes import Interrupted, Outcome, Returned, after_failure, log_fields

# INFO: start, stop, releases, dead letters; WARNING: handler failures with the retry time, lost
# leases, a late heartbeat, a blocked event loop; DEBUG: each message. Logging is never configured.
log = logging.getLogger("harel_sa.worker")

SETTLE = 5.0  # after the grace, how long slots between two quick calls get to land them


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """What one ``run()`` did.

    ``claimed``: leases received. ``succeeded``: handlers that returned and whose ack took (or
    that acked their lease themselves). ``failed``: handlers that raised an error (the message
    was retried after the backoff, or dead-lettered at its last delivery). ``retried``:
    handlers that raised :class:`~harel_sa.Retry` (or nacked their lease themselves).
    ``dead_lettered``: messages this run moved to the dead table (:class:`~harel_sa.DeadLetter`,
    the last delivery failing, or the handler's own ``dead_letter``). ``dead_at_claim``:
    messages its claims moved there instead of leasing them (an event that does not decode,
    one delivered ``max_deliveries`` times already). ``lost``: leases found
    lost (an extend, ack, nack or dead-letter that returned ``False``). ``released``: leases
    given back with ``nack(0)`` at the end of the grace, or after a handler's
    ``KeyboardInterrupt``/``SystemExit``.
    """

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    dead_at_claim: int = 0
    lost: int = 0
    released: int = 0


class RunState:
    """One run of a worker: what it may still do, what it holds, and what it did."""

    def __init__(self, options: WorkerOptions, max_messages: int | None, until_empty: bool):
        if max_messages is not None and (
            isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1
        ):
            raise InvalidArgumentError(f"max_messages must be >= 1, not {max_messages!r}")
        self.options = options
        self._observer = options.observer
        self.lock = threading.RLock()  # RLock: a signal handler may stop mid-section
        self._budget = max_messages
        self.until_empty = until_empty
        # Keyed by lease token: unique in this process (``events.tokens``), cheaper than
        # ``locked_by``.
        self._held: dict[str, Lease[Any]] = {}
        self.in_handlers = 0  # leases handed to a handler and not back (under the lock)
        self._by_handler: dict[str, How] = {}  # settled by their own handler
        self._lost: set[str] = set()
        self._counts = {f.name: 0 for f in fields(WorkerStats)}
        self.stopping = False
        self.done = False
        self.fatal: BaseException | None = None
        self._deadline: float | None = None
        self._settle_by: float | None = None
        self.on_stop: Callable[[], None] = _nothing  # the driver's wake-up (and the batcher's)

    def started(self, database: str, prefix: str, kind: str) -> None:
        """The INFO line every run starts with; from now on its claims' dead letters count."""
        o = self.options
        count_dead_at_claim(o.worker_id, True)
        log.info(
            "worker %s started (%s) on %s, prefix %s: %s",
            o.worker_id,
            kind,
            database,
            prefix,
            o.describe(),
            extra={"worker_id": o.worker_id, "database": database, "prefix": prefix},
        )

    # -- stop and grace --------------------------------------------------------------------
    def request_stop(self, why: str = "stop() called") -> None:
        """First call: stop claiming, the grace starts. A second call ends the grace now."""
        with self.lock:
            now = time.monotonic()
            again = self.stopping
            self._deadline = now if again else now + self.options.grace
            self.stopping = True
            held = len(self._held)
        if again:
            log.info("%s again: ending the grace now", why)
        else:
            log.info(
                "%s: stopping; no more claims, %d handler(s) in flight get %gs of grace",
                why,
                held,
                self.options.grace,
                extra={"worker_id": self.options.worker_id},
            )
        self.on_stop()

    def interrupted(self, error: BaseException) -> None:
        """``run()`` itself was interrupted while waiting: no grace; what is held is released,
        then ``run()`` re-raises ``error``."""
        with self.lock:
            self._keep_fatal(error)
            self.stopping = True
            self._deadline = self._settle_by = time.monotonic()
        log.warning("run interrupted (%s): releasing what is held now", type(error).__name__)
        self.on_stop()

    def grace_left(self) -> float | None:
        """Seconds of grace left once stopping (never negative); ``None`` while running."""
        with self.lock:
            return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def may_abandon(self, alive: int) -> bool:
        """Once the grace is over: may the driver abandon its ``alive`` slots now? Yes when
        each is inside its handler; one in a quick transport call gets ``SETTLE`` more seconds
        to land it."""
        with self.lock:
            if self._settle_by is None:
                self._settle_by = time.monotonic() + SETTLE
            return alive <= self.in_handlers or time.monotonic() > self._settle_by

    def release_all(self) -> list[Lease[Any]]:
        """The leases still held at the end, for the driver to give back (``nack(0)``)."""
        with self.lock:
            leases, self._held = list(self._held.values()), {}
        if leases:
            log.info("grace over: releasing %d lease(s) with nack(0)", len(leases))
        return leases

    def released(self, lease: Lease[Any], done: Done | HarelSAError) -> None:
        """The ``nack(0)`` that gives ``lease`` back at the end returned ``done``."""
        if isinstance(done, Done) and done.ok:
            self._count("released")
            _about(logging.INFO, "released", lease)
        else:
            self._note_lost(lease, "release")

    def finish(self) -> None:
        """The run is over: nothing more is claimed, settled or extended."""
        self._count("dead_at_claim", count_dead_at_claim(self.options.worker_id, False))
        with self.lock:
            self.done = True
        log.info(
            "worker %s stopped: %s",
            self.options.worker_id,
            " ".join(f"{k}={v}" for k, v in self._counts.items()),
            extra={"worker_id": self.options.worker_id, **self._counts},
        )

    # -- claiming --------------------------------------------------------------------------
    def reserve(self) -> bool:
        """May a slot claim (again)? Takes one from ``max_messages`` if set."""
        return self.reserve_many(1) == 1

    def reserve_many(self, wanted: int) -> int:
        """How many of ``wanted`` claims may be made (taken from ``max_messages``); 0 once
        stopping."""
        with self.lock:
            if self.stopping or self.done or self._budget == 0:
                return 0
            if self._budget is None:
                return wanted
            granted = min(wanted, self._budget)
            self._budget -= granted
            return granted

    def unreserve(self, claims: int = 1) -> None:
        """Reserved claims that did not happen or found nothing: give them back."""
        with self.lock:
            if self._budget is not None:
                self._budget += claims

    def nothing_claimed(self) -> float | None:
        """A claim found nothing: the idle pause, or ``None`` when the slot should end.

        With ``until_empty`` a slot ends only once no slot holds a lease: a settle still to come
        may free a group, and PostgreSQL's claim skips the groups another slot's ack has locked.
        """
        self.unreserve()
        self._count("dead_at_claim", take_dead_at_claim(self.options.worker_id))
        with self.lock:
            if self.stopping or (self.until_empty and not self._held):
                return None
        return self.options.poll_interval

    def claimed(self, lease: Lease[Any], seconds: float) -> None:
        """A claim that took ``seconds`` returned ``lease``: it is held from now on."""
        self.landed((), (), "", (lease,), 0, seconds)

    # -- the handler -----------------------------------------------------------------------
    def handling(self) -> None:
        """A slot hands its lease to the handler (:meth:`plan` takes it back)."""
        with self.lock:
            self.in_handlers += 1

    def settled_by_handler(self, lease: Lease[Any], how: How, delay: float) -> None:
        """The handler itself settled ``lease`` (``how``; a nack's ``delay`` is unused)."""
        with self.lock:
            if self._held.pop(lease.token, None) is not None:
                self._by_handler[lease.token] = how

    def plan(self, lease: Lease[Any], outcome: Outcome, seconds: float | None) -> Verdict | None:
        """The handler of ``lease`` ended with ``outcome`` after ``seconds`` (``None``: told
        already): what to send (``None``: nothing, the handler settled it). The lease leaves
        the held set first, so a racing heartbeat cannot mistake it for a lost one."""
        with self.lock:
            own = self._leave(lease)
        if seconds is not None:
            self.handler_took(seconds)
        if own is not None:
            self._count_handlers_own(lease, own)
            return None
        if isinstance(outcome, Returned):  # a batching run claims in batches, never fused
            return Ack(lease, self.options, fused=not self.options.batching and self.reserve())
        if isinstance(outcome, Interrupted):
            self._keep_fatal(outcome.error)
            self.request_stop(f"handler raised {type(outcome.error).__name__} on {lease.group_id}")
            return Nack(lease, 0.0, release=True)
        op, counted = after_failure(lease, outcome.error, self.options)
        if counted:
            self._count(counted)
        return op

    def _leave(self, lease: Lease[Any]) -> How | None:
        """Under the lock: the handler of ``lease`` is over and the lease no longer held; what
        the handler did to it itself, if anything."""
        self.in_handlers -= 1
        token = lease.token
        self._held.pop(token, None)
        return self._by_handler.pop(token, None)

    def left(self, leases: list[Lease[Any]]) -> list[Lease[Any]]:
        """The handlers of ``leases`` (a batch's) returned: the leases whose ack is still to
        send (those the handler settled itself are counted)."""
        kept: list[Lease[Any]] = []
        own: list[tuple[Lease[Any], How]] = []
        with self.lock:
            for lease in leases:
                settled = self._leave(lease)
                if settled is None:
                    kept.append(lease)
                else:
                    own.append((lease, settled))
        for lease, how in own:
            self._count_handlers_own(lease, how)
        return kept

    def handler_took(self, seconds: float) -> None:
        self._observer.handler_duration(seconds)

    def _count_handlers_own(self, lease: Lease[Any], how: How) -> None:
        """The handler of ``lease`` settled it itself (``how``): count that."""
        what = {"acked": "succeeded", "nacked": "retried", "dead_lettered": "dead_lettered"}
        self._count(what[how])
        _about(logging.DEBUG, f"the handler {how.replace('_', '-')}", lease, " itself")

    # -- settling --------------------------------------------------------------------------
    def settled(self, op: Verdict, done: Done, seconds: float) -> Lease[Any] | None:
        """``op`` returned ``done`` after ``seconds``: count it; the next lease of a fused
        claim."""
        lease = op.lease
        if isinstance(op, Ack):  # only now is its handler counted as succeeded
            claimed = () if done.lease is None else (done.lease,)
            self.landed((lease,), (done.ok,), op.name, claimed, op.claims - len(claimed), seconds)
        elif not done.ok:
            self._note_lost(lease, op.name)
        elif isinstance(op, Nack) and op.release:
            self._count("released")
        elif isinstance(op, Bury):
            self._count("dead_lettered")
            _about(logging.INFO, "dead-lettered", lease, f": {op.reason}")
        return done.lease

    def landed(
        self,
        acks: tuple[Lease[Any], ...],
        took: tuple[bool, ...],
        what: str,
        claimed: tuple[Lease[Any], ...] = (),
        unclaimed: int = 0,
        seconds: float = 0.0,
    ) -> None:
        """A call (``what``) committed after ``seconds``: each ack of ``acks`` took or found
        its lease lost (``took``), and only now counts as succeeded; ``claimed`` are held
        from now on; ``unclaimed`` reserved claims are given back. One section under the lock."""
        lost = [lease for lease, ok in zip(acks, took, strict=True) if not ok]
        succeeded = len(acks) - len(lost)
        if dead := take_dead_at_claim(self.options.worker_id):
            self._count("dead_at_claim", dead)
        held = {lease.token: lease for lease in claimed}
        with self.lock:
            if self._budget is not None:
                self._budget += unclaimed
            self._held.update(held)
            self._counts["succeeded"] += succeeded
            self._counts["claimed"] += len(claimed)
        for lease in lost:
            self._note_lost(lease, what)
        self._tell("succeeded", succeeded)
        self._tell("claimed", len(claimed))
        if claimed:
            self._observer.claim_latency(seconds)
        if log.isEnabledFor(logging.DEBUG):  # a batch's hot path: no fields built for nothing
            for lease, ok in zip(acks, took, strict=True):
                if ok:
                    _about(logging.DEBUG, "acked", lease)
            for lease in claimed:
                _about(logging.DEBUG, "claimed", lease, f" (delivery {lease.deliveries})")

    def may_retry(self, op: Settle, error: HarelSAError) -> bool:
        """``op`` raised ``error``: send it again after ``poll_interval``? Yes for a busy lock
        and a lost connection (fenced by its token, a settle sent twice acts once); else it
        is :meth:`dropped`."""
        self.failed(op.name, error)
        if isinstance(error, RETRIED) and not self.done:
            return True
        self.dropped(op)
        return False

    def again(self, op: Settle) -> Settle | None:
        """After the pause: what to send again (without its claim once stopping), or ``None``
        (nothing left, or the run is over: :meth:`dropped`)."""
        if self.done:
            self.dropped(op)
            return None
        if op.claims and self.stopping:
            self.unreserve(op.claims)
            return op.without_claim()
        return op

    def dropped(self, op: Settle) -> None:
        """``op`` will not be sent: its leases count as lost, its claims are given back."""
        self.landed(op.leases, (False,) * len(op.leases), op.name, (), op.claims)

    # -- the heartbeat ---------------------------------------------------------------------
    def held(self) -> list[Lease[Any]]:
        with self.lock:
            return list(self._held.values())

    def extended(self, lease: Lease[Any], ok: bool) -> None:
        """A heartbeat's extend returned ``ok``; ``False`` on a still-held lease means lost."""
        with self.lock:
            held = lease.token in self._held
        if not ok and held:
            self._note_lost(lease, "extend")

    # -- errors and counts -----------------------------------------------------------------
    def failed(self, what: str, error: HarelSAError) -> None:
        """A transport call (``what``) raised ``error``: log it; stop when retrying is hopeless
        (a closed transport, refused arguments; a schema not at head, which ``run()`` raises)."""
        if isinstance(error, RETRIED):
            log.warning("%s: %s; will retry", what, error)
            return
        log.warning("%s failed: %s", what, error)
        if isinstance(error, SchemaError):
            self._keep_fatal(error)
            self.request_stop("the schema is not at head")
        elif isinstance(error, InvalidArgumentError):
            self.crashed(error)
        elif isinstance(error, TransportClosedError) and not self.stopping:
            self.request_stop("the transport is closed")

    def crashed(self, error: BaseException) -> None:
        """A slot or a side thread died of an unexpected error: log it and stop the run."""
        log.error("worker %s: %r; stopping", self.options.worker_id, error, exc_info=error)
        if not self.stopping:
            self.request_stop("unexpected error")

    def _keep_fatal(self, error: BaseException) -> None:
        """``run()`` raises ``error`` once over (the first such error of the run wins)."""
        with self.lock:
            if self.fatal is None:
                self.fatal = error

    def _note_lost(self, lease: Lease[Any], what: str) -> None:
        with self.lock:
            if lease.token in self._lost:
                return
            self._lost.add(lease.token)
        self._count("lost")
        _about(
            logging.WARNING,
            "lease on",
            lease,
            f" lost ({what} returned False): another worker may handle it",
        )

    def _count(self, what: str, n: int = 1) -> None:
        """``n`` more of ``what`` (each told to the observer)."""
        with self.lock:
            self._counts[what] += n
        self._tell(what, n)

    def _tell(self, what: str, n: int) -> None:
        """Tell the observer of ``n`` more of ``what``, one call each."""
        for _ in range(n):
            self._observer.count(what)

    def result(self) -> WorkerStats:
        """What ``run()`` returns once over, or raises (:attr:`fatal`)."""
        if self.fatal is not None:
            raise self.fatal
        return self.stats()

    def stats(self) -> WorkerStats:
        with self.lock:
            return WorkerStats(**self._counts)


def _about(level: int, what: str, lease: Lease[Any], after: str = "") -> None:
    """A log line on ``lease``: ``what``, its group and seq, ``after``; its fields attached."""
    log.log(
        level, "%s %s seq %d%s", what, lease.group_id, lease.seq, after, extra=log_fields(lease)
    )


def _nothing() -> None:
    pass
