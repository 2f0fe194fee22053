"""A batching worker on real files, each test run on :class:`Worker` and :class:`AsyncWorker`:
which transport calls it makes, and that what it promises unbatched still holds."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from harel_sa import AsyncSqliteTransport, Event, SqliteTransport
from harel_sa.worker import Backoff
from tests.worker.conftest import HANG, Behaviour, Durations, Running, wait_until

Start = Callable[..., Running]
CALLS = ("claim", "ack_and_claim", "ack", "claim_many", "ack_many", "ack_many_and_claim_many")
GATHER = {"batch": 4, "concurrency": 4, "ack_wait": 10.0, "visibility": 60.0}  # one batch


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each queue call was made (either twin), with the size of each batch call."""
    seen: Counter[str] = Counter()
    for cls in (SqliteTransport, AsyncSqliteTransport):
        for name in CALLS:
            method = getattr(cls, name)

            def spy(*args: Any, _m: Any = method, _n: str = name, **kwargs: Any) -> Any:
                seen[_n] += 1
                if "limit" in kwargs:
                    seen[f"{_n} limit {kwargs['limit']}"] += 1
                if _n.startswith("ack_many"):
                    seen[f"{_n} of {len(args[1])}"] += 1
                return _m(*args, **kwargs)

            monkeypatch.setattr(cls, name, functools.wraps(method)(spy))
    return seen


def publish(db: str, *groups: str, per_group: int = 1) -> None:
    with SqliteTransport(db) as q:
        q.publish_many(
            [(g, Event(kind="job", data={"n": n})) for n in range(per_group) for g in groups]
        )


def test_one_claim_many_fills_the_slots_and_their_acks_go_in_one_commit(
    start: Start, db: str, calls: Counter[str]
) -> None:
    publish(db, "a", "b", "c", "d")
    behaviour = Behaviour(rendezvous=4)  # all four run at once: one claim gave each a lease
    stats = start(behaviour, run={"until_empty": True}, **GATHER).join()
    assert (stats.claimed, stats.succeeded, behaviour.most_running) == (4, 4, 4)
    assert calls["claim_many limit 4"] == calls["claim_many"] == 1
    assert calls["ack_many_and_claim_many of 4"] == 1  # the four acks, one transaction
    assert calls["claim"] == calls["ack"] == calls["ack_and_claim"] == 0


def test_a_batching_drain_keeps_each_groups_order(start: Start, db: str) -> None:
    publish(db, *(f"g{k}" for k in range(10)), per_group=5)
    behaviour = Behaviour()
    stats = start(behaviour, run={"until_empty": True}, batch=8, concurrency=8).join()
    assert stats.claimed == stats.succeeded == 50 and stats.lost == 0
    for k in range(10):
        assert [c.event.data["n"] for c in behaviour.calls if c.group_id == f"g{k}"] == [
            0,
            1,
            2,
            3,
            4,
        ]
    with SqliteTransport(db) as q:
        assert q.stats().messages == 0


@pytest.mark.parametrize("ack_wait", [0.0, 10.0])
def test_ack_wait_0_sends_an_ack_at_once_else_it_waits_for_the_others(
    start: Start, db: str, ack_wait: float, calls: Counter[str]
) -> None:
    publish(db, "fast", "slow")
    gate = threading.Event()

    def does(lease: Any) -> object:
        if lease.group_id != "slow":
            return None
        try:
            asyncio.get_running_loop()  # AsyncWorker: wait without blocking the loop
        except RuntimeError:
            return gate.wait(20.0)
        return asyncio.to_thread(gate.wait, 20.0)

    behaviour = Behaviour(does=does)
    running = start(
        behaviour,
        run={"until_empty": True},
        batch=2,
        concurrency=2,
        ack_wait=ack_wait,
        visibility=60.0,
    )
    wait_until(lambda: len(behaviour.calls) == 2, "both handlers to start")
    with SqliteTransport(db) as q:
        if ack_wait == 0:  # the fast ack lands while the slow handler still runs
            wait_until(lambda: [m.group_id for m in q.peek()] == ["slow"], "the fast ack")
        gate.set()
        stats = running.join()
        assert stats.succeeded == 2 and q.stats().messages == 0
    together = calls["ack_many_and_claim_many of 2"] + calls["ack_many of 2"]
    assert together == (0 if ack_wait == 0 else 1)  # gathered: both acks in one commit


def test_a_lost_lease_in_a_batch_is_counted_lost_and_the_others_acked(
    start: Start, db: str, calls: Counter[str]
) -> None:
    publish(db, "a", "b")
    gate = threading.Event()
    behaviour = Behaviour(gate=gate)
    running = start(
        behaviour, run={"max_messages": 2}, batch=2, concurrency=2, ack_wait=10.0, visibility=60
    )
    wait_until(lambda: behaviour.running == 2, "both handlers to start")
    with SqliteTransport(db) as other:
        assert other.purge("a") == 1  # a's message goes while its handler runs
        publish(db, "a")  # and its group has a new one, which the late ack must not touch
        gate.set()
        stats = running.join()
        assert (stats.succeeded, stats.lost) == (1, 1)
        assert calls["ack_many of 2"] == 1  # both acks in one batch
        assert [(m.group_id, m.state) for m in other.peek()] == [("a", "ready")]


