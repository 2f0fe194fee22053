"""Bad input, second round: ids holding NUL, ids over the length limit, and limits and seqs out
of range. Each is a typed error raised before anything is written, on every transport, never
the driver's ``StorageError`` or ``OverflowError``; the backends agree.

The id limit is 1,024 UTF-8 bytes (``harel_sa.validate.MAX_ID_BYTES``), a limit ``2**31 - 1``
(``MAX_LIMIT``), a seq a signed 64-bit integer: the values are written out here, so a change
of the documented limits fails these tests. NUL is PostgreSQL's refusal alone: SQLite's text
holds it, and its transports store it (docs/failure-modes.md).
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from typing import Any

import pytest

from harel_sa import Event, InvalidArgumentError, Lease
from tests.conftest import FakeClock
from tests.contract.raw import Raw
from tests.contract.test_bad_input import snapshot
from tests.contract.test_foreign_rows import plant

MAX_ID_BYTES = 1024
MAX_LIMIT = 2**31 - 1
VIS = 30.0


def _random_id(size: int, seed: int) -> str:
    """An id PostgreSQL cannot compress (its index entries are compressed before the check of
    their size): a run of one letter would fit in any index however long it is."""
    return "".join(random.Random(seed).choices(string.ascii_letters + string.digits, k=size))


LONG = _random_id(6000, 1)


@pytest.fixture
def q(open_queue: Any, db: str, clock: FakeClock) -> Any:
    """A queue holding two groups' messages and one dead message."""
    q = open_queue(db, clock=clock)
    q.publish("doomed", Event(kind="dead"))
    doomed = q.claim("w", VIS)
    assert doomed is not None and q.dead_letter(doomed, "for the dead filters")
    q.publish("g", Event(kind="keep"))
    q.publish("h", Event(kind="keep2"))
    return q


def dead_seq(q: Any) -> int:
    (dead,) = q.dead()
    return int(dead.seq)


def assert_refused(q: Any, db: str, call: Callable[[], object], match: str) -> None:
    """``call`` raises InvalidArgumentError (matching ``match``) and leaves every row as it
    was; the queue still counts its two messages and one dead one."""
    before = snapshot(db)
    with pytest.raises(InvalidArgumentError, match=match):
        call()
    assert snapshot(db) == before
    stats = q.stats()
    assert (stats.messages, stats.dead) == (2, 1)


def is_postgres(open_queue: Any) -> bool:
    return str(open_queue.kind).startswith("postgres")


# NUL: PostgreSQL's text cannot hold it; every id is refused alike, before it is sent.

NUL_CALLS: dict[str, Callable[[Any, Lease[Any]], object]] = {
    "claim routing_keys": lambda q, lease: q.claim("w", VIS, routing_keys=["k", "a\x00"]),
    "ack_and_claim routing_keys": lambda q, lease: q.ack_and_claim(
        lease, "w", VIS, routing_keys=["a\x00"]
    ),
    "claim_many worker_id": lambda q, lease: q.claim_many("w\x00", VIS, 2),
    "claim_many routing_keys": lambda q, lease: q.claim_many(
        "w", VIS, 2, routing_keys=["k", "a\x00"]
    ),
    "ack_many_and_claim_many worker_id": lambda q, lease: q.ack_many_and_claim_many(
        [lease], "w\x00", VIS, 2
    ),
    "ack_many_and_claim_many routing_keys": lambda q, lease: q.ack_many_and_claim_many(
        [lease], "w", VIS, 2, routing_keys=["a\x00"]
    ),
    "publish_many group_id": lambda q, lease: q.publish_many(
        [("g", Event(kind="x")), ("a\x00", Event(kind="y"))]
    ),
    "peek group_id": lambda q, lease: q.peek("a\x00"),
    "purge group_id": lambda q, lease: q.purge("a\x00"),
    "requeue_dead group_id": lambda q, lease: q.requeue_dead("a\x00"),
}


@pytest.mark.parametrize("name", list(NUL_CALLS))
def test_nul_in_any_id_is_refused_on_postgresql_and_stored_on_sqlite(
    q: Any, db: str, open_queue: Any, name: str
) -> None:
    lease = q.claim("w", VIS)
    assert lease is not None
    if is_postgres(open_queue):
        before = snapshot(db)
        with pytest.raises(InvalidArgumentError, match="NUL"):
            NUL_CALLS[name](q, lease)
        assert snapshot(db) == before
        assert q.ack(lease)  # the lease was left as it was
        assert q.stats().messages == 1
    else:  # SQLite's text holds NUL: the call does what it does with any other id
        NUL_CALLS[name](q, lease)
        got = q.claim_many("w\x00", VIS, 2)
        assert all(one.worker_id == "w\x00" for one in got)


