"""The baseline: the design's SQL (``shared/seed/sqlite-transport.md``) on plain ``sqlite3``.

Kept in ``bench/`` only, to measure harel_sa against in the same run; not shipped in the package.
It is the original transport as its design spells it, with three deliberate choices, each made so
that the comparison is fair to the baseline (never to harel_sa):

* ``publish`` runs the design's two statements (``INSERT`` the message, ``INSERT OR IGNORE`` the
  group) in **one** ``BEGIN IMMEDIATE`` transaction, not as two autocommit statements: two
  autocommit statements would pay two commits (two fsyncs at ``synchronous=FULL``) per message.
* ``ack`` runs the design's two ``DELETE`` statements in one transaction, for the same reason.
* The event is encoded with ``model_dump_json`` on publish and decoded with
  ``Event.model_validate_json`` after the claim's ``COMMIT``, as the original did: both sides do
  the same work on the payload, so the figures compare the queues, not the JSON.

Everything else is the design verbatim: the schema at SCHEMA_VERSION 4 (its two tables, the
groups' ``routing_key`` column, and its three indexes, ``groups_by_routing_key`` included), WAL,
``isolation_level=None``, ``PRAGMA busy_timeout``, the claim's select-then-lease under
``BEGIN IMMEDIATE``, ``ack``/``nack`` by ``seq`` alone, ``nack(delay > 0)`` parking with the
``__parked__`` sentinel (the group keeps its ``last_claimed_at``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from harel_sa import Event

PARKED = "__parked__"

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS harel_transport_messages (
  seq          INTEGER PRIMARY KEY AUTOINCREMENT,
  group_id     TEXT NOT NULL,
  event        TEXT NOT NULL,
  locked_by    TEXT,
  lock_expiry  REAL
)""",
    """CREATE TABLE IF NOT EXISTS harel_transport_groups (
  group_id       TEXT PRIMARY KEY,
  last_claimed_at REAL NOT NULL DEFAULT 0.0,
  priority        INT  NOT NULL DEFAULT 0,
  routing_key     TEXT
)""",
    "CREATE INDEX IF NOT EXISTS harel_transport_groups_by_last_claimed "
    "ON harel_transport_groups (last_claimed_at)",
    "CREATE INDEX IF NOT EXISTS harel_transport_messages_by_group "
    "ON harel_transport_messages (group_id, seq)",
    "CREATE INDEX IF NOT EXISTS harel_transport_groups_by_routing_key "
    "ON harel_transport_groups (routing_key, last_claimed_at)",
)

CLAIM = """SELECT m.seq, m.group_id, m.event
  FROM harel_transport_groups g
  JOIN harel_transport_messages m ON m.seq = (SELECT MIN(seq) FROM harel_transport_messages
                                              WHERE group_id = g.group_id)
  WHERE g.priority >= ?
    AND NOT EXISTS (
      SELECT 1 FROM harel_transport_messages x WHERE x.group_id = g.group_id
        AND x.locked_by IS NOT NULL AND x.lock_expiry >= ?)
  ORDER BY g.last_claimed_at, g.rowid LIMIT 1"""
CLAIM_UP_TO = CLAIM.replace("LIMIT 1", "LIMIT ?")  # the first ``limit`` groups, one walk
TOUCH_GROUP = "UPDATE harel_transport_groups SET last_claimed_at = ? WHERE group_id = ?"
LEASE = "UPDATE harel_transport_messages SET locked_by = ?, lock_expiry = ? WHERE seq = ?"
INSERT_MESSAGE = "INSERT INTO harel_transport_messages (group_id, event) VALUES (?, ?)"
INSERT_GROUP = "INSERT OR IGNORE INTO harel_transport_groups (group_id, priority) VALUES (?, ?)"
DELETE_MESSAGE = "DELETE FROM harel_transport_messages WHERE seq = ?"
DELETE_MESSAGES = "DELETE FROM harel_transport_messages WHERE seq IN"  # + a list of seqs
DROP_GROUP = (
    "DELETE FROM harel_transport_groups WHERE group_id = ? "
    "AND NOT EXISTS (SELECT 1 FROM harel_transport_messages WHERE group_id = ?)"
)
# The batched baseline's forms of TOUCH_GROUP, LEASE and DROP_GROUP: each one statement for a
# batch's rows (+ a list of ``?``), as harel_sa's batches send theirs.
TOUCH_GROUPS = "UPDATE harel_transport_groups SET last_claimed_at = ? WHERE group_id IN"
LEASE_ALL = "UPDATE harel_transport_messages SET locked_by = ?, lock_expiry = ? WHERE seq IN"
DROP_GROUPS = (
    "DELETE FROM harel_transport_groups WHERE group_id IN ({}) AND NOT EXISTS (SELECT 1 FROM "
    "harel_transport_messages WHERE group_id = harel_transport_groups.group_id)"
)
PARK = "UPDATE harel_transport_messages SET locked_by = ?, lock_expiry = ? WHERE seq = ?"
FREE = "UPDATE harel_transport_messages SET locked_by = NULL, lock_expiry = NULL WHERE seq = ?"


