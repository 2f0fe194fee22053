"""The queue's public methods for the async transports, written once for every backend:
:class:`AsyncTransport`, the awaited twin of :class:`harel_sa.transports.Transport`.

Each method validates and binds its call through :class:`~harel_sa.seam.Binder` (the very
checks of the sync twin), awaits the transport's own ``_run``, and reports a settle of the
running handler's own lease to :mod:`~harel_sa.settlements`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, Self, TypeVar

from pydantic import BaseModel

from harel_sa import settlements, traces
from harel_sa.events import E, Lease
from harel_sa.flow import UNSET, Unset
from harel_sa.models import DeadMessage, Limit, Pause, QueuedMessage, Stats
from harel_sa.outbox import AsyncOutbox
from harel_sa.periodic import Periodic
from harel_sa.seam import Binder, Bound

if TYPE_CHECKING:  # an application's asyncio objects are its own import; the sync twin's
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    from harel_sa.transports import Transport

T = TypeVar("T")


class AsyncTransport(Generic[E]):
    """The queue operations of an async transport (:class:`~harel_sa.AsyncSqliteTransport`,
    :class:`~harel_sa.AsyncPostgresTransport`), each awaited."""

    _binder: Binder[E]
    _outbox: AsyncOutbox[E] | None = None
    _where: str  # the database, as messages and logs name it

    async def _run(self, call: Bound[T]) -> T:
        raise NotImplementedError

    async def _same_database_check(self) -> Callable[[tuple[Any, ...]], bool]:
        """What :meth:`outbox` gives its outbox as ``same_database``."""
        raise NotImplementedError

    async def outbox(self) -> AsyncOutbox[E]:
        """The :class:`~harel_sa.outbox.AsyncOutbox` behind ``connection=`` (see
        :meth:`Transport.outbox`)."""
        if self._outbox is None:
            self._outbox = AsyncOutbox(
                self.prefix,
                event_type=self._binder.options.event_type,
                clock=self._binder.backend.clock,
                same_database=await self._same_database_check(),
            )
        return self._outbox

    async def close(self) -> None:
        raise NotImplementedError

    async def wait_for_messages(self, timeout: float) -> bool:
        """As :meth:`SqliteTransport.wait_for_messages <harel_sa.SqliteTransport.
        wait_for_messages>` (each dialect's), awaited."""
        raise NotImplementedError

    def sync_twin(self) -> Transport[E]:
        """A sync transport on the same database with the same options (each dialect's own
        class), for a thread that must reach the queue while the event loop is busy."""
        raise NotImplementedError

    @property
    def listens(self) -> bool:
        """As :attr:`SqliteTransport.listens <harel_sa.SqliteTransport.listens>`."""
        return False

    @property
    def clock(self) -> Callable[[], float]:
        """As :attr:`SqliteTransport.clock <harel_sa.SqliteTransport.clock>`."""
        return self._binder.backend.clock or time.time

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def prefix(self) -> str:
        return self._binder.options.names.prefix

    @property
    def database(self) -> str:
        """The database this transport opened, for messages and logs (no password)."""
        return self._where

    @traces.traced_async("publish")
    async def publish(
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
        connection: AsyncConnection | AsyncSession | None = None,
    ) -> bool:
        """As :meth:`SqliteTransport.publish <harel_sa.SqliteTransport.publish>` (scheduled,
        keyed, its result); ``connection``: the application's ``AsyncConnection`` or
        ``AsyncSession``."""
        if connection is not None:
            outbox = await self.outbox()
            return await outbox.publish(
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
        return (await self._run(bound)) is not False

    @traces.traced_async("publish_many")
    async def publish_many(
        self,
        items: Iterable[tuple[str, BaseModel]],
        *,
        priority: int = 0,
        routing_key: str | None = None,
        delay: float | None = None,
        not_before: datetime | float | None = None,
        max_in_flight: int = 1,
        connection: AsyncConnection | AsyncSession | None = None,
    ) -> None:
        """As :meth:`SqliteTransport.publish_many <harel_sa.SqliteTransport.publish_many>`."""
        if connection is not None:
            outbox = await self.outbox()
            await outbox.publish_many(
                connection,
                items,
                priority=priority,
                routing_key=routing_key,
                delay=delay,
                not_before=not_before,
                max_in_flight=max_in_flight,
            )
            return
        bound = self._binder.publish_many(
            items, priority, routing_key, delay, not_before, max_in_flight
        )
        await self._run(bound)

    @traces.traced_async("cancel")
    async def cancel(
        self, key: str, *, connection: AsyncConnection | AsyncSession | None = None
    ) -> bool:
        """As :meth:`SqliteTransport.cancel <harel_sa.SqliteTransport.cancel>`."""
        if connection is not None:
            outbox = await self.outbox()
            return await outbox.cancel(connection, key)
        return await self._run(self._binder.cancel(key))

    @traces.traced_async("publish_tick")
    async def publish_tick(
        self, schedule: Periodic, tick: float, *, catch_up: bool = False
    ) -> bool:
        """As :meth:`SqliteTransport.publish_tick <harel_sa.SqliteTransport.publish_tick>`."""
        return await self._run(self._binder.publish_tick(schedule, tick, catch_up))

    @traces.traced_async("claim")
    async def claim(
        self,
        worker_id: str,
        visibility: float,
        min_priority: int = 0,
        routing_keys: Iterable[str] | None = None,
        max_deliveries: int | None = None,
    ) -> Lease[E] | None:
        """As :meth:`SqliteTransport.claim <harel_sa.SqliteTransport.claim>`."""
        return await self._run(
            self._binder.claim(worker_id, visibility, min_priority, routing_keys, max_deliveries)
        )

    @traces.traced_async("ack_and_claim")
    async def ack_and_claim(
        self,
        lease: Lease[E],
        worker_id: str,
        visibility: float,
        min_priority: int = 0,
        routing_keys: Iterable[str] | None = None,
        max_deliveries: int | None = None,
    ) -> tuple[bool, Lease[E] | None]:
        """As :meth:`SqliteTransport.ack_and_claim <harel_sa.SqliteTransport.ack_and_claim>`."""
        acked, following = await self._run(
            self._binder.ack_and_claim(
                lease, worker_id, visibility, min_priority, routing_keys, max_deliveries
            )
        )
        if acked:
            settlements.report(lease, "acked")
        return acked, following

    @traces.traced_async("claim_many")
    async def claim_many(
        self,
        worker_id: str,
        visibility: float,
        limit: int,
        min_priority: int = 0,
        routing_keys: Iterable[str] | None = None,
        max_deliveries: int | None = None,
    ) -> list[Lease[E]]:
        """As :meth:`SqliteTransport.claim_many <harel_sa.SqliteTransport.claim_many>`: one
        thread hop for the whole batch."""
        return await self._run(
            self._binder.claim_many(
                worker_id, visibility, limit, min_priority, routing_keys, max_deliveries
            )
        )

    @traces.traced_async("ack_many")
    async def ack_many(
        self,
        leases: Sequence[Lease[E]],
        *,
        connection: AsyncConnection | AsyncSession | None = None,
    ) -> list[bool]:
        """As :meth:`SqliteTransport.ack_many <harel_sa.SqliteTransport.ack_many>`."""
        if connection is not None:
            acked = await (await self.outbox()).ack_many(connection, leases)
        else:
            acked = await self._run(self._binder.ack_many(leases))
        settlements.report_acks(leases, acked)
        return acked

    @traces.traced_async("ack_many_and_claim_many")
    async def ack_many_and_claim_many(
        self,
        leases: Sequence[Lease[E]],
        worker_id: str,
        visibility: float,
        limit: int,
        min_priority: int = 0,
        routing_keys: Iterable[str] | None = None,
        max_deliveries: int | None = None,
    ) -> tuple[list[bool], list[Lease[E]]]:
        """As :meth:`SqliteTransport.ack_many_and_claim_many
        <harel_sa.SqliteTransport.ack_many_and_claim_many>`."""
        acked, claimed = await self._run(
            self._binder.ack_many_and_claim_many(
                leases, worker_id, visibility, limit, min_priority, routing_keys, max_deliveries
            )
        )
        settlements.report_acks(leases, acked)
        return acked, claimed

    @traces.traced_async("ack")
    async def ack(
        self, lease: Lease[E], *, connection: AsyncConnection | AsyncSession | None = None
    ) -> bool:
        """As :meth:`SqliteTransport.ack <harel_sa.SqliteTransport.ack>`."""
        if connection is not None:
            acked = await (await self.outbox()).ack(connection, lease)
        else:
            acked = await self._run(self._binder.ack(lease))
        if acked:
            settlements.report(lease, "acked")
        return acked

    @traces.traced_async("nack")
    async def nack(
        self,
        lease: Lease[E],
        delay: float = 0.0,
        *,
        connection: AsyncConnection | AsyncSession | None = None,
    ) -> bool:
        """As :meth:`SqliteTransport.nack <harel_sa.SqliteTransport.nack>`."""
        if connection is not None:
            nacked = await (await self.outbox()).nack(connection, lease, delay)
        else:
            nacked = await self._run(self._binder.nack(lease, delay))
        if nacked:
            settlements.report(lease, "nacked", delay)
        return nacked

    async def extend(self, lease: Lease[E], visibility: float) -> bool:
        """As :meth:`SqliteTransport.extend <harel_sa.SqliteTransport.extend>`."""
        return await self._run(self._binder.extend(lease, visibility))

    @traces.traced_async("dead_letter")
    async def dead_letter(
        self,
        lease: Lease[E],
        reason: str,
        *,
        connection: AsyncConnection | AsyncSession | None = None,
    ) -> bool:
        """As :meth:`SqliteTransport.dead_letter <harel_sa.SqliteTransport.dead_letter>`."""
        if connection is not None:
            buried = await (await self.outbox()).dead_letter(connection, lease, reason)
        else:
            buried = await self._run(self._binder.dead_letter(lease, reason))
        if buried:
            settlements.report(lease, "dead_lettered")
        return buried

    async def stats(self) -> Stats:
        """As :meth:`SqliteTransport.stats <harel_sa.SqliteTransport.stats>`."""
        return await self._run(self._binder.stats())

    async def peek(
        self, group_id: str | None = None, limit: int = 10, *, scheduled: bool = False
    ) -> list[QueuedMessage]:
        """As :meth:`SqliteTransport.peek <harel_sa.SqliteTransport.peek>`."""
        return await self._run(self._binder.peek(group_id, limit, scheduled))

    async def release(self, group_id: str | None = None) -> int:
        """As :meth:`SqliteTransport.release <harel_sa.SqliteTransport.release>`."""
        return await self._run(self._binder.release(group_id))

    async def purge(self, group_id: str) -> int:
        """As :meth:`SqliteTransport.purge <harel_sa.SqliteTransport.purge>`."""
        return await self._run(self._binder.purge(group_id))

    async def dead(
        self, group_id: str | None = None, seqs: Iterable[int] | None = None, limit: int = 100
    ) -> list[DeadMessage]:
        """As :meth:`SqliteTransport.dead <harel_sa.SqliteTransport.dead>`."""
        return await self._run(self._binder.dead(group_id, seqs, limit))

    async def requeue_dead(
        self, group_id: str | None = None, seqs: Iterable[int] | None = None
    ) -> int:
        """As :meth:`SqliteTransport.requeue_dead <harel_sa.SqliteTransport.requeue_dead>`."""
        return await self._run(self._binder.requeue_dead(group_id, seqs))

    async def purge_dead(
        self, group_id: str | None = None, seqs: Iterable[int] | None = None
    ) -> int:
        """As :meth:`SqliteTransport.purge_dead <harel_sa.SqliteTransport.purge_dead>`."""
        return await self._run(self._binder.purge_dead(group_id, seqs))

    async def pause(
        self, *, routing_key: str | Unset | None = UNSET, group_id: str | Unset = UNSET
    ) -> bool:
        """As :meth:`SqliteTransport.pause <harel_sa.SqliteTransport.pause>`."""
        return await self._run(self._binder.pause(routing_key, group_id))

    async def resume(
        self, *, routing_key: str | Unset | None = UNSET, group_id: str | Unset = UNSET
    ) -> bool:
        """As :meth:`SqliteTransport.resume <harel_sa.SqliteTransport.resume>`."""
        return await self._run(self._binder.resume(routing_key, group_id))

    async def backoff(self, routing_key: str | None, seconds: float) -> float:
        """As :meth:`SqliteTransport.backoff <harel_sa.SqliteTransport.backoff>`."""
        return await self._run(self._binder.backoff(routing_key, seconds))

    async def paused(self) -> list[Pause]:
        """As :meth:`SqliteTransport.paused <harel_sa.SqliteTransport.paused>`."""
        return await self._run(self._binder.paused())

    async def limits(self) -> dict[str | None, Limit]:
        """As :meth:`SqliteTransport.limits <harel_sa.SqliteTransport.limits>`."""
        return await self._run(self._binder.limits())
