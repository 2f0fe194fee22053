"""A handler steers its message: ``Retry``, ``DeadLetter``, settling its own lease, the default
``max_deliveries``, and a ``KeyboardInterrupt``/``SystemExit`` that must leave ``run()``.
Each test runs on :class:`Worker` and :class:`AsyncWorker`."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Callable
from typing import Any

import pytest

from harel_sa import (
    AsyncSqliteTransport,
    AsyncWorker,
    DeadLetter,
    Event,
    InvalidArgumentTypeError,
    Lease,
    Retry,
    SqliteTransport,
    Worker,
)
from harel_sa.worker import DEFAULT_MAX_DELIVERIES, Backoff, WorkerStats
from tests.conftest import FakeClock
from tests.worker.conftest import Behaviour, Running, wait_until
from tests.worker.test_worker import publish

Start = Callable[..., Running]
NOW = Backoff(base=0.0, jitter=0.0)  # failures come back at once: no clock to move


def raising(error: BaseException) -> Callable[[Lease[Event]], object]:
    def does(lease: Lease[Event]) -> None:
        raise error

    return does


def test_retry_parks_the_message_for_the_delay_the_handler_chose(
    start: Start, db: str, clock: FakeClock
) -> None:
    publish(db, "g")
    behaviour = Behaviour(fail_first=0)
    behaviour.does = lambda lease: _retry_first(behaviour, 42.0)
    running = start(behaviour, run={"max_messages": 2}, clock=clock)
    with SqliteTransport(db, clock=clock) as probe:

        def parked() -> bool:
            return [m.state for m in probe.peek("g")] == ["parked"]

        wait_until(parked, "the retry's park")
        [message] = probe.peek("g")
        assert message.lock_expiry == clock.now + 42.0  # the handler's delay, not the backoff
        clock.advance(42.5)  # a park lasts until its end, inclusive
        stats = running.join()
    assert (stats.retried, stats.failed, stats.succeeded, stats.lost) == (1, 0, 1, 0)
    assert [c.deliveries for c in behaviour.calls] == [1, 2]


def _retry_first(behaviour: Behaviour, delay: float) -> None:
    if len(behaviour.calls) == 1:
        raise Retry(delay, "the bank is closed")


def test_dead_letter_moves_the_message_now_with_its_reason(start: Start, db: str) -> None:
    publish(db, "g", per_group=2)
    behaviour = Behaviour()
    behaviour.does = lambda lease: _dead_first(behaviour)
    stats = start(behaviour, run={"until_empty": True}).join()
    assert (stats.dead_lettered, stats.succeeded, stats.failed, stats.lost) == (1, 1, 0, 0)
    with SqliteTransport(db) as q:
        [dead] = q.dead()
        assert (dead.seq, dead.error, dead.deliveries) == (behaviour.calls[0].seq, "poison", 1)
        assert q.stats().messages == 0  # the group was not blocked: its second message went


def _dead_first(behaviour: Behaviour) -> None:
    if len(behaviour.calls) == 1:
        raise DeadLetter("poison")


@pytest.mark.parametrize(
    ("settle", "counted"),
    [
        (lambda t, lease: t.ack(lease), "succeeded"),
        (lambda t, lease: t.dead_letter(lease, "mine"), "dead_lettered"),
        (lambda t, lease: t.nack(lease, 0.0), "retried"),
    ],
    ids=["ack", "dead_letter", "nack"],
)
@pytest.mark.parametrize("options", [{}, {"concurrency": 2, "batch": 2}], ids=["one", "batching"])
def test_a_handler_that_settles_its_own_lease_is_counted_as_what_it_did(
    start: Start,
    db: str,
    settle: Callable[[Any, Lease[Event]], object],
    counted: str,
    options: dict[str, int],
) -> None:
    publish(db, "g")
    gate = threading.Event()  # no handler runs before holder is filled
    behaviour = Behaviour(gate=gate)
    holder: list[Running] = []
    behaviour.does = lambda lease: (
        settle(holder[0].transport, lease) if len(behaviour.calls) == 1 else None
    )
    budget = 1 if counted != "retried" else 2
    holder.append(start(behaviour, run={"max_messages": budget}, **options))
    gate.set()
    stats = holder[0].join()
    assert stats.lost == 0
    assert getattr(stats, counted) == 1
    assert stats.succeeded == (1 if counted in ("succeeded", "retried") else 0)


def test_a_poison_message_ends_in_the_dead_table_after_the_default_max_deliveries(
    start: Start, db: str
) -> None:
    publish(db, "g")
    behaviour = Behaviour(fail_first=1000)
    stats = start(behaviour, run={"until_empty": True}, backoff=NOW).join()
    assert len(behaviour.calls) == DEFAULT_MAX_DELIVERIES == 10
    assert (stats.failed, stats.dead_lettered, stats.lost) == (10, 1, 0)
    with SqliteTransport(db) as q:
        [dead] = q.dead()
        assert dead.deliveries == 10
        assert "RuntimeError: handler failed on purpose" in dead.error
        assert "delivery 10 of 10" in dead.error


def test_max_deliveries_none_retries_for_as_long_as_it_takes(start: Start, db: str) -> None:
    publish(db, "g")
    behaviour = Behaviour(fail_first=DEFAULT_MAX_DELIVERIES + 5)
    stats = start(behaviour, run={"until_empty": True}, backoff=NOW, max_deliveries=None).join()
    assert (stats.failed, stats.succeeded, stats.dead_lettered) == (15, 1, 0)


def test_a_retry_at_the_last_delivery_dead_letters(start: Start, db: str) -> None:
    publish(db, "g")
    behaviour = Behaviour(does=raising(Retry(0.0)))
    stats = start(behaviour, run={"until_empty": True}, max_deliveries=3).join()
    assert (len(behaviour.calls), stats.retried, stats.dead_lettered) == (3, 3, 1)


@pytest.mark.parametrize("error", [KeyboardInterrupt(), SystemExit(7)], ids=["ctrl-c", "exit-7"])
def test_a_handlers_keyboard_interrupt_or_system_exit_releases_and_leaves_run(
    start: Start, db: str, error: BaseException
) -> None:
    publish(db, "g", "h")
    behaviour = Behaviour(does=raising(error))
    running = start(behaviour, visibility=3600.0)
    with pytest.raises(type(error)) as raised:
        running.join()
    assert raised.value is error
    assert len(behaviour.calls) == 1  # no more claims after it
    with SqliteTransport(db) as q:
        states = {m.group_id: (m.state, m.deliveries) for m in q.peek()}
        assert states[behaviour.calls[0].group_id] == ("ready", 1)  # released, not held 1 h
        assert sorted(states) == ["g", "h"]


def test_a_failure_is_logged_with_its_delivery_and_when_it_comes_back(
    start: Start, db: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="harel_sa")
    publish(db, "g")
    stats = start(Behaviour(fail_first=1), run={"max_messages": 2}, backoff=NOW).join()
    assert (stats.failed, stats.succeeded) == (1, 1)
    [failure] = [r for r in caplog.records if r.levelno == logging.WARNING]
    text = failure.getMessage()
    assert "handler failed on g seq 1 (delivery 1 of 10): RuntimeError" in text
    assert re.search(r"retry in 0\.0s \(at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)", text), text
    assert failure.exc_info is not None
    messages = [r.getMessage() for r in caplog.records]
    assert any(
        m.startswith("worker ") and " started " in m and "prefix harel" in m for m in messages
    )
    assert any("claimed g seq 1 (delivery 2)" in m for m in messages)  # DEBUG per message
    assert any(m.startswith("worker ") and "stopped: claimed=2" in m for m in messages)


def _drain_once(
    start: Start, db: str, does: Callable[[Lease[Event]], object], *kinds: str
) -> tuple[WorkerStats, dict[str, str]]:
    """One message of each of ``kinds`` (group: the kind's first letter), drained by a worker
    whose handler ``does`` with one delivery each; its stats and the dead table's errors by
    group, the queue left empty."""
    with SqliteTransport(db) as q:
        for kind in kinds:
            q.publish(kind[0], Event(kind=kind))
    stats = start(Behaviour(does=does), max_deliveries=1, run={"until_empty": True}).join()
    with SqliteTransport(db) as q:
        assert q.stats().messages == 0
        return stats, {d.group_id: d.error for d in q.dead()}


def _fail_unstorably(lease: Lease[Event]) -> None:
    if lease.event.kind == "poison":
        raise ValueError("cannot read '\udcff' (a file name os.fsdecode kept)")
    if lease.event.kind == "buried":
        raise DeadLetter("the bytes were\x00binary")


def test_a_reason_that_cannot_be_stored_as_it_is_is_stored_escaped(
    start: Start, db: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler's error text with a lone surrogate (which UTF-8 cannot hold) at the last
    delivery, and a dead letter whose reason holds NUL (which PostgreSQL's text cannot): both
    messages are dead-lettered with the characters escaped, and the run goes on (it stopped
    at the first, leaving the poison message to come back at every start)."""
    # The worker's warnings quote the surrogate; pytest-xdist cannot send such a log home.
    caplog.set_level(logging.ERROR, logger="harel_sa.worker")
    stats, errors = _drain_once(start, db, _fail_unstorably, "poison", "buried", "fine")
    assert (stats.dead_lettered, stats.succeeded, stats.lost) == (2, 1, 0)
    assert "cannot read '\\udcff'" in errors["p"]
    assert errors["b"] == "the bytes were\\x00binary"


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for this one")


def _fail_unprintably(lease: Lease[Event]) -> None:
    if lease.event.kind == "poison":
        raise _Unprintable()


def test_an_exception_whose_str_raises_is_the_messages_failure_not_the_runs(
    start: Start, db: str
) -> None:
    """Its text is written without its message, the message is dead-lettered at its last
    delivery, and the run goes on (before, the run stopped there, leaving the other groups)."""
    stats, errors = _drain_once(start, db, _fail_unprintably, "poison", "fine")
    assert (stats.dead_lettered, stats.succeeded, stats.lost) == (1, 1, 0)
    assert errors["p"].endswith("_Unprintable: <its str() raised RuntimeError>")


async def _coroutine_handler(lease: Lease[Event]) -> None:
    raise AssertionError("never run by a sync Worker")


class _AsyncCallable:
    async def __call__(self, lease: Lease[Event]) -> None:
        raise AssertionError("never run by a sync Worker")


@pytest.mark.parametrize("handler", [_coroutine_handler, _AsyncCallable()], ids=["def", "call"])
def test_a_sync_worker_refuses_a_coroutine_function(db: str, handler: Any) -> None:
    """It would call it, never await the coroutine, and ack a message whose work never ran."""
    with SqliteTransport(db) as q, pytest.raises(InvalidArgumentTypeError, match="AsyncWorker"):
        Worker(q, handler)


def test_a_sync_handler_that_returns_a_coroutine_fails_its_message(db: str) -> None:
    """A plain function returning a coroutine passes the check: the coroutine's work never
    runs, so the message is not acked but failed, and kept (dead-lettered at its last
    delivery, saying why), the coroutine closed unawaited."""
    with SqliteTransport(db) as q:
        q.publish("g", Event(kind="m"))
        stats = Worker(
            q, lambda lease: _coroutine_handler(lease), handle_signals=False, max_deliveries=1
        ).run(until_empty=True)
        assert (stats.succeeded, stats.dead_lettered) == (0, 1)
        [dead] = q.dead()
    assert "Worker never awaits" in dead.error


def test_an_async_worker_acks_a_plain_function_that_returned(db: str) -> None:
    """A plain function ran to its end when it returned: its message is acked, not failed
    after its work was done (to be done again at every redelivery)."""
    calls: list[int] = []

    async def main() -> WorkerStats:
        q = await AsyncSqliteTransport.create(db)
        try:
            await q.publish("g", Event(kind="m"))
            worker = AsyncWorker(q, lambda lease: calls.append(lease.seq), handle_signals=False)
            return await worker.run(until_empty=True)
        finally:
            await q.close()

    stats = asyncio.run(main())
    assert (stats.succeeded, stats.failed, calls) == (1, 0, [1])
