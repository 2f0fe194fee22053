"""Operating the queue on SQLite: what is in it, what is stuck, and the dead letters.

The admin operations, shared by both transports like :mod:`~harel_sa.sqlite.operations`; their
statements are in :mod:`~harel_sa.sqlite.statements`, their results the models of
:mod:`harel_sa.models`. Reads run in one read transaction, so their figures agree with each
other.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime

from harel_sa.models import (
    DeadMessage,
    MessageState,
    PriorityBucket,
    QueuedMessage,
    RoutingBucket,
    Stats,
)
from harel_sa.rules import PARKED
from harel_sa.seam import Clock
from harel_sa.sqlite.driver import immediate_transaction, read_transaction
from harel_sa.sqlite.statements import Statements


def stats(conn: sqlite3.Connection, statements: Statements, clock: Clock) -> Stats:
    with read_transaction(conn):
        now = clock()
        messages, in_flight, parked = conn.execute(statements.counts, {"now": now}).fetchone()
        created = conn.execute(statements.oldest).fetchone()
        ready = conn.execute(statements.oldest_ready, {"now": now}).fetchone()
        return Stats(
            now=now,
            messages=messages,
            groups=conn.execute(statements.group_count).fetchone()[0],
            in_flight=in_flight,
            parked=parked,
            dead=conn.execute(statements.dead_count).fetchone()[0],
            oldest_age=_age(created[0] if created else None, now),
            by_priority=[
                PriorityBucket(priority=p, groups=g, messages=m)
                for p, g, m in conn.execute(statements.by_priority)
            ],
            by_routing_key=[
                RoutingBucket(routing_key=shown(k), groups=g, messages=m)
                for k, g, m in conn.execute(statements.by_routing_key)
            ],
            ready=messages - in_flight - parked,
            oldest_ready_age=_age(ready[0] if ready else None, now),
            published=_published(conn, statements),
            leases_by_worker={
                shown(worker) or "": n
                for worker, n in conn.execute(statements.by_worker, {"now": now})
            },
        )


def _published(conn: sqlite3.Connection, statements: Statements) -> int:
    try:
        return int(conn.execute(statements.published).fetchone()[0])
    except sqlite3.OperationalError:  # no AUTOINCREMENT table has had a row yet
        return 0


def _age(created: object, now: float) -> float | None:
    """Seconds since ``created`` (epoch seconds, or an ISO-8601 time as bytes; naive is UTC)."""
    if isinstance(created, int | float):
        return now - float(created)
    if isinstance(created, bytes):
        try:
            when = datetime.fromisoformat(created.decode())
        except ValueError:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return now - when.timestamp()
    return None


def shown(value: bytes | None) -> str | None:
    """Stored text as ``str``: bytes that are not UTF-8 appear as ``\\xNN`` escapes."""
    return None if value is None else value.decode("utf-8", "backslashreplace")


def peek(
    conn: sqlite3.Connection, statements: Statements, clock: Clock, group_id: str | None, limit: int
) -> list[QueuedMessage]:
    """The next ``limit`` messages of ``group_id`` (or of the queue, oldest first), unclaimed."""
    with read_transaction(conn):
        params = {"group_id": group_id, "limit": limit, "now": clock()}
        rows = conn.execute(statements.peek, params).fetchall()
    return [
        QueuedMessage(
            seq=seq,
            group_id=shown(group) or "",
            event=shown(event) or "",
            state=_state(locked_by, live),
            locked_by=shown(locked_by),
            lock_expiry=expiry,
            deliveries=deliveries,
        )
        for seq, group, event, locked_by, expiry, deliveries, live in rows
    ]


def _state(locked_by: bytes | None, live: int) -> MessageState:
    # Live or lapsed as the claim reads a row (statements.live_lease, computed in the select).
    if not live:
        return "ready"
    return "parked" if locked_by == PARKED.encode() else "leased"


def release(
    conn: sqlite3.Connection, statements: Statements, clock: Clock, group_id: str | None
) -> int:
    """End the park of parked messages (of ``group_id``, or all) now; how many were released."""
    with immediate_transaction(conn):
        released = conn.execute(statements.end_parks, {"group_id": group_id}).rowcount
        conn.execute(statements.return_parked_groups, {"group_id": group_id, "now": clock()})
        return released


def purge(conn: sqlite3.Connection, statements: Statements, group_id: str) -> int:
    """Delete every message of ``group_id`` and its group row; how many messages went."""
    with immediate_transaction(conn):
        deleted = conn.execute(statements.purge_messages, {"group_id": group_id}).rowcount
        conn.execute(statements.purge_group, {"group_id": group_id})
        return deleted


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
        rows = conn.execute(statements.dead, {**_pick(group_id, seqs), "limit": limit}).fetchall()
    return [
        DeadMessage(
            seq=r[0],
            group_id=shown(r[1]) or "",
            event=shown(r[2]) or "",
            error=shown(r[3]) or "",
            dead_at=r[4],
            deliveries=r[5],
            priority=r[6],
            routing_key=shown(r[7]),
        )
        for r in rows
    ]


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
        conn.execute(statements.delete_dead, params)
        return moved


def purge_dead(
    conn: sqlite3.Connection,
    statements: Statements,
    group_id: str | None,
    seqs: tuple[int, ...] | None,
) -> int:
    with immediate_transaction(conn):
        return conn.execute(statements.delete_dead, _pick(group_id, seqs)).rowcount
