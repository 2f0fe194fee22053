"""Rows written by other programs or older versions (issue 12, points 5-7), on every transport.

A value of any type, and TEXT that is not UTF-8, may sit in any column. The claim delivers
what it can read, dead-letters what it cannot (reading raw bytes in SQL, so the driver never
raises on a fetch), holds one lease per group whatever the ``seq``\\ s, and deletes the empty
group rows it walks over; ``stats``, ``peek`` and ``dead`` show odd values instead of raising.
Rows are planted with a plain connection (``raw``: sqlite3, or psycopg on PostgreSQL); every
check reads the rows back. What only SQLite's untyped columns can hold (text that is not UTF-8,
a BLOB or text in a number column) is tested on the SQLite kinds alone; so are empty group rows,
which PostgreSQL's claim walks past instead of deleting.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from harel_sa import Event, rules, schema_for
from harel_sa.rules import LOOKAHEAD
from tests.checks import assert_nothing_stranded
from tests.conftest import FakeClock
from tests.contract.raw import PgRaw, Raw
from tests.contract.test_reliability import drain

VIS = 30.0
NAMES = schema_for().names
M, G, D = NAMES.messages, NAMES.groups, NAMES.dead
NOT_UTF8 = b'{"kind": "caf\xe9", "data": {}}'  # latin-1, as an old program might have written


def ev(kind: str) -> Event:
    return Event(kind=kind)


@pytest.fixture(autouse=True)
def _read_bytes(raw: Raw) -> None:
    if isinstance(raw, sqlite3.Connection):
        raw.text_factory = bytes  # read back exactly what is stored, UTF-8 or not


def plant(
    raw: Raw,
    group: object,
    event: object,
    *,
    seq: int | None = None,
    priority: object = 0,
    text: bool = True,
    **columns: object,
) -> int:
    """A message (and its group row) written behind the transport's back. ``text`` stores a
    ``bytes`` event or group id as TEXT (bytes that need not be UTF-8), as a C program could."""
    as_text = "CAST(? AS TEXT)" if text else "?"
    if isinstance(raw, PgRaw):  # typed columns: the text itself (UTF-8 is all PostgreSQL keeps)
        group, event = (v.decode() if isinstance(v, bytes) else v for v in (group, event))
    names = ["group_id", "event", *columns]
    values = [group, event, *columns.values()]
    marks = [as_text, as_text, *("?" for _ in columns)]
    if seq is not None:
        names, values, marks = ["seq", *names], [seq, *values], ["?", *marks]
    raw.execute("BEGIN IMMEDIATE")
    cur = raw.execute(
        f"INSERT INTO {M} ({', '.join(names)}) VALUES ({', '.join(marks)}) RETURNING seq", values
    )
    (seq,) = cur.fetchone()
    raw.execute(
        f"INSERT INTO {G} (group_id, priority) VALUES ({as_text}, ?) ON CONFLICT DO NOTHING",
        (group, priority),
    )
    raw.execute("COMMIT")
    return int(seq)


def dead_rows(raw: Raw) -> list[tuple[Any, ...]]:
    sql = f"SELECT seq, group_id, event, typeof(event) FROM {D} ORDER BY seq"
    return raw.execute(sql).fetchall()


# --- point 5: text that is not UTF-8, BLOB events -------------------------------------------


@pytest.mark.sqlite_file  # TEXT that is not UTF-8: a PostgreSQL UTF8 database refuses it
def test_an_event_that_is_not_utf8_is_buried_and_every_good_message_goes_through(
    q: Any, raw: Raw
) -> None:
    bad = plant(raw, b"g0", NOT_UTF8)
    for i in range(20):
        q.publish(f"g{i % 4}", ev(f"good{i}"))
    # Before any claim the operator can look: the bad row is shown, not raised on.
    first = q.peek(limit=1)[0]
    assert (first.seq, first.group_id, first.state) == (bad, "g0", "ready")
    assert first.event == '{"kind": "caf\\xe9", "data": {}}'
    assert q.stats().messages == 21

    got = drain(q)
    assert sorted(got) == sorted((f"g{i % 4}", f"good{i}") for i in range(20))
    assert [k for g, k in got if g == "g0"] == [f"good{i}" for i in range(0, 20, 4)]  # FIFO
    assert dead_rows(raw) == [(bad, b"g0", NOT_UTF8, b"text")]  # kept byte for byte
    (dead,) = q.dead()
    assert dead.event == '{"kind": "caf\\xe9", "data": {}}'
    assert dead.error.startswith("undecodable event")
    assert_nothing_stranded(raw)
    # Requeued unchanged, it is buried again: never delivered, never wedging.
    assert q.requeue_dead() == 1
    assert q.claim("w", VIS) is None
    assert [row[2] for row in dead_rows(raw)] == [NOT_UTF8]


@pytest.mark.sqlite_file  # TEXT that is not UTF-8: a PostgreSQL UTF8 database refuses it
def test_a_group_id_that_is_not_utf8_is_buried_with_its_group_row(q: Any, raw: Raw) -> None:
    bad = plant(raw, b"caf\xe9", ev("in-a-bad-group").model_dump_json().encode())
    q.publish("fine", ev("f1"))
    assert q.peek(limit=1)[0].group_id == "caf\\xe9"
    assert drain(q) == [("fine", "f1")]
    assert raw.execute(f"SELECT count(*) FROM {G}").fetchone() == (0,)  # no stranded group
    (dead,) = q.dead()
    assert (dead.seq, dead.group_id) == (bad, "caf\\xe9")
    assert dead.error.startswith("undecodable group_id")
    assert raw.execute(f"SELECT group_id FROM {D}").fetchone() == (b"caf\xe9",)


@pytest.mark.sqlite_file  # a BLOB in a TEXT column: PostgreSQL's columns are typed
def test_a_blob_event_is_delivered_if_it_is_json_and_buried_if_not(q: Any, raw: Raw) -> None:
    good = ev("from-a-blob").model_dump_json()
    plant(raw, "g", good.encode(), text=False)
    bad = plant(raw, "g", b"\xff\xfebinary", text=False)
    assert [m.event for m in q.peek()] == [good, "\\xff\\xfebinary"]
    assert drain(q) == [("g", "from-a-blob")]
    (dead,) = q.dead()
    assert (dead.seq, dead.event) == (bad, "\\xff\\xfebinary")
    assert dead_rows(raw)[0][3] == b"blob"


# --- point 6: numbers that are not numbers, locks without an expiry -------------------------


@pytest.mark.sqlite_file  # text in an INTEGER column: PostgreSQL's columns are typed
def test_a_deliveries_count_that_is_not_a_number_is_read_as_sqlite_reads_it(
    q: Any, raw: Raw
) -> None:
    plant(raw, "a", ev("text-count").model_dump_json().encode(), deliveries="many")
    plant(raw, "b", ev("real-count").model_dump_json().encode(), deliveries=2.5)
    doomed = plant(raw, "c", ev("doomed").model_dump_json().encode(), deliveries="7 so far")
    assert [m.deliveries for m in q.peek()] == [0, 2, 7]
    first = q.claim("w", VIS, max_deliveries=3)
    second = q.claim("w", VIS, max_deliveries=3)
    assert [(x.event.kind, x.deliveries) for x in (first, second)] == [
        ("text-count", 1),
        ("real-count", 3),
    ]
    assert q.claim("w", VIS, max_deliveries=3) is None  # "7 so far" is past the limit
    (dead,) = q.dead()
    assert (dead.seq, dead.deliveries, dead.error) == (doomed, 7, "delivered 7 times (max 3)")
    assert raw.execute(f"SELECT deliveries FROM {M} ORDER BY seq").fetchall() == [(1,), (3,)]


@pytest.mark.parametrize("top", [2**31 - 1, 2**63 - 1], ids=["int", "bigint"])
def test_a_delivery_count_at_the_integer_limit_wedges_no_claim(q: Any, raw: Raw, top: int) -> None:
    """A count another program left at the largest INTEGER (the column's type in databases
    made before it was BIGINT) or BIGINT: the claim still leases it, and every other group."""
    poisoned = plant(raw, "counted", ev("counted").model_dump_json().encode(), deliveries=top)
    q.publish("other", ev("other"))
    leases = {lease.group_id: lease for lease in (q.claim("w", VIS), q.claim("w", VIS))}
    assert set(leases) == {"counted", "other"}
    assert leases["counted"].seq == poisoned and leases["counted"].deliveries >= top
    assert all(q.ack(lease) for lease in leases.values())


@pytest.mark.sqlite_file  # text in an INTEGER column: PostgreSQL's columns are typed
def test_a_priority_that_is_not_an_integer_counts_as_zero_everywhere(q: Any, raw: Raw) -> None:
    plant(raw, "odd", ev("odd-priority").model_dump_json().encode(), priority="high")
    q.publish("top", ev("top"), priority=3)
    stats = q.stats()
    assert [(b.priority, b.groups, b.messages) for b in stats.by_priority] == [(0, 1, 1), (3, 1, 1)]
    assert drain(q, min_priority=1) == [("top", "top")]  # a floor passes it, as priority 0
    lease = q.claim("w", VIS)
    assert lease.event.kind == "odd-priority"
    assert q.dead_letter(lease, "operator gave up")
    assert q.dead()[0].priority == 0


@pytest.mark.parametrize("expiry", [None, float("nan"), 10**12], ids=["null", "nan", "live"])
def test_a_lock_without_an_expiry_has_lapsed_for_claim_peek_and_stats(
    q: Any, raw: Raw, clock: FakeClock, expiry: object
) -> None:
    lock_with_expiry(q, raw, clock, expiry)


@pytest.mark.sqlite_file  # text or a BLOB in a REAL column: PostgreSQL's columns are typed
@pytest.mark.parametrize("expiry", ["tomorrow", b"\x01"], ids=["text", "blob"])
def test_a_lock_without_a_numeric_expiry_has_lapsed_for_claim_peek_and_stats(
    q: Any, raw: Raw, clock: FakeClock, expiry: object
) -> None:
    lock_with_expiry(q, raw, clock, expiry)


def lock_with_expiry(q: Any, raw: Raw, clock: FakeClock, expiry: object) -> None:
    seq = plant(
        raw, "g", ev("locked").model_dump_json().encode(), locked_by="old#1", lock_expiry=expiry
    )
    live = expiry == 10**12  # a real, future expiry: the lock holds
    (shown,) = q.peek()
    assert (shown.seq, shown.locked_by) == (seq, "old#1")
    assert shown.state == ("leased" if live else "ready")
    assert shown.lock_expiry == (10**12 if live else None)
    assert q.stats().in_flight == (1 if live else 0)
    lease = q.claim("w", VIS)
    if live:
        assert lease is None
        return
    assert (lease.seq, lease.deliveries) == (seq, 1)
    assert q.claim("other", VIS) is None  # and now it is properly leased
    assert raw.execute(f"SELECT lock_expiry FROM {M}").fetchone() == (clock.now + VIS,)
    assert q.ack(lease)


# --- point 7: seqs below a leased head, empty group rows -----------------------------------


def live_leases(raw: Raw, group: str, now: float) -> int:
    return int(
        raw.execute(
            f"SELECT count(*) FROM {M} WHERE group_id = ? AND locked_by IS NOT NULL "
            "AND lock_expiry >= ?",
            (group, now),
        ).fetchone()[0]
    )


# At least one: the docs promise a message inserted below a leased head (a LOOKAHEAD of 0, the
# rule removed, must fail here rather than leave this test with no case to run).
@pytest.mark.parametrize("below", range(1, max(LOOKAHEAD, 1) + 1))
def test_messages_inserted_below_a_leased_head_never_give_its_group_a_second_lease(
    q: Any, raw: Raw, clock: FakeClock, below: int
) -> None:
    for i in range(below):  # free the seqs 1..below, as acked messages leave them
        q.publish("filler", ev(f"f{i}"))
    assert len(drain(q)) == below
    q.publish("g", ev("head"))
    q.publish("g", ev("tail"))
    q.publish("other", ev("o1"))
    held = q.claim("w", VIS)
    assert (held.group_id, held.event.kind) == ("g", "head")
    for s in range(1, below + 1):  # another program restores messages with their old seqs
        plant(raw, "g", ev(f"restored{s}").model_dump_json().encode(), seq=s)
    for _ in range(3):
        lease = q.claim("w", VIS)
        assert lease is None or lease.group_id == "other"
        assert live_leases(raw, "g", clock.now) == 1
    assert q.ack(held)
    # Then the group goes on in seq order, one lease at a time.
    got = []
    while (lease := q.claim("w", VIS)) is not None:
        if lease.group_id == "g":
            assert live_leases(raw, "g", clock.now) == 1
            assert q.claim("w2", VIS) is None or live_leases(raw, "g", clock.now) == 1
            got.append(lease.event.kind)
        assert q.ack(lease)
    assert got == [f"restored{s}" for s in range(1, below + 1)] + ["tail"]


@pytest.mark.parametrize("below", range(1, max(LOOKAHEAD, 1) + 1))
def test_messages_inserted_below_a_full_window_never_give_its_group_one_lease_more(
    q: Any, raw: Raw, clock: FakeClock, below: int
) -> None:
    # The same rule for a group that runs several at once (max_in_flight=2): its window is
    # its first 2 messages, and no lease starts while 2 of its first 2 + LOOKAHEAD are leased.
    for i in range(below):
        q.publish("filler", ev(f"f{i}"))
    assert len(drain(q)) == below
    for kind in ("first", "second", "third"):
        q.publish("g", ev(kind), max_in_flight=2)
    held = [q.claim("w", VIS), q.claim("w", VIS)]
    assert [lease.event.kind for lease in held] == ["first", "second"]
    for s in range(1, below + 1):
        plant(raw, "g", ev(f"restored{s}").model_dump_json().encode(), seq=s)
    assert q.claim("w", VIS) is None
    assert live_leases(raw, "g", clock.now) == 2
    assert q.ack(held[0])
    # Then the window moves on in seq order: the restored rows first.
    assert q.claim("w", VIS).event.kind == "restored1"
    assert live_leases(raw, "g", clock.now) == 2


def plant_empty_groups(raw: Raw, n: int, **columns: object) -> None:
    names = ", ".join(["group_id", *columns])
    marks = ", ".join("?" for _ in range(1 + len(columns)))
    raw.execute("BEGIN")
    raw.executemany(
        f"INSERT INTO {G} ({names}) VALUES ({marks})",
        ((f"empty{i}", *columns.values()) for i in range(n)),
    )
    raw.execute("COMMIT")


def groups(raw: Raw) -> list[bytes]:
    return [g for (g,) in raw.execute(f"SELECT group_id FROM {G} ORDER BY group_id")]


@pytest.mark.sqlite_file  # PostgreSQL's claim skips empty group rows, does not delete them
def test_thirty_thousand_empty_group_rows_are_walked_once_and_deleted(q: Any, raw: Raw) -> None:
    plant_empty_groups(raw, 30_000)  # last_claimed_at 0: ahead of everything in the walk
    q.publish("real", ev("r1"))
    q.publish("real", ev("r2"))
    lease = q.claim("w", VIS)
    assert (lease.group_id, lease.event.kind) == ("real", "r1")
    assert groups(raw) == [b"real"]  # every empty row the walk met is gone
    assert q.stats().groups == 1
    assert q.ack(lease)
    assert drain(q) == [("real", "r2")]
    assert groups(raw) == []


@pytest.mark.sqlite_file  # PostgreSQL's claim skips empty group rows, does not delete them
def test_empty_group_rows_between_groups_in_flight_are_deleted_too(q: Any, raw: Raw) -> None:
    for i in range(3):
        q.publish(f"busy{i}", ev(f"b{i}"))
    held = [q.claim("w", VIS) for _ in range(3)]
    raw.execute(f"UPDATE {G} SET last_claimed_at = 0")  # in flight, at the front of the walk
    plant_empty_groups(raw, 1000)
    q.publish("next", ev("n1"))
    lease = q.claim("w", VIS)
    assert (lease.group_id, lease.event.kind) == ("next", "n1")
    assert groups(raw) == [b"busy0", b"busy1", b"busy2", b"next"]
    assert all(q.ack(x) for x in [*held, lease])


@pytest.mark.sqlite_file  # PostgreSQL's claim skips empty group rows, does not delete them
def test_a_claim_that_meets_an_empty_group_row_deletes_the_empty_ones_among_the_next_255(
    q: Any, raw: Raw
) -> None:
    """The claim that meets an empty group row deletes it and the empty rows among the next 255
    groups in claim order, past the group it then leases: the garbage is paid for by that
    claim, not met again one row at a time by the ones after it."""
    plant_empty_groups(raw, 1)  # met first: every row has last_claimed_at 0, then by rowid
    q.publish("real", ev("r1"))
    raw.execute("BEGIN")
    raw.executemany(
        f"INSERT INTO {G} (group_id) VALUES (?)", ((f"after{i:03}",) for i in range(300))
    )
    raw.execute("COMMIT")
    lease = q.claim("w", VIS)
    assert (lease.group_id, lease.event.kind) == ("real", "r1")
    # The next 255 groups after the one met are "real" and the first 254 empty rows after it.
    assert groups(raw) == [f"after{i:03}".encode() for i in range(254, 300)] + [b"real"]
    assert q.claim("w", VIS) is None  # the rest, met by the next claim, go the same way
    assert groups(raw) == [b"real"]
    assert q.ack(lease)
    assert groups(raw) == []


@pytest.mark.sqlite_file  # PostgreSQL's claim skips empty group rows, does not delete them
@pytest.mark.parametrize(
    "claim", [{"min_priority": 2}, {"routing_keys": ["east"]}], ids=["floor", "keys"]
)
def test_claims_walking_a_lane_delete_the_empty_group_rows_they_meet(
    q: Any, raw: Raw, claim: dict[str, Any]
) -> None:
    plant_empty_groups(raw, 2000, priority=3, routing_key="east")
    q.publish("real", ev("r1"), priority=3, routing_key="east")
    assert drain(q, **claim) == [("real", "r1")]
    assert groups(raw) == []


# --- admin reads over the dead table --------------------------------------------------------


@pytest.mark.sqlite_file  # text in number columns, not UTF-8: typed on PostgreSQL
def test_dead_letters_written_by_others_are_listed_and_requeued(q: Any, raw: Raw) -> None:
    raw.execute(
        f"INSERT INTO {D} (seq, group_id, event, error, dead_at, deliveries, priority, "
        "routing_key) VALUES (7, CAST(? AS TEXT), ?, CAST(? AS TEXT), 'yesterday', 'two', "
        "'urgent', 42)",
        (b"caf\xe9", ev("old").model_dump_json(), b"gave up at caf\xe9"),
    )
    (dead,) = q.dead()
    assert (dead.seq, dead.group_id, dead.error) == (7, "caf\\xe9", "gave up at caf\\xe9")
    assert (dead.dead_at, dead.deliveries, dead.priority, dead.routing_key) == (0.0, 0, 0, "42")
    assert q.stats().dead == 1
    assert q.requeue_dead() == 1
    assert raw.execute(f"SELECT group_id FROM {M}").fetchall() == [(b"caf\xe9",)]


def test_a_poison_row_whose_seq_is_already_dead_is_buried_again_not_wedged(
    q: Any, raw: Raw
) -> None:
    q.publish("g", ev("m1"))
    lease = q.claim("w", VIS)
    assert q.dead_letter(lease, "first time")
    # The operator puts the dead row's message back by hand, under its old seq, still broken.
    plant(raw, "g", b"{not json", seq=lease.seq)
    q.publish("h", ev("h1"))
    assert drain(q) == [("h", "h1")]
    (dead,) = q.dead()
    assert dead.seq == lease.seq and dead.error.startswith("undecodable event")


@pytest.mark.sqlite_file  # a routing key that is not UTF-8: refused by PostgreSQL
def test_stats_survive_odd_routing_keys_and_created_times(q: Any, raw: Raw) -> None:
    plant(raw, "a", json.dumps({"kind": "x", "created_time": "not a time"}).encode())
    raw.execute(f"UPDATE {G} SET routing_key = CAST(? AS TEXT) WHERE group_id = 'a'", (b"\xff",))
    stats = q.stats()
    assert stats.oldest_age is None
    assert [(b.routing_key, b.groups) for b in stats.by_routing_key] == [("\\xff", 1)]


@pytest.mark.parametrize("batch", [False, True])
def test_a_claim_that_buries_a_head_says_so_in_the_log(
    q: Any,
    raw: Raw,
    batch: bool,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker whose claims find only rows it cannot decode would otherwise look idle: each
    head a claim moves to the dead table is a WARNING naming its seq and group, with the
    reason's first line (the next ones quote the event's data)."""
    # A window of its own: the tests before it in this process spent the shared burst.
    monkeypatch.setattr(rules, "_warned", {"since": 0.0, "logged": 0, "left_out": 0})
    caplog.set_level("WARNING", "harel_sa")
    bad = plant(raw, b"orders-1", b'{"data": {"card": "4111"}}')  # no kind: not an Event
    q.publish("orders-2", ev("good"))
    leases = q.claim_many("w", VIS, 4) if batch else [q.claim("w", VIS)]
    assert [lease.event.kind for lease in leases if lease is not None] == ["good"]
    (record,) = [r for r in caplog.records if "dead-lettered" in r.getMessage()]
    text = record.getMessage()
    assert record.levelname == "WARNING" and f"seq {bad} of group 'orders-1'" in text, text
    assert "undecodable event: 1 validation error for Event" in text and "4111" not in text
    assert [d.seq for d in q.dead()] == [bad]
