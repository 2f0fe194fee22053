"""A process of the *previous release* during a rolling deploy, run by ``test_live_upgrade``
with an old checkout of harel_sa first on ``PYTHONPATH``: it uses only the API every release
has had (``publish``, ``claim``, ``ack``), and any exception it meets ends it with a traceback
(exit 1): a worker call that failed is what the test looks for (on SQLite, a busy write lock
is tried again, as the ``Worker`` does).

    python rolling_body.py setup    URL DIR GROUPS BACKLOG [exists]  # a backlog, the queue
                                               # made at the release's head unless it exists
    python rolling_body.py worker   URL DIR NAME             # claim and ack until DIR/stop
    python rolling_body.py producer URL DIR GROUPS START     # publish until DIR/stop

A worker writes ``group n time`` (the time its claim returned) to ``DIR/<NAME>.log`` once
each ack returns True; a producer writes how many it published to ``DIR/produced``. ``URL``
is ``sqlite:///PATH`` or a ``postgresql://`` URL.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any


def transport(url: str, *, create: bool) -> Any:
    if url.startswith("sqlite:///"):
        from harel_sa import SqliteTransport

        return SqliteTransport(url.removeprefix("sqlite:///"), create_schema=create)
    from harel_sa.postgres.transport import PostgresTransport

    return PostgresTransport(url, create_schema=create)


def event(n: int) -> Any:
    from harel_sa import Event

    return Event(kind="rolling", data={"n": n})


def setup(url: str, out: Path, groups: int, backlog: int, create: bool) -> None:
    with transport(url, create=create) as q:
        q.publish_many([(f"g{n % groups}", event(n)) for n in range(backlog)])


def ridden_out(call: Any, url: str) -> Any:
    """``call()``; on SQLite a write lock not won within ``busy_timeout`` (the lock is not fair
    between processes, and a producer at full speed can starve a claim) is tried again, as the
    ``Worker`` does. On PostgreSQL nothing is: a ``BusyError`` there is a lock wait or deadlock
    the upgrade caused."""
    from harel_sa import BusyError

    while True:
        try:
            return call()
        except BusyError:
            if not url.startswith("sqlite:///"):
                raise
            time.sleep(0.01)


def worker(url: str, out: Path, name: str) -> None:
    stop, idle = out / "stop", 0
    with transport(url, create=False) as q, (out / f"{name}.log").open("w") as log:
        while idle < 20:
            lease = ridden_out(lambda: q.claim(name, 30.0), url)
            if lease is None:
                idle = idle + 1 if stop.exists() else 0
                time.sleep(0.005)
                continue
            # Taken before the ack: the group's next claim can only follow the ack, so these
            # times order a group's deliveries whatever the scheduler does after the ack.
            claimed_at = time.time()
            if not ridden_out(lambda lease=lease: q.ack(lease), url):
                raise RuntimeError(f"ack of {lease.group_id}#{lease.seq} was fenced")
            log.write(f"{lease.group_id} {lease.event.data['n']} {claimed_at:.6f}\n")
            log.flush()


def producer(url: str, out: Path, groups: int, start: int) -> None:
    n = start
    with transport(url, create=False) as q:
        while not (out / "stop").exists():
            ridden_out(lambda n=n: q.publish(f"g{n % groups}", event(n)), url)
            n += 1
    (out / "produced").write_text(str(n - start))


if __name__ == "__main__":
    role, url, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if role == "setup":
        setup(url, out, int(sys.argv[4]), int(sys.argv[5]), sys.argv[6:] != ["exists"])
    elif role == "worker":
        worker(url, out, sys.argv[4])
    else:
        producer(url, out, int(sys.argv[4]), int(sys.argv[5]))
