"""What the admin operations return, for every backend: pydantic models, frozen.

Figures come from one snapshot of the queue. Rows another program wrote are shown as they are:
text that is not UTF-8 with ``\\xNN`` escapes, a lock whose expiry is not a number as
``lock_expiry=None`` and ``"ready"`` (the claim treats such a lock as lapsed), a count that is
not a number as the database reads it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

#: A queued message's state, as a claim would see it now.
MessageState = Literal["ready", "leased", "parked", "scheduled"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class Bucket(_Frozen):
    """Groups and messages under one priority or routing key."""

    groups: int
    messages: int


class PriorityBucket(Bucket):
    priority: int


class RoutingBucket(Bucket):
    routing_key: str | None


class Pause(_Frozen):
    """A pause in force: of a group (``group_id`` set) or of a routing key (``group_id``
    ``None``; ``routing_key`` ``None``: the messages published without one), since ``since``
    (epoch seconds)."""

    routing_key: str | None = None
    group_id: str | None = None
    since: float


class Limit(_Frozen):
    """What holds back the claims of one routing key: ``backoff_until``, the instant (epoch
    seconds, the database's clock) before which none of its messages is claimed."""

    backoff_until: float | None = None


class Stats(_Frozen):
    """A consistent picture of one prefix's queue at ``now``."""

    now: float
    messages: int
    groups: int
    in_flight: int
    parked: int
    dead: int
    #: Seconds since the oldest message was enqueued (or, for a row another program wrote, since
    #: its event's ``created_time``, if it says).
    oldest_age: float | None
    by_priority: list[PriorityBucket]
    by_routing_key: list[RoutingBucket]
    #: Messages neither leased nor parked (some may wait behind their group's head).
    ready: int = 0
    #: The same for the oldest ready message.
    oldest_ready_age: float | None = None
    #: Messages ever published under the prefix (the last seq given out).
    published: int = 0
    #: Live leases per worker id.
    leases_by_worker: dict[str, int] = {}
    #: Messages published for later and not yet due (or due, awaiting the next claim): not
    #: counted in ``messages``.
    scheduled: int = 0
    #: When the first scheduled message is due (epoch seconds, the database's clock); ``None``
    #: when none is scheduled.
    next_due: float | None = None
    #: PostgreSQL: rows of the prefix's tables deleted or updated and not yet removed by
    #: VACUUM (the server's statistics, seconds behind); ``None`` on SQLite.
    dead_rows: int | None = None
    #: PostgreSQL: seconds the oldest transaction open on the database has run (``None``:
    #: none, or SQLite). While it runs no row it could see is removed, and claims walk past
    #: every dead one: an idle-in-transaction session shows here first.
    oldest_transaction_age: float | None = None
    #: What is paused, oldest first (:meth:`~harel_sa.SqliteTransport.pause`).
    paused: list[Pause] = []
    #: Routing keys whose claims are held back by ``backoff`` until an instant to come.
    limits: dict[str | None, Limit] = {}


class QueuedMessage(_Frozen):
    """A message as it sits in the queue (its event as stored JSON, not decoded).

    Rows another program wrote are shown as they are: text that is not UTF-8 with ``\\xNN``
    escapes, a lock whose expiry is not a number as ``lock_expiry=None`` and ``"ready"`` (the
    claim treats such a lock as lapsed), a count that is not a number as SQLite reads it.
    """

    seq: int
    group_id: str
    event: str
    state: MessageState
    locked_by: str | None
    lock_expiry: float | None
    deliveries: int
    #: When it was enqueued (published or requeued), in epoch seconds; for a row another
    #: program wrote, when its event says it was created on SQLite; ``None`` when unknown.
    enqueued_at: float | None = None
    #: A scheduled message's due time (epoch seconds; state ``"scheduled"``, its ``seq`` the
    #: scheduled table's own until a claim moves it to its group); ``None`` for the others.
    due_at: float | None = None
    #: Its key (``publish(..., key=...)``), ``None`` for a message published without one.
    key: str | None = None


class DeadMessage(_Frozen):
    """A message moved to the dead table, with why and when (odd values shown as in
    :class:`QueuedMessage`; a priority that is not an integer as 0)."""

    seq: int
    group_id: str
    event: str
    error: str
    dead_at: float
    deliveries: int
    priority: int
    routing_key: str | None
