"""A worker meets SQLite's write lock held by another connection (a real file, a real lock,
``busy_timeout=0`` so each attempt is refused at once): what it gives back, what it no longer
does once stopped. Both worker kinds.

The lock is let go, and the stop requested, from the log line the worker writes when its call
is refused (``... will retry``): the order of events is fixed, nothing waits on time.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator

import pytest

from harel_sa import Event, Names, SqliteTransport
from harel_sa.schema import DEFAULT_PREFIX
from tests.conftest import FakeClock
from tests.worker.conftest import Behaviour, Running


class Lock:
    """SQLite's write lock on ``db``, held by a connection of the test's own."""

    def __init__(self, db: str) -> None:
        self.conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)

    def take(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def let_go(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")


class OnRefusal(logging.Handler):
    """Calls ``then`` once, at the first ``<call>: ...; will retry`` line of ``call``."""

    def __init__(self, call: str, then: Callable[[], None]) -> None:
        super().__init__()
        self.call, self.then, self.seen = call, then, 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith(f"{self.call}: ") and message.endswith("will retry"):
            self.seen += 1
            if self.seen == 1:
                self.then()


@pytest.fixture
def lock(db: str, clock: FakeClock) -> Iterator[Lock]:
    with SqliteTransport(db, clock=clock) as q:
        q.publish_many([("a", Event(kind="a")), ("b", Event(kind="b"))])
    held = Lock(db)
    yield held
    held.let_go()
    held.conn.close()


@pytest.fixture
def on_refusal() -> Iterator[Callable[[str, Callable[[], None]], OnRefusal]]:
    logger = logging.getLogger("harel_sa.worker")
    added: list[OnRefusal] = []

    def on_refusal(call: str, then: Callable[[], None]) -> OnRefusal:
        handler = OnRefusal(call, then)
        logger.addHandler(handler)
        added.append(handler)
        return handler

    yield on_refusal
    for handler in added:
        logger.removeHandler(handler)


def deliveries(db: str) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        return dict(
            conn.execute(
                f"SELECT group_id, deliveries FROM {Names(DEFAULT_PREFIX).messages}"
            ).fetchall()
        )
    finally:
        conn.close()


def test_a_busy_claim_gives_back_its_max_messages_reservation(
    start: Callable[..., Running],
    lock: Lock,
    on_refusal: Callable[[str, Callable[[], None]], OnRefusal],
    clock: FakeClock,
    db: str,
) -> None:
    lock.take()
    refused = on_refusal("Claim", lock.let_go)
    running = start(Behaviour(), run={"max_messages": 1}, clock=clock, busy_timeout=0)
    stats = running.join()
    assert refused.seen >= 1  # the first claim was refused
    assert (stats.claimed, stats.succeeded) == (1, 1)  # the reservation was there to claim with
    assert deliveries(db) == {"b": 0}


def test_a_worker_stopped_while_retrying_a_busy_ack_and_claim_does_not_claim_again(
    start: Callable[..., Running],
    lock: Lock,
    on_refusal: Callable[[str, Callable[[], None]], OnRefusal],
    clock: FakeClock,
    db: str,
) -> None:
    running: list[Running] = []

    def stop_then_let_go() -> None:
        running[0].stop()
        lock.let_go()

    refused = on_refusal("AckAndClaim", stop_then_let_go)
    behaviour = Behaviour(does=lambda lease: lock.take())  # the ack that follows is refused
    running.append(start(behaviour, clock=clock, busy_timeout=0))
    stats = running[0].join()
    assert refused.seen >= 1
    assert [lease.group_id for lease in behaviour.calls] == ["a"]
    assert (stats.claimed, stats.succeeded) == (1, 1)  # acked; b never claimed
    assert deliveries(db) == {"b": 0}
