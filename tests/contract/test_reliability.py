"""What the queue does when things go wrong, proven on every transport (``open_queue``).

Fenced leases and heartbeats, poison rows and dead letters, and the operator's tools (stats,
peek, release, purge). Every check that matters reads the rows back with a plain connection
(``raw``: sqlite3, or psycopg on PostgreSQL): the transports' own answers are not taken on trust.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest
from pydantic import BaseModel, field_validator

from harel_sa import Event, Lease, schema_for
from tests.checks import assert_nothing_stranded
from tests.conftest import FakeClock
from tests.contract.raw import Raw

VIS = 30.0
NAMES = schema_for().names
M, G, D = NAMES.messages, NAMES.groups, NAMES.dead


def ev(kind: str, **data: Any) -> Event:
    return Event(kind=kind, data=data)


def row(raw: Raw, seq: int) -> tuple[Any, ...] | None:
    found: tuple[Any, ...] | None = raw.execute(
        f"SELECT seq, group_id, event, locked_by, lock_expiry, deliveries FROM {M} WHERE seq = ?",
        (seq,),
    ).fetchone()
    return found


def messages(raw: Raw) -> list[tuple[int, str, str]]:
    """(seq, group, kind) of every message, in seq order."""
    return [
        (seq, group, json.loads(event)["kind"])
        for seq, group, event in raw.execute(f"SELECT seq, group_id, event FROM {M} ORDER BY seq")
    ]


def groups(raw: Raw) -> dict[str, tuple[float, int, str | None]]:
    return {
        g: (last, prio, key)
        for g, last, prio, key in raw.execute(
            f"SELECT group_id, last_claimed_at, priority, routing_key FROM {G}"
        )
    }


def dead_rows(raw: Raw) -> list[tuple[Any, ...]]:
    return raw.execute(
        f"SELECT seq, group_id, event, error, dead_at, deliveries, priority, routing_key "
        f"FROM {D} ORDER BY seq"
    ).fetchall()


def drain(q: Any, **claim: Any) -> list[tuple[str, str]]:
    """Claim and ack until nothing is deliverable; (group, kind) in delivery order."""
    out = []
    while (lease := q.claim("drainer", VIS, **claim)) is not None:
        out.append((lease.group_id, lease.event.kind))
        assert q.ack(lease)
    return out


def insert_raw(raw: Raw, group: str, event: str, priority: int = 0) -> int:
    """A message written behind the transport's back, as another program might."""
    raw.execute("BEGIN IMMEDIATE")
    cur = raw.execute(
        f"INSERT INTO {M} (group_id, event) VALUES (?, ?) RETURNING seq", (group, event)
    )
    (seq,) = cur.fetchone()
    raw.execute(
        f"INSERT INTO {G} (group_id, priority) VALUES (?, ?) ON CONFLICT DO NOTHING",
        (group, priority),
    )
    raw.execute("COMMIT")
    return int(seq)


# --- fenced leases --------------------------------------------------------------------------


def test_a_late_ack_or_nack_after_the_lease_lapsed_changes_nothing(
    q: Any, raw: Raw, clock: FakeClock
) -> None:
    q.publish("g", ev("m1"))
    q.publish("g", ev("m2"))
    slow = q.claim("slow", VIS)
    clock.advance(VIS + 1)  # the slow worker's lease lapses...
    fast = q.claim("fast", VIS)  # ...and another worker takes the message
    assert (fast.seq, fast.event) == (slow.seq, slow.event)
    assert fast.token != slow.token
    held = row(raw, fast.seq)
    assert held is not None and held[3] == fast.locked_by == f"fast#{fast.token}"
    assert held[4] == clock.now + VIS and held[5] == 2

    assert q.ack(slow) is False
    assert q.nack(slow) is False
    assert q.nack(slow, 60) is False
    assert q.extend(slow, 1000) is False
    assert q.dead_letter(slow, "gave up") is False
    assert q.ack_and_claim(slow, "slow", VIS) == (False, None)  # g is fast's; nothing else

    assert row(raw, fast.seq) == held  # fast's message: untouched
    assert [m[2] for m in messages(raw)] == ["m1", "m2"]
    assert set(groups(raw)) == {"g"}
    assert dead_rows(raw) == []
    assert q.claim("third", VIS) is None  # g still has exactly one message in flight: fast's
    assert q.ack(fast) is True
    nxt = q.claim("fast", VIS)
    assert (nxt.event.kind, nxt.deliveries) == ("m2", 1)


