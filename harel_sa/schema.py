"""The schema, declared once: table and index names under a prefix, and their Core metadata.

Everything else derives from here: the runtime SQL (``operations``), the start-up upgrade
(``startup``) and the check that the Alembic revisions build exactly this (the tests).
Released revisions never import these tables; they spell their own frozen DDL.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    DOUBLE_PRECISION,
    REAL,
    BigInteger,
    Column,
    Identity,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    text,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateColumn
from sqlalchemy.sql.compiler import DDLCompiler
from sqlalchemy.types import TypeEngine

from harel_sa.errors import InvalidArgumentError, InvalidArgumentTypeError
from harel_sa.rules import DEFAULT_PREFIX as DEFAULT_PREFIX
from harel_sa.rules import MAX_PRIORITY as MAX_PRIORITY

#: The newest harel_sa Alembic revision; a test holds it equal to the revisions' head.
HEAD_REVISION = "harel_sa_0010"


#: Message sequence numbers: SQLite's ``INTEGER PRIMARY KEY AUTOINCREMENT`` (a 64-bit rowid);
#: on PostgreSQL a ``BIGINT`` identity (``INTEGER`` there is 32 bits).
SEQ = BigInteger().with_variant(Integer(), "sqlite")
#: Counters and priorities: 64 bits on both (SQLite's INTEGER is), so a row other programs
#: wrote cannot push one past its type.
COUNT = BigInteger().with_variant(Integer(), "sqlite")
#: Epoch seconds: SQLite's REAL is 8 bytes; PostgreSQL's REAL is 4, so DOUBLE PRECISION there.
TIME: TypeEngine[float] = REAL().with_variant(DOUBLE_PRECISION(), "postgresql")
#: ``info`` of the objects only PostgreSQL has (see :func:`on_dialect`).
POSTGRESQL_ONLY: dict[str, Any] = {"harel_sa_dialects": ("postgresql",)}
#: ``info`` of the objects only SQLite has.
SQLITE_ONLY: dict[str, Any] = {"harel_sa_dialects": ("sqlite",)}
_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,29}")


@dataclass(frozen=True, slots=True)
class Names:
    """The names of every table and index under one prefix.

    A prefix matches ``[A-Za-z_][A-Za-z0-9_]{0,29}``; anything else raises
    :class:`~harel_sa.InvalidArgumentError` (a ``ValueError``) before a file is touched.
    SQLite compares names without regard to case, so harel_sa does too: the prefix is
    lowercased (``Names("Jobs").prefix == "jobs"``), and ``Jobs`` and ``jobs`` are one queue.
    """

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str):
            raise InvalidArgumentTypeError(
                f"prefix must be a str, not {type(self.prefix).__name__}"
            )
        if not _PREFIX.fullmatch(self.prefix):
            raise InvalidArgumentError(
                f"prefix {self.prefix!r} must match [A-Za-z_][A-Za-z0-9_]{{0,29}}"
            )
        object.__setattr__(self, "prefix", self.prefix.lower())

    @property
    def messages(self) -> str:
        return f"{self.prefix}_transport_messages"

    @property
    def groups(self) -> str:
        return f"{self.prefix}_transport_groups"

    @property
    def dead(self) -> str:
        return f"{self.prefix}_transport_dead"

    @property
    def scheduled(self) -> str:
        """Messages published for later, until a claim moves them to their groups (0007)."""
        return f"{self.prefix}_transport_scheduled"

    @property
    def scheduled_by_due(self) -> str:
        return f"{self.scheduled}_by_due"

    @property
    def scheduled_by_key(self) -> str:
        return f"{self.scheduled}_by_key"

    @property
    def messages_by_key(self) -> str:
        return f"{self.messages}_by_key"

    @property
    def periodic(self) -> str:
        """Each periodic schedule's last published tick (0008; :class:`harel_sa.Periodic`)."""
        return f"{self.prefix}_transport_periodic"

    @property
    def controls(self) -> str:
        """Pauses and backoffs, one row per group or routing key (0009; :mod:`harel_sa.flow`)."""
        return f"{self.prefix}_transport_controls"

    @property
    def groups_by_last_claimed(self) -> str:
        return f"{self.groups}_by_last_claimed"

    @property
    def groups_by_routing_key(self) -> str:
        return f"{self.groups}_by_routing_key"

    @property
    def groups_by_priority(self) -> str:
        return f"{self.groups}_by_priority"

    def groups_by_floor(self, floor: int) -> str:
        """PostgreSQL's index of the groups a claim with priority floor ``floor`` (1 to
        ``MAX_PRIORITY``) may take, in round-robin order."""
        return f"{self.groups}_by_floor{floor}"

    @property
    def messages_by_group(self) -> str:
        return f"{self.messages}_by_group"

    @property
    def dead_by_group(self) -> str:
        return f"{self.dead}_by_group"

    @property
    def version_table(self) -> str:
        """Where harel_sa's own Alembic environment records this prefix's revision."""
        return f"{self.prefix}_transport_alembic_version"

    @property
    def tables(self) -> tuple[str, ...]:
        return (
            self.messages,
            self.groups,
            self.dead,
            self.scheduled,
            self.periodic,
            self.controls,
        )


