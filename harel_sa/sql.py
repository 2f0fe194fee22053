"""The runtime's statements for one prefix, written once as Core ``text()`` and compiled once.

Both transports execute these strings on the driver connection (sqlite3 directly, or inside
aiosqlite's thread); nothing is compiled per call. Parameters are named (``:now``), which the
sqlite3 driver binds from a dict.
"""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import text
from sqlalchemy.dialects import sqlite

from harel_sa.schema import Names
from harel_sa.validate import MAX_PRIORITY

#: ``locked_by`` of a parked message (``nack(delay > 0)``); the original transport's sentinel.
PARKED = "__parked__"

#: How many messages after a group's head the claim also checks for a live lease. Only a head
#: is ever leased, so a lease further down means another program inserted messages with
#: smaller ``seq``\ s before a leased head; up to this many such rows cannot give the group a
#: second lease. Each one checked costs every claim a row read (measured in instructions: the
#: first 3% of a claim+ack at synchronous=NORMAL, four 5%); any depth would need an index on
#: leased rows, a schema revision that every claim and ack would pay for in writes.
LOOKAHEAD = 1

_DIALECT = sqlite.dialect(paramstyle="named")


def compiled(sql: str) -> str:
    """``sql`` as a Core ``text()`` construct, compiled for the sqlite3 driver."""
    return str(text(sql).compile(dialect=_DIALECT))


# Reading rows another program may have written: any column may hold any type, and TEXT may
# be bytes that are not UTF-8 (the sqlite3 driver raises on fetching those). These
# expressions read such values without raising; statements are still compiled once.


def raw_text(column: str) -> str:
    """``column`` as its bytes (``NULL`` stays ``NULL``): never a decoding error on fetch."""
    return f"CAST({column} AS BLOB)"


def count_of(column: str) -> str:
    """``column`` as an integer >= 0, as SQLite reads a number out of any value."""
    return f"MAX(COALESCE(CAST({column} AS INTEGER), 0), 0)"


def priority_of(column: str) -> str:
    """``column``, or 0 when it is not an integer: as claims with a floor treat it."""
    return f"CASE WHEN typeof({column}) = 'integer' THEN {column} ELSE 0 END"


def number_or_null(column: str) -> str:
    return f"CASE WHEN typeof({column}) IN ('integer', 'real') THEN {column} END"


def live_lease(alias: str) -> str:
    """The row ``alias`` is leased or parked, and its expiry is a number not yet past
    ``:now``; a lease with no expiry, or an expiry that is not a number, has lapsed."""
    return (
        f"{alias}.locked_by IS NOT NULL AND typeof({alias}.lock_expiry) IN ('integer', 'real') "
        f"AND {alias}.lock_expiry >= :now"
    )