def test_the_fence_is_the_token_not_the_worker_id(q: Any, raw: Raw, clock: FakeClock) -> None:
    q.publish("g", ev("m1"))
    first = q.claim("w", VIS)
    clock.advance(VIS + 1)
    second = q.claim("w", VIS)  # the same worker id claims the message again
    assert second.seq == first.seq and second.token != first.token
    assert q.ack(first) is False  # the stale lease of the same worker still loses
    assert row(raw, second.seq) is not None
    assert q.ack(second) is True
    assert row(raw, second.seq) is None


def test_an_ack_of_a_message_already_acked_returns_false(q: Any, raw: Raw) -> None:
    q.publish("g", ev("m1"))
    q.publish("g", ev("m2"))
    lease = q.claim("w", VIS)
    assert q.ack(lease) is True
    assert q.ack(lease) is False
    assert q.nack(lease) is False
    assert [m[2] for m in messages(raw)] == ["m2"]
    assert row(raw, messages(raw)[0][0])[3] is None  # type: ignore[index]


def test_extend_keeps_the_message_across_several_visibility_periods(
    q: Any, raw: Raw, clock: FakeClock
) -> None:
    q.publish("g", ev("m1"))
    q.publish("g", ev("m2"))
    q.publish("other", ev("o1"))
    lease = q.claim("slow", 10)
    for _ in range(6):  # 6 x 8 s = 48 s, almost five visibility periods
        clock.advance(8)
        assert q.extend(lease, 10) is True
        held = row(raw, lease.seq)
        assert held is not None and held[3] == lease.locked_by
        assert held[4] == clock.now + 10
        peer = q.claim("peer", 10)  # g stays blocked, other groups proceed
        assert peer is None or peer.group_id == "other"
        if peer is not None:
            assert q.ack(peer)
    assert q.ack(lease) is True
    nxt = q.claim("peer", 10)
    assert (nxt.event.kind, nxt.deliveries) == ("m2", 1)
    assert dead_rows(raw) == []


def test_an_extended_lease_that_then_lapses_is_redelivered(
    q: Any, raw: Raw, clock: FakeClock
) -> None:
    q.publish("g", ev("m1"))
    lease = q.claim("slow", 10)
    clock.advance(8)
    assert q.extend(lease, 10)
    clock.advance(9)
    assert q.claim("peer", 10) is None  # 17 s after the claim: kept by the extension
    clock.advance(2)  # the extension lapses too
    again = q.claim("peer", 10)
    assert (again.seq, again.event, again.deliveries) == (lease.seq, lease.event, 2)
    assert q.extend(lease, 10) is False
    assert q.ack(lease) is False
    assert row(raw, again.seq)[3] == again.locked_by  # type: ignore[index]


# --- poison rows and dead letters -----------------------------------------------------------

POISON = {
    "not-json": "{this is not json",
    "wrong-shape": json.dumps({"id": "x", "data": []}),  # no kind, data not a dict
}


