"""The write-ahead log stays bounded under a producer and a polling reader (issue 12, point 4).

SQLite's automatic checkpoints are passive: a reader polling ``stats()`` back to back keeps
a snapshot open at every one of them, the log is never restarted, and it grows with every
write (the issue measured 517 MiB for a 42 MiB file; before this fix this very test saw the
log reach several times its limit). A writing transport forces a ``RESTART`` checkpoint once
the log passes ``WAL_LIMIT``. The producer lowers the limit to 1 MiB (and looks every 16
operations) so that a few seconds of writes cross it many times; ``bench/`` measures the
default limit (workload 7).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from harel_sa import Event, SqliteTransport
from harel_sa.sqlite import watch as watch_module
from tests.forkserver import context

LIMIT = 1024 * 1024
HANG = 120.0  # a guard against hangs, never a timing assertion


def poll(db: str, stop: str, polls: Any) -> None:
    with SqliteTransport(db) as q:
        while not os.path.exists(stop):
            q.stats()
            polls.value += 1


def produce(db: str, n: int, result: Any) -> None:
    watch_module.WAL_LIMIT = LIMIT
    watch_module.WAL_CHECK_EVERY = 16
    pad = "x" * 2000
    largest = 0
    with SqliteTransport(db, synchronous="NORMAL") as q:
        for i in range(n):
            q.publish(f"g{i % 50}", Event(kind="m", data={"pad": pad}))
            largest = max(largest, os.stat(f"{db}-wal").st_size)
        result.value = largest


def test_the_log_stays_bounded_while_a_reader_polls_back_to_back(tmp_path: Path) -> None:
    db, stop = str(tmp_path / "q.db"), str(tmp_path / "stop")
    SqliteTransport(db).close()
    ctx = context()
    polls, largest = ctx.Value("q", 0), ctx.Value("q", 0)
    poller = ctx.Process(target=poll, args=(db, stop, polls))
    poller.start()
    deadline = time.monotonic() + HANG
    while polls.value < 10:  # the reader is at it before the first write
        assert time.monotonic() < deadline and poller.is_alive()
        time.sleep(0.01)
    producer = ctx.Process(target=produce, args=(db, 3000, largest))
    producer.start()
    producer.join(HANG)
    Path(stop).touch()
    poller.join(HANG)
    assert (producer.exitcode, poller.exitcode) == (0, 0)
    written = os.path.getsize(db)
    assert written > 8 * LIMIT  # the data went through the log many times its limit over
    assert polls.value > 100  # and the reader kept reading meanwhile
    # Past the limit by at most what 16 publishes write (each ~3 pages) and a checkpoint's
    # moment: a few hundred KiB, not the multiples an unbounded log reaches.
    assert largest.value < 2 * LIMIT, (largest.value, written)


def test_journal_size_limit_is_set_at_open(db: str) -> None:
    with SqliteTransport(db) as q:
        assert q._db is not None
        got = q._db.raw.execute("PRAGMA journal_size_limit").fetchone()[0]
    assert got == watch_module.WAL_LIMIT == 16 * 1024 * 1024


@pytest.mark.parametrize("mode", ["RESTART", "TRUNCATE"])
def test_a_forced_checkpoint_leaves_the_connections_busy_timeout_as_it_was(
    db: str, mode: str
) -> None:
    with SqliteTransport(db, busy_timeout=7.0) as q:
        assert q._db is not None
        raw = q._db.raw
        q.publish("g", Event(kind="m"))
        assert watch_module.checkpoint(raw, mode, 7.0) is True
        assert raw.execute("PRAGMA busy_timeout").fetchone()[0] == 7000
