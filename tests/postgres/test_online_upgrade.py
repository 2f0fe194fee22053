"""PostgreSQL upgrades that meet other sessions' locks: the queue goes on, the upgrade waits a
second at a time and tries again, resumes after a kill, and gives up with a clear message.

The sessions in the way are real: a reporting session idle in transaction after a ``SELECT``
(it holds ``ACCESS SHARE`` until it ends), and a ``REPEATABLE READ`` transaction holding a
snapshot (which every ``CREATE INDEX CONCURRENTLY`` waits for).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from harel_sa import HEAD_REVISION, BusyError, Names
from harel_sa import migrations as mig
from harel_sa.postgres import startup
from harel_sa.postgres.transport import PostgresTransport

HAREL_SA = Path(sys.executable).with_name("harel-sa")
NAMES = Names()


def upgrade(url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(HAREL_SA), "db", "upgrade", "--url", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def at(url: str, revision: str) -> None:
    mig.upgrade(url, revision=revision)
    with psycopg.connect(url, autocommit=True) as conn:
        for n in range(50):
            conn.execute(f"INSERT INTO {NAMES.groups} (group_id) VALUES (%s)", (f"g{n}",))
            conn.execute(
                f"INSERT INTO {NAMES.messages} (group_id, event) VALUES (%s, '{{}}')", (f"g{n}",)
            )


def idle_reader(url: str) -> psycopg.Connection[Any]:
    """A reporting session left idle in transaction after reading the queue's tables."""
    conn = psycopg.connect(url)
    conn.execute(f"SELECT count(*) FROM {NAMES.groups}").fetchone()
    conn.execute(f"SELECT count(*) FROM {NAMES.messages}").fetchone()
    return conn


def publish_like(conn: psycopg.Connection[Any], n: int) -> float:
    """A publish's writes (the message, its group upserted) and a claim's group update; how
    long they took."""
    began = time.monotonic()
    with conn.transaction():
        conn.execute(f"INSERT INTO {NAMES.messages} (group_id, event) VALUES ('busy', '{{}}')")
        conn.execute(
            f"INSERT INTO {NAMES.groups} (group_id) VALUES ('busy') ON CONFLICT (group_id) "
            f"DO UPDATE SET last_claimed_at = {NAMES.groups}.last_claimed_at"
        )
        conn.execute(f"UPDATE {NAMES.groups} SET last_claimed_at = %s WHERE group_id = 'g1'", (n,))
    return time.monotonic() - began


def test_a_session_idle_in_transaction_holds_the_upgrade_not_the_queue(pg_url: str) -> None:
    """Revision 0005 adds a column (an ACCESS EXCLUSIVE lock for a moment), which the idle
    session's read holds back: the upgrade waits at most a second at a time, so the writes
    queued behind it wait at most that long, and it finishes once the session ends."""
    at(pg_url, "harel_sa_0004")
    reader = idle_reader(pg_url)
    running = upgrade(pg_url)
    longest, ended = 0.0, time.monotonic() + 6.0
    with psycopg.connect(pg_url, autocommit=True) as writer:
        n = 0
        while time.monotonic() < ended:
            longest = max(longest, publish_like(writer, n))
            n += 1
    assert running.poll() is None  # still trying: it cannot add the column yet
    assert mig.current(pg_url) == ("harel_sa_0004",)
    # The bound is the revisions' lock_timeout (1 s); a wait that is not let go (as with the
    # migration's own 60 s) holds every write for the whole 6 s.
    assert longest < 3.0, longest
    assert n > 20
    reader.rollback()
    _out, err = running.communicate(timeout=120)
    assert running.returncode == 0, err
    assert mig.current(pg_url) == (HEAD_REVISION,) and mig.check(pg_url)
    reader.close()


def invalid_indexes(url: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE NOT i.indisvalid"
        ).fetchall()
    return [str(r[0]) for r in rows]


def test_an_upgrade_killed_midway_resumes(pg_url: str) -> None:
    """A snapshot held open makes 0006's concurrent index builds wait and fail, leaving an
    invalid index; the upgrade, SIGKILLed then, resumes on the next run and drops it first."""
    at(pg_url, "harel_sa_0005")
    snapshot = psycopg.connect(pg_url)
    snapshot.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    snapshot.execute("SELECT 1").fetchone()
    running = upgrade(pg_url)
    deadline = time.monotonic() + 60
    while not invalid_indexes(pg_url):
        assert time.monotonic() < deadline and running.poll() is None
        time.sleep(0.05)
    os.kill(running.pid, signal.SIGKILL)
    running.wait()
    # Its server session goes on until its build's wait times out, then ends (the migrations'
    # lock is free again); only then does the snapshot go, so that build stays broken.
    lock = startup.migration_lock(NAMES)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        while not conn.execute("SELECT pg_try_advisory_lock(%s)", (lock,)).fetchone()[0]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        conn.execute("SELECT pg_advisory_unlock(%s)", (lock,))
    snapshot.rollback()
    snapshot.close()
    assert invalid_indexes(pg_url)  # killed midway: a broken build is left
    assert mig.current(pg_url) == ("harel_sa_0005",)
    with psycopg.connect(pg_url) as conn:
        assert not startup.read(conn, NAMES).ok  # the invalid index counts as missing

    again = upgrade(pg_url)
    _out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert mig.current(pg_url) == (HEAD_REVISION,) and mig.check(pg_url)
    assert invalid_indexes(pg_url) == []


def test_start_up_gives_up_with_a_clear_error_and_leaves_no_lock(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transport that upgrades at its start (``create_schema=True``) meets the same idle
    session: it waits a second at a time, then (here after 2 s, not 120) raises BusyError
    naming what to look for; the queue was never held, and a later start finishes."""
    at(pg_url, "harel_sa_0004")
    reader = idle_reader(pg_url)
    monkeypatch.setattr(startup, "GIVE_UP_AFTER", 2.0)
    with pytest.raises(BusyError, match="pg_stat_activity"):
        PostgresTransport(pg_url, create_schema=True)
    with psycopg.connect(pg_url, autocommit=True) as writer:
        assert publish_like(writer, 0) < 3.0  # nothing of the upgrade holds a lock now
        taken = writer.execute(
            "SELECT pg_try_advisory_lock(%s)", (startup.migration_lock(NAMES),)
        ).fetchone()
        assert taken == (True,)  # and the migrations' lock was given back
        writer.execute("SELECT pg_advisory_unlock(%s)", (startup.migration_lock(NAMES),))
    reader.rollback()
    reader.close()
    with PostgresTransport(pg_url, create_schema=True) as q:
        assert q.stats().messages >= 50
    assert mig.current(pg_url) == (HEAD_REVISION,)
