"""Server faults with producers and workers running, on a PostgreSQL cluster of this module's own.

Producer and worker processes loop over the transport's public API (tests/postgres/
fault_bodies.py) while the test terminates every backend of the database
(``pg_terminate_backend``), restarts the server (``pg_ctl restart -m fast``) and SIGKILLs
workers (restarting them), as tests/processes/test_crash.py does on SQLite; the producers
publish until the faults are over, and the backends are terminated again until some fault
has reached a call. Then the workers drain the queue on the pools they kept.

Checked: every call returned or raised a typed error (``ConnectionLostError``/``BusyError``:
no process died of anything else); the pools reconnected (the same workers drained the
queue after the faults); nothing lost (every publish that returned was handled, and nothing
was handled that was never published); nothing stranded; every re-delivery reported (a
message's deliveries never repeat, so a second handling says ``deliveries >= 2``); FIFO per
group (first handlings in publish order). Leases last ``VIS`` seconds of real time: the one
place real time is needed, for a killed worker's lease to lapse.
"""

from __future__ import annotations

import os
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import psycopg
import pytest

from harel_sa import BusyError, ConnectionLostError, PostgresTransport
from tests import forkserver, pg_cluster
from tests.checks import stranded
from tests.contract.raw import PgRaw
from tests.flag import Flag
from tests.pg_fixtures import _unavailable
from tests.postgres import fault_bodies

VIS = 1.5
PRODUCERS = 2
GROUPS_PER_PRODUCER = 4
PER_GROUP = 60
WORKERS = 3
#: The faults, in order, one every FAULT_GAP seconds while the producers run.
FAULTS = ["terminate", "kill", "terminate", "restart", "kill", "terminate", "kill", "terminate"]
FAULT_GAP = 0.4
#: More terminations, while none of the faults has reached a call yet: a pool replaces a
#: connection the server ended while it sat idle without failing a call, so only a fault
#: that lands during a call shows as an error (on a loaded machine, none of the eight may).
MORE_TERMINATIONS = 20
DEADLINE = 180.0  # seconds: a bound for the drain on a loaded machine, not a timing


