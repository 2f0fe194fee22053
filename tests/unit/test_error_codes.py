"""Errors typed by SQLite's real (extended) result code (issue 12, point 8).

On a real 4 MiB tmpfs: a healthy file opened on a full disk is ``StorageFullError``
(``SQLITE_IOERR_SHMSIZE``: the -shm file cannot grow), never "not a database", and the file is
left as it was; a publish on the full disk is ``StorageFullError`` (``SQLITE_FULL``) and writes
nothing. A rollback-journal lock held by another process at open is ``BusyError``. A file moved
away under a rollback-journal connection (``SQLITE_READONLY_DBMOVED``) is
``DatabaseReplacedError``. Both twins. The tmpfs needs root (CI runs as root); where mounting is
impossible the two disk tests are skipped, saying why.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harel_sa import (
    BusyError,
    DatabaseReplacedError,
    DiskIOError,
    Event,
    NotADatabaseError,
    SqliteTransport,
    StorageFullError,
)
from harel_sa.sqlite.driver import translate
from tests.unit.test_storage_errors import Twins, drain, snapshot

HANG = 60.0  # a guard against hangs, never a timing assertion


@pytest.fixture(params=["sync", "async"])
def twins(request: pytest.FixtureRequest) -> Iterator[Twins]:
    t = Twins(request.param)
    yield t
    t.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 4 MiB tmpfs, unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(disk: Path) -> Path:
    """Fill ``disk`` to the last byte with a file of its own; returns it."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for chunk in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError:
                continue
    finally:
        os.close(fd)
    assert os.statvfs(disk).f_bavail == 0
    return filler


def test_a_healthy_file_on_a_full_disk_is_storage_full_not_not_a_database(
    twins: Twins, small_disk: Path
) -> None:
    db = str(small_disk / "q.db")
    with SqliteTransport(db) as q:
        for i in range(3):
            q.publish("g", Event(kind=f"m{i}"))
    assert sorted(os.listdir(small_disk)) == ["q.db"]  # closed cleanly: no -wal, no -shm
    before = Path(db).read_bytes()
    filler = fill(small_disk)
    with pytest.raises(StorageFullError) as caught:
        twins.open(db)
    assert not isinstance(caught.value, NotADatabaseError)
    message = str(caught.value)
    assert "SQLITE_IOERR_SHMSIZE" in message and db in message
    assert Path(db).read_bytes() == before
    filler.unlink()  # room made: the same file opens, every message there
    assert drain(twins.open(db)) == {"g": ["m0", "m1", "m2"]}


def test_a_publish_on_a_full_disk_is_storage_full_and_writes_nothing(
    twins: Twins, small_disk: Path
) -> None:
    db = str(small_disk / "q.db")
    q = twins.open(db)
    q.publish("g", Event(kind="m0"))
    before = snapshot(db)
    filler = fill(small_disk)
    with pytest.raises(StorageFullError) as caught:
        big = Event(kind="big", data={"pad": "x" * 300_000})
        q.publish_many([("g", big), ("h", Event(kind="h"))])
    assert "SQLITE_FULL" in str(caught.value)
    assert not twins.in_transaction(q)
    filler.unlink()
    assert snapshot(db) == before
    q.publish("g", Event(kind="m1"))
    assert drain(q) == {"g": ["m0", "m1"]}


HOLD = """
import sqlite3, sys
raw = sqlite3.connect(sys.argv[1], isolation_level=None)
raw.execute("PRAGMA journal_mode = DELETE")
raw.execute("BEGIN EXCLUSIVE")  # a rollback-journal writer mid-commit: readers must wait
print("held", flush=True)
sys.stdin.readline()
raw.execute("ROLLBACK")
"""


def test_a_rollback_journal_lock_at_open_is_busy_not_not_a_database(twins: Twins, db: str) -> None:
    with SqliteTransport(db) as q:
        q.publish("g", Event(kind="m0"))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, db], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(BusyError) as caught:
            twins.open(db, busy_timeout=0.2)
        assert not isinstance(caught.value, NotADatabaseError)
        assert "database is locked" in str(caught.value) and db in str(caught.value)
    finally:
        holder.communicate("\n", timeout=HANG)
    assert drain(twins.open(db)) == {"g": ["m0"]}


def driver_error(make: Any) -> sqlite3.DatabaseError:
    try:
        make()
    except sqlite3.DatabaseError as exc:
        return exc
    pytest.fail("SQLite did not refuse")


def test_a_file_moved_under_a_rollback_journal_connection_is_database_replaced(
    tmp_path: Path,
) -> None:
    path = tmp_path / "q.db"
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("CREATE TABLE t (x)")
    path.rename(tmp_path / "elsewhere.db")
    exc = driver_error(lambda: raw.execute("INSERT INTO t VALUES (1)"))
    raw.close()
    assert exc.sqlite_errorname == "SQLITE_READONLY_DBMOVED"
    assert isinstance(translate(exc), DatabaseReplacedError)


def test_every_primary_code_keeps_its_type_and_its_extended_name(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all " * 100)
    notadb = driver_error(lambda: sqlite3.connect(garbage).execute("SELECT * FROM sqlite_master"))
    assert type(translate(notadb)) is NotADatabaseError
    # An I/O error SQLite raises only on a failing disk: its table entry, by the primary code.
    ioerr = sqlite3.OperationalError("disk I/O error")
    ioerr.sqlite_errorcode = 778  # SQLITE_IOERR_WRITE
    ioerr.sqlite_errorname = "SQLITE_IOERR_WRITE"
    typed = translate(ioerr)
    assert type(typed) is DiskIOError and "SQLITE_IOERR_WRITE" in str(typed)
    # The extended code is looked up first: an I/O error whose extended code has an entry of
    # its own (the -shm file cannot grow: a full disk) takes that entry, not its primary's.
    shmsize = sqlite3.OperationalError("disk I/O error")
    shmsize.sqlite_errorcode = 4874  # SQLITE_IOERR_SHMSIZE
    shmsize.sqlite_errorname = "SQLITE_IOERR_SHMSIZE"
    typed = translate(shmsize)
    assert type(typed) is StorageFullError and "SQLITE_IOERR_SHMSIZE" in str(typed)
