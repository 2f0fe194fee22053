"""The queue's rules, proven on every transport (see ``conftest.open_queue``)."""

from __future__ import annotations

from typing import Any

import pytest

from harel_sa import Event, Lease, schema_for
from tests.conftest import FakeClock
from tests.contract.conftest import read
from tests.legacy import LegacyFile

VIS = 30.0


def ev(kind: str, **data: Any) -> Event:
    return Event(kind=kind, data=data)


def kinds(leases: list[Lease[Any] | None]) -> list[str | None]:
    return [None if lease is None else lease.event.kind for lease in leases]


@pytest.fixture
def q(open_queue: Any, db: str, clock: FakeClock) -> Any:
    return open_queue(db, clock=clock)


def drain(q: Any, worker: str = "w") -> list[tuple[str, str]]:
    """Claim and ack until empty; (group, kind) in delivery order."""
    out = []
    while (lease := q.claim(worker, VIS)) is not None:
        out.append((lease.group_id, lease.event.kind))
        assert q.ack(lease)
    return out


def test_fifo_within_a_group(q: Any) -> None:
    for i in range(5):
        q.publish("g", ev(f"m{i}"))
    assert drain(q) == [("g", f"m{i}") for i in range(5)]


def test_one_in_flight_per_group_while_other_groups_proceed(q: Any) -> None:
    q.publish("a", ev("a1"))
    q.publish("a", ev("a2"))
    q.publish("b", ev("b1"))
    first = q.claim("w1", VIS)
    assert first.event.kind == "a1"
    second = q.claim("w2", VIS)
    assert second.event.kind == "b1"  # a is in flight: b goes ahead
    assert q.claim("w3", VIS) is None  # a2 waits behind a1, b is in flight
    assert q.ack(first)
    assert q.claim("w3", VIS).event.kind == "a2"


def test_round_robin_oldest_claimed_first_never_claimed_in_arrival_order(
    q: Any, clock: FakeClock
) -> None:
    for group in ("c", "a", "b"):  # arrival order, not name order
        for i in range(2):
            q.publish(group, ev(f"{group}{i}"))
    order = []
    for _ in range(6):
        clock.advance(1)
        lease = q.claim("w", VIS)
        order.append(lease.event.kind)
        q.ack(lease)
    assert order == ["c0", "a0", "b0", "c1", "a1", "b1"]


def test_a_new_group_goes_before_groups_already_served(q: Any, clock: FakeClock) -> None:
    q.publish("old", ev("o1"))
    q.publish("old", ev("o2"))
    clock.advance(1)
    q.ack(q.claim("w", VIS))
    q.publish("new", ev("n1"))
    clock.advance(1)
    assert q.claim("w", VIS).event.kind == "n1"


def test_ties_in_last_claimed_go_by_arrival(q: Any) -> None:
    # Same clock for every claim: groups tie on last_claimed_at and rotate by arrival.
    for group in ("x", "y", "z"):
        q.publish(group, ev(f"{group}1"))
        q.publish(group, ev(f"{group}2"))
    got = []
    for _ in range(3):
        lease = q.claim("w", VIS)
        got.append(lease.event.kind)
        q.ack(lease)
    assert got == ["x1", "y1", "z1"]


def test_priority_floor(q: Any) -> None:
    q.publish("low", ev("low"), priority=0)
    q.publish("mid", ev("mid"), priority=2)
    q.publish("top", ev("top"), priority=4)
    assert q.claim("w", VIS, min_priority=3).event.kind == "top"
    assert q.claim("w", VIS, min_priority=3) is None
    assert q.claim("w", VIS, min_priority=1).event.kind == "mid"
    assert q.claim("w", VIS, min_priority=0).event.kind == "low"


def test_priority_floor_keeps_round_robin_across_priorities(q: Any, clock: FakeClock) -> None:
    q.publish("p3", ev("p3-1"), priority=3)
    q.publish("p2", ev("p2-1"), priority=2)
    q.publish("p3", ev("p3-2"))
    q.publish("p2", ev("p2-2"))
    got = []
    for _ in range(4):
        clock.advance(1)
        lease = q.claim("w", VIS, min_priority=2)
        got.append(lease.event.kind)
        q.ack(lease)
    assert got == ["p3-1", "p2-1", "p3-2", "p2-2"]


def test_first_publish_fixes_priority_and_routing_key_until_the_group_drains(q: Any) -> None:
    q.publish("g", ev("1"), priority=1, routing_key="east")
    q.publish("g", ev("2"), priority=4, routing_key="west")  # ignored: the group exists
    assert q.claim("w", VIS, min_priority=2) is None
    assert q.claim("w", VIS, routing_keys=["west"]) is None
    lease = q.claim("w", VIS, routing_keys=["east"], min_priority=1)
    assert lease.event.kind == "1"
    q.ack(lease)
    q.ack(q.claim("w", VIS, routing_keys=["east"]))
    # drained: the group row is gone, the next publish sets both again
    q.publish("g", ev("3"), priority=4, routing_key="west")
    assert q.claim("w", VIS, routing_keys=["east"]) is None
    assert q.claim("w", VIS, routing_keys=["west"], min_priority=4).event.kind == "3"


def test_a_claim_reads_its_arguments_afresh_when_they_may_have_changed(q: Any) -> None:
    """A worker's claims pass the same argument objects each time, whose checks a transport may
    remember; a list of routing keys changed in place between two claims is read again."""
    q.publish("a", ev("a"), routing_key="k1")
    q.publish("b", ev("b"), routing_key="k2")
    keys = ["k1"]
    assert q.claim("w", VIS, routing_keys=keys).event.kind == "a"
    keys[0] = "k2"
    assert q.claim("w", VIS, routing_keys=keys).event.kind == "b"
    fixed = ("k1", "k2")
    assert q.claim("w", VIS, routing_keys=fixed) is None  # both in flight
    assert q.claim("w", VIS, routing_keys=fixed) is None
    with pytest.raises(ValueError):
        q.claim("w", -1.0, routing_keys=fixed)


