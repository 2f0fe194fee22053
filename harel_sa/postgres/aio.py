"""``AsyncPostgresTransport``: the same operations, awaited, over an async psycopg pool.

Each call takes a connection of an ``AsyncConnectionPool`` and awaits its operation's program
(:func:`harel_sa.postgres.driver.arun`): the statements, parameters and decoding are those the
sync transport runs. Coroutines on one transport claim in parallel, each on its own connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from harel_sa import validate
from harel_sa.async_transports import AsyncTransport
from harel_sa.cancels import Finished, settled
from harel_sa.errors import TransportClosedError, made_by_create
from harel_sa.events import E, Event, Lease
from harel_sa.postgres import outages
from harel_sa.postgres.backend import PostgresBackend
from harel_sa.postgres.connect import Pooler, display, set_up_async
from harel_sa.postgres.driver import arun, no_connection, run_again, translate
from harel_sa.postgres.listen import AsyncListener
from harel_sa.postgres.sessions import Session, Sessions
from harel_sa.postgres.startup import schema_at_open
from harel_sa.postgres.transport import PoolSettings, PostgresTransport, options_of, pool_settings
from harel_sa.postgres.wire import AsyncConnection, Wire
from harel_sa.schema import DEFAULT_PREFIX
from harel_sa.seam import Binder, Bound, Options

T = TypeVar("T")


class AsyncPostgresTransport(AsyncTransport[E]):
    """:class:`~harel_sa.PostgresTransport`'s async twin: the same rules, options and errors,
    every call awaited. Build it with ``await AsyncPostgresTransport.create(url, ...)``."""

    def __init__(
        self,
        options: Options[E],
        backend: PostgresBackend | None = None,
        pool: AsyncConnectionPool[Any] | None = None,
        target: object = None,
        settings: PoolSettings | None = None,
    ) -> None:
        """Use :meth:`create`."""
        if not isinstance(options, Options) or backend is None or pool is None or not settings:
            raise made_by_create(type(self).__name__)
        self._backend = backend
        self._binder = Binder(options, backend)
        self._pool: AsyncConnectionPool[Any] | None = pool
        self._sessions: Sessions[AsyncConnection] = Sessions()
        self._target = target
        self._pool_size = settings.size
        self._pool_name = settings.name
        self._pooler = settings.pooler
        self._where = display(target)
        self._listener = AsyncListener(settings.conninfo, options.names, settings.server)
        self._unchecked: Callable[[], object] | None = None  # see create()

    @classmethod
    async def create(
        cls,
        url: object,
        clock: Callable[[], float] | None = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        create_schema: bool = True,
        busy_timeout: float = 5.0,
        event_type: type[E] = Event,  # type: ignore[assignment]
        pool_size: int = 10,
        pooler: Pooler = "auto",
    ) -> AsyncPostgresTransport[E]:
        """Open the transport: the options of :class:`~harel_sa.PostgresTransport`."""
        options = options_of(prefix, clock, busy_timeout, event_type)
        where = display(url)
        settings = pool_settings(url, options, pool_size, pooler)
        # The schema is looked at (and made) on one connection of its own, as the sync
        # transport does it: at open, and before the first call if it was not at head.
        unchecked = await asyncio.to_thread(
            schema_at_open, settings.conninfo, options.names, where, create_schema, settings.pooler
        )

        async def configure(conn: AsyncConnection) -> None:
            settings.server.check(
                await set_up_async(conn, settings.lock_timeout_ms, settings.pooler)
            )
            conn.wire = Wire(conn, settings.server)
            outages.connected(settings.name)

        arguments = settings.arguments(configure, AsyncConnection)
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(**arguments)
        try:
            await pool.open(wait=True, timeout=settings.open_timeout)
        except PoolTimeout as exc:
            await pool.close()
            raise no_connection(exc, None, where) from exc
        transport = cls(options, PostgresBackend(options.names, clock), pool, url, settings)
        transport._unchecked = unchecked
        return transport

    async def _same_database_check(self) -> Callable[[tuple[Any, ...]], bool]:
        mine: tuple[Any, ...] = await self._run(self._backend.identity())
        return lambda identity: tuple(identity) == mine

    def sync_twin(self) -> PostgresTransport[E]:
        """A :class:`~harel_sa.PostgresTransport` on the same database with the same options
        (the :class:`~harel_sa.AsyncWorker`'s heartbeat extends leases through it, so a
        handler that blocks the event loop cannot starve it)."""
        options = self._binder.options
        return PostgresTransport(
            self._target,
            self._backend.clock,
            prefix=self.prefix,
            create_schema=False,
            busy_timeout=options.busy_timeout,
            event_type=options.event_type,
            pool_size=2,
            pooler=self._pooler,
        )

    async def _run(self, op: Bound[T]) -> T:
        # A cancelled caller lets the operation finish on its connection (cancelling the
        # statement at the server would leave a lease committed or not, nobody knowing which)
        # and gives back the leases it took (harel_sa.cancels). Its waits carry on through the
        # cancellation themselves (to_end), in the caller's task: no task per call.
        if self._unchecked is not None:  # SchemaError until the schema is at head
            await asyncio.to_thread(self._unchecked)
            self._unchecked = None
        return await settled(self._attempt(op), self._give_back)

    async def _give_back(self, lease: Lease[Any]) -> bool:
        return await self._attempt(self._backend.give_back(lease))

    async def _connect(self, pool: AsyncConnectionPool[Any]) -> Session[AsyncConnection]:
        # The stack was empty: wait at the pool (harel_sa.postgres.sessions).
        with self._sessions.waiting() as kept:
            if kept is not None:
                return kept
            try:
                conn = await pool.getconn()
            except PoolTimeout as exc:
                closed = self._pool is None
                raise no_connection(exc, pool.get_stats(), self._where, closed=closed) from exc
        return self._sessions.new(conn)

    async def _session(self, pool: AsyncConnectionPool[Any]) -> Session[AsyncConnection]:
        """:meth:`PostgresTransport._session <harel_sa.PostgresTransport._session>`, awaited:
        a session whose connection the server did not end while it sat idle."""
        for _ in range(self._pool_size + 1):
            session = self._sessions.take() or await self._connect(pool)
            if not session.connection.wire.ended():
                return session
            await session.connection.close()
            await _put_back(pool, [session], None)
        return session

    async def _attempt(self, op: Bound[T]) -> T:
        pool = self._pool
        if pool is None:
            raise TransportClosedError("the transport is closed")
        for attempt in (1, 2):
            session = await self._session(pool)
            done: tuple[object] | None = None  # what the call returned, once it did
            try:
                done = (await arun(session.connection, op, to_end=True),)
                return done[0]
            except Finished as finished:
                done = (finished.result,)
                raise
            except psycopg.Error as exc:
                if run_again(exc, attempt, op, session.connection):
                    continue
                raise translate(exc, session.connection, self._where) from exc
            finally:
                returned = self._sessions.keep(session)
                if returned:
                    await _put_back(pool, returned, done)
        raise AssertionError("unreachable")  # pragma: no cover

    @property
    def listens(self) -> bool:
        return True

    async def wait_for_messages(self, timeout: float) -> bool:
        """As :meth:`PostgresTransport.wait_for_messages
        <harel_sa.PostgresTransport.wait_for_messages>`, awaited."""
        seconds = validate.seconds("timeout", timeout, allow_zero=True)
        if self._pool is None:
            raise TransportClosedError("the transport is closed")
        return await self._listener.wait(seconds)

    async def close(self) -> None:
        """Close the pool; later calls raise :class:`~harel_sa.TransportClosedError`."""
        pool, self._pool = self._pool, None
        await self._listener.close()
        if pool is not None:
            for returned in self._sessions.close():
                await pool.putconn(returned.connection)
            await pool.close()
            outages.forget(self._pool_name)


async def _put_back(
    pool: AsyncConnectionPool[Any],
    sessions: list[Session[AsyncConnection]],
    done: tuple[Any] | None,
) -> None:
    """Give ``sessions``' connections back to ``pool``, to the end whatever happens to the
    caller (a task of its own: a connection left half given back is lost to the pool). A
    cancellation meanwhile, after a call returned (``done``), is the call's :class:`Finished`:
    its leases are given back."""

    async def put_back() -> None:
        for session in sessions:
            await pool.putconn(session.connection)

    try:
        await asyncio.shield(put_back())
    except asyncio.CancelledError as cancelled:
        if done is None:
            raise
        raise Finished(done[0], cancelled) from None