@pytest.mark.parametrize("poison", list(POISON), ids=list(POISON))
def test_a_poison_row_is_buried_and_blocks_nothing_then_requeued_once_fixed(
    q: Any, raw: Raw, clock: FakeClock, poison: str
) -> None:
    bad = insert_raw(raw, "g1", POISON[poison], priority=2)
    q.publish("g1", ev("b1"))
    q.publish("g1", ev("b2"))
    q.publish("g2", ev("c1"))

    first = q.claim("w", VIS)  # the poison head is buried, its group goes on
    assert (first.group_id, first.event.kind) == ("g1", "b1")
    second = q.claim("w", VIS)
    assert (second.group_id, second.event.kind) == ("g2", "c1")

    assert row(raw, bad) is None
    buried = dead_rows(raw)
    assert len(buried) == 1
    seq, group, event, error, dead_at, deliveries, priority, key = buried[0]
    assert (seq, group, event, dead_at, deliveries, priority, key) == (
        bad,
        "g1",
        POISON[poison],
        clock.now,
        0,  # it was never delivered
        2,
        None,
    )
    assert error.startswith("undecodable event")
    assert ("Invalid JSON" if poison == "not-json" else "kind") in error
    listed = q.dead()
    assert [(d.seq, d.group_id, d.error) for d in listed] == [(bad, "g1", error)]
    assert q.dead(group_id="g2") == []
    assert q.stats().dead == 1
    assert_nothing_stranded(raw)

    # Fixed by hand, then requeued: it goes to the tail of its group.
    fixed = Event(kind="fixed").model_dump_json()
    raw.execute(f"UPDATE {D} SET event = ? WHERE seq = ?", (fixed, bad))
    q.publish("g1", ev("b3"))
    assert q.requeue_dead(seqs=[bad]) == 1
    assert dead_rows(raw) == []
    assert [(g, k) for _, g, k in messages(raw)] == [
        ("g1", "b1"),  # leased, not acked yet
        ("g1", "b2"),
        ("g2", "c1"),  # leased
        ("g1", "b3"),
        ("g1", "fixed"),
    ]
    assert q.ack(first) and q.ack(second)
    assert drain(q) == [("g1", "b2"), ("g1", "b3"), ("g1", "fixed")]
    assert_nothing_stranded(raw)
    assert messages(raw) == [] and groups(raw) == {}


def test_a_poison_row_alone_in_its_group_lets_other_groups_through(
    q: Any, raw: Raw, clock: FakeClock
) -> None:
    bad = insert_raw(raw, "poisoned", "][", priority=3)
    raw.execute(f"UPDATE {G} SET routing_key = 'east' WHERE group_id = 'poisoned'")
    q.publish("fine", ev("f1"))
    lease = q.claim("w", VIS)
    assert (lease.group_id, lease.event.kind) == ("fine", "f1")
    assert set(groups(raw)) == {"fine"}  # the poison's group went with it: nothing stranded
    assert [d.seq for d in q.dead()] == [bad]

    raw.execute(
        f"UPDATE {D} SET event = ? WHERE seq = ?", (Event(kind="fixed").model_dump_json(), bad)
    )
    assert q.requeue_dead(group_id="poisoned") == 1
    # The group comes back with the priority and routing key it had.
    assert groups(raw)["poisoned"][1:] == (3, "east")
    assert q.claim("w", VIS, routing_keys=["west"]) is None
    again = q.claim("w", VIS, min_priority=3, routing_keys=["east"])
    assert (again.group_id, again.event.kind, again.deliveries) == ("poisoned", "fixed", 1)
    assert again.seq > bad  # a new tail position, not its old one


def test_a_requeued_row_still_broken_goes_back_to_the_dead_table(q: Any, raw: Raw) -> None:
    bad = insert_raw(raw, "g", "nope")
    assert q.claim("w", VIS) is None
    assert q.requeue_dead() == 1
    assert dead_rows(raw) == []
    assert q.claim("w", VIS) is None  # buried again, never delivered
    assert [(d.group_id, d.event) for d in q.dead()] == [("g", "nope")]
    assert q.dead()[0].seq != bad


@pytest.mark.parametrize("how", ["nack", "lapse"])
def test_max_deliveries_dead_letters_after_exactly_n_deliveries(
    q: Any, raw: Raw, clock: FakeClock, how: str
) -> None:
    n = 3
    q.publish("g", ev("doomed"))
    q.publish("g", ev("next"))
    delivered = []
    while (lease := q.claim("w", VIS, max_deliveries=n)) is not None:
        if lease.event.kind == "next":
            break
        delivered.append(lease.deliveries)
        if how == "nack":
            assert q.nack(lease)
        else:
            clock.advance(VIS + 1)  # the worker died holding it
    assert delivered == [1, 2, 3]
    assert lease is not None and lease.event.kind == "next"
    (buried,) = q.dead()
    assert (buried.group_id, buried.deliveries) == ("g", n)
    assert json.loads(buried.event)["kind"] == "doomed"
    assert buried.error == f"delivered {n} times (max {n})"
    assert buried.dead_at == clock.now
    assert [m[2] for m in messages(raw)] == ["next"]


def test_without_max_deliveries_a_message_is_delivered_again_and_again(
    q: Any, clock: FakeClock
) -> None:
    q.publish("g", ev("m"))
    for i in range(1, 6):
        lease = q.claim("w", VIS)
        assert lease.deliveries == i
        assert q.nack(lease)
    assert q.dead() == []


