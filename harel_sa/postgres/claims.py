"""The claims' SQL on PostgreSQL: the walk of the groups in round-robin order, what a group
offers (its head, or with ``max_in_flight`` the next message its window allows), the lease.

Every claim of a group locks its row ``FOR UPDATE OF g, m SKIP LOCKED`` with the message, so
the claims of one group are one at a time, and the message's lease condition is re-checked on
its newest version (:func:`_pick`)."""

from __future__ import annotations

from harel_sa.postgres.compiled import Statement, live_lease, positional
from harel_sa.postgres.flow import PAUSED, held
from harel_sa.postgres.scheduling import due_probe
from harel_sa.rules import LOOKAHEAD, MAX_IN_FLIGHT
from harel_sa.schema import Names


def _eligible(m: str, now: str, *more: str | None) -> str:
    # The message is free (re-checked on its newest version). A group that runs one at a
    # time offers its head, provided the next LOOKAHEAD rows are free too: only a head is
    # ever leased, a lease below it means another program inserted rows below a leased head.
    # The next rows' seqs come from the head's own scan of the group (``head.next<i>``, see
    # _pick), and each row is read by its key. A group that runs several offers what its
    # window allows (_window).
    nexts = ", ".join(f"head.next{i}" for i in range(1, LOOKAHEAD + 1))
    ahead = f"SELECT x.locked_by, x.lock_expiry FROM {m} x WHERE x.seq IN ({nexts})"
    where = [
        "NOT " + live_lease("m", now),
        "(g.max_in_flight IS NOT NULL OR NOT EXISTS "
        f"(SELECT 1 FROM ({ahead}) n WHERE {live_lease('n', now)}))",
    ]
    where += [condition for condition in more if condition is not None]
    return " AND ".join(where)


def _window(m: str, now: str, order: str) -> str:
    """For group row ``g`` with ``max_in_flight`` set (N, at most MAX_IN_FLIGHT; any value
    below 1 is 1), the ``seq`` a claim may lease: its first message not in flight, provided
    fewer than N of its first N + LOOKAHEAD are (the head's rule, for N at once; that one is
    then among the first N); else NULL. Messages start in publish order, so those in flight
    are the first ones: one scan of the group's first N + LOOKAHEAD entries. A group without
    the column set (one at a time) skips the scan."""
    n = f"least(greatest(g.max_in_flight, 1), {MAX_IN_FLIGHT})"
    live = live_lease("w", now)
    return (
        f"SELECT CASE WHEN count(*) FILTER (WHERE {live}) < {n} "
        f"THEN min(w.seq) FILTER (WHERE NOT {live}) END AS seq "
        f"FROM (SELECT h.seq, h.locked_by, h.lock_expiry FROM {m} h "
        "WHERE g.max_in_flight IS NOT NULL AND h.group_id >= g.group_id "
        f"AND h.group_id <= g.group_id {order} LIMIT {n} + {LOOKAHEAD}) w"
    )


#: What a batch's claim also reads of each head it leases: its lock before, to put it back.
_WAS = ", m.locked_by AS was_by, m.lock_expiry AS was_expiry"


def _pick(names: Names, now: str, where: str, size: int = 1, more: str = "") -> str:
    """The first ``size`` leasable groups of those ``where`` admits, in round-robin order, with
    their heads; both rows locked ``FOR UPDATE OF g, m SKIP LOCKED``: PostgreSQL re-checks the
    head's lease condition on the newest row version, so two claimers never lease one head (a
    lease test as a sub-query reads the statement's snapshot and double-delivers). LIMIT is a
    literal: with a parameter the cached generic plan gives up the index walk."""
    m, g = names.messages, names.groups
    # The head and the seqs of the LOOKAHEAD messages after it, from one index-only scan of
    # the group on (group_id, seq): the next entries are on the page the head's lookup read
    # anyway. The group is spelled as a range and the order as the index's, so that only this
    # index returns its rows in order: with "group_id = ..." the order by group_id is implied,
    # and with few groups (deep ones) the planner walked the primary key instead, filtering
    # by group, through every row up to the group's (or, for the next ones, to the end).
    order = "ORDER BY h.group_id, h.seq"
    nexts = "".join(
        f", lead(h.seq, {i}) OVER ({order}) AS next{i}" for i in range(1, LOOKAHEAD + 1)
    )
    # Paused groups sit before the walk's start (a condition a locked row is re-checked on);
    # a held one met on the way is passed.
    where = f"g.last_claimed_at > {PAUSED} AND NOT {held(names, 'g', now)} AND {where}"
    return (
        f"SELECT g.group_id, m.seq, g.last_claimed_at AS before, g.arrival{more} "
        f"FROM {g} g CROSS JOIN LATERAL (SELECT h.seq{nexts} FROM {m} h "
        f"WHERE h.group_id >= g.group_id AND h.group_id <= g.group_id {order} LIMIT 1) head "
        f"CROSS JOIN LATERAL ({_window(m, now, order)}) win "
        f"JOIN {m} m ON m.seq = CASE WHEN g.max_in_flight IS NULL THEN head.seq ELSE win.seq END "
        f"WHERE {where} "
        f"ORDER BY g.last_claimed_at, g.arrival LIMIT {int(size)} FOR UPDATE OF g, m SKIP LOCKED"
    )


