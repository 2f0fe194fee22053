"""Every statement of the PostgreSQL backend under one prefix, written once, built once.

The group design is ``bench/pg_baseline.py``'s: a claim locks its group and head ``FOR UPDATE
OF g, m SKIP LOCKED`` (:mod:`~harel_sa.postgres.claims`); a publish upserts the group row, then
inserts the message; an ack drops an emptied group only if its row is the version its snapshot
saw (:meth:`Statements._drop_group`); a batch is set-based (:func:`_acks`). "Now" is the
server's (:data:`~harel_sa.postgres.compiled.SERVER_NOW`) unless the transport was given a
clock: then the ``now`` parameter. Each statement is compiled once and sent prepared; those of
scheduled and keyed messages are :mod:`~harel_sa.postgres.scheduling`'s.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from operator import itemgetter

from harel_sa.postgres.claims import claim_many_sql, claim_sql
from harel_sa.postgres.compiled import (
    CLIENT_NOW,
    IDENTITY,
    SERVER_NOW,
    Statement,
    live_lease,
    notify_sql,
    positional,
)
from harel_sa.postgres.flow import (
    PAUSED,
    FlowStatements,
    born,
    controlled,
    pauses,
    targets,
    targets_of,
)
from harel_sa.postgres.scheduling import scheduling_for
from harel_sa.rules import BATCH_MAX, PARKED
from harel_sa.schema import Names

#: The sizes a batch's statements are built for (a batch uses the smallest that holds it): a
#: handful of prepared statements per connection, not one per batch size.
BATCH_SIZES = (1, 2, 4, 8, 16, 32, BATCH_MAX)


def batch_size(n: int) -> int:
    """The smallest of :data:`BATCH_SIZES` that holds ``n`` (1 to :data:`BATCH_MAX`) items."""
    return 1 << (n - 1).bit_length()


class Statements:
    """The statements of one prefix, "now" from the server or from the ``now`` parameter.
    Build with :func:`statements_for`."""

    def __init__(self, names: Names, server_clock: bool) -> None:
        self.names = names
        self.now = now = SERVER_NOW if server_clock else CLIENT_NOW
        m, g, d = names.messages, names.groups, names.dead
        self._m, self._g = m, g
        self._claims: dict[tuple[int, int], Statement] = {}
        self._claims_many: dict[tuple[int, int, int], Statement] = {}
        self._acks: dict[int, Statement] = {}
        self.scheduling = scheduling_for(names, now)
        self.flow = FlowStatements(names, now)
        # A publish upserts the group row first (a no-op update that takes the row's lock),
        # then inserts the message: an ack racing it sees a new version and keeps the group.
        upsert_group = f"ON CONFLICT (group_id) DO UPDATE SET priority = {g}.priority"
        # What makes a message claimable now tells the listeners, in the same transaction
        # (harel_sa.postgres.listen): a one-row FROM item, evaluated once per statement.
        self.notify = positional(f"SELECT {notify_sql(names)}")
        notified = f"CROSS JOIN (SELECT {notify_sql(names)}) AS notified"
        # The first publish of a group fixes its priority and routing key until it drains.
        # The publishes come in two forms. ``publish`` makes a group where a pause or backoff
        # of it puts its groups (flow.born) and says whether any control row exists; a
        # transport told there is none sends ``publish_plain`` for a while (flow.Seen), which
        # does not read the controls: a table more in a statement costs a publish about 5%.
        one = (":group_id ::text", ":routing_key ::text")
        group = f"INSERT INTO {g} (group_id, priority, routing_key, max_in_flight"
        message = f"INSERT INTO {m} (group_id, event, enqueued_at) SELECT group_id, :event, {now} "
        self.publish_plain = positional(
            f"WITH g AS ({group}) VALUES (:group_id, :priority, :routing_key ::text, "
            ":max_in_flight ::integer) "
            f"{upsert_group} RETURNING group_id) {message}FROM g {notified}"
        )
        self.publish = positional(
            f"WITH {pauses(names, targets(*one))}, g AS ({group}, last_claimed_at) "
            "VALUES (:group_id, :priority, :routing_key ::text, :max_in_flight ::integer, "
            f"{born(names, *one)}) "
            f"{upsert_group} RETURNING group_id), w AS ({message}FROM g {notified}) "
            f"SELECT {controlled(names)}"
        )
        # New groups arrive in the order of their first message in the batch. "Now" is read
        # once, in the one-row FROM item that notifies (pg_notify keeps it from being pulled
        # up into the rows): per row, it would cost the server a call of its own.
        items = (
            "WITH items AS (SELECT * FROM unnest(:groups ::text[], :events ::text[]) "
            "WITH ORDINALITY AS i(group_id, event, n)), "
            "firsts AS (SELECT group_id, min(n) AS n FROM items GROUP BY group_id)"
        )
        messages = (
            f"INSERT INTO {m} (group_id, event, enqueued_at) "
            "SELECT i.group_id, i.event, notified.now FROM items i JOIN g USING (group_id) "
            f"CROSS JOIN (SELECT {now} AS now, {notify_sql(names)}) AS notified ORDER BY i.n"
        )
        self.publish_many_plain = positional(
            f"{items}, g AS ({group}) SELECT group_id, :priority ::integer, :routing_key ::text, "
            f":max_in_flight ::integer FROM firsts ORDER BY n {upsert_group} "
            f"RETURNING group_id) {messages}"
        )
        self.publish_many = positional(
            f"{items}, {pauses(names, targets_of('firsts', ':routing_key ::text'))}, "
            f"g AS ({group}, last_claimed_at) SELECT f.group_id, :priority ::integer, "
            f":routing_key ::text, :max_in_flight ::integer, "
            f"{born(names, 'f.group_id', ':routing_key ::text')} "
            f"FROM firsts f ORDER BY f.n {upsert_group} RETURNING group_id), w AS ({messages}) "
            f"SELECT {controlled(names)}"
        )
        self.ack = positional(
            f"WITH {self._seen(':group_id')}, "
            f"acked AS (DELETE FROM {m} WHERE seq = :seq AND locked_by = :locked_by "
            "RETURNING group_id), "
            f"dropped AS ({self._drop_group('acked')}) "
            "SELECT count(*) FROM acked"
        )
        # A message leaves for the dead table fenced by its lease; ``uncount`` takes back the
        # delivery the claim that found it undeliverable counted.
        self.bury = positional(
            f"WITH {self._seen(f'(SELECT group_id FROM {m} WHERE seq = :seq)')}, "
            f"gone AS (DELETE FROM {m} WHERE seq = :seq AND locked_by = :locked_by "
            "RETURNING seq, group_id, event, deliveries), "
            f"buried AS (INSERT INTO {d} "
            "(seq, group_id, event, error, dead_at, deliveries, priority, routing_key, "
            "max_in_flight) "
            f"SELECT gone.seq, gone.group_id, gone.event, :error, {now}, "
            "greatest(gone.deliveries - :uncount, 0), coalesce(g.priority, 0), g.routing_key, "
            "g.max_in_flight "
            f"FROM gone LEFT JOIN {g} g ON g.group_id = gone.group_id "
            "ON CONFLICT (seq) DO UPDATE SET group_id = EXCLUDED.group_id, "
            "event = EXCLUDED.event, error = EXCLUDED.error, dead_at = EXCLUDED.dead_at, "
            "deliveries = EXCLUDED.deliveries, priority = EXCLUDED.priority, "
            "routing_key = EXCLUDED.routing_key, max_in_flight = EXCLUDED.max_in_flight), "
            f"dropped AS ({self._drop_group('gone')}) "
            "SELECT count(*) FROM gone"
        )
        fence = "WHERE seq = :seq AND locked_by = :locked_by"
        # One row per message freed (rowcount 0 or 1), each notifying.
        self.free = positional(
            f"WITH freed AS (UPDATE {m} SET locked_by = NULL, lock_expiry = NULL {fence} "
            f"RETURNING seq) SELECT {notify_sql(names)} FROM freed"
        )
        # A lease its caller never received goes back as if never taken, its delivery uncounted.
        self.give_back = positional(
            f"UPDATE {m} SET locked_by = NULL, lock_expiry = NULL, "
            f"deliveries = greatest(deliveries - 1, 0) {fence}"
        )
        # A parked group re-enters the rotation when its park ends, as if claimed then, so
        # claims walk past it on the index instead of over it (it stays blocked meanwhile). A
        # group that runs several at once stays: its other messages may start meanwhile.
        self.park = positional(
            f"WITH parked AS (UPDATE {m} SET locked_by = '{PARKED}', "
            f"lock_expiry = {now} + :delay {fence} RETURNING group_id, lock_expiry), "
            f"deferred AS (UPDATE {g} g SET last_claimed_at = parked.lock_expiry FROM parked "
            f"WHERE g.group_id = parked.group_id AND g.last_claimed_at > {PAUSED} "
            "AND g.max_in_flight IS NULL) "
            "SELECT count(*) FROM parked"
        )
        self.extend = positional(f"UPDATE {m} SET lock_expiry = {now} + :visibility {fence}")
        self.identity = positional(IDENTITY)
        # A claim that buried its group's head puts the group back where it stood in the
        # rotation, so the group's next message is the claim's to take (as on SQLite).
        self.untouch = positional(
            f"UPDATE {g} SET last_claimed_at = :before ::float8 WHERE group_id = :group_id"
        )
        # A batch's leases its caller will not get (those after a head the batch buried, which
        # successive claims would have walked to anew) go back exactly as they were: the
        # message's lock and delivery count, the group's place in the rotation. Fenced by each
        # lease; rare, so the arrays' plan matters not.
        self.untake = positional(
            "WITH back AS (SELECT * FROM unnest(:seqs ::bigint[], :locked_by ::text[], "
            ":was_by ::text[], :was_expiry ::float8[], :group_ids ::text[], "
            ":before ::float8[]) AS b(seq, locked_by, was_by, was_expiry, group_id, before)), "
            f"freed AS (UPDATE {m} m SET locked_by = b.was_by, lock_expiry = b.was_expiry, "
            "deliveries = greatest(m.deliveries - 1, 0) FROM back b "
            "WHERE m.seq = b.seq AND m.locked_by = b.locked_by RETURNING m.seq) "
            f"UPDATE {g} g SET last_claimed_at = b.before FROM back b JOIN freed USING (seq) "
            "WHERE g.group_id = b.group_id"
        )

        # Operating the queue: stats, peek, release, purge, dead letters.
        self.counts = positional(
            f"SELECT count(*), "
            f"count(*) FILTER (WHERE locked_by <> '{PARKED}' AND {live_lease(m, now)}), "
            f"count(*) FILTER (WHERE locked_by = '{PARKED}' AND {live_lease(m, now)}), {now} "
            f"FROM {m}"
        )
        self.group_count = positional(f"SELECT count(*) FROM {g}")
        # What holds back VACUUM: the tables' dead rows, and the oldest open transaction on
        # the database (the reader's own left out).
        tables = ", ".join(f"'{t}'::regclass" for t in (m, g, d, names.scheduled))
        self.vacuum_state = positional(
            "SELECT (SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables "
            f"WHERE relid IN ({tables})), "
            "(SELECT max(date_part('epoch', statement_timestamp() - xact_start)) "
            "FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL))"
        )
        self.dead_count = positional(f"SELECT count(*) FROM {d}")
        self.oldest = positional(f"SELECT enqueued_at FROM {m} ORDER BY seq LIMIT 1")
        self.oldest_ready = positional(
            f"SELECT r.enqueued_at FROM {m} r WHERE NOT {live_lease('r', now)} "
            "ORDER BY r.seq LIMIT 1"
        )
        by = (
            "SELECT {0}, count(DISTINCT g.group_id), count(m.seq) FROM {1} AS g "
            # NULL (no routing key) first, as SQLite sorts it: both backends list alike.
            "LEFT JOIN {2} AS m ON m.group_id = g.group_id GROUP BY 1 ORDER BY 1 NULLS FIRST"
        )
        self.by_priority = positional(by.format("g.priority", g, m))
        self.by_routing_key = positional(by.format("g.routing_key", g, m))
        # The last seq given out; a role that may only read the tables, not the sequence (an
        # operator's read-only role), gets the highest seq still there instead.
        self.published = positional(
            "SELECT CASE WHEN has_sequence_privilege(q.s::oid, 'SELECT, USAGE') "
            "THEN coalesce(pg_sequence_last_value(q.s), 0) "
            f"ELSE greatest((SELECT coalesce(max(seq), 0) FROM {m}), "
            f"(SELECT coalesce(max(seq), 0) FROM {names.dead})) END "
            f"FROM (SELECT pg_get_serial_sequence('{m}', 'seq')::regclass AS s) AS q"
        )
        self.by_worker = positional(
            f"SELECT split_part(w.locked_by, '#', 1), count(*) FROM {m} w "
            f"WHERE w.locked_by <> '{PARKED}' AND {live_lease('w', now)} GROUP BY 1 ORDER BY 1"
        )
        group = "(:group_id ::text IS NULL OR group_id = :group_id ::text)"
        self.peek = positional(
            f"SELECT seq, group_id, event, locked_by, lock_expiry, deliveries, {now}, enqueued_at, "
            "message_key "
            f"FROM {m} "
            f"WHERE {group} ORDER BY seq LIMIT :limit"
        )
        self.end_parks = positional(
            f"UPDATE {m} SET locked_by = NULL, lock_expiry = NULL "
            f"WHERE locked_by = '{PARKED}' AND {group}"
        )
        # Parks dated their groups forward (``park``); bring them back to now.
        self.return_parked_groups = positional(
            f"UPDATE {g} SET last_claimed_at = {now} WHERE last_claimed_at > {now} AND {group}"
        )
        # The group row first: a publish racing the purge either commits before (its message
        # is purged too, by the next statement's fresh snapshot) or after (a new group).
        self.purge_group = positional(f"DELETE FROM {g} WHERE group_id = :group_id")
        self.purge_messages = positional(f"DELETE FROM {m} WHERE group_id = :group_id")
        pick = f"{group} AND (:seqs ::bigint[] IS NULL OR seq = ANY(:seqs ::bigint[]))"
        self.dead = positional(
            "SELECT seq, group_id, event, error, dead_at, deliveries, priority, routing_key "
            f"FROM {d} WHERE {pick} ORDER BY seq LIMIT :limit"
        )
        # Requeued groups come back with the priority and routing key they had, in the order
        # of their first dead message; an existing group's row is locked (the upsert), so an
        # ack draining it meanwhile cannot drop it under the requeued messages.
        self.requeue_groups = positional(
            "WITH firsts AS (SELECT DISTINCT ON (group_id) group_id, priority, routing_key, "
            f"max_in_flight, seq FROM {d} WHERE {pick} ORDER BY group_id, seq), "
            f"{pauses(names, targets_of('firsts', 'routing_key'))} "
            f"INSERT INTO {g} (group_id, priority, routing_key, max_in_flight, last_claimed_at) "
            "SELECT f.group_id, f.priority, f.routing_key, f.max_in_flight, "
            f"{born(names, 'f.group_id', 'f.routing_key')} FROM firsts f ORDER BY f.seq "
            f"{upsert_group}"
        )
        self.requeue = positional(
            f"INSERT INTO {m} (group_id, event, enqueued_at) "
            f"SELECT group_id, event, {now} FROM {d} WHERE {pick} ORDER BY seq"
        )
        self.purge_dead = positional(f"DELETE FROM {d} WHERE {pick}")

    def acks(self, size: int) -> Statement:
        """The acks of up to ``size`` (one of :data:`BATCH_SIZES`) leases in one statement:
        bind ``{"keys": [seq, locked_by, seq, locked_by, ...]}``, ``size`` pairs (repeat a pair
        to fill it: a message is deleted once). Returns the ``(seq, locked_by)`` of each
        message deleted: those a lease held. See :func:`_acks`."""
        try:
            return self._acks[size]
        except KeyError:
            built = self._acks[size] = _acks(self.names, size)
            return built

    def claim_many(self, min_priority: int, keys: int, size: int) -> Statement:
        """:meth:`claim` of up to ``size`` (one of :data:`BATCH_SIZES`) groups at once, each
        lease with a token of its own: bind ``limit`` (at most ``size``) and ``tokens``
        (``limit`` ``locked_by`` values, in rotation order) besides the claim's parameters.
        Returns, in rotation order, what :meth:`claim` returns and the head's lock before
        (``locked_by``, ``lock_expiry``). See :func:`~harel_sa.postgres.claims.claim_many_sql`."""
        try:
            return self._claims_many[min_priority, keys, size]
        except KeyError:
            built = self._claims_many[min_priority, keys, size] = claim_many_sql(
                self.names, self.now, min_priority, keys, size
            )
            return built

    def _seen(self, group: str) -> str:
        return f"seen AS (SELECT g.xmin AS version FROM {self._g} g WHERE g.group_id = {group})"

    def _drop_group(self, removed: str) -> str:
        """Delete the group of the message ``removed`` deleted when it holds no other message
        and its row is still the version the statement's snapshot saw (``xmin``): a publish
        since then has updated it, so the group stays and its new message is not stranded."""
        return (
            f"DELETE FROM {self._g} g USING {removed}, seen "
            f"WHERE g.group_id = {removed}.group_id AND g.xmin = seen.version "
            f"AND NOT EXISTS (SELECT 1 FROM {self._m} x WHERE x.group_id = {removed}.group_id "
            "AND x.seq <> :seq)"
        )

    def claim(self, min_priority: int, keys: int) -> Statement:
        """The claim: lease the head of the first group in round-robin order (oldest-claimed,
        then arrival) whose head is not leased or parked, nor the next :data:`LOOKAHEAD`
        messages either, with a priority of at least ``min_priority`` (0 to ``MAX_PRIORITY``,
        spelled in the statement) and, with ``keys`` > 0, a routing key among the ``keys``
        items of ``:keys``; returns seq, group_id, event, the delivery count this lease
        makes and the group's ``last_claimed_at`` before this claim.

        Its cost stays flat in the backlog: the walk of the groups is an index walk in
        round-robin order that stops at the first group it can lease; a floor walks its own
        partial index (``groups_by_floor<n>``), never the groups below it. Nor in a group's
        depth: the head and the seqs after it come from one index-only scan of the group,
        the rows they name are read by their keys, and the group to touch by its own, so no
        plan turns on how few groups hold the messages. With routing keys, each key is a
        lane of its own on ``groups_by_routing_key`` (its first leasable group, locked), and
        the lanes' winners are compared; the losers' row locks last as long as the claim's
        transaction, so other claimers skip those groups meanwhile.
        """
        try:  # a dict, not an lru_cache: that would hash the Names on every claim
            return self._claims[min_priority, keys]
        except KeyError:
            built = self._claims[min_priority, keys] = claim_sql(
                self.names, self.now, min_priority, keys
            )
            return built


def _acks(names: Names, size: int) -> Statement:
    """The acks of ``size`` leases, each fenced on its own (``seq`` and ``locked_by``), as one
    statement: the messages the leases hold are deleted; each group left without messages is
    dropped, under the single ack's rule (the group row still the version the statement's
    snapshot saw, ``xmin``, so a racing publish is never stranded), its row locked first, in
    ``group_id`` order: two batches never wait on each other's groups in a cycle.

    The leases are scalar parameters, a ``VALUES`` list (arrays would be re-planned at every
    call). Returns the ``(seq, locked_by)`` of each message deleted."""
    m, g = names.messages, names.groups
    pairs = ", ".join(
        f"(:seq{i} ::bigint, :by{i} ::text)" if i == 0 else f"(:seq{i}, :by{i})"
        for i in range(size)
    )
    built = positional(
        f"WITH keys (seq, locked_by) AS (VALUES {pairs}), "
        f"acked AS (DELETE FROM {m} m USING keys k "
        "WHERE m.seq = k.seq AND m.locked_by = k.locked_by "
        "RETURNING m.seq, m.locked_by, m.group_id), "
        # The groups with no message left but those acked here, their rows locked in order.
        f"emptied AS (SELECT g.group_id FROM {g} g "
        "WHERE g.group_id IN (SELECT group_id FROM acked) "
        f"AND NOT EXISTS (SELECT 1 FROM {m} x WHERE x.group_id = g.group_id "
        "AND x.seq NOT IN (SELECT seq FROM acked)) "
        "ORDER BY g.group_id FOR UPDATE OF g), "
        # The version of each the snapshot saw: a plain read (a lock reads the newest row).
        f"seen AS (SELECT g.group_id, g.xmin AS version FROM {g} g "
        "JOIN emptied e ON e.group_id = g.group_id), "
        f"dropped AS (DELETE FROM {g} g USING seen s "
        "WHERE g.group_id = s.group_id AND g.xmin = s.version) "
        "SELECT seq, locked_by FROM acked"
    )
    # The pairs arrive as one flat list, in the order the statement numbers them.
    return replace(built, bind=itemgetter("keys"))


@lru_cache(maxsize=64)
def statements_for(names: Names, server_clock: bool) -> Statements:
    """The statements of ``names``' prefix, built once per process (and clock kind)."""
    return Statements(names, server_clock)
