"""What a worker needs of its transport: :class:`Queue` (``Worker``) and :class:`AsyncQueue`
(``AsyncWorker``), and which transports are known to be one.

A worker only calls the transports' public API, the same on every backend, so SQLite's and
PostgreSQL's twins both drive it. The check at construction is by class, not by shape: an async
transport has a sync transport's method names, and a worker handed the wrong twin must be told
so at once, not find coroutines where it expected leases.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Protocol

from harel_sa.events import E, Lease

#: ``(module, class)`` of each transport a ``Worker`` drives. A class whose module was never
#: imported can have no instance, so the check never imports a backend (or its driver) itself.
SYNC_TRANSPORTS = (
    ("harel_sa.sqlite.transport", "SqliteTransport"),
    ("harel_sa.postgres.transport", "PostgresTransport"),
)
#: The same for an ``AsyncWorker``.
ASYNC_TRANSPORTS = (
    ("harel_sa.sqlite.aio", "AsyncSqliteTransport"),
    ("harel_sa.postgres.aio", "AsyncPostgresTransport"),
)

#: The transports whose ``wait_for_messages`` ends when a message arrives (PostgreSQL's
#: ``LISTEN``); the others' only sleeps, so a worker on them waits on its own events alone.
NOTIFYING_TRANSPORTS = (
    ("harel_sa.postgres.transport", "PostgresTransport"),
    ("harel_sa.postgres.aio", "AsyncPostgresTransport"),
)


class Queue(Protocol[E]):
    """The calls a :class:`~harel_sa.Worker` makes (each safe to make from several threads)."""

    @property
    def prefix(self) -> str: ...
    @property
    def database(self) -> str: ...
    def claim(
        self,
        worker_id: str,
        visibility: float,
        min_priority: int = 0,
        routing_keys: Iterable[str] | None = None,
        max_deliveries: int | None = None,
    ) -> Lease[E] | None: ...
    def ack_and_claim(
        self,
        lease: Lease[E],
        worker_id: str,
        visibility: float,
        min_priority: int = 0,
        routing_keys: Iterable[str] | None = None,
        max_deliveries: int | None = None,
    ) -> tuple[bool, Lease[E] | None]: ...
    def claim_many(
        self,
        worker_id: str,
        visibility: float,
        limit: int,
        min_priority: int = 0,
        routing_keys: Iterable[str] | None = None,
        max_deliveries: int | None = None,
    ) -> list[Lease[E]]: ...
    def ack_many(self, leases: Sequence[Lease[E]]) -> list[bool]: ...
    def ack_many_and_claim_many(
        self,
        leases: Sequence[Lease[E]],
        worker_id: str,
        visibility: float,
        limit: int,
        min_priority: int = 0,
        routing_keys: Iterable[str] | None = None,
        max_deliveries: int | None = None,
    ) -> tuple[list[bool], list[Lease[E]]]: ...
    def ack(self, lease: Lease[E]) -> bool: ...
    def nack(self, lease: Lease[E], delay: float = 0.0) -> bool: ...
    def extend(self, lease: Lease[E], visibility: float) -> bool: ...
    def dead_letter(self, lease: Lease[E], reason: str) -> bool: ...
    def wait_for_messages(self, timeout: float) -> bool: ...
    def close(self) -> None: ...


class AsyncQueue(Protocol[E]):
    """The calls an :class:`~harel_sa.AsyncWorker` awaits, and the sync twin its heartbeat
    extends leases through."""

    @property
    def prefix(self) -> str: ...
    @property
    def database(self) -> str: ...
    async def claim(
        self,
        worker_id: str,
        visibility: float,
        min_priority: int = 0,
        routing_keys: Iterable[str] | None = None,
        max_deliveries: int | None = None,
    ) -> Lease[E] | None: ...
    async def ack_and_claim(
        self,
        lease: Lease[E],
        worker_id: str,
        visibility: float,
        min_priority: int = 0,
        routing_keys: Iterable[str] | None = None,
        max_deliveries: int | None = None,
    ) -> tuple[bool, Lease[E] | None]: ...
    async def claim_many(
        self,
        worker_id: str,
        visibility: float,
        limit: int,
        min_priority: int = 0,
        routing_keys: Iterable[str] | None = None,
        max_deliveries: int | None = None,
    ) -> list[Lease[E]]: ...
    async def ack_many(self, leases: Sequence[Lease[E]]) -> list[bool]: ...
    async def ack_many_and_claim_many(
        self,
        leases: Sequence[Lease[E]],
        worker_id: str,
        visibility: float,
        limit: int,
        min_priority: int = 0,
        routing_keys: Iterable[str] | None = None,
        max_deliveries: int | None = None,
    ) -> tuple[list[bool], list[Lease[E]]]: ...
    async def ack(self, lease: Lease[E]) -> bool: ...
    async def nack(self, lease: Lease[E], delay: float = 0.0) -> bool: ...
    async def extend(self, lease: Lease[E], visibility: float) -> bool: ...
    async def dead_letter(self, lease: Lease[E], reason: str) -> bool: ...
    async def wait_for_messages(self, timeout: float) -> bool: ...
    def sync_twin(self) -> Queue[E]: ...


def known(transports: Sequence[tuple[str, str]]) -> tuple[type, ...]:
    """The classes of ``transports`` whose modules are imported."""
    return tuple(
        getattr(sys.modules[module], name) for module, name in transports if module in sys.modules
    )


def notifies(transport: object) -> bool:
    """Whether ``transport`` hears of new messages (one of :data:`NOTIFYING_TRANSPORTS`)."""
    return isinstance(transport, known(NOTIFYING_TRANSPORTS))
