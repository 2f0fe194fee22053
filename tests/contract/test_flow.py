"""Pauses and backoffs (issue 56) on all four transports, a clock the test moves.

A paused routing key or group starts nothing until ``resume``; what is paused keeps its order;
a backoff holds a key's claims until its end; the groups a pause holds sit before the start of
every claim's walk (``harel_sa.flow.PAUSED_AT``), so they cost other claims nothing.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from harel_sa import Event, InvalidArgumentError, InvalidArgumentTypeError
from harel_sa.schema import Names
from tests.conftest import FakeClock
from tests.contract.conftest import OpenQueue, read

VIS = 30.0
GROUPS = Names().groups


def ev(kind: str) -> Event:
    return Event(kind=kind)


def drain(q: Any, **claim: Any) -> list[str]:
    seen = []
    while (lease := q.claim("w", VIS, **claim)) is not None:
        seen.append(lease.event.kind)
        assert q.ack(lease)
    return seen


def places(db: str) -> dict[str, float]:
    return dict(read(db, f"SELECT group_id, last_claimed_at FROM {GROUPS}"))


def test_a_paused_key_starts_nothing_until_resumed_and_keeps_its_order(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("m1", ev("m1a"), routing_key="mail")
    q.publish("m1", ev("m1b"), routing_key="mail")
    q.publish("o", ev("other"))
    q.publish("s", ev("sms"), routing_key="sms")
    assert q.pause(routing_key="mail") is True
    assert q.pause(routing_key="mail") is False  # already
    # Every way a group of the key is made while it is paused: held too.
    q.publish("m2", ev("m2"), routing_key="mail")
    q.publish_many([("m3", ev("m3")), ("m4", ev("m4"))], routing_key="mail")
    q.publish("m5", ev("m5"), routing_key="mail", delay=5)
    q.publish("m6", ev("m6"), routing_key="mail", key="only")
    clock.advance(6)
    assert drain(q) == ["other", "sms"]
    assert q.claim("w", VIS, routing_keys=["mail"]) is None
    assert q.claim_many("w", VIS, 8) == []
    assert places(db)["m1"] == -math.inf and places(db)["m2"] == -math.inf
    [pause] = q.paused()
    assert (pause.routing_key, pause.group_id, pause.since) == ("mail", None, clock.now - 6)
    assert q.stats().paused == [pause]
    assert q.resume(routing_key="mail") is True
    assert q.resume(routing_key="mail") is False
    assert q.paused() == []
    after = drain(q)
    assert sorted(after) == ["m1a", "m1b", "m2", "m3", "m4", "m5", "m6"]
    assert after.index("m1a") < after.index("m1b")
    assert all(at > -math.inf for at in places(db).values())


def test_a_paused_group_is_held_alone_and_stays_paused_when_it_drains(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("a", ev("a1"))
    q.publish("b", ev("b1"))
    lease = q.claim("w", VIS)
    assert lease is not None and lease.group_id == "a"
    assert q.pause(group_id="a") is True
    assert q.ack(lease)  # a lease out when the pause came settles as usual
    assert drain(q) == ["b1"]
    q.publish("a", ev("a2"))  # the group drained; its new row is paused too
    assert drain(q) == []
    assert q.resume(group_id="a")
    assert drain(q) == ["a2"]


def test_a_nack_with_delay_does_not_move_a_paused_group_back(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("a", ev("a1"))
    lease = q.claim("w", VIS)
    assert lease is not None
    q.pause(group_id="a")
    assert q.nack(lease, delay=5)
    clock.advance(10)
    assert places(db)["a"] == -math.inf and drain(q) == []
    q.resume(group_id="a")
    assert drain(q) == ["a1"]


def test_a_key_and_a_group_of_it_are_paused_and_resumed_each_on_its_own(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    for group in ("x", "y"):
        q.publish(group, ev(group), routing_key="k")
    q.publish("n", ev("n"))  # no routing key
    q.pause(routing_key="k")
    q.pause(group_id="x")
    q.pause(routing_key=None)  # the messages without a routing key
    assert {(p.routing_key, p.group_id) for p in q.paused()} == {
        ("k", None),
        (None, "x"),
        (None, None),
    }
    assert drain(q) == []
    q.resume(routing_key="k")
    assert drain(q) == ["y"]  # x's own pause still holds it
    q.resume(routing_key=None)
    assert drain(q) == ["n"]
    q.resume(group_id="x")
    assert drain(q) == ["x"]


def test_a_requeued_dead_message_of_a_paused_key_waits_for_its_resume(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("g", ev("poison"), routing_key="k")
    lease = q.claim("w", VIS)
    assert lease is not None and q.dead_letter(lease, "bad")
    q.pause(routing_key="k")
    assert q.requeue_dead() == 1
    assert drain(q) == []
    q.resume(routing_key="k")
    assert drain(q) == ["poison"]


def test_a_backoff_holds_a_key_until_it_ends_and_a_longer_one_is_kept(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("a", ev("a1"), routing_key="api")
    q.publish("o", ev("o1"))
    until = q.backoff("api", 10)
    assert until == pytest.approx(clock.now + 10)
    assert q.backoff("api", 2) == pytest.approx(until)  # a shorter one keeps the longer
    q.publish("b", ev("b1"), routing_key="api")  # a new group of the key waits as well
    assert q.limits() == {"api": q.limits()["api"]}
    assert q.limits()["api"].backoff_until == pytest.approx(until)
    assert q.stats().limits == q.limits()
    assert drain(q) == ["o1"]
    clock.advance(9.9)
    assert drain(q) == []
    clock.advance(0.2)
    assert sorted(drain(q)) == ["a1", "b1"]
    assert q.limits() == {}


def test_a_backoff_of_the_messages_without_a_key_leaves_keyed_ones_alone(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("n", ev("n"))
    q.publish("k", ev("k"), routing_key="k")
    q.backoff(None, 5)
    assert drain(q) == ["k"] and list(q.limits()) == [None]
    clock.advance(6)
    assert drain(q) == ["n"]


@pytest.mark.parametrize(
    ("call", "kwargs", "error"),
    [
        ("pause", {}, InvalidArgumentError),
        ("pause", {"routing_key": "k", "group_id": "g"}, InvalidArgumentError),
        ("pause", {"routing_key": ""}, InvalidArgumentError),
        ("pause", {"routing_key": 5}, InvalidArgumentTypeError),
        ("pause", {"group_id": None}, InvalidArgumentTypeError),
        ("resume", {}, InvalidArgumentError),
        ("resume", {"group_id": b"g"}, InvalidArgumentTypeError),
        ("backoff", {"routing_key": "k", "seconds": 0}, InvalidArgumentError),
        ("backoff", {"routing_key": "k", "seconds": -1}, InvalidArgumentError),
        ("backoff", {"routing_key": "k", "seconds": math.inf}, InvalidArgumentError),
        ("backoff", {"routing_key": "k", "seconds": math.nan}, InvalidArgumentError),
        ("backoff", {"routing_key": "k", "seconds": 86_401}, InvalidArgumentError),
        ("backoff", {"routing_key": "k", "seconds": "5"}, InvalidArgumentTypeError),
        ("backoff", {"routing_key": 1, "seconds": 5}, InvalidArgumentTypeError),
    ],
)
def test_bad_arguments_are_typed_errors_and_write_nothing(
    open_queue: OpenQueue, db: str, clock: FakeClock, call: str, kwargs: dict[str, Any], error: type
) -> None:
    q = open_queue(db, clock=clock)
    with pytest.raises(error):
        getattr(q, call)(**kwargs)
    assert q.paused() == [] and q.limits() == {}


def test_a_park_or_a_release_does_not_end_a_backoff_early(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("a", ev("a1"), routing_key="api")
    q.publish("b", ev("b1"), routing_key="api")
    first, second = q.claim("w", VIS), q.claim("w", VIS)
    assert first is not None and second is not None
    q.backoff("api", 60)
    # The 429'd messages, parked for less than the backoff: one's park ends by itself, the
    # other's by a release; neither is claimed before the backoff ends.
    assert q.nack(first, delay=5) and q.nack(second, delay=5)
    clock.advance(2)
    assert q.release(second.group_id) == 1
    assert drain(q) == []
    clock.advance(8)
    assert drain(q) == []
    clock.advance(51)
    assert sorted(drain(q)) == ["a1", "b1"]


def test_a_resume_leaves_a_backoff_of_the_same_key_running(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("a", ev("a1"), routing_key="k")
    q.pause(routing_key="k")
    until = q.backoff("k", 30)
    assert q.resume(routing_key="k") and q.paused() == []
    assert q.limits()["k"].backoff_until == pytest.approx(until)
    assert drain(q) == []
    clock.advance(31)
    assert drain(q) == ["a1"]
