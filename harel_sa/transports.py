"""The queue's public methods, written once for every backend: :class:`Transport` for the sync
transports (their async twin: :mod:`harel_sa.async_transports`).

Each method validates and binds its call through :class:`~harel_sa.seam.Binder` (the same
checks on every backend), runs it with the transport's own ``_run`` (one transaction on the
dialect's connection), and reports a settle of the running handler's own lease to
:mod:`~harel_sa.settlements`. A transport adds how it connects, runs, waits and closes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, Self, TypeVar

from pydantic import BaseModel
from sqlalchemy import Connection

from harel_sa import settlements, traces
from harel_sa.events import E, Lease
from harel_sa.flow import UNSET, Unset
from harel_sa.models import DeadMessage, Limit, Pause, QueuedMessage, Stats
from harel_sa.outbox import Outbox
from harel_sa.periodic import Periodic
from harel_sa.seam import Binder, Bound

if TYPE_CHECKING:  # an application's ORM or asyncio objects: imported by it
    from sqlalchemy.orm import Session

T = TypeVar("T")


class Transport(Generic[E]):
    """The queue operations of a sync transport (:class:`~harel_sa.SqliteTransport`,
    :class:`~harel_sa.PostgresTransport`)."""

    _binder: Binder[E]
    _outbox: Outbox[E] | None = None
    _where: str  # the database, as messages and logs name it

    def _run(self, call: Bound[T]) -> T:
        raise NotImplementedError

    def _same_database(self, identity: tuple[Any, ...]) -> bool:
        """Whether a connection whose database says ``identity`` is to this transport's."""
        raise NotImplementedError

    def outbox(self) -> Outbox[E]:
        """The :class:`~harel_sa.outbox.Outbox` behind ``connection=``: this queue's writes on
        the application's connections to this transport's database."""
        if self._outbox is None:
            self._outbox = Outbox(
                self.prefix,
                event_type=self._binder.options.event_type,
                clock=self._binder.backend.clock,
                same_database=self._same_database,
            )
        return self._outbox

    def close(self) -> None:
        raise NotImplementedError

    def wait_for_messages(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a message to become claimable (each dialect's:
        a notification on PostgreSQL, a sleep on SQLite); whether one was heard of."""
        raise NotImplementedError

    @property
    def listens(self) -> bool:
        """Whether :meth:`wait_for_messages` hears of new messages (PostgreSQL's
        ``LISTEN``) rather than sleeping its timeout out (SQLite): a worker waits on it then."""
        return False

    @property
    def clock(self) -> Callable[[], float]:
        """The clock the transport was given, else ``time.time`` (PostgreSQL's "now" is the
        server's, read in SQL: this is this host's, for what a client dates, such as ticks)."""
        return self._binder.backend.clock or time.time

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def prefix(self) -> str:
        return self._binder.options.names.prefix

    @property
    def database(self) -> str:
        """The database this transport opened, for messages and logs (no password)."""
        return self._where

    @traces.traced("publish")
    def publish(
        self,
        group_id: str,
        event: BaseModel,
        priority: int = 0,
        routing_key: str | None = None,
        *,
        delay: float | None = None,
        not_before: datetime | float | None = None,
        key: str | None = None,
        on_key: Literal["keep", "replace"] = "keep",
        max_in_flight: int = 1,
        connection: Connection | Session | None = None,
    ) -> bool:
        """Append ``event`` to ``group_id``'s queue, durably, once this returns (any ``str``
        that UTF-8 holds is a group id, ``""`` included, as the harel engine may send it).
        Returns ``True`` when a message was written (always, without ``key``).

        With ``connection`` (the application's SQLAlchemy ``Connection`` or ``Session`` on
        this transport's database) it is written in that connection's transaction instead,
        and takes effect with its commit (:mod:`harel_sa.outbox`); the same for every write.

        ``event`` is an instance of the transport's ``event_type``, or of any pydantic model
        whose JSON reads as one (the harel engine's ``Event``); anything else raises
        :class:`~harel_sa.InvalidArgumentTypeError` before anything is written.

        The first publish of a group fixes its ``priority`` (0-4), ``routing_key`` and
        ``max_in_flight`` until the group drains; later publishes only add messages. A group
        runs up to ``max_in_flight`` (1-1000) of its messages at once, each started in publish
        order (no message is claimed before an earlier one of its group); with the default 1,
        one at a time, each after the previous one settled.

        **Scheduled**: with ``delay`` (seconds) or ``not_before`` (an aware ``datetime``, or
        epoch seconds on the transport's clock; PostgreSQL's server clock) the message is due
        then. Until due it holds up nothing: it joins the tail of its group no later than the
        first claim after its due time (messages published before then go first; scheduled
        messages of a group join in due-time order). A naive datetime, a negative, NaN or
        infinite value, or both options raise :class:`~harel_sa.InvalidArgumentError` before
        anything is written.

        **Keyed**: with ``key``, at most one message with that key *waits* (queued and not
        leased or parked, or scheduled) under the prefix. When one waits, ``on_key="keep"``
        writes nothing and ``"replace"`` gives it this event (and, if it is scheduled, this
        due time, or now), keeping its place; either way the result is ``False``. A keyed
        message in flight does not count: a new one is written. (A nack or a lapsed lease can
        bring a keyed message back to waiting beside a newer one: both stay, and later
        publishes of the key act on one of them.)
        """
        if connection is not None:
            return self.outbox().publish(
                connection,
                group_id,
                event,
                priority,
                routing_key,
                delay=delay,
                not_before=not_before,
                key=key,
                on_key=on_key,
                max_in_flight=max_in_flight,
            )
        bound = self._binder.publish(
            group_id, event, priority, routing_key, delay, not_before, key, on_key, max_in_flight
        )
        return self._run(bound) is not False

    @traces.traced("publish_many")
    def publish_many(
        self,
        items: Iterable[tuple[str, BaseModel]],
        *,
        priority: int = 0,
        routing_key: str | None = None,
        delay: float | None = None,
        not_before: datetime | float | None = None,
        max_in_flight: int = 1,
        connection: Connection | Session | None = None,
    ) -> None:
        """Publish every ``(group_id, event)`` pair in one transaction: all or none; with
        ``delay`` or ``not_before`` (as :meth:`publish`'s), all scheduled for that time."""
        if connection is not None:
            self.outbox().publish_many(
                connection,
                items,
                priority=priority,
                routing_key=routing_key,
                delay=delay,
                not_before=not_before,
                max_in_flight=max_in_flight,
            )
            return
        self._run(
            self._binder.publish_many(
                items, priority, routing_key, delay, not_before, max_in_flight
            )
        )

    @traces.traced("cancel")
    def cancel(self, key: str, *, connection: Connection | Session | None = None) -> bool:
        """Delete the waiting message (queued and not leased or parked, or scheduled) with
        ``key``; whether there was one. A message in flight is never touched."""
        if connection is not None:
            return self.outbox().cancel(connection, key)
        return self._run(self._binder.cancel(key))

    @traces.traced("publish_tick")
    def publish_tick(self, schedule: Periodic, tick: float, *, catch_up: bool = False) -> bool:
        """Publish ``schedule``'s ``tick`` (epoch seconds, one of its ticks) unless its record
        is at that tick or later: ``True`` when this call published it. The record and the
        message commit together, so of all the processes publishing one tick, one does.
        ``catch_up``: only when a record exists (a schedule never published has no past).
        The workers' ticker calls this (``Worker(periodic=...)``)."""
        return self._run(self._binder.publish_tick(schedule, tick, catch_up))

    @traces.traced("claim")
    def claim(
        self,
        worker_id: str,
        visibility: float,
        min_priority: int = 0,
        routing_keys: Iterable[str] | None = None,
        max_deliveries: int | None = None,
    ) -> Lease[E] | None:
        """Lease the next deliverable message for ``visibility`` seconds, or return ``None``.

        The message is the head of the first group, oldest-claimed first, with nothing in
        flight, ``priority >= min_priority`` and, if given, a routing key in ``routing_keys``.
        ``min_priority`` is any int: below 0 it is 0; above 4 no group reaches it (``None``).
        A row that cannot be decoded, or was delivered ``max_deliveries`` times already, goes to
        the dead table instead, and the claim moves on.
        """
        return self._run(
            self._binder.claim(worker_id, visibility, min_priority, routing_keys, max_deliveries)
        )

    @traces.traced("ack_and_claim")
    def ack_and_claim(
        self,
        lease: Lease[E],
        worker_id: str,
        visibility: float,
        min_priority: int = 0,
        routing_keys: Iterable[str] | None = None,
        max_deliveries: int | None = None,
    ) -> tuple[bool, Lease[E] | None]:
        """:meth:`ack` ``lease`` and :meth:`claim` the next message in one write transaction.

        Returns whether the ack took (as :meth:`ack`) and the next lease (as :meth:`claim`).
        """
        acked, following = self._run(
            self._binder.ack_and_claim(
                lease, worker_id, visibility, min_priority, routing_keys, max_deliveries
            )
        )
        if acked:
            settlements.report(lease, "acked")
        return acked, following

    @traces.traced("claim_many")
    def claim_many(
        self,
        worker_id: str,
        visibility: float,
        limit: int,
        min_priority: int = 0,
        routing_keys: Iterable[str] | None = None,
        max_deliveries: int | None = None,
    ) -> list[Lease[E]]:
        """Up to ``limit`` leases on the heads of distinct groups, in one write transaction.

        Exactly the leases that ``limit`` successive :meth:`claim` calls would return at this
        instant, in the same order (round-robin), with the same rows moved to the dead table on
        the way; each lease is fenced by a token of its own. Fewer when fewer are deliverable.
        """
        return self._run(
            self._binder.claim_many(
                worker_id, visibility, limit, min_priority, routing_keys, max_deliveries
            )
        )

    @traces.traced("ack_many")
    def ack_many(
        self, leases: Sequence[Lease[E]], *, connection: Connection | Session | None = None
    ) -> list[bool]:
        """:meth:`ack` every lease in one write transaction; for each, whether its ack took
        (``False``, changing nothing, for a lease that was lost)."""
        if connection is not None:
            acked = self.outbox().ack_many(connection, leases)
        else:
            acked = self._run(self._binder.ack_many(leases))
        settlements.report_acks(leases, acked)
        return acked

    @traces.traced("ack_many_and_claim_many")
    def ack_many_and_claim_many(
        self,
        leases: Sequence[Lease[E]],
        worker_id: str,
        visibility: float,
        limit: int,
        min_priority: int = 0,
        routing_keys: Iterable[str] | None = None,
        max_deliveries: int | None = None,
    ) -> tuple[list[bool], list[Lease[E]]]:
        """:meth:`ack_many` ``leases`` and :meth:`claim_many` up to ``limit`` more, in one write
        transaction: one commit for a whole batch of settled and new messages."""
        acked, claimed = self._run(
            self._binder.ack_many_and_claim_many(
                leases, worker_id, visibility, limit, min_priority, routing_keys, max_deliveries
            )
        )
        settlements.report_acks(leases, acked)
        return acked, claimed

    @traces.traced("ack")
    def ack(self, lease: Lease[E], *, connection: Connection | Session | None = None) -> bool:
        """Remove the leased message (and its group once empty).

        Returns ``False``, changing nothing, when the lease was lost (it lapsed and another
        worker claimed the message). With ``connection``, in its transaction (a handler's
        writes and its ack then commit together).
        """
        if connection is not None:
            acked = self.outbox().ack(connection, lease)
        else:
            acked = self._run(self._binder.ack(lease))
        if acked:
            settlements.report(lease, "acked")
        return acked

    @traces.traced("nack")
    def nack(
        self,
        lease: Lease[E],
        delay: float = 0.0,
        *,
        connection: Connection | Session | None = None,
    ) -> bool:
        """Give the message back: at once (``delay == 0``), or parked for ``delay`` seconds,
        during which its group stays blocked. ``False`` when the lease was lost."""
        if connection is not None:
            nacked = self.outbox().nack(connection, lease, delay)
        else:
            nacked = self._run(self._binder.nack(lease, delay))
        if nacked:
            settlements.report(lease, "nacked", delay)
        return nacked

    def extend(self, lease: Lease[E], visibility: float) -> bool:
        """Heartbeat: the lease now ends ``visibility`` seconds from now. ``False`` when lost."""
        return self._run(self._binder.extend(lease, visibility))

    @traces.traced("dead_letter")
    def dead_letter(
        self, lease: Lease[E], reason: str, *, connection: Connection | Session | None = None
    ) -> bool:
        """Give up on the leased message: move it to the dead table with ``reason``."""
        if connection is not None:
            buried = self.outbox().dead_letter(connection, lease, reason)
        else:
            buried = self._run(self._binder.dead_letter(lease, reason))
        if buried:
            settlements.report(lease, "dead_lettered")
        return buried

    def stats(self) -> Stats:
        """Messages, groups, in flight, parked, dead, the oldest message's age, and the
        groups and messages by priority and by routing key, from one snapshot.

        A message's age counts from its publish (or its requeue). A row another program wrote
        has no enqueue time: SQLite dates it by its event's created time, PostgreSQL leaves
        it out of ``oldest_age``."""
        return self._run(self._binder.stats())

    def peek(
        self, group_id: str | None = None, limit: int = 10, *, scheduled: bool = False
    ) -> list[QueuedMessage]:
        """The next ``limit`` messages of ``group_id`` (or of the whole queue, oldest first),
        with their state, without claiming them. With ``scheduled``, the scheduled messages
        follow (state ``"scheduled"``, earliest due first, ``due_at`` their due time), within
        the same ``limit``."""
        return self._run(self._binder.peek(group_id, limit, scheduled))

    def release(self, group_id: str | None = None) -> int:
        """End the park of parked messages (of ``group_id``, or all) now; returns how many."""
        return self._run(self._binder.release(group_id))

    def purge(self, group_id: str) -> int:
        """Delete every message of ``group_id``, leased and scheduled ones included; returns
        how many.

        A worker holding one of them finds its ``ack`` returns ``False``.
        """
        return self._run(self._binder.purge(group_id))

    def dead(
        self, group_id: str | None = None, seqs: Iterable[int] | None = None, limit: int = 100
    ) -> list[DeadMessage]:
        """Dead messages (of ``group_id``, or with these ``seqs``, or all), oldest first."""
        return self._run(self._binder.dead(group_id, seqs, limit))

    def requeue_dead(self, group_id: str | None = None, seqs: Iterable[int] | None = None) -> int:
        """Put dead messages (of ``group_id``, or these ``seqs``, or all) back at the tail of
        their groups, delivery count reset; returns how many."""
        return self._run(self._binder.requeue_dead(group_id, seqs))

    def purge_dead(self, group_id: str | None = None, seqs: Iterable[int] | None = None) -> int:
        """Delete dead messages (of ``group_id``, or these ``seqs``, or all); returns how many."""
        return self._run(self._binder.purge_dead(group_id, seqs))

    def pause(
        self, *, routing_key: str | Unset | None = UNSET, group_id: str | Unset = UNSET
    ) -> bool:
        """Start nothing more of a routing key (``None``: the messages published without
        one) or of a group, from when this returns, in every process, until :meth:`resume`;
        leases already out finish and settle as usual. Publishes go on. Name exactly one of the
        two. Returns whether it was not paused already."""
        return self._run(self._binder.pause(routing_key, group_id))

    def resume(
        self, *, routing_key: str | Unset | None = UNSET, group_id: str | Unset = UNSET
    ) -> bool:
        """End :meth:`pause` of that routing key or group (a group whose key is still paused
        stays held, and the other way round); idle PostgreSQL workers hear of it at once.
        Returns whether it was paused."""
        return self._run(self._binder.resume(routing_key, group_id))

    def backoff(self, routing_key: str | None, seconds: float) -> float:
        """Claim no message of ``routing_key`` (``None``: those without one) for ``seconds``
        (at most a day), as after an upstream's 429; a backoff already running longer is kept.
        Returns when it ends (epoch seconds, the database's clock)."""
        return self._run(self._binder.backoff(routing_key, seconds))

    def paused(self) -> list[Pause]:
        """The pauses in force, oldest first."""
        return self._run(self._binder.paused())

    def limits(self) -> dict[str | None, Limit]:
        """What holds back each routing key's claims now: its backoff's end."""
        return self._run(self._binder.limits())
