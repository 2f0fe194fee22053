"""``Worker`` and ``AsyncWorker`` on the PostgreSQL transports: the same workers, the same rules.

The worker's own behaviour is tested on SQLite (tests/worker/); here it drives PostgreSQL's
twins: every message handled, failures retried, FIFO per group, the queue empty afterwards,
and the wrong twin refused before anything runs. Each drain runs unbatched and batching
(``batch=4``: ``claim_many`` and ``ack_many_and_claim_many`` on PostgreSQL, single nacks beside
the batches).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict

import psycopg
import pytest

from harel_sa import (
    AsyncPostgresTransport,
    AsyncWorker,
    DeadLetter,
    Event,
    InvalidArgumentTypeError,
    Lease,
    PostgresTransport,
    Worker,
)
from harel_sa.schema import Names
from harel_sa.worker import Backoff

GROUPS, PER_GROUP = 12, 8


def publish_all(q: PostgresTransport[Event]) -> None:
    q.publish_many(
        [(f"g{g}", Event(kind=f"{g}:{n}")) for n in range(PER_GROUP) for g in range(GROUPS)]
    )


class Handled:
    """What the handler saw: per group, the kinds it finished, in the order it finished them;
    every message's first delivery fails once."""

    def __init__(self) -> None:
        self.done: dict[str, list[str]] = defaultdict(list)
        self.failed: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, lease: Lease[Event]) -> None:
        with self.lock:
            if lease.event.kind not in self.failed:
                self.failed.add(lease.event.kind)
                raise RuntimeError("first delivery fails")
            self.done[lease.group_id].append(lease.event.kind)

    def check(self) -> None:
        assert self.done == {f"g{g}": [f"{g}:{n}" for n in range(PER_GROUP)] for g in range(GROUPS)}


OPTIONS = {"concurrency": 4, "visibility": 30.0, "backoff": Backoff(base=0, jitter=0)}
BATCHES = pytest.mark.parametrize("batch", [1, 4], ids=["one-at-a-time", "batching"])


@BATCHES
def test_a_worker_drains_a_postgres_queue_in_order_per_group_retrying_failures(
    pg_url: str, batch: int
) -> None:
    handled = Handled()
    with PostgresTransport(pg_url) as q:
        publish_all(q)
        worker = Worker(q, handled, handle_signals=False, batch=batch, **OPTIONS)
        stats = worker.run(until_empty=True)
        assert q.stats().messages == 0
    handled.check()
    assert stats.succeeded == GROUPS * PER_GROUP
    assert stats.failed == GROUPS * PER_GROUP


@BATCHES
def test_an_async_worker_drains_a_postgres_queue_in_order_per_group_retrying_failures(
    pg_url: str, batch: int
) -> None:
    handled = Handled()

    async def handler(lease: Lease[Event]) -> None:
        handled(lease)

    async def main() -> None:
        q = await AsyncPostgresTransport.create(pg_url)
        try:
            worker = AsyncWorker(q, handler, handle_signals=False, batch=batch, **OPTIONS)
            stats = await worker.run(until_empty=True)
            assert (await q.stats()).messages == 0
            assert stats.succeeded == GROUPS * PER_GROUP
        finally:
            await q.close()

    with PostgresTransport(pg_url) as q:
        publish_all(q)
    asyncio.run(main())
    handled.check()


def test_each_worker_refuses_the_other_twin(pg_url: str) -> None:
    async def main() -> None:
        q = await AsyncPostgresTransport.create(pg_url)
        try:
            with pytest.raises(InvalidArgumentTypeError, match="AsyncPostgresTransport"):
                Worker(q, lambda lease: None)  # type: ignore[arg-type]
        finally:
            await q.close()

    asyncio.run(main())
    with (
        PostgresTransport(pg_url) as q,
        pytest.raises(InvalidArgumentTypeError, match="PostgresTransport"),
    ):
        AsyncWorker(q, handler=lambda lease: None)  # type: ignore[arg-type]


class LostMidAck:
    """A handler after which the worker's ack (or batch of acks) loses its connection while
    its statement waits at the server: it locks the messages table, and a thread of its own
    terminates the first backend that waits on that lock, then lets the lock go."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ended: list[int] = []
        self.errors: list[BaseException] = []
        self._thread: threading.Thread | None = None

    def __call__(self, lease: Lease[Event]) -> None:
        if self._thread is not None:
            return
        locked = threading.Event()
        self._thread = threading.Thread(target=self._lock_and_end, args=(locked,), daemon=True)
        self._thread.start()
        assert locked.wait(30)

    def _lock_and_end(self, locked: threading.Event) -> None:
        try:
            with (
                psycopg.connect(self.url) as locker,
                psycopg.connect(self.url, autocommit=True) as admin,
            ):
                locker.execute(f"LOCK TABLE {Names().messages} IN ACCESS EXCLUSIVE MODE")
                locked.set()
                waiting = (
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND pid <> %s"
                )
                for _ in range(6000):  # a bound, not a timing
                    rows = admin.execute(waiting, (locker.info.backend_pid,)).fetchall()
                    if rows:
                        break
                    time.sleep(0.005)
                for (pid,) in rows:
                    admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))
                    self.ended.append(pid)
                locker.rollback()
        except BaseException as exc:
            self.errors.append(exc)

    def join(self) -> None:
        assert self._thread is not None
        self._thread.join(60)
        assert self.errors == []


@BATCHES
def test_an_ack_whose_connection_is_lost_mid_statement_is_sent_again(
    pg_url: str, batch: int
) -> None:
    """Fenced by its token, an ack is safe to send twice: the worker sends it again once the
    pool has a new connection, so the message is not handled a second time at lease lapse."""
    with PostgresTransport(pg_url, pool_size=2) as q:
        q.publish("g", Event(kind="m"))
        handler = LostMidAck(pg_url)
        options = {"batch": batch, "concurrency": batch, "poll_interval": 0.05}
        stats = Worker(q, handler, handle_signals=False, **options).run(until_empty=True)
        handler.join()
        assert len(handler.ended) == 1  # the ack's backend, ended mid-statement
        assert (stats.succeeded, stats.lost) == (1, 0)
        assert q.stats().messages == 0


def _bury_with_nul(lease: Lease[Event]) -> None:
    raise DeadLetter("the bytes were\x00binary")


def test_a_dead_letter_reason_holding_nul_is_stored_escaped(pg_url: str) -> None:
    """PostgreSQL's text cannot hold NUL: the worker stores its reasons escaped, so the
    message is dead-lettered (not refused, to come back at every lease lapse)."""
    with PostgresTransport(pg_url) as q:
        q.publish("g", Event(kind="m"))
        stats = Worker(q, _bury_with_nul, handle_signals=False).run(until_empty=True)
        assert (stats.dead_lettered, stats.lost) == (1, 0)
        [dead] = q.dead()
        assert dead.error == "the bytes were\\x00binary"
