"""The queue's operations, each one short SQLite transaction on a driver connection.

Written once: the sync transport calls these on its sqlite3 connection, the async twin runs the
very same functions inside aiosqlite's thread (one hop per operation). Arguments arrive already
validated (:mod:`harel_sa.seam`). Each operation takes SQLite's write lock first
(:class:`~harel_sa.sqlite.driver.immediate_transaction`), so claims from every process
serialize, and rolls back on any exception, ``BaseException`` included.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from harel_sa.events import Lease, tokens
from harel_sa.rules import BATCH_MAX, MAX_ERROR, exhausted, warn_dead_at_claim
from harel_sa.seam import ClaimSpec, Clock, Due, Row
from harel_sa.sqlite import scheduling
from harel_sa.sqlite.driver import immediate_transaction
from harel_sa.sqlite.statements import Statements


def publish(
    conn: sqlite3.Connection,
    statements: Statements,
    clock: Clock,
    rows: list[Row],
) -> None:
    """Append :data:`~harel_sa.seam.Row`\\ s, all in one transaction,
    each enqueued at the clock's now.

    A message and its group row commit together: no crash leaves a message without a group.
    """
    with immediate_transaction(conn):
        now = clock()
        for group_id, event, *group in rows:
            conn.execute(statements.insert_message, (group_id, event, now))
            conn.execute(statements.insert_group, (group_id, *group))


def schedule(
    conn: sqlite3.Connection, statements: Statements, clock: Clock, rows: list[Row], due: Due
) -> None:
    """Put ``rows`` in the scheduled table, due at ``due``, in one transaction."""
    with immediate_transaction(conn):
        program = scheduling.schedule(statements.scheduling, clock(), rows, due)
        scheduling.run_program(conn, program)


def publish_keyed(
    conn: sqlite3.Connection,
    statements: Statements,
    clock: Clock,
    row: Row,
    due: Due | None,
    key: str,
    replace: bool,
) -> bool:
    """:func:`harel_sa.sqlite.scheduling.publish_keyed` in one transaction: its look and its
    write under one write lock, so one key never gets two waiting messages from publishes."""
    with immediate_transaction(conn):
        if not replace:
            return scheduling.keep(conn, statements.scheduling, clock(), row, due, key)
        program = scheduling.publish_keyed(statements.scheduling, clock(), row, due, key, replace)
        return bool(scheduling.run_program(conn, program))


def cancel(conn: sqlite3.Connection, statements: Statements, key: str) -> bool:
    """Delete the waiting message with ``key``; whether there was one."""
    with immediate_transaction(conn):
        return bool(scheduling.run_program(conn, scheduling.cancel(statements.scheduling, key)))


def claim(
    conn: sqlite3.Connection, statements: Statements, clock: Clock, spec: ClaimSpec
) -> Lease[Any] | None:
    """Lease the head of the next group in round-robin order, or return ``None``.

    The event is decoded before COMMIT: a row that does not decode, or has been delivered
    ``max_deliveries`` times, is moved to the dead table in the same transaction and the claim
    goes on to the next deliverable message, so no head wedges its group. A floor above
    every priority (``spec.claims_nothing``) returns ``None`` without a transaction.
    """
    if spec.claims_nothing:
        return None
    with immediate_transaction(conn):
        return _claim(conn, statements, clock(), spec)


def ack_and_claim(
    conn: sqlite3.Connection,
    statements: Statements,
    clock: Clock,
    lease: Lease[Any],
    spec: ClaimSpec,
) -> tuple[bool, Lease[Any] | None]:
    """:func:`ack` ``lease`` and :func:`claim` the next message in one write transaction."""
    if spec.claims_nothing:
        return ack(conn, statements, lease), None
    with immediate_transaction(conn):
        return _ack(conn, statements, lease), _claim(conn, statements, clock(), spec)


def claim_many(
    conn: sqlite3.Connection, statements: Statements, clock: Clock, spec: ClaimSpec, limit: int
) -> list[Lease[Any]]:
    """Up to ``limit`` leases, in one write transaction: exactly what ``limit`` successive
    :func:`claim` calls at the same instant return, in the same order.

    Each claim leases a group's head, so the next one finds that group in flight and moves on:
    the leases are on distinct groups, in round-robin order, each with a token of its own.
    """
    if spec.claims_nothing:
        return []
    with immediate_transaction(conn):
        return _claim_many(conn, statements, clock(), spec, limit)


def ack_many(
    conn: sqlite3.Connection, statements: Statements, leases: tuple[Lease[Any], ...]
) -> list[bool]:
    """:func:`ack` each lease, all in one write transaction; each is fenced on its own."""
    if not leases:
        return []
    with immediate_transaction(conn):
        return _ack_many(conn, statements, leases)


def ack_many_and_claim_many(
    conn: sqlite3.Connection,
    statements: Statements,
    clock: Clock,
    leases: tuple[Lease[Any], ...],
    spec: ClaimSpec,
    limit: int,
) -> tuple[list[bool], list[Lease[Any]]]:
    """:func:`ack_many` ``leases``, then :func:`claim_many`, in one write transaction."""
    if spec.claims_nothing:
        return ack_many(conn, statements, leases), []
    with immediate_transaction(conn):
        acked = _ack_many(conn, statements, leases)
        return acked, _claim_many(conn, statements, clock(), spec, limit)


def _claim_many(
    conn: sqlite3.Connection, statements: Statements, now: float, spec: ClaimSpec, limit: int
) -> list[Lease[Any]]:
    # One select reads the first ``limit`` groups' heads and leases them together, up to the
    # first row a claim would set aside instead (a group without messages, a head to
    # dead-letter): from there, claims one by one do what successive claims do.
    leases: list[Lease[Any]] = []
    if limit > 1:
        keys = spec.routing_keys
        select = statements.claim_up_to(spec.min_priority, len(keys))
        rows = conn.execute(select, (now, *keys, limit)).fetchall()
        # A scheduled message due now joins its group first (each row says whether one is;
        # without rows, a probe of its own).
        sched = statements.scheduling
        promoted = bool(rows) and rows[0][6] is not None
        if promoted:
            scheduling.promote(conn, sched, now)
        elif not rows:
            promoted = scheduling.promote_if_due(conn, sched, now)
        if promoted:
            rows = conn.execute(select, (now, *keys, limit)).fetchall()
        for row in rows:
            lease = _lease_of(row, spec)
            if isinstance(lease, str):
                break
            leases.append(lease)
        else:  # each row leased; fewer than ``limit``: no other group is eligible
            _hold(conn, statements, now, spec, leases, rows)
            return leases
        _hold(conn, statements, now, spec, leases, rows)
    while len(leases) < limit and (one := _claim(conn, statements, now, spec)) is not None:
        leases.append(one)
    return leases


def _claim(
    conn: sqlite3.Connection, statements: Statements, now: float, spec: ClaimSpec
) -> Lease[Any] | None:
    keys = spec.routing_keys
    select = statements.claim(spec.min_priority, len(keys))
    params = (now, *keys) if keys else (now,)
    while True:
        row = conn.execute(select, params).fetchone()
        if row is None:
            # Nothing to lease: the scheduled messages due now may make something leasable.
            if scheduling.promote_if_due(conn, statements.scheduling, now):
                continue
            return None
        if row[6] is not None:  # a scheduled message is due: it joins its group first
            scheduling.promote(conn, statements.scheduling, now)
            continue
        lease = _lease_of(row, spec)
        if isinstance(lease, str):
            _set_aside(conn, statements, now, row, lease, spec.worker_id)
            continue
        # _hold's statements for one row, without its loop (a single claim's hot path)
        conn.execute(statements.mark_claimed(1), (now, row[5]))
        expiry = now + spec.visibility
        conn.execute(statements.lease(1), (lease.seq, lease.locked_by, expiry))
        return lease


def _lease_of(row: Any, spec: ClaimSpec) -> Lease[Any] | str:
    """The lease a claim's ``row`` gives (its event decoded), or why the claim sets the row
    aside instead: ``""`` for a group row without messages, else the error its message is
    dead-lettered with."""
    seq, group, raw, deliveries = row[0], row[1], row[2], row[3]
    if seq is None:
        return ""
    too_often = exhausted(deliveries, spec.max_deliveries)
    if too_often is not None:
        return too_often
    try:
        group_id = group.decode()
    except UnicodeDecodeError as exc:
        return f"undecodable group_id: {exc}"
    try:  # as text, so an error shows the row as it reads (not UTF-8 is a ValueError too)
        # ``model_validate_json`` without its Python wrapper (one frame and five keywords).
        event = spec.event_type.__pydantic_validator__.validate_json(raw.decode())
    except ValueError as exc:
        return f"undecodable event: {exc}"
    return Lease(seq, group_id, event, spec.worker_id, tokens.next(), deliveries + 1)


def _set_aside(
    conn: sqlite3.Connection, statements: Statements, now: float, row: Any, why: str, by: str
) -> None:
    """What a claim (by worker ``by``) does with a row it does not lease: a group row without
    messages is deleted (with its empty successors), a message is moved to the dead table with
    ``why``."""
    if why:
        move_to_dead_letters(conn, statements, row[0], now, why)
        warn_dead_at_claim(row[0], row[1].decode(errors="replace"), why, by)
    else:
        conn.execute(statements.drop_empty_groups, {"last_claimed_at": row[4], "grow": row[5]})


def _hold(
    conn: sqlite3.Connection,
    statements: Statements,
    now: float,
    spec: ClaimSpec,
    leases: list[Lease[Any]],
    rows: list[Any],
) -> None:
    """Write ``leases`` (each a group's head, taken at ``now``; the first of ``rows``, the
    claim's select's, read them): the groups marked claimed, the messages leased."""
    expiry = now + spec.visibility
    for start in range(0, len(leases), BATCH_MAX):
        chunk = leases[start : start + BATCH_MAX]
        n = len(chunk)
        groups = [row[5] for row in rows[start : start + n]]  # their rowids
        conn.execute(statements.mark_claimed(n), (now, *groups))
        holders: list[Any] = []
        for lease in chunk:
            holders += (lease.seq, lease.locked_by)
        holders.append(expiry)
        conn.execute(statements.lease(n), holders)


def move_to_dead_letters(
    conn: sqlite3.Connection, statements: Statements, seq: int, now: float, error: str
) -> None:
    """Move message ``seq`` to the dead table with ``error`` (inside the caller's transaction),
    by ``seq`` alone: whatever its other columns hold, it is moved as it is."""
    conn.execute(statements.copy_to_dead, {"seq": seq, "error": error[:MAX_ERROR], "now": now})
    conn.execute(statements.delete_message, {"seq": seq})
    conn.execute(statements.drop_group_of_dead, {"seq": seq})


def give_back(conn: sqlite3.Connection, statements: Statements, lease: Lease[Any]) -> bool:
    """Undo a claim whose caller never received the lease: the message is free again and its
    delivery is not counted. ``False`` if the lease was lost meanwhile."""
    params = {"seq": lease.seq, "locked_by": lease.locked_by, "deliveries": lease.deliveries - 1}
    with immediate_transaction(conn):
        return conn.execute(statements.give_back, params).rowcount == 1


def ack(conn: sqlite3.Connection, statements: Statements, lease: Lease[Any]) -> bool:
    """Delete the leased message (and its group once empty); ``False`` if the lease was lost."""
    with immediate_transaction(conn):
        return _ack(conn, statements, lease)


def _ack_many(
    conn: sqlite3.Connection, statements: Statements, leases: tuple[Lease[Any], ...]
) -> list[bool]:
    """:func:`_ack` of each lease, as if one after the other: a chunk at a time, the leases'
    rows are read, those a lease still holds deleted; then their groups are dropped once
    empty. A lease given twice takes once (its first time)."""
    if len(leases) < 2:
        return [_ack(conn, statements, lease) for lease in leases]
    wanted = [(lease.seq, lease.locked_by) for lease in leases]
    holding: dict[int, str] = {}  # seq -> locked_by, of the rows the leases hold
    for start in range(0, len(wanted), BATCH_MAX):
        fences = set(wanted[start : start + BATCH_MAX])
        seqs = {seq for seq, _ in fences}
        rows = conn.execute(statements.locks_of(len(seqs)), tuple(seqs)).fetchall()
        held = [row for row in rows if row in fences]
        if held:
            conn.execute(statements.delete_seqs(len(held)), [seq for seq, _ in held])
            holding.update(held)
    took = []
    for seq, locked_by in wanted:
        ok = holding.get(seq) == locked_by
        if ok:
            del holding[seq]
        took.append(ok)
    emptied = [lease.group_id for lease, ok in zip(leases, took, strict=True) if ok]
    for start in range(0, len(emptied), BATCH_MAX):
        ids = emptied[start : start + BATCH_MAX]
        conn.execute(statements.drop_groups_if_empty(len(ids)), ids)
    return took


def _ack(conn: sqlite3.Connection, statements: Statements, lease: Lease[Any]) -> bool:
    done = conn.execute(statements.delete_leased, (lease.seq, lease.locked_by))
    if done.rowcount != 1:
        return False
    conn.execute(statements.drop_groups_if_empty(1), (lease.group_id,))
    return True


def nack(
    conn: sqlite3.Connection, statements: Statements, clock: Clock, lease: Lease[Any], delay: float
) -> bool:
    """Free the message now (``delay == 0``) or park it, blocking its group, for ``delay``."""
    fence = (lease.seq, lease.locked_by)
    with immediate_transaction(conn):
        if delay == 0:
            return conn.execute(statements.free, fence).rowcount == 1
        until = clock() + delay
        if conn.execute(statements.park, (*fence, until)).rowcount != 1:
            return False
        conn.execute(statements.move_group_to_park_end, (until, lease.group_id))
        return True


def extend(
    conn: sqlite3.Connection,
    statements: Statements,
    clock: Clock,
    lease: Lease[Any],
    visibility: float,
) -> bool:
    """Move the lease's expiry to now + ``visibility``; ``False`` if the lease was lost."""
    with immediate_transaction(conn):
        expiry = clock() + visibility
        return conn.execute(statements.extend, (lease.seq, lease.locked_by, expiry)).rowcount == 1


def dead_letter(
    conn: sqlite3.Connection, statements: Statements, clock: Clock, lease: Lease[Any], reason: str
) -> bool:
    """Move the leased message to the dead table; ``False`` if the lease was lost."""
    with immediate_transaction(conn):
        fence = {"seq": lease.seq, "locked_by": lease.locked_by}
        if conn.execute(statements.holds_lease, fence).fetchone() is None:
            return False
        move_to_dead_letters(conn, statements, lease.seq, clock(), reason)
        return True
