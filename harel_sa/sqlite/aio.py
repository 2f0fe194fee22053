"""``AsyncSqliteTransport``: the same operations, awaited, over aiosqlite.

Every operation is one call into aiosqlite's connection thread, where it runs the very function
the sync transport runs (:mod:`harel_sa.sqlite.operations`): one thread hop per operation,
however many statements it holds. An ``asyncio.Lock`` serializes whole operations, so one
coroutine's ``BEGIN IMMEDIATE`` never lands inside another's transaction. The hop reaches
aiosqlite's private names (its public API offers one statement per hop) in one function only,
:func:`in_thread`, which a unit test holds to the installed aiosqlite
(tests/unit/test_aiosqlite_access.py).
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

import aiosqlite
from sqlalchemy import Engine

from harel_sa import validate
from harel_sa.async_transports import AsyncTransport
from harel_sa.cancels import shielded
from harel_sa.errors import InvalidArgumentError, TransportClosedError, made_by_create
from harel_sa.events import E, Event
from harel_sa.schema import DEFAULT_PREFIX
from harel_sa.seam import Binder, Bound, Options, Synchronous
from harel_sa.seam import synchronous as check_synchronous
from harel_sa.sqlite import startup
from harel_sa.sqlite.backend import SqliteBackend, sqlite_call
from harel_sa.sqlite.connection import (
    check_target,
    display,
    driver_args,
    end_use,
    same_file,
    sqlite_url,
)
from harel_sa.sqlite.driver import storage_errors
from harel_sa.sqlite.transport import SqliteTransport
from harel_sa.sqlite.watch import Watch, abandon

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

T = TypeVar("T")


def _is_async_engine(target: object) -> TypeGuard[AsyncEngine]:
    """Whether ``target`` is an ``AsyncEngine``, without importing SQLAlchemy's asyncio
    extension (and the ORM it pulls in, which every command would pay for at its start):
    whoever made an ``AsyncEngine`` imported it already."""
    module = sys.modules.get("sqlalchemy.ext.asyncio")
    return module is not None and isinstance(target, module.AsyncEngine)


@dataclass
class _Driver:
    """An aiosqlite connection, ours or checked out of a caller's ``AsyncEngine``, and the
    :class:`~harel_sa.sqlite.watch.Watch` every operation on it runs under."""

    conn: aiosqlite.Connection
    where: str
    watch: Watch
    handle: AsyncConnection | None = None  # the caller's engine connection, if any
    prior_isolation: Any = None

    @classmethod
    async def open(cls, target: object, busy_timeout: float, create: bool) -> _Driver:
        if _is_async_engine(target):
            if target.dialect.name != "sqlite" or target.dialect.driver != "aiosqlite":
                raise InvalidArgumentError(
                    f"the AsyncEngine must use sqlite+aiosqlite, not {target.url.drivername!r}"
                )
            check_target(target.url, create)
            handle = await target.connect()
            raw = await handle.get_raw_connection()
            conn: aiosqlite.Connection = raw.driver_connection  # type: ignore[assignment]
            prior = await in_thread(conn, lambda c: c.isolation_level)
            watch = await in_thread(conn, lambda c: Watch(c, busy_timeout))
            return cls(conn, display(target.url), watch, handle, prior)
        url = sqlite_url(target.url if isinstance(target, Engine) else target)
        check_target(url, create)
        args, kwargs = driver_args(url, busy_timeout)
        with storage_errors():
            conn = await aiosqlite.connect(*args, **kwargs)
        watch = await in_thread(conn, lambda c: Watch(c, busy_timeout))
        return cls(conn, display(url), watch)

    def run(self, call: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """``call`` handed to the driver's thread; the future holds its result."""
        self.watch.before()  # in a forked child the driver's thread does not even exist
        watch = self.watch  # the job must not hold this driver (see in_thread)
        return in_thread(self.conn, lambda c: watch.run(call, c))

    async def close(self) -> None:
        if self.watch.forked:
            abandon(self)  # the parent's connection (its thread is not in this process)
            return
        borrowed = self.handle is not None
        try:
            await in_thread(self.conn, lambda c: end_use(c, borrowed, self.prior_isolation))
            if self.handle is None:
                await self.conn.close()
            else:
                await self.handle.close()
        finally:
            self.watch.closed()


