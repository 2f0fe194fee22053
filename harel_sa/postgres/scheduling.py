"""PostgreSQL's statements and programs for scheduled and keyed messages.

A claim's statement says whether a scheduled message is due; the claim then runs
:func:`promote`, one statement moving every due message to its group's tail in due order, one
promotion per prefix at a time (``pg_try_advisory_xact_lock``), "now" the server's. A keyed
publish or cancel takes ``pg_advisory_xact_lock`` on a hash of (prefix, key), then looks and
writes in one statement with a snapshot of its own, sent with the lock's in one round trip
(:class:`~harel_sa.postgres.kinds.Locked`): publishes of one key take turns, so a key never
gets two waiting messages from them (a unique index cannot span the two tables).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache, partial
from typing import Any

from harel_sa.postgres.compiled import Statement, notify_sql, positional
from harel_sa.postgres.flow import born, pauses, targets, targets_of
from harel_sa.postgres.kinds import Locked, One, nothing
from harel_sa.schema import Names
from harel_sa.seam import Due, Program, Query, Result, Row
from harel_sa.validate import no_nul

_WAITING = "locked_by IS NULL"


def _lock(*parts: str) -> int:
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class SchedulingStatements:
    """The statements of scheduled and keyed messages under one prefix."""

    def __init__(self, names: Names, now: str) -> None:
        m, g, s = names.messages, names.groups, names.scheduled
        self.prefix = names.prefix
        self.promote_lock = _lock("harel_sa promote", names.prefix)
        when = f"coalesce(:at ::float8, {now} + :delay ::float8)"
        upsert_group = f"ON CONFLICT (group_id) DO UPDATE SET priority = {g}.priority"
        one = (":group_id ::text", ":routing_key ::text")
        self.schedule = positional(
            f"INSERT INTO {s} (group_id, event, due_at, priority, routing_key, max_in_flight, "
            f"message_key) SELECT i.group_id, i.event, d.due_at, :priority ::bigint, "
            ":routing_key ::text, :max_in_flight ::integer, :key ::text "
            "FROM unnest(:groups ::text[], :events ::text[]) "
            f"WITH ORDINALITY AS i(group_id, event, n) CROSS JOIN (SELECT {when} AS due_at) d "
            "ORDER BY i.n"
        )
        self.lock = positional("SELECT pg_advisory_xact_lock(:lock ::bigint)")
        # A keyed publish, run under the key's lock (its snapshot taken once the lock is held):
        # the waiting message with the key (queued and free, else scheduled); with
        # ``replace``, it takes the event (and, scheduled, the due time, else now); none
        # waiting, the message is written (queued, its group upserted first, or scheduled).
        # Returns (found, replaced, written): a found one that ``replace`` could not change was
        # claimed or promoted meanwhile, and the publish looks again.
        found = (
            f"found AS (SELECT 'm' AS at, seq FROM {m} WHERE message_key = :key ::text "
            f"AND {_WAITING} UNION ALL SELECT 's', seq FROM {s} "
            "WHERE message_key = :key ::text LIMIT 1), "
            f"rq AS (UPDATE {m} SET event = :event WHERE :replace ::boolean "
            f"AND seq = (SELECT seq FROM found WHERE at = 'm') AND {_WAITING} RETURNING 1), "
            f"rs AS (UPDATE {s} SET event = :event, due_at = {when} WHERE :replace ::boolean "
            "AND seq = (SELECT seq FROM found WHERE at = 's') RETURNING 1)"
        )
        said = (
            "SELECT (SELECT count(*) FROM found), "
            "(SELECT count(*) FROM rq) + (SELECT count(*) FROM rs), (SELECT count(*) FROM w)"
        )
        self.publish_keyed = positional(
            f"WITH {found}, {pauses(names, targets(*one))}, "
            f"g AS (INSERT INTO {g} (group_id, priority, routing_key, max_in_flight, "
            "last_claimed_at) SELECT :group_id ::text, :priority ::integer, :routing_key ::text, "
            f":max_in_flight ::integer, {born(names, *one)} "
            f"WHERE NOT EXISTS (SELECT 1 FROM found) {upsert_group} RETURNING group_id), "
            f"w AS (INSERT INTO {m} (group_id, event, enqueued_at, message_key) "
            f"SELECT group_id, :event, {now}, :key ::text FROM g "
            f"CROSS JOIN (SELECT {notify_sql(names)}) AS notified RETURNING 1) {said}"
        )
        self.schedule_keyed = positional(
            f"WITH {found}, w AS (INSERT INTO {s} "
            "(group_id, event, due_at, priority, routing_key, max_in_flight, message_key) "
            f"SELECT :group_id ::text, :event, {when}, :priority ::bigint, "
            ":routing_key ::text, :max_in_flight ::integer, :key ::text "
            f"WHERE NOT EXISTS (SELECT 1 FROM found) RETURNING 1) {said}"
        )
        # A group the cancel emptied is dropped, as an ack drops one: only at the row version
        # the statement's snapshot saw (a publish since then updated it, and its message stays).
        self.cancel = positional(
            f"WITH q AS (DELETE FROM {m} WHERE message_key = :key ::text AND {_WAITING} "
            f"RETURNING seq, group_id), x AS (DELETE FROM {s} WHERE message_key = :key ::text "
            f"RETURNING seq), seen AS (SELECT g.group_id, g.xmin AS version FROM {g} g "
            "WHERE g.group_id IN (SELECT group_id FROM q)), "
            f"dropped AS (DELETE FROM {g} g USING seen WHERE g.group_id = seen.group_id "
            f"AND g.xmin = seen.version AND NOT EXISTS (SELECT 1 FROM {m} e "
            "WHERE e.group_id = seen.group_id AND e.seq NOT IN (SELECT seq FROM q))) "
            "SELECT (SELECT count(*) FROM q) + (SELECT count(*) FROM x)"
        )
        self.promote = positional(
            "WITH lk AS (SELECT pg_try_advisory_xact_lock(:lock ::bigint) AS got), "
            f"due AS (DELETE FROM {s} WHERE seq IN (SELECT x.seq FROM {s} x, lk "
            f"WHERE lk.got AND x.due_at <= {now} ORDER BY x.due_at, x.seq "
            "FOR UPDATE OF x SKIP LOCKED) RETURNING *), "
            "firsts AS (SELECT DISTINCT ON (group_id) group_id, priority, routing_key, "
            "max_in_flight, due_at, seq FROM due ORDER BY group_id, due_at, seq), "
            f"{pauses(names, targets_of('firsts', 'routing_key'))}, "
            f"g AS (INSERT INTO {g} (group_id, priority, routing_key, max_in_flight, "
            "last_claimed_at) SELECT f.group_id, f.priority, f.routing_key, f.max_in_flight, "
            f"{born(names, 'f.group_id', 'f.routing_key')} FROM firsts f "
            f"ORDER BY f.due_at, f.seq {upsert_group} RETURNING group_id), "
            f"moved AS (INSERT INTO {m} (group_id, event, enqueued_at, message_key) "
            f"SELECT d.group_id, d.event, {now}, d.message_key FROM due d "
            "JOIN g USING (group_id) ORDER BY d.due_at, d.seq RETURNING 1) "
            "SELECT count(*) FROM moved"
        )
        self.scheduled_count = positional(f"SELECT count(*), min(due_at) FROM {s}")
        self.purge = positional(f"DELETE FROM {s} WHERE group_id = :group_id")
        self.peek = positional(
            f"SELECT seq, group_id, event, due_at, message_key FROM {s} "
            "WHERE (:group_id ::text IS NULL OR group_id = :group_id ::text) "
            "ORDER BY due_at, seq LIMIT :limit"
        )

    def key_lock(self, key: str) -> int:
        """The advisory lock of ``key`` under this prefix (a signed 64-bit int)."""
        return _lock("harel_sa key", self.prefix, key)


def due_probe(names: Names, now: str) -> str:
    """A claim's select-list item: whether a scheduled message is due (the claim then
    promotes): the earliest due time, one step of the due index whatever the table's
    statistics say (an ``EXISTS`` planned as a scan read every far-future row)."""
    return f"coalesce((SELECT min(due.due_at) FROM {names.scheduled} due) <= {now}, false)"


@lru_cache(maxsize=64)
def scheduling_for(names: Names, now: str) -> SchedulingStatements:
    return SchedulingStatements(names, now)


def _now(clock: Any) -> float | None:
    return None if clock is None else clock()


def _due_params(due: Due | None) -> dict[str, Any]:
    at, delay = (None, 0.0) if due is None else due
    return {"at": at, "delay": delay}


def schedule(sc: SchedulingStatements, clock: Any, rows: list[Row], due: Due) -> One[None]:
    """Put ``rows`` (of one priority, routing key and max_in_flight, as a publish gives them)
    in the scheduled table, due at ``due``: one statement."""
    for group_id, _, _, routing_key, _ in rows:
        no_nul("group_id", group_id)
        no_nul("routing_key", routing_key)
    params = {
        "groups": [r[0] for r in rows],
        "events": [r[1] for r in rows],
        "priority": rows[0][2] if rows else 0,
        "routing_key": rows[0][3] if rows else None,
        "max_in_flight": rows[0][4] if rows else None,
        "key": None,
        "now": _now(clock),
        **_due_params(due),
    }
    return One(Query(sc.schedule, params), nothing)


def publish_keyed(
    sc: SchedulingStatements, clock: Any, row: Row, due: Due | None, key: str, replace: bool
) -> Locked[bool]:
    """A keyed publish: one statement under the key's lock, sent with it (one round trip)."""
    group_id, event, priority, routing_key, max_in_flight = row
    no_nul("group_id", group_id)
    no_nul("routing_key", routing_key)
    no_nul("key", key)
    params = {
        "group_id": group_id,
        "event": event,
        "priority": priority,
        "routing_key": routing_key,
        "max_in_flight": max_in_flight,
        "key": key,
        "replace": replace,
        "now": _now(clock),
        **_due_params(due),
    }
    statement = sc.publish_keyed if due is None else sc.schedule_keyed
    lock = Query(sc.lock, {"lock": sc.key_lock(key)})
    return Locked(lock, Query(statement, params), partial(_keyed, replace))


def _keyed(replace: bool, result: Result) -> bool | None:
    """Whether a keyed publish wrote; ``None``: look again (the waiting message it found
    was claimed or promoted before ``replace`` could change it)."""
    found, replaced, written = result.one()
    if written:
        return True
    if replace and found and not replaced:
        return None
    return False


def cancel(sc: SchedulingStatements, key: str) -> Locked[bool]:
    """Delete the waiting message(s) with ``key``: one statement under the key's lock."""
    no_nul("key", key)
    lock = Query(sc.lock, {"lock": sc.key_lock(key)})
    return Locked(lock, Query(sc.cancel, {"key": key}), _cancelled)


def _cancelled(result: Result) -> bool:
    return bool(result.rows[0][0] > 0)


def promote(sc: SchedulingStatements, clock: Any) -> Program[Statement, int]:
    """Move the due scheduled messages to their groups' tails; how many moved (0 when another
    session is promoting)."""
    done = yield Query(sc.promote, {"lock": sc.promote_lock, "now": _now(clock)})
    return int(done.rows[0][0])
