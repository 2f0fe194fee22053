"""The outbox's writes as programs of ``text()`` statements, one :class:`Plan` per dialect
(each in its dialect's folder, looked up by name: :data:`PLANS`), and how a program runs on a
SQLAlchemy connection (:func:`drive`, :func:`adrive`).

A program yields each :class:`Query` and is sent its :class:`Result`; the statements are the
dialect's own, as its transports send them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, TextClause

from harel_sa.errors import InvalidArgumentError
from harel_sa.events import Lease
from harel_sa.schema import Names
from harel_sa.seam import Due, Program, Result, Row

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


#: Each dialect's plan, by the name SQLAlchemy gives the dialect: a module of its folder, its
#: ``OutboxPlan``, imported when a connection of that dialect first comes.
PLANS = {"sqlite": "harel_sa.sqlite.outbox", "postgresql": "harel_sa.postgres.outbox"}


def plan_for(names: Names, dialect: str, clock: Callable[[], float] | None) -> Plan:
    """The plan of ``dialect`` under ``names``' prefix (``clock``: the transport's, else the
    database's own: PostgreSQL's server clock, SQLite's ``time.time``)."""
    where = PLANS.get(dialect)
    if where is None:
        raise InvalidArgumentError(
            f"harel_sa keeps its queue on SQLite or PostgreSQL, not on {dialect!r}"
        )
    plan: Plan = importlib.import_module(where).OutboxPlan(names, clock)
    return plan
