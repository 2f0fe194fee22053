"""A batching run's batcher: the one owner of its batch state (its routine: ``programs``).

It claims leases for the free slots into the :class:`~harel_sa.worker.handoff.Handoff`, collects
the acks given back, and sends them fused with the claim for the slots they free once due: no
lease out is with a handler, ``batch`` acks wait, the oldest waited ``ack_wait``, or the run
stops. Only the holder of the *turn* touches the state: the routine, or the slot whose ack made
the acks due with no lease left for it, which sends them itself rather than wake a thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from harel_sa.events import Lease
from harel_sa.worker.handoff import Handoff
from harel_sa.worker.operations import Batch, Sent
from harel_sa.worker.runstate import RunState
from harel_sa.worker.steps import WaitBell
from harel_sa.worker.wake import Wake

LOOK_AGAIN = 0.05  # once stopping (or done claiming), how often the batcher looks again
LONG = 1.0  # its longest sleep: a guard (every change it waits for rings it)


class Batcher:
    """The acks to send, the leases out and the claim for the free slots of one run."""

    def __init__(self, run: RunState, handoff: Handoff, wake: Wake) -> None:
        self.run = run
        self.options = run.options
        self.handoff = handoff
        self.wake = wake
        self.size = min(self.options.batch, self.options.concurrency)
        self.acks: list[Lease[Any]] = []
        self.first_at: float | None = None  # when the oldest of ``acks`` came back
        self.out = 0  # leases in the handoff or with a slot
        self.claiming = True  # False once the budget is spent or (until_empty) none was found
        self.short_until = 0.0  # after a short claim, no claim for free slots before then
        self.on_wake: Callable[[int], None] = _ignore  # the driver's: wake waiting slots
        self.asleep_until = 0.0  # when the batcher's routine wakes at the latest
        self._turn = threading.Lock()  # never waited for: taken, or left to its holder

    def take_turn(self) -> bool:
        return self._turn.acquire(blocking=False)

    def let_go(self, now: float, taking: int = 0) -> bool:
        """Give the turn back, the handoff armed; ring the routine when it sleeps past what is
        now due (``taking``: waiting leases the holder takes next). ``True``: the acks came due
        meanwhile (take it again)."""
        if self.acks:
            ring_at = min(self.out, self.size - len(self.acks))
        elif self.wake.quick and self.out and not self.run.stopping:
            ring_at = min(self.out, self.size)  # its watch sees a first ack held back
        else:
            ring_at = 1
        wanted = self.wake_by(now, taking)
        self._turn.release()
        if wanted < self.asleep_until:
            self.handoff.ring()
        return self.handoff.arm(max(ring_at, 1))

    def collect(self) -> None:
        """Take what the slots gave back: the acks to send, and the slots freed."""
        acks, freed, first_at = self.handoff.collect()
        self.out -= len(acks) + freed
        if acks:
            kept = self.run.left(acks)
            if kept:
                self.acks.extend(kept)
                if self.first_at is None:
                    self.first_at = first_at
        if self.run.stopping:
            self.out -= self.handoff.drop()

    def due(self, now: float) -> bool:
        return bool(self.acks) and (
            not self.out
            or len(self.acks) >= self.size
            or now >= (self.first_at or now) + self.options.ack_wait
            or self.run.stopping
        )

    def next_batch(self, now: float) -> Batch | None:
        """The batch to send now, if any: the due acks with the claim for the free slots, or a
        claim alone. Until the idle poll after a short claim, it claims no more leases than it
        acks (the acked groups' next messages)."""
        if self.due(now):
            acks = tuple(self.acks[: self.size])
            del self.acks[: self.size]
            self.first_at = now if self.acks else None
            limit = self._reserve(len(acks) if now < self.short_until else 0)
            return Batch(acks, self.options, limit)
        if self.acks:
            return None
        if now >= self.short_until or (self.run.until_empty and not self.out):
            limit = self._reserve()
            if limit:
                return Batch((), self.options, limit)
        return None

    def _reserve(self, most: int = 0) -> int:
        free = self.options.concurrency - self.out
        if not self.claiming or self.run.stopping or free <= 0:
            return 0
        limit = self.run.reserve_many(min(free, self.size, most or self.size))
        if not limit:
            self.claiming = False
        return limit

    def landed(self, batch: Batch, sent: Sent, seconds: float, by_slot: bool) -> None:
        """``batch`` committed with ``sent``: count it; its leases go to the slots (a slot that
        sent it takes one itself; after a stop they stay held, to be released)."""
        run = self.run
        unclaimed = batch.limit - len(sent.leases) if batch.limit else 0
        run.landed(batch.leases, sent.acked, batch.name, sent.leases, unclaimed, seconds)
        if batch.limit and len(sent.leases) < batch.limit:
            self.short_until = self.handoff.clock() + self.options.poll_interval
            if run.until_empty and not (sent.leases or self.out or self.acks):
                self.claiming = False  # found nothing, and no handler may free a group
        if sent.leases and not run.stopping:
            ex = self.handoff
            busy = self.out - ex.waiting_leases()
            self.out += len(sent.leases)
            self._rouse(self.wake.on_put(ex.put(sent.leases), ex.woken + by_slot, busy))

    def wake_by(self, now: float, taking: int = 0) -> float:
        """When the routine must look again at the latest."""
        run = self.run
        if not self.claiming or run.stopping:
            until = now + LOOK_AGAIN
        elif self.acks:
            until = (self.first_at or now) + self.options.ack_wait
        elif self.out < self.options.concurrency and self.short_until > now:
            until = self.short_until
        else:
            until = now + LONG
        ex = self.handoff
        waiting = ex.waiting_leases() - taking
        watch = self.wake.watch(waiting, ex.woken, ex.moved_at, now, self.out)
        return until if watch is None else min(until, now + max(watch, 0.001))

    def sleep(self, now: float) -> WaitBell | None:
        """The routine's wait, holding the turn, after waking slots for stalled leases
        (``None``: the batcher ends)."""
        run, ex = self.run, self.handoff
        if (not self.claiming or run.stopping) and (
            not (self.out or self.acks) or run.grace_left() == 0
        ):
            return None
        self._rouse(self.wake.stalled(ex.waiting_leases(), ex.woken, ex.moved_at, now))
        idle = (
            self.claiming
            and not run.stopping
            and not self.acks
            and self.out < self.options.concurrency
            and self.short_until > now
        )
        self.asleep_until = until = self.wake_by(now)
        return WaitBell(max(until - now, 0.0), idle=idle)

    def stop(self) -> None:
        """The run stops: no lease waiting is handed out any more; the routine looks."""
        self.handoff.halt()
        self.handoff.ring()

    def close(self) -> None:
        """The batcher ends: the waiting slots end too."""
        self._wake(self.handoff.close())

    def _rouse(self, wanted: int) -> None:
        if wanted > 0:
            self._wake(self.handoff.rouse(wanted))

    def _wake(self, slots: int) -> None:
        if slots:
            self.on_wake(slots)


def _ignore(slots: int) -> None:
    pass
