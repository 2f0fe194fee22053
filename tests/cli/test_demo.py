"""``harel-sa demo``: small runs pass their own verification, and the verification itself
catches what it must (lost, duplicated and reordered deliveries)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from harel_sa import Event, Names, SqliteTransport
from harel_sa.demo import verify
from tests.cli.conftest import ROOT, Cli, as_json, one_line_error

SMALL = ["--messages", "400", "--groups", "20", "--workers", "2", "--producers", "2"]


def test_a_small_demo_passes_its_own_verification(cli: Cli, tmp_path: Path) -> None:
    db = str(tmp_path / "demo.db")
    done = cli("demo", "--db", db, *SMALL, "--concurrency", "2", "--json")
    assert done.returncode == 0, done.stderr
    report = as_json(done)
    assert report["ok"] is True and report["problems"] == []
    assert report["messages"] == 400 and report["throughput"] > 0
    assert sorted(report["shares"]) == ["worker-1", "worker-2"]
    assert sum(report["shares"].values()) == 400  # each delivered once, all delivered
    with SqliteTransport(db, create_schema=False) as q:
        assert q.stats().messages == 0


def test_the_default_file_is_reused_once_empty_and_the_text_shows_the_figures(
    cli: Cli, tmp_path: Path
) -> None:
    for _ in range(2):  # the first run leaves harel-demo.db empty; the second reuses it
        done = cli("demo", *SMALL, "--workers", "3", "--no-progress")
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "harel-demo.db").exists()
    out = done.stdout
    assert "throughput" in out and "msg/s" in out
    assert "share" in out and all(f"worker-{i}" in out for i in (1, 2, 3))
    assert "verified: every message delivered once, in order within its group" in out
    assert done.stderr == ""  # no progress bar off a terminal


def test_a_file_that_still_holds_messages_needs_fresh(cli: Cli, tmp_path: Path) -> None:
    db = str(tmp_path / "busy.db")
    with SqliteTransport(db) as q:
        q.publish("left-over", Event(kind="x"))
    refused = cli("demo", "--db", db, *SMALL)
    assert refused.returncode == 2 and "--fresh" in one_line_error(refused)
    with SqliteTransport(db) as q:
        assert q.stats().messages == 1  # untouched
    forced = cli("demo", "--db", db, *SMALL, "--fresh", "--progress")
    assert forced.returncode == 0, forced.stderr
    assert "delivered [" in forced.stderr  # the forced progress bar, on stderr
    with SqliteTransport(db) as q:
        assert q.stats().messages == 0


def test_a_file_that_still_holds_scheduled_messages_needs_fresh(cli: Cli, tmp_path: Path) -> None:
    db = str(tmp_path / "later.db")
    with SqliteTransport(db) as q:
        q.publish("left-over", Event(kind="x"), delay=3600)
        q.publish("g1", Event(kind="y"), key="K", delay=3600)  # a group the demo publishes to
    refused = cli("demo", "--db", db, *SMALL)
    assert refused.returncode == 2 and "1 scheduled" not in one_line_error(refused)
    assert "2 scheduled" in one_line_error(refused)
    forced = cli("demo", "--db", db, *SMALL, "--fresh", "--json")
    assert forced.returncode == 0, forced.stderr
    assert as_json(forced)["ok"] is True
    with SqliteTransport(db) as q:
        stats = q.stats()
        assert (stats.messages, stats.scheduled) == (0, 0)


def test_verify_accepts_exactly_once_in_order() -> None:
    deliveries = [(0, 0, 10), (1, 0, 11), (0, 1, 12), (1, 1, 13), (0, 2, 14)]
    assert verify([3, 2], deliveries) == []


def test_verify_reports_missing_duplicated_and_reordered_deliveries() -> None:
    missing = verify([2], [(0, 0, 1)])
    assert missing == ["1 message(s) never delivered"]
    duplicated = verify([2], [(0, 0, 1), (0, 1, 2), (0, 1, 3)])
    assert duplicated == ["1 message(s) delivered more than once"]
    reordered = verify([2, 1], [(0, 1, 1), (0, 0, 2), (1, 0, 3)])
    assert reordered == ["1 group(s) delivered out of order, e.g. [0]"]
    stranger = verify([1], [(0, 0, 1), (5, 0, 2)])
    assert stranger == ["group 5: 1 deliveries of an unknown group"]


def test_a_demo_that_cannot_finish_exits_1(cli: Cli, tmp_path: Path) -> None:
    db = str(tmp_path / "slow.db")
    slow = ["--messages", "5000", "--groups", "20", "--work-ms", "1", "--timeout", "0.01"]
    done = cli("demo", "--db", db, *slow)
    assert done.returncode == 1
    assert "FAILED: timed out" in done.stdout


def test_ctrl_c_stops_the_whole_demo_quietly(tmp_path: Path) -> None:
    """A Ctrl-C reaches every process of the terminal's process group: the children ignore
    it (the parent stops them), the parent says ``interrupted`` and exits 130, and no
    process of the demo (nor its forkserver) is left behind."""
    db = tmp_path / "big.db"
    demo = subprocess.Popen(
        [sys.executable, "-m", "harel_sa", "demo", "--db", str(db), "--messages", "100000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,  # its own process group, as a terminal's job
        # As from a terminal: SIGINT not ignored, even when this run inherited it ignored (a
        # shell's background job, as CI runs the suites side by side).
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 60
        while not _claiming(db):  # the children run: publishing and claiming
            assert demo.poll() is None and time.monotonic() < deadline, demo.communicate()
            time.sleep(0.05)
        os.killpg(demo.pid, signal.SIGINT)
        _, err = demo.communicate(timeout=60)
        assert demo.returncode == 130, err
        assert err.strip() == "harel-sa: interrupted", err  # no child's traceback
        assert _group_alive(demo.pid, within=30) is False
    finally:
        if _group_alive(demo.pid, within=0):
            os.killpg(demo.pid, signal.SIGKILL)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _claiming(db: Path) -> bool:
    """Whether a worker of the demo holds a lease (its tables exist and are in use)."""
    if not db.exists():
        return False
    with sqlite3.connect(db, timeout=5) as conn:
        try:
            (leased,) = conn.execute(
                f"SELECT count(*) FROM {Names('harel').messages} WHERE locked_by IS NOT NULL"
            ).fetchone()
        except sqlite3.OperationalError:  # not created yet
            return False
    return bool(leased)


def _group_alive(pgid: int, within: float) -> bool:
    """Whether a process of group ``pgid`` is still running after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.05)
