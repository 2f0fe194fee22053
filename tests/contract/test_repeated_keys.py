"""A routing key given twice is one key (issue 45, point 3): without that, a claim over
``["a", "a"]`` walks one lane twice and leases one head twice. On every transport kind, for
the single claim, ``claim_many`` and the fused calls."""

from __future__ import annotations

from typing import Any

from harel_sa import Event

VIS = 30.0


def test_a_repeated_routing_key_never_leases_one_message_twice(q: Any) -> None:
    for group in ("g1", "g2"):
        q.publish(group, Event(kind=group), routing_key="a")
    q.publish("other", Event(kind="other"), routing_key="b")

    leases = q.claim_many("w", VIS, 10, routing_keys=["a", "a", "a"])
    assert sorted(lease.group_id for lease in leases) == ["g1", "g2"]
    assert len({lease.seq for lease in leases}) == len(leases) == 2

    acked, again = q.ack_many_and_claim_many(leases[:1], "w", VIS, 10, routing_keys=["a", "a"])
    assert acked == [True] and again == []  # g2's head is in flight: nothing else to lease

    q.publish("g1", Event(kind="g1-next"), routing_key="a")
    q.publish("g1", Event(kind="g1-last"), routing_key="a")
    one = q.claim("w", VIS, routing_keys=["a", "a"])
    assert one is not None and one.event.kind == "g1-next"
    assert q.claim("w", VIS, routing_keys=["a", "a"]) is None  # both groups are in flight
    took, following = q.ack_and_claim(one, "w", VIS, routing_keys=["a", "a"])
    assert took and following is not None and following.event.kind == "g1-last"
    assert q.claim("w", VIS, routing_keys=["a", "a"]) is None
    assert q.stats().in_flight == 2
