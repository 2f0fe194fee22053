"""``import harel_sa`` and its transports and workers import no more than they use (issue 58):
neither SQLAlchemy's ORM nor its asyncio extension (an application that hands their objects to
the outbox has loaded them itself), nor psycopg, rich or Jinja2."""

from __future__ import annotations

import subprocess
import sys

import pytest

UNUSED = ("sqlalchemy.orm", "sqlalchemy.ext.asyncio", "psycopg", "rich", "jinja2")


@pytest.mark.parametrize(
    "statement",
    [
        "import harel_sa",
        "from harel_sa import SqliteTransport, Event",
        "from harel_sa import Worker, AsyncWorker, Handlers",
        "from harel_sa import AsyncSqliteTransport",
        "import harel_sa.migrations",
    ],
)
def test_an_import_loads_nothing_it_does_not_use(statement: str) -> None:
    probe = f"import sys; {statement}; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = done.stdout.split()
    assert not [m for m in loaded if m.startswith(UNUSED)], statement
