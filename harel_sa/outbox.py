"""Publish and settle inside the application's own transaction (the transactional outbox).

:class:`Outbox` runs the queue's writes (``publish``, ``publish_many``, ``ack``, ``ack_many``,
``nack``, ``dead_letter``) on a SQLAlchemy ``Connection`` or ORM ``Session`` the application
holds; :class:`AsyncOutbox` on an ``AsyncConnection`` or ``AsyncSession``. A call joins the
connection's transaction (begun if none is open) and commits nothing: the application's commit
makes it take effect, its rollback undoes it whole. Results keep their meaning (a stale lease's
``ack`` is ``False``), arguments are checked as a transport checks them, and the statements are
the dialect's own, run through SQLAlchemy (engine events and logging see them). An outbox holds
no connection of its own."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic

from pydantic import BaseModel
from sqlalchemy import Connection, Engine
from sqlalchemy import event as events

from harel_sa import traces, validate
from harel_sa.errors import InvalidArgumentError, InvalidArgumentTypeError
from harel_sa.events import E, Event, Lease
from harel_sa.outbox_plans import Clauses, Plan, adrive, drive, plan_for, sync_executor
from harel_sa.schema import DEFAULT_PREFIX, Names
from harel_sa.seam import Query, publish_due, publish_options
from harel_sa.validate import message_row, message_rows

# The ORM and the asyncio extension cost an import of their own: only an application that
# uses them can hand their objects over, so the checks look for them where it loaded them.
if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
    from sqlalchemy.orm import Session


def _is(value: object, module: str, name: str) -> bool:
    """Whether ``value`` is a ``module.name``: never, when the application did not import
    ``module``."""
    found = sys.modules.get(module)
    return found is not None and isinstance(value, getattr(found, name))


class Outbox(Generic[E]):
    """The queue's writes under ``prefix`` on the application's sync connections.

    ``clock`` gives "now" (a publish's enqueue time, a park's end): by default ``time.time`` on
    SQLite and the server's clock on PostgreSQL, as the transports read it. ``event_type`` is
    what a published event must read as. ``same_database`` (a transport's) is given what the
    connection says of its database, once per connection, and refuses it when it is False.
    """

    def __init__(
        self,
        prefix: str = DEFAULT_PREFIX,
        *,
        event_type: type[E] = Event,  # type: ignore[assignment]
        clock: Callable[[], float] | None = None,
        same_database: Callable[[tuple[Any, ...]], bool] | None = None,
    ) -> None:
        if clock is not None and not callable(clock):
            raise InvalidArgumentTypeError("clock must be a callable returning epoch seconds")
        if not (isinstance(event_type, type) and issubclass(event_type, BaseModel)):
            raise InvalidArgumentTypeError("event_type must be a pydantic BaseModel subclass")
        self.names = Names(prefix)
        self.event_type = event_type
        self.clock = clock
        self.same_database = same_database
        self._plans: dict[str, Plan] = {}

    @property
    def prefix(self) -> str:
        return self.names.prefix

    @traces.traced("publish")
    def publish(
        self,
        connection: Connection | Session,
        group_id: str,
        event: BaseModel,
        priority: int = 0,
        routing_key: str | None = None,
        *,
        delay: float | None = None,
        not_before: datetime | float | None = None,
        key: str | None = None,
        on_key: str = "keep",
        max_in_flight: int = 1,
    ) -> bool:
        """Append ``event`` to ``group_id``'s queue in ``connection``'s transaction; the
        options and the result as the transports' ``publish``."""
        program = _publishing(
            self.event_type,
            group_id,
            event,
            (priority, routing_key, max_in_flight),
            delay,
            not_before,
            key,
            on_key,
        )
        return bool(self._run(connection, program))

    @traces.traced("publish_many")
    def publish_many(
        self,
        connection: Connection | Session,
        items: Iterable[tuple[str, BaseModel]],
        *,
        priority: int = 0,
        routing_key: str | None = None,
        delay: float | None = None,
        not_before: datetime | float | None = None,
        max_in_flight: int = 1,
    ) -> None:
        """Publish every ``(group_id, event)`` pair in ``connection``'s transaction."""
        self._run(
            connection,
            _publishing_many(
                self.event_type, items, (priority, routing_key, max_in_flight), delay, not_before
            ),
        )

    @traces.traced("cancel")
    def cancel(self, connection: Connection | Session, key: str) -> bool:
        """Delete the waiting message with ``key`` in ``connection``'s transaction; whether
        there was one."""
        return bool(self._run(connection, _cancelling(key)))

    @traces.traced("ack")
    def ack(self, connection: Connection | Session, lease: Lease[E]) -> bool:
        """Delete the leased message (and its group once empty) in ``connection``'s
        transaction; ``False``, deleting nothing, if the lease was lost."""
        return bool(self._run(connection, _acking(lease)))

    @traces.traced("ack_many")
    def ack_many(self, connection: Connection | Session, leases: Sequence[Lease[E]]) -> list[bool]:
        """:meth:`ack` each lease, in ``connection``'s transaction."""
        return list(self._run(connection, _acking_many(leases)))

    @traces.traced("nack")
    def nack(self, connection: Connection | Session, lease: Lease[E], delay: float = 0.0) -> bool:
        """Free the message now (``delay == 0``) or park it for ``delay`` seconds, in
        ``connection``'s transaction; ``False`` if the lease was lost."""
        return bool(self._run(connection, _nacking(lease, delay)))

    @traces.traced("dead_letter")
    def dead_letter(self, connection: Connection | Session, lease: Lease[E], reason: str) -> bool:
        """Move the leased message to the dead table in ``connection``'s transaction;
        ``False`` if the lease was lost."""
        return bool(self._run(connection, _burying(lease, reason)))

    def _run(self, connection: object, make: Callable[[Plan], Clauses]) -> Any:
        conn = _sync_connection(connection)
        plan = self._plan(conn.dialect.name)
        execute = sync_executor(conn)
        if not conn.info.get(self._checked(plan)):
            drive(self._check(plan), execute)
            conn.info[self._checked(plan)] = True
        return drive(make(plan), execute)

    def _plan(self, dialect: str) -> Plan:
        plan = self._plans.get(dialect)
        if plan is None:
            plan = self._plans[dialect] = plan_for(self.names, dialect, self.clock)
        return plan

    def _checked(self, plan: Plan) -> str:
        """The key, in a DBAPI connection's ``info``, that says it passed :meth:`_check`."""
        return f"harel_sa.outbox.{id(self)}.{plan.checked}"

    def _check(self, plan: Plan) -> Clauses:
        """Refuse, before anything is written, a connection whose settings would lose a commit,
        or (with ``same_database``) one to another database."""
        yield from plan.check_program()
        if self.same_database is not None:
            identity = (yield Query(plan.identity, {})).one()
            if not self.same_database(identity):
                raise InvalidArgumentError(
                    "this connection is to another database than the transport's: its writes "
                    "would not be the queue's"
                )


class AsyncOutbox(Outbox[E]):
    """:class:`Outbox` on the application's ``AsyncConnection`` or ``AsyncSession``."""

    @traces.traced_async("publish")
    async def publish(  # type: ignore[override]
        self,
        connection: AsyncConnection | AsyncSession,
        group_id: str,
        event: BaseModel,
        priority: int = 0,
        routing_key: str | None = None,
        *,
        delay: float | None = None,
        not_before: datetime | float | None = None,
        key: str | None = None,
        on_key: str = "keep",
        max_in_flight: int = 1,
    ) -> bool:
        program = _publishing(
            self.event_type,
            group_id,
            event,
            (priority, routing_key, max_in_flight),
            delay,
            not_before,
            key,
            on_key,
        )
        return bool(await self._arun(connection, program))

    @traces.traced_async("publish_many")
    async def publish_many(  # type: ignore[override]
        self,
        connection: AsyncConnection | AsyncSession,
        items: Iterable[tuple[str, BaseModel]],
        *,
        priority: int = 0,
        routing_key: str | None = None,
        delay: float | None = None,
        not_before: datetime | float | None = None,
        max_in_flight: int = 1,
    ) -> None:
        await self._arun(
            connection,
            _publishing_many(
                self.event_type, items, (priority, routing_key, max_in_flight), delay, not_before
            ),
        )

    @traces.traced_async("cancel")
    async def cancel(  # type: ignore[override]
        self, connection: AsyncConnection | AsyncSession, key: str
    ) -> bool:
        return bool(await self._arun(connection, _cancelling(key)))

    @traces.traced_async("ack")
    async def ack(  # type: ignore[override]
        self, connection: AsyncConnection | AsyncSession, lease: Lease[E]
    ) -> bool:
        return bool(await self._arun(connection, _acking(lease)))

    @traces.traced_async("ack_many")
    async def ack_many(  # type: ignore[override]
        self, connection: AsyncConnection | AsyncSession, leases: Sequence[Lease[E]]
    ) -> list[bool]:
        return list(await self._arun(connection, _acking_many(leases)))

    @traces.traced_async("nack")
    async def nack(  # type: ignore[override]
        self, connection: AsyncConnection | AsyncSession, lease: Lease[E], delay: float = 0.0
    ) -> bool:
        return bool(await self._arun(connection, _nacking(lease, delay)))

    @traces.traced_async("dead_letter")
    async def dead_letter(  # type: ignore[override]
        self, connection: AsyncConnection | AsyncSession, lease: Lease[E], reason: str
    ) -> bool:
        return bool(await self._arun(connection, _burying(lease, reason)))

    async def _arun(self, connection: object, make: Callable[[Plan], Clauses]) -> Any:
        conn = await _async_connection(connection)
        plan = self._plan(conn.dialect.name)
        info = conn.sync_connection.info if conn.sync_connection is not None else {}
        if not info.get(self._checked(plan)):
            await adrive(self._check(plan), conn)
            info[self._checked(plan)] = True
        return await adrive(make(plan), conn)


def _publishing(
    event_type: type[BaseModel],
    group_id: object,
    event: object,
    group: tuple[object, object, object],
    delay: object,
    not_before: object,
    key: object,
    on_key: object,
) -> Callable[[Plan], Clauses]:
    """A publish's program, its arguments checked as the transports' :class:`Binder` checks
    them (``group``: the priority, routing key and max_in_flight); it returns ``False`` only
    when a waiting keyed message took the publish."""
    row = message_row(event_type, group_id, event, *group)
    due, keyed, replace = publish_options(delay, not_before, key, on_key)
    if keyed is not None:
        return lambda plan: plan.publish_keyed(row, due, keyed, replace)
    if due is None:
        return lambda plan: _written(plan.publish([row]))
    return lambda plan: _written(plan.schedule([row], due))


def _publishing_many(
    event_type: type[BaseModel],
    items: object,
    group: tuple[object, object, object],
    delay: object,
    not_before: object,
) -> Callable[[Plan], Clauses]:
    due = publish_due(delay, not_before)
    rows = message_rows(event_type, items, *group)
    if due is None:
        return lambda plan: plan.publish(rows)
    return lambda plan: plan.schedule(rows, due)


# Each call's program, its arguments checked once for both halves (as :class:`Binder` checks a
# transport's): a function of the dialect's plan, which the connection decides.


def _cancelling(key: object) -> Callable[[Plan], Clauses]:
    checked = validate.cancel_key(key)
    return lambda plan: plan.cancel(checked)


def _acking(lease: object) -> Callable[[Plan], Clauses]:
    checked = validate.lease(lease)
    return lambda plan: plan.ack(checked)


def _acking_many(leases: object) -> Callable[[Plan], Clauses]:
    checked = validate.leases(leases)
    return lambda plan: plan.ack_many(checked)


def _nacking(lease: object, delay: object) -> Callable[[Plan], Clauses]:
    checked = validate.lease(lease)
    wait = validate.seconds("delay", delay, allow_zero=True)
    return lambda plan: plan.nack(checked, wait)


def _burying(lease: object, reason: object) -> Callable[[Plan], Clauses]:
    checked = validate.lease(lease)
    why = validate.required_text("reason", reason)
    return lambda plan: plan.dead_letter(checked, why)


def _written(program: Clauses) -> Clauses:
    yield from program
    return True


def sqlite_transactions(engine: Engine | AsyncEngine, *, busy_timeout: float = 5.0) -> None:
    """Make an application's SQLite engine's transactions real, as SQLAlchemy's documentation
    recommends: the driver opens none of its own (by default it begins one only at the first
    write, so a transaction's reads run outside it), and each begins with ``BEGIN IMMEDIATE``,
    taking the write lock at once (waiting up to ``busy_timeout``): what a transaction read
    stays true until its writes commit. Call it once, on an engine of your own, before it
    connects; do not use ``isolation_level="AUTOCOMMIT"`` on that engine (a begin would then
    hold the lock)."""
    sync = engine if isinstance(engine, Engine) else engine.sync_engine  # an AsyncEngine's own
    if sync.dialect.name != "sqlite":
        raise InvalidArgumentError(
            f"sqlite_transactions is for SQLite engines, not {sync.dialect.name}"
        )
    wait = int(validate.seconds("busy_timeout", busy_timeout, allow_zero=True) * 1000)

    @events.listens_for(sync, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {wait}")
        cursor.close()

    @events.listens_for(sync, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


# -- connections ----------------------------------------------------------------------------


def _sync_connection(connection: Any) -> Connection:
    if _is(connection, "sqlalchemy.orm", "scoped_session"):
        connection = connection()  # Flask-SQLAlchemy's ``db.session``
    if _is(connection, "sqlalchemy.orm", "Session"):
        connection = connection.connection()
    if not isinstance(connection, Connection):
        raise InvalidArgumentTypeError(
            "connection must be a SQLAlchemy Connection or ORM Session (an AsyncConnection or "
            f"AsyncSession goes to AsyncOutbox), not {type(connection).__name__}"
        )
    if connection.closed or connection.invalidated:
        raise InvalidArgumentError("the connection is closed")
    return connection


async def _async_connection(connection: object) -> AsyncConnection:
    # An async outbox is used by an application of SQLAlchemy's asyncio: it is loaded already.
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session

    if isinstance(connection, async_scoped_session):
        connection = connection()
    if isinstance(connection, AsyncSession):
        connection = await connection.connection()
    if not isinstance(connection, AsyncConnection):
        raise InvalidArgumentTypeError(
            "connection must be a SQLAlchemy AsyncConnection or AsyncSession (a Connection or "
            f"Session goes to Outbox), not {type(connection).__name__}"
        )
    if connection.closed or connection.invalidated:
        raise InvalidArgumentError("the connection is closed")
    return connection


# -- running a program ----------------------------------------------------------------------
