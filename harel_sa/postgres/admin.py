"""Operating the queue on PostgreSQL: what is in it, what is stuck, and the dead letters.

The admin operations, programs of statements as :mod:`~harel_sa.postgres.operations`' are, run
by either driver. Reads run in one snapshot (``stats``) or one statement, so their figures agree.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from harel_sa import rows
from harel_sa.models import DeadMessage, QueuedMessage, Stats
from harel_sa.postgres.compiled import Statement
from harel_sa.postgres.kinds import BEGIN_SNAPSHOT, BEGIN_WRITE, ClockOrServer, Op, now_param
from harel_sa.postgres.statements import Statements
from harel_sa.seam import Program, Query
from harel_sa.validate import no_nul


def stats(statements: Statements, clock: ClockOrServer) -> Op[Stats]:
    return Op(partial(_stats, statements, clock), begin=BEGIN_SNAPSHOT, retry_safe=True)


def _stats(st: Statements, clock: ClockOrServer) -> Program[Statement, Stats]:
    at = {"now": now_param(clock)}
    messages, in_flight, parked, now = (yield Query(st.counts, at)).one()
    oldest = (yield Query(st.oldest, {})).rows
    ready = (yield Query(st.oldest_ready, at)).rows
    scheduled, next_due = (yield Query(st.scheduling.scheduled_count, {})).one()
    stats = rows.stats(
        rows.as_is,
        now=now,
        counts=(messages, in_flight, parked),
        groups=(yield Query(st.group_count, {})).one()[0],
        dead=(yield Query(st.dead_count, {})).one()[0],
        oldest=oldest[0][0] if oldest else None,
        oldest_ready=ready[0][0] if ready else None,
        by_priority=(yield Query(st.by_priority, {})).rows,
        by_routing_key=(yield Query(st.by_routing_key, {})).rows,
        published=(yield Query(st.published, {})).one()[0],
        by_worker=(yield Query(st.by_worker, at)).rows,
    )
    dead_rows, oldest_transaction = (yield Query(st.vacuum_state, {})).one()
    paused = rows.pauses(rows.as_is, (yield Query(st.flow.paused, {})).rows)
    limits = rows.limits(rows.as_is, (yield Query(st.flow.backoffs, at)).rows)
    return stats.model_copy(
        update={
            "paused": paused,
            "limits": limits,
            "next_due": next_due,
            "scheduled": int(scheduled),
            "dead_rows": int(dead_rows),
            "oldest_transaction_age": oldest_transaction,
        }
    )


def peek(
    statements: Statements,
    clock: ClockOrServer,
    group_id: str | None,
    limit: int,
    scheduled: bool = False,
) -> Op[list[QueuedMessage]]:
    no_nul("group_id", group_id)
    begin = BEGIN_SNAPSHOT if scheduled else None
    return Op(partial(_peek, statements, clock, group_id, limit, scheduled), begin, retry_safe=True)


def _peek(
    st: Statements, clock: ClockOrServer, group_id: str | None, limit: int, scheduled: bool
) -> Program[Statement, list[QueuedMessage]]:
    found = yield Query(st.peek, {"group_id": group_id, "limit": limit, "now": now_param(clock)})
    queued = rows.queued(
        rows.as_is,
        [(*row[:6], _live(row[3], rows.expiry_of(row[4]), row[6]), *row[7:]) for row in found.rows],
    )
    if scheduled and len(queued) < limit:
        more = {"group_id": group_id, "limit": limit - len(queued)}
        queued += rows.scheduled(rows.as_is, (yield Query(st.scheduling.peek, more)).rows)
    return queued


def _live(locked_by: str | None, expiry: float | None, now: float) -> bool:
    # As the claim reads a row (statements.live_lease): no expiry has lapsed.
    return locked_by is not None and expiry is not None and expiry >= now


def release(statements: Statements, clock: ClockOrServer, group_id: str | None) -> Op[int]:
    no_nul("group_id", group_id)
    return Op(partial(_release, statements, clock, group_id), begin=BEGIN_WRITE)


def _release(st: Statements, clock: ClockOrServer, group_id: str | None) -> Program[Statement, int]:
    params = {"group_id": group_id, "now": now_param(clock)}
    released = (yield Query(st.end_parks, params)).rowcount
    yield Query(st.return_parked_groups, params)
    if released:
        yield Query(st.notify, {})
    return released


def purge(statements: Statements, group_id: str) -> Op[int]:
    no_nul("group_id", group_id)
    return Op(partial(_purge, statements, group_id), begin=BEGIN_WRITE)


def _purge(st: Statements, group_id: str) -> Program[Statement, int]:
    group = {"group_id": group_id}
    yield Query(st.purge_group, group)
    deleted = (yield Query(st.purge_messages, group)).rowcount
    return deleted + (yield Query(st.scheduling.purge, group)).rowcount


def _pick(group_id: str | None, seqs: tuple[int, ...] | None) -> dict[str, Any]:
    return {"group_id": group_id, "seqs": None if seqs is None else list(seqs)}


def dead(
    statements: Statements, group_id: str | None, seqs: tuple[int, ...] | None, limit: int
) -> Op[list[DeadMessage]]:
    no_nul("group_id", group_id)
    return Op(partial(_dead, statements, group_id, seqs, limit), retry_safe=True)


def _dead(
    st: Statements, group_id: str | None, seqs: tuple[int, ...] | None, limit: int
) -> Program[Statement, list[DeadMessage]]:
    found = yield Query(st.dead, {**_pick(group_id, seqs), "limit": limit})
    return rows.dead_messages(rows.as_is, found.rows)


def requeue_dead(
    statements: Statements, clock: ClockOrServer, group_id: str | None, seqs: tuple[int, ...] | None
) -> Op[int]:
    no_nul("group_id", group_id)
    return Op(partial(_requeue_dead, statements, clock, group_id, seqs), begin=BEGIN_WRITE)


def _requeue_dead(
    st: Statements, clock: ClockOrServer, group_id: str | None, seqs: tuple[int, ...] | None
) -> Program[Statement, int]:
    params = {**_pick(group_id, seqs), "now": now_param(clock)}
    yield Query(st.requeue_groups, params)
    moved = (yield Query(st.requeue, params)).rowcount
    yield Query(st.purge_dead, params)
    return moved


def purge_dead(
    statements: Statements, group_id: str | None, seqs: tuple[int, ...] | None
) -> Op[int]:
    no_nul("group_id", group_id)
    return Op(partial(_purge_dead, statements, group_id, seqs))


def _purge_dead(
    st: Statements, group_id: str | None, seqs: tuple[int, ...] | None
) -> Program[Statement, int]:
    return (yield Query(st.purge_dead, _pick(group_id, seqs))).rowcount
