"""Every statement harel_sa sends to SQLite at runtime, for one prefix, built once.

The queue's operations (:mod:`~harel_sa.sqlite.operations`) and the admin ones execute these
on the driver connection (sqlite3, or inside aiosqlite's thread); nothing is built per call.
Each is compiled once (:mod:`~harel_sa.sqlite.compiled`); those of scheduled and keyed messages
are :mod:`~harel_sa.sqlite.scheduling`'s. Each rule of the queue is written once, as an SQL
fragment: when a lease is live (:func:`live_lease`), which message heads a group
(:func:`head_of`), when a group may be claimed (:func:`eligible`), the rotation's order
(:func:`rotation`), when a group has no message left (:func:`no_messages`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from harel_sa.rules import BATCH_MAX, LOOKAHEAD, MAX_IN_FLIGHT, PARKED
from harel_sa.schema import MAX_PRIORITY, Names
from harel_sa.sqlite.compiled import Compiled, named, positional
from harel_sa.sqlite.flow import PAUSED, FlowStatements, born, held
from harel_sa.sqlite.scheduling import SchedulingStatements, probe

# Reading rows another program may have written: any column may hold any type, and TEXT may
# be bytes that are not UTF-8 (the sqlite3 driver raises on fetching those). These
# expressions read such values without raising.


def raw_text(column: str) -> str:
    """``column`` as its bytes (``NULL`` stays ``NULL``): never a decoding error on fetch."""
    return f"CAST({column} AS BLOB)"


def count_of(column: str) -> str:
    """``column`` as an integer >= 0, as SQLite reads a number out of any value."""
    return f"MAX(COALESCE(CAST({column} AS INTEGER), 0), 0)"


def priority_of(column: str) -> str:
    """``column``, or 0 when it is not an integer: as claims with a floor treat it."""
    return f"CASE WHEN typeof({column}) = 'integer' THEN {column} ELSE 0 END"


def number_or_null(column: str) -> str:
    return f"CASE WHEN typeof({column}) IN ('integer', 'real') THEN {column} END"


# The rules.


def live_lease(alias: str) -> str:
    """The row ``alias`` is leased or parked, and its expiry is a number not yet past
    ``:now`` (a lease is live *at* its expiry instant); a lease with no expiry, or an expiry
    that is not a number, has lapsed."""
    return (
        f"{alias}.locked_by IS NOT NULL AND typeof({alias}.lock_expiry) IN ('integer', 'real') "
        f"AND {alias}.lock_expiry >= :now"
    )


def parked(alias: str) -> str:
    """The row ``alias`` is parked (``nack(delay)``), whether or not the park has ended."""
    return f"{alias}.locked_by = '{PARKED}'"


def head_of(messages: str, group: str) -> str:
    """The ``seq`` of the first message of group row ``group``: a group's head, the only
    message of it a claim may lease (publishes append)."""
    return f"(SELECT MIN(h.seq) FROM {messages} AS h WHERE h.group_id = {group}.group_id)"


def rotation(alias: str) -> str:
    """The round-robin order of groups: oldest-claimed first, then oldest row."""
    return f"{alias}.last_claimed_at, {alias}.rowid"


def no_messages(messages: str, group_id: str) -> str:
    """No message of ``messages`` belongs to ``group_id`` (a column or a parameter)."""
    return f"NOT EXISTS (SELECT 1 FROM {messages} AS e WHERE e.group_id = {group_id})"


def eligible(messages: str, head: str, group: str) -> str:
    """Group ``group``, whose head row is ``head`` (joined, ``NULL`` when it has no message),
    may be claimed: it has no messages (the claim deletes it), or nothing of it is in flight.

    A group is in flight when its head is leased or parked and the lease has not lapsed: only a
    group's head is ever leased, so looking at the head alone is the design's probe over every
    message of the group, at the cost of one row. The next :data:`LOOKAHEAD` messages are
    looked at too, against rows inserted before a leased head.
    """
    ahead = (
        f"SELECT x.locked_by AS locked_by, x.lock_expiry AS lock_expiry FROM {messages} AS x "
        f"WHERE x.group_id = {group}.group_id AND x.seq > {head}.seq "
        f"ORDER BY x.seq LIMIT {LOOKAHEAD}"
    )
    return (
        f"({head}.seq IS NULL OR (NOT ({live_lease(head)}) "
        f"AND NOT EXISTS (SELECT 1 FROM ({ahead}) AS n WHERE {live_lease('n')})))"
    )


def window(group: str) -> str:
    """How many messages of group row ``group`` may be in flight at once: its
    ``max_in_flight`` when that is an integer above 1 (at most
    :data:`~harel_sa.rules.MAX_IN_FLIGHT`), else 1."""
    n = f"{group}.max_in_flight"
    return (
        f"(CASE WHEN typeof({n}) = 'integer' AND {n} > 1 THEN min({n}, {MAX_IN_FLIGHT}) ELSE 1 END)"
    )


def next_free(messages: str, group: str) -> str:
    """The ``seq`` a claim may lease of group row ``group`` that has ``max_in_flight`` set:
    its first message not in flight, provided fewer than N (its :func:`window`) of its first
    N + :data:`LOOKAHEAD` are (rows inserted below leased ones, as :func:`eligible` guards
    against; that message is then among the first N); else ``NULL``.

    Messages start in publish order, so those in flight are the first ones: the walk of the
    group's first messages (one index step each) is at most N + LOOKAHEAD long."""
    m = messages
    step = (
        f"SELECT x.seq, x.locked_by, x.lock_expiry, w.k + 1 FROM w JOIN {m} AS x ON x.seq = "
        f"(SELECT min(y.seq) FROM {m} AS y WHERE y.group_id = {group}.group_id "
        f"AND y.seq > w.seq) WHERE w.k < {window(group)} + {LOOKAHEAD}"
    )
    return (
        "(WITH RECURSIVE w(seq, locked_by, lock_expiry, k) AS ("
        f"SELECT x.seq, x.locked_by, x.lock_expiry, 1 FROM {m} AS x "
        f"WHERE x.seq = {head_of(m, group)} UNION ALL {step}) "
        f"SELECT CASE WHEN sum({live_lease('w')}) < {window(group)} THEN "
        f"min(CASE WHEN NOT ({live_lease('w')}) THEN w.seq END) "
        "END FROM w)"
    )


