"""A group's own concurrency (issue 56): ``publish(..., max_in_flight=N)`` on all four
transports, a clock the test moves.

Up to N of a group's messages are in flight at once, each started in publish order (no
message is claimed before an earlier one of its group); N is fixed by the publish that makes
the group row, as its priority is, and kept through a promotion and a requeue. The default, 1,
is today's promise (the rest of the suite holds it).
"""

from __future__ import annotations

from typing import Any

import pytest

from harel_sa import Event, InvalidArgumentError, InvalidArgumentTypeError
from harel_sa.schema import Names
from tests.conftest import FakeClock
from tests.contract.conftest import OpenQueue, read, write

VIS = 30.0
N = Names()


def ev(kind: str) -> Event:
    return Event(kind=kind)


def claims(q: Any, n: int = 20, **claim: Any) -> list[Any]:
    """Claims one by one until none is given (at most ``n``), none acked."""
    leases = []
    while len(leases) < n and (lease := q.claim("w", VIS, **claim)) is not None:
        leases.append(lease)
    return leases


def kinds(leases: list[Any]) -> list[str]:
    return [lease.event.kind for lease in leases]


def test_a_group_runs_up_to_its_max_in_flight_each_started_in_publish_order(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    for i in range(6):
        q.publish("tenant", ev(f"t{i}"), max_in_flight=3)
    q.publish("solo", ev("s0"))
    q.publish("solo", ev("s1"))
    first = claims(q)
    # Round-robin across groups is unchanged: a group with room is one group of the rotation.
    assert kinds(first) == ["t0", "s0", "t1", "t2"]
    by_kind = {lease.event.kind: lease for lease in first}
    assert q.ack(by_kind["t1"])  # settled out of order: the next one starts
    clock.advance(1)
    assert kinds(claims(q)) == ["t3"]  # the group goes to the rotation's end, after solo
    assert q.ack(by_kind["s0"])
    assert q.ack(by_kind["t0"])
    assert kinds(claims(q)) == ["s1", "t4"]
    assert q.claim("w", VIS) is None  # t2, t3, t4 in flight: t5 waits


def test_the_first_publish_fixes_it_and_one_is_one_at_a_time(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("a", ev("a0"))  # the group row is made with one at a time
    q.publish("a", ev("a1"), max_in_flight=5)
    q.publish("b", ev("b0"), max_in_flight=2)
    q.publish("b", ev("b1"), max_in_flight=1)
    q.publish("b", ev("b2"))
    q.publish("c", ev("c0"), max_in_flight=1)
    q.publish("c", ev("c1"), max_in_flight=1)
    assert kinds(claims(q)) == ["a0", "b0", "c0", "b1"]
    stored = dict(read(db, f"SELECT group_id, max_in_flight FROM {N.groups}"))
    assert stored == {"a": None, "b": 2, "c": None}  # 1 is stored as NULL, as before 0010


def test_a_lapsed_lease_is_offered_again_first_and_the_count_holds(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    for i in range(4):
        q.publish("g", ev(f"m{i}"), max_in_flight=2)
    m0 = q.claim("w", 10.0)
    clock.advance(5)
    m1 = q.claim("w", VIS)
    assert (m0.event.kind, m1.event.kind) == ("m0", "m1")
    assert q.claim("w", VIS) is None
    clock.advance(6)  # m0's lease lapsed: it goes again before m2, beside m1
    again = q.claim("w", VIS)
    assert again.event.kind == "m0" and again.deliveries == 2
    assert q.claim("w", VIS) is None
    assert not q.ack(m0)  # the lapsed lease is fenced
    assert q.ack(again)
    assert kinds(claims(q)) == ["m2"]


def test_a_park_holds_one_place_and_the_others_go_on(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    for i in range(4):
        q.publish("g", ev(f"m{i}"), max_in_flight=2)
    m0, m1 = claims(q)
    assert q.nack(m0, delay=20)  # parked: still one of the two
    assert q.claim("w", VIS) is None
    assert q.ack(m1)
    assert kinds(claims(q)) == ["m2"]
    clock.advance(21)  # the park ended: m0 is the first not in flight again
    assert kinds(claims(q)) == ["m0"]


def test_batches_take_one_message_per_group_per_claim(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish_many([("g", ev(f"g{i}")) for i in range(5)], max_in_flight=4)
    q.publish_many([("h", ev("h0")), ("h", ev("h1"))])
    assert kinds(q.claim_many("w", VIS, 8)) == ["g0", "h0"]
    assert kinds(q.claim_many("w", VIS, 8)) == ["g1"]
    assert kinds(q.claim_many("w", VIS, 8)) == ["g2"]
    assert kinds(q.claim_many("w", VIS, 8)) == ["g3"]
    assert q.claim_many("w", VIS, 8) == []


def test_scheduled_keyed_and_requeued_messages_keep_it(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("later", ev("l0"), max_in_flight=2, delay=5)
    q.publish_many([("later", ev("l1"))], max_in_flight=2, delay=5)
    assert q.publish("keyed", ev("k0"), key="k", max_in_flight=3)
    assert q.publish("keyed", ev("k1"), max_in_flight=3)
    clock.advance(6)
    leases = claims(q)
    assert sorted(kinds(leases)) == ["k0", "k1", "l0", "l1"]
    for lease in leases:
        assert q.dead_letter(lease, "bad")
    assert q.requeue_dead() == 4
    stored = dict(read(db, f"SELECT group_id, max_in_flight FROM {N.groups}"))
    assert stored == {"later": 2, "keyed": 3}
    assert sorted(kinds(claims(q))) == ["k0", "k1", "l0", "l1"]


def test_a_claim_with_a_floor_or_routing_keys_honours_it(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    for i in range(3):
        q.publish("hi", ev(f"h{i}"), priority=3, max_in_flight=2)
        q.publish("mail", ev(f"m{i}"), routing_key="mail", max_in_flight=2)
    assert kinds(claims(q, min_priority=2)) == ["h0", "h1"]
    assert kinds(claims(q, routing_keys=["mail"])) == ["m0", "m1"]
    assert q.claim("w", VIS) is None


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (0, InvalidArgumentError),
        (-1, InvalidArgumentError),
        (1001, InvalidArgumentError),
        ("3", InvalidArgumentTypeError),
        (2.0, InvalidArgumentTypeError),
        (True, InvalidArgumentTypeError),
        (None, InvalidArgumentTypeError),
    ],
)
def test_a_bad_max_in_flight_raises_before_anything_is_written(
    open_queue: OpenQueue, db: str, clock: FakeClock, value: object, error: type[Exception]
) -> None:
    q = open_queue(db, clock=clock)
    with pytest.raises(error, match="max_in_flight"):
        q.publish("g", ev("x"), max_in_flight=value)
    with pytest.raises(error, match="max_in_flight"):
        q.publish("g", ev("x"), max_in_flight=value, delay=5)
    with pytest.raises(error, match="max_in_flight"):
        q.publish("g", ev("x"), max_in_flight=value, key="k")
    with pytest.raises(error, match="max_in_flight"):
        q.publish_many([("g", ev("x"))], max_in_flight=value)
    assert q.stats().messages == 0 and q.stats().scheduled == 0
    assert read(db, f"SELECT count(*) FROM {N.groups}") == [(0,)]


def only_the_first_starts_after(q: Any, db: str, odd: str) -> None:
    """A group of 3 at once whose row another program set to ``odd``: one at a time."""
    for i in range(3):
        q.publish("g", ev(f"m{i}"), max_in_flight=3)
    write(db, f"UPDATE {N.groups} SET max_in_flight = {odd}")
    assert kinds(claims(q)) == ["m0"]


@pytest.mark.parametrize("odd", ["0", "-3", "NULL"])
def test_a_value_another_program_wrote_below_two_is_one_at_a_time(
    open_queue: OpenQueue, db: str, clock: FakeClock, odd: str
) -> None:
    only_the_first_starts_after(open_queue(db, clock=clock), db, odd)


@pytest.mark.sqlite_file
@pytest.mark.parametrize("odd", ["'x'", "2.5", "X'03'"])
def test_a_value_sqlite_holds_that_is_no_integer_is_one_at_a_time(
    open_queue: OpenQueue, db: str, clock: FakeClock, odd: str
) -> None:
    only_the_first_starts_after(open_queue(db, clock=clock), db, odd)


def test_a_huge_value_another_program_wrote_is_the_largest_allowed(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish_many([("g", ev(f"m{i}")) for i in range(1003)], max_in_flight=2)
    write(db, f"UPDATE {N.groups} SET max_in_flight = 2000000000")
    assert len(claims(q, 2000)) == 1000
