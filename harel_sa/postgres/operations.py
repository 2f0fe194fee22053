"""The queue's operations on PostgreSQL, each written once as a program of statements.

An operation is an :class:`Op`: a generator that yields :class:`Query` steps (a statement of
:mod:`harel_sa.postgres.statements` and its parameters), receives each one's :class:`Result`,
and returns the operation's value; or a :class:`One`, a single statement sent alone. The sync
transport runs either on a pooled psycopg connection, the async twin on an async one; neither
holds any logic of its own. Most operations are one statement in autocommit (one round trip,
one commit); those of several run in one transaction. Arguments arrive validated, and every text
argument is checked for NUL (:func:`harel_sa.validate.no_nul`) before any statement is sent.
"""

from __future__ import annotations

from functools import partial
from typing import Any, TypeVar

from harel_sa.events import Lease, tokens
from harel_sa.postgres import scheduling
from harel_sa.postgres.compiled import Statement
from harel_sa.postgres.flow import Seen
from harel_sa.postgres.kinds import (
    BEGIN_WRITE,
    ClockOrServer,
    One,
    Op,
    nothing,
    now_param,
)
from harel_sa.postgres.statements import Statements, batch_size
from harel_sa.rules import BATCH_MAX, MAX_ERROR, exhausted, warn_dead_at_claim
from harel_sa.seam import ClaimSpec, Program, Query, Result, Row
from harel_sa.validate import no_nul

T = TypeVar("T")


def _took_one(result: Result) -> bool:
    """A statement that counts what it took (``SELECT count(*) FROM ...``) took one row."""
    return bool(result.rows[0][0] == 1)


def _changed_one(result: Result) -> bool:
    """A fenced ``UPDATE`` (or one row per row changed) changed one row."""
    return result.rowcount == 1


def publish(
    statements: Statements, clock: ClockOrServer, rows: list[Row], seen: Seen | None = None
) -> Op[None] | One[None]:
    """Append :data:`~harel_sa.seam.Row`\\ s, all or none; with
    ``seen``, in the plain form while it knows of no control row (:class:`~harel_sa.postgres.
    flow.Seen`), telling it what the other form says."""
    for group_id, _, _, routing_key, _ in rows:
        no_nul("group_id", group_id)
        no_nul("routing_key", routing_key)
    if len(rows) == 1:
        return publish_one(statements, clock, rows[0], seen)
    if not rows:
        return Op(partial(_returns, None))
    kinds = _kinds(rows)
    if len(kinds) == 1:
        kind, chosen = next(iter(kinds.items()))
        plain = seen is not None and seen.none()
        query = _publish_kind(statements, clock, kind, chosen, plain)
        return One(query, nothing if plain or seen is None else seen.heard)
    return Op(partial(_publish_many, statements, clock, kinds), begin=BEGIN_WRITE)


def publish_one(
    statements: Statements, clock: ClockOrServer, row: Row, seen: Seen | None = None
) -> One[None]:
    """Append one :data:`~harel_sa.seam.Row` (``seen`` as for :func:`publish`)."""
    group_id, event, priority, routing_key, max_in_flight = row
    params = {
        "group_id": group_id,
        "event": event,
        "priority": priority,
        "routing_key": routing_key,
        "max_in_flight": max_in_flight,
        "now": now_param(clock),
    }
    if seen is not None and seen.none():
        return One(Query(statements.publish_plain, params), nothing)
    return One(Query(statements.publish, params), nothing if seen is None else seen.heard)


#: What the first publish of a group fixes: its priority, routing key and max_in_flight.
Kind = tuple[int, str | None, int | None]


def _kinds(rows: list[Row]) -> dict[Kind, list[Row]]:
    """The rows by :data:`Kind`, in order: one statement each."""
    kinds: dict[Kind, list[Row]] = {}
    for row in rows:
        kinds.setdefault(row[2:], []).append(row)
    return kinds


