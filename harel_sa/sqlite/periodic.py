"""SQLite's periodic publish: a tick's record and its message in one write transaction.

The record (``<prefix>_transport_periodic``: a schedule's name and its last published tick)
moves forward only when it is older than the tick; the message is written only when it did.
The transaction holds SQLite's write lock throughout, so of the processes publishing one tick
exactly one finds its record older (:meth:`harel_sa.SqliteTransport.publish_tick`).
"""

from __future__ import annotations

import sqlite3
from functools import lru_cache

from harel_sa.schema import Names
from harel_sa.seam import Clock, Row
from harel_sa.sqlite.compiled import Compiled, named
from harel_sa.sqlite.driver import immediate_transaction
from harel_sa.sqlite.statements import Statements


class PeriodicStatements:
    """The statements of the periodic record under one prefix."""

    def __init__(self, names: Names) -> None:
        p = names.periodic
        older = f"{p}.tick_at < :tick"
        # A schedule's first tick writes its record; a later one moves it forward.
        self.advance_or_start: Compiled = named(
            f"INSERT INTO {p} (name, tick_at) VALUES (:name, :tick) "
            f"ON CONFLICT (name) DO UPDATE SET tick_at = excluded.tick_at WHERE {older} "
            "RETURNING 1"
        )
        # A catch-up tick moves a record that exists; a schedule with none has no past.
        self.advance: Compiled = named(
            f"UPDATE {p} SET tick_at = :tick WHERE name = :name AND {older} RETURNING 1"
        )


@lru_cache(maxsize=64)
def periodic_for(names: Names) -> PeriodicStatements:
    return PeriodicStatements(names)


def publish_tick(
    conn: sqlite3.Connection,
    statements: Statements,
    clock: Clock,
    name: str,
    tick: float,
    row: Row,
    catch_up: bool,
) -> bool:
    """Move ``name``'s record to ``tick`` and publish ``row``, in one transaction, when the
    record is older (``catch_up``: and exists); whether it did."""
    st = periodic_for(statements.names)
    with immediate_transaction(conn):
        record = st.advance if catch_up else st.advance_or_start
        if not conn.execute(record, {"name": name, "tick": tick}).fetchall():
            return False
        group_id, event, *group = row
        conn.execute(statements.insert_message, (group_id, event, clock()))
        conn.execute(statements.insert_group, (group_id, *group))
        return True
