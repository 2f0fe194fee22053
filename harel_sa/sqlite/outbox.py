"""SQLite's outbox plan: the transports' own statements and programs as ``text()``
constructs, run in the application's transaction (:mod:`harel_sa.outbox`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import text

from harel_sa.errors import InvalidArgumentError
from harel_sa.events import Lease
from harel_sa.outbox_plans import Clauses, Plan
from harel_sa.rules import MAX_ERROR
from harel_sa.schema import Names
from harel_sa.seam import Due, Program, Query, Row
from harel_sa.sqlite import scheduling
from harel_sa.sqlite.statements import statements_for


class OutboxPlan(Plan):
    """SQLite's writes in the application's transaction; "now" is ``clock`` (else
    ``time.time``), as the transports'."""

    def __init__(self, names: Names, clock: Callable[[], float] | None) -> None:
        self.sched = scheduling
        st = statements_for(names)
        self.clock = clock or time.time
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