def test_dead_letter_moves_the_leased_message_and_unblocks_its_group(
    q: Any, raw: Raw, clock: FakeClock
) -> None:
    q.publish("g", ev("bad"), priority=1, routing_key="r")
    q.publish("g", ev("good"))
    lease = q.claim("w", VIS)
    clock.advance(5)
    assert q.dead_letter(lease, "customer 42 does not exist") is True
    assert dead_rows(raw) == [
        (lease.seq, "g", raw_event(lease), "customer 42 does not exist", clock.now, 1, 1, "r")
    ]
    assert q.dead_letter(lease, "again") is False
    assert q.ack(lease) is False
    nxt = q.claim("w", VIS)
    assert nxt.event.kind == "good"
    assert q.ack(nxt)
    assert groups(raw) == {}


def raw_event(lease: Lease[Any]) -> str:
    return str(lease.event.model_dump_json())


def bury_all(q: Any, plan: list[tuple[str, str]]) -> dict[str, int]:
    """Publish ``(group, kind)`` pairs and dead-letter every one; kind -> seq."""
    for group, kind in plan:
        q.publish(group, ev(kind))
    seqs = {}
    while (lease := q.claim("w", VIS)) is not None:
        assert q.dead_letter(lease, f"reject {lease.event.kind}")
        seqs[lease.event.kind] = lease.seq
    return seqs


PLAN = [("a", "a1"), ("b", "b1"), ("a", "a2"), ("c", "c1"), ("b", "b2")]


def test_requeue_dead_by_group_by_seqs_and_all(q: Any, raw: Raw) -> None:
    seqs = bury_all(q, PLAN)
    assert len(q.dead()) == 5 and messages(raw) == []
    assert q.requeue_dead(group_id="a") == 2
    assert sorted(d.group_id for d in q.dead()) == ["b", "b", "c"]
    assert q.requeue_dead(seqs=[seqs["b2"], 999_999]) == 1
    assert q.requeue_dead(group_id="nobody") == 0
    assert sorted(d.seq for d in q.dead()) == sorted([seqs["b1"], seqs["c1"]])
    assert q.requeue_dead() == 2
    assert q.dead() == [] and dead_rows(raw) == []
    assert_nothing_stranded(raw)
    # Each requeue appends at the tail of the group, in the old order among what it moves;
    # delivery counts start again.
    got: dict[str, list[str]] = {}
    while (lease := q.claim("w", VIS)) is not None:
        assert lease.deliveries == 1
        got.setdefault(lease.group_id, []).append(lease.event.kind)
        assert q.ack(lease)
    assert got == {"a": ["a1", "a2"], "b": ["b2", "b1"], "c": ["c1"]}


def test_purge_dead_by_group_by_seqs_and_all(q: Any, raw: Raw) -> None:
    seqs = bury_all(q, PLAN)
    assert q.purge_dead(group_id="b") == 2
    assert sorted(d.group_id for d in q.dead()) == ["a", "a", "c"]
    assert q.purge_dead(seqs=[seqs["a2"]]) == 1
    assert [d.seq for d in q.dead()] == sorted([seqs["a1"], seqs["c1"]])
    assert q.purge_dead() == 2
    assert dead_rows(raw) == [] and messages(raw) == [] and groups(raw) == {}
    assert q.requeue_dead() == 0


def test_dead_lists_by_group_seqs_and_limit(q: Any) -> None:
    seqs = bury_all(q, PLAN)
    assert [d.seq for d in q.dead()] == sorted(seqs.values())
    assert [d.seq for d in q.dead(limit=2)] == sorted(seqs.values())[:2]
    assert [d.error for d in q.dead(group_id="c")] == ["reject c1"]
    assert [d.seq for d in q.dead(seqs=[seqs["b2"], seqs["a1"]])] == sorted(
        [seqs["b2"], seqs["a1"]]
    )


class Abort(BaseException):
    """Not an ``Exception``: what a cancellation or an interrupt looks like to a transaction."""


class Touchy(BaseModel):
    """An event model whose decoding blows up, inside the claim's transaction, on "boom"."""

    kind: str

    @field_validator("kind")
    @classmethod
    def _explode(cls, kind: str) -> str:
        if kind == "boom":
            raise Abort
        return kind