def _publish_kind(
    st: Statements,
    clock: ClockOrServer,
    kind: Kind,
    rows: list[Row],
    plain: bool = False,
) -> Query[Statement]:
    priority, routing_key, max_in_flight = kind
    params = {
        "groups": [r[0] for r in rows],
        "events": [r[1] for r in rows],
        "priority": priority,
        "routing_key": routing_key,
        "max_in_flight": max_in_flight,
        "now": now_param(clock),
    }
    return Query(st.publish_many_plain if plain else st.publish_many, params)


def _publish_many(
    st: Statements, clock: ClockOrServer, kinds: dict[Kind, list[Row]]
) -> Program[Statement, None]:
    for kind, chosen in kinds.items():
        yield _publish_kind(st, clock, kind, chosen)


def claim(statements: Statements, clock: ClockOrServer, spec: ClaimSpec) -> Op[Lease[Any] | None]:
    """Lease the head of the next group in round-robin order, or return ``None``.

    One statement in autocommit. A head that does not decode, or was delivered
    ``max_deliveries`` times already, is moved to the dead table (fenced by the lease just
    taken) and the claim goes on, so no head wedges its group. A floor above every priority
    (``spec.claims_nothing``) sends no statement and returns ``None``.
    """
    _no_nul_in(spec)
    if spec.claims_nothing:
        return Op(partial(_returns, None))
    return Op(partial(_claim, statements, clock, spec))


def _no_nul_in(spec: ClaimSpec) -> None:
    # The routing keys go as an array, which psycopg sends even holding NUL (a batch's worker
    # id too, in its locks): the server would refuse them mid-transaction, as a StorageError.
    no_nul("worker_id", spec.worker_id)
    for key in spec.routing_keys:
        no_nul("routing key", key)


def _returns(value: T) -> Program[Statement, T]:
    """A program that sends no statement and returns ``value`` (a claim no group can meet)."""
    yield from ()
    return value


def ack_and_claim(
    statements: Statements, clock: ClockOrServer, lease: Lease[Any], spec: ClaimSpec
) -> Op[tuple[bool, Lease[Any] | None]]:
    """:func:`ack` ``lease`` and :func:`claim` the next message in one transaction."""
    _no_nul_in(spec)
    if spec.claims_nothing:  # the ack alone: one statement in autocommit
        return Op(partial(_acked_alone, statements, lease))
    return Op(partial(_ack_and_claim, statements, clock, lease, spec), begin=BEGIN_WRITE)


def _acked_alone(
    st: Statements, lease: Lease[Any]
) -> Program[Statement, tuple[bool, Lease[Any] | None]]:
    return (yield from _ack(st, lease)), None


def _ack_and_claim(
    st: Statements, clock: ClockOrServer, lease: Lease[Any], spec: ClaimSpec
) -> Program[Statement, tuple[bool, Lease[Any] | None]]:
    acked = yield from _ack(st, lease)
    following = yield from _claim(st, clock, spec)
    return acked, following


def claim_many(
    statements: Statements, clock: ClockOrServer, spec: ClaimSpec, limit: int
) -> Op[list[Lease[Any]]]:
    """Up to ``limit`` leases in one transaction: what ``limit`` successive :func:`claim` calls
    return, in the same order, on distinct groups, each with a token of its own.

    One statement leases them all (up to :data:`~harel_sa.rules.BATCH_MAX` at a
    time). A head it leased that a claim would dead-letter is buried as :func:`claim` buries
    it; the leases after it go back as they were and are claimed again, as the claims after
    that one would have walked anew."""
    _no_nul_in(spec)
    if spec.claims_nothing:
        return Op(partial(_returns, []))
    return Op(partial(_claim_many, statements, clock, spec, limit), begin=BEGIN_WRITE)