class Statements:
    """Every statement of the queue under one prefix. Build with :func:`statements_for`.

    Every admin read tolerates rows another program wrote: text columns are read as their
    bytes, numbers through the expressions above, so an odd value is shown, not raised on.
    """

    def __init__(self, names: Names) -> None:
        self.names = names
        m, g, d = names.messages, names.groups, names.dead
        # -- the queue's operations ----------------------------------------------------------
        self.insert_message = positional(
            f"INSERT INTO {m} (group_id, event, enqueued_at) VALUES (:group_id, :event, :now)",
            *("group_id", "event", "now"),
        )
        # The first publish of a group fixes its priority and routing key until it drains.
        # A new group enters the rotation where a pause or backoff of it puts its groups.
        self.insert_group = positional(
            f"INSERT OR IGNORE INTO {g} "
            "(group_id, priority, routing_key, max_in_flight, last_claimed_at) "
            "VALUES (:group_id, :priority, :routing_key, :max_in_flight, "
            f"{born(names, ':group_id', ':routing_key')})",
            *("group_id", "priority", "routing_key", "max_in_flight"),
        )
        # What a claim writes, one statement each for its ``n`` leases (a single claim's
        # ``n`` is 1): the groups marked claimed, by the rowids its select read in the same
        # transaction; the heads leased, each to its own holder, their deliveries counted.
        self._mark_claimed = _by_size(
            lambda n: positional(
                f"UPDATE {g} SET last_claimed_at = :now WHERE {_among('rowid', n)}",
                *("now", *_each("rowid", n)),
            )
        )
        self._lease = _by_size(lambda n: _lease(m, n))
        # A lease its caller never received (an async claim cancelled inside the driver) goes
        # back as if never taken, its delivery uncounted.
        self.give_back = named(
            f"UPDATE {m} SET locked_by = NULL, lock_expiry = NULL, deliveries = :deliveries "
            "WHERE seq = :seq AND locked_by = :locked_by"
        )
        # Group rows without a message (another program's half-done work) are walked by every
        # claim: the claim deletes the one it met and the empty ones among the next 255.
        self.drop_empty_groups = named(
            f"DELETE FROM {g} WHERE (rowid = :grow OR rowid IN (SELECT rowid FROM {g} "
            "WHERE (last_claimed_at, rowid) > (:last_claimed_at, :grow) "
            f"ORDER BY {rotation(g)} LIMIT 255)) AND {no_messages(m, f'{g}.group_id')}"
        )
        fence = "WHERE seq = :seq AND locked_by = :locked_by"  # the lease's: (seq, locked_by)
        self.delete_leased = positional(f"DELETE FROM {m} {fence}", "seq", "locked_by")
        self.park = positional(
            f"UPDATE {m} SET locked_by = '{PARKED}', lock_expiry = :until {fence}",
            *("seq", "locked_by", "until"),
        )
        # A parked group re-enters the rotation when its park ends, as if claimed then, so
        # claims walk past it on the index instead of over it (it stays blocked meanwhile). A
        # group that runs several at once stays: its other messages may start meanwhile.
        self.move_group_to_park_end = positional(
            f"UPDATE {g} SET last_claimed_at = max(last_claimed_at, :until) "
            f"WHERE group_id = :group_id AND last_claimed_at > {PAUSED} "
            "AND max_in_flight IS NULL",
            *("until", "group_id"),
        )
        self.free = positional(
            f"UPDATE {m} SET locked_by = NULL, lock_expiry = NULL {fence}", "seq", "locked_by"
        )
        self.extend = positional(
            f"UPDATE {m} SET lock_expiry = :expiry {fence}", *("seq", "locked_by", "expiry")
        )
        # Moving to the dead table works by seq alone, in SQL: a row whose group_id is not
        # UTF-8 text is moved as it is, and an earlier dead letter of the same seq is replaced.
        self.copy_to_dead = named(
            f"INSERT OR REPLACE INTO {d} "
            "(seq, group_id, event, error, dead_at, deliveries, priority, routing_key, "
            "max_in_flight) "
            f"SELECT m.seq, m.group_id, m.event, :error, :now, {count_of('m.deliveries')}, "
            f"{priority_of('g.priority')}, g.routing_key, g.max_in_flight "
            f"FROM {m} AS m LEFT JOIN {g} AS g ON g.group_id = m.group_id WHERE m.seq = :seq"
        )
        self.delete_message = named(f"DELETE FROM {m} WHERE seq = :seq")
        self.drop_group_of_dead = named(
            f"DELETE FROM {g} WHERE group_id = (SELECT group_id FROM {d} WHERE seq = :seq) "
            f"AND {no_messages(m, f'{g}.group_id')}"
        )
        self.holds_lease = named(f"SELECT 1 FROM {m} WHERE seq = :seq AND locked_by = :locked_by")
        # An ack's group dropped once empty, by name (the outbox's; batches use the sized form).
        self.drop_group_if_empty = named(
            f"DELETE FROM {g} WHERE group_id = :group_id AND {no_messages(m, f'{g}.group_id')}"
        )
        self._claims: dict[tuple[int, int], Compiled] = {}
        self._claims_up_to: dict[tuple[int, int], Compiled] = {}
        # A batch of acks: the rows of up to BATCH_MAX leases' messages, then the deletes
        # of those the leases still hold, then their groups once empty (an ack's ``n`` is 1),
        # each one statement per size (built on first use).
        self._locks_of = _by_size(
            lambda n: positional(
                f"SELECT seq, locked_by FROM {m} WHERE {_among('seq', n)}", *_each("seq", n)
            )
        )
        self._delete_seqs = _by_size(
            lambda n: positional(f"DELETE FROM {m} WHERE {_among('seq', n)}", *_each("seq", n))
        )
        self._drop_groups_if_empty = _by_size(
            lambda n: positional(
                f"DELETE FROM {g} WHERE {_among('group_id', n)} "
                f"AND {no_messages(m, f'{g}.group_id')}",
                *_each("group_id", n),
            )
        )
        self._admin(m, g, d)
        self.scheduling = SchedulingStatements(names, self.drop_group_if_empty)
        self.flow = FlowStatements(names)

    def _admin(self, m: str, g: str, d: str) -> None:
        # -- the admin operations: reads in one snapshot, and repairs ------------------------
        self.counts = named(
            f"SELECT count(*), "
            f"coalesce(sum(NOT ({parked(m)}) AND {live_lease(m)}), 0), "
            f"coalesce(sum({parked(m)} AND {live_lease(m)}), 0) FROM {m}"
        )
        self.group_count = named(f"SELECT count(*) FROM {g}")
        self.dead_count = named(f"SELECT count(*) FROM {d}")
        created = "json_extract(event, '$.created_time')"
        # When the message was enqueued (harel_sa's publish), else when its event says it was
        # created (rows other programs wrote): a number, or ISO-8601 text as bytes.
        since = (
            f"COALESCE({number_or_null('enqueued_at')}, CASE WHEN typeof(event) != 'text' THEN "
            f"NULL WHEN NOT json_valid(event) THEN NULL WHEN typeof({created}) IN "
            f"('integer', 'real') THEN {created} ELSE {raw_text(created)} END)"
        )
        self.oldest = named(f"SELECT {since} FROM {m} ORDER BY seq LIMIT 1")
        by = (
            "SELECT {0}, count(DISTINCT g.group_id), count(m.seq) FROM {1} AS g "
            "LEFT JOIN {2} AS m ON m.group_id = g.group_id GROUP BY 1 ORDER BY 1"
        )
        self.by_priority = named(by.format(priority_of("g.priority"), g, m))
        self.by_routing_key = named(by.format(raw_text("g.routing_key"), g, m))
        self.oldest_ready = named(
            f"SELECT {since} FROM {m} AS r WHERE NOT ({live_lease('r')}) ORDER BY seq LIMIT 1"
        )
        self.published = named(
            f"SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = '{m}'"
        )
        worker = raw_text("substr(locked_by, 1, instr(locked_by, '#') - 1)")
        self.by_worker = named(
            f"SELECT {worker}, count(*) "
            f"FROM {m} AS w WHERE NOT ({parked('w')}) AND {live_lease('w')} "
            "GROUP BY 1 ORDER BY 1"
        )
        # Whether the lease is live comes from the rule, as the claim reads it (an odd expiry
        # is lapsed); parked or leased from the bytes of locked_by.
        self.peek = named(
            f"SELECT seq, {raw_text('group_id')}, {raw_text('event')}, {raw_text('locked_by')}, "
            f"{number_or_null('lock_expiry')}, {count_of('deliveries')}, "
            f"coalesce({live_lease(m)}, 0), {since}, {raw_text('message_key')} FROM {m} "
            "WHERE :group_id IS NULL OR group_id = :group_id ORDER BY seq LIMIT :limit"
        )
        self.end_parks = named(
            f"UPDATE {m} SET locked_by = NULL, lock_expiry = NULL "
            f"WHERE {parked(m)} AND (:group_id IS NULL OR group_id = :group_id)"
        )
        # Parks moved their groups to the park's end (move_group_to_park_end); back to now.
        self.return_parked_groups = named(
            f"UPDATE {g} SET last_claimed_at = :now WHERE last_claimed_at > :now "
            f"AND (:group_id IS NULL OR group_id = :group_id) AND NOT {held(self.names, g)}"
        )
        self.purge_messages = named(f"DELETE FROM {m} WHERE group_id = :group_id")
        self.purge_group = named(f"DELETE FROM {g} WHERE group_id = :group_id")
        pick = (
            "(:group_id IS NULL OR group_id = :group_id) AND "
            "(:seqs IS NULL OR seq IN (SELECT value FROM json_each(:seqs)))"
        )
        self.dead = named(
            f"SELECT seq, {raw_text('group_id')}, {raw_text('event')}, {raw_text('error')}, "
            f"COALESCE(CAST(dead_at AS REAL), 0.0), {count_of('deliveries')}, "
            f"{priority_of('priority')}, {raw_text('routing_key')} "
            f"FROM {d} WHERE {pick} ORDER BY seq LIMIT :limit"
        )
        self.requeue = named(
            f"INSERT INTO {m} (group_id, event, enqueued_at) SELECT group_id, event, :now "
            f"FROM {d} WHERE {pick} ORDER BY seq"
        )
        self.requeue_groups = named(
            f"INSERT OR IGNORE INTO {g} "
            "(group_id, priority, routing_key, max_in_flight, last_claimed_at) "
            "SELECT group_id, priority, routing_key, max_in_flight, "
            f"{born(self.names, f'{d}.group_id', f'{d}.routing_key')} "
            f"FROM {d} WHERE {pick} ORDER BY seq"
        )
        self.purge_dead = named(f"DELETE FROM {d} WHERE {pick}")

    def claim(self, min_priority: int, keys: int) -> Compiled:
        """The select of a claim: the head of the first group, in round-robin order, that has
        nothing in flight, a priority >= ``min_priority`` and (with ``keys`` > 0) a routing
        key among the ``keys`` bound; or a group row without messages met first (``seq``
        NULL). Positional: bind ``(now, key0, ...)``. Columns: seq, group_id and event as
        bytes, deliveries, last_claimed_at, the group's rowid, and 1 when a scheduled message
        is due (else NULL).

        Each lane walks one index in ``(last_claimed_at, rowid)`` order and stops at its first
        eligible group, so the cost does not grow with the backlog, nor with groups below the
        floor or under other keys; the lanes' winners (at most five) are then compared.
        Built once per floor and number of keys (a dict lookup per claim, no hashing of names).
        """
        try:
            return self._claims[min_priority, keys]
        except KeyError:
            return self._claims.setdefault(
                (min_priority, keys), _claim(self.names, min_priority, keys, many=False)
            )

    def mark_claimed(self, n: int) -> Compiled:
        """Mark ``n`` (at most :data:`BATCH_MAX`) groups claimed at a claim's now, by their
        rowids (as the claim's select read them): bind ``(now, rowid, ...)``."""
        return self._mark_claimed[n]

    def lease(self, n: int) -> Compiled:
        """Lease ``n`` (at most :data:`BATCH_MAX`) messages, each to its holder, until one
        expiry, and count a delivery of each: bind ``(seq, locked_by, ..., expiry)``."""
        return self._lease[n]

    def locks_of(self, n: int) -> Compiled:
        """The ``(seq, locked_by)`` of ``n`` (at most :data:`BATCH_MAX`) messages, by seq:
        bind the seqs."""
        return self._locks_of[n]

    def delete_seqs(self, n: int) -> Compiled:
        """Delete ``n`` (at most :data:`BATCH_MAX`) messages by seq: bind the seqs."""
        return self._delete_seqs[n]

    def drop_groups_if_empty(self, n: int) -> Compiled:
        """Delete those of ``n`` (at most :data:`BATCH_MAX`) groups that have no message
        left: bind their ``group_id``\\ s."""
        return self._drop_groups_if_empty[n]

    def claim_up_to(self, min_priority: int, keys: int) -> Compiled:
        """:meth:`claim`'s select for the first ``limit`` groups, in the same order: bind
        ``(now, key0, ..., limit)``. Each group comes once (a row per group), so its rows are
        what successive claims at the same instant would take, up to the first row one of them
        would not lease (a group without messages, a head to dead-letter)."""
        try:
            return self._claims_up_to[min_priority, keys]
        except KeyError:
            return self._claims_up_to.setdefault(
                (min_priority, keys), _claim(self.names, min_priority, keys, many=True)
            )


