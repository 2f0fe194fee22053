"""Process bodies for the mixed-transport test: harel's own transport and harel_sa's, each in a
process of its own, producing into and draining one file at once."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any

LIVE_LEASES_PER_GROUP = (
    "SELECT group_id FROM harel_transport_messages WHERE locked_by IS NOT NULL "
    "AND locked_by != '__parked__' AND lock_expiry >= ? GROUP BY group_id HAVING count(*) > 1"
)


def open_transport(kind: str, path: str) -> Any:
    if kind == "harel":
        from harel.engine.transport import SqliteTransport as HarelTransport

        return HarelTransport(path)
    from harel_sa import SqliteTransport

    return SqliteTransport(path, busy_timeout=60)


@dataclass(frozen=True)
class Job:
    kind: str  # "harel" or "harel_sa"
    path: str
    name: str
    groups: int = 0
    count: int = 0


#: How long a process waits at the start for the others to be ready.
START_TIMEOUT = 120.0


def produce(job: Job, out: Any, start: Any) -> None:
    """Publish ``count`` events over ``groups`` groups; report each id once publish returned.
    Begins once every process of the test has its transport open (``start``, a barrier)."""
    from harel.spec.states import Event

    transport = open_transport(job.kind, job.path)
    start.wait(START_TIMEOUT)
    published = []
    for i in range(job.count):
        event = Event(kind="job", id=f"{job.name}.{i}")
        transport.publish(f"g{i % job.groups}", event)
        published.append((f"g{i % job.groups}", event.id))
    transport.close()
    out.put((job.name, published))


def consume(job: Job, producers_done: Any, out: Any, start: Any) -> None:
    """Claim and ack until the producers are done and the queue is empty. After every claim,
    check in SQL that no group holds two live leases. Begins once every process of the test
    has its transport open (``start``), so a consumer slow to import does not find the queue
    already drained by the other."""
    transport = open_transport(job.kind, job.path)
    watch = sqlite3.connect(job.path, timeout=60)
    start.wait(START_TIMEOUT)
    delivered = []
    doubled = []
    while True:
        lease = transport.claim(job.name, 60.0)
        if lease is None:
            left = watch.execute("SELECT count(*) FROM harel_transport_messages").fetchone()[0]
            if producers_done.is_set() and left == 0:
                break
            time.sleep(0.001)
            continue
        claimed_at = time.monotonic_ns()
        doubled += [r[0] for r in watch.execute(LIVE_LEASES_PER_GROUP, (time.time(),))]
        time.sleep(0.0005)  # a little work, so SQLite's lock is shared between the processes
        transport.ack(lease)
        delivered.append((lease.group_id, lease.seq, lease.event.id, claimed_at))
    transport.close()
    watch.close()
    out.put((job.name, delivered, doubled))
