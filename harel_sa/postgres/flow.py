"""Pauses and backoffs on PostgreSQL: their rules as SQL fragments (what a claim skips, where
a new group enters the rotation), their statements, and their operations.

As on SQLite (:mod:`harel_sa.sqlite.flow`), a pause moves its groups to
:data:`~harel_sa.flow.PAUSED_AT`, before the start of every claim's walk, and the control rows
decide. Each operation is two transactions, for what runs beside it: see :func:`pause` and
:func:`resume`.
"""

from __future__ import annotations

import time
from functools import partial

from harel_sa import rows
from harel_sa.flow import Target
from harel_sa.models import Limit, Pause
from harel_sa.postgres.compiled import Statement, notify_sql, positional
from harel_sa.postgres.kinds import ClockOrServer, Op, now_param
from harel_sa.schema import Names
from harel_sa.seam import Program, Query, Result
from harel_sa.validate import no_nul

#: :data:`~harel_sa.flow.PAUSED_AT` in PostgreSQL's spelling.
PAUSED = "'-Infinity'::float8"


def targets(group_id: str, routing_key: str) -> str:
    """The two control rows' keys of a group: its own and its routing key's."""
    return f"'group:' || {group_id}, coalesce('key:' || {routing_key}, 'key')"


def targets_of(rows: str, routing_key: str) -> str:
    """The control rows' keys of the groups of ``rows`` (a CTE with ``group_id``), whose
    routing key is ``routing_key`` (a column of ``rows``, or a parameter)."""
    return (
        f"SELECT 'group:' || group_id FROM {rows} "
        f"UNION ALL SELECT coalesce('key:' || {routing_key}, 'key') FROM {rows}"
    )


def held(names: Names, g: str, now: str) -> str:
    """The group row ``g`` is held back at ``now``: it or its routing key is paused, or its
    key backs off until after now."""
    return (
        f"EXISTS (SELECT 1 FROM {names.controls} c WHERE c.target IN "
        f"({targets(f'{g}.group_id', f'{g}.routing_key')}) "
        f"AND (c.paused_at IS NOT NULL OR c.backoff_until > {now}))"
    )


def pauses(names: Names, of: str) -> str:
    """The CTE ``pauses``: the paused rows among the keys ``of`` (a list or a select of
    them), held ``FOR KEY SHARE`` until the statement's transaction ends (see the module)."""
    return (
        f"pauses AS (SELECT c.target FROM {names.controls} c WHERE c.target IN ({of}) "
        "AND c.paused_at IS NOT NULL FOR KEY SHARE OF c)"
    )


def born(names: Names, group_id: str, routing_key: str) -> str:
    """A new group's ``last_claimed_at`` in a statement with :func:`pauses`: :data:`PAUSED`
    when it or its key is paused, else its key's backoff end (a past one is as good as 0)."""
    key = f"coalesce('key:' || {routing_key}, 'key')"
    return (
        f"CASE WHEN EXISTS (SELECT 1 FROM pauses p WHERE p.target IN "
        f"({targets(group_id, routing_key)})) THEN {PAUSED} ELSE coalesce((SELECT "
        f"c.backoff_until FROM {names.controls} c WHERE c.target = {key}), 0.0) END"
    )


def controlled(names: Names) -> str:
    """Whether any pause or backoff row exists (what :class:`Seen` is told)."""
    return f"EXISTS (SELECT 1 FROM {names.controls})"


#: How long a transport told that no control row exists sends the plain publishes.
TRUST = 1.0


class Seen:
    """What one transport's publishes last heard of the control rows: while none exist (and
    for :data:`TRUST` seconds after it heard so) it sends the publishes that do not read
    them. A group it makes meanwhile of a target paused since is held by the claims' look at
    the control rows all the same, from its place in the rotation; its own pauses, resumes
    and backoffs make it listen again at once."""

    __slots__ = ("none_until",)

    def __init__(self) -> None:
        self.none_until = 0.0

    def none(self) -> bool:
        return time.monotonic() < self.none_until

    def heard(self, result: Result) -> None:
        """A publish's answer (:func:`controlled`)."""
        self.none_until = 0.0 if result.rows[0][0] else time.monotonic() + TRUST

    def forget(self) -> None:
        self.none_until = 0.0