def test_max_messages_is_honoured_exactly_with_batches(start: Start, db: str) -> None:
    publish(db, *(f"g{k}" for k in range(10)))
    stats = start(Behaviour(), run={"max_messages": 6}, batch=4, concurrency=4).join()
    assert (stats.claimed, stats.succeeded, stats.released) == (6, 6, 0)
    with SqliteTransport(db) as q:
        assert q.stats().messages == 4  # never claimed: the budget was spent


def test_heartbeats_extend_the_leases_of_a_batch(start: Start, db: str) -> None:
    publish(db, "a", "b")
    gate = threading.Event()
    behaviour = Behaviour(gate=gate)
    running = start(
        behaviour, run={"max_messages": 2}, batch=2, concurrency=2, visibility=0.3, ack_wait=0.0
    )
    wait_until(lambda: behaviour.running == 2, "both handlers to start")
    with SqliteTransport(db) as other:
        first = {m.group_id: m.lock_expiry for m in other.peek()}
        assert None not in first.values()
        lapse = max(e for e in first.values() if e is not None) + 0.3
        wait_until(lambda: time.time() > lapse, "the first leases to be long over")
        assert other.claim("thief", 30.0) is None  # both groups still in flight
        now = {m.group_id: m.lock_expiry for m in other.peek()}
        assert all((now[g] or 0) > (first[g] or 0) for g in ("a", "b"))  # both extended
        gate.set()
        stats = running.join()
        assert (stats.succeeded, stats.lost) == (2, 0)


def test_a_stopped_batching_worker_releases_what_it_holds(start: Start, db: str) -> None:
    publish(db, "a", "b", "c")
    behaviour = Behaviour(gate=threading.Event())  # never opened
    running = start(behaviour, batch=3, concurrency=3, grace=0.2, visibility=30.0)
    wait_until(lambda: behaviour.running == 3, "the handlers to start")
    running.stop()
    stats = running.join()
    assert (stats.claimed, stats.succeeded, stats.released) == (3, 0, 3)
    with SqliteTransport(db) as q:
        assert len(q.claim_many("next", 30.0, 3)) == 3  # at once: not after the 30 s leases


def test_a_deep_single_group_drains_in_order_one_lease_a_batch(
    start: Start, db: str, calls: Counter[str]
) -> None:
    publish(db, "deep", per_group=6)
    behaviour = Behaviour()
    stats = start(behaviour, run={"until_empty": True}, batch=4, concurrency=4).join()
    assert stats.claimed == stats.succeeded == 6
    assert [c.event.data["n"] for c in behaviour.calls] == [0, 1, 2, 3, 4, 5]
    assert behaviour.most_running == 1  # one in flight per group


def test_a_handler_turned_slow_after_quick_ones_holds_no_lease_of_its_batch_back(
    start: Start, db: str
) -> None:
    # Eight quick messages, then "slow" and three more: the third batch of four holds "slow"
    # first, which the slot that sent it takes (after quick handlers it takes its batch alone);
    # the three leases after it must still get slots of their own while it blocks.
    publish(db, *(f"q{k}" for k in range(8)), "slow", "r0", "r1", "r2")
    release = threading.Event()
    unblocked: list[str] = []

    async def block_async() -> None:
        while not release.is_set():
            await asyncio.sleep(0.005)
        unblocked.append("slow")

    def block(lease: Any) -> object:
        if lease.group_id != "slow":
            return None
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a thread of the Worker
            release.wait(HANG)
            unblocked.append("slow")
            return None
        return block_async()

    behaviour = Behaviour(does=block)
    running = start(behaviour, run={"until_empty": True}, batch=4, concurrency=4)
    try:
        wait_until(
            lambda: {c.group_id for c in behaviour.calls} >= {"slow", "r0", "r1", "r2"},
            "the leases after the blocked handler to start",
        )
        assert not unblocked  # ... while "slow" still blocks
    finally:
        release.set()
    stats = running.join()
    assert stats.claimed == stats.succeeded == 12


def test_a_batching_run_times_each_handler_once_failures_included(start: Start, db: str) -> None:
    publish(db, *(f"g{k}" for k in range(6)))
    times, behaviour = Durations(), Behaviour(fail_first=2)
    stats = start(
        behaviour,
        run={"until_empty": True},
        batch=4,
        concurrency=4,
        observer=times,
        backoff=Backoff(base=0.0, jitter=0.0),
    ).join()
    assert (stats.failed, stats.succeeded) == (2, 6)
    assert len(times.seen) == len(behaviour.calls) == 8  # six returned, two raised