def test_routing_keys(q: Any, clock: FakeClock) -> None:
    q.publish("a", ev("a"), routing_key="k1")
    q.publish("b", ev("b"), routing_key="k2")
    q.publish("c", ev("c"), routing_key="k3")
    q.publish("n", ev("n"))  # no key: only a claim without routing_keys takes it
    assert q.claim("w", VIS, routing_keys=["nope"]) is None
    got = []
    for _ in range(2):
        clock.advance(1)
        got.append(q.claim("w", VIS, routing_keys=("k3", "k1")).event.kind)
    assert got == ["a", "c"]  # round-robin order, not the order of the keys
    assert q.claim("w", VIS, routing_keys=("k3", "k1")) is None
    assert q.claim("w", VIS, routing_keys=("k2",)).event.kind == "b"
    assert q.claim("w", VIS).event.kind == "n"


def test_a_lapsed_lease_redelivers_the_same_message(q: Any, clock: FakeClock) -> None:
    q.publish("g", ev("m1"))
    q.publish("g", ev("m2"))
    first = q.claim("crashed", VIS)
    clock.advance(VIS - 1)
    assert q.claim("w2", VIS) is None  # still leased
    clock.advance(2)
    again = q.claim("w2", VIS)
    assert (again.seq, again.event) == (first.seq, first.event)
    assert again.deliveries == 2


def test_nack_zero_retries_at_once(q: Any) -> None:
    q.publish("g", ev("m1"))
    q.publish("g", ev("m2"))
    lease = q.claim("w", VIS)
    assert q.nack(lease, 0)
    assert q.claim("w", VIS).event.kind == "m1"


def test_nack_delay_parks_the_head_and_blocks_its_group(q: Any, clock: FakeClock) -> None:
    q.publish("g", ev("m1"))
    q.publish("g", ev("m2"))
    q.publish("other", ev("o1"))
    assert q.nack(q.claim("w", VIS), delay=60)
    assert q.claim("w", 1000).event.kind == "o1"  # g is blocked, other proceeds
    clock.advance(59)
    assert q.claim("w", VIS) is None
    clock.advance(2)
    assert q.claim("w", VIS).event.kind == "m1"  # the parked head comes back first


def test_ack_removes_the_message_and_the_empty_group(q: Any, db: str) -> None:
    q.publish("g", ev("m1"))
    q.publish("g", ev("m2"))
    names = schema_for().names
    q.ack(q.claim("w", VIS))
    assert read(db, f"SELECT count(*) FROM {names.messages}") == [(1,)]
    assert read(db, f"SELECT count(*) FROM {names.groups}") == [(1,)]
    q.ack(q.claim("w", VIS))
    assert read(db, f"SELECT count(*) FROM {names.messages}") == [(0,)]
    assert read(db, f"SELECT count(*) FROM {names.groups}") == [(0,)]


def test_messages_and_leases_survive_close_and_reopen(
    open_queue: Any, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("g", ev("m1"))
    q.publish("g", ev("m2"))
    q.publish("h", ev("h1"))
    lease = q.claim("w", VIS)
    q.close()
    q = open_queue(db, clock=clock)
    assert q.claim("w", VIS).event.kind == "h1"  # g's lease held across the reopen
    assert q.ack(lease)  # and the old lease still acks
    assert q.claim("w", VIS).event.kind == "m2"


def test_two_prefixes_share_a_file_without_seeing_each_other(
    open_queue: Any, db: str, clock: FakeClock
) -> None:
    a = open_queue(db, prefix="alpha", clock=clock)
    b = open_queue(db, prefix="beta", clock=clock)
    a.publish("g", ev("from-a"))
    assert b.claim("w", VIS) is None
    b.publish("g", ev("from-b"))
    assert a.claim("w", VIS).event.kind == "from-a"
    assert b.claim("w", VIS).event.kind == "from-b"  # same group name, its own queue


@pytest.mark.sqlite_file  # the original stdlib transport's files are SQLite files
@pytest.mark.parametrize("routing_key", [False, True], ids=["schema3", "schema4"])
def test_a_file_from_the_original_transport_is_upgraded_and_its_rows_claimed(
    open_queue: Any, db: str, clock: FakeClock, routing_key: bool
) -> None:
    legacy = LegacyFile(db, routing_key=routing_key)
    held = legacy.publish("a", "a1")
    legacy.publish("a", "a2")
    legacy.publish("b", "b1", priority=3)
    legacy.publish("lost", "l1", orphan=True)
    legacy.lease(held, "old-worker", clock.now + 100)
    legacy.close()
    q = open_queue(db, clock=clock)
    got = []
    while (lease := q.claim("w", VIS)) is not None:
        got.append(lease.event.kind)
        q.ack(lease)
    assert got == ["b1", "l1"]  # a1 is still leased by the old worker; the orphan is adopted
    clock.advance(101)
    assert drain(q) == [("a", "a1"), ("a", "a2")]


def test_event_type_is_the_callers_model(open_queue: Any, db: str) -> None:
    from pydantic import BaseModel

    class Job(BaseModel):
        name: str
        size: int

    q = open_queue(db, event_type=Job)
    q.publish("g", Job(name="x", size=3))
    lease = q.claim("w", VIS)
    assert lease.event == Job(name="x", size=3)
