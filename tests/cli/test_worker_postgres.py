"""``harel-sa worker MODULE:CALLABLE --url postgresql://…`` and ``harel-sa demo --url postgresql://…``:
database of the throw-away server, with a plain and an async handler."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harel_sa import Event, PostgresTransport
from tests.cli.conftest import ROOT, Cli, as_json
from tests.pgbouncer import Bouncer

HANG = 120.0  # guards against a hang, never a timing assertion
APP = """
import asyncio

def handle(lease):
    print("handled", lease.group_id, lease.event.kind, flush=True)

async def handle_async(lease):
    await asyncio.sleep(0)
    print("async handled", lease.group_id, lease.event.kind, flush=True)
"""


@pytest.mark.parametrize(
    ("handler", "says"), [("handle", "handled"), ("handle_async", "async handled")]
)
def test_the_worker_command_drains_a_postgres_queue(
    tmp_path: Path, pg_url: str, handler: str, says: str
) -> None:
    (tmp_path / "app.py").write_text(APP)
    with PostgresTransport(pg_url) as q:
        q.publish_many([(f"g{n % 3}", Event(kind=f"k{n}")) for n in range(9)])
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harel_sa",
            "worker",
            f"app:{handler}",
            "--url",
            pg_url,
            "--until-empty",  # one slot: with two, a claim that meets the other's ack
            # (its row lock skipped) finds nothing and ends its slot early
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=HANG,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    got = [line.split() for line in done.stdout.splitlines() if line.startswith(says)]
    kinds = [words[-1] for words in got]
    assert sorted(kinds) == sorted(f"k{n}" for n in range(9))
    for g in range(3):  # FIFO per group
        assert [w[-1] for w in got if w[-2] == f"g{g}"] == [f"k{n}" for n in range(g, 9, 3)]
    with PostgresTransport(pg_url, create_schema=False) as q:
        assert q.stats().messages == 0


@pytest.mark.parametrize(
    ("handler", "pooler", "found"),
    [
        ("handle", ["--pooler", "session"], False),
        ("handle_async", {"HAREL_SA_POOLER": "session"}, False),
        ("handle", [], True),  # auto: the pooler is found, and the worker polls
    ],
)
def test_the_worker_command_through_a_session_pooler(
    tmp_path: Path,
    pg_url: str,
    session_pooler: Bouncer,
    handler: str,
    pooler: list[str] | dict[str, str],
    found: bool,
) -> None:
    (tmp_path / "app.py").write_text(APP)
    with PostgresTransport(pg_url) as q:
        q.publish_many([(f"g{n % 3}", Event(kind=f"k{n}")) for n in range(9)])
    url = session_pooler.url(pg_url)
    done = subprocess.run(
        [sys.executable, "-m", "harel_sa", "worker", f"app:{handler}", "--url", url]
        + (pooler if isinstance(pooler, list) else [])
        + ["--until-empty"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=HANG,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            **(pooler if isinstance(pooler, dict) else {}),
        },
    )
    assert done.returncode == 0, done.stderr
    kinds = [line.split()[-1] for line in done.stdout.splitlines() if "handled" in line]
    assert sorted(kinds) == sorted(f"k{n}" for n in range(9))
    assert ("a connection pooler is between" in done.stderr) is found, done.stderr


def test_a_postgres_database_not_at_head_exits_3(tmp_path: Path, pg_url: str) -> None:
    (tmp_path / "app.py").write_text(APP)
    done = subprocess.run(
        [sys.executable, "-m", "harel_sa", "worker", "app:handle", "--url", pg_url],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=HANG,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 3, done.stderr
    assert "harel-sa db upgrade --url" in done.stderr


def test_the_demo_runs_and_verifies_itself_on_a_postgres_database(cli: Cli, pg_url: str) -> None:
    small = ["--messages", "400", "--groups", "20", "--workers", "3", "--producers", "2"]
    done = cli("demo", "--url", pg_url, *small, "--concurrency", "2", "--json")
    assert done.returncode == 0, done.stderr
    report = as_json(done)
    assert report["ok"] is True and report["problems"] == []
    assert report["config"]["synchronous"] is None  # SQLite's setting: none on PostgreSQL
    assert sorted(report["shares"]) == ["worker-1", "worker-2", "worker-3"]
    assert sum(report["shares"].values()) == 400  # each delivered once, all delivered
    with PostgresTransport(pg_url, create_schema=False) as q:
        assert q.stats().messages == 0
        q.publish("left", Event(kind="over"))
    refused = cli("demo", "--url", pg_url, *small)  # a queue that still holds messages
    assert refused.returncode == 2 and "--fresh" in done.stderr + refused.stderr
    again = cli("demo", "--url", pg_url, *small, "--fresh", "--no-progress")
    assert again.returncode == 0, again.stderr
    assert "verified: every message delivered once, in order within its group" in again.stdout
    assert "synchronous" not in again.stdout


def test_the_demo_refuses_an_applications_database(cli: Cli, pg_url: str) -> None:
    """Its workers would take the demo's messages, and --fresh would empty their queue."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int)")
    small = ["--messages", "40", "--groups", "4", "--workers", "1", "--no-progress"]
    refused = cli("demo", "--url", pg_url, *small)
    assert refused.returncode == 2 and ": orders." in refused.stderr and "--yes" in refused.stderr
    with psycopg.connect(pg_url, autocommit=True) as conn:  # nothing written
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'harel%'")
        assert tables.fetchone() == (0,)
    assert cli("demo", "--url", pg_url, *small, "--yes").returncode == 0