def _picks(names: Names, now: str, min_priority: int, keys: int, size: int, more: str) -> str:
    """The ``pick`` of a claim: a walk of the groups in round-robin order (with routing keys,
    one lane per key, their winners compared), ``size`` groups at most."""
    m = names.messages
    if not keys:
        # Spelled as the floor's partial index's WHERE, so the planner walks that index.
        floor = f"g.priority >= {int(min_priority)}" if min_priority > 0 else None
        walk = _pick(names, now, _eligible(m, now, floor), size, more)
        if size == 1:
            return f"pick AS ({walk})"
        # The walk locks the rows as the outer LIMIT pulls them: ``limit``, not ``size``.
        return f"pick AS (SELECT * FROM ({walk}) w LIMIT :limit)"
    floor = "g.priority >= :min_priority" if min_priority > 0 else None
    key = "g.routing_key = (:keys ::text[])[{}]"
    lanes = [
        f"lane{i} AS MATERIALIZED "
        f"({_pick(names, now, _eligible(m, now, key.format(i + 1), floor), size, more)})"
        for i in range(keys)
    ]
    union = " UNION ALL ".join(f"SELECT * FROM lane{i}" for i in range(keys))
    limit = "1" if size == 1 else ":limit"
    return (
        f"{', '.join(lanes)}, pick AS (SELECT * FROM ({union}) w "
        f"ORDER BY w.before, w.arrival LIMIT {limit})"
    )


#: A claim's new delivery count: one more, unless it is already at the largest INTEGER or past
#: it (only a row other programs wrote can be), where it stays: no count in the table can make
#: the claim overflow (databases older than the BIGINT column have INTEGER).
COUNTED = "CASE WHEN m.deliveries >= 2147483647 THEN m.deliveries ELSE m.deliveries + 1 END"


def claim_sql(names: Names, now: str, min_priority: int, keys: int) -> Statement:
    """:meth:`Statements.claim`: leases the head and touches its group in the same statement."""
    m, g = names.messages, names.groups
    picks = _picks(names, now, min_priority, keys, 1, "")
    return positional(
        f"WITH {picks}, "
        f"lease AS (UPDATE {m} m SET locked_by = :locked_by, "
        f"lock_expiry = {now} + :visibility, deliveries = {COUNTED} "
        "FROM pick WHERE m.seq = pick.seq RETURNING m.seq, m.group_id, m.event, m.deliveries), "
        # The one group by its key: a join with pick was hashed over a small groups table.
        f"touch AS (UPDATE {g} g SET last_claimed_at = {now} "
        "WHERE g.group_id = (SELECT pick.group_id FROM pick)) "
        "SELECT l.seq, l.group_id, l.event, l.deliveries, pick.before, "
        f"{due_probe(names, now)} FROM lease l JOIN pick ON pick.seq = l.seq",
        steered=True,
    )


def claim_many_sql(names: Names, now: str, min_priority: int, keys: int, size: int) -> Statement:
    """The claim of up to ``size`` groups: the walk of :func:`claim_sql` that goes on past the
    first group, up to ``limit``; each head leased with the ``locked_by`` of its rank in the
    rotation (``tokens``), each group touched; returned in rotation order. The rows are what
    ``limit`` successive claims would lease, as long as none of them is a head the caller sets
    aside (dead-lettered), after which successive claims would walk again.

    With routing keys, each lane takes up to ``size`` groups and the lanes' first ``limit`` win;
    the losers' row locks last as long as the claim's transaction (other claimers skip those
    groups meanwhile), as with :func:`claim_sql`'s lanes."""
    m, g = names.messages, names.groups
    picks = _picks(names, now, min_priority, keys, size, _WAS)
    return positional(
        f"WITH {picks}, "
        "ranked AS (SELECT pick.*, row_number() OVER (ORDER BY pick.before, pick.arrival) AS k "
        "FROM pick), "
        f"lease AS (UPDATE {m} m SET locked_by = (:tokens ::text[])[r.k], "
        f"lock_expiry = {now} + :visibility, deliveries = {COUNTED} "
        "FROM ranked r WHERE m.seq = r.seq RETURNING m.seq, m.event, m.deliveries), "
        f"touch AS (UPDATE {g} g SET last_claimed_at = {now} FROM ranked r "
        "WHERE g.group_id = r.group_id) "
        "SELECT l.seq, r.group_id, l.event, l.deliveries, r.before, r.was_by, r.was_expiry, "
        f"{due_probe(names, now)} FROM lease l JOIN ranked r ON r.seq = l.seq ORDER BY r.k",
        steered=True,
    )