def migration_lock(names: Names) -> int:
    """The PostgreSQL advisory lock key (a signed 64-bit int) that schema changes of ``names``'s
    prefix hold for their transaction: Alembic runs and a transport's start-up alike."""
    digest = hashlib.sha256(f"harel_sa schema {names.prefix}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@dataclass(frozen=True, slots=True)
class Schema:
    """The Core metadata of one prefix, with its tables at hand."""

    names: Names
    metadata: MetaData
    messages: Table
    groups: Table
    dead: Table
    scheduled: Table
    periodic: Table
    controls: Table


def schema_for(prefix: str = DEFAULT_PREFIX) -> Schema:
    """The tables and indexes of ``prefix`` as one :class:`MetaData` (built once per prefix,
    whatever its case)."""
    return _schema(Names(prefix).prefix)


@lru_cache(maxsize=64)
def _schema(prefix: str) -> Schema:
    names = Names(prefix)
    md = MetaData()
    messages = Table(
        names.messages,
        md,
        Column("seq", SEQ, Identity(), primary_key=True),
        Column("group_id", Text, nullable=False),
        Column("event", Text, nullable=False),
        Column("locked_by", Text),
        Column("lock_expiry", TIME),
        Column("deliveries", COUNT, nullable=False, server_default=text("0")),
        Column("enqueued_at", TIME),  # when harel_sa's publish committed it; NULL from others
        Column("message_key", Text),  # at most one waiting message per key (0007); NULL: no key
        sqlite_autoincrement=True,
    )
    groups = Table(
        names.groups,
        md,
        Column("group_id", Text, primary_key=True, nullable=True),
        Column("last_claimed_at", TIME, nullable=False, server_default=text("0.0")),
        Column("priority", COUNT, nullable=False, server_default=text("0")),
        Column("routing_key", Text),
        # How many of its messages may be in flight at once (0010), fixed by the publish that
        # makes the row, as priority is; NULL: one at a time (the previous release's groups).
        Column("max_in_flight", COUNT),
        Column("arrival", BigInteger, Identity(), nullable=False, info=POSTGRESQL_ONLY),
    )
    dead = Table(
        names.dead,
        md,
        Column("seq", SEQ, primary_key=True, autoincrement=False),
        Column("group_id", Text, nullable=False),
        Column("event", Text, nullable=False),
        Column("error", Text, nullable=False),
        Column("dead_at", TIME, nullable=False),
        Column("deliveries", COUNT, nullable=False),
        Column("priority", COUNT, nullable=False, server_default=text("0")),
        Column("routing_key", Text),
        Column("max_in_flight", COUNT),  # the group's (0010): a requeue that makes it keeps it
    )
    # Messages published for later (0007): a claim moves the due ones, in due order, to their
    # groups' tails; they hold up no group meanwhile.
    scheduled = Table(
        names.scheduled,
        md,
        Column("seq", SEQ, Identity(), primary_key=True),
        Column("group_id", Text, nullable=False),
        Column("event", Text, nullable=False),
        Column("due_at", TIME, nullable=False),
        Column("priority", COUNT, nullable=False, server_default=text("0")),
        Column("routing_key", Text),
        Column("message_key", Text),
        Column("max_in_flight", COUNT),  # the group's (0010): the promotion that makes it keeps it
        sqlite_autoincrement=True,
    )
    # Each periodic schedule's last published tick (0008): a tick's publish writes it in the
    # same transaction, only when it is older, so a tick is published once across workers.
    periodic = Table(
        names.periodic,
        md,
        Column("name", Text, primary_key=True),
        Column("tick_at", TIME, nullable=False),
    )
    # Pauses and backoffs (0009), each keyed by what it holds: "group:<id>", "key:<routing
    # key>", or "key" (no routing key); a claim probes its candidate's two keys.
    controls = Table(
        names.controls,
        md,
        Column("target", Text, primary_key=True),
        Column("paused_at", TIME),
        Column("backoff_until", TIME),
    )
    # The due ones first: a claim's probe is one step of this index, however many wait.
    _ending_in_order(names.scheduled_by_due, scheduled.c.due_at, order=scheduled.c.seq)
    Index(
        names.scheduled_by_key,
        scheduled.c.message_key,
        sqlite_where=scheduled.c.message_key.isnot(None),
        postgresql_where=scheduled.c.message_key.isnot(None),
    )
    Index(
        names.messages_by_key,
        messages.c.message_key,
        sqlite_where=messages.c.message_key.isnot(None),
        postgresql_where=messages.c.message_key.isnot(None),
    )
    # The round-robin order, ties in arrival order.
    _ending_in_order(names.groups_by_last_claimed, groups.c.last_claimed_at, order=groups.c.arrival)
    # Only groups with a routing key: a routed claim walks no other, and claiming one without
    # a key (the common group) costs no write of this index. Within a key, the round-robin order.
    _ending_in_order(
        names.groups_by_routing_key,
        groups.c.routing_key,
        groups.c.last_claimed_at,
        order=groups.c.arrival,
        where=groups.c.routing_key.isnot(None),
    )
    # Only groups above priority 0 are indexed: the common group costs no index write per claim,
    # and a claim with a priority floor (> 0) never needs the others. SQLite's claim walks one
    # lane per priority level on this index and compares the lanes' winners.
    Index(
        names.groups_by_priority,
        groups.c.priority,
        groups.c.last_claimed_at,
        sqlite_where=groups.c.priority > 0,
        info=SQLITE_ONLY,
    ).ddl_if(dialect="sqlite")
    # PostgreSQL's claim cannot merge lanes under FOR UPDATE: one index per floor instead, each
    # in round-robin order over the groups at or above it (a group of priority p is in p of
    # them; priority 0, the common group, in none).
    for floor in range(1, MAX_PRIORITY + 1):
        Index(
            names.groups_by_floor(floor),
            groups.c.last_claimed_at,
            groups.c.arrival,
            postgresql_where=groups.c.priority >= floor,
            info=POSTGRESQL_ONLY,
        ).ddl_if(dialect="postgresql")
    Index(names.messages_by_group, messages.c.group_id, messages.c.seq)
    Index(names.dead_by_group, dead.c.group_id, dead.c.seq)
    return Schema(names, md, messages, groups, dead, scheduled, periodic, controls)


def _ending_in_order(name: str, *columns: Any, order: Column[Any], where: Any = None) -> None:
    """The index ``name`` on ``columns`` (of the rows ``where`` holds), ties in the rows' order:
    SQLite's index entries end with the rowid by themselves; PostgreSQL's, whose rows have no
    stable order, must name ``order`` (the arrival, or the seq)."""
    sqlite = {} if where is None else {"sqlite_where": where}
    postgresql = {} if where is None else {"postgresql_where": where}
    Index(name, *columns, **sqlite, info=SQLITE_ONLY).ddl_if(dialect="sqlite")
    Index(name, *columns, order, **postgresql, info=POSTGRESQL_ONLY).ddl_if(dialect="postgresql")


def on_dialect(item: Column[Any] | Index, dialect: str) -> bool:
    """Whether ``item`` (a column or index of the metadata) exists on ``dialect``.

    Only PostgreSQL has ``groups.arrival`` and the ``(last_claimed_at, arrival)`` index: the
    claim's ties (never-claimed groups) go in arrival order, which SQLite reads from the groups'
    rowid (an index entry ends with it) and PostgreSQL, whose rows have no stable order, from an
    identity column. Both dialects share the metadata; DDL (``create_all``, below) and
    autogenerate's comparison (``harel_sa.alembic_env``'s ``include_object``) skip what a
    dialect does not have.
    """
    dialects = item.info.get("harel_sa_dialects")
    return dialects is None or dialect in dialects


@compiles(CreateColumn, "sqlite")
def _sqlite_column(element: CreateColumn, compiler: DDLCompiler, **kw: Any) -> str | None:
    """SQLite's CREATE TABLE leaves out the columns it does not have (SQLAlchemy's documented
    way to omit a column); every other column compiles as it would without this hook."""
    column = element.element
    if isinstance(column, Column) and not on_dialect(column, "sqlite"):
        return None
    compiled: str | None = compiler.visit_create_column(element, **kw)  # type: ignore[no-untyped-call]
    return compiled


def metadata(prefix: str = DEFAULT_PREFIX) -> MetaData:
    """The :class:`MetaData` holding harel_sa's tables and indexes for ``prefix``."""
    return schema_for(prefix).metadata
