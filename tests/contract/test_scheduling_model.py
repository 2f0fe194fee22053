"""A random mix of publish (now, delayed, keyed: keep or replace), cancel, claim, ack and clock
steps against a model of the promises (issue 44), on SQLite and on PostgreSQL.

The model: a scheduled message joins its group's tail at the first claim after its due time,
in (due time, publish order); a key has at most one waiting message (queued and not in flight,
or scheduled); a claim leases the head of some group with nothing in flight.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harel_sa import Event, Names, SqliteTransport
from tests.conftest import FakeClock

GROUPS = ["a", "b", "c"]
KEYS = ["k1", "k2"]

publish = st.tuples(
    st.just("publish"),
    st.sampled_from(GROUPS),
    st.one_of(st.none(), st.integers(1, 5)),  # delay
    st.one_of(st.none(), st.sampled_from(KEYS)),  # key
    st.booleans(),  # replace
)
step = st.one_of(
    publish,
    st.tuples(st.just("claim")),
    st.tuples(st.just("ack"), st.integers(0, 3)),
    st.tuples(st.just("cancel"), st.sampled_from(KEYS)),
    st.tuples(st.just("advance"), st.integers(1, 4)),
)


@dataclass
class Model:
    now: float
    queued: dict[str, list[tuple[str, str | None]]] = field(default_factory=dict)
    scheduled: list[list[Any]] = field(default_factory=list)  # [due, order, group, kind, key]
    in_flight: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    order: int = 0

    def waiting(self, key: str) -> tuple[str, Any] | None:
        for group, items in self.queued.items():
            for i, (_, k) in enumerate(items):
                if k == key:
                    return "q", (group, i)
        for entry in self.scheduled:
            if entry[4] == key:
                return "s", entry
        return None

    def publish(
        self, group: str, kind: str, delay: int | None, key: str | None, replace: bool
    ) -> bool:
        if key is not None and (found := self.waiting(key)) is not None:
            if replace:
                where, at = found
                if where == "q":
                    g, i = at
                    self.queued[g][i] = (kind, key)
                else:
                    at[3] = kind
                    at[0] = self.now + (delay or 0)
            return False
        self.order += 1
        if delay is None:
            self.queued.setdefault(group, []).append((kind, key))
        else:
            self.scheduled.append([self.now + delay, self.order, group, kind, key])
        return True

    def promote(self) -> None:
        due = sorted((e for e in self.scheduled if e[0] <= self.now), key=lambda e: (e[0], e[1]))
        for e in due:
            self.queued.setdefault(e[2], []).append((e[3], e[4]))
        self.scheduled = [e for e in self.scheduled if e[0] > self.now]

    def heads(self) -> dict[str, str]:
        return {
            g: items[0][0] for g, items in self.queued.items() if items and g not in self.in_flight
        }

    def cancel(self, key: str) -> bool:
        gone = False
        for g in self.queued:
            kept = [item for item in self.queued[g] if item[1] != key]
            gone |= len(kept) != len(self.queued[g])
            self.queued[g] = kept
        before = len(self.scheduled)
        self.scheduled = [e for e in self.scheduled if e[4] != key]
        return gone or len(self.scheduled) != before


def check(q: Any, steps: list[tuple[Any, ...]], clock: FakeClock) -> None:
    model = Model(clock.now)
    leases: list[Any] = []
    for n, s in enumerate(steps):
        if s[0] == "publish":
            _, group, delay, key, replace = s
            kind = f"m{n}"
            options = {"on_key": "replace" if replace else "keep"}
            wrote = q.publish(group, Event(kind=kind), delay=delay, key=key, **options)
            assert wrote == model.publish(group, kind, delay, key, replace), s
        elif s[0] == "claim":
            model.promote()
            heads = model.heads()
            lease = q.claim("w", 1000.0)
            if lease is None:
                assert heads == {}, s
            else:
                assert heads.get(lease.group_id) == lease.event.kind, (s, heads)
                model.in_flight[lease.group_id] = model.queued[lease.group_id].pop(0)
                leases.append(lease)
        elif s[0] == "ack" and leases:
            lease = leases.pop(s[1] % len(leases))
            assert q.ack(lease)
            del model.in_flight[lease.group_id]
        elif s[0] == "cancel":
            assert q.cancel(s[1]) == model.cancel(s[1]), s
        elif s[0] == "advance":
            clock.advance(s[1])
            model.now = clock.now
        stats = q.stats()
        assert stats.scheduled == len(model.scheduled), s
        queued = sum(len(items) for items in model.queued.values())
        assert stats.messages == queued + len(model.in_flight), s


@given(steps=st.lists(step, max_size=40))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_sqlite_against_the_model(steps: list[tuple[Any, ...]]) -> None:
    clock = FakeClock()
    with (
        tempfile.TemporaryDirectory() as folder,
        SqliteTransport(Path(folder) / "q.db", clock=clock, synchronous="NORMAL") as q,
    ):
        check(q, steps, clock)


@pytest.fixture(scope="module")
def pg_queue(pg_server: Any) -> Any:
    from harel_sa import PostgresTransport

    clock = FakeClock()
    url = pg_server.create_database()
    with PostgresTransport(url, clock=clock) as q:
        yield q, clock, url


@given(steps=st.lists(step, max_size=40))
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
def test_postgresql_against_the_model(steps: list[tuple[Any, ...]], pg_queue: Any) -> None:
    import psycopg

    q, clock, url = pg_queue
    names = Names()
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute(f"TRUNCATE {names.messages}, {names.groups}, {names.dead}, {names.scheduled}")
    clock.now = 1_000_000.0
    check(q, steps, clock)
