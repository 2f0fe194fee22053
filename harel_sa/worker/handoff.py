"""The two channels between a batching run's batcher and its slots: leases out, acks back.

A slot takes a lease, and gives it back when its handler returned (taking the next in the same
section) or says it ``freed`` its slot. The handoff decides nothing: the batcher ``arm``\\s it
with how many outcomes make its acks due, and is told (:data:`DUE`, or its bell) when they are.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from harel_sa.events import Lease

#: :meth:`Handoff.take`: no lease waits; wait for a wake-up, then take again.
WAIT = "wait"
#: :meth:`Handoff.give`: the batcher is done; the ack is the slot's to send.
CLOSED = "closed"
#: :meth:`Handoff.give`: the acks are due and no lease waits for this slot: it is to take
#: the batcher's turn (or ring its bell).
DUE = "due"
_NEVER = 1 << 30


class Handoff:
    """Leases out (no more than the free slots: the batcher claims for those only), acks
    back, under the handoff's own lock."""

    def __init__(self, ring: Callable[[], None], clock: Callable[[], float]) -> None:
        self._lock = threading.Lock()
        self.ring = ring  # the batcher's bell
        self.clock = clock
        self._leases: deque[Lease[Any]] = deque()
        self._acks: list[Lease[Any]] = []
        self._freed = 0
        self._first_at: float | None = None  # when the oldest ack not collected came back
        self._ring_at = 1  # outcomes back that make the acks due (armed by the batcher)
        self.waiting = 0  # slots waiting for a wake-up, counted before they wait
        self.woken = 0  # wake-ups given that no slot has taken yet
        self.moved_at = 0.0  # when a lease was last put or taken
        self.open = True
        self._halted = False  # a stop: no lease is handed out any more

    # -- the slots -------------------------------------------------------------------------
    def take(self, woken: bool = False) -> Lease[Any] | str | None:
        """The next lease; :data:`WAIT` (the slot counted itself waiting: wait for a wake-up,
        then take again with ``woken``); ``None`` once closed."""
        with self._lock:
            if woken:
                self.woken -= 1
            if self._leases and not self._halted:
                self.moved_at = self.clock()
                return self._leases.popleft()
            if not self.open:
                return None
            self.waiting += 1
            return WAIT

    def give(self, lease: Lease[Any], now: float) -> Lease[Any] | str | None:
        """The handler of ``lease`` returned at ``now``: its ack goes to the batcher. The next
        lease if one waits (ringing the bell if the acks came due); :data:`DUE` if they came
        due and none waits; :data:`CLOSED`; else ``None``."""
        with self._lock:
            if not self.open:
                return CLOSED
            acks = self._acks
            acks.append(lease)
            if self._first_at is None:
                self._first_at = now
            due = len(acks) + self._freed >= self._ring_at
            if due:
                self._ring_at = _NEVER  # told once; the batcher arms it again
            if self._leases and not self._halted:
                self.moved_at = now
                following = self._leases.popleft()
            else:
                return DUE if due else None
        if due:
            self.ring()
        return following

    def freed(self) -> None:
        """A slot settled its lease itself: the batcher may claim for it."""
        with self._lock:
            self._freed += 1
            due = len(self._acks) + self._freed >= self._ring_at
            if due:
                self._ring_at = _NEVER
        if due:
            self.ring()

    # -- the batcher -----------------------------------------------------------------------
    def collect(self) -> tuple[list[Lease[Any]], int, float | None]:
        """What came back since the last collect: the acks, how many slots were freed, and
        when the oldest ack came."""
        with self._lock:
            acks, self._acks = self._acks, []
            freed, self._freed = self._freed, 0
            first_at, self._first_at = self._first_at, None
        return acks, freed, first_at

    def arm(self, ring_at: int) -> bool:
        """Tell the batcher once ``ring_at`` outcomes are back; ``True``: they are already."""
        with self._lock:
            if len(self._acks) + self._freed >= ring_at:
                return True
            self._ring_at = ring_at
            return False

    def put(self, leases: tuple[Lease[Any], ...]) -> int:
        """Leases for the slots: how many leases now wait."""
        with self._lock:
            self._leases.extend(leases)
            self.moved_at = self.clock()
            return len(self._leases)

    def waiting_leases(self) -> int:
        with self._lock:
            return len(self._leases)

    def halt(self) -> None:
        """A stop: the leases waiting are handed out no more (the batcher drops them)."""
        with self._lock:
            self._halted = True

    def drop(self) -> int:
        """Once halted: forget the leases waiting (held, to be released); how many."""
        with self._lock:
            dropped = len(self._leases)
            self._leases.clear()
        return dropped

    def rouse(self, wanted: int) -> int:
        """Count up to ``wanted`` waiting slots woken: how many (the driver wakes them)."""
        with self._lock:
            woken = min(wanted, self.waiting)
            self.waiting -= woken
            self.woken += woken
        return woken

    def close(self) -> int:
        """The batcher ends: every waiting slot is to wake and end; how many."""
        with self._lock:
            self.open = False
            woken, self.waiting = self.waiting, 0
            self.woken += woken
        return woken
