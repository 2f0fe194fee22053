"""Operating the queue on PostgreSQL: what is in it, what is stuck, and the dead letters.

The admin operations, programs of statements as :mod:`~harel_sa.postgres.operations`' are, run
by either driver. Reads run in one snapshot (``stats``) or one statement, so their figures agree.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from harel_sa.models import DeadMessage, PriorityBucket, QueuedMessage, RoutingBucket, Stats
from harel_sa.postgres.operations import (
    SNAPSHOT,
    WRITE,
    Clock,
    Op,
    Program,
    Query,
    now_param,
)
from harel_sa.postgres.statements import Statements
from harel_sa.rules import PARKED
from harel_sa.validate import no_nul


def stats(statements: Statements, clock: Clock) -> Op[Stats]:
    return Op(partial(_stats, statements, clock), begin=SNAPSHOT, retry_safe=True)


def _stats(st: Statements, clock: Clock) -> Program[Stats]:
    at = {"now": now_param(clock)}
    messages, in_flight, parked, now = (yield Query(st.counts, at)).one()
    oldest = (yield Query(st.oldest, {})).rows
    ready = (yield Query(st.oldest_ready, at)).rows
    groups = (yield Query(st.group_count, {})).one()[0]
    dead = (yield Query(st.dead_count, {})).one()[0]
    by_priority = (yield Query(st.by_priority, {})).rows
    by_key = (yield Query(st.by_routing_key, {})).rows
    published = (yield Query(st.published, {})).one()[0]
    by_worker = (yield Query(st.by_worker, at)).rows
    return Stats(
        now=now,
        messages=messages,
        groups=groups,
        in_flight=in_flight,
        parked=parked,
        dead=dead,
        oldest_age=_age(oldest, now),
        by_priority=[PriorityBucket(priority=p, groups=g, messages=m) for p, g, m in by_priority],
        by_routing_key=[RoutingBucket(routing_key=k, groups=g, messages=m) for k, g, m in by_key],
        ready=messages - in_flight - parked,
        oldest_ready_age=_age(ready, now),
        published=published,
        leases_by_worker={str(w): n for w, n in by_worker},
    )


def _age(rows: list[tuple[Any, ...]], now: float) -> float | None:
    if not rows or rows[0][0] is None:  # an empty queue, or a row another program wrote
        return None
    return float(now - rows[0][0])


def peek(
    statements: Statements, clock: Clock, group_id: str | None, limit: int
) -> Op[list[QueuedMessage]]:
    no_nul("group_id", group_id)
    return Op(partial(_peek, statements, clock, group_id, limit), retry_safe=True)


def _peek(
    st: Statements, clock: Clock, group_id: str | None, limit: int
) -> Program[list[QueuedMessage]]:
    found = yield Query(st.peek, {"group_id": group_id, "limit": limit, "now": now_param(clock)})
    return [
        QueuedMessage(
            seq=seq,
            group_id=group,
            event=event,
            state=_state(locked_by, _number(expiry), now),
            locked_by=locked_by,
            lock_expiry=_number(expiry),
            deliveries=deliveries,
        )
        for seq, group, event, locked_by, expiry, deliveries, now in found.rows
    ]


def _number(expiry: float | None) -> float | None:
    """An expiry as the models show it: NaN (which only PostgreSQL stores) is no number."""
    return None if expiry is None or math.isnan(expiry) else expiry


def _state(locked_by: str | None, expiry: float | None, now: float) -> Any:
    # As the claim reads a row (statements.live_lease): no expiry has lapsed.
    if locked_by is None or expiry is None or expiry < now:
        return "ready"
    return "parked" if locked_by == PARKED else "leased"


def release(statements: Statements, clock: Clock, group_id: str | None) -> Op[int]:
    no_nul("group_id", group_id)
    return Op(partial(_release, statements, clock, group_id), begin=WRITE)


def _release(st: Statements, clock: Clock, group_id: str | None) -> Program[int]:
    params = {"group_id": group_id, "now": now_param(clock)}
    released = (yield Query(st.release, params)).rowcount
    yield Query(st.undefer, params)
    if released:
        yield Query(st.notify, {})
    return released


def purge(statements: Statements, group_id: str) -> Op[int]:
    no_nul("group_id", group_id)
    return Op(partial(_purge, statements, group_id), begin=WRITE)


def _purge(st: Statements, group_id: str) -> Program[int]:
    yield Query(st.purge_group, {"group_id": group_id})
    return (yield Query(st.purge_messages, {"group_id": group_id})).rowcount


def _pick(group_id: str | None, seqs: tuple[int, ...] | None) -> dict[str, Any]:
    return {"group_id": group_id, "seqs": None if seqs is None else list(seqs)}


def dead(
    statements: Statements, group_id: str | None, seqs: tuple[int, ...] | None, limit: int
) -> Op[list[DeadMessage]]:
    no_nul("group_id", group_id)
    return Op(partial(_dead, statements, group_id, seqs, limit), retry_safe=True)


def _dead(
    st: Statements, group_id: str | None, seqs: tuple[int, ...] | None, limit: int
) -> Program[list[DeadMessage]]:
    found = yield Query(st.dead, {**_pick(group_id, seqs), "limit": limit})
    return [
        DeadMessage(
            seq=r[0],
            group_id=r[1],
            event=r[2],
            error=r[3],
            dead_at=r[4],
            deliveries=r[5],
            priority=r[6],
            routing_key=r[7],
        )
        for r in found.rows
    ]


def requeue_dead(
    statements: Statements, clock: Clock, group_id: str | None, seqs: tuple[int, ...] | None
) -> Op[int]:
    no_nul("group_id", group_id)
    return Op(partial(_requeue_dead, statements, clock, group_id, seqs), begin=WRITE)


def _requeue_dead(
    st: Statements, clock: Clock, group_id: str | None, seqs: tuple[int, ...] | None
) -> Program[int]:
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


def _purge_dead(st: Statements, group_id: str | None, seqs: tuple[int, ...] | None) -> Program[int]:
    return (yield Query(st.purge_dead, _pick(group_id, seqs))).rowcount