@pytest.mark.sqlite_file  # one SQLite transaction; a PostgreSQL claim commits per statement
def test_an_error_inside_a_claim_rolls_the_whole_claim_back(
    open_queue: Any, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock, event_type=Touchy)
    raw = sqlite3.connect(db, isolation_level=None)
    poison = insert_raw(raw, "a", "not json")
    q.publish("b", Touchy.model_construct(kind="boom"))  # built without validation
    before = {t: raw.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in (M, G, D)}
    # The claim buries a's poison head, then decoding b's head raises: all of it rolls back.
    with pytest.raises(Abort):
        q.claim("w", VIS)
    after = {t: raw.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in (M, G, D)}
    assert after == before
    assert row(raw, poison) is not None and dead_rows(raw) == []
    raw.execute(f"UPDATE {M} SET event = ? WHERE group_id = 'b'", ('{"kind": "fine"}',))
    lease = q.claim("w", VIS)  # the transport is usable: the poison goes now, b is delivered
    assert (lease.group_id, lease.event, lease.deliveries) == ("b", Touchy(kind="fine"), 1)
    assert [d.seq for d in q.dead()] == [poison]
    raw.close()


# --- ack_and_claim --------------------------------------------------------------------------


def test_ack_and_claim_acks_and_returns_the_next_lease(q: Any, raw: Raw, clock: FakeClock) -> None:
    q.publish("g", ev("g1"))
    q.publish("g", ev("g2"))
    q.publish("h", ev("h1"))
    lease = q.claim("w", VIS)
    assert lease.event.kind == "g1"
    clock.advance(1)
    ok, nxt = q.ack_and_claim(lease, "w", VIS)
    assert ok is True and nxt is not None
    assert nxt.event.kind == "h1"  # round-robin: h was never claimed, g just was
    assert [m[2] for m in messages(raw)] == ["g2", "h1"]
    assert row(raw, nxt.seq)[3] == nxt.locked_by  # type: ignore[index]
    clock.advance(1)
    ok, last = q.ack_and_claim(nxt, "w", VIS)
    assert ok and last.event.kind == "g2"
    ok, none = q.ack_and_claim(last, "w", VIS)
    assert (ok, none) == (True, None)
    assert messages(raw) == [] and groups(raw) == {}


def test_ack_and_claim_is_fenced_like_ack(q: Any, raw: Raw, clock: FakeClock) -> None:
    q.publish("g", ev("g1"))
    q.publish("g", ev("g2"))
    slow = q.claim("slow", VIS)
    clock.advance(VIS + 1)
    fast = q.claim("fast", VIS)
    assert fast.seq == slow.seq
    q.publish("h", ev("h1"))
    held = row(raw, fast.seq)
    ok, nxt = q.ack_and_claim(slow, "slow", VIS)
    assert ok is False
    assert nxt is not None and nxt.event.kind == "h1"  # not g2: g is still in flight
    assert row(raw, fast.seq) == held
    assert [m[2] for m in messages(raw)] == ["g1", "g2", "h1"]


def test_ack_and_claim_honours_the_claim_arguments(q: Any, raw: Raw) -> None:
    q.publish("low", ev("l1"))
    q.publish("low", ev("l2"))
    q.publish("high", ev("h1"), priority=4, routing_key="k")
    insert_raw(raw, "high", "poison", priority=4)
    lease = q.claim("w", VIS, min_priority=4)
    assert lease.event.kind == "h1"
    ok, nxt = q.ack_and_claim(lease, "w", VIS, min_priority=4, routing_keys=["k"])
    assert (ok, nxt) == (True, None)  # the poison behind h1 was buried, low is below the floor
    assert [d.event for d in q.dead()] == ["poison"]
    ok, nxt = q.ack_and_claim(lease, "w", VIS, max_deliveries=1)
    assert ok is False and nxt.event.kind == "l1"


# --- the operator's tools -------------------------------------------------------------------


