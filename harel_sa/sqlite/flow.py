"""Pauses and backoffs on SQLite: their rules as SQL fragments (what a claim skips, where a
new group enters the rotation), their statements, and their operations, each one transaction.

A pause moves its groups to :data:`~harel_sa.flow.PAUSED_AT`, where no claim's walk goes; a
backoff moves its key's groups to its end; a group made meanwhile (a publish, a promotion, a
requeue) enters at the same place (:func:`born`). Claims, publishes and these operations all
take SQLite's write lock, so the moves are exact: a claim looks at the control rows
(:func:`held`) only for a group dated into the future, and parks and releases leave a group
backing off where its backoff put it.
"""

from __future__ import annotations

import sqlite3

from harel_sa import rows
from harel_sa.flow import Target
from harel_sa.models import Limit, Pause
from harel_sa.schema import Names
from harel_sa.seam import Clock
from harel_sa.sqlite.compiled import named
from harel_sa.sqlite.driver import immediate_transaction, read_transaction

#: :data:`~harel_sa.flow.PAUSED_AT` as SQLite reads it (a REAL overflowing to -infinity).
PAUSED = "-9e999"


def _targets(group_id: str, routing_key: str) -> str:
    return f"'group:' || {group_id}, coalesce('key:' || {routing_key}, 'key')"


def held(names: Names, g: str) -> str:
    """The group row ``g`` is held back at ``:now``: it or its routing key is paused, or its
    key backs off until after now."""
    return (
        f"EXISTS (SELECT 1 FROM {names.controls} AS c WHERE c.target IN "
        f"({_targets(f'{g}.group_id', f'{g}.routing_key')}) "
        "AND (c.paused_at IS NOT NULL OR c.backoff_until > :now))"
    )


def born(names: Names, group_id: str, routing_key: str) -> str:
    """A new group's ``last_claimed_at``: :data:`PAUSED` when it or its routing key is paused,
    else its key's backoff end (a past one is as good as 0: its place among those claimed).
    Two lookups by key (an ``IN`` list would build a table for each publish)."""
    c = names.controls
    key = f"coalesce('key:' || {routing_key}, 'key')"
    return (
        f"CASE WHEN EXISTS (SELECT 1 FROM {c} AS c WHERE c.target = 'group:' || {group_id} "
        f"AND c.paused_at IS NOT NULL) THEN {PAUSED} ELSE coalesce((SELECT CASE WHEN "
        f"c.paused_at IS NOT NULL THEN {PAUSED} ELSE c.backoff_until END FROM {c} AS c "
        f"WHERE c.target = {key}), 0.0) END"
    )


