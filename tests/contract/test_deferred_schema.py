"""``create_schema=False`` on a database without the queue's tables, as harel's own transports
behave (and harel's ``test_without_create_schema_nothing_is_created`` holds them): the
transport is built and writes nothing; every call raises the same clear ``SchemaError`` until
a migration brings the schema to head, and then the very same transport works. On every kind.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from harel_sa import Event, SchemaError
from tests.contract.conftest import OpenQueue, tables, write


def test_a_transport_built_before_its_schema_says_so_at_each_call_then_works(
    open_queue: OpenQueue, tmp_path: Path
) -> None:
    db = tmp_path / "app.db"
    sqlite3.connect(db).close()  # an empty file (on PostgreSQL: an empty database)
    q = open_queue(db, create_schema=False)
    write(db, "CREATE TABLE items (id INTEGER)")  # the application's own table, nothing else
    calls = (q.stats, lambda: q.publish("g", Event(kind="x")), lambda: q.claim("w", 30.0))
    for call in (*calls, *calls):
        with pytest.raises(SchemaError, match="no harel_sa queue under prefix 'harel'"):
            call()
    assert [t.lower() for t in tables(db)] == ["items"]  # nothing created, nothing recorded
    open_queue(db).close()  # a migration (here another transport's start-up) makes it
    q.publish("g", Event(kind="x"))
    lease = q.claim("w", 30.0)
    assert lease is not None and q.ack(lease)