class AsyncSqliteTransport(AsyncTransport[E]):
    """The async twin of :class:`~harel_sa.SqliteTransport`: same rules, errors and schema.

    Open with ``await AsyncSqliteTransport.create(path, clock, ...)``, as the harel engine opens
    its own (``path`` defaults to ``":memory:"``); ``path`` is a file path, a URL, or an
    ``AsyncEngine`` (``sqlite+aiosqlite``) the caller owns. Many coroutines may share one
    transport. A cancelled call never leaves a transaction open: an operation already handed
    to the driver finishes, and a claim whose caller was cancelled gives its lease back, its
    delivery uncounted.
    """

    def __init__(
        self,
        options: Options[E],
        synchronous: Synchronous = "FULL",
        driver: _Driver | None = None,
    ) -> None:
        """Use :meth:`create`."""
        if not isinstance(options, Options) or driver is None:
            raise made_by_create(type(self).__name__)
        self._binder = Binder(options, SqliteBackend(options.names, options.clock))
        self._synchronous = synchronous
        self._driver: _Driver | None = driver
        self._lock = asyncio.Lock()
        self._where = driver.where
        self._target: object = None  # what create() opened, for sync_twin()
        self._unchecked: Callable[[sqlite3.Connection], None] | None = None  # see create()

    @classmethod
    async def create(
        cls,
        path: object = ":memory:",
        clock: Callable[[], float] = time.time,
        *,
        prefix: str = DEFAULT_PREFIX,
        create_schema: bool = True,
        busy_timeout: float = 5.0,
        event_type: type[E] = Event,  # type: ignore[assignment]
        synchronous: Synchronous = "FULL",
    ) -> AsyncSqliteTransport[E]:
        """Open the transport; the schema is created, upgraded or checked as in the sync one."""
        options = Options(prefix, clock, busy_timeout, event_type)
        durability = check_synchronous(synchronous)
        driver = await _Driver.open(path, options.busy_timeout, create_schema)
        o = options
        where = driver.where
        try:
            unchecked = await driver.run(
                lambda raw: startup.at_open(
                    raw, o.names, o.busy_timeout, durability, create_schema, where
                )
            )
        except BaseException:
            await driver.close()
            raise
        transport = cls(options, durability, driver)
        transport._target = path
        transport._unchecked = unchecked
        return transport

    async def _same_database_check(self) -> Callable[[tuple[Any, ...]], bool]:
        mine = self._driver.watch.path if self._driver is not None else None
        return lambda identity: same_file(identity[0], mine)

    def sync_twin(self) -> SqliteTransport[E]:
        """A new :class:`~harel_sa.SqliteTransport` on the same database, with the same
        options (prefix, clock, busy timeout, event type, durability; ``create_schema=False``).

        For a thread that must reach the queue while the event loop is busy (``AsyncWorker``'s
        heartbeat). The caller closes it. A private ``:memory:`` queue has no twin: no second
        connection can see it (``InvalidArgumentError``).
        """
        target = self._target
        if _is_async_engine(target):
            target = target.url.set(drivername="sqlite")
        elif not isinstance(target, Engine):
            url = sqlite_url(target)
            if url.database in (None, "", ":memory:") or "mode=memory" in str(url):
                raise InvalidArgumentError("a private :memory: queue has no sync twin")
            target = url.set(drivername="sqlite")
        o = self._binder.options
        return SqliteTransport(
            target,
            o.clock,
            prefix=o.names.prefix,
            create_schema=False,
            busy_timeout=o.busy_timeout,
            event_type=o.event_type,
            synchronous=self._synchronous,
        )

    async def _run(self, bound: Bound[T]) -> T:
        driver = self._driver
        if driver is not None:
            driver.watch.before()  # before the lock, which belongs to the parent's loop
        async with self._lock:
            if self._driver is None:
                raise TransportClosedError("the transport is closed")
            # The driver's thread finishes what it was handed, cancelled or not.
            driver = self._driver
            if self._unchecked is not None:  # SchemaError until the schema is at head
                await driver.run(self._unchecked)
                self._unchecked = None
            return await shielded(
                driver.run(sqlite_call(bound)),
                lambda taken: driver.run(sqlite_call(self._binder.give_back(taken))),
            )

    async def wait_for_messages(self, timeout: float) -> bool:
        """As :meth:`SqliteTransport.wait_for_messages
        <harel_sa.SqliteTransport.wait_for_messages>`: sleeps, awaited."""
        await asyncio.sleep(validate.seconds("timeout", timeout, allow_zero=True))
        return False

    async def close(self) -> None:
        """Close the connection; later calls raise :class:`~harel_sa.TransportClosedError`."""
        driver = self._driver
        if driver is not None and driver.watch.forked:  # the parent's lock and connection
            self._driver = None
            await driver.close()
            return
        async with self._lock:
            driver, self._driver = self._driver, None
        if driver is not None:
            await driver.close()


def in_thread(
    conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]
) -> asyncio.Future[T]:
    """Hand ``fn`` to ``conn``'s thread, to run on its sqlite3 connection: one hop for a whole
    operation; the future (of the running loop) holds its result or its error.

    aiosqlite runs each of its own methods this way: ``Connection._execute`` puts a future and
    a function on the queue its thread serves (``Connection._tx``), after checking that the
    connection runs; the function uses the sqlite3 connection ``Connection._conn``. Its public
    API offers only one statement per hop, which would cost a hop per statement of a claim.
    The future is put on the queue here, not through ``_execute``: a coroutine would need a
    task of its own to be shielded from a cancelled caller (``cancels.shielded``), and each
    task's steps cost loop iterations on every operation. The only place harel_sa reaches
    aiosqlite's private names.
    """
    if not conn._running or conn._connection is None:  # as _execute: nobody would serve it
        raise ValueError("Connection closed")
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    # The job holds the sqlite3 connection, never the aiosqlite one (nor anything that holds
    # it): aiosqlite's thread keeps its last job while it waits for the next, and only a
    # collected aiosqlite connection stops a thread nobody closed (a forgotten close() would
    # otherwise keep the interpreter from exiting).
    raw = conn._conn
    conn._tx.put_nowait((future, lambda: fn(raw)))
    return future