def expected_stats(raw: Raw, now: float) -> dict[str, Any]:
    """The figures ``stats()`` must report, computed from the rows independently."""
    all_rows = raw.execute(f"SELECT group_id, locked_by, lock_expiry FROM {M}").fetchall()
    live = [r for r in all_rows if r[1] is not None and r[2] >= now]
    by_priority: dict[int, list[int]] = {}
    by_key: dict[str | None, list[int]] = {}
    for group, (_, prio, key) in groups(raw).items():
        count = sum(1 for r in all_rows if r[0] == group)
        for bucket in (by_priority.setdefault(prio, [0, 0]), by_key.setdefault(key, [0, 0])):
            bucket[0] += 1
            bucket[1] += count
    return {
        "messages": len(all_rows),
        "groups": len(groups(raw)),
        "in_flight": sum(1 for r in live if r[1] != "__parked__"),
        "parked": sum(1 for r in live if r[1] == "__parked__"),
        "dead": len(dead_rows(raw)),
        "by_priority": sorted((p, g, m) for p, (g, m) in by_priority.items()),
        "by_routing_key": sorted(
            ((k, g, m) for k, (g, m) in by_key.items()), key=lambda t: (t[0] is not None, t[0])
        ),
    }


def test_stats_match_the_rows(q: Any, raw: Raw, clock: FakeClock) -> None:
    empty = q.stats()
    assert (empty.messages, empty.groups, empty.in_flight, empty.parked, empty.dead) == (
        0,
        0,
        0,
        0,
        0,
    )
    assert empty.oldest_age is None and empty.by_priority == []
    q.publish("a", Event(kind="a1", created_time=clock.now - 50), priority=1, routing_key="east")
    clock.advance(20)
    q.publish("a", Event(kind="a2", created_time=clock.now - 500))
    q.publish("a", ev("a3"))
    q.publish("b", ev("b1"))
    q.publish("c", ev("c1"), priority=4, routing_key="west")
    q.publish("c", ev("c2"))
    q.publish("d", ev("d1"), priority=1, routing_key="east")
    q.publish("e", ev("e1"))
    q.publish("e", ev("e2"))
    clock.advance(10)

    leased = q.claim("w", VIS)  # a1: in flight
    assert leased.event.kind == "a1"
    assert q.nack(q.claim("w", VIS), delay=100)  # b1: parked
    lapsed = q.claim("w", 5)  # c1: leased, lapses below
    assert lapsed.event.kind == "c1"
    assert q.dead_letter(q.claim("w", VIS), "no")  # d1: dead, its group gone
    q.claim("w", VIS)  # e1: in flight
    clock.advance(6)  # c1's lease lapses; a1's and e1's do not

    got = q.stats()
    want = expected_stats(raw, clock.now)
    assert got.now == clock.now
    assert (got.messages, got.groups, got.in_flight, got.parked, got.dead) == (
        want["messages"],
        want["groups"],
        want["in_flight"],
        want["parked"],
        want["dead"],
    )
    assert (got.messages, got.groups, got.in_flight, got.parked, got.dead) == (8, 4, 2, 1, 1)
    assert [(b.priority, b.groups, b.messages) for b in got.by_priority] == want["by_priority"]
    assert want["by_priority"] == [(0, 2, 3), (1, 1, 3), (4, 1, 2)]
    by_key = [(b.routing_key, b.groups, b.messages) for b in got.by_routing_key]
    assert sorted(by_key, key=lambda t: (t[0] is not None, t[0])) == want["by_routing_key"]
    assert want["by_routing_key"] == [(None, 2, 3), ("east", 1, 3), ("west", 1, 2)]
    # the age is the time in the queue, whatever the event says of itself
    assert got.oldest_age == pytest.approx(36.0)  # a1 was enqueued 36 s ago
    assert got.oldest_ready_age == pytest.approx(16.0)  # a2 (behind a1) and a3 are ready

    assert q.ack(leased)
    after = q.stats()
    assert (after.messages, after.in_flight) == (7, 1)
    assert after.oldest_age == pytest.approx(16.0)  # a2 now heads the queue


def test_a_requeued_message_is_as_old_as_its_time_back_in_the_queue(
    q: Any, clock: FakeClock
) -> None:
    # The age is the time in the queue since the message came back, not its first publish
    # and not what its event says of itself (here: created long before either).
    q.publish("g", Event(kind="k", created_time=clock.now - 1000))
    clock.advance(30)
    assert q.dead_letter(q.claim("w", VIS), "later")
    clock.advance(100)
    assert q.requeue_dead() == 1
    clock.advance(5)
    assert q.stats().oldest_age == pytest.approx(5.0)


