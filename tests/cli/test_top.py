"""``harel-sa top``: refreshed in place under a real pseudo-terminal, plain lines into a pipe;
the figures are the file's."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harel_sa import Event, SqliteTransport
from tests.cli.conftest import ROOT, Cli

HANG = 60.0


@pytest.fixture
def busy(db: str) -> str:
    """2 ready, 1 leased by billing-1, 1 parked, 1 dead; the oldest message (a's leased head)
    was enqueued 120 s ago, the ready ones just now."""
    with SqliteTransport(db, lambda: time.time() - 120) as early:
        early.publish("a", Event(kind="x"))
    with SqliteTransport(db) as q:
        q.publish("a", Event(kind="y"))
        q.publish("b", Event(kind="z"))
        q.publish("c", Event(kind="p"))
        q.publish("d", Event(kind="dead"))
        assert q.claim("billing-1", 3600.0) is not None  # a's head
        assert q.claim("other", 3600.0) is not None  # b
        q.nack(q.claim("other", 3600.0), 3600.0)  # c, parked
        q.dead_letter(q.claim("other", 3600.0), "gave up")  # d
        [leased_b] = [m for m in q.peek("b")]
        assert leased_b.state == "leased"
    return db


def test_into_a_pipe_it_prints_one_plain_line_per_refresh(cli: Cli, busy: str) -> None:
    done = cli("top", "--db", busy, "--interval", "0.05", "--iterations", "3")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3
    assert "\x1b" not in done.stdout  # no terminal codes in a pipe
    for line in lines:
        assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ready=1 leased=2 parked=1 dead=1 ", line)
        assert "workers=billing-1:1,other:1" in line
        # the old message is a's leased head, not ready: the oldest ready one is seconds old
        assert re.search(r"oldest_ready=\d+\.\ds ", line), line
    assert "in=-" in lines[0] and re.search(r"in=0\.0/s out=0\.0/s", lines[2])


def test_rates_count_what_came_in_and_went_out(cli: Cli, db: str) -> None:
    with SqliteTransport(db, lambda: time.time() - 120) as early:  # enqueued 120 s ago
        early.publish("a", Event(kind="x"))
    top = subprocess.Popen(
        [sys.executable, "-m", "harel_sa", "top", "--db", db, "--interval", "0.3"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert top.stdout is not None
    first = top.stdout.readline()
    assert re.search(r"oldest_ready=2m0\ds", first), first
    with SqliteTransport(db) as q:
        for n in range(10):
            q.publish("b", Event(kind="y", data={"n": n}))
        while (lease := q.claim("w", 30.0)) is not None:
            q.ack(lease)
    line = top.stdout.readline()
    top.terminate()
    top.wait(HANG)
    found = re.search(r"ready=0 .* in=(\d+\.\d)/s out=(\d+\.\d)/s", line)
    assert found is not None, line
    assert float(found[1]) > 0 and float(found[2]) > float(found[1])  # 10 in, 11 out


def read_screen(fd: int, until: bytes, timeout: float = HANG) -> bytes:
    data = b""
    deadline = time.monotonic() + timeout
    while until not in data and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            data += chunk
    return data


def test_under_a_pseudo_terminal_it_redraws_in_place(busy: str, tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    top = subprocess.Popen(
        [sys.executable, "-m", "harel_sa", "top", "--db", busy, "--interval", "0.1"],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100", "LINES": "40"},
        cwd=tmp_path,
    )
    os.close(follower)
    try:
        screen = read_screen(leader, b"billing-1")
        screen += read_screen(leader, b"harel-sa top", timeout=5.0)  # a second frame
    finally:
        top.terminate()
        top.wait(HANG)
        os.close(leader)
    text = screen.decode(errors="replace")
    assert "harel-sa top" in text and "workers holding leases" in text
    assert re.search(r"ready\D+1\b", text) and re.search(r"leased\D+2\b", text)
    assert "billing-1" in text and "other" in text
    assert "ready=" not in text  # not the plain lines
    assert "\x1b[" in text  # cursor control: the frame is redrawn where it was
    assert text.count("harel-sa top") >= 2
