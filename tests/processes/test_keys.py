"""Many processes publishing one key at once leave exactly one waiting message (issue 44): on
a SQLite file (its write lock) and on PostgreSQL (an advisory lock per key), real processes
started together."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harel_sa import PostgresTransport, SqliteTransport

BODY = """
import sys, time
from pathlib import Path
from harel_sa import Event, PostgresTransport, SqliteTransport
target, go, name = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
open_ = PostgresTransport if target.startswith("postgresql") else SqliteTransport
with open_(target) as q:
    while not go.exists():
        time.sleep(0.001)
    wrote = 0
    for i in range(40):
        on_key = "replace" if i % 2 else "keep"
        delay = 60.0 if i % 3 == 0 else None
        wrote += q.publish(f"g{i % 4}", Event(kind=f"{name}-{i}"), key=f"K{i}", on_key=on_key,
                           delay=delay)
        wrote += q.publish("other", Event(kind="x"), key=f"{name}-{i}")
    print(wrote)
"""
PROCESSES = 6


def _run(target: str, tmp_path: Path) -> list[int]:
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BODY, target, str(go), f"p{n}"],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in range(PROCESSES)
    ]
    time.sleep(1.0)  # every process opened its transport
    go.touch()
    out = []
    for proc in procs:
        stdout, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        out.append(int(stdout.strip()))
    return out


def _waiting(q: SqliteTransport | PostgresTransport) -> None:
    stats = q.stats()
    # One message per round's key (queued or scheduled), one per distinct other key.
    assert stats.messages + stats.scheduled == 40 + PROCESSES * 40


def test_many_processes_one_key_sqlite(tmp_path: Path) -> None:
    target = str(tmp_path / "q.db")
    SqliteTransport(target).close()
    wrote = _run(target, tmp_path)
    assert sum(wrote) == 40 + PROCESSES * 40  # one publish of each round's key wrote
    with SqliteTransport(target) as q:
        _waiting(q)


@pytest.mark.usefixtures("pg_url")
def test_many_processes_one_key_postgresql(pg_url: str, tmp_path: Path) -> None:
    PostgresTransport(pg_url).close()
    wrote = _run(pg_url, tmp_path)
    assert sum(wrote) == 40 + PROCESSES * 40  # one publish of each round's key wrote
    with PostgresTransport(pg_url) as q:
        _waiting(q)
