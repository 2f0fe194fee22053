"""Operating the queue: what is in it, what is stuck, and the dead letters.

Models, statements (compiled once per prefix) and operations, shared by both transports like
``operations``. Reads run in one read transaction, so their figures agree with each other.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict

from harel_sa.operations import Clock, storage_errors, write
from harel_sa.schema import Names
from harel_sa.sql import (
    PARKED,
    compiled,
    count_of,
    live_lease,
    number_or_null,
    priority_of,
    raw_text,
)

State = Literal["ready", "leased", "parked"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class Bucket(_Frozen):
    """Groups and messages under one priority or routing key."""

    groups: int
    messages: int


class PriorityBucket(Bucket):
    priority: int


class RoutingBucket(Bucket):
    routing_key: str | None


class Stats(_Frozen):
    """A consistent picture of one prefix's queue at ``now``."""

    now: float
    messages: int
    groups: int
    in_flight: int
    parked: int
    dead: int
    #: Seconds since the oldest message was enqueued (or, for a row another program wrote, since
    #: its event's ``created_time``, if it says).
    oldest_age: float | None
    by_priority: list[PriorityBucket]
    by_routing_key: list[RoutingBucket]
    #: Messages neither leased nor parked (some may wait behind their group's head).
    ready: int = 0
    #: The same for the oldest ready message.
    oldest_ready_age: float | None = None
    #: Messages ever published under the prefix (the last seq given out).
    published: int = 0
    #: Live leases per worker id.
    leases_by_worker: dict[str, int] = {}


class QueuedMessage(_Frozen):
    """A message as it sits in the queue (its event as stored JSON, not decoded).

    Rows another program wrote are shown as they are: text that is not UTF-8 with ``\\xNN``
    escapes, a lock whose expiry is not a number as ``lock_expiry=None`` and ``"ready"`` (the
    claim treats such a lock as lapsed), a count that is not a number as SQLite reads it.
    """

    seq: int
    group_id: str
    event: str
    state: State
    locked_by: str | None
    lock_expiry: float | None
    deliveries: int


class DeadMessage(_Frozen):
    """A message moved to the dead table, with why and when (odd values shown as in
    :class:`QueuedMessage`; a priority that is not an integer as 0)."""

    seq: int
    group_id: str
    event: str
    error: str
    dead_at: float
    deliveries: int
    priority: int
    routing_key: str | None


