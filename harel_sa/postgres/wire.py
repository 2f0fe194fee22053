"""Statements sent through libpq itself: prepared once per connection, adapted by psycopg.

A claim or an ack is one prepared statement, and psycopg's cursor around it (its query
conversion, prepare bookkeeping, result checks and row factory) costs the client about as much
CPU as libpq's own send and receive of it. A :class:`Wire` keeps only what harel_sa's statements
need of a cursor: the connection's adapters (a psycopg ``Transformer``, which dumps the
parameters and loads the rows exactly as the cursor would), the names of the statements it
prepared, and libpq's asynchronous calls. An exchange is a generator that yields what it waits
for (:data:`READ`, or :data:`WRITE`) and returns its value: :func:`wait` performs the waits
blocking, :func:`wait_async` on the event loop, so one exchange serves both transports.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import select
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import errors as pg
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer

from harel_sa.cancels import Finished

if TYPE_CHECKING:
    from harel_sa.postgres.connect import Pooler

T = TypeVar("T")

READ = 1
WRITE = 2  # while libpq cannot send all at once
#: What an exchange yields (what it waits for) and returns.
Exchange = Generator[int, None, T]

_OK = (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK)
_TUPLES = pq.ExecStatus.TUPLES_OK
_FATAL = pq.ExecStatus.FATAL_ERROR
_SYNC = pq.ExecStatus.PIPELINE_SYNC
#: libpq's pipeline mode (libpq 14 and later): statements sent together, one round trip.
PIPELINES = pq.version() >= 140000
_ACTIVE = pq.TransactionStatus.ACTIVE
_IDLE = pq.TransactionStatus.IDLE
#: How long an interrupted statement's cancel request may take (psycopg's own figure).
CANCEL_TIMEOUT = 5.0
#: A prepared statement missing on the server's side, or there already: a transaction pooler.
_LOST_STATEMENT = (pg.InvalidSqlStatementName, pg.DuplicatePreparedStatement)

log = logging.getLogger("harel_sa")


class ServerSession:
    """What a transport's connections know of their sessions on the server (one for all of
    them).

    ``pinned``: each connection keeps one server session for its life, so its ``LISTEN`` and
    its settings stay its own; not so once a pooler is found between, at connect
    (:meth:`check`), nor ever behind a pooler declared ``"transaction"``. ``preparing``: the
    statements a connection prepared stay prepared, as behind a direct connection, a pooler
    in ``pool_mode = session`` or a PgBouncer that tracks them (1.21 and later,
    ``max_prepared_statements`` above 0: its default since 1.24); not so once one is found
    missing or there already (:meth:`lost_statement`), and from then on the statements go
    unprepared."""

    __slots__ = ("pinned", "preparing")

    def __init__(self, pooler: Pooler = "auto") -> None:
        self.pinned = pooler != "transaction"
        self.preparing = True

    def check(self, own: bool) -> None:
        """A new connection's server session is its ``own``
        (:func:`~harel_sa.postgres.connect.set_up`), or a pooler is between, which ends
        ``pinned`` (said once in the log)."""
        if not own and self.pinned:
            self.pinned = False
            log.info(
                "a connection pooler is between harel_sa and the server (the cancel key is not "
                "the backend's): idle workers poll (LISTEN cannot follow a pooled connection) "
                "and the sessions keep the server's settings"
            )

    def lost_statement(self, sqlstate: str | None) -> None:
        """A prepared statement was found missing or there already: a pooler between, which
        does not keep them (said once in the log)."""
        self.pinned = False
        if self.preparing:
            self.preparing = False
            log.warning(
                "the server lost a prepared statement between two transactions: a "
                "transaction pooler is in between (PgBouncer in pool_mode = transaction, "
                "before 1.21 or with max_prepared_statements = 0); harel_sa's statements go "
                "unprepared from now on, which costs the server a plan each (%s)",
                sqlstate,
            )


class Unprepared(psycopg.InterfaceError):
    """A prepared statement of harel_sa's was missing on the server's side of the connection,
    or there already (a transaction pooler between): the statement did not run, and the
    transport's statements go unprepared from now on. ``repeatable``: nothing of the call
    committed, so it can be run again; not so when statements of the call ran before it,
    outside a transaction (:func:`~harel_sa.postgres.driver.exchange` says)."""

    repeatable = True


class Wire:
    """One connection's statements: each prepared at its first use on the connection (by its
    SQL and its parameters' types, as psycopg's cursor keys them), then sent by name; sent
    unprepared once ``server`` (:class:`ServerSession`, shared by a transport's connections)
    is no longer ``preparing``. Used by one call at a time, as the connection is."""

    def __init__(
        self,
        connection: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
        server: ServerSession | None = None,
    ):
        self.pgconn = connection.pgconn
        self._server = ServerSession() if server is None else server
        self.pgconn.nonblocking = 1
        self.fileno = self.pgconn.socket
        self._adapt = Transformer(connection)
        self._encoding = connection.info.encoding
        self._names: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        self._formats: dict[int, list[PyFormat]] = {}
        self._poll = select.poll() if hasattr(select, "poll") else None
        if self._poll is not None:
            self._poll.register(self.fileno, select.POLLIN)
        # A FATAL error that comes while no call runs is the server's last word before it
        # closes the session (libpq hands it to the notice handlers): see ended().
        self._ending = False
        connection.add_notice_handler(self._noticed)

    def _noticed(self, diagnostic: pg.Diagnostic) -> None:
        if diagnostic.severity_nonlocalized in ("FATAL", "PANIC"):
            self._ending = True

    def execute(self, sql: bytes, params: Sequence[Any]) -> Exchange[tuple[list[Any], int]]:
        """Run the prepared statement ``sql`` with ``params``: its rows (tuples, loaded by the
        connection's adapters) and its row count (-1 where the command has none)."""
        adapt, pgconn = self._adapt, self.pgconn
        values = self._dump(params)
        if self._server.preparing:
            key = (sql, adapt.types or ())
            name = self._names.get(key)
            if name is None:
                name = _name_of(key)
                pgconn.send_prepare(name, sql, param_types=adapt.types)
                self._prepared((yield from self._results()))
                self._names[key] = name
            pgconn.send_query_prepared(name, values, param_formats=adapt.formats)
            result = self._prepared((yield from self._results()))
        else:
            pgconn.send_query_params(
                sql, values, param_types=adapt.types, param_formats=adapt.formats
            )
            result = self._check((yield from self._results()))
        return self._rows(result)

    def execute_chain(
        self, chain: Sequence[tuple[bytes, Sequence[Any]]]
    ) -> Exchange[tuple[list[Any], int]]:
        """Run the prepared statements of ``chain`` (``(sql, params)`` pairs, two or more) in
        order, sent at once (libpq's pipeline: one round trip), in one implicit transaction,
        in the transaction open on the connection, or in one the chain's ``BEGIN`` opens; the
        last one's rows and row count, as :meth:`execute`'s. Each statement runs once the one
        before it has returned, with a snapshot of its own taken then (READ COMMITTED): what
        committed while a lock was awaited is seen. An error in one rolls the implicit
        transaction back. Without pipelines (libpq before 14): one round trip each, between a
        ``BEGIN`` and a ``COMMIT`` of their own when no transaction is open (a chain must not
        begin one then)."""
        if not PIPELINES:
            own = not self.in_transaction
            if own:
                yield from self.command(b"BEGIN")
            try:
                for sql, params in chain:
                    found = yield from self.execute(sql, params)
            except BaseException:
                if own and self.in_transaction:
                    with contextlib.suppress(psycopg.Error):
                        yield from self.command(b"ROLLBACK")
                raise
            if own:
                yield from self.command(b"COMMIT")
            return found
        pgconn = self.pgconn
        pgconn.enter_pipeline_mode()
        try:
            sent = [self._send(sql, params) for sql, params in chain]
            pgconn.pipeline_sync()
            results = yield from self._pipeline_results()
        finally:
            if pgconn.pipeline_status != pq.PipelineStatus.OFF and not pgconn.is_busy():
                with contextlib.suppress(psycopg.Error):
                    pgconn.exit_pipeline_mode()
        # Each statement's results in order: a preparation (when new), then its run.
        runs = []
        for prepared, key, name in sent:
            if prepared:
                self._prepared(results.pop(0))
                self._names[key] = name  # prepared, whatever its run did
            run = results.pop(0)
            runs.append(self._prepared(run) if key is not None else self._check(run))
        return self._rows(runs[-1])

    def _send(self, sql: bytes, params: Sequence[Any]) -> tuple[bool, Any, bytes]:
        """Send ``sql`` with ``params`` in a pipeline (prepared first when new): whether it
        was prepared now, its key and name."""
        adapt, pgconn = self._adapt, self.pgconn
        values = self._dump(params)
        if not self._server.preparing:
            pgconn.send_query_params(
                sql, values, param_types=adapt.types, param_formats=adapt.formats
            )
            return False, None, b""
        key = (sql, adapt.types or ())
        name = self._names.get(key)
        new = name is None
        if name is None:
            name = _name_of(key)
            pgconn.send_prepare(name, sql, param_types=adapt.types)
        pgconn.send_query_prepared(name, values, param_formats=adapt.formats)
        return new, key, name

    def _dump(self, params: Sequence[Any]) -> Any:
        """``params`` dumped by the connection's adapters (their types and formats are then
        the transformer's ``types``/``formats``)."""
        formats = self._formats.get(len(params))
        if formats is None:
            formats = self._formats[len(params)] = [PyFormat.AUTO] * len(params)
        return self._adapt.dump_sequence(params, formats)

    def _pipeline_results(self) -> Exchange[list[list[pq.abc.PGresult]]]:
        """The results of a pipeline up to its sync: a list per statement sent."""
        yield from self._flushed()
        out: list[list[pq.abc.PGresult]] = []
        current: list[pq.abc.PGresult] = []
        while True:
            result = yield from self._next_result()
            if result is None:
                out.append(current)
                current = []
            elif result.status == _SYNC:
                return out
            else:
                current.append(result)

    def _rows(self, result: pq.abc.PGresult) -> tuple[list[Any], int]:
        adapt = self._adapt
        count = result.command_tuples
        if result.status != _TUPLES:
            return [], -1 if count is None else count
        adapt.set_pgresult(result)
        rows = adapt.load_rows(0, result.ntuples, tuple)
        adapt.set_pgresult(None)
        return rows, -1 if count is None else count

    def command(self, sql: bytes) -> Exchange[None]:
        """Run ``sql`` (``BEGIN``, ``COMMIT``, ``ROLLBACK``: no parameter, no row)."""
        self.pgconn.send_query(sql)
        self._check((yield from self._results()))

    @property
    def in_transaction(self) -> bool:
        """Whether the connection is in a transaction (open or failed) that needs its end."""
        return self.pgconn.transaction_status not in (_IDLE, pq.TransactionStatus.UNKNOWN)

    def _results(self) -> Exchange[list[pq.abc.PGresult]]:
        """The results of what was sent, up to the end of its last statement's."""
        yield from self._flushed()
        results: list[pq.abc.PGresult] = []
        while (result := (yield from self._next_result())) is not None:
            results.append(result)
        return results

    def _flushed(self) -> Exchange[None]:
        pgconn = self.pgconn
        while pgconn.flush():  # more to send: read meanwhile, or the server may stall on us
            yield READ | WRITE
            pgconn.consume_input()

    def _next_result(self) -> Exchange[pq.abc.PGresult | None]:
        """The next result (``None``: the end of a statement's)."""
        pgconn = self.pgconn
        while pgconn.is_busy():
            yield READ
            pgconn.consume_input()
        return pgconn.get_result()

    def _prepared(self, results: list[pq.abc.PGresult]) -> pq.abc.PGresult:
        """:meth:`_check` of a prepared statement's results: one found missing or there
        already turns the transport's statements unprepared and raises :class:`Unprepared`."""
        try:
            return self._check(results)
        except _LOST_STATEMENT as exc:
            self._server.lost_statement(exc.sqlstate)
            raise Unprepared(str(exc)) from exc

    def _check(self, results: list[pq.abc.PGresult]) -> pq.abc.PGresult:
        """The one result of a statement, or the error it is (read whole first: the
        connection stays usable)."""
        for result in results:
            if result.status == _FATAL:
                raise pg.error_from_result(result, encoding=self._encoding)
            if result.status not in _OK:
                status = pq.ExecStatus(result.status).name
                raise psycopg.InterfaceError(f"unexpected result: {status}")
        if len(results) != 1:
            raise psycopg.InterfaceError(f"{len(results)} results for one statement")
        return results[0]

    @property
    def busy(self) -> bool:
        """Whether a statement is in flight: its results must be read before anything else
        is sent."""
        return self.pgconn.transaction_status == _ACTIVE

    def interrupted(self) -> Exchange[None]:
        """After an interrupted wait (the statement's cancel sent): read the statement's end,
        whatever it is, and roll back the transaction it was in."""
        if self.pgconn.pipeline_status != pq.PipelineStatus.OFF:
            yield from self._pipeline_results()  # to its sync, which ends its transaction
            self.pgconn.exit_pipeline_mode()
        else:
            yield from self._results()
        if self.in_transaction:
            self.pgconn.send_query(b"ROLLBACK")
            yield from self._results()

    def ended(self) -> bool:
        """Whether the server ended the connection while it sat idle between calls (a restart,
        a terminated backend, ``idle_session_timeout``), found without blocking: nothing has
        been sent on it, so a call may take another connection instead. What else the server
        said meanwhile (a parameter's new value) is read, and leaves the connection usable."""
        for _ in range(4):  # the server's last words, then its end of the stream
            if not self._readable_now():
                return False
            try:
                self.pgconn.consume_input()
            except psycopg.OperationalError:
                return True
            # Parse what came: its last words may be there before its end of the stream is
            # (the backend leaves pg_stat_activity, then closes the socket).
            self.pgconn.is_busy()
            if self._ending or self.pgconn.status == pq.ConnStatus.BAD:
                return True
        return False

    def _readable_now(self) -> bool:
        if self._poll is not None:
            return bool(self._poll.poll(0))
        return bool(select.select([self.fileno], [], [], 0)[0])

    def ready(self, what: int) -> None:
        """Block until the connection's socket is ready for ``what`` (signals interrupt)."""
        if what == READ and self._poll is not None:
            self._poll.poll()
        else:
            select.select([self.fileno], [self.fileno] if what & WRITE else [], [])

    async def aready(self, what: int) -> None:
        """Wait on the running event loop until the socket is ready for ``what``."""
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        loop.add_reader(self.fileno, _set, ready)
        if what & WRITE:
            loop.add_writer(self.fileno, _set, ready)
        try:
            await ready
        finally:
            loop.remove_reader(self.fileno)
            if what & WRITE:
                loop.remove_writer(self.fileno)


def _name_of(key: tuple[bytes, tuple[int, ...]]) -> bytes:
    """The name of the statement ``key`` (its SQL, its parameters' type OIDs): the same on
    every connection, for this statement only."""
    sql, types = key
    digest = hashlib.blake2b(sql + repr(types).encode(), digest_size=10).hexdigest()
    return b"harel_sa_" + digest.encode()


def wait(connection: Connection, exchange: Exchange[T]) -> T:
    """Perform ``exchange`` on ``connection``, its waits blocking; its value. A wait
    interrupted (a signal's ``KeyboardInterrupt``) while a statement is in flight ends as
    psycopg's own: the statement is cancelled at the server, its end read and its transaction
    rolled back, then the interruption is raised again; a connection that cannot be brought
    back so is closed (the pool replaces it)."""
    wire = connection.wire
    try:
        what = next(exchange)
        while True:
            wire.ready(what)
            what = next(exchange)
    except StopIteration as done:
        value: T = done.value
        return value
    except BaseException:
        if wire.busy:
            with contextlib.suppress(BaseException):  # the interruption is the news
                connection.cancel_safe(timeout=CANCEL_TIMEOUT)
                for what in wire.interrupted():
                    wire.ready(what)
            if wire.busy or wire.in_transaction:
                connection.close()
        raise


async def wait_async(
    connection: AsyncConnection, exchange: Exchange[T], *, to_end: bool = False
) -> T:
    """:func:`wait`, its waits on the running event loop. ``to_end``: a cancellation of the
    caller's task does not interrupt the exchange, which runs to its end; then
    :class:`~harel_sa.cancels.Finished` is raised with its value (or, had it failed, the
    cancellation, from its error)."""
    wire = connection.wire
    cancelled: asyncio.CancelledError | None = None
    try:
        what = next(exchange)
        while True:
            try:
                await wire.aready(what)
            except asyncio.CancelledError as error:
                if not to_end:
                    raise
                cancelled = error  # wait again: the statement's end is the caller's due
                continue
            what = next(exchange)
    except StopIteration as done:
        value: T = done.value
        if cancelled is not None:
            raise Finished(value, cancelled) from None
        return value
    except BaseException as error:
        if wire.busy:
            with contextlib.suppress(BaseException):
                await connection.cancel_safe(timeout=CANCEL_TIMEOUT)
                for what in wire.interrupted():
                    await wire.aready(what)
            if wire.busy or wire.in_transaction:
                await connection.close()
        if cancelled is not None and isinstance(error, Exception):
            raise cancelled from error  # the call failed: nothing to give back
        raise


def _set(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Connection(psycopg.Connection[Any]):
    """A sync transport's pool connection: a psycopg connection and its :class:`Wire`, made
    when the pool configures it (the server's prepared statements live as long as it)."""

    wire: Wire


class AsyncConnection(psycopg.AsyncConnection[Any]):
    """An async transport's pool connection and its :class:`Wire`."""

    wire: Wire
