"""Pauses held across real worker processes (issue 56), on SQLite and PostgreSQL.

Four processes, each a worker of concurrency 8 (threads and asyncio, batched and not), drain
a routing key ``mail``, a group ``solo`` and other work. Half-way, the key and the group are
paused: from when ``pause`` returns no message of theirs is claimed (those not yet claimed
stay unclaimed, while other work published then is handled); after ``resume`` every message is
handled exactly once, and ``solo`` in publish order.
"""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from harel_sa import Event, PostgresTransport, SqliteTransport
from harel_sa.schema import Names
from tests.processes import flow_bodies
from tests.processes.running import wait_for, worker_processes

MAIL, SOLO, OTHER = 1200, 60, 200
MESSAGES = Names().messages
KINDS = [(False, 1), (False, 8), (True, 1), (True, 8)]  # (asyncio, batch)


def unclaimed_seqs(target: str) -> set[int]:
    sql = f"SELECT seq FROM {MESSAGES} WHERE deliveries = 0"
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target) as pg:
            return {row[0] for row in pg.execute(sql)}
    with closing(sqlite3.connect(target)) as conn:
        return {row[0] for row in conn.execute(sql)}


def handled(logs: list[Path]) -> list[tuple[int, float]]:
    lines = [ln.split() for log in logs if log.exists() for ln in log.read_text().splitlines()]
    return [(int(seq), float(at)) for seq, at in lines]


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_a_pause_holds_across_worker_processes(
    dialect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if dialect == "sqlite":
        target = str(tmp_path / "queue.db")
        q: Any = SqliteTransport(target, busy_timeout=60)
    else:
        target = request.getfixturevalue("pg_server").create_database()
        q = PostgresTransport(target)
    seqs: dict[str, set[int]] = {"mail": set(), "solo": set(), "other": set()}
    q.publish_many([(f"m{i % 300}", Event(kind="mail")) for i in range(MAIL)], routing_key="mail")
    q.publish_many([("solo", Event(kind="solo")) for _ in range(SOLO)])
    for m in q.peek(limit=MAIL + SOLO):
        seqs["mail" if m.group_id.startswith("m") else "solo"].add(m.seq)

    logs = [tmp_path / f"worker{i}.log" for i in range(len(KINDS))]
    try:
        with worker_processes(flow_bodies.work, target, logs, KINDS):
            wait_for(lambda: len(handled(logs)) >= 100)
            assert q.pause(routing_key="mail") and q.pause(group_id="solo")
            unclaimed = unclaimed_seqs(target) & (seqs["mail"] | seqs["solo"])
            assert len(unclaimed) > 100  # the pause came half-way
            q.publish_many([(f"o{i}", Event(kind="other")) for i in range(OTHER)])
            wait_for(
                lambda: len({s for s, _ in handled(logs)} - seqs["mail"] - seqs["solo"]) >= OTHER
            )
            time.sleep(0.5)
            still = unclaimed_seqs(target)
            assert unclaimed <= still  # nothing of theirs was claimed while paused
            assert not unclaimed & {s for s, _ in handled(logs)}
            assert q.resume(routing_key="mail") and q.resume(group_id="solo")
            wait_for(lambda: len(handled(logs)) >= MAIL + SOLO + OTHER)
            time.sleep(0.3)
    finally:
        q.close()
    done = handled(logs)
    counts = Counter(s for s, _ in done)
    assert len(counts) == MAIL + SOLO + OTHER and set(counts.values()) == {1}
    solo = [s for _, s in sorted((at, s) for s, at in done if s in seqs["solo"])]
    assert solo == sorted(seqs["solo"])