class _by_size(dict[int, Compiled]):
    """The statement ``build(n)`` for each ``n`` (1 to :data:`BATCH_MAX`) asked for, built
    once."""

    def __init__(self, build: Callable[[int], Compiled]) -> None:
        super().__init__()
        self.build = build

    def __missing__(self, n: int) -> Compiled:
        if not 0 < n <= BATCH_MAX:
            raise ValueError(f"a statement of a batch names 1-{BATCH_MAX} rows, not {n}")
        sql = self[n] = self.build(n)
        return sql


def _each(column: str, n: int) -> tuple[str, ...]:
    """The names of ``n`` parameters for ``column``, in order: ``column0``, ``column1``, ..."""
    return tuple(f"{column}{i}" for i in range(n))


def _among(column: str, n: int) -> str:
    """``column`` is one of ``n`` parameters (:func:`_each`'s names)."""
    each = [f":{name}" for name in _each(column, n)]
    return f"{column} = {each[0]}" if n == 1 else f"{column} IN ({', '.join(each)})"


def _lease(messages: str, n: int) -> Compiled:
    # Bound ``(seq0, holder0, seq1, holder1, ..., expiry)``: one statement for the batch (an
    # UPDATE per row, each a run of its own, costs more).
    holders = " ".join(f"WHEN :seq{i} THEN :holder{i}" for i in range(n))
    held = ":holder0" if n == 1 else f"CASE seq {holders} END"
    order = [name for i in range(n) for name in (f"seq{i}", f"holder{i}")]
    return positional(
        f"UPDATE {messages} SET locked_by = {held}, lock_expiry = :expiry, "
        f"deliveries = {count_of('deliveries')} + 1 WHERE {_among('seq', n)}",
        *order,
        "expiry",
    )


