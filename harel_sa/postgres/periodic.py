"""PostgreSQL's periodic publish: a tick's record and its message in one transaction.

The record (``<prefix>_transport_periodic``: a schedule's name and its last published tick)
moves forward with ``INSERT ... ON CONFLICT DO UPDATE ... WHERE tick_at < :tick RETURNING``
(or an ``UPDATE`` with the same guard, for a catch-up tick): a second transaction on the same
tick waits on the first's row, then finds the guard false and returns nothing, so only one
writes the message (:meth:`harel_sa.PostgresTransport.publish_tick`). The tick is the schedule's own
time, not the server's clock; the message's ``enqueued_at`` is "now" as any publish's.
"""

from __future__ import annotations

from functools import lru_cache, partial

from harel_sa.postgres.compiled import Statement, positional
from harel_sa.postgres.kinds import BEGIN_WRITE, ClockOrServer, Op
from harel_sa.postgres.operations import publish_one
from harel_sa.postgres.statements import Statements
from harel_sa.schema import Names
from harel_sa.seam import Program, Query, Row
from harel_sa.validate import no_nul


class PeriodicStatements:
    """The statements of the periodic record under one prefix."""

    def __init__(self, names: Names) -> None:
        p = names.periodic
        older = f"{p}.tick_at < :tick ::float8"
        self.advance_or_start = positional(
            f"INSERT INTO {p} (name, tick_at) VALUES (:name ::text, :tick ::float8) "
            f"ON CONFLICT (name) DO UPDATE SET tick_at = EXCLUDED.tick_at WHERE {older} "
            "RETURNING 1"
        )
        self.advance = positional(
            f"UPDATE {p} SET tick_at = :tick ::float8 WHERE name = :name ::text AND {older} "
            "RETURNING 1"
        )


@lru_cache(maxsize=64)
def periodic_for(names: Names) -> PeriodicStatements:
    return PeriodicStatements(names)


def _tick(
    statements: Statements,
    clock: ClockOrServer,
    name: str,
    tick: float,
    row: Row,
    catch_up: bool,
) -> Program[Statement, bool]:
    st = periodic_for(statements.names)
    record = st.advance if catch_up else st.advance_or_start
    if not (yield Query(record, {"name": name, "tick": tick})).rows:
        return False
    yield publish_one(statements, clock, row).query
    return True


def publish_tick(
    statements: Statements, clock: ClockOrServer, name: str, tick: float, row: Row, catch_up: bool
) -> Op[bool]:
    """The tick's program, one write transaction."""
    no_nul("name", name)
    no_nul("group_id", row[0])
    return Op(partial(_tick, statements, clock, name, tick, row, catch_up), BEGIN_WRITE)
