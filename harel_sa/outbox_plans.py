"""The outbox's writes as programs of ``text()`` statements, one :class:`Plan` per dialect, and
how a program runs on a SQLAlchemy connection (:func:`drive`, :func:`adrive`).

A program yields each :class:`Query` and is sent its :class:`Result`; the statements are the
dialect's own (:mod:`harel_sa.sqlite.statements`, :mod:`harel_sa.postgres.statements`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, TextClause, text

from harel_sa.errors import InvalidArgumentError
from harel_sa.events import Lease
from harel_sa.rules import MAX_ERROR
from harel_sa.schema import Names
from harel_sa.seam import Due, Program, Query, Result, Row

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

#: A write of the outbox, as a program of ``text()`` statements.
Clauses = Program[TextClause, Any]


Executor = Callable[[TextClause, dict[str, Any]], Result]


def sync_executor(conn: Connection) -> Executor:
    def execute(statement: TextClause, params: dict[str, Any]) -> Result:
        return result_of(conn.execute(statement, params))

    return execute


def result_of(done: Any) -> Result:
    """A statement's rows, and how many rows it changed or returned (a statement that returns
    rows, ``UPDATE ... RETURNING`` or a ``SELECT`` over one, counts those, as the transports'
    own drivers count them)."""
    if done.returns_rows:
        rows = [tuple(r) for r in done]
        return Result(rows, len(rows))
    return Result([], done.rowcount)


def drive(program: Clauses, execute: Executor) -> Any:
    try:
        query = next(program)
        while True:
            query = program.send(execute(query.statement, query.params))
    except StopIteration as done:
        return done.value


async def adrive(program: Clauses, conn: AsyncConnection) -> Any:
    try:
        query = next(program)
        while True:
            query = program.send(result_of(await conn.execute(query.statement, query.params)))
    except StopIteration as stopped:
        return stopped.value


class Plan:
    """One dialect's writes under one prefix, as programs of ``text()`` statements: the
    dialect's own (:mod:`harel_sa.sqlite.statements`, :mod:`harel_sa.postgres.statements`),
    turned once per prefix into Core constructs. On PostgreSQL a publish's ``NOTIFY`` rides the
    transaction: idle workers wake at its commit."""

    checked: str  # the dialect and prefix, in the key that marks a connection checked

    def publish(self, rows: list[Row]) -> Clauses:
        raise NotImplementedError

    def schedule(self, rows: list[Row], due: Due) -> Clauses:
        raise NotImplementedError

    def publish_keyed(self, row: Row, due: Due | None, key: str, replace: bool) -> Clauses:
        raise NotImplementedError

    def cancel(self, key: str) -> Clauses:
        raise NotImplementedError

    def ack(self, lease: Lease[Any]) -> Clauses:
        raise NotImplementedError

    def ack_many(self, leases: tuple[Lease[Any], ...]) -> Clauses:
        # One ack after the other, as a batch acts (PostgreSQL's batch statement takes a keys
        # array mixing seqs and holders, which only the transport's own binary dumping sends).
        took = []
        for lease in leases:
            took.append((yield from self.ack(lease)))
        return took

    def nack(self, lease: Lease[Any], delay: float) -> Clauses:
        raise NotImplementedError

    def dead_letter(self, lease: Lease[Any], reason: str) -> Clauses:
        raise NotImplementedError

    #: What a connection says of its database (compared by a transport's ``same_database``).
    identity: TextClause

    def check_program(self) -> Clauses:
        """Refuse a connection whose settings would lose what the caller believes committed."""
        yield from ()


def plan_for(names: Names, dialect: str, clock: Callable[[], float] | None) -> Plan:
    if dialect == "sqlite":
        return SqlitePlan(names, clock or time.time)
    if dialect == "postgresql":
        return PostgresPlan(names, clock)
    raise InvalidArgumentError(
        f"harel_sa keeps its queue on SQLite or PostgreSQL, not on {dialect!r}"
    )


class SqlitePlan(Plan):
    def __init__(self, names: Names, clock: Callable[[], float]) -> None:
        from harel_sa.sqlite import scheduling
        from harel_sa.sqlite.statements import statements_for

        self.sched = scheduling

        st = statements_for(names)
        self.clock = clock
        self.checked = f"harel_sa.outbox.sqlite.{names.prefix}"
        named = {
            key: value.clause
            for key, value in {
                "insert_message": st.insert_message,
                "insert_group": st.insert_group,
                "delete_leased": st.delete_leased,
                "drop_group_if_empty": st.drop_group_if_empty,
                "free": st.free,
                "park": st.park,
                "move_group_to_park_end": st.move_group_to_park_end,
                "holds_lease": st.holds_lease,
                "copy_to_dead": st.copy_to_dead,
                "delete_message": st.delete_message,
                "drop_group_of_dead": st.drop_group_of_dead,
            }.items()
        }
        self.st = named
        self.scheduling = st.scheduling
        self.settings = text("SELECT * FROM pragma_synchronous, pragma_journal_mode")
        self.identity = text("SELECT file FROM pragma_database_list WHERE name = 'main'")

    def publish(self, rows: list[Row]) -> Clauses:
        now = self.clock()
        for group_id, event, priority, routing_key, max_in_flight in rows:
            yield Query(
                self.st["insert_message"], {"group_id": group_id, "event": event, "now": now}
            )
            group = {"priority": priority, "routing_key": routing_key}
            yield Query(
                self.st["insert_group"],
                {"group_id": group_id, **group, "max_in_flight": max_in_flight},
            )

    def _clauses(self, program: Program[Any, Any]) -> Clauses:
        """A program of the transports' compiled statements, as their ``text()`` constructs."""
        try:
            query = next(program)
            while True:
                query = program.send((yield Query(query.statement.clause, query.params)))
        except StopIteration as done:
            return done.value

    def schedule(self, rows: list[Row], due: Due) -> Clauses:
        return self._clauses(self.sched.schedule(self.scheduling, self.clock(), rows, due))

    def publish_keyed(self, row: Row, due: Due | None, key: str, replace: bool) -> Clauses:
        program = self.sched.publish_keyed(self.scheduling, self.clock(), row, due, key, replace)
        return self._clauses(program)

    def cancel(self, key: str) -> Clauses:
        return self._clauses(self.sched.cancel(self.scheduling, key))

    def ack(self, lease: Lease[Any]) -> Clauses:
        fence = {"seq": lease.seq, "locked_by": lease.locked_by}
        if (yield Query(self.st["delete_leased"], fence)).rowcount != 1:
            return False
        yield Query(self.st["drop_group_if_empty"], {"group_id": lease.group_id})
        return True

    def nack(self, lease: Lease[Any], delay: float) -> Clauses:
        fence = {"seq": lease.seq, "locked_by": lease.locked_by}
        if delay == 0:
            return (yield Query(self.st["free"], fence)).rowcount == 1
        until = self.clock() + delay
        if (yield Query(self.st["park"], {**fence, "until": until})).rowcount != 1:
            return False
        yield Query(self.st["move_group_to_park_end"], {"until": until, "group_id": lease.group_id})
        return True

    def dead_letter(self, lease: Lease[Any], reason: str) -> Clauses:
        fence = {"seq": lease.seq, "locked_by": lease.locked_by}
        if not (yield Query(self.st["holds_lease"], fence)).rows:
            return False
        by_seq = {"seq": lease.seq}
        yield Query(
            self.st["copy_to_dead"], {**by_seq, "error": reason[:MAX_ERROR], "now": self.clock()}
        )
        yield Query(self.st["delete_message"], by_seq)
        yield Query(self.st["drop_group_of_dead"], by_seq)
        return True

    def check_program(self) -> Clauses:
        synchronous, journal = (yield Query(self.settings, {})).one()
        if int(synchronous) == 0 or str(journal).lower() in ("off", "memory"):
            raise InvalidArgumentError(
                f"this SQLite connection has synchronous={synchronous} and "
                f"journal_mode={journal}: a commit there can be lost (OFF) or left half-done "
                "(no journal); harel_sa writes only where a commit is durable"
            )


