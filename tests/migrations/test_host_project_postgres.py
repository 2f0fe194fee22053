"""Integrated mode on PostgreSQL: the host project of docs/alembic.md (``alembic init``, the
documented edits, its model and revision), pointed at a real server by the page's
``host-ini-postgres`` recipe, runs harel_sa's revisions in its own history with real ``alembic``
processes; the transport then works on what Alembic built."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg

from harel_sa import HEAD_REVISION, Names
from tests.migrations.host import apply_diff, assert_check_needs_the_filter, make_host, recipe

DOC_URL = "postgresql+psycopg://app:secret@db.example/app"

#: Run by the host's Python: the transport on the database Alembic built, creating nothing.
TRANSPORT_CHECK = """
import json, sys
from harel_sa import Event, PostgresTransport

url, prefix = sys.argv[1], sys.argv[2]
with PostgresTransport(url, prefix=prefix, create_schema=False) as q:
    q.publish("g", Event(kind="hello"), priority=2, routing_key="edge")
    lease = q.claim("w", 30.0, routing_keys=["edge"])
    assert lease is not None and lease.event.kind == "hello", lease
    assert q.ack(lease)
    assert q.claim("w", 30.0) is None
    print(json.dumps({"messages": q.stats().messages}))
"""


def sql(url: str, statement: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(statement).fetchall()


def test_a_host_project_on_postgresql_upgrades_checks_and_runs_the_transport(
    tmp_path: Path, pg_url: str
) -> None:
    host = make_host(tmp_path / "host")
    ini = host.root / "alembic.ini"
    url = pg_url.replace("postgresql://", "postgresql+psycopg://", 1)
    assert DOC_URL in recipe("host-ini-postgres")
    ini.write_text(apply_diff(ini.read_text(), recipe("host-ini-postgres").replace(DOC_URL, url)))

    log = host.alembic("upgrade", "heads").stderr
    assert log.index("-> harel_sa_0002") < log.index("-> app_0001"), log
    assert sql(pg_url, "SELECT version_num FROM alembic_version ORDER BY 1") == [
        ("app_0001",),
        (HEAD_REVISION,),
    ]
    tables = {name for (name,) in sql(pg_url, "SELECT tablename FROM pg_tables")}
    assert {"items", *Names().tables} <= tables
    assert Names().version_table not in tables  # one history: the host's alembic_version

    assert_check_needs_the_filter(host)
    done = host.python(TRANSPORT_CHECK, pg_url, "harel")
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"messages": 0}

    offline = host.alembic("upgrade", "heads", "--sql").stdout
    assert "CREATE TABLE items (" in offline
    assert "GENERATED" in offline and "BIGINT" in offline  # PostgreSQL's DDL, not SQLite's

    host.alembic("downgrade", "harel_sa@-1")
    assert HEAD_REVISION not in {
        v for (v,) in sql(pg_url, "SELECT version_num FROM alembic_version")
    }
    host.alembic("upgrade", "heads")
    assert host.alembic("check").returncode == 0