class FlowStatements:
    """The statements of pauses and backoffs under one prefix; "now" is ``now``'s SQL."""

    def __init__(self, names: Names, now: str) -> None:
        c, g = names.controls, names.groups
        self.pause = positional(
            f"WITH was AS (SELECT paused_at FROM {c} WHERE target = :target), "
            f"up AS (INSERT INTO {c} AS c (target, paused_at) VALUES (:target, {now}) "
            "ON CONFLICT (target) DO UPDATE SET paused_at = coalesce(c.paused_at, "
            "EXCLUDED.paused_at)) SELECT NOT EXISTS (SELECT 1 FROM was WHERE paused_at IS NOT NULL)"
        )
        # The row goes (a publish holding it FOR KEY SHARE is waited for); a backoff stays.
        self.unpause = positional(
            f"WITH gone AS (DELETE FROM {c} WHERE target = :target RETURNING *), "
            f"kept AS (INSERT INTO {c} (target, backoff_until) SELECT target, backoff_until "
            f"FROM gone WHERE backoff_until > {now}) "
            "SELECT EXISTS (SELECT 1 FROM gone WHERE paused_at IS NOT NULL)"
        )
        self.back_off = positional(
            f"INSERT INTO {c} AS c (target, backoff_until) VALUES (:target, {now} + :seconds) "
            "ON CONFLICT (target) DO UPDATE SET "
            "backoff_until = greatest(c.backoff_until, EXCLUDED.backoff_until) "
            "RETURNING backoff_until"
        )
        self.forget = positional(
            f"DELETE FROM {c} WHERE paused_at IS NULL "
            f"AND (backoff_until IS NULL OR backoff_until <= {now})"
        )
        which = (
            "CASE WHEN :group_id ::text IS NULL "
            "THEN routing_key IS NOT DISTINCT FROM :routing_key ::text "
            "ELSE group_id = :group_id ::text END"
        )
        self.date_paused = positional(
            f"UPDATE {g} SET last_claimed_at = {PAUSED} WHERE {which} "
            f"AND last_claimed_at > {PAUSED}"
        )
        self.date_resumed = positional(
            f"WITH moved AS (UPDATE {g} g SET last_claimed_at = greatest({now}, "
            f"coalesce((SELECT c.backoff_until FROM {c} c "
            "WHERE c.target = coalesce('key:' || g.routing_key, 'key')), 0.0)) "
            f"WHERE {which} AND g.last_claimed_at = {PAUSED} AND NOT EXISTS (SELECT 1 "
            f"FROM {c} c WHERE c.target IN ({targets('g.group_id', 'g.routing_key')}) "
            f"AND c.paused_at IS NOT NULL) RETURNING 1) SELECT {notify_sql(names)} "
            "FROM (SELECT count(*) AS n FROM moved) m WHERE m.n > 0"
        )
        self.date_backoff = positional(
            f"UPDATE {g} SET last_claimed_at = :until ::float8 "
            "WHERE routing_key IS NOT DISTINCT FROM :routing_key ::text "
            f"AND last_claimed_at > {PAUSED} AND last_claimed_at < :until ::float8"
        )
        self.paused = positional(
            f"SELECT target, paused_at FROM {c} WHERE paused_at IS NOT NULL "
            "ORDER BY paused_at, target"
        )
        self.backoffs = positional(
            f"SELECT target, backoff_until FROM {c} WHERE backoff_until > {now} "
            "AND target LIKE 'key%' ORDER BY target"
        )


def _which(target: Target, clock: ClockOrServer) -> dict[str, object]:
    no_nul("group_id", target.group_id)
    no_nul("routing_key", target.routing_key)
    return {
        "target": target.name,
        "group_id": target.group_id,
        "routing_key": target.routing_key,
        "now": now_param(clock),
    }


def pause(st: FlowStatements, clock: ClockOrServer, target: Target) -> Op[bool]:
    """Pause ``target``: its row, committed; then its groups moved. Each move waits for a claim
    holding the group, and a claim that meets a group after its move re-checks the moved row
    (``FOR UPDATE`` re-evaluates the walk's ``last_claimed_at`` condition), so nothing starts
    after it returns. A group a publish makes meanwhile is skipped by the claims' look at the
    control rows."""
    return Op(partial(_pause, st, _which(target, clock)))


def _pause(st: FlowStatements, which: dict[str, object]) -> Program[Statement, bool]:
    fresh = bool((yield Query(st.pause, which)).one()[0])
    yield Query(st.date_paused, which)
    return fresh


def resume(st: FlowStatements, clock: ClockOrServer, target: Target) -> Op[bool]:
    """End ``target``'s pause: its row deleted, then its groups moved back. A publish that made
    a group of a paused target holds the row ``FOR KEY SHARE`` (:func:`pauses`) until it
    commits, so the delete waits for it, and its group is moved back too: none stays where no
    claim's walk goes."""
    return Op(partial(_resume, st, _which(target, clock)))


def _resume(st: FlowStatements, which: dict[str, object]) -> Program[Statement, bool]:
    was = bool((yield Query(st.unpause, which)).one()[0])
    yield Query(st.date_resumed, which)
    return was


def backoff(st: FlowStatements, clock: ClockOrServer, target: Target, seconds: float) -> Op[float]:
    return Op(partial(_backoff, st, {**_which(target, clock), "seconds": seconds}))


def _backoff(st: FlowStatements, which: dict[str, object]) -> Program[Statement, float]:
    yield Query(st.forget, which)
    until = float((yield Query(st.back_off, which)).one()[0])
    yield Query(st.date_backoff, {**which, "until": until})
    return until


def paused(st: FlowStatements) -> Op[list[Pause]]:
    return Op(partial(_paused, st), retry_safe=True)


def _paused(st: FlowStatements) -> Program[Statement, list[Pause]]:
    return rows.pauses(rows.as_is, (yield Query(st.paused, {})).rows)


def limits(st: FlowStatements, clock: ClockOrServer) -> Op[dict[str | None, Limit]]:
    return Op(partial(_limits, st, {"now": now_param(clock)}), retry_safe=True)


def _limits(
    st: FlowStatements, at: dict[str, object]
) -> Program[Statement, dict[str | None, Limit]]:
    return rows.limits(rows.as_is, (yield Query(st.backoffs, at)).rows)
