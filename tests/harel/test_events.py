"""harel_sa's Event is the harel engine's: the same JSON, byte for byte, either way; the
engine's own events are accepted as they are; harel_sa 0.1's float ``created_time`` still reads."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from harel.spec.states import Event as HarelEvent

from harel_sa import Event, InvalidArgumentTypeError, SqliteTransport
from tests.conftest import FakeClock

MOMENTS = [
    None,
    datetime(2026, 12, 1, 9, 30, tzinfo=UTC),
    datetime(2026, 12, 1, 9, 30, 1, 123456, tzinfo=UTC),
    datetime(2026, 12, 1, 9, 30, 1, 5, tzinfo=timezone(timedelta(hours=2))),
    datetime(2026, 12, 1, 9, 30, 1, 250000),  # naive, as datetime.now() gives
]
DATA = [{}, {"amount": 10, "tags": ["a", "ü"], "nested": {"x": None, "y": 1.5}}]


def harel_events() -> list[HarelEvent]:
    return [
        HarelEvent(kind=f"k{i}", created_time=created, received_time=received, data=data)
        for i, (created, received, data) in enumerate(
            (c, r, d) for c in MOMENTS for r in (None, MOMENTS[1]) for d in DATA
        )
    ]


@pytest.mark.parametrize("theirs", harel_events(), ids=lambda e: e.kind)
def test_json_is_the_same_bytes_both_ways(theirs: HarelEvent) -> None:
    raw = theirs.model_dump_json()
    ours = Event.model_validate_json(raw)
    assert ours.model_dump_json() == raw
    assert HarelEvent.model_validate_json(ours.model_dump_json()).model_dump_json() == raw
    assert list(Event.model_fields) == list(HarelEvent.model_fields)
    assert Event(kind="x").model_dump()["created_time"] is None  # null when absent, as harel


def test_data_with_keys_that_are_not_str_is_taken_as_harel_takes_it(
    db: str, clock: FakeClock
) -> None:
    """harel's ``data`` is a plain ``dict``: keys of any type, written to JSON as strings."""
    data = {1: "one", 2.5: "half", None: "none", (1, 2): "pair", "s": {3: [4]}}
    theirs = HarelEvent(id="e1", kind="k", data=data)
    ours = Event(id="e1", kind="k", data=data)
    assert ours.model_dump() == theirs.model_dump()  # the keys as given
    raw = theirs.model_dump_json()
    assert '"data":{"1":"one","2.5":"half","None":"none","1,2":"pair","s":{"3":[4]}}' in raw
    assert ours.model_dump_json() == raw
    with SqliteTransport(db, clock) as queue:
        queue.publish("g", ours)
        lease = queue.claim("w", 30)
        assert lease is not None
        assert lease.event.model_dump_json() == raw
        assert lease.event == Event.model_validate_json(raw)
        assert HarelEvent.model_validate_json(raw).data == lease.event.data


def test_the_engines_event_is_published_and_claimed_as_harel_wrote_it(
    db: str, clock: FakeClock
) -> None:
    sent = harel_events()
    with SqliteTransport(db, clock) as queue:
        for event in sent:
            queue.publish("g", event)
        rows = sqlite3.connect(db).execute(
            "SELECT event FROM harel_transport_messages ORDER BY seq"
        )
        assert [r[0] for r in rows] == [e.model_dump_json() for e in sent]
        for event in sent:
            lease = queue.claim("w", 30)
            assert lease is not None
            assert lease.event.model_dump_json() == event.model_dump_json()
            assert queue.ack(lease)


def test_unknown_fields_are_kept(db: str, clock: FakeClock) -> None:
    with SqliteTransport(db, clock) as queue:
        queue.publish("g", Event(kind="k", trace_id="abc"))  # type: ignore[call-arg]
        lease = queue.claim("w", 30)
        assert lease is not None and lease.event.model_extra == {"trace_id": "abc"}
        assert HarelEvent.model_validate_json(lease.event.model_dump_json()).kind == "k"


def test_rows_from_harel_sa_0_1_with_a_float_created_time_still_decode(
    tmp_path: Path, clock: FakeClock
) -> None:
    db = str(tmp_path / "old.db")
    SqliteTransport(db, clock).close()
    old = '{"id":"e1","kind":"paid","created_time":1764581400.25,"received_time":null,"data":{}}'
    with sqlite3.connect(db) as raw:
        raw.execute(
            "INSERT INTO harel_transport_messages (group_id, event) VALUES ('g', ?)", (old,)
        )
        raw.execute("INSERT INTO harel_transport_groups (group_id) VALUES ('g')")
    with SqliteTransport(db, clock) as queue:
        lease = queue.claim("w", 30)
        assert lease is not None and queue.dead() == []
        moment = datetime.fromtimestamp(1764581400.25, UTC)
        assert lease.event.created_time == moment
        assert HarelEvent.model_validate_json(old).created_time == moment  # harel reads it too
        queue.publish("g", lease.event)  # published again: an ISO-8601 time, as harel writes it
        assert queue.ack(lease)
        (again,) = queue.peek("g")
        assert '"created_time":"2025-12-01T09:30:00.250000Z"' in again.event
        assert again.event == HarelEvent.model_validate_json(old).model_dump_json()


def test_a_model_that_does_not_read_as_the_event_type_is_refused(db: str) -> None:
    from pydantic import BaseModel

    class Invoice(BaseModel):
        number: int

    with SqliteTransport(db) as queue:
        with pytest.raises(InvalidArgumentTypeError, match=r"does not read as harel_sa\.events"):
            queue.publish("g", Invoice(number=1))  # type: ignore[arg-type]
        assert queue.stats().messages == 0
