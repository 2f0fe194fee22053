"""A batching run's shared state and its decisions, for both drivers (thread-safe under the
run's lock): the leases handed out and not yet taken, the slots waiting for one, the acks
gathered for the next commit.

With :attr:`~harel_sa.worker.WorkerOptions.batching`, one program, the batcher
(:func:`~harel_sa.worker.programs.batcher`), makes every ack and claim of the run: it claims up
to ``batch`` leases for the free slots into one shared tray (``claim_many``) and sends the
gathered acks fused with that claim (``ack_many_and_claim_many``). The slots only run handlers:
a slot takes lease after lease from the tray, so a run of quick handlers costs no thread switch
per message. Nacks, dead letters and releases stay single calls, made by the slot itself."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harel_sa.errors import HarelSAError
from harel_sa.events import Lease
from harel_sa.worker.operations import RETRIED, Batch, Operation, Sent
from harel_sa.worker.outcomes import Outcome, Returned

if TYPE_CHECKING:
    from harel_sa.worker.runstate import RunState

# Waking a thread costs more than a quick handler, so who is woken depends on how long the last
# handler took. After a slow one (or before any returned), leases put in the tray wake one waiting
# slot, and a slot that takes a lease while more are left wakes the next (a chain: each lease gets
# a slot of its own, one wake-up after the other). After a quick one (under QUICK), the slot that
# sent a batch takes lease after lease itself and wakes no other. Should a handler then turn slow,
# the batcher, which wakes at least every STALL while leases wait in the tray (or a batch on its
# way may bring more than its sender takes), wakes a slot for each lease that waited that long
# with no slot taking. Each such watch is a thread wake-up, which the slot running the handlers
# pays (its return from the database waits for the interpreter's lock): so STALL is 10 ms, not
# the 2 ms that cost a quick drain throughput.
POLL = 0.05  # how often a batcher with nothing to send looks again once stopping
LONG = 1.0  # the batcher's longest wait on its bell (a guard: every change rings it)
QUICK = 50e-6  # a handler quicker than this: its slot goes on with the tray, waking no other
STALL = 0.01  # after quick handlers, the longest a lease waits in the tray before a slot is woken


@dataclass(frozen=True, slots=True)
class Waiting:
    """The tray is empty: wait for a wake-up and look again. The slot counted itself waiting
    before it waits for the wake-up (``on_wake``), which the driver counts, so none is lost
    between the look and the wait."""


@dataclass(frozen=True, slots=True)
class Sleep:
    """Nothing to send yet: wait on the batcher's bell up to ``seconds`` (``idle``: the poll
    after a claim found fewer messages than it asked for)."""

    seconds: float
    idle: bool = False


WAITING = Waiting()


class Batches:
    """The tray, the waiting slots and the gathered acks of one batching run."""

    def __init__(self, run: RunState) -> None:
        self.run = run
        self.options = run.options
        self._lock = run.lock
        # The driver's: ring the batcher's bell, wake waiting slots, start slots
        # (``programs.started_slot``) at their first wake-up.
        self.on_ring: Callable[[], None] = _nothing
        self.on_wake: Callable[[int], None] = _ignore
        self.on_start: Callable[[int], None] = _ignore
        self._size = min(self.options.batch, self.options.concurrency)
        self._tray: deque[Lease[Any]] = deque()  # handed out, not taken yet
        self._out = 0  # leases in the tray or with a slot (its handler, or its own settle)
        self._waiting = 0  # slots counted waiting and not woken yet
        self._unstarted = self.options.concurrency  # slots not started yet (waiting too)
        self._to_start = 0  # of the wake-ups given, those that start a slot (see _give)
        self._pending = 0  # slots woken that have not looked at the tray yet
        self._acks: list[Lease[Any]] = []
        self._first_at: float | None = None  # when the oldest gathered ack came
        self._short_until = 0.0  # no claim for free slots before then (the idle poll)
        self._sending = False  # a batch is on its way (sent by the batcher or by a slot)
        self._coming = 0  # how many leases it claims at most
        self._asleep_until = 0.0  # when the batcher's current sleep ends at the latest
        self._quick = False  # the last handler took under QUICK seconds
        self._moved_at = 0.0  # when a lease was last put in the tray or taken from it
        self.clock = time.monotonic  # the batches' time (tests move it by hand)
        self.claiming = True  # False once the budget is spent or (until_empty) none was found
        self.open = True  # the batcher runs: it takes acks and hands out leases

    # -- the slots -------------------------------------------------------------------------
    def take(self, woken: bool = False) -> Lease[Any] | Waiting | None:
        """The next lease in the tray; ``WAITING`` (wait for a wake-up, then take again with
        ``woken``); ``None``: the slot ends (stopping, or the batcher is done). Leases in the
        tray when a stop comes are never started: they stay held, and are released with what
        else is held at the end."""
        with self._lock:
            if woken:
                self._pending -= 1
            lease, wake = self._take(self.clock())
        if wake:
            self._give(1)
        return lease

    def _take(self, now: float) -> tuple[Lease[Any] | Waiting | None, bool]:
        """Under the lock: :meth:`take`'s answer at ``now``, and whether to wake another
        slot."""
        if self.run.stopping or self.run.done:
            return None, False  # what is in the tray stays held (the batcher drops it)
        if self._tray:
            return self._pop(now)
        if not self.open:
            return None, False
        self._waiting += 1
        return WAITING, False

    def handled(
        self, lease: Lease[Any], outcome: Outcome, started: float, now: float
    ) -> Batch | Operation | Lease[Any] | None:
        """The handler of ``lease`` (taken from the tray), started at ``started``, ended with
        ``outcome`` at ``now`` (the batches' clock); decided as :meth:`RunState.plan
        <harel_sa.worker.runstate.RunState.plan>` decides, in one section under the lock for a
        returned handler: its ack joins the next batch and the slot is free. When that makes the
        gathered acks due and no other batch is on its way, the slot sends them itself (the
        :class:`Batch` returned, with the claim for the free slots), so a batch of quick handlers
        goes out without waking the batcher; else the slot's next lease, taken from the tray in the
        same section (as :meth:`take` would). An :class:`Operation` (a nack, a dead letter, an ack
        once the batcher is done) the slot sends itself, then calls :meth:`settled`. ``None``:
        nothing for the slot to do (it takes next)."""
        run = self.run
        batch = None
        following: Lease[Any] | None = None
        wake = ring = False
        seconds = now - started
        quick = seconds < QUICK
        # acquire/release, not ``with``: the cheaper way in and out of the section, paid once a
        # message.
        self._lock.acquire()
        try:
            self._quick = quick
            own = run.leave(lease)
            gathered = own is None and self.open and isinstance(outcome, Returned)
            if gathered:
                self._acks.append(lease)
                self._out -= 1
                first_at = self._first_at
                if first_at is None:
                    self._first_at = first_at = now
                due = self._due(now)
                # A batch due is sent by this slot, or by the sender of the batch on its way,
                # after it.
                if due and not self._sending:
                    batch = self._next_batch(now)
                elif self._tray and not (run.stopping or run.done):
                    following, wake = self._pop(now)
                if not (due or self._sending):
                    # The batcher sends the acks once the first waited ``ack_wait``, unless
                    # this slot does first: after a quick handler, it looks again when its
                    # next lease's handler ends (should that one turn slow, the batcher's
                    # watch sends them within ``STALL``). Rung only if it would sleep past;
                    # never while a batch is on its way (its sender rings after it).
                    wait = STALL if quick and following is not None else self.options.ack_wait
                    ring = self._asleep_until > first_at + wait
            if not ring:
                ring = self._unwatched(now, 0 if following is not None else 1)
        finally:
            self._lock.release()
        if run.timing:
            run.handler_took(seconds)
        if wake:
            self._give(1)
        if ring:
            self.on_ring()
        if not gathered:
            op = run.decide(lease, outcome, own)
            if op is None:  # the handler settled its lease itself: the slot is free
                self.settled()
            return op
        return batch or following

    def settled(self) -> None:
        """A slot settled its lease itself (a nack, a dead letter, an ack once the batcher
        is done): the slot is free; the batcher may claim for it."""
        with self._lock:
            self._out -= 1
            ring = not self._acks  # with acks gathered, their commit claims for it
        if ring:
            self.on_ring()

    # -- the batcher -----------------------------------------------------------------------
    def next(self) -> Batch | Sleep | None:
        """What the batcher does now: send a batch, sleep, or end (``None``); first, a slot
        for each lease that waited ``STALL`` seconds in the tray with no slot taking. It sleeps
        on its bell (``on_ring``), rung after the state changed: a waiter clears it, then
        looks again, so no ring is lost."""
        now = self.clock()
        with self._lock:
            wake = self._stalled(now)
            what = self._next(now)
            watch = self._watch(now)
            if isinstance(what, Sleep) and watch is not None and watch < what.seconds:
                what = Sleep(watch, what.idle)  # no chain of wake-ups: see a stall in time
            self._asleep_until = now + what.seconds if isinstance(what, Sleep) else now
        if wake:
            self._give(wake)
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
                self._sending, self._coming = True, limit
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

    def sent(
        self, batch: Batch, sent: Sent, seconds: float, by_slot: bool = False
    ) -> Batch | Lease[Any] | Waiting | None:
        """``batch`` committed with ``sent`` after ``seconds``: count its acks, put its leases
        in the tray (a stop meanwhile leaves them held, to be released). What its sender does
        next, decided in the same section: send the gathered acks if they are due meanwhile
        (the :class:`Batch`); else, for a slot (``by_slot``, which no other slot is woken to
        relieve of the first lease), what :meth:`take` would return; ``None`` for the
        batcher."""
        run = self.run
        unclaimed = batch.limit - len(sent.leases) if batch.limit else 0
        run.landed(batch.leases, sent.acked, batch.name, sent.leases, unclaimed, seconds)
        wake = 0
        following: Batch | Lease[Any] | Waiting | None = None
        self._lock.acquire()
        try:
            self._sending, self._coming = False, 0
            short = batch.limit and len(sent.leases) < batch.limit
            now = self.clock()
            if short:
                self._short_until = now + self.options.poll_interval
                if not (sent.leases or self._out or self._acks) and run.until_empty:
                    self.claiming = False  # found nothing, and no handler may free a group
            if sent.leases and not run.stopping:
                # A batch claims for free slots only, so the tray never holds more leases
                # than there are slots to take them.
                self._tray.extend(sent.leases)
                self._out += len(sent.leases)
                self._moved_at = now
                # After a quick handler the sender goes on with the tray alone (the batcher
                # watches for a stall); else the leases left wake a slot.
                wake = not (by_slot and self._quick) and self._wake_one(keep=int(by_slot))
            following = self._ready(now)
            if following is None and by_slot:
                following, woken = self._take(now)
                wake += woken
            # The batcher's turn: acks gathered meanwhile that no batch is taking (their
            # ``ack_wait``), the end, or the idle poll after a short claim, unless it sleeps
            # no longer than that already (a deep group's every batch is short: no wake-up of
            # the batcher for each).
            ring = (
                bool(self._acks and not self._sending)
                or not self.claiming
                or run.stopping
                or (short and self._short_until < self._asleep_until)
                or self._unwatched(now, keep=int(by_slot and isinstance(following, Batch)))
            )
        finally:
            self._lock.release()
        if wake:
            self._give(wake)
        if ring:
            self.on_ring()
        return following

    def failed(self, batch: Batch, error: HarelSAError) -> bool:
        """``batch`` raised ``error``: send it again after ``poll_interval``? For a busy write
        lock and a lost connection, as a single settle
        (:meth:`RunState.may_retry <harel_sa.worker.runstate.RunState.may_retry>`); else its
        acks count as lost (their leases lapse by themselves) and its claim is given back."""
        self.run.failed(batch.name, error)
        if isinstance(error, RETRIED) and not self.run.done:
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
        self.run.landed(batch.leases, (False,) * len(batch.leases), batch.name, (), batch.limit)
        self._done_sending()

    def _done_sending(self) -> None:
        with self._lock:
            self._sending, self._coming = False, 0
        self.on_ring()

    def wake_all(self) -> None:
        """A stop: every slot waiting looks again (and ends), so does the batcher."""
        with self._lock:
            wake = self._wake_waiting()
        if wake:
            self._give(wake)
        self.on_ring()

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

    def _ready(self, now: float) -> Batch | None:
        """Under the lock: the gathered acks, when they are due and no other batch is on its
        way (its sender looks again after it: acks gathered meanwhile may be due)."""
        if self._sending or not self._acks or not self._due(now):
            return None
        return self._next_batch(now)

    def _next_batch(self, now: float) -> Batch:
        """The gathered acks (up to ``batch``) and the claim for the free slots, now being
        sent. Until the idle poll after a short claim, the claim asks for no more leases than
        it acks, as an unbatched slot's ``ack_and_claim`` would: the acked groups' next
        messages; what else comes is the poll's (a deep group's batch then walks no further
        than its one head)."""
        acks = tuple(self._acks[: self._size])
        del self._acks[: self._size]
        self._first_at = now if self._acks else None
        limit = self._reserve(len(acks) if now < self._short_until else 0)
        self._sending, self._coming = True, limit
        return Batch(acks, self.options, limit)

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
        if not (len(self._tray) > keep and self._idle() and not self._pending):
            return False
        self._rouse(1)
        return True

    def _watch(self, now: float) -> float | None:
        """After a quick handler, with a slot waiting to be woken: how long the batcher may
        sleep and still see a stall in time, while leases not promised a slot are in the tray
        or a batch on its way may bring more than one (its sender takes the first; a deep
        group's batches bring one). ``None``: it need not watch."""
        if not (self._quick and self._idle()):
            return None
        if len(self._tray) > self._pending:
            return max(self._moved_at + STALL - now, 0.0)
        return STALL if self._coming > 1 else None

    def _pop(self, now: float) -> tuple[Lease[Any], bool]:
        """Under the lock: the tray's next lease goes to a slot's handler; and whether to
        wake another slot for the leases left (after a slow handler, or none yet)."""
        lease = self._tray.popleft()
        self.run.hand_over()
        self._moved_at = now
        return lease, not self._quick and self._wake_one()

    def _unwatched(self, now: float, keep: int) -> bool:
        """After a quick handler, with a slot waiting: more than ``keep`` leases are in the
        tray (``keep``: those the caller takes next) and the batcher sleeps past ``STALL``
        from now: ring it (it then sleeps no longer while it watches)."""
        return (
            self._quick
            and self._idle() > 0
            and len(self._tray) > keep
            and self._asleep_until > now + STALL
        )

    def _stalled(self, now: float) -> int:
        """After quick handlers: how many waiting slots to wake because the tray's leases
        waited ``STALL`` seconds with no slot taking (a handler turned slow), one per lease
        not yet promised a slot."""
        if not (self._tray and self._quick and now >= self._moved_at + STALL):
            return 0
        wake = min(len(self._tray) - self._pending, self._idle())
        if wake <= 0:
            return 0
        self._rouse(wake)
        return wake

    def _wake_waiting(self) -> int:
        """Wake every waiting slot (a stop, the end): how many. A slot not started never
        will be."""
        wake, self._waiting, self._unstarted = self._waiting, 0, 0
        self._pending += wake
        return wake

    def _idle(self) -> int:
        """How many slots may be woken: those waiting and those not started yet. A slot starts
        at its first wake-up (``on_start``), not with the run, and counts as waiting until
        then: a run of quick handlers, which one slot takes alone, starts one thread, not
        ``concurrency`` (starting a thread costs more than a quick handler)."""
        return self._waiting + self._unstarted

    def _rouse(self, wake: int) -> None:
        """Under the lock: ``wake`` slots are to look at the tray (at most :meth:`_idle`),
        those waiting first, then as many started (:meth:`_give` tells the driver)."""
        woken = min(wake, self._waiting)
        self._waiting -= woken
        self._unstarted -= wake - woken
        self._to_start += wake - woken
        self._pending += wake

    def _give(self, wake: int) -> None:
        """Outside the lock: give the ``wake`` wake-ups decided under it, starting a slot for
        each that went to one not started yet. Slots are alike, so a call may start the slot
        another's wake-up decided on: each call starts at most its own number, and every
        decision is followed by a call, so the starts and the wake-ups add up."""
        with self._lock:
            start = min(wake, self._to_start)
            self._to_start -= start
        if wake > start:
            self.on_wake(wake - start)
        if start:
            self.on_start(start)

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
            self._give(wake)


def _nothing() -> None:
    pass


def _ignore(slots: int) -> None:
    pass