def ack_many(statements: Statements, leases: tuple[Lease[Any], ...]) -> Op[list[bool]]:
    """:func:`ack` each lease, all in one transaction; each is fenced on its own. One statement
    for up to :data:`~harel_sa.rules.BATCH_MAX` leases (then in autocommit)."""
    several = len(leases) > BATCH_MAX
    return Op(partial(_ack_many, statements, leases), begin=BEGIN_WRITE if several else None)


def ack_many_and_claim_many(
    statements: Statements,
    clock: ClockOrServer,
    leases: tuple[Lease[Any], ...],
    spec: ClaimSpec,
    limit: int,
) -> Op[tuple[list[bool], list[Lease[Any]]]]:
    """:func:`ack_many` ``leases``, then :func:`claim_many`, in one transaction."""
    _no_nul_in(spec)
    if spec.claims_nothing:  # the acks alone, as ack_many sends them
        several = len(leases) > BATCH_MAX
        return Op(
            partial(_acked_many_alone, statements, leases), begin=BEGIN_WRITE if several else None
        )
    return Op(
        partial(_ack_many_and_claim_many, statements, clock, leases, spec, limit), begin=BEGIN_WRITE
    )


def _acked_many_alone(
    st: Statements, leases: tuple[Lease[Any], ...]
) -> Program[Statement, tuple[list[bool], list[Lease[Any]]]]:
    return (yield from _ack_many(st, leases)), []


def _ack_many(st: Statements, leases: tuple[Lease[Any], ...]) -> Program[Statement, list[bool]]:
    """The acks of ``leases``, as if one after the other: a statement deletes the messages the
    leases of a chunk hold and drops the groups they emptied. A lease given twice takes once
    (its first time); of a stale and a live lease of one message, the live one takes."""
    if not leases:
        return []
    if len(leases) == 1:
        return [(yield from _ack(st, leases[0]))]
    # The chunks in group_id order: each statement locks its groups' rows in that order, so
    # two batches of acks never wait on each other in a cycle. A publish_many locks its
    # groups in the order they first appear; should it and a batch close a cycle, PostgreSQL
    # aborts one of them, raised as BusyError (a retry is safe: the transaction changed
    # nothing).
    ordered = sorted(leases, key=_group_of) if len(leases) > BATCH_MAX else leases
    deleted: set[tuple[int, str]] = set()
    for start in range(0, len(ordered), BATCH_MAX):
        chunk = ordered[start : start + BATCH_MAX]
        size = batch_size(len(chunk))
        keys: list[Any] = []
        for lease in chunk:
            keys += (lease.seq, lease.locked_by)
        keys += keys[-2:] * (size - len(chunk))  # the last pair again: deleted once
        done = yield Query(st.acks(size), {"keys": keys})
        deleted.update(done.rows)
    took = []
    for lease in leases:
        key = (lease.seq, lease.locked_by)
        took.append(key in deleted)
        deleted.discard(key)
    return took


def _group_of(lease: Lease[Any]) -> str:
    return lease.group_id


