"""Batches: ``claim_many`` is ``limit`` successive claims, ``ack_many`` is each ack, in one
transaction each, on every transport.

The property test builds the same history twice, on two prefixes of one database: publishes
(groups, priorities, routing keys), rows no transport could decode, claims, acks, nacks and
parks, lapses of time. Then one queue answers ``claim_many(limit, ...)`` and the other
``limit`` successive ``claim`` calls with the same arguments: the leases (groups, messages,
deliveries, order), the dead table and every row the claims wrote must be the same.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harel_sa import Event, InvalidArgumentError, InvalidArgumentTypeError, Lease, settlements
from tests.conftest import FakeClock
from tests.contract.conftest import OpenQueue, read, write

M, G, D = "harel_transport_messages", "harel_transport_groups", "harel_transport_dead"
VIS = 30.0
EXAMPLES = itertools.count()  # each example's queues get prefixes of their own
KEYS = st.sampled_from([None, "a", "b"])
CLAIM_ARGS = st.fixed_dictionaries(
    {
        "min_priority": st.integers(-1, 5),  # below 0 is 0; above 4 claims nothing
        "routing_keys": st.sampled_from([None, ("a",), ("a", "b")]),
        "max_deliveries": st.sampled_from([None, 1, 2, 3]),
    }
)
STEP = st.one_of(
    st.tuples(st.just("publish"), st.integers(0, 5), st.integers(0, 4), KEYS),
    st.tuples(st.just("poison"), st.integers(0, 5)),
    st.tuples(st.just("claim"), CLAIM_ARGS),
    st.tuples(st.just("ack"), st.integers(0, 20)),
    st.tuples(st.just("nack"), st.integers(0, 20), st.sampled_from([0.0, 5.0, 50.0])),
    st.tuples(st.just("advance"), st.sampled_from([0.5, 10.0, 31.0])),
)


class History:
    """One queue (its own prefix in the test's database) and the leases it handed out while a
    history was played on it."""

    def __init__(self, open_queue: OpenQueue, path: str, clock: FakeClock, prefix: str) -> None:
        self.queue = open_queue(path, clock=clock, prefix=prefix)
        self.path = path  # as the conftest's read() and write() take it
        self.m, self.g, self.d = (f"{prefix}_transport_{t}" for t in ("messages", "groups", "dead"))
        self.held: list[Lease[Any]] = []

    def play(self, step: tuple[Any, ...], event: Event) -> None:
        """Play ``step``; ``event`` is what a publish step publishes (the same in both)."""
        kind = step[0]
        if kind == "publish":
            _, group, priority, key = step
            self.queue.publish(f"g{group}", event, priority=priority, routing_key=key)
        elif kind == "poison":  # a row another program wrote, which no claim can decode
            group = f"g{step[1]}"
            insert = f"INSERT INTO {self.g} (group_id) VALUES ('{group}') ON CONFLICT DO NOTHING"
            write(self.path, insert)
            write(self.path, f"INSERT INTO {self.m} (group_id, event) VALUES ('{group}', 'x')")
        elif kind == "claim":
            lease = self.queue.claim("w", VIS, **step[1])
            if lease is not None:
                self.held.append(lease)
        elif kind in ("ack", "nack") and self.held:
            lease = self.held.pop(step[1] % len(self.held))
            if kind == "ack":
                self.queue.ack(lease)
            else:
                self.queue.nack(lease, step[2])

    def rows(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row, tokens left out (each queue makes its own)."""
        return {
            "messages": read(
                self.path,
                "SELECT seq, group_id, lock_expiry, locked_by IS NULL, deliveries"
                f" FROM {self.m} ORDER BY seq",
            ),
            "groups": read(self.path, f"SELECT group_id, last_claimed_at FROM {self.g} ORDER BY 1"),
            "dead": read(self.path, f"SELECT seq, group_id, error FROM {self.d} ORDER BY seq"),
        }


def shape(leases: list[Lease[Any]]) -> list[tuple[Any, ...]]:
    return [(x.seq, x.group_id, x.event.kind, x.deliveries, x.worker_id) for x in leases]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(STEP, max_size=30), limit=st.integers(1, 7), last=CLAIM_ARGS)
