"""``harel-sa worker MODULE:CALLABLE --url postgresql://…``: the same command on a PostgreSQL
database of the throw-away server, with a plain and an async handler."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harel_sa import Event, PostgresTransport
from tests.cli.conftest import ROOT

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
            "--until-empty",
            "--concurrency",
            "2",
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