def _claim_many(
    st: Statements, clock: ClockOrServer, spec: ClaimSpec, limit: int
) -> Program[Statement, list[Lease[Any]]]:
    if limit == 1:
        lease = yield from _claim(st, clock, spec)
        return [] if lease is None else [lease]
    worker_id = spec.worker_id
    leases: list[Lease[Any]] = []
    while len(leases) < limit:
        want = min(limit - len(leases), BATCH_MAX)
        taken = [tokens.next() for _ in range(want)]
        locks = [f"{worker_id}#{token}" for token in taken]  # in rotation order
        params = {
            "limit": want,
            "tokens": locks,
            "visibility": spec.visibility,
            "min_priority": spec.min_priority,
            "keys": list(spec.routing_keys),
            "now": now_param(clock),
        }
        select = st.claim_many(spec.min_priority, len(spec.routing_keys), batch_size(want))
        rows = (yield Query(select, params)).rows
        if rows and rows[0][7]:  # a scheduled message is due: it joins its group's tail now
            yield from scheduling.promote(st.scheduling, clock)
        for i, row in enumerate(rows):
            seq, group_id, raw, deliveries = row[0], row[1], row[2], row[3]
            # Any error but a decoding one (an event type whose validation raises something
            # else) ends the program: the driver rolls the transaction back, every lease the
            # call took with it, before the caller sees the error.
            event, error = _event_of(spec, raw, deliveries)
            if error is not None:
                # As successive claims: this head is buried, its group back in its place;
                # the claims after it walk again (the group's next message may come first),
                # so the leases after it go back as they were, to be claimed anew.
                after = list(zip(rows[i + 1 :], locks[i + 1 :], strict=False))
                if after:
                    yield _untake(st, after)
                yield from _bury(st, clock, seq, locks[i], error, 1)
                yield Query(st.untouch, {"group_id": group_id, "before": row[4]})
                warn_dead_at_claim(seq, group_id, error, worker_id)
                break
            leases.append(Lease(seq, group_id, event, worker_id, taken[i], deliveries))
        else:
            # No other group is leasable, unless scheduled messages due now (promoted above,
            # or found by a promotion of its own) make one.
            if len(rows) < want:
                if rows and not rows[0][7]:
                    break
                if not rows and not (yield from scheduling.promote(st.scheduling, clock)):
                    break
    return leases


def _untake(st: Statements, rows: list[tuple[tuple[Any, ...], str]]) -> Query[Statement]:
    """Give back the leases a batch's claim took on ``rows`` (each with its ``locked_by``)
    exactly as the rows were: see ``Statements.untake``."""
    return Query(
        st.untake,
        {
            "seqs": [row[0] for row, _ in rows],
            "locked_by": [locked_by for _, locked_by in rows],
            "was_by": [row[5] for row, _ in rows],
            "was_expiry": [row[6] for row, _ in rows],
            "group_ids": [row[1] for row, _ in rows],
            "before": [row[4] for row, _ in rows],
        },
    )


def _ack_many_and_claim_many(
    st: Statements,
    clock: ClockOrServer,
    leases: tuple[Lease[Any], ...],
    spec: ClaimSpec,
    limit: int,
) -> Program[Statement, tuple[list[bool], list[Lease[Any]]]]:
    acked = yield from _ack_many(st, leases)
    claimed = yield from _claim_many(st, clock, spec, limit)
    return acked, claimed


def _claim(
    st: Statements, clock: ClockOrServer, spec: ClaimSpec
) -> Program[Statement, Lease[Any] | None]:
    select = st.claim(spec.min_priority, len(spec.routing_keys))
    while True:
        token = tokens.next()
        locked_by = f"{spec.worker_id}#{token}"
        params = {
            "locked_by": locked_by,
            "visibility": spec.visibility,
            "min_priority": spec.min_priority,
            "keys": list(spec.routing_keys),
            "now": now_param(clock),
        }
        found = yield Query(select, params)
        if not found.rows:
            # Nothing to lease: scheduled messages due now may make something leasable.
            if (yield from scheduling.promote(st.scheduling, clock)):
                continue
            return None
        seq, group_id, raw, deliveries, before, due = found.one()
        if due:  # a scheduled message is due: it joins its group's tail now
            yield from scheduling.promote(st.scheduling, clock)
        try:
            event, error = _event_of(spec, raw, deliveries)
        except GeneratorExit:
            raise
        except BaseException:
            # The lease committed with the statement: give it back, uncounted, before the
            # caller sees the error (an event type whose validation raises something else).
            yield Query(st.give_back, {"seq": seq, "locked_by": locked_by})
            raise
        if error is not None:
            yield from _bury(st, clock, seq, locked_by, error, 1)
            warn_dead_at_claim(seq, group_id, error, spec.worker_id)
            yield Query(st.untouch, {"group_id": group_id, "before": before})
            continue
        return Lease(seq, group_id, event, spec.worker_id, token, deliveries)


