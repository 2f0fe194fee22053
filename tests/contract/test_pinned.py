"""Rules of the lease and of the rotation that a plausible one-line change would break, each
pinned on both twins, on a real file, with a clock the test moves.

- A lease is live *at* its expiry instant (``lock_expiry >= now``), lapsed only after it.
- ``nack(delay)`` moves its group's place in the rotation to the park's end.
- ``release()`` brings the rotation of the groups it unparks back to now.
"""

from __future__ import annotations

from typing import Any

from harel_sa import Event
from tests.conftest import FakeClock


def publish(q: Any, *groups: str) -> None:
    for group in groups:
        q.publish(group, Event(kind=group))


def test_a_lease_is_live_at_its_expiry_instant_and_lapses_after_it(
    q: Any, clock: FakeClock
) -> None:
    publish(q, "a")
    lease = q.claim("w1", visibility=30)
    assert lease is not None
    clock.advance(30)  # now == lock_expiry exactly (both exact in binary)
    assert q.claim("w2", visibility=30) is None
    stats = q.stats()
    assert (stats.in_flight, stats.ready) == (1, 0)
    assert [m.state for m in q.peek()] == ["leased"]
    clock.advance(0.5)
    again = q.claim("w2", visibility=30)
    assert again is not None and again.seq == lease.seq and again.deliveries == 2


def test_a_park_is_in_force_at_its_end_instant(q: Any, clock: FakeClock) -> None:
    publish(q, "a")
    lease = q.claim("w", visibility=30)
    assert q.nack(lease, delay=10)
    clock.advance(10)
    assert q.claim("w", visibility=30) is None
    assert q.stats().parked == 1 and [m.state for m in q.peek()] == ["parked"]
    clock.advance(0.5)
    assert q.claim("w", visibility=30) is not None


def test_nack_with_a_delay_moves_its_group_to_the_parks_end_in_the_rotation(
    q: Any, clock: FakeClock
) -> None:
    publish(q, "a", "a", "b", "b")
    first = q.claim("w", visibility=30)  # t=0: a, never claimed before, comes first
    assert first.group_id == "a"
    assert q.nack(first, delay=10)  # a re-enters the rotation at t=10
    clock.advance(1)
    second = q.claim("w", visibility=30)  # t=1: b (a is parked)
    assert second.group_id == "b" and q.ack(second)
    clock.advance(10)  # t=11: a's park is over; a is placed at 10, b was claimed at 1
    third = q.claim("w", visibility=30)
    assert third.group_id == "b"
    assert q.claim("w", visibility=30).group_id == "a"


def test_release_brings_the_rotation_of_parked_groups_back_to_now(q: Any, clock: FakeClock) -> None:
    publish(q, "a", "a", "b", "b", "b")
    first = q.claim("w", visibility=30)  # t=0: a
    assert first.group_id == "a" and q.nack(first, delay=100)  # placed at t=100
    clock.advance(1)
    assert q.ack(q.claim("w", visibility=30))  # t=1: b, claimed at 1
    clock.advance(1)
    assert q.release() == 1  # t=2: a's park ends, and a is placed at 2
    clock.advance(1)
    b = q.claim("w", visibility=30)  # t=3: b (claimed at 1) before a (placed at 2)
    assert b.group_id == "b" and q.ack(b)  # b claimed at 3
    clock.advance(1)
    assert q.claim("w", visibility=30).group_id == "a"  # t=4: a (2) before b (3)
