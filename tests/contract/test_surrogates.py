"""Ids with lone surrogates (issue 12, point 12): ``InvalidArgumentError`` before anything is
written, on every transport, for every text argument; never the driver's ``UnicodeEncodeError``.
A lone surrogate is a valid Python ``str`` (``"\\ud800"``, or ``os.fsdecode`` of a non-UTF-8
name) that UTF-8, and so SQLite, cannot hold."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from harel_sa import AsyncSqliteTransport, Event, InvalidArgumentError, SqliteTransport, Worker
from harel_sa.worker import AsyncWorker
from tests.conftest import FakeClock
from tests.contract.test_bad_input import snapshot

LONE = "job-\ud800"  # a high surrogate with no low one after it
FROM_BYTES = b"caf\xe9".decode("utf-8", "surrogateescape")  # as os.fsdecode would give


@pytest.fixture
def q(open_queue: Any, db: str, clock: FakeClock) -> Any:
    q = open_queue(db, clock=clock)
    q.publish("g", Event(kind="keep"))
    return q


def calls(q: Any, bad: str) -> dict[str, Callable[[], object]]:
    lease = q.claim("w", 30.0)
    return {
        "publish group_id": lambda: q.publish(bad, Event(kind="x")),
        "publish routing_key": lambda: q.publish("g", Event(kind="x"), routing_key=bad),
        "publish_many group_id": lambda: q.publish_many(
            [("g", Event(kind="x")), (bad, Event(kind="y"))]
        ),
        "claim worker_id": lambda: q.claim(bad, 30.0),
        "claim routing_keys": lambda: q.claim("w", 30.0, routing_keys=["k", bad]),
        "ack_and_claim worker_id": lambda: q.ack_and_claim(lease, bad, 30.0),
        "dead_letter reason": lambda: q.dead_letter(lease, bad),
        "peek group_id": lambda: q.peek(bad),
        "release group_id": lambda: q.release(bad),
        "purge group_id": lambda: q.purge(bad),
        "dead group_id": lambda: q.dead(bad),
        "requeue_dead group_id": lambda: q.requeue_dead(bad),
        "purge_dead group_id": lambda: q.purge_dead(bad),
    }


@pytest.mark.parametrize("bad", [LONE, FROM_BYTES], ids=["lone", "surrogateescape"])
def test_a_lone_surrogate_in_any_id_is_invalid_argument_and_writes_nothing(
    q: Any, db: str, bad: str
) -> None:
    for name, call in calls(q, bad).items():
        before = snapshot(db)
        with pytest.raises(InvalidArgumentError) as caught:
            call()
        assert not isinstance(caught.value, UnicodeError), name
        assert "surrogate" in str(caught.value), name
        assert snapshot(db) == before, name


def test_a_worker_id_with_a_lone_surrogate_is_refused_at_construction(db: str) -> None:
    with SqliteTransport(db) as t, pytest.raises(InvalidArgumentError):
        Worker(t, lambda lease: None, worker_id=LONE)

    async def make() -> None:
        t = await AsyncSqliteTransport.create(db)
        try:
            with pytest.raises(InvalidArgumentError):
                AsyncWorker(t, _noop, worker_id=LONE)
        finally:
            await t.close()

    asyncio.run(make())


async def _noop(lease: Any) -> None:
    return None


def test_text_that_utf8_can_hold_is_accepted(q: Any) -> None:
    for group in ("café", "日本", "emoji-\U0001f600"):
        q.publish(group, Event(kind=group))
    assert {lease.group_id for lease in iter(lambda: q.claim("w", 30.0), None)} == {
        "g",
        "café",
        "日本",
        "emoji-\U0001f600",
    }
