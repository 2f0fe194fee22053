"""Periodic publishes across real processes (issue 44): three worker processes carrying one
``every=1`` schedule for a few seconds publish every tick once, none missing; then all stop
for a few seconds and one starts: it publishes one catch-up tick for the gap, not one per
missed tick. On a SQLite file and on PostgreSQL; real time (the ticks are the wall clock's
seconds), kept short. The workers claim nothing (``min_priority=4``; the ticks' group is
priority 0), so every published tick stays in the queue to be counted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harel_sa import Event, PostgresTransport, SqliteTransport

BODY = """
import logging, sys
from harel_sa import Event, Periodic, PostgresTransport, SqliteTransport, Worker
target = sys.argv[1]
open_ = PostgresTransport if target.startswith("postgresql") else SqliteTransport
beat = Periodic("beat", every=1, group_id="ticks",
                event=lambda at: Event(kind="tick", data={"at": at.timestamp()}))
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
with open_(target) as q:
    worker = Worker(q, lambda lease: None, min_priority=4, grace=1.0, periodic=[beat])
    print("ready", flush=True)
    worker.run()
"""
TOGETHER = 4.5  # seconds the three processes run side by side
GAP = 3.0  # seconds no process runs


def start(target: str, count: int = 1) -> list[subprocess.Popen[str]]:
    """``count`` worker processes, started together; returns once each is ready."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BODY, target], stdout=subprocess.PIPE, text=True, env=env
        )
        for _ in range(count)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return procs


def stop(procs: list[subprocess.Popen[str]]) -> list[str]:
    """SIGTERM each; the lines each logged after ``ready``, all together."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    logged = []
    for proc in procs:
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0
        logged += out.splitlines()
    return logged


def ticks(q: Any) -> list[float]:
    """The tick times of every tick message, as published (queue order)."""
    return [Event.model_validate_json(m.event).data["at"] for m in q.peek(limit=10_000)]


def consecutive(seconds: list[float]) -> bool:
    return seconds == [seconds[0] + k for k in range(len(seconds))]


def run(target: str, q: Any) -> None:
    procs = start(target, 3)
    time.sleep(TOGETHER)
    stop(procs)
    together = ticks(q)
    assert len(together) >= 3
    assert len(set(together)) == len(together), "a tick was published twice"
    assert consecutive(sorted(together)), f"a tick is missing: {sorted(together)}"
    assert together == sorted(together)  # in tick order
    last = together[-1]

    time.sleep(GAP)  # nobody runs: these ticks are missed
    one = start(target)
    deadline = time.monotonic() + 30
    while len(ticks(q)) == len(together):
        assert time.monotonic() < deadline, "no catch-up tick"
        time.sleep(0.05)
    logged = [line for line in stop(one) if line.startswith("periodic beat: published")]
    after = ticks(q)[len(together) :]
    # One tick for the gap: the last due when the worker came back (its first publish, a
    # catch-up), none of the missed ones before it; then on, every tick again.
    assert after[0] >= last + 2, f"a missed tick was published: {last} then {after}"
    assert len(logged) == len(after) and "the catch-up tick of" in logged[0]
    assert not any("catch-up" in line for line in logged[1:])
    assert consecutive(after)


def test_three_workers_publish_each_tick_once_and_one_catches_up_sqlite(tmp_path: Path) -> None:
    target = str(tmp_path / "q.db")
    SqliteTransport(target).close()
    with SqliteTransport(target) as q:
        run(target, q)


@pytest.mark.usefixtures("pg_url")
def test_three_workers_publish_each_tick_once_and_one_catches_up_postgresql(pg_url: str) -> None:
    PostgresTransport(pg_url).close()
    with PostgresTransport(pg_url) as q:
        run(pg_url, q)
