"""SQLite's statements and programs for scheduled and keyed messages, one prefix.

A scheduled message waits in the scheduled table until a claim finds it due (:func:`promote`):
then, in the claim's transaction, every due message goes to its group's tail in due order. A
keyed publish looks for the waiting message with its key (queued and free, or scheduled) under
its transaction's write lock, so two publishes of one key never both write. The programs yield
``named`` statements: the transports run them (:func:`run_program`), the outbox on the app's
connection.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from harel_sa.schema import Names
from harel_sa.seam import Due, Program, Query, Result, Row
from harel_sa.sqlite.compiled import Compiled, named
from harel_sa.sqlite.flow import born

#: ``message_key`` as the statements compare it (a waiting keyed message is free: not leased,
#: not parked, whatever its lease's expiry).
_WAITING = "locked_by IS NULL"


class SchedulingStatements:
    """The statements of scheduled and keyed messages under one prefix (built by the
    prefix's :class:`~harel_sa.sqlite.statements.Statements`, which gives its statement that
    drops a group once empty)."""

    def __init__(self, names: Names, drop_group_if_empty: Compiled) -> None:
        m, g, s = names.messages, names.groups, names.scheduled
        self.schedule = named(
            f"INSERT INTO {s} (group_id, event, due_at, priority, routing_key, max_in_flight, "
            "message_key) VALUES (:group_id, :event, :due_at, :priority, :routing_key, "
            ":max_in_flight, :key)"
        )
        self.insert_keyed = named(
            f"INSERT INTO {m} (group_id, event, enqueued_at, message_key) "
            "VALUES (:group_id, :event, :now, :key)"
        )
        self.insert_group = named(
            f"INSERT OR IGNORE INTO {g} "
            "(group_id, priority, routing_key, max_in_flight, last_claimed_at) "
            "VALUES (:group_id, :priority, :routing_key, :max_in_flight, "
            f"{born(names, ':group_id', ':routing_key')})"
        )
        # A keep publish: its look and its write in one statement (under the write lock).
        none_waiting = (
            f"WHERE NOT EXISTS (SELECT 1 FROM {m} WHERE message_key = :key AND {_WAITING}) "
            f"AND NOT EXISTS (SELECT 1 FROM {s} WHERE message_key = :key)"
        )
        self.insert_keyed_unless_waiting = named(
            f"INSERT INTO {m} (group_id, event, enqueued_at, message_key) "
            f"SELECT :group_id, :event, :now, :key {none_waiting}"
        )
        self.schedule_unless_waiting = named(
            f"INSERT INTO {s} (group_id, event, due_at, priority, routing_key, max_in_flight, "
            "message_key) SELECT :group_id, :event, :due_at, :priority, :routing_key, "
            f":max_in_flight, :key {none_waiting}"
        )
        self.find_waiting = named(
            f"SELECT 'm', seq FROM {m} WHERE message_key = :key AND {_WAITING} "
            f"UNION ALL SELECT 's', seq FROM {s} WHERE message_key = :key LIMIT 1"
        )
        self.replace_queued = named(
            f"UPDATE {m} SET event = :event WHERE seq = :seq AND {_WAITING}"
        )
        self.replace_scheduled = named(
            f"UPDATE {s} SET event = :event, due_at = :due_at WHERE seq = :seq"
        )
        self.cancel_queued = named(
            f"DELETE FROM {m} WHERE message_key = :key AND {_WAITING} RETURNING group_id"
        )
        self.cancel_scheduled = named(f"DELETE FROM {s} WHERE message_key = :key")
        self.drop_group_if_empty = drop_group_if_empty
        # A claim's promotion: one probe of the due index when nothing is due.
        self.due = named(f"SELECT 1 FROM {s} WHERE due_at <= :now LIMIT 1")
        due_order = f"FROM {s} WHERE due_at <= :now ORDER BY due_at, seq"
        self.promote_groups = named(
            f"INSERT OR IGNORE INTO {g} "
            "(group_id, priority, routing_key, max_in_flight, last_claimed_at) "
            "SELECT group_id, priority, routing_key, max_in_flight, "
            f"{born(names, f'{s}.group_id', f'{s}.routing_key')} {due_order}"
        )
        self.promote_messages = named(
            f"INSERT INTO {m} (group_id, event, enqueued_at, message_key) "
            f"SELECT group_id, event, :now, message_key {due_order}"
        )
        self.promote_delete = named(f"DELETE FROM {s} WHERE due_at <= :now")
        # How many wait, and when the first is due (a number, whatever another program wrote).
        self.scheduled_count = named(
            "SELECT count(*), min(CASE WHEN typeof(due_at) IN ('integer', 'real') "
            f"THEN due_at END) FROM {s}"
        )
        self.purge = named(f"DELETE FROM {s} WHERE group_id = :group_id")
        self.peek = named(
            f"SELECT seq, CAST(group_id AS BLOB), CAST(event AS BLOB), due_at, "
            f"CAST(message_key AS BLOB) FROM {s} "
            "WHERE :group_id IS NULL OR group_id = :group_id ORDER BY due_at, seq LIMIT :limit"
        )


def probe(names: Names) -> str:
    """The select-list item a claim's select carries: 1 when a scheduled message is due at
    ``:now``, else NULL (one step of the due index)."""
    return f"(SELECT 1 FROM {names.scheduled} AS due WHERE due.due_at <= :now LIMIT 1)"


def due_at(due: Due, now: float) -> float:
    """The epoch instant ``due`` names (``(at, delay)``: ``at``, else ``now + delay``)."""
    at, delay = due
    return at if at is not None else now + delay


def schedule(st: SchedulingStatements, now: float, rows: list[Row], due: Due) -> Program[Any, None]:
    """Put ``rows`` in the scheduled table, due at ``due``."""
    when = due_at(due, now)
    for group_id, event, priority, routing_key, max_in_flight in rows:
        params = {
            "group_id": group_id,
            "event": event,
            "due_at": when,
            "priority": priority,
            "routing_key": routing_key,
            "max_in_flight": max_in_flight,
            "key": None,
        }
        yield Query(st.schedule, params)


def _group(row: Row) -> dict[str, object]:
    """The group row's columns ``row`` gives (a keyed publish's parameters)."""
    group_id, _, priority, routing_key, max_in_flight = row
    return {
        "group_id": group_id,
        "priority": priority,
        "routing_key": routing_key,
        "max_in_flight": max_in_flight,
    }


def publish_keyed(
    st: SchedulingStatements, now: float, row: Row, due: Due | None, key: str, replace: bool
) -> Program[Any, bool]:
    """Publish ``row`` with ``key``: ``True`` when a message was written; ``False`` when a
    waiting one has the key (then, with ``replace``, it took the event, and the due time:
    a scheduled one is due at ``due`` or now; a queued one keeps its place)."""
    group_id, event, *_ = row
    group = _group(row)
    # keep: one statement looks and writes; the group row only when it wrote (the outbox's
    # path: the transport runs the same two statements as :func:`keep`, without a program)
    if not replace:
        if due is not None:
            params = {**group, "event": event, "due_at": due_at(due, now), "key": key}
            return (yield Query(st.schedule_unless_waiting, params)).rowcount == 1
        params = {"group_id": group_id, "event": event, "now": now, "key": key}
        if (yield Query(st.insert_keyed_unless_waiting, params)).rowcount != 1:
            return False
        yield Query(st.insert_group, group)
        return True
    found = (yield Query(st.find_waiting, {"key": key})).rows
    if found:
        where, seq = found[0]
        if where == "m":
            yield Query(st.replace_queued, {"seq": seq, "event": event})
        else:
            when = now if due is None else due_at(due, now)
            yield Query(st.replace_scheduled, {"seq": seq, "event": event, "due_at": when})
        return False
    if due is None:
        yield Query(st.insert_keyed, {"group_id": group_id, "event": event, "now": now, "key": key})
        yield Query(st.insert_group, group)
    else:
        yield Query(st.schedule, {**group, "event": event, "due_at": due_at(due, now), "key": key})
    return True


def keep(
    conn: sqlite3.Connection,
    st: SchedulingStatements,
    now: float,
    row: Row,
    due: Due | None,
    key: str,
) -> bool:
    """:func:`publish_keyed`'s ``keep`` on ``conn`` (in the caller's transaction), its two
    statements run as they are, not through a program: a keyed publish's common case (a change
    to one is a change to both; the contract tests run both, through the outbox too)."""
    group_id, event, *_ = row
    group = _group(row)
    if due is not None:
        params = {**group, "event": event, "due_at": due_at(due, now), "key": key}
        return conn.execute(st.schedule_unless_waiting, params).rowcount == 1
    params = {"group_id": group_id, "event": event, "now": now, "key": key}
    if conn.execute(st.insert_keyed_unless_waiting, params).rowcount != 1:
        return False
    conn.execute(st.insert_group, group)
    return True


def cancel(st: SchedulingStatements, key: str) -> Program[Any, bool]:
    """Delete the waiting message(s) with ``key`` (never one in flight); whether any was."""
    groups = (yield Query(st.cancel_queued, {"key": key})).rows
    for (group_id,) in set(groups):
        yield Query(st.drop_group_if_empty, {"group_id": group_id})
    scheduled = (yield Query(st.cancel_scheduled, {"key": key})).rowcount
    return bool(groups) or scheduled > 0


def promote(conn: sqlite3.Connection, st: SchedulingStatements, now: float) -> None:
    """Move every message due at ``now`` to its group's tail, in due order (the claim's
    transaction holds the write lock)."""
    at = {"now": now}
    conn.execute(st.promote_groups, at)
    conn.execute(st.promote_messages, at)
    conn.execute(st.promote_delete, at)


def promote_if_due(conn: sqlite3.Connection, st: SchedulingStatements, now: float) -> bool:
    """:func:`promote` when something is due; whether it was."""
    if conn.execute(st.due, {"now": now}).fetchone() is None:
        return False
    promote(conn, st, now)
    return True


def run_program(conn: sqlite3.Connection, program: Program[Compiled, Any]) -> Any:
    """Run ``program`` on ``conn`` (inside the caller's transaction)."""
    try:
        query = next(program)
        while True:
            cursor = conn.execute(query.statement, query.params)
            rows = cursor.fetchall()
            query = program.send(Result(rows, len(rows) if rows else cursor.rowcount))
    except StopIteration as done:
        return done.value
