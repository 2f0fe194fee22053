"""A program that forgets ``close()`` still exits: every transport, sync and async, SQLite and
PostgreSQL, left open at the end of a script (harel's own programs do this). At most a
``ResourceWarning``; never a process that hangs in ``threading._shutdown``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = {
    "SqliteTransport": """
from harel_sa import Event, SqliteTransport
q = SqliteTransport(TARGET)
q.publish("g", Event(kind="x"))
""",
    "AsyncSqliteTransport": """
import asyncio
from harel_sa import AsyncSqliteTransport, Event
async def main():
    q = await AsyncSqliteTransport.create(TARGET)
    await q.publish("g", Event(kind="x"))
    assert await q.claim("w", 30.0) is not None
asyncio.run(main())
""",
    "PostgresTransport": """
from harel_sa import Event, PostgresTransport
q = PostgresTransport(TARGET)
q.publish("g", Event(kind="x"))
q.wait_for_messages(0.01)  # its listening connection too
""",
    "AsyncPostgresTransport": """
import asyncio
from harel_sa import AsyncPostgresTransport, Event
async def main():
    q = await AsyncPostgresTransport.create(TARGET)
    await q.publish("g", Event(kind="x"))
    await q.wait_for_messages(0.01)
asyncio.run(main())
""",
}


@pytest.mark.parametrize("kind", list(SCRIPTS))
def test_a_transport_left_open_does_not_keep_the_program_from_exiting(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = (
        str(request.getfixturevalue("pg_url")) if "Postgres" in kind else str(tmp_path / "q.db")
    )
    script = f"TARGET = {target!r}\n" + SCRIPTS[kind] + "print('done')\n"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