def test_claim_many_is_limit_successive_claims(
    open_queue: OpenQueue, db: str, steps: list[tuple[Any, ...]], limit: int, last: dict[str, Any]
) -> None:
    clock = FakeClock()
    n = next(EXAMPLES)
    batch, single = (History(open_queue, db, clock, f"{kind}{n}") for kind in ("b", "s"))
    try:
        for i, step in enumerate(steps):
            if step[0] == "advance":
                clock.advance(step[1])
                continue
            event = Event(kind=f"e{i}")
            for history in (batch, single):
                history.play(step, event)
        assert batch.rows() == single.rows()

        taken = batch.queue.claim_many("w2", VIS, limit, **last)
        one_by_one = []
        while len(one_by_one) < limit and (lease := single.queue.claim("w2", VIS, **last)):
            one_by_one.append(lease)

        assert shape(taken) == shape(one_by_one)
        assert len({x.group_id for x in taken}) == len(taken)  # distinct groups
        assert len({x.token for x in taken}) == len(taken)  # each fenced on its own
        assert batch.rows() == single.rows()
        for lease in taken:  # every lease is live: an ack of each takes
            assert batch.queue.ack(lease)
    finally:
        batch.queue.close()
        single.queue.close()


def test_claim_many_returns_the_rotations_order_not_the_messages(q: Any, clock: FakeClock) -> None:
    q.publish("p", Event(kind="p1"))
    q.publish("q", Event(kind="q1"))
    q.publish("q", Event(kind="q2"))
    q.publish("p", Event(kind="p2"))
    for group in ("p", "q"):  # p claimed first, then q: p's turn comes first again
        lease = q.claim("w", VIS)
        assert lease is not None and lease.group_id == group and q.ack(lease)
        clock.advance(1.0)
    taken = q.claim_many("w", VIS, 2)
    assert [x.event.kind for x in taken] == ["p2", "q2"]  # q2 is the older message
    assert all(q.ack_many(taken))


@pytest.mark.parametrize("why", ["undecodable", "delivered"])
@pytest.mark.parametrize("limit", [2, 3])
def test_a_head_claim_many_buries_is_followed_by_its_groups_next_message(
    q: Any, db: str, clock: FakeClock, limit: int, why: str
) -> None:
    """As successive claims: the buried head's group keeps its place, so its next message comes
    before the groups after it; a group the batch no longer reaches is left as it was."""
    q.publish("a", Event(kind="a1"))
    if why == "undecodable":  # a row no claim can decode
        write(db, f"INSERT INTO {G} (group_id) VALUES ('b')")
        write(db, f"INSERT INTO {M} (group_id, event) VALUES ('b', 'x')")
        q.publish("b", Event(kind="b2"))
    else:  # b1 delivered twice already: past max_deliveries=2
        q.publish("b", Event(kind="b1"), routing_key="rb")
        q.publish("b", Event(kind="b2"))
        for _ in range(2):
            lease = q.claim("w0", VIS, routing_keys=["rb"])
            assert lease is not None and lease.event.kind == "b1" and q.nack(lease, 0.0)
    q.publish("c", Event(kind="c1"), routing_key="k")
    lapsed = q.claim("w0", VIS, routing_keys=["k"])  # c's lease, lapsed: c is claimable
    assert lapsed is not None and lapsed.group_id == "c"
    clock.advance(VIS + 1)
    c_rows = f"SELECT seq, locked_by, lock_expiry, deliveries FROM {M} WHERE group_id = 'c'"
    c_group = f"SELECT last_claimed_at FROM {G} WHERE group_id = 'c'"
    before = read(db, c_rows), read(db, c_group)

    taken = q.claim_many("w", VIS, limit, max_deliveries=2)

    assert [x.event.kind for x in taken] == ["a1", "b2", "c1"][:limit]
    [(error,)] = read(db, f"SELECT error FROM {D}")
    assert error.startswith("undecodable event" if why == "undecodable" else "delivered 2 times")
    if limit == 2:  # c: as it was, its lapsed lease too
        assert (read(db, c_rows), read(db, c_group)) == before


