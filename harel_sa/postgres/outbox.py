"""PostgreSQL's outbox plan: the transports' own operations, each statement the ``text()``
construct its ``$n`` form was compiled from, run in the application's transaction
(:mod:`harel_sa.outbox`); a publish's ``NOTIFY`` rides that transaction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import TextClause, text

from harel_sa.events import Lease
from harel_sa.outbox_plans import Clauses, Plan
from harel_sa.postgres import kinds, operations, scheduling
from harel_sa.postgres.compiled import IDENTITY
from harel_sa.postgres.statements import statements_for
from harel_sa.schema import Names
from harel_sa.seam import Due, Query, Row


class OutboxPlan(Plan):
    """PostgreSQL's operations (:mod:`harel_sa.postgres.operations`) in the application's
    transaction; "now" is the server's unless the transport has a ``clock``."""

    def __init__(self, names: Names, clock: Callable[[], float] | None) -> None:
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
