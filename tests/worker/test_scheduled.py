"""An idle worker starts a scheduled message at its first claim after the due time: workers
claim at least every poll interval, and the claim promotes what is due (no publish wakes it).
The transport's clock is the test's; the worker's polls are real."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from harel_sa import Event, Lease, Worker
from tests.conftest import FakeClock
from tests.worker.conftest import HANG, wait_until
from tests.worker.test_idle import CountingTransport

POLLS = 3


@pytest.mark.parametrize("batch", [1, 4], ids=["one-at-a-time", "batching"])
def test_an_idle_worker_starts_a_message_at_its_first_claim_after_the_due_time(
    tmp_path: Path, batch: int
) -> None:
    clock = FakeClock()
    started: list[str] = []

    def handle(lease: Lease[Event]) -> None:
        started.append(lease.event.kind)

    with CountingTransport(tmp_path / "q.db", clock=clock) as q:
        q.publish("g", Event(kind="reminder"), delay=60)
        worker = Worker(q, handle, handle_signals=False, poll_interval=0.01, batch=batch)
        running = threading.Thread(target=worker.run)
        running.start()
        try:
            wait_until(lambda: q.empty_claims >= POLLS, "the idle worker's polls")
            assert started == []  # not due: it holds nothing up and is not delivered
            clock.advance(60)
            polls_at_due = q.empty_claims
            wait_until(lambda: started == ["reminder"], "the due message's start")
            # at most one empty claim read the clock before it moved: the next one delivered
            assert q.empty_claims - polls_at_due <= 1
        finally:
            worker.stop()
            running.join(HANG)
        assert not running.is_alive()