class PostgresPlan(Plan):
    """PostgreSQL's own operations (:mod:`harel_sa.postgres.operations`), each statement
    the ``text()`` construct its ``$n`` form was compiled from."""

    def __init__(self, names: Names, clock: Callable[[], float] | None) -> None:
        from harel_sa.postgres import kinds, operations, scheduling
        from harel_sa.postgres.compiled import IDENTITY
        from harel_sa.postgres.statements import statements_for

        self.kinds = kinds
        self.ops = operations
        self.sched = scheduling
        self.clock = clock
        self.st = statements_for(names, clock is None)
        self.identity = text(IDENTITY)
        self.checked = f"harel_sa.outbox.postgresql.{names.prefix}"

    def _program(self, call: Any) -> Clauses:
        if isinstance(call, self.kinds.One):
            return call.read((yield self._query(call.query)))
        if isinstance(call, self.kinds.Locked):  # in the application's transaction: in turn
            while True:
                yield self._query(call.lock)
                value = call.read((yield self._query(call.query)))
                if value is not None:
                    return value
        program = call.start()
        try:
            query = next(program)
            while True:
                query = program.send((yield self._query(query)))
        except StopIteration as done:
            return done.value

    def _query(self, query: Any) -> Query[TextClause]:
        return Query(query.statement.clause, query.params)

    def publish(self, rows: list[Row]) -> Clauses:
        return self._program(self.ops.publish(self.st, self.clock, rows))

    def schedule(self, rows: list[Row], due: Due) -> Clauses:
        return self._program(self.sched.schedule(self.st.scheduling, self.clock, rows, due))

    def publish_keyed(self, row: Row, due: Due | None, key: str, replace: bool) -> Clauses:
        sc = self.st.scheduling
        return self._program(self.sched.publish_keyed(sc, self.clock, row, due, key, replace))

    def cancel(self, key: str) -> Clauses:
        return self._program(self.sched.cancel(self.st.scheduling, key))

    def ack(self, lease: Lease[Any]) -> Clauses:
        return self._program(self.ops.ack(self.st, lease))

    def nack(self, lease: Lease[Any], delay: float) -> Clauses:
        return self._program(self.ops.nack(self.st, self.clock, lease, delay))

    def dead_letter(self, lease: Lease[Any], reason: str) -> Clauses:
        return self._program(self.ops.dead_letter(self.st, self.clock, lease, reason))
