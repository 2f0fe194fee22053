"""A batching run's shared state and its decisions: the leases handed out and not yet taken,
how many slots wait for one, the acks gathered for the next commit (shared by both drivers).

With batching (:attr:`~harel_sa.worker.WorkerOptions.batching`), one program, the batcher
(:func:`~harel_sa.worker.programs.batcher`), makes every ack and claim of the run and the
slots only run handlers. The batcher claims up to ``batch`` leases for the free slots with one
``claim_many`` and puts them in one shared tray; a slot takes the next lease from the tray,
runs its handler and hands an ack back, then takes again: while the tray holds leases, a slot
goes from one to the next without waiting, so a run of quick handlers costs no thread switch
per message. The batcher sends the gathered acks as one ``ack_many`` fused with the claim for
the free slots (``ack_many_and_claim_many``) once no lease is out any more, ``batch`` acks are
gathered, or the first of them waited ``ack_wait`` seconds. Nacks, dead letters and releases
stay single calls, made by the slot itself. Thread-safe under the run's lock.

Wake-ups: a slot that finds the tray empty counts itself waiting and waits for a wake-up
(``Run.on_wake``), which the driver counts, so none is lost between the look and the wait.
Leases put in the tray wake one waiting slot, and a slot that takes a lease while more are
left wakes the next (a chain: with quick handlers the first slot often empties the tray
before the next one runs). The batcher waits on its bell (``Run.on_ring``), rung after the
state changed: a waiter clears it, then looks again, so no ring is lost.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harel_sa.errors import BusyError, HarelSAError
from harel_sa.events import Lease
from harel_sa.worker.operations import Batch, Operation, Sent
from harel_sa.worker.outcomes import Outcome, Returned

if TYPE_CHECKING:
    from harel_sa.worker.run import Run

POLL = 0.05  # how often a batcher with nothing to send looks again once stopping
LONG = 1.0  # the batcher's longest wait on its bell (a guard: every change rings it)


@dataclass(frozen=True, slots=True)
class Waiting:
    """The tray is empty: wait for a wake-up and look again."""


@dataclass(frozen=True, slots=True)
class Sleep:
    """Nothing to send yet: wait on the batcher's bell up to ``seconds`` (``idle``: the poll
    after a claim found fewer messages than it asked for)."""

    seconds: float
    idle: bool = False


WAITING = Waiting()


class Batches:
    """The tray, the waiting slots and the gathered acks of one batching run."""

    def __init__(self, run: Run, lock: threading.RLock) -> None:
        self.run = run
        self.options = run.options
        self._lock = lock
        self._size = min(self.options.batch, self.options.concurrency)
        self._tray: deque[Lease[Any]] = deque()  # handed out, not taken yet
        self._out = 0  # leases in the tray or with a slot (its handler, or its own settle)
        self._waiting = 0  # slots counted waiting and not woken yet
        self._pending = 0  # slots woken that have not looked at the tray yet
        self._acks: list[Lease[Any]] = []
        self._first_at: float | None = None  # when the oldest gathered ack came
        self._short_until = 0.0  # no claim for free slots before then (the idle poll)
        self._sending = False  # a batch is on its way (sent by the batcher or by a slot)
        self._asleep_until = 0.0  # when the batcher's current sleep ends at the latest
        self.claiming = True  # False once the budget is spent or (until_empty) none was found
        self.open = True  # the batcher runs: it takes acks and hands out leases

    # -- the slots -------------------------------------------------------------------------
    def take(self, woken: bool = False) -> Lease[Any] | Waiting | None:
        """The next lease in the tray; ``WAITING`` (wait for a wake-up, then take again with
        ``woken``); ``None``: the slot ends (stopping, or the batcher is done). Leases in the
        tray when a stop comes are never started: they stay held, and are released with what
        else is held at the end."""
        wake = False
        with self._lock:
            if woken:
                self._pending -= 1
            if self.run.stopping or self.run.done:
                return None  # what is in the tray stays held (the batcher drops it)
            if self._tray:
                lease = self._tray.popleft()
                self.run.hand_over()
                wake = self._wake_one()
            elif not self.open:
                return None
            else:
                self._waiting += 1
                return WAITING
        if wake:
            self.run.on_wake(1)
        return lease

    def handled(
        self, lease: Lease[Any], outcome: Outcome, seconds: float
    ) -> Batch | Operation | None:
        """The handler of ``lease`` (taken from the tray) ended with ``outcome`` after
        ``seconds``; decided as :meth:`Run.plan <harel_sa.worker.run.Run.plan>` decides, in
        one section under the lock for a returned handler: its ack joins the next batch and
        the slot is free. When that makes the gathered acks due and no other batch is on its
        way, the slot sends them itself (the :class:`Batch` returned, with the claim for the
        free slots), so a batch of quick handlers goes out without waking the batcher. An
        :class:`Operation` (a nack, a dead letter, an ack once the batcher is done) the slot
        sends itself, then calls :meth:`settled`. ``None``: nothing for the slot to do."""
        run = self.run
        batch = None
        with self._lock:
            own = run.leave(lease)
            gathered = own is None and self.open and isinstance(outcome, Returned)
            if gathered:
                self._acks.append(lease)
                self._out -= 1
                now = time.monotonic()
                first = self._first_at is None
                if first:
                    self._first_at = now
                due = self._due(now)
                # The batcher times ``ack_wait`` from the first ack; a batch due is sent by
                # this slot, or by the sender of the batch on its way, after it.
                ring = first and not due
                if due and not self._sending:
                    batch = self._next_batch(now)
        run.handler_took(seconds)
        if not gathered:
            op = run.decide(lease, outcome, own)
            if op is None:  # the handler settled its lease itself: the slot is free
                self.settled()
            return op
        if ring:
            run.on_ring()
        return batch

    def ready(self) -> Batch | None:
        """The gathered acks when they are due and no other batch is being sent: the sender
        of a batch looks again after it (acks gathered meanwhile may be due). ``None``:
        nothing is due, or another batch is on its way (its sender looks again after it)."""
        with self._lock:
            if self._sending or not self._acks or not self._due(time.monotonic()):
                return None
            return self._next_batch(time.monotonic())

    def settled(self) -> None:
        """A slot settled its lease itself (a nack, a dead letter, an ack once the batcher
        is done): the slot is free; the batcher may claim for it."""
        with self._lock:
            self._out -= 1
            ring = not self._acks  # with acks gathered, their commit claims for it
        if ring:
            self.run.on_ring()

    # -- the batcher -----------------------------------------------------------------------
    def next(self) -> Batch | Sleep | None:
        """What the batcher does now: send a batch, sleep, or end (``None``)."""
        now = time.monotonic()
        with self._lock:
            what = self._next(now)
            self._asleep_until = now + what.seconds if isinstance(what, Sleep) else now
            return what

    def _next(self, now: float) -> Batch | Sleep | None:
        """:meth:`next`, under the lock."""
        run = self.run
        if run.done:
            self._close()
            return None
        if run.stopping:
            self._drop_tray()
        if self._sending:  # a batch is on its way: its sender rings when there is more to do
            longest = POLL if run.stopping else LONG
            # No longer than the idle poll, so a deep group's next short batch need not ring.
            return Sleep(min(longest, max(self._short_until - now, 0.0)) or longest)
        if self._acks:
            if not self._due(now):
                assert self._first_at is not None
                return Sleep(self._first_at + self.options.ack_wait - now)
            return self._next_batch(now)
        free = self.options.concurrency - self._out
        wanted = self.claiming and free > 0 and not run.stopping
        nobody_busy = not self._out
        if wanted and (now >= self._short_until or (run.until_empty and nobody_busy)):
            limit = self._reserve()
            if limit:
                self._sending = True
                return Batch((), self.options, limit)
        if not self.claiming or run.stopping:
            if nobody_busy or run.grace_left() == 0:
                self._close()
                return None
            return Sleep(POLL)
        if free > 0 and self._short_until > now:
            return Sleep(self._short_until - now, idle=True)
        return Sleep(LONG)

    def heard(self) -> None:
        """The transport heard of a message during the idle poll: claim for free slots now."""
        with self._lock:
            self._short_until = 0.0

    def sent(self, batch: Batch, sent: Sent, seconds: float, by_slot: bool = False) -> None:
        """``batch`` committed with ``sent`` after ``seconds``: count its acks, put its leases
        in the tray (a stop meanwhile leaves them held, to be released). ``by_slot``: a slot
        sent it, and takes from the tray next (no other slot is woken for the first lease)."""
        run = self.run
        run.acked_many(batch.leases, sent.acked, batch.name)
        if batch.limit:
            run.unreserve(batch.limit - len(sent.leases))
            if sent.leases:
                run.claimed_many(sent.leases, seconds)
        wake = False
        with self._lock:
            self._sending = False
            short = batch.limit and len(sent.leases) < batch.limit
            if short:
                self._short_until = time.monotonic() + self.options.poll_interval
                if not (sent.leases or self._out or self._acks) and run.until_empty:
                    self.claiming = False  # found nothing, and no handler may free a group
            if sent.leases and not run.stopping:
                # A batch claims for free slots only, so the tray never holds more leases
                # than there are slots to take them.
                self._tray.extend(sent.leases)
                self._out += len(sent.leases)
                wake = self._wake_one(keep=int(by_slot))
            # The batcher's turn: acks gathered meanwhile (their ``ack_wait``), the end, or
            # the idle poll after a short claim, unless it sleeps no longer than that already
            # (a deep group's every batch is short: no wake-up of the batcher for each).
            ring = (
                bool(self._acks)
                or not self.claiming
                or run.stopping
                or (short and self._short_until < self._asleep_until)
            )
        if wake:
            run.on_wake(1)
        if ring:
            run.on_ring()

    def failed(self, batch: Batch, error: HarelSAError) -> bool:
        """``batch`` raised ``error``: send it again after ``poll_interval``? Only for a busy
        write lock; else its acks count as lost (their leases lapse by themselves) and its
        claim is given back."""
        self.run.failed(batch.name, error)
        if isinstance(error, BusyError) and not self.run.done:
            return True
        self.dropped(batch)
        return False

    def again(self, batch: Batch) -> Batch | None:
        """After the pause: the batch to send again (without its claim once stopping), or
        ``None`` (the run is over meanwhile: its acks are lost)."""
        if self.run.done:
            self.dropped(batch)
            return None
        if batch.limit and self.run.stopping:
            self.run.unreserve(batch.limit)
            if not batch.leases:
                self._done_sending()
                return None
            return Batch(batch.leases, batch.options, 0)
        return batch

    def dropped(self, batch: Batch) -> None:
        """``batch`` will not be sent: its acks are lost, its claim given back."""
        self.run.acked_many(batch.leases, (False,) * len(batch.leases), batch.name)
        self.run.unreserve(batch.limit)
        self._done_sending()

    def _done_sending(self) -> None:
        with self._lock:
            self._sending = False
        self.run.on_ring()

    def wake_all(self) -> None:
        """A stop: every slot waiting looks again (and ends), so does the batcher."""
        with self._lock:
            wake = self._wake_waiting()
        if wake:
            self.run.on_wake(wake)
        self.run.on_ring()

    # -- the rules -------------------------------------------------------------------------
    def _due(self, now: float) -> bool:
        """Send the gathered acks now: no lease is out (no other ack is coming), the batch is
        full, the oldest waited ``ack_wait``, or the run is stopping."""
        return (
            not self._out
            or len(self._acks) >= self._size
            or (self._first_at is not None and now >= self._first_at + self.options.ack_wait)
            or self.run.stopping
        )

    def _next_batch(self, now: float) -> Batch:
        """The gathered acks (up to ``batch``) and the claim for the free slots, now being
        sent. Until the idle poll after a short claim, the claim asks for no more leases than
        it acks, as an unbatched slot's ``ack_and_claim`` would: the acked groups' next
        messages; what else comes is the poll's (a deep group's batch then walks no further
        than its one head)."""
        acks = tuple(self._acks[: self._size])
        del self._acks[: self._size]
        self._first_at = now if self._acks else None
        self._sending = True
        return Batch(acks, self.options, self._reserve(len(acks) if now < self._short_until else 0))

    def _reserve(self, most: int = 0) -> int:
        """How many leases to claim for the free slots (up to ``batch``, and ``most`` if
        given, within the budget); 0 once stopping, not claiming, or when the budget is spent
        (then no more claims)."""
        free = self.options.concurrency - self._out
        if not self.claiming or self.run.stopping or free <= 0:
            return 0
        limit = self.run.reserve_many(min(free, self._size, most or self._size))
        if not limit:
            self.claiming = False
        return limit

    def _wake_one(self, keep: int = 0) -> bool:
        """More than ``keep`` leases wait in the tray (``keep``: those the caller takes itself):
        wake one waiting slot, unless one woken has not looked yet (when it takes, it wakes
        the next while leases are left). So quick handlers are not spread over threads that
        each wake up to find the tray empty, and slow ones still get a slot each, one wake-up
        after the other."""
        if not (len(self._tray) > keep and self._waiting and not self._pending):
            return False
        self._waiting -= 1
        self._pending += 1
        return True

    def _wake_waiting(self) -> int:
        """Wake every waiting slot (a stop, the end): how many."""
        wake, self._waiting = self._waiting, 0
        self._pending += wake
        return wake

    def _drop_tray(self) -> None:
        """Stopping: the leases in the tray will not be started (they stay held until the
        end releases them), so they are no longer out."""
        self._out -= len(self._tray)
        self._tray.clear()

    def _close(self) -> None:
        """The batcher ends: the waiting slots end too."""
        self.open = False
        wake = self._wake_waiting()
        if wake:
            self.run.on_wake(wake)