class Statements:
    """Every statement of the queue under one prefix. Build with :func:`statements_for`."""

    def __init__(self, names: Names) -> None:
        self.names = names
        m, g, d = names.messages, names.groups, names.dead
        self.insert_message = compiled(
            f"INSERT INTO {m} (group_id, event, enqueued_at) VALUES (:group_id, :event, :now)"
        )
        # The first publish of a group fixes its priority and routing key until it drains.
        self.insert_group = compiled(
            f"INSERT OR IGNORE INTO {g} (group_id, priority, routing_key) "
            "VALUES (:group_id, :priority, :routing_key)"
        )
        self.touch_group = compiled(
            f"UPDATE {g} SET last_claimed_at = :now WHERE group_id = :group_id"
        )
        self.lease = compiled(
            f"UPDATE {m} SET locked_by = :locked_by, lock_expiry = :expiry, "
            "deliveries = :deliveries WHERE seq = :seq"
        )
        # A lease its caller never received (an async claim cancelled inside the driver) goes
        # back as if never taken, its delivery uncounted.
        self.give_back = compiled(
            f"UPDATE {m} SET locked_by = NULL, lock_expiry = NULL, deliveries = :deliveries "
            "WHERE seq = :seq AND locked_by = :locked_by"
        )
        # Group rows without a message (another program's half-done work) are walked by every
        # claim: the claim deletes the one it met and the empty ones among the next 255.
        self.drop_empty_groups = compiled(
            f"DELETE FROM {g} WHERE (rowid = :grow OR rowid IN (SELECT rowid FROM {g} "
            "WHERE (last_claimed_at, rowid) > (:last_claimed_at, :grow) "
            "ORDER BY last_claimed_at, rowid LIMIT 255)) "
            f"AND NOT EXISTS (SELECT 1 FROM {m} WHERE {m}.group_id = {g}.group_id)"
        )
        self.delete = compiled(f"DELETE FROM {m} WHERE seq = :seq AND locked_by = :locked_by")
        self.drop_group_if_empty = compiled(
            f"DELETE FROM {g} WHERE group_id = :group_id "
            f"AND NOT EXISTS (SELECT 1 FROM {m} WHERE group_id = :group_id)"
        )
        self.park = compiled(
            f"UPDATE {m} SET locked_by = '{PARKED}', lock_expiry = :until "
            "WHERE seq = :seq AND locked_by = :locked_by"
        )
        # A parked group re-enters the rotation when its park ends, as if claimed then, so
        # claims walk past it on the index instead of over it (it stays blocked meanwhile).
        self.defer_group = compiled(
            f"UPDATE {g} SET last_claimed_at = :until WHERE group_id = :group_id"
        )
        self.free = compiled(
            f"UPDATE {m} SET locked_by = NULL, lock_expiry = NULL "
            "WHERE seq = :seq AND locked_by = :locked_by"
        )
        self.extend = compiled(
            f"UPDATE {m} SET lock_expiry = :expiry WHERE seq = :seq AND locked_by = :locked_by"
        )
        # Burying works by seq alone, in SQL: a row whose group_id is not UTF-8 text is
        # buried as it is, and an earlier dead letter of the same seq is replaced.
        self.bury = compiled(
            f"INSERT OR REPLACE INTO {d} "
            "(seq, group_id, event, error, dead_at, deliveries, priority, routing_key) "
            f"SELECT m.seq, m.group_id, m.event, :error, :now, {count_of('m.deliveries')}, "
            f"{priority_of('g.priority')}, g.routing_key "
            f"FROM {m} AS m LEFT JOIN {g} AS g ON g.group_id = m.group_id WHERE m.seq = :seq"
        )
        self.delete_any = compiled(f"DELETE FROM {m} WHERE seq = :seq")
        self.drop_group_of_dead = compiled(
            f"DELETE FROM {g} WHERE group_id = (SELECT group_id FROM {d} WHERE seq = :seq) "
            f"AND NOT EXISTS (SELECT 1 FROM {m} WHERE {m}.group_id = {g}.group_id)"
        )
        self.holds = compiled(f"SELECT 1 FROM {m} WHERE seq = :seq AND locked_by = :locked_by")

    def claim(self, min_priority: int, keys: int) -> str:
        """The select of a claim: the head of the first group, in round-robin order, that has
        nothing in flight, a priority >= ``:min_priority`` and (with ``keys`` > 0) a routing
        key among ``:key0`` ... ``:key<keys-1>``; or a group row without messages met first
        (``seq`` NULL). Columns: seq, group_id and event as bytes, deliveries,
        last_claimed_at, the group's rowid.

        Each lane walks one index in ``(last_claimed_at, rowid)`` order and stops at its first
        eligible group, so the cost does not grow with the backlog, nor with groups below the
        floor or under other keys; the lanes' winners (at most five) are then compared.
        """
        return _claim(self.names, min_priority, keys)


@lru_cache(maxsize=256)
def _claim(names: Names, min_priority: int, keys: int) -> str:
    if keys:
        lanes = [f"g.routing_key = :key{i} AND g.priority >= :min_priority" for i in range(keys)]
    elif min_priority:
        # "g.priority > 0" spelled as the partial index's WHERE, so SQLite may use that index.
        lanes = [
            f"g.priority = {p} AND g.priority > 0" for p in range(min_priority, MAX_PRIORITY + 1)
        ]
    else:
        lanes = ["1"]
    selects = [_lane(names, where) for where in lanes]
    if len(selects) == 1:
        return compiled(selects[0])
    union = " UNION ALL ".join(f"SELECT * FROM ({s})" for s in selects)
    return compiled(
        f"SELECT seq, group_id, event, deliveries, last_claimed_at, grow FROM ({union}) "
        "ORDER BY last_claimed_at, grow LIMIT 1"
    )


def _lane(names: Names, where: str) -> str:
    # A group is in flight when its head is leased or parked and the lease has not lapsed: only
    # a group's head is ever leased (claims take the head; publishes append), so looking at the
    # head alone is the design's probe over every message of the group, at the cost of one row.
    # The next LOOKAHEAD messages are looked at too, against rows inserted before a leased head.
    # A group without messages is returned as well (seq NULL), for the claim to delete.
    m, g = names.messages, names.groups
    ahead = (
        f"SELECT x.locked_by AS locked_by, x.lock_expiry AS lock_expiry FROM {m} AS x "
        f"WHERE x.group_id = g.group_id AND x.seq > m.seq ORDER BY x.seq LIMIT {LOOKAHEAD}"
    )
    return (
        f"SELECT m.seq AS seq, {raw_text('m.group_id')} AS group_id, "
        f"{raw_text('m.event')} AS event, {count_of('m.deliveries')} AS deliveries, "
        "g.last_claimed_at AS last_claimed_at, g.rowid AS grow "
        f"FROM {g} AS g LEFT JOIN {m} AS m "
        f"ON m.seq = (SELECT MIN(h.seq) FROM {m} AS h WHERE h.group_id = g.group_id) "
        f"WHERE {where} AND (m.seq IS NULL OR (NOT ({live_lease('m')}) "
        f"AND NOT EXISTS (SELECT 1 FROM ({ahead}) AS n WHERE {live_lease('n')}))) "
        "ORDER BY g.last_claimed_at, g.rowid LIMIT 1"
    )


@lru_cache(maxsize=64)
def statements_for(names: Names) -> Statements:
    """The statements of ``names``' prefix, built once per process."""
    return Statements(names)