class AdminStatements:
    """The statements of this module for one prefix. Build with :func:`admin_statements_for`.

    Every read tolerates rows another program wrote: text columns are read as their bytes,
    numbers through :mod:`harel_sa.sql`'s expressions, so an odd value is shown, not raised on.
    """

    def __init__(self, names: Names) -> None:
        m, g, d = names.messages, names.groups, names.dead
        self.counts = compiled(
            f"SELECT count(*), "
            f"coalesce(sum(locked_by != '{PARKED}' AND {live_lease(m)}), 0), "
            f"coalesce(sum(locked_by = '{PARKED}' AND {live_lease(m)}), 0) FROM {m}"
        )
        self.groups = compiled(f"SELECT count(*) FROM {g}")
        self.dead_count = compiled(f"SELECT count(*) FROM {d}")
        created = "json_extract(event, '$.created_time')"
        # When the message was enqueued (harel_sa's publish), else when its event says it was
        # created (rows other programs wrote): a number, or ISO-8601 text as bytes.
        since = (
            f"COALESCE({number_or_null('enqueued_at')}, CASE WHEN typeof(event) != 'text' THEN "
            f"NULL WHEN NOT json_valid(event) THEN NULL WHEN typeof({created}) IN "
            f"('integer', 'real') THEN {created} ELSE {raw_text(created)} END)"
        )
        self.oldest = compiled(f"SELECT {since} FROM {m} ORDER BY seq LIMIT 1")
        by = (
            "SELECT {0}, count(DISTINCT g.group_id), count(m.seq) FROM {1} AS g "
            "LEFT JOIN {2} AS m ON m.group_id = g.group_id GROUP BY 1 ORDER BY 1"
        )
        self.by_priority = compiled(by.format(priority_of("g.priority"), g, m))
        self.by_routing_key = compiled(by.format(raw_text("g.routing_key"), g, m))
        columns = (
            f"seq, {raw_text('group_id')}, {raw_text('event')}, {raw_text('locked_by')}, "
            f"{number_or_null('lock_expiry')}, {count_of('deliveries')}"
        )
        self.oldest_ready = compiled(
            f"SELECT {since} FROM {m} AS r WHERE NOT ({live_lease('r')}) ORDER BY seq LIMIT 1"
        )
        self.published = compiled(
            f"SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = '{m}'"
        )
        worker = raw_text("substr(locked_by, 1, instr(locked_by, '#') - 1)")
        self.by_worker = compiled(
            f"SELECT {worker}, count(*) "
            f"FROM {m} AS w WHERE locked_by != '{PARKED}' AND {live_lease('w')} "
            "GROUP BY 1 ORDER BY 1"
        )
        self.peek = compiled(
            f"SELECT {columns} FROM {m} "
            "WHERE :group_id IS NULL OR group_id = :group_id ORDER BY seq LIMIT :limit"
        )
        self.release = compiled(
            f"UPDATE {m} SET locked_by = NULL, lock_expiry = NULL "
            f"WHERE locked_by = '{PARKED}' AND (:group_id IS NULL OR group_id = :group_id)"
        )
        # Parks dated their groups forward (sql.Statements.defer_group); bring them back to now.
        self.undefer = compiled(
            f"UPDATE {g} SET last_claimed_at = :now "
            "WHERE last_claimed_at > :now AND (:group_id IS NULL OR group_id = :group_id)"
        )
        self.purge_messages = compiled(f"DELETE FROM {m} WHERE group_id = :group_id")
        self.purge_group = compiled(f"DELETE FROM {g} WHERE group_id = :group_id")
        pick = (
            "(:group_id IS NULL OR group_id = :group_id) AND "
            "(:seqs IS NULL OR seq IN (SELECT value FROM json_each(:seqs)))"
        )
        self.dead = compiled(
            f"SELECT seq, {raw_text('group_id')}, {raw_text('event')}, {raw_text('error')}, "
            f"COALESCE(CAST(dead_at AS REAL), 0.0), {count_of('deliveries')}, "
            f"{priority_of('priority')}, {raw_text('routing_key')} "
            f"FROM {d} WHERE {pick} ORDER BY seq LIMIT :limit"
        )
        self.requeue = compiled(
            f"INSERT INTO {m} (group_id, event) SELECT group_id, event FROM {d} "
            f"WHERE {pick} ORDER BY seq"
        )
        self.requeue_groups = compiled(
            f"INSERT OR IGNORE INTO {g} (group_id, priority, routing_key) "
            f"SELECT group_id, priority, routing_key FROM {d} WHERE {pick} ORDER BY seq"
        )
        self.bury_dead = compiled(f"DELETE FROM {d} WHERE {pick}")


@lru_cache(maxsize=64)
def admin_statements_for(names: Names) -> AdminStatements:
    return AdminStatements(names)


