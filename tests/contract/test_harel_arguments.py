"""What the harel engine may send that a stricter queue would refuse (issue 10), on every
transport: an execution created with ``execution_id=""`` is the group ``""``."""

from __future__ import annotations

from typing import Any

import pytest

from harel_sa import Event, Lease
from tests.conftest import FakeClock

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
