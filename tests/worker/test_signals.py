"""A real worker process, signalled (or killed) while its handler runs: nothing is lost and
nothing stays stuck past its lease. Both worker kinds, SIGTERM and SIGINT."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harel_sa import Event, SqliteTransport
from tests.worker.conftest import HANG

SCRIPT = Path(__file__).with_name("proc_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def start_worker(kind: str, db: str, hold: str, grace: float) -> subprocess.Popen[str]:
    with SqliteTransport(db) as q:
        q.publish("g", Event(kind="job"))
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), kind, db, hold, str(grace)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # blocks until the handler runs (or the process dies)
    assert line.startswith("handling "), line
    return process


def finish(process: subprocess.Popen[str]) -> dict[str, int]:
    out, _ = process.communicate(timeout=HANG)
    assert process.returncode == 0
    stats: dict[str, int] = json.loads(out.strip().splitlines()[-1])
    return stats


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_handler_that_finishes_within_the_grace_is_acked(kind: str, signum: int, db: str) -> None:
    process = start_worker(kind, db, hold="0.5", grace=HANG)
    process.send_signal(signum)
    stats = finish(process)
    assert (stats["succeeded"], stats["released"]) == (1, 0)
    with SqliteTransport(db) as q:
        assert q.stats().messages == 0


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_handler_that_outlives_the_grace_is_released_at_once(kind: str, db: str) -> None:
    process = start_worker(kind, db, hold="forever", grace=0.3)
    process.send_signal(signal.SIGTERM)
    stats = finish(process)
    assert (stats["succeeded"], stats["released"]) == (0, 1)
    with SqliteTransport(db) as q:
        lease = q.claim("next", 30.0)  # now, not when the 30 s lease would have ended
        assert lease is not None and lease.deliveries == 2


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_killed_worker_holds_its_message_only_until_the_lease_ends(kind: str, db: str) -> None:
    process = start_worker(kind, db, hold="forever", grace=0.3)
    process.kill()  # SIGKILL: no chance to release
    process.wait(HANG)
    with SqliteTransport(db) as q:
        [held] = q.peek("g")
        assert held.state == "leased" and held.lock_expiry is not None
        assert q.claim("next", 30.0) is None  # not before the lease ends...
        # ...but once it has (30 s here is too long to wait: move the clock instead).
    with SqliteTransport(db, clock=lambda: held.lock_expiry + 0.001) as later:
        lease = later.claim("next", 30.0)
        assert lease is not None and lease.deliveries == 2
