"""Periodic publishes (issue 44) on all four transports: a tick's record and its message commit
together, so a tick publishes once however many transports publish it; a catch-up tick needs
a record; the ticker publishes each due tick once and, after a gap, only the last one."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from harel_sa import (
    Event,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    Periodic,
    PostgresTransport,
    SqliteTransport,
)
from harel_sa.worker.ticker import Ticker
from tests.conftest import FakeClock
from tests.contract.conftest import OpenQueue, read


def stamped(at: datetime) -> Event:
    return Event(kind="tick", data={"at": at.isoformat()})


EVERY = Periodic("beat", every=1, group_id="ticks", event=stamped)


def tick(q: Any, schedule: Periodic, at: float, catch_up: bool = False) -> bool:
    """The transport's ``publish_tick`` (a sync one, or an async one run to its end)."""
    published: bool = q.publish_tick(schedule, at, catch_up=catch_up)
    return published


def ticks(q: Any) -> list[str]:
    """The ``at`` of every tick message waiting, in queue order."""
    return [Event.model_validate_json(m.event).data["at"] for m in q.peek(limit=1000)]


def record(db: str, prefix: str = "harel") -> list[tuple[Any, ...]]:
    return read(db, f"SELECT name, tick_at FROM {prefix}_transport_periodic ORDER BY name")


def test_a_tick_publishes_once_however_many_transports_publish_it(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    first, second = open_queue(db, clock=clock), open_queue(db, clock=clock)
    assert tick(first, EVERY, 1_000_000.0) is True
    assert tick(second, EVERY, 1_000_000.0) is False
    assert tick(first, EVERY, 1_000_000.0) is False
    assert ticks(first) == ["1970-01-12T13:46:40+00:00"]
    assert record(db) == [("beat", 1_000_000.0)]


def test_only_a_newer_tick_publishes(open_queue: OpenQueue, db: str, clock: FakeClock) -> None:
    q = open_queue(db, clock=clock)
    assert tick(q, EVERY, 20.0) is True
    assert tick(q, EVERY, 10.0) is False  # older than the record: never published
    assert tick(q, EVERY, 21.0) is True
    assert ticks(q) == ["1970-01-01T00:00:20+00:00", "1970-01-01T00:00:21+00:00"]
    other = Periodic("other", every=1, group_id="ticks", event=stamped)
    assert tick(q, other, 10.0) is True  # each name has its own record
    assert record(db) == [("beat", 21.0), ("other", 10.0)]


def test_a_catch_up_tick_needs_a_record(open_queue: OpenQueue, db: str, clock: FakeClock) -> None:
    q = open_queue(db, clock=clock)
    assert tick(q, EVERY, 50.0, catch_up=True) is False  # a new schedule has no past
    assert ticks(q) == [] and record(db) == []
    assert tick(q, EVERY, 51.0) is True
    assert tick(q, EVERY, 60.0, catch_up=True) is True
    assert tick(q, EVERY, 60.0, catch_up=True) is False
    assert len(ticks(q)) == 2 and record(db) == [("beat", 60.0)]


@pytest.mark.parametrize(
    ("schedule", "at", "catch_up", "error"),
    [
        ("beat", 1.0, False, InvalidArgumentTypeError),
        (EVERY, "1", False, InvalidArgumentTypeError),
        (EVERY, -1.0, False, InvalidArgumentError),
        (EVERY, float("nan"), False, InvalidArgumentError),
        (EVERY, 1.0, 1, InvalidArgumentTypeError),
        (
            Periodic("bad", every=1, group_id="g", event=lambda at: "text"),
            1.0,
            False,
            InvalidArgumentTypeError,
        ),
    ],
    ids=[
        "not-a-periodic",
        "tick-a-str",
        "tick-negative",
        "tick-nan",
        "catch-up-an-int",
        "event-fn-not-a-model",
    ],
)
def test_a_bad_tick_is_refused_before_anything_is_written(
    open_queue: OpenQueue,
    db: str,
    clock: FakeClock,
    schedule: Any,
    at: Any,
    catch_up: Any,
    error: type,
) -> None:
    q = open_queue(db, clock=clock)
    with pytest.raises(error):
        q.publish_tick(schedule, at, catch_up=catch_up)
    assert ticks(q) == [] and record(db) == []


def test_the_message_is_an_ordinary_one_of_its_group(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    q = open_queue(db, clock=clock)
    fixed = Periodic("fixed", cron="0 2 * * *", group_id="reports", event=Event(kind="report"))
    assert tick(q, fixed, fixed.latest(clock())) is True
    lease = q.claim("w", 30)
    assert lease is not None and lease.group_id == "reports" and lease.event.kind == "report"
    assert q.ack(lease)


def stepper(q: Any, clock: FakeClock) -> Callable[[], list[tuple[str, float]]]:
    """One pass of a ticker on ``q`` (the async kinds' calls made blocking, as the ticker's
    thread makes them)."""
    return Ticker(q, [EVERY], clock=clock).step


def test_the_ticker_publishes_each_tick_once_and_after_a_gap_only_the_last(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    clock.now = 1_000.5
    a, b = open_queue(db, clock=clock), open_queue(db, clock=clock)
    workers = [stepper(a, clock), stepper(b, clock)]
    assert [step() for step in workers] == [[], []]  # 1000 is before they started: no past
    published = []
    for _ in range(5):
        clock.advance(1)
        published += [p for step in workers for p in step()]
    assert published == [("beat", float(s)) for s in range(1001, 1006)]
    clock.advance(3600)  # nobody stepped for an hour: one tick, the last
    assert [step() for step in workers] == [[("beat", 4605.0)], []]
    assert len(ticks(a)) == 6


def test_a_cron_tick_is_handed_its_time_in_its_zone(
    open_queue: OpenQueue, db: str, clock: FakeClock
) -> None:
    clock.now = datetime(2026, 12, 5, 12, tzinfo=UTC).timestamp()
    q = open_queue(db, clock=clock)
    paris = Periodic(
        "paris", cron="30 2 * * *", group_id="r", event=stamped, timezone="Europe/Paris"
    )
    assert tick(q, paris, paris.latest(clock())) is True
    assert ticks(q) == ["2026-12-05T02:30:00+01:00"]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_transports_racing_on_each_tick_publish_it_once(
    backend: str, request: pytest.FixtureRequest, db: str
) -> None:
    """Four transports in four threads publish the same 40 ticks at once (a barrier per tick):
    exactly one call per tick returns True, and the queue holds each tick once."""
    if backend == "sqlite":
        queues: list[Any] = [SqliteTransport(db) for _ in range(4)]
    else:
        url = request.getfixturevalue("pg_url")
        queues = [PostgresTransport(url) for _ in range(4)]
    rounds, barrier = 40, threading.Barrier(4)
    wins: list[list[bool]] = [[] for _ in queues]

    def race(n: int) -> None:
        for r in range(rounds):
            barrier.wait(timeout=60)
            wins[n].append(queues[n].publish_tick(EVERY, 2_000.0 + r))

    threads = [threading.Thread(target=race, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert [sum(w[r] for w in wins) for r in range(rounds)] == [1] * rounds
        assert sorted(ticks(queues[0])) == sorted(
            datetime.fromtimestamp(2_000.0 + r, UTC).isoformat() for r in range(rounds)
        )
    finally:
        for q in queues:
            q.close()