@pytest.fixture(scope="module")
def own_server() -> Iterator[pg_cluster.Cluster]:
    """A throw-away cluster for this module alone (even when ``HAREL_SA_PG_URL`` names a
    shared server): restarting it disturbs no other test."""
    environ = {k: v for k, v in os.environ.items() if k != pg_cluster.URL_VARIABLE}
    with mock.patch.dict(os.environ, environ, clear=True):
        try:
            cluster = pg_cluster.start()
        except (pg_cluster.Unavailable, pg_cluster.StartError) as exc:
            _unavailable(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()


class Fleet:
    def __init__(self, url: str, logs: Path) -> None:
        self.ctx = forkserver.context()
        self.url, self.logs = url, logs
        self.stop = Flag(self.ctx)  # not an Event: workers are SIGKILLed (tests/flag.py)
        self.workers: dict[int, Any] = {}
        self.incarnation = 0
        self.killed: list[Any] = []

    def start_worker(self, slot: int) -> None:
        self.incarnation += 1
        name = f"w{slot}.{self.incarnation}"
        log = str(self.logs / f"{name}.log")
        p = self.ctx.Process(target=fault_bodies.worker, args=(self.url, log, name, VIS, self.stop))
        p.start()
        self.workers[slot] = p

    def kill_worker(self, slot: int) -> None:
        p = self.workers[slot]
        os.kill(p.pid, signal.SIGKILL)
        p.join(30)
        self.killed.append(p)
        self.start_worker(slot)


def terminate_backends(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


def queued(url: str) -> int | None:
    """Messages left, or None while the server cannot say."""
    try:
        with PostgresTransport(url, create_schema=False, pool_size=1) as q:
            return q.stats().messages
    except (ConnectionLostError, BusyError):
        return None


def read_logs(logs: Path) -> dict[str, list[list[str]]]:
    return {p.name: [ln.split() for ln in p.read_text().splitlines()] for p in logs.iterdir()}


def typed_errors(lines: dict[str, list[list[str]]]) -> int:
    """Calls that raised a typed error: the faults that reached a call."""
    return sum(1 for got in lines.values() for ln in got if ln and ln[0] in ("error", "unsure"))


def flowing(logs: Path) -> bool:
    """Whether some message has been published and some handled already."""
    kinds = {ln[0] for got in read_logs(logs).values() for ln in got if ln}
    return {"sent", "got"} <= kinds


def test_terminated_backends_a_restart_and_sigkills_lose_nothing(
    own_server: pg_cluster.Cluster, tmp_path: Path
) -> None:
    url = own_server.create_database()
    PostgresTransport(url).close()  # the schema
    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(url, logs)
    faulted = Flag(fleet.ctx)
    producers = [
        fleet.ctx.Process(
            target=fault_bodies.producer,
            args=(
                url,
                str(logs / f"p{i}.log"),
                [f"p{i}g{j}" for j in range(GROUPS_PER_PRODUCER)],
                PER_GROUP,
                faulted,
            ),
        )
        for i in range(PRODUCERS)
    ]
    for slot in range(WORKERS):
        fleet.start_worker(slot)
    for p in producers:
        p.start()
    try:
        # Faults begin once messages flow, so on a slow machine they do not all land before
        # any process has a connection to lose.
        deadline = time.monotonic() + DEADLINE
        while not flowing(logs):
            assert time.monotonic() < deadline, "no message was published and handled"
            time.sleep(0.05)
        for i, fault in enumerate(FAULTS):
            time.sleep(FAULT_GAP)
            if fault == "terminate":
                terminate_backends(url)
            elif fault == "kill":
                fleet.kill_worker(i % WORKERS)
            else:
                own_server.restart()
        for _ in range(MORE_TERMINATIONS):
            if typed_errors(read_logs(logs)):
                break
            time.sleep(FAULT_GAP)
            terminate_backends(url)
        faulted.set()
        for p in producers:
            p.join(DEADLINE)
        assert [p.exitcode for p in producers] == [0] * PRODUCERS
        # The workers that saw the faults drain what is left (a killed one's lease lapses).
        deadline = time.monotonic() + DEADLINE
        while queued(url) != 0:
            assert time.monotonic() < deadline, "the workers did not drain the queue"
            time.sleep(0.2)
    finally:
        faulted.set()
        fleet.stop.set()
        for p in fleet.workers.values():
            p.join(60)
        for p in [*producers, *fleet.workers.values()]:
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in fleet.workers.values()] == [0] * WORKERS

    lines = read_logs(logs)
    crashes = [(name, ln) for name, got in lines.items() for ln in got if ln[0] == "crash"]
    assert crashes == []
    sent = {(ln[1], int(ln[2])) for got in lines.values() for ln in got if ln[0] == "sent"}
    unsure = {(ln[1], int(ln[2])) for got in lines.values() for ln in got if ln[0] == "unsure"}
    handlings: dict[tuple[str, int], list[int]] = defaultdict(list)
    first: dict[tuple[str, int], float] = {}
    for got in lines.values():
        for ln in got:
            if ln[0] == "got":
                key = (ln[1], int(ln[2]))
                handlings[key].append(int(ln[3]))
                first[key] = min(first.get(key, float("inf")), float(ln[4]))
    assert sent, "no publish went through"
    assert sent <= set(handlings), "a message whose publish returned was never handled"
    assert set(handlings) <= sent | unsure, "a message nobody published was handled"
    for key, deliveries in handlings.items():
        assert len(deliveries) == len(set(deliveries)), (key, deliveries)  # re-deliveries told
    assert typed_errors(lines) > 0, "no fault reached a call: the test tested nothing"

    # FIFO per group: a group's next message is claimable only once the one before is acked,
    # so first handlings (stamped by one host clock) follow publish order.
    for group in {g for g, _ in first}:
        ns = [n for (g, n), _ in sorted(first.items(), key=lambda item: item[1]) if g == group]
        assert ns == sorted(ns), (group, ns)

    raw = PgRaw(url)
    try:
        assert not any(stranded(raw).values()), stranded(raw)  # type: ignore[arg-type]
        assert raw.execute("SELECT count(*) FROM harel_transport_messages").fetchone() == (0,)
    finally:
        raw.close()
    own_server.drop_database(url)
