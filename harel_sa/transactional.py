"""A handler whose database work and ack commit together: exactly-once effects in the database.

``Worker(queue, in_transaction(queue, engine)(handle))``: for each message the worker's slot
opens a transaction on the application's ``engine`` (an ``Engine``: the handler gets a
``Connection``; a ``sessionmaker``: a ``Session``), calls ``handle(lease, connection)``, and
when it returns, acks the lease in that same transaction (:mod:`harel_sa.outbox`) and commits.
An exception (``Retry`` and ``DeadLetter`` included) rolls the handler's writes back before the
worker settles as usual, and so does a lost lease (its ack is ``False``); a crash before the
commit leaves neither (the message comes back when its lease lapses). Effects outside the
database stay at-least-once. :func:`in_async_transaction` does the same for an ``AsyncWorker``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session, sessionmaker

from harel_sa.errors import InvalidArgumentTypeError
from harel_sa.events import Lease

T = TypeVar("T")
Sync = Connection | Session
Async = AsyncConnection | AsyncSession


def in_transaction(
    queue: Any, begin: Engine | sessionmaker[Any]
) -> Callable[[Callable[[Lease[Any], Any], None]], Callable[[Lease[Any]], None]]:
    """Make ``handler(lease, connection)`` a worker's handler whose writes on ``connection``
    and whose ack commit together (``queue``: the worker's sync transport)."""
    if not isinstance(begin, Engine | sessionmaker):
        raise InvalidArgumentTypeError(
            f"begin must be an Engine or a sessionmaker, not {type(begin).__name__}"
        )

    def decorate(handler: Callable[[Lease[Any], Any], None]) -> Callable[[Lease[Any]], None]:
        def handle(lease: Lease[Any]) -> None:
            tx: Any = begin.connect() if isinstance(begin, Engine) else begin()
            try:
                handler(lease, tx)
                if queue.ack(lease, connection=tx):
                    tx.commit()
                    return
                tx.rollback()  # the lease was lost: its message is another worker's now
            except BaseException:
                tx.rollback()
                raise
            finally:
                tx.close()

        handle.__name__ = getattr(handler, "__name__", "handle")
        return handle

    return decorate


def in_async_transaction(
    queue: Any, begin: AsyncEngine | async_sessionmaker[Any]
) -> Callable[
    [Callable[[Lease[Any], Any], Awaitable[None]]], Callable[[Lease[Any]], Awaitable[None]]
]:
    """:func:`in_transaction` for an ``AsyncWorker``: ``await handler(lease, connection)``
    on an ``AsyncConnection`` (an ``AsyncEngine``) or ``AsyncSession``."""
    if not isinstance(begin, AsyncEngine | async_sessionmaker):
        raise InvalidArgumentTypeError(
            f"begin must be an AsyncEngine or an async_sessionmaker, not {type(begin).__name__}"
        )

    def decorate(
        handler: Callable[[Lease[Any], Any], Awaitable[None]],
    ) -> Callable[[Lease[Any]], Awaitable[None]]:
        async def handle(lease: Lease[Any]) -> None:
            tx: Any = begin.connect() if isinstance(begin, AsyncEngine) else begin()
            if isinstance(tx, AsyncConnection):
                await tx.start()
            try:
                await handler(lease, tx)
                if await queue.ack(lease, connection=tx):
                    await tx.commit()
                    return
                await tx.rollback()
            except BaseException:
                await tx.rollback()
                raise
            finally:
                await tx.close()

        handle.__name__ = getattr(handler, "__name__", "handle")
        return handle

    return decorate
