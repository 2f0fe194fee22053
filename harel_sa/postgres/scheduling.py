"""PostgreSQL's statements and programs for scheduled and keyed messages.

A claim's statement says whether a scheduled message is due; the claim then runs
:func:`promote`, one statement moving every due message to its group's tail in due order, one
promotion per prefix at a time (``pg_try_advisory_xact_lock``), "now" the server's. A keyed
publish or cancel takes ``pg_advisory_xact_lock`` on a hash of (prefix, key), then looks in a
fresh statement: publishes of one key take turns, so a key never gets two waiting messages
from them (a unique index cannot span the two tables).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache, partial
from typing import Any

from harel_sa.postgres.statements import Statement, Statements, notify_sql, positional
from harel_sa.schema import Names
from harel_sa.seam import Due, Program, Query, Row
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
        self.schedule = positional(
            f"INSERT INTO {s} (group_id, event, due_at, priority, routing_key, message_key) "
            f"SELECT i.group_id, i.event, d.due_at, :priority ::bigint, :routing_key ::text, "
            ":key ::text FROM unnest(:groups ::text[], :events ::text[]) "
            f"WITH ORDINALITY AS i(group_id, event, n) CROSS JOIN (SELECT {when} AS due_at) d "
            "ORDER BY i.n"
        )
        self.lock = positional("SELECT pg_advisory_xact_lock(:lock ::bigint)")
        self.find_waiting = positional(
            f"SELECT 'm', seq FROM {m} WHERE message_key = :key ::text AND {_WAITING} "
            f"UNION ALL SELECT 's', seq FROM {s} WHERE message_key = :key ::text LIMIT 1"
        )
        self.insert_keyed = positional(
            f"WITH g AS (INSERT INTO {g} (group_id, priority, routing_key) "
            f"VALUES (:group_id, :priority, :routing_key ::text) {upsert_group} "
            "RETURNING group_id) "
            f"INSERT INTO {m} (group_id, event, enqueued_at, message_key) "
            f"SELECT group_id, :event, {now}, :key ::text FROM g "
            f"CROSS JOIN (SELECT {notify_sql(names)}) AS notified"
        )
        self.replace_queued = positional(
            f"UPDATE {m} SET event = :event WHERE seq = :seq AND {_WAITING}"
        )
        self.replace_scheduled = positional(
            f"UPDATE {s} SET event = :event, due_at = {when} WHERE seq = :seq"
        )
        self.cancel = positional(
            f"WITH q AS (DELETE FROM {m} WHERE message_key = :key ::text AND {_WAITING} "
            f"RETURNING seq), x AS (DELETE FROM {s} WHERE message_key = :key ::text "
            "RETURNING seq) SELECT (SELECT count(*) FROM q) + (SELECT count(*) FROM x)"
        )
        self.promote = positional(
            "WITH lk AS (SELECT pg_try_advisory_xact_lock(:lock ::bigint) AS got), "
            f"due AS (DELETE FROM {s} WHERE seq IN (SELECT x.seq FROM {s} x, lk "
            f"WHERE lk.got AND x.due_at <= {now} ORDER BY x.due_at, x.seq "
            "FOR UPDATE OF x SKIP LOCKED) RETURNING *), "
            "firsts AS (SELECT DISTINCT ON (group_id) group_id, priority, routing_key, "
            "due_at, seq FROM due ORDER BY group_id, due_at, seq), "
            f"g AS (INSERT INTO {g} (group_id, priority, routing_key) "
            "SELECT group_id, priority, routing_key FROM firsts ORDER BY due_at, seq "
            f"{upsert_group} RETURNING group_id), "
            f"moved AS (INSERT INTO {m} (group_id, event, enqueued_at, message_key) "
            f"SELECT d.group_id, d.event, {now}, d.message_key FROM due d "
            "JOIN g USING (group_id) ORDER BY d.due_at, d.seq RETURNING 1) "
            "SELECT count(*) FROM moved"
        )
        self.scheduled_count = positional(f"SELECT count(*) FROM {s}")
        self.peek = positional(
            f"SELECT seq, group_id, event, due_at FROM {s} "
            "WHERE (:group_id ::text IS NULL OR group_id = :group_id ::text) "
            "ORDER BY due_at, seq LIMIT :limit"
        )

    def key_lock(self, key: str) -> int:
        """The advisory lock of ``key`` under this prefix (a signed 64-bit int)."""
        return _lock("harel_sa key", self.prefix, key)


@lru_cache(maxsize=64)
def scheduling_for(names: Names, now: str) -> SchedulingStatements:
    return SchedulingStatements(names, now)


def _now(clock: Any) -> float | None:
    return None if clock is None else clock()


def _due_params(due: Due | None) -> dict[str, Any]:
    at, delay = (None, 0.0) if due is None else due
    return {"at": at, "delay": delay}


def schedule(st: Statements, clock: Any, rows: list[Row], due: Due) -> Any:
    """Put ``rows`` (one priority and routing key, as a publish gives them) in the scheduled
    table, due at ``due``: one statement."""
    from harel_sa.postgres.operations import One, _nothing

    for group_id, _, _, routing_key in rows:
        no_nul("group_id", group_id)
        no_nul("routing_key", routing_key)
    params = {
        "groups": [r[0] for r in rows],
        "events": [r[1] for r in rows],
        "priority": rows[0][2] if rows else 0,
        "routing_key": rows[0][3] if rows else None,
        "key": None,
        "now": _now(clock),
        **_due_params(due),
    }
    return One(Query(st.scheduling.schedule, params), _nothing)


def publish_keyed(
    st: Statements, clock: Any, row: Row, due: Due | None, key: str, replace: bool
) -> Any:
    from harel_sa.postgres.operations import BEGIN_WRITE, Op

    no_nul("group_id", row[0])
    no_nul("routing_key", row[3])
    no_nul("key", key)
    return Op(partial(_publish_keyed, st.scheduling, clock, row, due, key, replace), BEGIN_WRITE)


def _publish_keyed(
    sc: SchedulingStatements,
    clock: Any,
    row: Row,
    due: Due | None,
    key: str,
    replace: bool,
) -> Program[Statement, bool]:
    group_id, event, priority, routing_key = row
    yield Query(sc.lock, {"lock": sc.key_lock(key)})
    while True:
        found = (yield Query(sc.find_waiting, {"key": key})).rows
        if not found:
            break
        if not replace:
            return False
        where, seq = found[0]
        if where == "m":
            done = yield Query(sc.replace_queued, {"seq": seq, "event": event})
        else:
            params = {"seq": seq, "event": event, "now": _now(clock), **_due_params(due)}
            done = yield Query(sc.replace_scheduled, params)
        if done.rowcount == 1:
            return False
        # Claimed (or promoted) meanwhile: look again.
    if due is None:
        params = {
            "group_id": group_id,
            "event": event,
            "priority": priority,
            "routing_key": routing_key,
            "key": key,
            "now": _now(clock),
        }
        yield Query(sc.insert_keyed, params)
    else:
        params = {
            "groups": [group_id],
            "events": [event],
            "priority": priority,
            "routing_key": routing_key,
            "key": key,
            "now": _now(clock),
            **_due_params(due),
        }
        yield Query(sc.schedule, params)
    return True


def cancel(st: Statements, key: str) -> Any:
    from harel_sa.postgres.operations import BEGIN_WRITE, Op

    no_nul("key", key)
    return Op(partial(_cancel, st.scheduling, key), BEGIN_WRITE)


def _cancel(sc: SchedulingStatements, key: str) -> Program[Statement, bool]:
    yield Query(sc.lock, {"lock": sc.key_lock(key)})
    return bool((yield Query(sc.cancel, {"key": key})).rows[0][0] > 0)


def promote(st: Statements, clock: Any) -> Program[Statement, int]:
    """Move the due scheduled messages to their groups' tails; how many moved (0 when another
    session is promoting)."""
    sc = st.scheduling
    done = yield Query(sc.promote, {"lock": sc.promote_lock, "now": _now(clock)})
    return int(done.rows[0][0])