@dataclass(frozen=True, slots=True)
class Lease:
    seq: int
    group_id: str
    event: Event


class BaselineTransport:
    """The original stdlib transport, as the design gives it (see the module docstring)."""

    def __init__(
        self,
        path: str,
        *,
        busy_timeout: float = 5.0,
        synchronous: str = "FULL",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.clock = clock
        self.conn = sqlite3.connect(
            path, isolation_level=None, timeout=busy_timeout, check_same_thread=False
        )
        self.conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(f"PRAGMA synchronous = {synchronous}")
        for ddl in SCHEMA:
            self.conn.execute(ddl)

    def publish(self, group_id: str, event: Event, priority: int = 0) -> None:
        """The design's two statements, in one transaction (see the module docstring)."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(INSERT_MESSAGE, (group_id, event.model_dump_json()))
            conn.execute(INSERT_GROUP, (group_id, priority))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def publish_many(self, items: Iterable[tuple[str, Event]], priority: int = 0) -> None:
        """Setup helper (not measured against harel_sa): the same rows in one transaction."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for group_id, event in items:
                conn.execute(INSERT_MESSAGE, (group_id, event.model_dump_json()))
                conn.execute(INSERT_GROUP, (group_id, priority))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def claim(self, worker_id: str, visibility: float, min_priority: int = 0) -> Lease | None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            now = self.clock()
            row = conn.execute(CLAIM, (min_priority, now)).fetchone()
            if row is not None:
                conn.execute(TOUCH_GROUP, (now, row[1]))
                conn.execute(LEASE, (worker_id, now + visibility, row[0]))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if row is None:
            return None
        return Lease(row[0], row[1], Event.model_validate_json(row[2]))

    def select_only(self, min_priority: int = 0) -> object:
        """The claim's select alone, in autocommit (a read): the cost of the walk."""
        return self.conn.execute(CLAIM, (min_priority, self.clock())).fetchone()

    def ack(self, lease: Lease) -> None:
        """The design's two deletes, by ``seq``, in one transaction."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(DELETE_MESSAGE, (lease.seq,))
            conn.execute(DROP_GROUP, (lease.group_id, lease.group_id))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def ack_many_and_claim_many(
        self, leases: list[Lease], worker_id: str, visibility: float, limit: int
    ) -> list[Lease]:
        """The batched baseline (issue 16): the design's statements, set-based as harel_sa's
        batches send them, all in one ``BEGIN IMMEDIATE`` transaction: the messages deleted by
        ``seq`` in one statement, their groups dropped once empty in one, then the design's
        claim select with ``LIMIT limit`` (one walk: a row per group, so the claims of one
        batch are on distinct groups), its groups touched in one statement and its messages
        leased in one (the design's lease has no token: one ``locked_by`` for every row).
        ``limit`` and the leases: at most 997 each (SQLite's oldest limit: 999 parameters)."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            if leases:
                marks = ", ".join(["?"] * len(leases))
                conn.execute(f"{DELETE_MESSAGES} ({marks})", [lease.seq for lease in leases])
                conn.execute(DROP_GROUPS.format(marks), [lease.group_id for lease in leases])
            now = self.clock()
            rows = conn.execute(CLAIM_UP_TO, (0, now, limit)).fetchall()
            if rows:
                marks = ", ".join(["?"] * len(rows))
                conn.execute(f"{TOUCH_GROUPS} ({marks})", [now, *(row[1] for row in rows)])
                lease = [worker_id, now + visibility, *(row[0] for row in rows)]
                conn.execute(f"{LEASE_ALL} ({marks})", lease)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return [Lease(seq, group, Event.model_validate_json(raw)) for seq, group, raw in rows]

    def nack(self, lease: Lease, delay: float = 0.0) -> None:
        """By ``seq``: park until now + ``delay``, or free at once (one autocommit statement)."""
        if delay > 0:
            self.conn.execute(PARK, (PARKED, self.clock() + delay, lease.seq))
        else:
            self.conn.execute(FREE, (lease.seq,))

    def close(self) -> None:
        self.conn.close()