class FlowStatements:
    """The statements of pauses and backoffs under one prefix."""

    def __init__(self, names: Names) -> None:
        c, g = names.controls, names.groups
        self.is_paused = named(
            f"SELECT 1 FROM {c} WHERE target = :target AND paused_at IS NOT NULL"
        )
        self.pause = named(
            f"INSERT INTO {c} (target, paused_at) VALUES (:target, :now) "
            "ON CONFLICT (target) DO UPDATE SET paused_at = coalesce(paused_at, excluded.paused_at)"
        )
        self.unpause = named(f"UPDATE {c} SET paused_at = NULL WHERE target = :target")
        self.back_off = named(
            f"INSERT INTO {c} (target, backoff_until) VALUES (:target, :until) "
            "ON CONFLICT (target) DO UPDATE SET "
            "backoff_until = max(coalesce(backoff_until, 0.0), excluded.backoff_until)"
        )
        self.backoff_until = named(f"SELECT backoff_until FROM {c} WHERE target = :target")
        # What no longer holds anything back.
        self.forget = named(
            f"DELETE FROM {c} WHERE paused_at IS NULL "
            "AND (backoff_until IS NULL OR backoff_until <= :now)"
        )
        which = (
            "(CASE WHEN :group_id IS NULL THEN routing_key IS :routing_key "
            "ELSE group_id = :group_id END)"
        )
        self.date_paused = named(
            f"UPDATE {g} SET last_claimed_at = {PAUSED} "
            f"WHERE {which} AND last_claimed_at > {PAUSED}"
        )
        # A resumed group enters the rotation as if claimed now (or when its key's backoff
        # ends), unless a pause of its key or of itself still holds it.
        self.date_resumed = named(
            f"UPDATE {g} SET last_claimed_at = max(:now, coalesce((SELECT c.backoff_until "
            f"FROM {c} AS c WHERE c.target = coalesce('key:' || {g}.routing_key, 'key')), 0.0)) "
            f"WHERE {which} AND last_claimed_at = {PAUSED} AND NOT EXISTS (SELECT 1 FROM {c} AS c "
            f"WHERE c.target IN ({_targets(f'{g}.group_id', f'{g}.routing_key')}) "
            "AND c.paused_at IS NOT NULL)"
        )
        self.date_backoff = named(
            f"UPDATE {g} SET last_claimed_at = :until WHERE routing_key IS :routing_key "
            f"AND last_claimed_at > {PAUSED} AND last_claimed_at < :until"
        )
        self.paused = named(
            f"SELECT CAST(target AS BLOB), paused_at FROM {c} WHERE paused_at IS NOT NULL "
            "ORDER BY paused_at, target"
        )
        self.backoffs = named(
            f"SELECT CAST(target AS BLOB), backoff_until FROM {c} "
            "WHERE backoff_until > :now ORDER BY target"
        )


def _which(target: Target) -> dict[str, object]:
    return {"target": target.name, "group_id": target.group_id, "routing_key": target.routing_key}


def pause(conn: sqlite3.Connection, st: FlowStatements, clock: Clock, target: Target) -> bool:
    """Pause ``target``; whether it was not paused before."""
    with immediate_transaction(conn):
        now = clock()
        was = conn.execute(st.is_paused, {"target": target.name}).fetchone() is not None
        conn.execute(st.pause, {"target": target.name, "now": now})
        conn.execute(st.date_paused, _which(target))
        return not was


def resume(conn: sqlite3.Connection, st: FlowStatements, clock: Clock, target: Target) -> bool:
    """End ``target``'s pause; whether it was paused."""
    with immediate_transaction(conn):
        now = clock()
        was = conn.execute(st.is_paused, {"target": target.name}).fetchone() is not None
        conn.execute(st.unpause, {"target": target.name})
        conn.execute(st.date_resumed, {**_which(target), "now": now})
        conn.execute(st.forget, {"now": now})
        return was


def backoff(
    conn: sqlite3.Connection, st: FlowStatements, clock: Clock, target: Target, seconds: float
) -> float:
    """Hold back ``target``'s (a routing key's) claims for ``seconds`` from now, or longer if a
    backoff already runs; returns the instant it ends."""
    with immediate_transaction(conn):
        now = clock()
        conn.execute(st.forget, {"now": now})
        conn.execute(st.back_off, {"target": target.name, "until": now + seconds})
        until = conn.execute(st.backoff_until, {"target": target.name}).fetchone()[0]
        conn.execute(st.date_backoff, {"routing_key": target.routing_key, "until": until})
        return float(until)


def paused(conn: sqlite3.Connection, st: FlowStatements) -> list[Pause]:
    with read_transaction(conn):
        return read_paused(conn, st)


def limits(conn: sqlite3.Connection, st: FlowStatements, clock: Clock) -> dict[str | None, Limit]:
    with read_transaction(conn):
        return read_limits(conn, st, clock())


def read_paused(conn: sqlite3.Connection, st: FlowStatements) -> list[Pause]:
    """What is paused, oldest first, in the caller's transaction."""
    return rows.pauses(rows.shown, conn.execute(st.paused))


def read_limits(
    conn: sqlite3.Connection, st: FlowStatements, now: float
) -> dict[str | None, Limit]:
    """The routing keys held back at ``now``, in the caller's transaction."""
    return rows.limits(rows.shown, conn.execute(st.backoffs, {"now": now}))
