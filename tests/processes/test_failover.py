"""The database fails over under load (issue 59): a real primary and a streaming standby, a
producer and two worker processes (threads and asyncio) on libpq's multi-host URL
(``h1:p1,h2:p2 ... target_session_attrs=read-write``); mid-run the primary crashes
(``pg_ctl stop -m immediate``) and the standby is promoted.

With synchronous replication nothing that returned is lost: every publish that returned is
handled. With asynchronous replication the last moments before the crash may be lost, and
nothing else happens: every publish after the promotion is handled. Either way the workers
never exit, each group's messages are first handled in publish order, the queue drains on the
new primary and a reading command finds it. The producer retries a publish that raised (the
switch); its keyed publish makes a retry of one that did commit a no-op while that one waits.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from harel_sa import Event, HarelSAError, PostgresTransport
from tests import failover
from tests.pg_cluster import Cluster
from tests.processes import failover_bodies
from tests.processes.running import wait_for, worker_processes

MESSAGES, GROUPS = 600, 12
KINDS = [(False, 1), (True, 8)]  # (asyncio, batch)


def handled(logs: list[Path]) -> list[tuple[str, float]]:
    lines = [ln.split() for log in logs if log.exists() for ln in log.read_text().splitlines()]
    return [(kind, float(at)) for kind, at in lines]


def every_one_up(logs: list[Path]) -> bool:
    """Each worker has handled a message: its transport is open (a process still opening one
    when the primary crashes fails to start, as any program would)."""
    return all(log.exists() and log.read_text() for log in logs)


def stats(url: str) -> dict[str, object]:
    """``harel-sa stats --json`` on the multi-host URL: a reading command, on the primary."""
    done = subprocess.run(
        [sys.executable, "-m", "harel_sa", "stats", "--url", url, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def publish(q: PostgresTransport, i: int) -> None:
    """Publish message ``i``, again until it returns (the switch raises meanwhile)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            q.publish(f"g{i % GROUPS}", Event(kind=str(i)), key=f"m{i}")
            return
        except HarelSAError:
            assert time.monotonic() < deadline, "publishes failed for a minute"
            time.sleep(0.05)


@pytest.mark.parametrize("synchronous", [True, False], ids=["synchronous", "asynchronous"])
def test_a_promoted_standby_loses_nothing_that_returned(tmp_path: Path, synchronous: bool) -> None:
    logs = [tmp_path / f"worker{i}.log" for i in range(len(KINDS))]
    with (
        failover.queue_pair(synchronous=synchronous) as (primary, standby, url),
        PostgresTransport(url) as q,
        worker_processes(failover_bodies.work, url, logs, KINDS) as workers,
    ):
        for i in range(MESSAGES // 3):
            publish(q, i)
        wait_for(lambda: len(handled(logs)) >= MESSAGES // 6 and every_one_up(logs), 60)
        assert stats(url)["dead"] == 0
        failover.fail_over(primary, standby)
        promoted = time.time()
        for i in range(MESSAGES // 3, MESSAGES):
            publish(q, i)
        # Synchronous: every publish that returned; asynchronous: those after the crash.
        first = 0 if synchronous else MESSAGES // 3
        owed = {str(i) for i in range(first, MESSAGES)}
        wait_for(lambda: {k for k, _ in handled(logs)} >= owed, 120)
        assert all(w.is_alive() for w in workers), "a worker exited on the failover"
        after = [at for _, at in handled(logs) if at > promoted]
        print(f"first message handled {min(after) - promoted:.2f} s after the promotion")
        wait_for(lambda: q.stats().messages == 0, 30)
        assert stats(url)["messages"] == 0  # on the promoted standby
    for log in logs:  # one line of harel_sa's for the outage, none of psycopg's pool
        said = Path(f"{log}.stderr").read_text()
        assert "psycopg.pool" not in said, said
        assert said.count(" went away (") == 1, said
    firsts: dict[str, list[int]] = defaultdict(list)
    for kind, _ in sorted(handled(logs), key=lambda h: h[1]):
        i = int(kind)
        if i not in firsts[f"g{i % GROUPS}"]:
            firsts[f"g{i % GROUPS}"].append(i)
    for group, order in firsts.items():
        assert order == sorted(order), group


def test_an_idle_worker_hears_the_new_primary_without_its_poll(tmp_path: Path) -> None:
    # An AsyncWorker that polls every 30 s (its wait for a message is one wait, where the
    # threads' Worker listens in slices of 0.1 s): a message published after the promotion
    # starts long before that, since the listening connection is made again on the new
    # primary (and counts as a wake-up) as soon as it takes connections.
    logs = [tmp_path / "worker.log"]
    with (
        failover.queue_pair(synchronous=True) as (primary, standby, url),
        PostgresTransport(url) as q,
        worker_processes(failover_bodies.idle_work, url, logs, [(True, 1)]),
    ):
        publish(q, 0)
        wait_for(lambda: len(handled(logs)) == 1, 20)
        time.sleep(1.0)  # idle, listening
        failover.fail_over(primary, standby)
        promoted = time.monotonic()
        publish(q, 1)
        wait_for(lambda: len(handled(logs)) == 2, 20)
        took = time.monotonic() - promoted
        print(f"handled {took:.2f} s after the promotion")
        assert took < 10.0


def caught_up(standby: Cluster) -> bool:
    """Whether ``standby`` replayed the table its primary made to mark a point."""
    import psycopg

    with psycopg.connect(standby.url, autocommit=True) as conn:
        return conn.execute("SELECT to_regclass('caught_up') IS NOT NULL").fetchone() == (True,)


def test_the_old_primary_comes_back_as_a_standby_and_takes_over_again(tmp_path: Path) -> None:
    # Over and back: the standby takes over; the crashed primary rejoins as its standby (a
    # fresh base backup); then the new primary crashes and the old one is promoted again. The
    # workers and the producer stay on the same multi-host URL throughout.
    logs = [tmp_path / f"worker{i}.log" for i in range(len(KINDS))]
    with (
        failover.queue_pair(synchronous=True) as (first, second, url),
        PostgresTransport(url) as q,
        worker_processes(failover_bodies.work, url, logs, KINDS) as workers,
    ):
        for i in range(100):
            publish(q, i)
        wait_for(lambda: every_one_up(logs), 60)
        failover.fail_over(first, second)
        for i in range(100, 200):
            publish(q, i)
        failover.rejoin(first, second)
        second.execute("CREATE TABLE caught_up AS SELECT 1 AS n")
        wait_for(lambda: caught_up(first), 60)
        failover.fail_over(second, first)
        for i in range(200, 300):
            publish(q, i)
        owed = {str(i) for i in range(300)}
        wait_for(lambda: {k for k, _ in handled(logs)} >= owed, 120)
        assert all(w.is_alive() for w in workers)
        wait_for(lambda: q.stats().messages == 0, 30)