def test_ack_many_takes_the_live_leases_and_changes_nothing_for_the_lost(
    q: Any, db: str, clock: FakeClock
) -> None:
    for group in ("a", "b", "c"):
        q.publish(group, Event(kind=f"{group}1"))
    q.publish("c", Event(kind="c2"))
    a_lease, b_lease, c_lease = q.claim_many("w1", VIS, 3)
    assert [a_lease.group_id, b_lease.group_id, c_lease.group_id] == ["a", "b", "c"]
    clock.advance(VIS + 1)  # every lease lapses; w2 claims a's and b's messages again
    a_again, b_again = q.claim_many("w2", VIS, 2)
    assert (a_again.seq, b_again.seq) == (a_lease.seq, b_lease.seq)

    # a and b were re-claimed: lost. c lapsed but nobody took it: its ack takes, once.
    assert q.ack_many([a_lease, b_lease, c_lease, c_lease]) == [False, False, True, False]
    held = read(db, f"SELECT seq, locked_by FROM {M} WHERE locked_by IS NOT NULL ORDER BY seq")
    assert held == [(a_again.seq, a_again.locked_by), (b_again.seq, b_again.locked_by)]
    assert q.ack_many([b_again]) == [True]
    left = read(db, f"SELECT group_id, event FROM {M} ORDER BY seq")
    assert [(g, Event.model_validate_json(e).kind) for g, e in left] == [("a", "a1"), ("c", "c2")]
    # b was emptied by its live lease's ack; a's group stays with its message (a lost lease
    # empties nothing)
    assert read(db, f"SELECT group_id FROM {G} ORDER BY group_id") == [("a",), ("c",)]
    assert q.ack_many([]) == []


def test_an_ack_many_that_does_not_take_keeps_the_group_of_its_message(q: Any, db: str) -> None:
    """Only the messages a batch deleted count as gone: a lease whose ack does not take (here
    on the message after a live lease's, which no claim leased) leaves its group in place."""
    q.publish("a", Event(kind="a1"))
    q.publish("a", Event(kind="a2"))
    (live,) = q.claim_many("w", VIS, 2)
    [(second,)] = read(db, f"SELECT seq FROM {M} WHERE seq <> {live.seq}")
    lost = Lease(second, "a", Event(kind="a2"), "w", "never-claimed")
    assert q.ack_many([live, lost]) == [True, False]
    assert read(db, f"SELECT group_id FROM {G}") == [("a",)]
    assert [x.event.kind for x in q.claim_many("w", VIS, 2)] == ["a2"]


def test_ack_many_tells_a_stale_lease_from_the_live_one_of_the_same_message_in_any_order(
    q: Any, db: str, clock: FakeClock
) -> None:
    for group in ("a", "b"):
        q.publish(group, Event(kind=group))
    stale_a, stale_b = q.claim_many("w1", VIS, 2)
    clock.advance(VIS + 1)
    live_a, live_b = q.claim_many("w2", VIS, 2)  # the same messages, leased again
    assert q.ack_many([live_a, stale_a, stale_b, live_b]) == [True, False, False, True]
    assert read(db, f"SELECT count(*) FROM {M}") == [(0,)]
    assert read(db, f"SELECT count(*) FROM {G}") == [(0,)]


def test_ack_many_of_more_leases_than_one_statement_names_acks_each(q: Any, db: str) -> None:
    count = 150  # more than two chunks of harel_sa.rules.BATCH_MAX (64)
    q.publish_many([(f"g{i}", Event(kind=f"m{i}")) for i in range(count)])
    q.publish("g7", Event(kind="next"))
    leases = q.claim_many("w", VIS, count)
    assert len(leases) == count
    acked = q.ack_many([*leases[::-1], leases[3]])
    assert acked == [True] * count + [False]  # the one given twice takes once
    assert read(db, f"SELECT group_id FROM {G}") == [("g7",)]  # only the group with a message
    assert [x.event.kind for x in q.claim_many("w", VIS, 3)] == ["next"]


