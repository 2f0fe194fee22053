"""What the harel engine may send that a stricter queue would refuse (issue 10), on every
transport: an execution created with ``execution_id=""`` is the group ``""``, and a worker's
``priority_threshold`` is any int (``Worker(high_ratio=..., priority_threshold=5)`` claims
with ``min_priority=5`` first, which matches no group on harel's transport)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any

import pytest

from harel_sa import BusyError, Event, Lease
from tests.conftest import FakeClock
from tests.contract.test_bad_input import snapshot

VIS = 30.0


@pytest.fixture
def q(open_queue: Any, db: str, clock: FakeClock) -> Any:
    return open_queue(db, clock=clock)


def ev(kind: str) -> Event:
    return Event(kind=kind)


def drain(q: Any, **claim: Any) -> list[tuple[str, str]]:
    """Claim and ack until nothing is claimable; (group, kind) in delivery order."""
    out = []
    while (lease := q.claim("w", VIS, **claim)) is not None:
        out.append((lease.group_id, lease.event.kind))
        assert q.ack(lease)
    return out


# The group "".


def test_the_group_named_empty_is_published_claimed_and_acked_in_order(q: Any) -> None:
    q.publish("", ev("e1"))
    q.publish("a", ev("a1"))
    q.publish("", ev("e2"))
    q.publish_many([("", ev("e3")), ("b", ev("b1"))])

    first = q.claim("w", VIS)
    assert (first.group_id, first.event.kind) == ("", "e1")  # the first to arrive
    assert isinstance(first, Lease)
    # one in flight per group: "" waits behind e1 while the others go ahead
    others = q.claim_many("w", VIS, 5)
    assert [(x.group_id, x.event.kind) for x in others] == [("a", "a1"), ("b", "b1")]
    assert q.claim("w", VIS) is None
    assert q.ack_many([first, *others]) == [True, True, True]
    assert drain(q) == [("", "e2"), ("", "e3")]  # FIFO within the group ""
    assert q.stats().messages == 0


def test_the_group_named_empty_is_peeked_and_counted_like_any_other(q: Any) -> None:
    q.publish("", ev("e1"), priority=2, routing_key="k")
    q.publish("", ev("e2"))
    q.publish("a", ev("a1"))

    assert [(m.group_id, m.state) for m in q.peek("")] == [("", "ready"), ("", "ready")]
    assert [m.group_id for m in q.peek()] == ["", "", "a"]  # None: every group
    stats = q.stats()
    assert (stats.messages, stats.groups) == (3, 2)
    assert [(b.priority, b.groups, b.messages) for b in stats.by_priority] == [
        (0, 1, 1),
        (2, 1, 2),
    ]
    # the first publish fixed the group's priority and key, as for any group
    lease = q.claim("w", VIS, min_priority=2, routing_keys=["k"])
    assert (lease.group_id, lease.event.kind) == ("", "e1")
    assert [m.state for m in q.peek("")] == ["leased", "ready"]
    assert q.stats().leases_by_worker == {"w": 1}


def test_admin_calls_take_none_as_every_group_and_empty_as_the_group_named_empty(
    q: Any, clock: FakeClock
) -> None:
    q.publish("", ev("e1"))
    q.publish("", ev("e2"))
    q.publish("a", ev("a1"))
    for lease in q.claim_many("w", VIS, 2):
        assert q.nack(lease, 50)  # both groups parked
    assert q.release("") == 1  # only the group ""
    assert [(m.group_id, m.state) for m in q.peek()] == [
        ("", "ready"),
        ("", "ready"),
        ("a", "parked"),
    ]
    assert q.release(None) == 1  # every group: a's

    for lease in q.claim_many("w", VIS, 2):
        assert q.dead_letter(lease, "by hand")
    assert [d.group_id for d in q.dead("")] == [""]
    assert sorted(d.group_id for d in q.dead()) == ["", "a"]
    assert q.requeue_dead("") == 1
    assert [d.group_id for d in q.dead()] == ["a"]
    kinds = [Event.model_validate_json(m.event).kind for m in q.peek("")]
    assert kinds == ["e2", "e1"]  # e1 back at the tail of its group
    assert q.purge_dead("") == 0  # a's dead message is not the group ""'s
    assert q.purge("") == 2  # e2 and the requeued e1; a's messages stay
    assert q.peek("") == [] and q.stats().groups == 0
    assert [d.group_id for d in q.dead()] == ["a"]
    assert q.purge_dead(None) == 1


def test_a_lease_on_the_group_named_empty_is_fenced_like_any_other(
    q: Any, clock: FakeClock
) -> None:
    q.publish("", ev("e1"))
    lapsed = q.claim("w1", VIS)
    clock.advance(VIS + 1)
    again = q.claim("w2", VIS)
    assert again.seq == lapsed.seq and again.group_id == ""
    assert q.ack(lapsed) is False and q.extend(lapsed, VIS) is False
    assert q.nack(again, 5)
    assert q.claim("w3", VIS) is None  # parked: the group "" is blocked
    clock.advance(6)
    assert q.ack(q.claim("w3", VIS))


# Priority floors outside 0-4.


def test_a_floor_below_zero_claims_as_zero(q: Any) -> None:
    q.publish("low", ev("low"), priority=0)
    q.publish("top", ev("top"), priority=4)
    lease = q.claim("w", VIS, min_priority=-1)
    assert lease.event.kind == "low"  # priority 0 is claimable: the floor is 0
    assert [x.event.kind for x in q.claim_many("w", VIS, 5, min_priority=-(10**9))] == ["top"]
    acked, more = q.ack_many_and_claim_many([lease], "w", VIS, 5, min_priority=-1)
    assert (acked, more) == ([True], [])


@pytest.mark.parametrize("floor", [5, 6, 10**9])
def test_a_floor_above_four_claims_nothing_and_the_fused_calls_still_ack(
    q: Any, db: str, floor: int
) -> None:
    for priority in range(5):
        q.publish(f"p{priority}", ev(f"p{priority}"), priority=priority, routing_key="k")
    before = snapshot(db)
    assert q.claim("w", VIS, min_priority=floor) is None
    assert q.claim("w", VIS, min_priority=floor, routing_keys=["k"]) is None
    assert q.claim_many("w", VIS, 5, min_priority=floor) == []
    assert q.claim_many("w", VIS, 5, min_priority=floor, routing_keys=["k"]) == []
    assert snapshot(db) == before  # nothing leased, no group touched

    first, second, third = q.claim_many("w", VIS, 3)  # p0, p1, p2, by arrival
    acked, following = q.ack_and_claim(first, "w", VIS, min_priority=floor)
    assert (acked, following) == (True, None)
    acked, taken = q.ack_many_and_claim_many([second, third], "w", VIS, 5, min_priority=floor)
    assert (acked, taken) == ([True, True], [])
    acked, taken = q.ack_many_and_claim_many([], "w", VIS, 5, min_priority=floor)
    assert (acked, taken) == ([], [])
    assert [m.group_id for m in q.peek()] == ["p3", "p4"]  # acked: gone; the rest untouched
    assert q.stats().in_flight == 0
    assert drain(q, min_priority=4) == [("p4", "p4")]  # a floor of 4 still claims 4


@pytest.mark.sqlite_file  # SQLite's write lock: a PostgreSQL claim takes no global lock
def test_a_floor_above_four_does_not_wait_for_the_write_lock(
    open_queue: Any, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock, busy_timeout=0)
    q.publish("g", ev("g1"))
    lease = q.claim("w", VIS)
    with closing(sqlite3.connect(db, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # another program holds the write lock
        assert q.claim("w", VIS, min_priority=5) is None  # no transaction: no BusyError
        assert q.claim_many("w", VIS, 3, min_priority=5) == []
        with pytest.raises(BusyError):
            q.claim("w", VIS)
        with pytest.raises(BusyError):  # the fused call's ack still needs it
            q.ack_and_claim(lease, "w", VIS, min_priority=5)
        other.execute("ROLLBACK")
    assert q.ack_and_claim(lease, "w", VIS, min_priority=5) == (True, None)
