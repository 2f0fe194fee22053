"""The benchmarks' PostgreSQL: a throw-away cluster (tests/pg_cluster.py), a fresh database per
measurement, the server's facts for the report, and ``pgbench`` for the commit ceiling."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests import pg_cluster

#: pgbench's script: one-row update of a random account, one commit per transaction.
PGBENCH_SCRIPT = """\\set aid random(1, 100000)
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;
"""
FACTS = (
    "server_version",
    "synchronous_commit",
    "fsync",
    "wal_sync_method",
    "shared_buffers",
    "max_connections",
    "autovacuum",
)


class Server:
    """One cluster for a whole benchmark run (``synchronous_commit=on``: every commit waits
    for its WAL flush, as the default and as production)."""

    def __init__(self, workdir: Path) -> None:
        self.cluster = pg_cluster.start({"synchronous_commit": "on"})
        self.workdir = workdir
        if self.cluster.home is None:
            print(f"  (using the server of {pg_cluster.URL_VARIABLE}: figures are its own)")

    def database(self) -> str:
        """A fresh empty database; its URL."""
        return self.cluster.create_database("bench")

    def drop(self, url: str) -> None:
        self.cluster.drop_database(url)

    def facts(self) -> dict[str, str]:
        with psycopg.connect(self.cluster.url) as conn:
            rows = conn.execute(
                "SELECT name, current_setting(name) FROM unnest(%s::text[]) AS name",
                (list(FACTS),),
            ).fetchall()
        out = {str(k): str(v) for k, v in rows}
        out["where"] = (
            "a throw-away cluster on a Unix socket (tests/pg_cluster.py)"
            if self.cluster.home is not None
            else f"the server of {pg_cluster.URL_VARIABLE}"
        )
        return out

    def stop(self) -> None:
        self.cluster.stop()

    # --- pgbench ---------------------------------------------------------------------------

    def pgbench_database(self) -> str:
        """A database initialised by ``pgbench -i`` (scale 1: 100,000 accounts)."""
        url = self.database()
        self._pgbench(["-i", "-q", "-s", "1", url])
        return url

    def pgbench(self, url: str, clients: int, seconds: float) -> float:
        """Transactions per second of the one-row update with ``clients`` connections
        (prepared statements, no vacuum between runs)."""
        script = self.workdir / "pgbench-one-row-update.sql"
        script.write_text(PGBENCH_SCRIPT)
        out = self._pgbench(
            ["-n", "-M", "prepared", "-f", str(script), "-c", str(clients), "-j", str(clients),
             "-T", str(int(seconds)), url]
        )  # fmt: skip
        found = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out)
        if found is None:
            raise RuntimeError(f"pgbench printed no tps:\n{out}")
        return float(found[1])

    def _pgbench(self, args: list[str]) -> str:
        program = self.cluster.bindir / "pgbench" if self.cluster.bindir is not None else "pgbench"
        done = subprocess.run([str(program), *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"pgbench {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout + done.stderr


def explain(url: str, sql: str, types: tuple[str, ...], args: tuple[Any, ...]) -> str:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of ``sql`` (written with ``$n`` parameters of ``types``)
    as a prepared statement, after enough executions for the plan cache to settle on a
    generic or a custom plan (it compares after five), each in a transaction rolled back: the
    plan the hot path really runs, and nothing changed. A generic plan shows ``$n``.

    On a connection of its own, with BEGIN/ROLLBACK sent as plain statements: psycopg answers
    its own ``rollback()`` (and a ``transaction()`` block rolled back) with ``DEALLOCATE ALL``,
    which would drop the statement under test, and every other prepared statement too."""
    with psycopg.connect(url, autocommit=True) as conn:
        cur = psycopg.ClientCursor(conn)  # EXECUTE takes no bound parameters: inline them
        cur.execute(f"PREPARE explained ({', '.join(types)}) AS {sql}")
        call = f"EXECUTE explained ({', '.join(['%s'] * len(args))})"
        for _ in range(7):
            cur.execute("BEGIN")
            cur.execute(call, args, prepare=False)
            cur.execute("ROLLBACK")
        cur.execute("BEGIN")
        cur.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {call}", args, prepare=False)
        rows = cur.fetchall()
        cur.execute("ROLLBACK")
    return "\n".join(r[0] for r in rows)
