"""A group's ``max_in_flight`` held across real worker processes (issue 56), on SQLite and
PostgreSQL.

Four processes, each a worker of concurrency 8 (threads and asyncio, batched and not), drain
groups that run 3 at once beside groups that run one at a time. A trigger (another program's,
as far as harel_sa knows) logs every claim inside the claim's own transaction, with how many
of the group's messages are then leased: the claims of each group follow publish order, never
more than 3 (or 1) are leased at once, and 3 at once did happen. Every message is handled once.
"""

from __future__ import annotations

import sqlite3
import time
from collections import Counter, defaultdict
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from harel_sa import Event, PostgresTransport, SqliteTransport
from harel_sa.rules import PARKED
from harel_sa.schema import Names
from tests.processes import flow_bodies
from tests.processes.running import wait_for, worker_processes
from tests.processes.test_flow import KINDS, handled

WIDE, NARROW, EACH = 6, 6, 40  # groups of 3 at once, groups of 1, messages in each
M = Names().messages
LEASED = f"locked_by IS NOT NULL AND locked_by <> '{PARKED}'"

SQLITE_LOG = [
    "CREATE TABLE claim_log (id INTEGER PRIMARY KEY AUTOINCREMENT, seq INTEGER, "
    "group_id TEXT, leased INTEGER)",
    f"CREATE TRIGGER log_claims AFTER UPDATE OF deliveries ON {M} "
    "WHEN NEW.deliveries > OLD.deliveries BEGIN INSERT INTO claim_log (seq, group_id, leased) "
    f"VALUES (NEW.seq, NEW.group_id, (SELECT count(*) FROM {M} "
    f"WHERE group_id = NEW.group_id AND {LEASED})); END",
]
POSTGRES_LOG = [
    "CREATE TABLE claim_log (id BIGSERIAL PRIMARY KEY, seq BIGINT, group_id TEXT, leased BIGINT)",
    "CREATE FUNCTION log_claim() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "INSERT INTO claim_log (seq, group_id, leased) VALUES (NEW.seq, NEW.group_id, "
    f"(SELECT count(*) FROM {M} WHERE group_id = NEW.group_id AND {LEASED})); "
    "RETURN NULL; END $$",
    f"CREATE TRIGGER log_claims AFTER UPDATE OF deliveries ON {M} FOR EACH ROW "
    "WHEN (NEW.deliveries > OLD.deliveries) EXECUTE FUNCTION log_claim()",
]


def run_sql(target: str, statements: list[str]) -> list[tuple[Any, ...]]:
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as pg:
            rows: list[tuple[Any, ...]] = []
            for sql in statements:
                cur = pg.execute(sql)
                rows = cur.fetchall() if cur.description else []
            return rows
    with closing(sqlite3.connect(target)) as conn, conn:
        rows = []
        for sql in statements:
            rows = conn.execute(sql).fetchall()
        return rows


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_max_in_flight_holds_across_worker_processes(
    dialect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if dialect == "sqlite":
        target = str(tmp_path / "queue.db")
        q: Any = SqliteTransport(target, busy_timeout=60)
        run_sql(target, SQLITE_LOG)
    else:
        target = request.getfixturevalue("pg_server").create_database()
        q = PostgresTransport(target)
        run_sql(target, POSTGRES_LOG)
    wide = [(f"w{g}", Event(kind="wide")) for _ in range(EACH) for g in range(WIDE)]
    q.publish_many(wide, max_in_flight=3)
    q.publish_many([(f"n{g}", Event(kind="narrow")) for _ in range(EACH) for g in range(NARROW)])
    total = (WIDE + NARROW) * EACH
    logs = [tmp_path / f"worker{i}.log" for i in range(len(KINDS))]
    try:
        with worker_processes(flow_bodies.work, target, logs, KINDS):
            wait_for(lambda: len(handled(logs)) >= total, timeout=120)
            time.sleep(0.3)
    finally:
        q.close()
    counts = Counter(seq for seq, _ in handled(logs))
    assert len(counts) == total and set(counts.values()) == {1}
    claims: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for _, seq, group_id, leased in run_sql(target, ["SELECT * FROM claim_log ORDER BY id"]):
        claims[group_id].append((seq, leased))
    assert len(claims) == WIDE + NARROW
    for group_id, taken in claims.items():
        seqs = [seq for seq, _ in taken]
        assert seqs == sorted(seqs) and len(seqs) == EACH  # publish order, each claimed once
        most = max(leased for _, leased in taken)
        assert most <= (3 if group_id.startswith("w") else 1), group_id
    # The bound was reached: with one at a time the test would not see 3.
    assert any(leased == 3 for g, taken in claims.items() for _, leased in taken)