@contextmanager
def read(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One read transaction: every query inside sees the same snapshot."""
    with storage_errors():
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")


def stats(conn: sqlite3.Connection, st: AdminStatements, clock: Clock) -> Stats:
    with read(conn):
        now = clock()
        messages, in_flight, parked = conn.execute(st.counts, {"now": now}).fetchone()
        created = conn.execute(st.oldest).fetchone()
        ready = conn.execute(st.oldest_ready, {"now": now}).fetchone()
        return Stats(
            now=now,
            messages=messages,
            groups=conn.execute(st.groups).fetchone()[0],
            in_flight=in_flight,
            parked=parked,
            dead=conn.execute(st.dead_count).fetchone()[0],
            oldest_age=_age(created[0] if created else None, now),
            by_priority=[
                PriorityBucket(priority=p, groups=g, messages=m)
                for p, g, m in conn.execute(st.by_priority)
            ],
            by_routing_key=[
                RoutingBucket(routing_key=shown(k), groups=g, messages=m)
                for k, g, m in conn.execute(st.by_routing_key)
            ],
            ready=messages - in_flight - parked,
            oldest_ready_age=_age(ready[0] if ready else None, now),
            published=_published(conn, st),
            leases_by_worker={
                shown(worker) or "": n for worker, n in conn.execute(st.by_worker, {"now": now})
            },
        )


def _published(conn: sqlite3.Connection, st: AdminStatements) -> int:
    try:
        return int(conn.execute(st.published).fetchone()[0])
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
    conn: sqlite3.Connection, st: AdminStatements, clock: Clock, group_id: str | None, limit: int
) -> list[QueuedMessage]:
    """The next ``limit`` messages of ``group_id`` (or of the queue, oldest first), unclaimed."""
    with read(conn):
        now = clock()
        rows = conn.execute(st.peek, {"group_id": group_id, "limit": limit}).fetchall()
    return [
        QueuedMessage(
            seq=seq,
            group_id=shown(group) or "",
            event=shown(event) or "",
            state=_state(locked_by, expiry, now),
            locked_by=shown(locked_by),
            lock_expiry=expiry,
            deliveries=deliveries,
        )
        for seq, group, event, locked_by, expiry, deliveries in rows
    ]


def _state(locked_by: bytes | None, expiry: float | None, now: float) -> State:
    # As the claim reads a row (sql.live_lease): no expiry, or one that is not a number, lapsed.
    if locked_by is None or expiry is None or expiry < now:
        return "ready"
    return "parked" if locked_by == PARKED.encode() else "leased"


def release(
    conn: sqlite3.Connection, st: AdminStatements, clock: Clock, group_id: str | None
) -> int:
    """End the park of parked messages (of ``group_id``, or all) now; how many were released."""
    with write(conn):
        released = conn.execute(st.release, {"group_id": group_id}).rowcount
        conn.execute(st.undefer, {"group_id": group_id, "now": clock()})
        return released


def purge(conn: sqlite3.Connection, st: AdminStatements, group_id: str) -> int:
    """Delete every message of ``group_id`` and its group row; how many messages went."""
    with write(conn):
        deleted = conn.execute(st.purge_messages, {"group_id": group_id}).rowcount
        conn.execute(st.purge_group, {"group_id": group_id})
        return deleted


def _pick(group_id: str | None, seqs: tuple[int, ...] | None) -> dict[str, object]:
    return {"group_id": group_id, "seqs": None if seqs is None else json.dumps(seqs)}


def dead(
    conn: sqlite3.Connection,
    st: AdminStatements,
    group_id: str | None,
    seqs: tuple[int, ...] | None,
    limit: int,
) -> list[DeadMessage]:
    with read(conn):
        rows = conn.execute(st.dead, {**_pick(group_id, seqs), "limit": limit}).fetchall()
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
    st: AdminStatements,
    group_id: str | None,
    seqs: tuple[int, ...] | None,
) -> int:
    """Put the chosen dead messages back at the tail of their groups, in their old order.

    A group that drained meanwhile comes back with the priority and routing key it had.
    """
    params = _pick(group_id, seqs)
    with write(conn):
        moved = conn.execute(st.requeue, params).rowcount
        conn.execute(st.requeue_groups, params)
        conn.execute(st.bury_dead, params)
        return moved


def purge_dead(
    conn: sqlite3.Connection,
    st: AdminStatements,
    group_id: str | None,
    seqs: tuple[int, ...] | None,
) -> int:
    with write(conn):
        return conn.execute(st.bury_dead, _pick(group_id, seqs)).rowcount
