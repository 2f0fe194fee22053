"""Whom a batching run wakes for the leases waiting in its handoff: a policy, apart.

Waking a slot costs more than a quick handler. After a slow handler (or before any returned)
each waiting lease wakes a slot of its own. After a quick one (under :data:`QUICK` seconds),
leases put while no slot runs wake one slot, which takes them one after the other; should a
handler turn slow meanwhile, a lease that waited :data:`STALL` seconds wakes a slot (the
batcher watches, sleeping no longer than that). None of this decides what is acked or claimed.
"""

from __future__ import annotations

QUICK = 50e-6
STALL = 0.01


class Wake:
    """The policy; ``quick``: the last handler to end was quick (:meth:`ended`)."""

    def __init__(self) -> None:
        self.quick = False

    def ended(self, seconds: float) -> None:
        """A slot's handler ended after ``seconds`` (a plain store: no lock on a slot's path)."""
        self.quick = seconds < QUICK

    def on_put(self, waiting: int, woken: int, busy: int) -> int:
        """``waiting`` leases wait (``woken`` slots are on their way to them, one more when
        the slot that put them takes one), ``busy`` slots run handlers: how many more slots
        to wake."""
        if not self.quick:
            return waiting - woken
        return 1 if not (busy or woken) and waiting else 0

    def stalled(self, waiting: int, woken: int, moved_at: float, now: float) -> int:
        """After quick handlers: slots to wake because no lease moved for ``STALL``."""
        if not self.quick or waiting <= woken or now < moved_at + STALL:
            return 0
        return waiting - woken

    def watch(
        self, waiting: int, woken: int, moved_at: float, now: float, out: int
    ) -> float | None:
        """After quick handlers, with ``out`` leases out: how long the batcher may sleep and
        still see in time a lease that waits, or acks that a slow handler holds back (with
        more than one lease out, no slot tells it of them before its batch is whole).
        ``None``: it need not watch."""
        if not self.quick:
            return None
        if waiting > woken:
            return max(moved_at + STALL - now, 0.0)
        return STALL if out > 1 else None
