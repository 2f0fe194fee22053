"""Several real worker processes draining one file (issue 2): every message delivered exactly
once, FIFO per group, never two live leases in one group. One producer process publishes while
they drain, and one of the four workers runs the async twin."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

from harel_sa import Event, SqliteTransport
from tests import forkserver
from tests.processes import bodies
from tests.processes.bodies import ProducerConfig, WorkerConfig

WORKERS = 4  # three sync, one async
BACKLOG_GROUPS = 20
BACKLOG = 600


def test_worker_processes_drain_one_file_exactly_once_in_order(tmp_path: Path) -> None:
    path = str(tmp_path / "queue.db")
    logs = tmp_path / "logs"
    logs.mkdir()
    ctx = forkserver.context()

    expected: dict[str, list[str]] = {}
    with SqliteTransport(path) as t:  # a backlog, published before the workers start
        for i in range(BACKLOG):
            group = f"b{i % BACKLOG_GROUPS}"
            event = Event(kind="job", id=f"backlog.{i}")
            t.publish(group, event)
            expected.setdefault(group, []).append(event.id)

    done = ctx.Event()
    producer = ctx.Process(  # type: ignore[attr-defined]
        target=bodies.producer_main,
        args=(
            ProducerConfig(
                path,
                str(logs),
                slot=0,
                incarnation=0,
                groups=tuple(f"p{k}" for k in range(8)),
                count=150,
                seed=1,
            ),
        ),
        name="producer",
    )
    workers = [
        ctx.Process(  # type: ignore[attr-defined]
            target=bodies.worker_main,
            args=(
                WorkerConfig(
                    path,
                    str(logs),
                    slot=i + 1,
                    incarnation=0,
                    visibility=60.0,  # no lease lapses here: every delivery is the only one
                    kind="async" if i == WORKERS - 1 else "sync",
                    producers_done=done,
                    seed=i,
                ),
            ),
            name=f"worker-{i}",
        )
        for i in range(WORKERS)
    ]
    for p in [producer, *workers]:
        p.start()
    bodies.join_all([producer], timeout=90)
    done.set()
    bodies.join_all(workers, timeout=90)

    assert bodies.errors(logs) == []
    assert [p.exitcode for p in [producer, *workers]] == [0] * (WORKERS + 1)
    for group, ids in bodies.published(logs).items():
        expected.setdefault(group, []).extend(ids)
    handled = bodies.handlings(logs)
    acks = bodies.acks(logs)

    # Exactly once: every message handled once, every ack took.
    counts = Counter(h.id for h in handled)
    assert set(counts) == {i for ids in expected.values() for i in ids}
    assert [i for i, n in counts.items() if n != 1] == []
    assert len(acks) == len(handled) and all(a["ok"] for a in acks)

    # Never two live leases in one group: seen from inside each worker right after its claim,
    # and as handling intervals (monotonic clock, system-wide) that never overlap in a group.
    assert all(h.live for h in handled)
    assert [h for h in handled if h.check != "ok"] == []
    assert bodies.overlaps(handled) == []
    # A redelivered message is done again before its successor in the group begins.
    assert bodies.successors_too_early(handled) == []

    # FIFO per group: handlings in time order follow publish order (and seq order).
    order = bodies.first_handlings(handled)
    assert {g: [h.id for h in hs] for g, hs in order.items()} == expected
    for hs in order.values():
        assert [h.seq for h in hs] == sorted(h.seq for h in hs)

    with sqlite3.connect(path) as raw:
        for table in ("messages", "groups", "dead"):
            assert raw.execute(f"SELECT count(*) FROM harel_transport_{table}").fetchone() == (0,)
    per_worker = Counter(h.worker for h in handled)
    print(f"handled per worker: {dict(per_worker)}")