def _event_of(spec: ClaimSpec, raw: Any, deliveries: int) -> tuple[Any, str | None]:
    """The event of a head a claim just leased (``deliveries`` counts that lease), or why the
    claim buries the head instead (``(None, error)``): delivered ``max_deliveries`` times
    already, or its event does not decode."""
    too_often = exhausted(deliveries - 1, spec.max_deliveries)
    if too_often is not None:
        return None, too_often
    try:
        # ``model_validate_json`` without its Python wrapper, as SQLite's claim decodes.
        return spec.event_type.__pydantic_validator__.validate_json(raw), None
    except ValueError as exc:
        return None, f"undecodable event: {exc}"


def _bury(
    st: Statements, clock: ClockOrServer, seq: int, locked_by: str, error: str, uncount: int
) -> Program[Statement, bool]:
    return _took_one((yield _bury_query(st, clock, seq, locked_by, error, uncount)))


def _bury_query(
    st: Statements, clock: ClockOrServer, seq: int, locked_by: str, error: str, uncount: int
) -> Query[Statement]:
    params = {
        "seq": seq,
        "locked_by": locked_by,
        "error": error[:MAX_ERROR],
        "uncount": uncount,
        "now": now_param(clock),
    }
    return Query(st.bury, params)


def ack(statements: Statements, lease: Lease[Any]) -> One[bool]:
    """Delete the leased message (and its group once empty); ``False`` if the lease was lost."""
    return One(_ack_query(statements, lease), _took_one)


def _ack(st: Statements, lease: Lease[Any]) -> Program[Statement, bool]:
    return _took_one((yield _ack_query(st, lease)))


def _ack_query(st: Statements, lease: Lease[Any]) -> Query[Statement]:
    params = {"group_id": lease.group_id, "seq": lease.seq, "locked_by": lease.locked_by}
    return Query(st.ack, params)


def _fenced(statement: Statement, lease: Lease[Any], **more: Any) -> One[bool]:
    """``statement`` on the leased message, fenced by the lease: whether it changed it."""
    params = {"seq": lease.seq, "locked_by": lease.locked_by, **more}
    return One(Query(statement, params), _changed_one)


def give_back(statements: Statements, lease: Lease[Any]) -> One[bool]:
    """Undo a claim whose caller never received the lease (its delivery uncounted)."""
    return _fenced(statements.give_back, lease)


def nack(
    statements: Statements, clock: ClockOrServer, lease: Lease[Any], delay: float
) -> One[bool]:
    """Free the message now (``delay == 0``) or park it, blocking its group, for ``delay``."""
    if delay == 0:
        return _fenced(statements.free, lease)
    params = {
        "seq": lease.seq,
        "locked_by": lease.locked_by,
        "delay": delay,
        "now": now_param(clock),
    }
    return One(Query(statements.park, params), _took_one)


def extend(
    statements: Statements, clock: ClockOrServer, lease: Lease[Any], visibility: float
) -> One[bool]:
    """Move the lease's expiry to now + ``visibility``; ``False`` if the lease was lost."""
    return _fenced(statements.extend, lease, visibility=visibility, now=now_param(clock))


def dead_letter(
    statements: Statements, clock: ClockOrServer, lease: Lease[Any], reason: str
) -> One[bool]:
    """Move the leased message to the dead table; ``False`` if the lease was lost."""
    no_nul("reason", reason)
    return One(_bury_query(statements, clock, lease.seq, lease.locked_by, reason, 0), _took_one)


def identity(statements: Statements) -> One[tuple[Any, ...]]:
    """What the transport's connection says of its database (:data:`~harel_sa.postgres.
    statements.IDENTITY`), to compare an application's connection with."""
    return One(Query(statements.identity, {}), lambda result: tuple(result.one()), retry_safe=True)