def test_peek_shows_messages_with_their_state_without_claiming(
    q: Any, raw: Raw, clock: FakeClock
) -> None:
    q.publish("a", ev("a1"))
    q.publish("a", ev("a2"))
    q.publish("b", ev("b1"))
    q.publish("c", ev("c1"))
    q.publish("c", ev("c2"))
    leased = q.claim("w", VIS)  # a1
    assert q.nack(q.claim("w", VIS), delay=100)  # b1 parked
    lapsed = q.claim("w", 5)  # c1, lapses
    clock.advance(6)
    before = raw.execute(f"SELECT * FROM {M} ORDER BY seq").fetchall()

    everything = q.peek()
    assert [(m.group_id, json.loads(m.event)["kind"], m.state) for m in everything] == [
        ("a", "a1", "leased"),
        ("a", "a2", "ready"),
        ("b", "b1", "parked"),
        ("c", "c1", "ready"),  # its lease lapsed: deliverable again
        ("c", "c2", "ready"),
    ]
    assert everything[0].locked_by == leased.locked_by
    assert everything[0].lock_expiry == clock.now - 6 + VIS
    assert everything[2].locked_by == "__parked__"
    assert [m.deliveries for m in everything] == [1, 0, 1, 1, 0]
    assert [m.seq for m in q.peek("c")] == [lapsed.seq, lapsed.seq + 1]
    assert [json.loads(m.event)["kind"] for m in q.peek(limit=2)] == ["a1", "a2"]
    assert q.peek("nobody") == []
    assert raw.execute(f"SELECT * FROM {M} ORDER BY seq").fetchall() == before


def test_peek_dates_each_message_by_its_publish_or_its_requeue(q: Any, clock: FakeClock) -> None:
    published = clock.now
    q.publish("a", ev("a1"))
    clock.advance(10)
    q.publish("b", ev("b1"))
    assert [m.enqueued_at for m in q.peek()] == [published, published + 10]
    clock.advance(5)
    assert q.dead_letter(q.claim("w", VIS), "no")  # a1
    clock.advance(20)
    assert q.requeue_dead() == 1
    assert [(m.group_id, m.enqueued_at) for m in q.peek()] == [
        ("b", published + 10),
        ("a", published + 35),  # back at the tail, dated by its requeue
    ]


def test_release_ends_parks_now(q: Any, raw: Raw, clock: FakeClock) -> None:
    q.publish("a", ev("a1"))
    q.publish("b", ev("b1"))
    q.publish("c", ev("c1"))
    q.publish("c", ev("c2"))
    assert q.nack(q.claim("w", VIS), delay=1000)  # a1 parked
    assert q.nack(q.claim("w", VIS), delay=1000)  # b1 parked
    held = q.claim("w", VIS)  # c1 leased: release leaves it alone
    assert q.claim("w", VIS) is None

    assert q.release("a") == 1
    got = q.claim("w", VIS)
    assert (got.event.kind, got.deliveries) == ("a1", 2)  # at once: no clock advance
    assert groups(raw)["a"][0] == clock.now
    assert q.claim("w", VIS) is None  # b is still parked, c still in flight
    assert q.release("nobody") == 0
    assert q.release() == 1  # b
    assert q.claim("w", VIS).event.kind == "b1"
    assert row(raw, held.seq)[3] == held.locked_by  # type: ignore[index]
    assert q.release() == 0


def test_purge_removes_a_group_and_its_leased_head(q: Any, raw: Raw, clock: FakeClock) -> None:
    for i in range(3):
        q.publish("g", ev(f"g{i}"))
    q.publish("h", ev("h1"))
    lease = q.claim("w", VIS)
    assert lease.group_id == "g"
    assert q.purge("g") == 3
    assert q.purge("g") == 0
    assert [(g, k) for _, g, k in messages(raw)] == [("h", "h1")]
    assert set(groups(raw)) == {"h"}
    assert q.ack(lease) is False
    assert q.extend(lease, VIS) is False
    assert drain(q) == [("h", "h1")]
    q.publish("g", ev("fresh"), priority=2)  # the group starts anew
    assert groups(raw)["g"][1] == 2
    assert drain(q) == [("g", "fresh")]
