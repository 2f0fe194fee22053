"""Operating the queue on SQLite: what is in it, what is stuck, and the dead letters.

The admin operations, shared by both transports like :mod:`~harel_sa.sqlite.operations`; their
statements are in :mod:`~harel_sa.sqlite.statements`, their results the models of
:mod:`harel_sa.models`. Reads run in one read transaction, so their figures agree with each
other.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from harel_sa import rows
from harel_sa.models import DeadMessage, QueuedMessage, Stats
from harel_sa.seam import Clock
from harel_sa.sqlite import flow
from harel_sa.sqlite.driver import immediate_transaction, read_transaction
from harel_sa.sqlite.statements import Statements


def stats(conn: sqlite3.Connection, statements: Statements, clock: Clock) -> Stats:
    with read_transaction(conn):
        now = clock()
        created = conn.execute(statements.oldest).fetchone()
        ready = conn.execute(statements.oldest_ready, {"now": now}).fetchone()
        return rows.stats(
            rows.shown,
            now=now,
            counts=conn.execute(statements.counts, {"now": now}).fetchone(),
            groups=conn.execute(statements.group_count).fetchone()[0],
            dead=conn.execute(statements.dead_count).fetchone()[0],
            oldest=created[0] if created else None,
            oldest_ready=ready[0] if ready else None,
            by_priority=conn.execute(statements.by_priority),
            by_routing_key=conn.execute(statements.by_routing_key),
            published=_published(conn, statements),
            by_worker=conn.execute(statements.by_worker, {"now": now}),
        ).model_copy(
            update={
                **_scheduled(conn, statements),
                "paused": flow.read_paused(conn, statements.flow),
                "limits": flow.read_limits(conn, statements.flow, now),
            }
        )


def _scheduled(conn: sqlite3.Connection, statements: Statements) -> dict[str, Any]:
    count, first = conn.execute(statements.scheduling.scheduled_count).fetchone()
    return {"scheduled": int(count), "next_due": None if first is None else float(first)}


def _published(conn: sqlite3.Connection, statements: Statements) -> int:
    try:
        return int(conn.execute(statements.published).fetchone()[0])
    except sqlite3.OperationalError:  # no AUTOINCREMENT table has had a row yet
        return 0


def peek(
    conn: sqlite3.Connection,
    statements: Statements,
    clock: Clock,
    group_id: str | None,
    limit: int,
    scheduled: bool = False,
) -> list[QueuedMessage]:
    """The next ``limit`` messages of ``group_id`` (or of the queue, oldest first), unclaimed;
    with ``scheduled``, the scheduled ones after them."""
    with read_transaction(conn):
        params = {"group_id": group_id, "limit": limit, "now": clock()}
        found = rows.queued(rows.shown, conn.execute(statements.peek, params).fetchall())
        if scheduled and len(found) < limit:
            more = {"group_id": group_id, "limit": limit - len(found)}
            later = conn.execute(statements.scheduling.peek, more).fetchall()
            found += rows.scheduled(rows.shown, later)
        return found


def release(
    conn: sqlite3.Connection, statements: Statements, clock: Clock, group_id: str | None
) -> int:
    """End the park of parked messages (of ``group_id``, or all) now; how many were released."""
    with immediate_transaction(conn):
        released = conn.execute(statements.end_parks, {"group_id": group_id}).rowcount
        conn.execute(statements.return_parked_groups, {"group_id": group_id, "now": clock()})
        return released


def purge(conn: sqlite3.Connection, statements: Statements, group_id: str) -> int:
    """Delete every message of ``group_id`` (its scheduled ones too) and its group row; how
    many messages went."""
    group = {"group_id": group_id}
    with immediate_transaction(conn):
        deleted = conn.execute(statements.purge_messages, group).rowcount
        conn.execute(statements.purge_group, group)
        return deleted + conn.execute(statements.scheduling.purge, group).rowcount


def _pick(group_id: str | None, seqs: tuple[int, ...] | None) -> dict[str, object]:
    return {"group_id": group_id, "seqs": None if seqs is None else json.dumps(seqs)}


def dead(
    conn: sqlite3.Connection,
    statements: Statements,
    group_id: str | None,
    seqs: tuple[int, ...] | None,
    limit: int,
) -> list[DeadMessage]:
    with read_transaction(conn):
        found = conn.execute(statements.dead, {**_pick(group_id, seqs), "limit": limit})
        return rows.dead_messages(rows.shown, found.fetchall())


def requeue_dead(
    conn: sqlite3.Connection,
    statements: Statements,
    clock: Clock,
    group_id: str | None,
    seqs: tuple[int, ...] | None,
) -> int:
    """Put the chosen dead messages back at the tail of their groups, in their old order.

    A group that drained meanwhile comes back with the priority and routing key it had. A
    message's age counts from now, its return (as from a publish).
    """
    params = _pick(group_id, seqs)
    with immediate_transaction(conn):
        moved = conn.execute(statements.requeue, {**params, "now": clock()}).rowcount
        conn.execute(statements.requeue_groups, params)
        conn.execute(statements.purge_dead, params)
        return moved


def purge_dead(
    conn: sqlite3.Connection,
    statements: Statements,
    group_id: str | None,
    seqs: tuple[int, ...] | None,
) -> int:
    with immediate_transaction(conn):
        return conn.execute(statements.purge_dead, _pick(group_id, seqs)).rowcount