def _claim(names: Names, min_priority: int, keys: int, *, many: bool) -> Compiled:
    if keys:
        lanes = [f"g.routing_key = :key{i} AND g.priority >= {min_priority}" for i in range(keys)]
    elif min_priority:
        # "g.priority > 0" spelled as the partial index's WHERE, so SQLite may use that index.
        lanes = [
            f"g.priority = {p} AND g.priority > 0" for p in range(min_priority, MAX_PRIORITY + 1)
        ]
    else:
        lanes = ["1"]
    limit = ":limit" if many else "1"
    selects = [_lane(names, where, limit) for where in lanes]
    if len(selects) == 1:
        sql = selects[0]
    else:
        union = " UNION ALL ".join(f"SELECT * FROM ({s})" for s in selects)
        sql = (
            f"SELECT seq, group_id, event, deliveries, last_claimed_at, grow, due FROM ({union}) "
            f"ORDER BY last_claimed_at, grow LIMIT {limit}"
        )
    bound = ("now", *(f"key{i}" for i in range(keys)))
    return positional(sql, *bound, "limit") if many else positional(sql, *bound)


def _lane(names: Names, where: str, limit: str) -> str:
    # The first eligible groups of those ``where`` admits, with their heads (a group without
    # messages comes back too, seq NULL, for the claim to delete).
    m, g = names.messages, names.groups
    return (
        f"SELECT m.seq AS seq, {raw_text('m.group_id')} AS group_id, "
        f"{raw_text('m.event')} AS event, {count_of('m.deliveries')} AS deliveries, "
        "g.last_claimed_at AS last_claimed_at, g.rowid AS grow, "
        # Whether a scheduled message is due (then the claim promotes and selects again): one
        # step of the due index, the claim's whole cost of scheduled messages.
        f"{probe(names)} AS due "
        # A group that runs one message at a time (max_in_flight NULL) offers its head; one
        # that runs several, the first of its window not in flight (NULL: none may start).
        f"FROM {g} AS g LEFT JOIN {m} AS m ON m.seq = CASE WHEN g.max_in_flight IS NULL "
        f"THEN {head_of(m, 'g')} ELSE {next_free(m, 'g')} END "
        # Paused groups sit before the walk's start. A group backing off sits at its backoff's
        # end, in the future: only such a group is looked up in the controls (see flow.py).
        f"WHERE {where} AND g.last_claimed_at > {PAUSED} "
        f"AND (g.last_claimed_at <= :now OR NOT {held(names, 'g')}) "
        f"AND CASE WHEN g.max_in_flight IS NULL THEN {eligible(m, 'm', 'g')} "
        f"ELSE m.seq IS NOT NULL OR {no_messages(m, 'g.group_id')} END "
        f"ORDER BY {rotation('g')} LIMIT {limit}"
    )


@lru_cache(maxsize=64)
def statements_for(names: Names) -> Statements:
    """The statements of ``names``' prefix, built once per process."""
    return Statements(names)
