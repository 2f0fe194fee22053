"""``Periodic``: its checks (InvalidArgumentError when made, and for two of one name when a
worker is), and its ticks: multiples of ``every`` since the epoch, or croniter's times in the
schedule's zone, DST included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from harel_sa import (
    Event,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    Periodic,
    SqliteTransport,
    Worker,
)
from harel_sa.periodic import schedules

EV = Event(kind="k")


def make(**kwargs: Any) -> Periodic:
    options: dict[str, Any] = {"group_id": "g", "event": EV, **kwargs}
    return Periodic(options.pop("name", "p"), **options)


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({}, InvalidArgumentError, "exactly one of every= and cron="),
        ({"every": 1, "cron": "* * * * *"}, InvalidArgumentError, "exactly one"),
        ({"every": 0}, InvalidArgumentError, "above 0"),
        ({"every": -5}, InvalidArgumentError, "above 0"),
        ({"every": timedelta(0)}, InvalidArgumentError, "above 0"),
        ({"every": float("inf")}, InvalidArgumentError, "finite"),
        ({"every": float("nan")}, InvalidArgumentError, "finite"),
        ({"every": "60"}, InvalidArgumentTypeError, "every must be seconds or a timedelta"),
        ({"every": True}, InvalidArgumentTypeError, "every must be"),
        ({"cron": "61 * * * *"}, InvalidArgumentError, "not a cron expression"),
        ({"cron": "banana"}, InvalidArgumentError, "not a cron expression"),
        ({"cron": ""}, InvalidArgumentError, "not a cron expression"),
        ({"cron": 5}, InvalidArgumentTypeError, "cron must be a str"),
        ({"every": 1, "timezone": "Mars/Olympus"}, InvalidArgumentError, "not a known zone"),
        ({"every": 1, "timezone": 1}, InvalidArgumentTypeError, "timezone must be a str"),
        ({"every": 1, "name": ""}, InvalidArgumentError, "name must not be empty"),
        ({"every": 1, "name": 7}, InvalidArgumentTypeError, "name must be a str"),
        ({"every": 1, "group_id": None}, InvalidArgumentTypeError, "group_id must be a str"),
        ({"every": 1, "event": "tick"}, InvalidArgumentTypeError, "event must be a pydantic"),
    ],
)
def test_a_bad_schedule_is_refused_when_made(
    kwargs: dict[str, Any], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        make(**kwargs)


def test_every_ticks_at_its_multiples_since_the_epoch() -> None:
    p = make(every=timedelta(minutes=5))
    assert p.period == 300.0
    assert p.latest(1_000_000.0) == 999_900.0 and p.following(1_000_000.0) == 1_000_200.0
    assert p.latest(999_900.0) == 999_900.0  # a tick's own instant is that tick
    assert p.following(999_900.0) == 1_000_200.0
    tenth = make(every=0.1)
    for now in (0.3, 0.7, 1e9 + 0.3, 123.456):
        assert tenth.latest(now) <= now < tenth.following(now)


def test_cron_ticks_in_its_zone_across_dst() -> None:
    p = make(cron="30 2 * * *", timezone="Europe/Paris")
    noon = datetime(2026, 3, 28, 12, tzinfo=UTC).timestamp()
    assert p.at(p.latest(noon)).isoformat() == "2026-03-28T02:30:00+01:00"
    # 02:30 does not exist on 29 March in Paris (clocks jump 02:00 -> 03:00)
    after = [p.following(noon)]
    for _ in range(2):
        after.append(p.following(after[-1]))
    assert [p.at(t).date().isoformat() for t in after] == ["2026-03-29", "2026-03-30", "2026-03-31"]
    assert p.at(after[1]).isoformat() == "2026-03-30T02:30:00+02:00"
    on_tick = after[1]
    assert p.latest(on_tick) == on_tick and p.latest(on_tick - 1) == after[0]


def test_the_event_function_gets_the_aware_tick_time() -> None:
    seen: list[datetime] = []

    def event(at: datetime) -> Event:
        seen.append(at)
        return Event(kind="tick")

    p = make(every=60, event=event, timezone="Asia/Tokyo")
    assert p.event_at(120.0).kind == "tick"
    assert seen[0].isoformat() == "1970-01-01T09:02:00+09:00"
    broken = make(every=60, event=lambda at: "tick")
    with pytest.raises(InvalidArgumentTypeError, match="returned str"):
        broken.event_at(120.0)


def test_a_worker_refuses_two_schedules_of_one_name(tmp_path: Any) -> None:
    with SqliteTransport(tmp_path / "q.db") as q:
        with pytest.raises(InvalidArgumentError, match="two periodic schedules are named 'p'"):
            Worker(q, lambda lease: None, periodic=[make(every=1), make(cron="* * * * *")])
        with pytest.raises(InvalidArgumentTypeError, match="Periodic items, not str"):
            Worker(q, lambda lease: None, periodic=["p"])  # type: ignore[list-item]
        with pytest.raises(InvalidArgumentTypeError, match=r"a list of harel_sa\.Periodic"):
            Worker(q, lambda lease: None, periodic=make(every=1))  # type: ignore[arg-type]
        worker = Worker(q, lambda lease: None, periodic=(make(every=1), make(name="q", every=2)))
        assert [p.name for p in worker.options.periodic] == ["p", "q"]
        assert "periodic=p,q" in worker.options.describe()
    assert schedules([]) == ()
