"""The queue's operations, each one short SQLite transaction on a driver connection.

Written once: the sync transport calls these on its sqlite3 connection, the async twin runs the
very same functions inside aiosqlite's thread (one hop per operation). Arguments arrive already
validated. Each operation takes SQLite's write lock first (``BEGIN IMMEDIATE``), so claims from
every process serialize, and rolls back on any exception, ``BaseException`` included.
"""

from __future__ import annotations

import itertools
import os
import secrets
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from pydantic import BaseModel

from harel_sa.errors import (
    BusyError,
    DatabaseReplacedError,
    DiskIOError,
    HarelSAError,
    NotADatabaseError,
    ReadOnlyError,
    StorageError,
    StorageFullError,
)
from harel_sa.events import Lease
from harel_sa.sql import Statements

Clock = Callable[[], float]

_MAX_ERROR = 2000


@contextmanager
def storage_errors() -> Iterator[None]:
    """Turn the driver's errors into harel_sa's typed :class:`~harel_sa.StorageError`\\ s."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        raise translate(exc) from exc


#: Typed errors by SQLite's extended result code first, then by its primary code (the low
#: byte): a full disk at open (``SQLITE_IOERR_SHMSIZE``) or a lock is never "not a database".
_BY_EXTENDED: dict[int, type[HarelSAError]] = {
    4874: StorageFullError,  # SQLITE_IOERR_SHMSIZE: the -shm file cannot grow (a full disk)
    1032: DatabaseReplacedError,  # SQLITE_READONLY_DBMOVED: the file was moved or deleted
}
_BY_PRIMARY: dict[int, type[HarelSAError]] = {
    5: BusyError,  # SQLITE_BUSY
    6: BusyError,  # SQLITE_LOCKED
    8: ReadOnlyError,  # SQLITE_READONLY
    10: DiskIOError,  # SQLITE_IOERR
    13: StorageFullError,  # SQLITE_FULL
    26: NotADatabaseError,  # SQLITE_NOTADB
}


def translate(exc: sqlite3.DatabaseError) -> HarelSAError:
    """The typed error for a driver error, by SQLite's extended result code, then its primary
    one; the message keeps the driver's text and the extended code's name."""
    code = getattr(exc, "sqlite_errorcode", 0) or 0
    kind = _BY_EXTENDED.get(code) or _BY_PRIMARY.get(code & 0xFF, StorageError)
    return kind(f"{exc} ({getattr(exc, 'sqlite_errorname', None) or 'SQLITE_ERROR'})")


class write:
    """One write transaction: ``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any exception
    (``BaseException`` included); driver errors leave as typed :class:`StorageError`\\ s.

    A class rather than a generator context manager: it runs twice per message on the hot path.
    """

    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as exc:
            raise translate(exc) from exc
        return self.conn

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            try:
                self.conn.execute("COMMIT")
                return
            except BaseException as failed:
                self._rollback()
                if isinstance(failed, sqlite3.DatabaseError):
                    raise translate(failed) from failed
                raise
        self._rollback()
        if isinstance(exc, sqlite3.DatabaseError):
            raise translate(exc) from exc

    def _rollback(self) -> None:
        # SQLite may already have rolled back (SQLITE_FULL can); a second ROLLBACK errors.
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")


class _Tokens:
    """Lease tokens: a random prefix per process and a counter; re-seeded in a forked child."""

    def __init__(self) -> None:
        self.reseed()

    def reseed(self) -> None:
        self.prefix = secrets.token_hex(6)
        self.counter = itertools.count()

    def next(self) -> str:
        return f"{self.prefix}{next(self.counter):x}"


_tokens = _Tokens()
os.register_at_fork(after_in_child=_tokens.reseed)


def publish(
    conn: sqlite3.Connection,
    st: Statements,
    clock: Clock,
    rows: list[tuple[str, str, int, str | None]],
) -> None:
    """Append ``(group_id, event_json, priority, routing_key)`` rows, all in one transaction,
    each enqueued at the clock's now.

    A message and its group row commit together: no crash leaves a message without a group.
    """
    with write(conn):
        now = clock()
        for group_id, event, priority, routing_key in rows:
            conn.execute(st.insert_message, {"group_id": group_id, "event": event, "now": now})
            conn.execute(
                st.insert_group,
                {"group_id": group_id, "priority": priority, "routing_key": routing_key},
            )


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """What a claim asks for, validated; built once per call by the transports."""

    event_type: type[BaseModel]
    worker_id: str
    visibility: float
    min_priority: int
    routing_keys: tuple[str, ...]
    max_deliveries: int | None


def claim(
    conn: sqlite3.Connection, st: Statements, clock: Clock, spec: ClaimSpec
) -> Lease[Any] | None:
    """Lease the head of the next group in round-robin order, or return ``None``.

    The event is decoded before COMMIT: a row that does not decode, or has been delivered
    ``max_deliveries`` times, is moved to the dead table in the same transaction and the claim
    goes on to the next deliverable message, so no head wedges its group.
    """
    with write(conn):
        return _claim(conn, st, clock(), spec)


def ack_and_claim(
    conn: sqlite3.Connection, st: Statements, clock: Clock, lease: Lease[Any], spec: ClaimSpec
) -> tuple[bool, Lease[Any] | None]:
    """:func:`ack` ``lease`` and :func:`claim` the next message in one write transaction."""
    with write(conn):
        return _ack(conn, st, lease), _claim(conn, st, clock(), spec)


def _claim(
    conn: sqlite3.Connection, st: Statements, now: float, spec: ClaimSpec
) -> Lease[Any] | None:
    keys = spec.routing_keys
    select = st.claim(spec.min_priority, len(keys))
    params: dict[str, object] = {"now": now, "min_priority": spec.min_priority}
    params.update((f"key{i}", key) for i, key in enumerate(keys))
    while True:
        row = conn.execute(select, params).fetchone()
        if row is None:
            return None
        seq, group, raw, deliveries = row[0], row[1], row[2], row[3]
        if seq is None:  # a group row without messages: delete it (and its empty successors)
            conn.execute(st.drop_empty_groups, {"last_claimed_at": row[4], "grow": row[5]})
            continue
        limit = spec.max_deliveries
        if limit is not None and deliveries >= limit:
            times = "1 time" if deliveries == 1 else f"{deliveries} times"
            bury(conn, st, seq, now, f"delivered {times} (max {limit})")
            continue
        try:
            group_id = group.decode()
        except UnicodeDecodeError as exc:
            bury(conn, st, seq, now, f"undecodable group_id: {exc}")
            continue
        try:  # as text, so an error shows the row as it reads (not UTF-8 is a ValueError too)
            event = spec.event_type.model_validate_json(raw.decode())
        except ValueError as exc:
            bury(conn, st, seq, now, f"undecodable event: {exc}")
            continue
        token = _tokens.next()
        locked_by = f"{spec.worker_id}#{token}"
        conn.execute(st.touch_group, {"now": now, "group_id": group_id})
        conn.execute(
            st.lease,
            {
                "locked_by": locked_by,
                "expiry": now + spec.visibility,
                "deliveries": deliveries + 1,
                "seq": seq,
            },
        )
        return Lease(seq, group_id, event, spec.worker_id, token, deliveries + 1)


def bury(conn: sqlite3.Connection, st: Statements, seq: int, now: float, error: str) -> None:
    """Move message ``seq`` to the dead table with ``error`` (inside the caller's transaction),
    by ``seq`` alone: whatever its other columns hold, it is moved as it is."""
    conn.execute(st.bury, {"seq": seq, "error": error[:_MAX_ERROR], "now": now})
    conn.execute(st.delete_any, {"seq": seq})
    conn.execute(st.drop_group_of_dead, {"seq": seq})


def give_back(conn: sqlite3.Connection, st: Statements, lease: Lease[Any]) -> bool:
    """Undo a claim whose caller never received the lease: the message is free again and its
    delivery is not counted. ``False`` if the lease was lost meanwhile."""
    params = {"seq": lease.seq, "locked_by": lease.locked_by, "deliveries": lease.deliveries - 1}
    with write(conn):
        return conn.execute(st.give_back, params).rowcount == 1


def ack(conn: sqlite3.Connection, st: Statements, lease: Lease[Any]) -> bool:
    """Delete the leased message (and its group once empty); ``False`` if the lease was lost."""
    with write(conn):
        return _ack(conn, st, lease)


def _ack(conn: sqlite3.Connection, st: Statements, lease: Lease[Any]) -> bool:
    done = conn.execute(st.delete, {"seq": lease.seq, "locked_by": lease.locked_by})
    if done.rowcount != 1:
        return False
    conn.execute(st.drop_group_if_empty, {"group_id": lease.group_id})
    return True


def nack(
    conn: sqlite3.Connection, st: Statements, clock: Clock, lease: Lease[Any], delay: float
) -> bool:
    """Free the message now (``delay == 0``) or park it, blocking its group, for ``delay``."""
    fence = {"seq": lease.seq, "locked_by": lease.locked_by}
    with write(conn):
        if delay == 0:
            return conn.execute(st.free, fence).rowcount == 1
        until = clock() + delay
        if conn.execute(st.park, {**fence, "until": until}).rowcount != 1:
            return False
        conn.execute(st.defer_group, {"until": until, "group_id": lease.group_id})
        return True


def extend(
    conn: sqlite3.Connection, st: Statements, clock: Clock, lease: Lease[Any], visibility: float
) -> bool:
    """Move the lease's expiry to now + ``visibility``; ``False`` if the lease was lost."""
    with write(conn):
        expiry = clock() + visibility
        params = {"seq": lease.seq, "locked_by": lease.locked_by, "expiry": expiry}
        return conn.execute(st.extend, params).rowcount == 1


def dead_letter(
    conn: sqlite3.Connection, st: Statements, clock: Clock, lease: Lease[Any], reason: str
) -> bool:
    """Move the leased message to the dead table; ``False`` if the lease was lost."""
    with write(conn):
        fence = {"seq": lease.seq, "locked_by": lease.locked_by}
        if conn.execute(st.holds, fence).fetchone() is None:
            return False
        bury(conn, st, lease.seq, clock(), reason)
        return True
