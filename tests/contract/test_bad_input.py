"""Bad input: a typed error before anything is written, on every transport."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from harel_sa import (
    Event,
    HarelSAError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    Lease,
    TransportClosedError,
)
from tests.conftest import FakeClock
from tests.contract.conftest import read, tables


class Other(BaseModel):
    x: int = 1


def snapshot(db: str) -> list[Any]:
    """Every table of the queue's database and its rows (SQLite's file, or PostgreSQL's)."""
    found = [(t, read(db, f"SELECT * FROM {t} ORDER BY 1")) for t in tables(db)]
    assert found, "nothing to compare: the queue's tables were not found"
    return found


@pytest.fixture
def q(open_queue: Any, db: str, clock: FakeClock) -> Any:
    q = open_queue(db, clock=clock)
    q.publish("g", Event(kind="keep"))
    q.publish("g", Event(kind="keep2"))
    return q


VALUE = InvalidArgumentError
TYPE = InvalidArgumentTypeError

BAD_PUBLISH = [
    (TYPE, {"group_id": 7}),
    (TYPE, {"group_id": None}),
    (TYPE, {"group_id": b"g"}),
    (TYPE, {"event": Other()}),
    (TYPE, {"event": {"kind": "dict"}}),
    (VALUE, {"priority": 5}),
    (VALUE, {"priority": -1}),
    (TYPE, {"priority": 1.5}),
    (TYPE, {"priority": True}),
    (VALUE, {"routing_key": ""}),
    (TYPE, {"routing_key": 3}),
]


@pytest.mark.parametrize(("error", "change"), BAD_PUBLISH, ids=[str(c) for _, c in BAD_PUBLISH])
def test_bad_publish_raises_and_writes_nothing(
    q: Any, db: str, error: type[Exception], change: dict[str, Any]
) -> None:
    before = snapshot(db)
    args = {"group_id": "g", "event": Event(kind="new"), **change}
    with pytest.raises(error) as info:
        q.publish(**args)
    assert isinstance(info.value, HarelSAError)
    assert snapshot(db) == before


BAD_CLAIM = [
    (VALUE, {"visibility": 0}),
    (VALUE, {"visibility": -1}),
    (VALUE, {"visibility": float("nan")}),
    (VALUE, {"visibility": float("inf")}),
    (TYPE, {"visibility": "30"}),
    (VALUE, {"worker_id": ""}),
    (TYPE, {"worker_id": None}),
    (TYPE, {"min_priority": 1.5}),
    (TYPE, {"min_priority": True}),
    (TYPE, {"min_priority": "5"}),
    (TYPE, {"routing_keys": "east"}),
    (VALUE, {"routing_keys": []}),
    (VALUE, {"routing_keys": ["east", ""]}),
    (TYPE, {"routing_keys": [1]}),
    (VALUE, {"max_deliveries": 0}),
]


@pytest.mark.parametrize(("error", "change"), BAD_CLAIM, ids=[str(c) for _, c in BAD_CLAIM])
def test_bad_claim_raises_and_leases_nothing(
    q: Any, db: str, error: type[Exception], change: dict[str, Any]
) -> None:
    before = snapshot(db)
    with pytest.raises(error):
        q.claim(**{"worker_id": "w", "visibility": 30.0, **change})
    assert snapshot(db) == before


def test_bad_nack_extend_and_lease_leave_the_message_as_it_was(q: Any, db: str) -> None:
    lease = q.claim("w", 30.0)
    before = snapshot(db)
    with pytest.raises(VALUE):
        q.nack(lease, -1)
    with pytest.raises(VALUE):
        q.nack(lease, float("nan"))
    with pytest.raises(VALUE):
        q.extend(lease, 0)
    with pytest.raises(TYPE):
        q.ack("not a lease")
    with pytest.raises(TYPE):
        q.nack(None)
    with pytest.raises(VALUE):
        q.dead_letter(lease, "")
    assert snapshot(db) == before
    assert q.ack(lease)


def test_publish_many_validates_every_item_before_writing_any(q: Any, db: str) -> None:
    before = snapshot(db)
    with pytest.raises(TYPE):
        q.publish_many([("a", Event(kind="ok")), ("b", Other())])
    with pytest.raises(TYPE):
        q.publish_many([("a", Event(kind="ok")), (None, Event(kind="ok"))])
    with pytest.raises(TYPE):
        q.publish_many("ab")
    assert snapshot(db) == before


def test_publish_many_refuses_a_bad_priority_or_routing_key_even_without_items(
    q: Any, db: str
) -> None:
    """They apply to every item, so they are checked once, first: an empty batch with a bad
    one is a caller's error too, not a no-op."""
    before = snapshot(db)
    for kwargs, error in [
        ({"priority": 5}, VALUE),
        ({"priority": True}, TYPE),
        ({"routing_key": ""}, VALUE),
        ({"routing_key": 7}, TYPE),
    ]:
        for items in ([], [("a", Event(kind="ok"))]):
            with pytest.raises(error):
                q.publish_many(items, **kwargs)
    assert snapshot(db) == before
    q.publish_many([], priority=4, routing_key="k")
    assert snapshot(db) == before


def test_a_bad_prefix_is_refused_before_a_file_is_touched(open_queue: Any, tmp_path: Any) -> None:
    target = tmp_path / "never.db"
    for prefix in ("", "1abc", "a-b", "a" * 31, "x; DROP TABLE y"):
        with pytest.raises(ValueError):
            open_queue(str(target), prefix=prefix)
    with pytest.raises(TypeError):
        open_queue(str(target), prefix=3)
    assert not target.exists()


def test_calls_on_a_closed_transport_raise(q: Any) -> None:
    lease = q.claim("w", 30.0)
    q.close()
    for call in (
        lambda: q.publish("g", Event(kind="x")),
        lambda: q.claim("w", 30.0),
        lambda: q.ack(lease),
        lambda: q.nack(lease),
    ):
        with pytest.raises(TransportClosedError):
            call()
    q.close()  # closing twice is harmless


def test_a_forged_lease_changes_nothing(q: Any, db: str) -> None:
    real = q.claim("w", 30.0)
    before = snapshot(db)
    forged = Lease(real.seq, real.group_id, real.event, "w", "not-the-token")
    assert q.ack(forged) is False
    assert q.nack(forged, 5) is False
    assert q.extend(forged, 5) is False
    assert q.dead_letter(forged, "x") is False
    assert snapshot(db) == before
