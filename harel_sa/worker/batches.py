"""A batching run's shared state and its decisions: which slots wait for a lease, the leases
handed to them, the acks gathered for the next commit (shared by both drivers).

With batching (:attr:`~harel_sa.worker.WorkerOptions.batching`), one program, the batcher
(:func:`~harel_sa.worker.programs.batcher`), makes every ack and claim of the run and the
slots only run handlers: a slot that is free waits on its bell; the batcher claims up to
``batch`` leases for the free slots with one ``claim_many`` and hands one to each; a slot whose
handler returned hands its lease back to be acked and is free again at once; the batcher
sends the gathered acks as one ``ack_many`` fused with the claim for the free slots
(``ack_many_and_claim_many``) once no slot holds a lease any more, ``batch`` acks are
gathered, or the first of them waited ``ack_wait`` seconds. Nacks, dead letters and releases
stay single calls, made by the slot itself. Thread-safe under the run's lock.

Bells: ``0`` is the batcher's, ``1..concurrency`` the slots'. The run rings them through
the driver (``Run.on_ring``) after the state changed, so a waiter that looks again finds it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harel_sa.errors import BusyError, HarelSAError
from harel_sa.events import Lease
from harel_sa.worker.operations import Ack, Batch, Operation, Sent

if TYPE_CHECKING:
    from harel_sa.worker.run import Run

BATCHER = 0  # the batcher's bell
POLL = 0.05  # how often a batcher with nothing to send looks again once stopping
LONG = 1.0  # the batcher's longest wait on its bell (a guard: every change rings it)


@dataclass(frozen=True, slots=True)
class Waiting:
    """No lease for this slot yet: wait on its bell and look again."""


@dataclass(frozen=True, slots=True)
class Sleep:
    """Nothing to send yet: wait on the batcher's bell up to ``seconds`` (``idle``: the poll
    after a claim found fewer messages than it asked for)."""

    seconds: float
    idle: bool = False


WAITING = Waiting()


class Batches:
    """The slots, their leases and the gathered acks of one batching run."""

    def __init__(self, run: Run, lock: threading.RLock) -> None:
        self.run = run
        self.options = run.options
        self._lock = lock
        self._size = min(self.options.batch, self.options.concurrency)
        # Slots waiting for a lease: all of them at the start, so the first claim fills them.
        self._free: deque[int] = deque(range(1, self.options.concurrency + 1))
        self._holding: set[int] = set()  # slots with a lease (handed, or in its handler)
        self._mail: dict[int, Lease[Any]] = {}  # handed, not yet taken
        self._acks: list[Lease[Any]] = []
        self._first_at: float | None = None  # when the oldest gathered ack came
        self._short_until = 0.0  # no claim for free slots before then (the idle poll)
        self.claiming = True  # False once the budget is spent or (until_empty) none was found
        self.open = True  # the batcher runs: it takes acks and hands out leases

    # -- the slots -------------------------------------------------------------------------
    def take(self, slot: int) -> Lease[Any] | Waiting | None:
        """The lease handed to ``slot``; ``WAITING`` (wait on its bell); ``None``: the slot ends
        (stopping, or the batcher is done). A lease handed but not taken when a stop came stays
        held: it is released with what else is held at the end."""
        ring = False
        with self._lock:
            lease = self._mail.pop(slot, None)
            stopping = self.run.stopping or self.run.done
            if lease is not None and not stopping:
                return lease
            self._holding.discard(slot)
            if stopping or not self.open:
                if slot in self._free:
                    self._free.remove(slot)
                return None
            if slot not in self._free:
                self._free.append(slot)
                ring = not self._acks  # with acks gathered, their commit claims for it
        if ring:
            self.run.on_ring(BATCHER)
        return WAITING

    def gather(self, slot: int, op: Operation) -> bool:
        """``slot``'s handler returned: its ack joins the next batch and the slot is free
        (``True``); ``False`` for anything but an ack, or once the batcher is done (the slot
        then sends it itself)."""
        if not isinstance(op, Ack):
            return False
        with self._lock:
            if not self.open:
                return False
            self._acks.append(op.lease)
            self._holding.discard(slot)
            self._free.append(slot)
            first = self._first_at is None
            if first:
                self._first_at = time.monotonic()
            ring = first or self._due(time.monotonic())
        if ring:
            self.run.on_ring(BATCHER)
        return True

    # -- the batcher -----------------------------------------------------------------------
    def next(self) -> Batch | Sleep | None:
        """What the batcher does now: send a batch, sleep, or end (``None``)."""
        now = time.monotonic()
        run = self.run
        with self._lock:
            if run.done:
                self._close()
                return None
            if self._acks:
                if not self._due(now):
                    assert self._first_at is not None
                    return Sleep(self._first_at + self.options.ack_wait - now)
                acks = tuple(self._acks[: self._size])
                del self._acks[: self._size]
                self._first_at = now if self._acks else None
                return Batch(acks, self.options, self._reserve())
            wanted = self.claiming and bool(self._free) and not run.stopping
            nobody_busy = not self._holding
            if wanted and (now >= self._short_until or (run.until_empty and nobody_busy)):
                limit = self._reserve()
                if limit:
                    return Batch((), self.options, limit)
            if not self.claiming or run.stopping:
                if nobody_busy or run.grace_left() == 0:
                    self._close()
                    return None
                return Sleep(POLL)
            if self._free and self._short_until > now:
                return Sleep(self._short_until - now, idle=True)
            return Sleep(LONG)

    def heard(self) -> None:
        """The transport heard of a message during the idle poll: claim for free slots now."""
        with self._lock:
            self._short_until = 0.0

    def sent(self, batch: Batch, sent: Sent, seconds: float) -> None:
        """``batch`` committed with ``sent`` after ``seconds``: count its acks, hand its leases
        to free slots (a stop meanwhile leaves them held, to be released)."""
        run = self.run
        for lease, took in zip(batch.leases, sent.acked, strict=True):
            run.acked(lease, took, batch.name)
        if batch.limit:
            run.unreserve(batch.limit - len(sent.leases))
            if sent.leases:
                run.claimed_many(sent.leases, seconds)
        handed: list[int] = []
        with self._lock:
            if batch.limit and len(sent.leases) < batch.limit:
                self._short_until = time.monotonic() + self.options.poll_interval
                if not (sent.leases or self._holding or self._acks) and run.until_empty:
                    self.claiming = False  # found nothing, and no handler may free a group
            # A batch claims for free slots only, and a free slot leaves ``_free`` only by a
            # hand-out or by ending (once stopping, when nothing is handed any more).
            for lease in sent.leases:
                if run.stopping or not self._free:
                    break
                slot = self._free.pop()  # the last freed: its thread is likely still awake
                self._mail[slot] = lease
                self._holding.add(slot)
                handed.append(slot)
        for slot in handed:
            self.run.on_ring(slot)

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
            return Batch(batch.leases, batch.options, 0) if batch.leases else None
        return batch

    def dropped(self, batch: Batch) -> None:
        """``batch`` will not be sent: its acks are lost, its claim given back."""
        for lease in batch.leases:
            self.run.acked(lease, False, batch.name)
        self.run.unreserve(batch.limit)

    # -- the rules -------------------------------------------------------------------------
    def _due(self, now: float) -> bool:
        """Send the gathered acks now: no slot holds a lease (no other ack is coming), the
        batch is full, the oldest waited ``ack_wait``, or the run is stopping."""
        return (
            not self._holding
            or len(self._acks) >= self._size
            or (self._first_at is not None and now >= self._first_at + self.options.ack_wait)
            or self.run.stopping
        )

    def _reserve(self) -> int:
        """How many leases to claim for the free slots (up to ``batch``, within the budget);
        0 once stopping, not claiming, or when the budget is spent (then no more claims)."""
        if not self.claiming or self.run.stopping or not self._free:
            return 0
        limit = self.run.reserve_many(min(len(self._free), self._size))
        if not limit:
            self.claiming = False
        return limit

    def _close(self) -> None:
        """The batcher ends: the free slots end too (their bells ring)."""
        self.open = False
        free, self._free = list(self._free), deque()
        for slot in free:
            self.run.on_ring(slot)