# Ids over the limit: refused alike (PostgreSQL's index cannot hold a long one; SQLite could).

LONG_CALLS: dict[str, Callable[[Any, Lease[Any]], object]] = {
    "publish group_id": lambda q, lease: q.publish(LONG, Event(kind="x")),
    "publish routing_key": lambda q, lease: q.publish("g", Event(kind="x"), routing_key=LONG),
    "publish_many group_id": lambda q, lease: q.publish_many(
        [("g", Event(kind="x")), (LONG, Event(kind="y"))]
    ),
    "publish_many routing_key": lambda q, lease: q.publish_many(
        [("new", Event(kind="x"))], routing_key=LONG
    ),
    "claim worker_id": lambda q, lease: q.claim(LONG, VIS),
    "claim routing_keys": lambda q, lease: q.claim("w", VIS, routing_keys=["k", LONG]),
    "ack_and_claim worker_id": lambda q, lease: q.ack_and_claim(lease, LONG, VIS),
    "claim_many worker_id": lambda q, lease: q.claim_many(LONG, VIS, 2),
    "claim_many routing_keys": lambda q, lease: q.claim_many("w", VIS, 2, routing_keys=[LONG]),
    "ack_many_and_claim_many worker_id": lambda q, lease: q.ack_many_and_claim_many(
        [lease], LONG, VIS, 2
    ),
    "peek group_id": lambda q, lease: q.peek(LONG),
    "release group_id": lambda q, lease: q.release(LONG),
    "purge group_id": lambda q, lease: q.purge(LONG),
    "dead group_id": lambda q, lease: q.dead(LONG),
    "requeue_dead group_id": lambda q, lease: q.requeue_dead(LONG),
    "purge_dead group_id": lambda q, lease: q.purge_dead(LONG),
}


@pytest.mark.parametrize("name", list(LONG_CALLS))
def test_an_id_over_the_limit_is_refused_on_every_backend(q: Any, db: str, name: str) -> None:
    lease = q.claim("w", VIS)
    assert lease is not None
    assert_refused(q, db, lambda: LONG_CALLS[name](q, lease), "1024 UTF-8 bytes")
    assert q.ack(lease)


@pytest.mark.parametrize(
    ("fits", "over"),
    [("x" * MAX_ID_BYTES, "x" * (MAX_ID_BYTES + 1)), ("é" * 512, "é" * 512 + "x")],
    ids=["ascii", "two-byte"],
)
def test_the_id_limit_counts_utf8_bytes(q: Any, db: str, fits: str, over: str) -> None:
    assert_refused(q, db, lambda: q.publish(over, Event(kind="x")), "UTF-8 bytes")
    assert_refused(q, db, lambda: q.claim(over, VIS), "UTF-8 bytes")
    q.purge("g")
    q.purge("h")
    q.publish(fits, Event(kind="at the limit"), routing_key=fits)
    lease = q.claim(fits, VIS, routing_keys=[fits])
    assert lease is not None and (lease.group_id, lease.worker_id) == (fits, fits)
    assert [m.group_id for m in q.peek(fits)] == [fits]
    assert q.dead_letter(lease, "x" * 10_000)  # a reason is free text, not an id
    assert q.requeue_dead(fits) == 1


def test_rows_other_programs_wrote_with_longer_ids_are_still_read_and_claimed(
    q: Any, raw: Raw
) -> None:
    """The limit is for arguments: a longer id already stored is delivered like any other."""
    q.purge("g")
    q.purge("h")
    longer = _random_id(2 * MAX_ID_BYTES, 2)  # over the limit, within PostgreSQL's index
    seq = plant(raw, longer, Event(kind="foreign").model_dump_json())
    assert [(m.seq, m.group_id) for m in q.peek()] == [(seq, longer)]
    assert q.stats().messages == 1
    lease = q.claim("w", VIS)
    assert lease is not None and (lease.seq, lease.group_id) == (seq, longer)
    assert q.extend(lease, VIS)
    assert q.dead_letter(lease, "read back")
    assert [d.group_id for d in q.dead(seqs=[seq])] == [longer]
    assert q.requeue_dead(seqs=[seq]) == 1
    (again,) = q.claim_many("w", VIS, 2)
    assert again.group_id == longer
    assert q.ack(again)


