"""A queue worth looking at (hostile values included), on SQLite or PostgreSQL, and the
``harel-sa web`` server run as a real process against it."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harel_sa import Event, PostgresTransport, SqliteTransport

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "a-test-token-of-32-characters-ok"
#: Values other people write, that the page must show as text and never run.
HOSTILE_GROUP = "<script>window.pwned=1</script>"
HOSTILE_PARKED = '"><img src=x onerror="window.pwned=2">'
HOSTILE_ERROR = '<script>window.pwned=3</script> refund & "void" failed'
HOSTILE_DATA = "</pre><script>window.pwned=4</script>"
BACKENDS = ["sqlite", "postgresql"]


@dataclass
class Queue:
    """Where a queue is (``args`` for the command) and how to open it from the test."""

    backend: str
    args: list[str]
    where: str
    dead_seq: int = 0

    def open(self, clock: Any = None) -> Any:
        if self.backend == "sqlite":
            return SqliteTransport(self.where, clock or time.time)
        return PostgresTransport(self.where, clock)


def fill(q: Any, earlier: Any | None = None) -> int:
    """Groups ready, leased and parked; two dead letters, one hostile. The hostile one's seq.
    ``earlier``, a transport on the same queue whose clock is 63 minutes behind, publishes
    orders-1042 (else ``q`` does)."""
    for n in range(3):
        (earlier or q).publish("orders-1042", Event(kind="order.placed", data={"n": n}))
    q.publish("invoices-7", Event(kind="invoice.sent", data={"total": 99}))
    q.publish(HOSTILE_PARKED, Event(kind="x", data={"why": HOSTILE_DATA}))
    q.publish(HOSTILE_GROUP, Event(kind="refund.requested", data={"note": HOSTILE_DATA}))
    q.publish("payments-3", Event(kind="payment.captured", data={"eur": 12}))
    dead_seq = 0
    for _ in range(5):
        lease = q.claim("billing-1", 300.0)
        assert lease is not None
        if lease.group_id == HOSTILE_PARKED:
            assert q.nack(lease, 600.0)
        elif lease.group_id == HOSTILE_GROUP:
            assert q.dead_letter(lease, HOSTILE_ERROR)
            dead_seq = lease.seq
        elif lease.group_id == "payments-3":
            assert q.dead_letter(lease, "ValueError: card declined")
    # orders-1042's head and invoices-7 stay leased (by billing-1); a second worker holds none.
    return dead_seq


@pytest.fixture(params=BACKENDS)
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Queue:
    if request.param == "sqlite":
        found = Queue("sqlite", ["--db", "queue.db"], str(tmp_path / "queue.db"))
    else:
        url = str(request.getfixturevalue("pg_url"))
        found = Queue("postgresql", ["--url", url], url)
    with found.open() as q, found.open(lambda: time.time() - 63 * 60) as earlier:
        found.dead_seq = fill(q, earlier)
    return found


@dataclass
class Server:
    url: str
    process: subprocess.Popen[str]
    said: str  # the line it printed, with its address


def start(args: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT) -> Server:
    """``harel-sa web ARGS --port 0`` as a process; its URL as it printed it."""
    process = subprocess.Popen(
        [sys.executable, "-m", "harel_sa", "web", *args, "--port", "0", "--refresh", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.5)
        if ready:
            line = process.stdout.readline()
            if " on http://" in line:
                return Server(line.split(" on ", 1)[1].split()[0], process, line)
        if process.poll() is not None:
            break
    process.kill()
    raise AssertionError(f"harel-sa web did not start: {process.communicate()}")


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    """``serve(args, env)``: ``harel-sa web`` run in ``tmp_path``, ended after the test."""
    started: list[Server] = []

    def run(args: list[str], env: dict[str, str] | None = None) -> Server:
        server = start(args, env, tmp_path)
        started.append(server)
        return server

    yield run
    for server in started:
        server.process.terminate()
        try:
            server.process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.communicate()
