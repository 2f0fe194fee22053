"""The files an upgrade must adopt, each with rows in every state: free, leased and parked.

Each builder writes a file at ``path`` and returns what a transport must then deliver at the
clock's time (free messages, adopted orphans) and, once every lease and park has lapsed, what
comes back (the held messages), each group in FIFO order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harel_sa import Event, SqliteTransport
from tests.conftest import FakeClock
from tests.legacy import LegacyFile

PARKED = "__parked__"
HOLD = 100.0  # leases and parks made here end this long after the clock's start


@dataclass
class Start:
    """What a file holds, as the transport must see it after the upgrade."""

    now: list[tuple[str, str]] = field(default_factory=list)  # deliverable at once, in order
    later: list[tuple[str, str]] = field(default_factory=list)  # after leases and parks lapse
    adopted: list[tuple[object, ...]] = field(default_factory=list)  # group rows to be added


def empty(path: Path, clock: FakeClock) -> Start:
    path.touch()
    return Start()


def _stdlib(path: Path, clock: FakeClock, *, routing_key: bool, orphans: bool) -> Start:
    legacy = LegacyFile(str(path), routing_key=routing_key)
    legacy.publish("free", "free-1", priority=2)
    legacy.publish("free", "free-2", priority=2)
    held = legacy.publish("leased", "leased-1")
    legacy.publish("leased", "leased-2")
    parked = legacy.publish("parked", "parked-1", priority=4)
    legacy.lease(held, "old-worker", clock.now + HOLD)
    legacy.lease(parked, PARKED, clock.now + HOLD)
    # A group claimed once already, so round-robin puts it after the never-claimed ones.
    legacy.publish("claimed", "claimed-1")
    legacy.conn.execute(
        f"UPDATE {legacy.g} SET last_claimed_at = ? WHERE group_id = 'claimed'", (clock.now - 5,)
    )
    start = Start(
        now=[("free", "free-1"), ("free", "free-2")],
        later=[("leased", "leased-1"), ("leased", "leased-2"), ("parked", "parked-1")],
    )
    if routing_key:
        legacy.conn.execute(f"UPDATE {legacy.g} SET routing_key = 'edge' WHERE group_id = 'free'")
    if orphans:
        # The original's two-statement publish, cut between its statements: messages whose
        # group row was never written. One whole orphaned group, one leased orphan.
        legacy.publish("lost", "lost-1", orphan=True)
        legacy.publish("lost", "lost-2", orphan=True)
        gone = legacy.publish("lost-leased", "lost-leased-1", orphan=True)
        legacy.lease(gone, "old-worker", clock.now + HOLD)
        start.now += [("lost", "lost-1"), ("lost", "lost-2")]
        start.later.insert(0, ("lost-leased", "lost-leased-1"))
        adopted_rk: tuple[object, ...] = (None,) if routing_key else ()
        start.adopted = [
            ("lost", 0.0, 0, *adopted_rk),
            ("lost-leased", 0.0, 0, *adopted_rk),
        ]
    start.now.append(("claimed", "claimed-1"))
    legacy.close()
    return start


def stdlib3(path: Path, clock: FakeClock) -> Start:
    """The original stdlib transport's schema 3 (no routing_key)."""
    return _stdlib(path, clock, routing_key=False, orphans=False)


def stdlib4(path: Path, clock: FakeClock) -> Start:
    """The original's schema 4: routing_key already there (added by its own start-up)."""
    return _stdlib(path, clock, routing_key=True, orphans=False)


def stdlib3_orphans(path: Path, clock: FakeClock) -> Start:
    """Schema 3 with messages whose group row is missing."""
    return _stdlib(path, clock, routing_key=False, orphans=True)


def stdlib4_orphans(path: Path, clock: FakeClock) -> Start:
    return _stdlib(path, clock, routing_key=True, orphans=True)


def created_by_transport(path: Path, clock: FakeClock) -> Start:
    """A file made by ``SqliteTransport(path, create_schema=True)``, never seen by Alembic."""
    with SqliteTransport(path, create_schema=True, clock=clock) as q:
        for group, kinds in (("leased", 2), ("parked", 1), ("free", 2)):
            for n in range(1, kinds + 1):
                q.publish(group, Event(kind=f"{group}-{n}"), priority=1, routing_key="edge")
        leased = q.claim("old-worker", HOLD)
        assert leased is not None and leased.group_id == "leased"
        parked = q.claim("old-worker", HOLD)
        assert parked is not None and parked.group_id == "parked"
        assert q.nack(parked, delay=HOLD)
    return Start(
        now=[("free", "free-1"), ("free", "free-2")],
        later=[("leased", "leased-1"), ("leased", "leased-2"), ("parked", "parked-1")],
    )


STARTS: dict[str, Callable[[Path, FakeClock], Start]] = {
    "empty": empty,
    "stdlib3": stdlib3,
    "stdlib4": stdlib4,
    "stdlib3-orphans": stdlib3_orphans,
    "stdlib4-orphans": stdlib4_orphans,
    "create_schema": created_by_transport,
}
