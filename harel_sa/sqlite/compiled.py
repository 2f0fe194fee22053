"""SQL for the sqlite3 driver, compiled by SQLAlchemy: each statement a Core ``text()``
construct compiled once by the sqlite dialect (:class:`Compiled`), bound by name
(:func:`named`) or by number (:func:`positional`). Table names come from
:class:`~harel_sa.schema.Names`."""

from __future__ import annotations

import re

from sqlalchemy import TextClause, text
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite

#: The sqlite dialect, binding by name (from a dict) and by number (from a tuple). The admin
#: statements keep their names (:func:`named`); those of publish, claim, ack, nack and extend are
#: numbered (:func:`positional`) and bound from a tuple: for a dict the driver builds and hashes a
#: string per parameter per call, a cost the hot path's calls do not pay.
_BY_NAME = SQLiteDialect_pysqlite(paramstyle="named")
_BY_NUMBER = SQLiteDialect_pysqlite(paramstyle="numeric")


class Compiled(str):
    """SQLAlchemy's compilation of the Core ``text()`` construct ``clause`` for the sqlite3
    driver: the statement as the driver is handed it. It keeps the construct for the outbox to
    run on an application's connection. Table names come from :class:`~harel_sa.schema.Names`."""

    clause: TextClause


def named(sql: str) -> Compiled:
    """``sql`` as a ``text()`` construct compiled for binding from a dict (``:name``)."""
    clause = text(sql)
    found = Compiled(clause.compile(dialect=_BY_NAME))
    found.clause = clause
    return found


def positional(sql: str, *order: str) -> Compiled:
    """``sql`` as a ``text()`` construct compiled for binding from a tuple: each ``:name`` as
    ``?N``, ``N`` its place in ``order`` (from 1). A name ``order`` leaves out raises
    ``ValueError`` (a statement mistyped here, found when it is built, never at a call)."""
    clause = text(sql)
    compiled = clause.compile(dialect=_BY_NUMBER)
    names = list(compiled.positiontup or ())
    left = sorted(set(names) - set(order))
    if left:
        raise ValueError(f"{left} not in {order} for: {sql}")
    numbered = re.sub(
        r":(\d+)\b", lambda m: f"?{order.index(names[int(m[1]) - 1]) + 1}", str(compiled)
    )
    found = Compiled(numbered)
    found.clause = clause
    return found
