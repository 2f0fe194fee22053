"""Scheduled and keyed messages (issue 44) on all four transports, a clock the test moves.

A scheduled message holds up nothing before it is due, then joins the tail of its group at the
first claim after its due time (due-time order within a group); a key has at most one waiting
message; ``cancel`` deletes it, never one in flight.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest

from harel_sa import Event, InvalidArgumentError, InvalidArgumentTypeError
from tests.conftest import FakeClock
from tests.contract.conftest import OpenQueue

VIS = 30.0


def ev(kind: str) -> Event:
    return Event(kind=kind)


def drain(q: Any) -> list[str]:
    """Claim and ack until nothing is deliverable: the kinds, in delivery order."""
    seen = []
    while (lease := q.claim("w", VIS)) is not None:
        seen.append(lease.event.kind)
        assert q.ack(lease)
    return seen


def test_a_scheduled_message_does_not_hold_up_its_group(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    assert q.publish("g", ev("first")) is True
    assert q.publish("g", ev("later"), delay=10) is True
    q.publish("g", ev("second"))
    assert drain(q) == ["first", "second"]
    assert q.claim("w", VIS) is None
    clock.advance(9.9)
    assert q.claim("w", VIS) is None
    clock.advance(0.1)
    q.publish("g", ev("after-due"))  # published after the due time, before a claim
    # It joins at the first claim after its due time: behind what came before that claim.
    assert drain(q) == ["after-due", "later"]


def test_messages_published_before_the_due_time_go_first(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("g", ev("s"), delay=5)
    clock.advance(3)
    q.publish("g", ev("before-due"))
    clock.advance(3)
    assert drain(q) == ["before-due", "s"]


def test_scheduled_messages_of_a_group_join_in_due_time_order(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("g", ev("c"), delay=30)
    q.publish("g", ev("a"), delay=10)
    q.publish("g", ev("b"), not_before=datetime.fromtimestamp(clock.now + 20, UTC))
    q.publish("g", ev("d"), not_before=clock.now + 40)
    clock.advance(100)
    assert drain(q) == ["a", "b", "c", "d"]


def test_a_due_message_is_delivered_by_the_claim_that_finds_it_due(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("g", ev("x"), delay=1)
    q.publish("h", ev("busy"))
    held = q.claim("w", VIS)
    assert held is not None and held.event.kind == "busy"
    clock.advance(1)
    lease = q.claim("w", VIS)  # the idle path: nothing leasable until it promotes
    assert lease is not None and lease.event.kind == "x"
    acked, nxt = q.ack_and_claim(lease, "w", VIS)
    assert acked and nxt is None


def test_claim_many_and_publish_many_with_a_delay(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish_many([("a", ev("a1")), ("b", ev("b1")), ("a", ev("a2"))], delay=5)
    q.publish("c", ev("c1"))
    assert [lease.event.kind for lease in q.claim_many("w", VIS, 10)] == ["c1"]
    clock.advance(5)
    leases = q.claim_many("w", VIS, 10)
    assert [lease.event.kind for lease in leases] == ["a1", "b1"]
    acked, more = q.ack_many_and_claim_many(leases, "w", VIS, 10)
    assert acked == [True, True] and [lease.event.kind for lease in more] == ["a2"]


def test_stats_count_scheduled_messages_apart(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("g", ev("now"))
    q.publish("g", ev("later"), delay=60)
    stats = q.stats()
    assert stats.messages == 1 and stats.scheduled == 1
    clock.advance(60)
    drain(q)
    assert q.stats().scheduled == 0


def test_keep_replace_and_in_flight(open_queue: OpenQueue, db: str, clock: FakeClock) -> None:
    q = open_queue(db, clock=clock)
    assert q.publish("g", ev("k1"), key="K") is True
    assert q.publish("g", ev("k2"), key="K") is False  # keep: nothing written
    assert q.publish("g", ev("k3"), key="K", on_key="replace") is False
    assert q.publish("g", ev("plain")) is True
    lease = q.claim("w", VIS)
    assert lease is not None and lease.event.kind == "k3"  # replaced in its place
    # in flight: a new message is written, and it waits behind the one in flight
    assert q.publish("g", ev("k4"), key="K") is True
    assert q.publish("g", ev("k5"), key="K") is False
    assert q.ack(lease)
    assert drain(q) == ["plain", "k4"]


def test_keep_looks_among_the_queued_and_the_scheduled(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    assert q.publish("g", ev("s1"), key="S", delay=60) is True
    assert q.publish("g", ev("s2"), key="S") is False  # a scheduled one waits
    assert q.publish("g", ev("s3"), key="S", delay=5) is False
    assert q.publish("h", ev("q1"), key="Q") is True
    assert q.publish("h", ev("q2"), key="Q", delay=5) is False  # a queued one waits
    stats = q.stats()
    assert (stats.messages, stats.scheduled, stats.groups) == (1, 1, 1)
    clock.advance(60)
    assert drain(q) == ["q1", "s1"]


def test_a_scheduled_keyed_message_is_replaced_with_its_new_due_time(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    assert q.publish("g", ev("d1"), key="debounce", delay=5) is True
    clock.advance(4)
    assert q.publish("g", ev("d2"), key="debounce", delay=5, on_key="replace") is False
    clock.advance(4)
    assert q.claim("w", VIS) is None  # pushed back to 9 s from the first publish
    clock.advance(1)
    assert drain(q) == ["d2"]


def test_cancel_deletes_the_waiting_message_never_one_in_flight(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("g", ev("timer"), key="T", delay=60)
    assert q.cancel("T") is True
    assert q.cancel("T") is False
    clock.advance(61)
    assert q.claim("w", VIS) is None
    q.publish("g", ev("queued"), key="Q")
    lease = q.claim("w", VIS)
    assert lease is not None
    assert q.cancel("Q") is False  # in flight: untouched
    assert q.ack(lease)


def test_cancel_drops_the_group_it_emptied_and_no_other(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("alone", ev("a"), key="A")
    q.publish("shared", ev("b"), key="B")
    q.publish("shared", ev("plain"))
    q.publish("later", ev("c"), key="C", delay=60)
    assert q.stats().groups == 2
    assert q.cancel("A") and q.cancel("B") and q.cancel("C")
    stats = q.stats()
    assert (stats.messages, stats.scheduled, stats.groups) == (1, 0, 1)
    assert [(p.priority, p.groups, p.messages) for p in stats.by_priority] == [(0, 1, 1)]
    assert drain(q) == ["plain"]
    assert q.stats().groups == 0


def test_purge_deletes_the_groups_scheduled_messages_too(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("g", ev("now"))
    q.publish("g", ev("later"), delay=60)
    q.publish("g", ev("keyed"), key="K", delay=30)
    q.publish("only-later", ev("x"), delay=60)
    q.publish("h", ev("h-later"), delay=60)
    assert q.purge("g") == 3
    assert q.purge("only-later") == 1
    stats = q.stats()
    assert (stats.messages, stats.scheduled, stats.groups) == (0, 1, 0)
    assert q.publish("g", ev("again"), key="K") is True  # its key is free
    clock.advance(60)
    assert drain(q) == ["again", "h-later"]


def test_acked_and_dead_messages_free_their_key(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("g", ev("a"), key="K")
    lease = q.claim("w", VIS)
    assert lease is not None and q.ack(lease)
    assert q.publish("g", ev("b"), key="K") is True
    lease = q.claim("w", VIS)
    assert lease is not None and q.dead_letter(lease, "no")
    assert q.publish("g", ev("c"), key="K") is True
    assert drain(q) == ["c"]


BAD: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"delay": -1}, InvalidArgumentError),
    ({"delay": math.nan}, InvalidArgumentError),
    ({"delay": math.inf}, InvalidArgumentError),
    ({"delay": "5"}, InvalidArgumentTypeError),
    ({"not_before": datetime(2030, 1, 1)}, InvalidArgumentError),  # naive
    ({"not_before": -5.0}, InvalidArgumentError),
    ({"not_before": math.nan}, InvalidArgumentError),
    ({"delay": 1, "not_before": 5.0}, InvalidArgumentError),
    ({"key": ""}, InvalidArgumentError),
    ({"key": 5}, InvalidArgumentTypeError),
    ({"key": "k", "on_key": "drop"}, InvalidArgumentError),
]


@pytest.mark.parametrize(("options", "error"), BAD)
def test_bad_time_and_key_options_raise_before_anything_is_written(
    open_queue: OpenQueue, db: str, clock: FakeClock, options: dict[str, Any], error: type
) -> None:
    q = open_queue(db, clock=clock)
    with pytest.raises(error) as raised:
        q.publish("g", ev("x"), **options)
    assert type(raised.value) is error
    stats = q.stats()
    assert stats.messages == 0 and stats.scheduled == 0
    with pytest.raises(InvalidArgumentTypeError):
        q.cancel(None)


def test_peek_shows_scheduled_messages_with_their_due_time(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    q.publish("g", ev("now"))
    q.publish("g", ev("late"), delay=20)
    q.publish("h", ev("soon"), delay=10)
    assert [m.state for m in q.peek()] == ["ready"]  # by default, the queue alone
    shown = q.peek(scheduled=True)
    assert [(m.state, m.group_id, m.due_at) for m in shown] == [
        ("ready", "g", None),
        ("scheduled", "h", clock.now + 10),
        ("scheduled", "g", clock.now + 20),
    ]
    assert [m.group_id for m in q.peek("g", 5, scheduled=True)] == ["g", "g"]
    assert len(q.peek(None, 2, scheduled=True)) == 2


def test_peek_shows_each_messages_key(open_queue: OpenQueue, db: str, clock: FakeClock) -> None:
    q = open_queue(db, clock=clock)
    q.publish("g", ev("plain"))
    q.publish("g", ev("queued"), key="Q")
    q.publish("g", ev("later"), key="S", delay=10)
    q.publish("g", ev("later-plain"), delay=20)
    assert [(m.state, m.key) for m in q.peek(scheduled=True)] == [
        ("ready", None),
        ("ready", "Q"),
        ("scheduled", "S"),
        ("scheduled", None),
    ]
    lease = q.claim("w", VIS)
    assert lease is not None and lease.event.kind == "plain"
    q.ack(lease)
    lease = q.claim("w", VIS)
    assert lease is not None
    assert [(m.state, m.key) for m in q.peek()] == [("leased", "Q")]  # in flight, its key


def test_stats_say_when_the_first_scheduled_message_is_due(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    assert q.stats().next_due is None
    q.publish("g", ev("later"), delay=50)
    q.publish("h", ev("sooner"), delay=20)
    s = q.stats()
    assert s.scheduled == 2 and s.next_due == pytest.approx(clock.now + 20)
    clock.advance(21)
    assert drain(q) == ["sooner"]
    assert q.stats().next_due == pytest.approx(clock.now + 29)