# Limits and seqs out of range: one typed error everywhere, not the driver's.

LIMIT_CALLS: dict[str, Callable[[Any, Lease[Any], int], object]] = {
    "claim_many": lambda q, lease, limit: q.claim_many("w", VIS, limit),
    "ack_many_and_claim_many": lambda q, lease, limit: q.ack_many_and_claim_many(
        [lease], "w", VIS, limit
    ),
    "peek": lambda q, lease, limit: q.peek(limit=limit),
    "peek group_id": lambda q, lease, limit: q.peek("g", limit),
    "dead": lambda q, lease, limit: q.dead(limit=limit),
    "dead group_id": lambda q, lease, limit: q.dead("doomed", limit=limit),
}


@pytest.mark.parametrize("limit", [MAX_LIMIT + 1, 2**63, 10**30])
@pytest.mark.parametrize("name", list(LIMIT_CALLS))
def test_a_limit_over_the_maximum_is_refused_on_every_backend(
    q: Any, db: str, name: str, limit: int
) -> None:
    lease = q.claim("w", VIS)
    assert lease is not None
    assert_refused(q, db, lambda: LIMIT_CALLS[name](q, lease, limit), f"<= {MAX_LIMIT}")
    assert q.ack(lease)


def test_a_limit_at_the_maximum_is_taken(q: Any) -> None:
    assert [m.group_id for m in q.peek(limit=MAX_LIMIT)] == ["g", "h"]
    assert [d.group_id for d in q.dead(limit=MAX_LIMIT)] == ["doomed"]
    assert sorted(lease.group_id for lease in q.claim_many("w", VIS, MAX_LIMIT)) == ["g", "h"]


SEQ_CALLS: dict[str, Callable[[Any, list[int]], object]] = {
    "dead": lambda q, seqs: q.dead(seqs=seqs),
    "requeue_dead": lambda q, seqs: q.requeue_dead(seqs=seqs),
    "purge_dead": lambda q, seqs: q.purge_dead(seqs=seqs),
    "purge_dead group_id": lambda q, seqs: q.purge_dead("doomed", seqs),
}


@pytest.mark.parametrize("bad", [2**63, 2**64, -(2**63) - 1], ids=["2**63", "2**64", "-2**63-1"])
@pytest.mark.parametrize("name", list(SEQ_CALLS))
def test_a_seq_no_row_can_have_is_refused_on_every_backend(
    q: Any, db: str, name: str, bad: int
) -> None:
    """Beside a seq that exists: the whole call is refused, that one left as it was."""
    seqs = [dead_seq(q), bad]
    assert_refused(q, db, lambda: SEQ_CALLS[name](q, seqs), "64-bit")


def test_every_seq_a_row_can_have_is_taken(q: Any) -> None:
    extremes = [2**63 - 1, -(2**63), 0]
    assert q.dead(seqs=extremes) == []
    assert q.purge_dead(seqs=extremes) == 0
    assert q.requeue_dead(seqs=[*extremes, dead_seq(q)]) == 1


@pytest.mark.parametrize(
    ("call", "where"),
    [
        (lambda q, e: q.publish("g", e), "Event.data.obj"),
        (lambda q, e: q.publish_many([("g", Event(kind="fine")), ("h", e)]), "Event.data.obj"),
        (lambda q, e: q.publish("g", e, delay=60.0), "Event.data.obj"),
    ],
    ids=["publish", "publish_many", "scheduled"],
)
def test_an_event_that_is_no_json_is_a_typed_error_naming_its_value(
    q: Any, db: str, call: Callable[[Any, Event], object], where: str
) -> None:
    """pydantic cannot write an ``object()`` as JSON: an ``InvalidArgumentError`` that names
    where it is, not pydantic's own error, and nothing written."""
    before = snapshot(db)
    bad = Event(kind="bad", data={"fine": [1, 2], "obj": object()})
    with pytest.raises(InvalidArgumentError, match=f"event cannot be stored as JSON: {where}"):
        call(q, bad)
    assert snapshot(db) == before
