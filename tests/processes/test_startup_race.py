"""Transports starting while another process creates or upgrades the file (issue 12, point 9).

``PRAGMA journal_mode = WAL`` fails at once, without SQLite's busy handler, while another
connection holds a rollback-journal lock, as ``harel-sa db upgrade`` does while it creates a
file. Start-up now retries that switch within ``busy_timeout``: transports started together
with the upgrade wait for it and then work; past ``busy_timeout`` they get ``BusyError``
naming the file. Real processes: a holder, the openers, and the real command.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harel_sa import AsyncSqliteTransport, Event, HarelSAError, SqliteTransport
from tests.forkserver import context

HANG = 120.0  # a guard against hangs, never a timing assertion

# What `harel-sa db upgrade` does to a new file: rollback-journal mode, a write transaction
# with DDL in it, held while the revisions run.
HOLD = """
import sqlite3, sys
raw = sqlite3.connect(sys.argv[1], isolation_level=None)
raw.execute("BEGIN IMMEDIATE")
raw.execute("CREATE TABLE scratch (x)")
print("held", flush=True)
sys.stdin.readline()
raw.execute("COMMIT")
"""


def open_and_publish(kind: str, db: str, busy_timeout: float, log: str, name: str) -> None:
    def write(**record: Any) -> None:
        with open(log, "a") as f:
            f.write(json.dumps({"name": name, **record}) + "\n")

    async def run() -> None:
        write(state="opening")
        try:
            if kind == "async":
                t = await AsyncSqliteTransport.create(db, busy_timeout=busy_timeout)
                await t.publish("g", Event(kind=name))
                await t.close()
            else:
                with SqliteTransport(db, busy_timeout=busy_timeout) as q:
                    q.publish("g", Event(kind=name))
        except HarelSAError as exc:
            write(state="failed", error=f"{type(exc).__name__}: {exc}")
            return
        write(state="published")

    asyncio.run(run())


def lines(log: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def wait_until(log: Path, state: str, count: int) -> None:
    deadline = time.monotonic() + HANG
    while len([x for x in lines(log) if x["state"] == state]) < count:
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {count} {state!r}: {lines(log)}")
        time.sleep(0.01)


def start_openers(kinds: list[str], db: str, busy_timeout: float, log: Path) -> list[Any]:
    ctx = context()
    procs = [
        ctx.Process(target=open_and_publish, args=(k, db, busy_timeout, str(log), f"{k}{i}"))
        for i, k in enumerate(kinds)
    ]
    for p in procs:
        p.start()
    return procs


def hold(db: str) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, db], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def test_transports_opening_while_a_new_file_is_being_created_wait_for_it(
    tmp_path: Path,
) -> None:
    db, log = str(tmp_path / "q.db"), tmp_path / "openers.log"
    holder = hold(db)
    try:
        openers = start_openers(["sync", "async", "sync"], db, 60.0, log)
        wait_until(log, "opening", 3)
        time.sleep(0.5)  # let them reach the lock (they must wait however long this takes)
        assert not [x for x in lines(log) if x["state"] != "opening"]
    finally:
        holder.communicate("\n", timeout=HANG)
    for p in openers:
        p.join(HANG)
    assert sorted(x["state"] for x in lines(log)) == ["opening"] * 3 + ["published"] * 3
    with SqliteTransport(db) as q:
        assert q.stats().messages == 3
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_past_busy_timeout_start_up_is_busy_error_naming_the_file(
    tmp_path: Path, kind: str
) -> None:
    db, log = str(tmp_path / "q.db"), tmp_path / "openers.log"
    holder = hold(db)
    try:
        (opener,) = start_openers([kind], db, 0.3, log)
        opener.join(HANG)
    finally:
        holder.communicate("\n", timeout=HANG)
    failed = [x for x in lines(log) if x["state"] == "failed"]
    assert len(failed) == 1, lines(log)
    assert failed[0]["error"].startswith(f"BusyError: cannot open sqlite:///{db}: ")
    assert "SQLITE_BUSY" in failed[0]["error"]


def test_workers_started_together_with_harel_sa_db_upgrade_all_work(tmp_path: Path) -> None:
    command = shutil.which("harel-sa", path=os.path.dirname(sys.executable))
    assert command is not None
    db, log = str(tmp_path / "q.db"), tmp_path / "openers.log"
    upgrade = subprocess.Popen(
        [command, "db", "upgrade", "--db", db], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    openers = start_openers(["sync", "async", "sync", "async"], db, 60.0, log)
    _, err = upgrade.communicate(timeout=HANG)
    for p in openers:
        p.join(HANG)
    assert upgrade.returncode == 0, err
    assert sorted(x["state"] for x in lines(log)) == ["opening"] * 4 + ["published"] * 4
    check = subprocess.run([command, "db", "check", "--db", db], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    with SqliteTransport(db, create_schema=False) as q:
        assert q.stats().messages == 4
