"""The database file deleted or replaced under a running transport (issue 12, point 2).

A transport notices, after every operation, that its path no longer names the file it
opened and raises ``DatabaseReplacedError`` on that call and every later one, instead of
acknowledging writes into a file nobody will read. It then empties its log, whose ``-wal`` and
``-shm`` files keep the path's name: a backup restored over a running queue reads back as the
backup, not as the queue it replaced. Producers run in real processes; ``rm`` and
``os.replace`` are the operator's real moves.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from harel_sa import AsyncSqliteTransport, DatabaseReplacedError, Event, SqliteTransport, schema_for
from tests.forkserver import context

M = schema_for().names.messages
PAUSE = 0.005  # between a producer's publishes
HANG = 60.0  # a guard against hangs, never a timing assertion


def sidecars(db: str) -> list[str]:
    return [f"{db}{suffix}" for suffix in ("", "-wal", "-shm")]


def wait_for(path: Path, lines: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + HANG
    while True:
        found = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        if len(found) >= lines:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {lines} lines in {path}: {found[-3:]}")
        time.sleep(0.01)


def produce(kind: str, db: str, log: str, stay: str) -> None:
    """Publish with pauses, logging each publish that returned; after the first refusal try
    three more calls, log them, then (if ``stay`` names a file) stay open until it exists."""

    def write(**record: Any) -> None:
        with open(log, "a") as f:
            f.write(json.dumps(record) + "\n")

    async def run() -> None:
        q: Any = await AsyncSqliteTransport.create(db) if kind == "async" else SqliteTransport(db)

        async def call(name: str, *args: Any) -> None:
            result = getattr(q, name)(*args)
            if asyncio.iscoroutine(result):
                await result

        try:
            for i in range(100_000):
                try:
                    await call("publish", "g", Event(kind=f"m{i}"))
                except DatabaseReplacedError as exc:
                    write(refused=f"m{i}", error=str(exc))
                    break
                write(published=f"m{i}")
                await asyncio.sleep(PAUSE)
            for name, args in (("publish", ("g", Event(kind="late"))), ("claim", ("w", 30.0))):
                try:
                    await call(name, *args)
                    write(after=name, outcome="returned")
                except DatabaseReplacedError:
                    write(after=name, outcome="DatabaseReplacedError")
            try:
                await call("stats")
                write(after="stats", outcome="returned")
            except DatabaseReplacedError:
                write(after="stats", outcome="DatabaseReplacedError")
            while stay and not os.path.exists(stay):
                await asyncio.sleep(0.01)
        finally:
            await call("close")
        write(closed=True)

    asyncio.run(run())


def start(kind: str, db: str, log: Path, stay: str = "") -> Any:
    proc = context().Process(target=produce, args=(kind, db, str(log), stay))
    proc.start()
    return proc


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_deleted_file_makes_a_running_producer_raise_instead_of_acknowledging(
    tmp_path: Path, kind: str
) -> None:
    db, log = str(tmp_path / "q.db"), tmp_path / "producer.log"
    proc = start(kind, db, log)
    wait_for(log, 20)
    for path in sidecars(db):  # the operator's `rm q.db*`
        os.remove(path)
    acknowledged_before_rm = len(wait_for(log, 0))
    lines = wait_for(log, acknowledged_before_rm + 5)
    proc.join(HANG)
    assert proc.exitcode == 0
    lines = wait_for(log, 0)
    published = [x for x in lines if "published" in x]
    refusal = next(x for x in lines if "refused" in x)
    # At most the one publish racing the `rm` returned after it; then refused, and every
    # later call too, reads included.
    assert len(published) <= acknowledged_before_rm + 1
    assert "was deleted or renamed" in refusal["error"] and db in refusal["error"]
    assert [x["outcome"] for x in lines if "after" in x] == ["DatabaseReplacedError"] * 3
    assert lines[-1] == {"closed": True}
    assert not any(os.path.exists(p) for p in sidecars(db))  # nothing recreated by a write


def backup(db: str, to: str) -> None:
    """A consistent copy of the queue, taken with SQLite's backup API as an operator would."""
    src, dst = sqlite3.connect(db), sqlite3.connect(to)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def kinds(db: str) -> list[str]:
    with SqliteTransport(db) as q:
        return [json.loads(m.event)["kind"] for m in q.peek(limit=100_000)]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_backup_restored_over_a_running_queue_reads_back_as_the_backup(
    tmp_path: Path, kind: str
) -> None:
    """The old transport is still open when a new one opens the restored file: the new one
    sees the backup's messages, not the old queue's log laid over them."""
    db, log = str(tmp_path / "q.db"), tmp_path / "producer.log"
    stay = str(tmp_path / "may-close")
    proc = start(kind, db, log, stay)
    wait_for(log, 10)
    copy = str(tmp_path / "backup.db")
    backup(db, copy)
    in_backup = kinds(copy)
    assert len(in_backup) >= 10
    lines = wait_for(log, len(wait_for(log, 0)) + 10)  # the queue moves on past the backup
    os.replace(copy, db)  # the operator restores it while the producer runs
    deadline = time.monotonic() + HANG
    while not any("refused" in x for x in wait_for(log, 0)):
        assert time.monotonic() < deadline, "the producer never noticed"
        time.sleep(0.01)
    try:
        lines = wait_for(log, 0)
        assert len([x for x in lines if "published" in x]) > len(in_backup)
        assert "was replaced by another file" in next(x for x in lines if "refused" in x)["error"]
        # The old transport is still open: a new one sees exactly the backup.
        assert kinds(db) == in_backup
    finally:
        Path(stay).touch()
        proc.join(HANG)
    assert proc.exitcode == 0
    assert kinds(db) == in_backup  # and still after the old one closed


@pytest.mark.parametrize("where", ["disk", "tmpfs"])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_in_one_process_every_call_after_a_delete_raises(
    tmp_path: Path, kind: str, where: str
) -> None:
    """The delete and the calls back to back, on a disk and on tmpfs (whose fsync is fast):
    not one call after the delete returns as if it had written into the queue."""
    folder = tmp_path if where == "disk" else Path(tempfile.mkdtemp(dir="/dev/shm"))
    db = str(folder / "q.db")
    runner = asyncio.Runner()

    def call(result: Any) -> Any:
        return runner.run(result) if asyncio.iscoroutine(result) else result

    q: Any = runner.run(AsyncSqliteTransport.create(db)) if kind == "async" else SqliteTransport(db)
    try:
        call(q.publish("g", Event(kind="m1")))
        lease = call(q.claim("w", 30.0))
        for path in sidecars(db):
            os.remove(path)
        for make in (
            lambda: q.publish("g", Event(kind="m2")),
            lambda: q.ack(lease),
            lambda: q.claim("w", 30.0),
            lambda: q.publish_many([("h", Event(kind="m3"))]),
            q.stats,
            q.peek,
        ):
            with pytest.raises(DatabaseReplacedError):
                call(make())
    finally:
        call(q.close())
        runner.close()
    assert not any(os.path.exists(p) for p in sidecars(db))
