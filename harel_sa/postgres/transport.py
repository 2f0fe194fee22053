"""``PostgresTransport``: the queue on a PostgreSQL server, over a pool of psycopg connections.

Safe to share between threads, and claims from several threads run in parallel: each call
takes a connection of the pool for its one statement (or its one transaction). Workers on
other processes and hosts claim different groups at the same time (``FOR UPDATE SKIP
LOCKED``; no global lock, no advisory lock on the claim path).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from harel_sa import validate
from harel_sa.errors import TransportClosedError
from harel_sa.events import E, Event
from harel_sa.postgres import outages
from harel_sa.postgres.backend import PostgresBackend
from harel_sa.postgres.connect import Pooler, checked_pooler, conninfo, display, set_up
from harel_sa.postgres.driver import ADAPTERS, no_connection, run, run_again, translate
from harel_sa.postgres.listen import Listener
from harel_sa.postgres.sessions import Session, Sessions
from harel_sa.postgres.startup import schema_at_open
from harel_sa.postgres.wire import Connection, ServerSession, Wire
from harel_sa.schema import DEFAULT_PREFIX
from harel_sa.seam import Binder, Bound, Options
from harel_sa.transports import Transport

T = TypeVar("T")


class PostgresTransport(Transport[E]):
    """A durable queue on a PostgreSQL server, with the rules of
    :class:`~harel_sa.SqliteTransport`: FIFO per group, one message in flight per group,
    round-robin across groups (oldest-claimed first, never-claimed in arrival order), a
    priority floor, routing keys, fenced leases, parks and dead letters.

    ``url`` is a ``postgresql://`` URL (``postgresql+psycopg://`` and the like too) or a
    SQLAlchemy Engine on one, of which only the URL is used: the transport keeps its own pool
    of at most ``pool_size`` psycopg connections and touches nothing of the Engine's.

    **Clock.** By default every "now" (lease expiries, parks, enqueue times, stats) is the
    database server's (``statement_timestamp()``), so workers on hosts whose clocks disagree
    never steal a live lease from each other. A ``clock`` (a callable returning epoch seconds)
    replaces it, for tests that move time by hand; every process on the queue must then use
    the same clock.

    ``create_schema=True`` creates or upgrades the schema at open (under the advisory lock
    migrations take); ``False`` writes nothing, and every call raises
    :class:`~harel_sa.SchemaError` while it is not at head. ``busy_timeout`` bounds every
    wait for a row lock (PostgreSQL's ``lock_timeout``) and for a connection of the pool:
    past it, a call raises :class:`~harel_sa.BusyError`. A broken connection (a server
    restart, a terminated backend, a network drop) raises
    :class:`~harel_sa.ConnectionLostError`; reads that only look (stats, peek, dead) are
    retried once on a new connection, and the pool replaces broken connections.

    **Behind a connection pooler.** ``pooler="auto"`` finds one when each connection starts
    (PgBouncer answers with a cancel key of its own): then the transport sets nothing on the
    server sessions (READ COMMITTED and the lock wait are the role's or the database's) and
    never listens (idle workers poll), since a transaction pooler hands the next transaction
    to whichever server connection is free. ``"session"`` says the URL names a pooler that
    gives each connection one server connection for its life (PgBouncer's ``pool_mode =
    session``): the settings and ``LISTEN`` are then safe, as on a direct connection.
    ``"transaction"`` says the server connection may change between transactions whatever
    the start looks like: no settings, no ``LISTEN``. Either way statements stay prepared
    until the pooler is found to lose one, then go unprepared.
    """

    def __init__(
        self,
        url: object,
        clock: Callable[[], float] | None = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        create_schema: bool = True,
        busy_timeout: float = 5.0,
        event_type: type[E] = Event,  # type: ignore[assignment]
        pool_size: int = 10,
        pooler: Pooler = "auto",
    ) -> None:
        options = options_of(prefix, clock, busy_timeout, event_type)
        self._backend = PostgresBackend(options.names, clock)
        self._binder = Binder(options, self._backend)
        self._where = display(url)
        self._identity: tuple[Any, ...] | None = None  # of its database (_same_database)
        settings = pool_settings(url, options, pool_size, pooler)
        self._pool: ConnectionPool[Any] | None = None
        # Not at head: nothing written, and a SchemaError from each call until it is.
        self._unchecked = schema_at_open(
            settings.conninfo, options.names, self._where, create_schema, settings.pooler
        )

        def configure(conn: Connection) -> None:
            settings.server.check(set_up(conn, settings.lock_timeout_ms, settings.pooler))
            conn.wire = Wire(conn, settings.server)
            outages.connected(settings.name)

        pool: ConnectionPool[Any] = ConnectionPool(**settings.arguments(configure, Connection))
        try:
            pool.open(wait=True, timeout=settings.open_timeout)
        except PoolTimeout as exc:
            pool.close()
            raise no_connection(exc, None, self._where) from exc
        self._pool = pool
        self._pool_name = settings.name
        self._pool_size = settings.size
        self._sessions: Sessions[Connection] = Sessions()
        self._listener = Listener(settings.conninfo, options.names, settings.server)

    def _same_database(self, identity: tuple[Any, ...]) -> bool:
        if self._identity is None:
            self._identity = self._run(self._backend.identity())
        return tuple(identity) == self._identity

    def _connect(self, pool: ConnectionPool[Any]) -> Session[Connection]:
        # The stack was empty: wait at the pool (harel_sa.postgres.sessions).
        with self._sessions.waiting() as kept:
            if kept is not None:
                return kept
            try:
                conn = pool.getconn()
            except PoolTimeout as exc:
                closed = self._pool is None
                raise no_connection(exc, pool.get_stats(), self._where, closed=closed) from exc
        return self._sessions.new(conn)

    def _session(self, pool: ConnectionPool[Any]) -> Session[Connection]:
        """A session for a call: kept, or from the pool. One whose connection the server ended
        while it sat idle is closed and given back (the pool replaces it), and another taken:
        nothing was sent on it, so no call needs to fail for it."""
        for _ in range(self._pool_size + 1):  # after a restart, every one may be ended
            session = self._sessions.take() or self._connect(pool)
            if not session.connection.wire.ended():
                return session
            session.connection.close()
            pool.putconn(session.connection)
        return session  # ended as well: the call raises the lost connection

    def _run(self, op: Bound[T]) -> T:
        pool = self._pool
        if pool is None:
            raise TransportClosedError("the transport is closed")
        if self._unchecked is not None:
            self._unchecked()
            self._unchecked = None
        for attempt in (1, 2):
            session = self._session(pool)
            try:
                return run(session.connection, op)
            except psycopg.Error as exc:
                if run_again(exc, attempt, op, session.connection):
                    continue
                raise translate(exc, session.connection, self._where) from exc
            finally:
                for returned in self._sessions.keep(session):
                    pool.putconn(returned.connection)
        raise AssertionError("unreachable")  # pragma: no cover

    @property
    def listens(self) -> bool:
        return True

    def wait_for_messages(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a message to become claimable: ``True`` once a
        ``publish``, ``publish_many``, ``nack`` without delay or ``release`` on this prefix
        committed (in any process, on any host: ``LISTEN``/``NOTIFY``), ``False`` at the
        timeout. A hint, not a lease: the caller claims next, and may find nothing (another
        worker was faster) or something no notification announced (a lapsed lease). The
        listening connection is the transport's own, outside the pool, opened at the first
        wait (that first wait returns at once, ``True``); a lost connection makes a wait
        sleep out its timeout and return ``False``, and the next one connects again."""
        seconds = validate.seconds("timeout", timeout, allow_zero=True)
        if self._pool is None:
            raise TransportClosedError("the transport is closed")
        return self._listener.wait(seconds)

    def close(self) -> None:
        """Close the pool; later calls raise :class:`~harel_sa.TransportClosedError`."""
        pool, self._pool = self._pool, None
        self._listener.close()
        if pool is not None:
            for returned in self._sessions.close():
                pool.putconn(returned.connection)
            pool.close()
            outages.forget(self._pool_name)


def options_of(
    prefix: str, clock: Callable[[], float] | None, busy_timeout: float, event_type: type[E]
) -> Options[E]:
    """Both transports' options, checked at open (``clock`` None: the server's)."""
    return Options(prefix, time.time if clock is None else clock, busy_timeout, event_type)


@dataclass(frozen=True)
class PoolSettings:
    """How both transports set up their pools: each new connection gets
    :func:`~harel_sa.postgres.connect.session_setup` with ``lock_timeout_ms`` (unless a pooler
    is between); ``server`` is what all the pool's connections know of their server
    sessions."""

    conninfo: str
    size: int
    lock_timeout_ms: int
    name: str
    busy_timeout: float
    pooler: Pooler
    server: ServerSession

    @property
    def open_timeout(self) -> float:
        return max(self.busy_timeout, 1.0)

    def arguments(self, configure: Callable[[Any], Any], connection_class: type) -> dict[str, Any]:
        """The keyword arguments of either pool class (sync or async ``configure`` and
        ``connection_class``)."""
        return {
            "conninfo": self.conninfo,
            "connection_class": connection_class,
            "min_size": 1,
            "max_size": self.size,
            # psycopg prepares nothing by itself (harel_sa's Wire prepares, pooler-safe).
            "kwargs": {"autocommit": True, "context": ADAPTERS, "prepare_threshold": None},
            "configure": configure,
            "open": False,
            "name": self.name,
            "timeout": self.busy_timeout,
        }


def pool_settings(
    url: object, options: Options[Any], pool_size: object, pooler: object
) -> PoolSettings:
    """The pool of a transport on ``url`` with ``options``: at most ``pool_size``
    connections, each waiting at most ``busy_timeout`` for a row lock (``lock_timeout``) and
    each call at most that long for a connection; each set up by
    :func:`~harel_sa.postgres.connect.set_up` as ``pooler`` says."""
    checked = checked_pooler(pooler)
    return PoolSettings(
        conninfo=conninfo(url),
        size=validate.count("pool_size", pool_size),
        lock_timeout_ms=int(options.busy_timeout * 1000),
        name=outages.watch(options.names.prefix, display(url)),
        busy_timeout=options.busy_timeout,
        pooler=checked,
        server=ServerSession(checked),
    )
