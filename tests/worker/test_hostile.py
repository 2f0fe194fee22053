"""Real worker processes in a hostile world (issue 12): rows another program wrote do not stop
them (point 5), and a handler's ``KeyboardInterrupt`` or ``SystemExit`` ends the process with
it, once the lease is given back (point 11). Both worker kinds."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from harel_sa import Event, SqliteTransport, schema_for
from tests.worker.conftest import HANG

SCRIPT = Path(__file__).with_name("proc_hostile.py")
ROOT = Path(__file__).resolve().parents[2]
NAMES = schema_for().names
M, G = NAMES.messages, NAMES.groups

# Another program, in a process of its own, plants what the issue found stopping every
# consumer: an event and a group id that are not UTF-8, a count and an expiry that are text.
PLANT = f"""
import sqlite3, sys
raw = sqlite3.connect(sys.argv[1], isolation_level=None)
raw.execute("BEGIN IMMEDIATE")
for group, event, deliveries, locked_by, expiry in [
    (b"g0", b'{{"kind": "caf\\xe9"}}', 0, None, None),
    (b"caf\\xe9", b'{{"kind": "fine"}}', 0, None, None),
    (b"g1", b'{{"kind": "counted", "data": {{}}}}', "lots", None, None),
    (b"g2", b'{{"kind": "stuck", "data": {{}}}}', 1, "gone#1", "never"),
]:
    raw.execute(
        "INSERT INTO {M} (group_id, event, deliveries, locked_by, lock_expiry) "
        "VALUES (CAST(? AS TEXT), CAST(? AS TEXT), ?, ?, ?)",
        (group, event, deliveries, locked_by, expiry),
    )
    raw.execute("INSERT OR IGNORE INTO {G} (group_id) VALUES (CAST(? AS TEXT))", (group,))
raw.execute("COMMIT")
"""


def run_worker(kind: str, db: str, raise_: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), kind, db, raise_],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=HANG,
    )


def handled(out: str) -> list[str]:
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("handled ")]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_worker_drains_every_good_message_past_rows_another_program_wrote(
    kind: str, db: str
) -> None:
    with SqliteTransport(db) as q:
        for i in range(20):
            q.publish(f"g{i % 3}", Event(kind=f"good{i}"))
    subprocess.run([sys.executable, "-c", PLANT, db], check=True, timeout=HANG)
    done = run_worker(kind, db, "none")
    assert done.returncode == 0, done.stderr
    got = handled(done.stdout)
    assert sorted(got) == sorted([f"good{i}" for i in range(20)] + ["counted", "stuck"])
    with SqliteTransport(db) as q:
        assert q.stats().messages == 0
        assert sorted(d.error.split(":")[0] for d in q.dead()) == [
            "undecodable event",
            "undecodable group_id",
        ]


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("raise_", ["SystemExit", "KeyboardInterrupt"])
def test_a_handler_raising_systemexit_or_keyboardinterrupt_ends_the_process_with_it(
    kind: str, raise_: str, db: str
) -> None:
    with SqliteTransport(db) as q:
        q.publish("g", Event(kind="boom"))
        q.publish("g", Event(kind="after"))
    done = run_worker(kind, db, raise_)
    if raise_ == "SystemExit":
        assert done.returncode == 7, done.stderr
    else:  # Python re-raises an uncaught KeyboardInterrupt as death by SIGINT
        assert done.returncode in (-signal.SIGINT, 130), done.stderr
        assert "KeyboardInterrupt" in done.stderr
    assert not [line for line in done.stdout.splitlines() if line.startswith("{")]  # no stats
    with sqlite3.connect(db) as raw:
        rows = raw.execute(
            f"SELECT event, locked_by, lock_expiry, deliveries FROM {M} ORDER BY seq"
        ).fetchall()
    # The lease was given back (nack(0)): ready at once, counted once; nothing else touched.
    assert [(json.loads(e)["kind"], lb, le, d) for e, lb, le, d in rows] == [
        ("boom", None, None, 1),
        ("after", None, None, 0),
    ]
