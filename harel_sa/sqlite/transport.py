"""``SqliteTransport``: the queue over one sqlite3 connection, safe to share between threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Generic, TypeVar

from pydantic import BaseModel

from harel_sa import settlements, validate
from harel_sa.calls import Call, Calls, Options, Synchronous
from harel_sa.errors import TransportClosedError
from harel_sa.events import E, Event, Lease
from harel_sa.models import DeadMessage, QueuedMessage, Stats
from harel_sa.schema import DEFAULT_PREFIX
from harel_sa.sqlite import startup
from harel_sa.sqlite.backend import SQLITE
from harel_sa.sqlite.connection import SyncConnection

T = TypeVar("T")


class SqliteTransport(Generic[E]):
    """A durable queue in a SQLite file: FIFO per group, one message in flight per group,
    round-robin across groups (oldest-claimed first), a priority floor and routing keys.

    Built as the harel engine builds its own ``SqliteTransport``: ``path`` first (default
    ``":memory:"``, a private queue for this instance), then ``clock``. ``path`` is a file path,
    a ``sqlite:///`` URL, or an :class:`~sqlalchemy.Engine` the caller owns (no hooks are
    installed on it). ``create_schema=True`` creates or upgrades the schema
    at open; ``False`` only checks it and raises :class:`~harel_sa.SchemaError` when it is not at
    head. Every "now" comes from ``clock``. ``synchronous="NORMAL"`` trades the last commits on
    power loss (never on a process crash) for much cheaper commits. Calls from several threads
    are serialized: each operation is one whole transaction.
    """

    def __init__(
        self,
        path: object = ":memory:",
        clock: Callable[[], float] = time.time,
        *,
        prefix: str = DEFAULT_PREFIX,
        create_schema: bool = True,
        busy_timeout: float = 5.0,
        event_type: type[E] = Event,  # type: ignore[assignment]
        synchronous: Synchronous = "FULL",
    ) -> None:
        options = Options(prefix, clock, busy_timeout, event_type, synchronous)
        self._calls = Calls(options, SQLITE)
        self._lock = threading.Lock()
        self._db: SyncConnection | None = SyncConnection.open(
            path, options.busy_timeout, create_schema
        )
        self._where = self._db.where
        try:
            startup.run(
                self._db.raw,
                options.names,
                options.busy_timeout,
                options.synchronous,
                create_schema,
                self._db.where,
            )
        except BaseException:
            self.close()
            raise

    @property
    def prefix(self) -> str:
        return self._calls.options.names.prefix

    @property
    def database(self) -> str:
        """The database this transport opened, for messages and logs (no password)."""
        return self._where

    def _run(self, call: Call[T]) -> T:
        db = self._db
        if db is not None and db.watch.blocked:
            db.watch.before()  # before the lock: one a parent's thread held at fork() stays held
        with self._lock:
            if self._db is None:
                raise TransportClosedError("the transport is closed")
            return self._db.watch.run(call, self._db.raw)

    def publish(
        self,
        group_id: str,
        event: BaseModel,
        priority: int = 0,
        routing_key: str | None = None,
    ) -> None:
        """Append ``event`` to ``group_id``'s queue, durably, once this returns (any ``str``
        that UTF-8 holds is a group id, ``""`` included, as the harel engine may send it).

        ``event`` is an instance of the transport's ``event_type``, or of any pydantic model
        whose JSON reads as one (the harel engine's ``Event``); anything else raises
        :class:`~harel_sa.InvalidArgumentTypeError` before anything is written.

        The first publish of a group fixes its ``priority`` (0-4) and ``routing_key`` until the
        group drains; later publishes only add messages.
        """
        self._run(self._calls.publish(group_id, event, priority, routing_key))

    def publish_many(
        self,
        items: Iterable[tuple[str, BaseModel]],
        *,
        priority: int = 0,
        routing_key: str | None = None,
    ) -> None:
        """Publish every ``(group_id, event)`` pair in one transaction: all or none."""
        self._run(self._calls.publish_many(items, priority, routing_key))

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
            self._calls.claim(worker_id, visibility, min_priority, routing_keys, max_deliveries)
        )

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
            self._calls.ack_and_claim(
                lease, worker_id, visibility, min_priority, routing_keys, max_deliveries
            )
        )
        if acked:
            settlements.report(lease, "acked")
        return acked, following

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
            self._calls.claim_many(
                worker_id, visibility, limit, min_priority, routing_keys, max_deliveries
            )
        )

    def ack_many(self, leases: Sequence[Lease[E]]) -> list[bool]:
        """:meth:`ack` every lease in one write transaction; for each, whether its ack took
        (``False``, changing nothing, for a lease that was lost)."""
        acked = self._run(self._calls.ack_many(leases))
        settlements.report_acks(leases, acked)
        return acked

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
            self._calls.ack_many_and_claim_many(
                leases, worker_id, visibility, limit, min_priority, routing_keys, max_deliveries
            )
        )
        settlements.report_acks(leases, acked)
        return acked, claimed

    def ack(self, lease: Lease[E]) -> bool:
        """Remove the leased message (and its group once empty).

        Returns ``False``, changing nothing, when the lease was lost (it lapsed and another
        worker claimed the message).
        """
        acked = self._run(self._calls.ack(lease))
        if acked:
            settlements.report(lease, "acked")
        return acked

    def nack(self, lease: Lease[E], delay: float = 0.0) -> bool:
        """Give the message back: at once (``delay == 0``), or parked for ``delay`` seconds,
        during which its group stays blocked. ``False`` when the lease was lost."""
        nacked = self._run(self._calls.nack(lease, delay))
        if nacked:
            settlements.report(lease, "nacked", delay)
        return nacked

    def extend(self, lease: Lease[E], visibility: float) -> bool:
        """Heartbeat: the lease now ends ``visibility`` seconds from now. ``False`` when lost."""
        return self._run(self._calls.extend(lease, visibility))

    def dead_letter(self, lease: Lease[E], reason: str) -> bool:
        """Give up on the leased message: move it to the dead table with ``reason``."""
        buried = self._run(self._calls.dead_letter(lease, reason))
        if buried:
            settlements.report(lease, "dead_lettered")
        return buried

    def stats(self) -> Stats:
        """Messages, groups, in flight, parked, dead, the oldest message's age, and the
        groups and messages by priority and by routing key, from one snapshot."""
        return self._run(self._calls.stats())

    def peek(self, group_id: str | None = None, limit: int = 10) -> list[QueuedMessage]:
        """The next ``limit`` messages of ``group_id`` (or of the whole queue, oldest first),
        with their state, without claiming them."""
        return self._run(self._calls.peek(group_id, limit))

    def release(self, group_id: str | None = None) -> int:
        """End the park of parked messages (of ``group_id``, or all) now; returns how many."""
        return self._run(self._calls.release(group_id))

    def purge(self, group_id: str) -> int:
        """Delete every message of ``group_id``, leased ones included; returns how many.

        A worker holding one of them finds its ``ack`` returns ``False``.
        """
        return self._run(self._calls.purge(group_id))

    def dead(
        self, group_id: str | None = None, seqs: Iterable[int] | None = None, limit: int = 100
    ) -> list[DeadMessage]:
        """Dead messages (of ``group_id``, or with these ``seqs``, or all), oldest first."""
        return self._run(self._calls.dead(group_id, seqs, limit))

    def requeue_dead(self, group_id: str | None = None, seqs: Iterable[int] | None = None) -> int:
        """Put dead messages (of ``group_id``, or these ``seqs``, or all) back at the tail of
        their groups, delivery count reset; returns how many."""
        return self._run(self._calls.requeue_dead(group_id, seqs))

    def purge_dead(self, group_id: str | None = None, seqs: Iterable[int] | None = None) -> int:
        """Delete dead messages (of ``group_id``, or these ``seqs``, or all); returns how many."""
        return self._run(self._calls.purge_dead(group_id, seqs))

    def wait_for_messages(self, timeout: float) -> bool:
        """Sleep ``timeout`` seconds and return ``False``: a SQLite file tells no other process
        when a message arrives, so a worker polls (PostgreSQL's transport waits for a
        notification here). The same signature as :meth:`harel_sa.PostgresTransport.
        wait_for_messages`, so a worker calls it whatever its backend."""
        time.sleep(validate.seconds("timeout", timeout, allow_zero=True))
        return False

    def close(self) -> None:
        """Close the connection; later calls raise :class:`~harel_sa.TransportClosedError`."""
        db = self._db
        if db is not None and db.watch.forked:  # the parent's lock and connection: let go
            self._db = None
            db.close()
            return
        with self._lock:
            db, self._db = self._db, None
        if db is not None:
            db.close()

    def __enter__(self) -> SqliteTransport[E]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