def test_claim_many_of_more_leases_than_one_statement_names_writes_each(
    q: Any, db: str, clock: FakeClock
) -> None:
    count = 150  # more than two chunks of harel_sa.rules.BATCH_MAX (64)
    for kind in ("first", "second"):
        q.publish_many([(f"g{i}", Event(kind=f"{kind}{i}")) for i in range(count)])
    leases = q.claim_many("w", VIS, count)
    assert [x.event.kind for x in leases] == [f"first{i}" for i in range(count)]
    # each head held by its own lease, once delivered; each group marked claimed now
    held = read(
        db, f"SELECT seq, locked_by, lock_expiry, deliveries FROM {M} WHERE locked_by IS NOT NULL"
    )
    assert sorted(held) == sorted((x.seq, x.locked_by, clock() + VIS, 1) for x in leases)
    assert read(db, f"SELECT DISTINCT last_claimed_at FROM {G}") == [(clock(),)]


def test_ack_many_and_claim_many_settles_and_claims_in_one_call(
    open_queue: OpenQueue, tmp_path: Path, clock: FakeClock
) -> None:
    fused, apart = (open_queue(str(tmp_path / f"{n}.db"), clock=clock) for n in ("f", "a"))
    events = [Event(kind=f"m{i}") for i in range(8)]
    for queue in (fused, apart):
        for i, event in enumerate(events):
            queue.publish(f"g{i % 3}", event)
    held_f, held_a = fused.claim_many("w", VIS, 2), apart.claim_many("w", VIS, 2)
    clock.advance(1.0)
    acked, taken = fused.ack_many_and_claim_many(held_f, "w", VIS, 3)
    assert acked == apart.ack_many(held_a) == [True, True]
    assert shape(taken) == shape(apart.claim_many("w", VIS, 3))
    # g2 (never claimed) first, then g0 and g1 again: the heads the acks freed
    assert [x.group_id for x in taken] == ["g2", "g0", "g1"]
    assert [x.event.kind for x in taken] == ["m2", "m3", "m4"]
    again, following = fused.ack_many_and_claim_many([*taken, taken[0]], "w", VIS, 1)
    assert again == [True, True, True, False]  # the repeated lease was acked already
    assert [x.event.kind for x in following] == ["m6"]  # g0: claimed as early, older arrival


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda q, lease: q.claim_many("w", VIS, 0), InvalidArgumentError),
        (lambda q, lease: q.claim_many("w", VIS, "2"), InvalidArgumentTypeError),
        (lambda q, lease: q.claim_many("w", VIS, True), InvalidArgumentTypeError),
        (lambda q, lease: q.claim_many("", VIS, 2), InvalidArgumentError),
        (lambda q, lease: q.claim_many("w", 0, 2), InvalidArgumentError),
        (lambda q, lease: q.ack_many(lease), InvalidArgumentTypeError),
        (lambda q, lease: q.ack_many([lease, "seq 1"]), InvalidArgumentTypeError),
        (lambda q, lease: q.ack_many(x for x in [lease]), InvalidArgumentTypeError),
        (lambda q, lease: q.ack_many_and_claim_many([lease], "w", VIS, 0), InvalidArgumentError),
        (lambda q, lease: q.ack_many_and_claim_many(lease, "w", VIS, 1), InvalidArgumentTypeError),
    ],
)
def test_bad_batch_arguments_raise_before_anything_is_written(
    q: Any, db: str, call: Any, error: type[Exception]
) -> None:
    q.publish("g", Event(kind="one"))
    q.publish("h", Event(kind="two"))
    lease = q.claim("w", VIS)

    def dump() -> list[Any]:
        return [read(db, f"SELECT * FROM {t} ORDER BY 1") for t in (M, G, D)]

    before = dump()
    with pytest.raises(error):
        call(q, lease)
    assert dump() == before


def test_the_acks_of_a_batch_that_took_are_reported_to_the_watching_worker(q: Any) -> None:
    q.publish("a", Event(kind="a1"))
    q.publish("b", Event(kind="b1"))
    first, second = q.claim_many("w", VIS, 2)
    seen: list[tuple[str, str]] = []
    token = settlements.watch(lambda lease, how, delay: seen.append((lease.group_id, how)))
    try:
        assert q.ack_many([first, first]) == [True, False]
        assert q.ack_many_and_claim_many([second], "w", VIS, 1) == ([True], [])
    finally:
        settlements.unwatch(token)
    assert seen == [("a", "acked"), ("b", "acked")]
