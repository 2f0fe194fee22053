"""SQLite's side of :mod:`harel_sa.seam`: one transport's operations, statements and clock bound.

Both SQLite transports build their :class:`~harel_sa.seam.Binder` on a :class:`SqliteBackend`;
each operation comes back as a :class:`SqliteCall`, which the transport hands its connection.
"""

from __future__ import annotations

from functools import partial
from typing import Any, TypeVar

from harel_sa.events import Lease
from harel_sa.flow import Target
from harel_sa.models import DeadMessage, Limit, Pause, QueuedMessage, Stats
from harel_sa.schema import Names
from harel_sa.seam import Bound, ClaimSpec, Clock, Due, Row
from harel_sa.sqlite import admin, flow, operations, periodic
from harel_sa.sqlite.statements import statements_for

T = TypeVar("T")


# A partial is built in C: binding an operation costs no Python frame.
class SqliteCall(partial[T], Bound[T]):
    """A SQLite operation bound to its arguments: called with the sqlite3 connection, it runs
    its one transaction and returns its result."""

    __slots__ = ()


def sqlite_call(bound: Bound[T]) -> SqliteCall[T]:
    """``bound`` as the SQLite operation it is; ``TypeError`` for another dialect's."""
    if isinstance(bound, SqliteCall):
        return bound
    raise TypeError(f"not a SQLite operation: {type(bound).__name__}")


class SqliteBackend:
    """The operations of :mod:`~harel_sa.sqlite.operations` and :mod:`~harel_sa.sqlite.admin`
    with one transport's statements (its prefix) and clock."""

    def __init__(self, names: Names, clock: Clock) -> None:
        self.statements = statements_for(names)
        self.clock = clock

    def publish(self, rows: list[Row]) -> SqliteCall[None]:
        st, clock = self.statements, self.clock
        return SqliteCall(operations.publish, statements=st, clock=clock, rows=rows)

    def schedule(self, rows: list[Row], due: Due) -> SqliteCall[None]:
        st, clock = self.statements, self.clock
        return SqliteCall(operations.schedule, statements=st, clock=clock, rows=rows, due=due)

    def publish_keyed(self, row: Row, due: Due | None, key: str, replace: bool) -> SqliteCall[bool]:
        return SqliteCall(
            operations.publish_keyed,
            statements=self.statements,
            clock=self.clock,
            row=row,
            due=due,
            key=key,
            replace=replace,
        )

    def cancel(self, key: str) -> SqliteCall[bool]:
        return SqliteCall(operations.cancel, statements=self.statements, key=key)

    def publish_tick(self, name: str, tick: float, row: Row, catch_up: bool) -> SqliteCall[bool]:
        st, clock, publish = self.statements, self.clock, periodic.publish_tick
        tick_of = {"name": name, "tick": tick, "row": row, "catch_up": catch_up}
        return SqliteCall(publish, statements=st, clock=clock, **tick_of)

    def claim(self, spec: ClaimSpec) -> SqliteCall[Lease[Any] | None]:
        st, clock = self.statements, self.clock
        return SqliteCall(operations.claim, statements=st, clock=clock, spec=spec)

    def ack_and_claim(
        self, lease: Lease[Any], spec: ClaimSpec
    ) -> SqliteCall[tuple[bool, Lease[Any] | None]]:
        return SqliteCall(
            operations.ack_and_claim,
            statements=self.statements,
            clock=self.clock,
            lease=lease,
            spec=spec,
        )

    def claim_many(self, spec: ClaimSpec, limit: int) -> SqliteCall[list[Lease[Any]]]:
        st, clock = self.statements, self.clock
        return SqliteCall(operations.claim_many, statements=st, clock=clock, spec=spec, limit=limit)

    def ack_many(self, leases: tuple[Lease[Any], ...]) -> SqliteCall[list[bool]]:
        return SqliteCall(operations.ack_many, statements=self.statements, leases=leases)

    def ack_many_and_claim_many(
        self, leases: tuple[Lease[Any], ...], spec: ClaimSpec, limit: int
    ) -> SqliteCall[tuple[list[bool], list[Lease[Any]]]]:
        return SqliteCall(
            operations.ack_many_and_claim_many,
            statements=self.statements,
            clock=self.clock,
            leases=leases,
            spec=spec,
            limit=limit,
        )

    def ack(self, lease: Lease[Any]) -> SqliteCall[bool]:
        return SqliteCall(operations.ack, statements=self.statements, lease=lease)

    def give_back(self, lease: Lease[Any]) -> SqliteCall[bool]:
        return SqliteCall(operations.give_back, statements=self.statements, lease=lease)

    def nack(self, lease: Lease[Any], delay: float) -> SqliteCall[bool]:
        st, clock = self.statements, self.clock
        return SqliteCall(operations.nack, statements=st, clock=clock, lease=lease, delay=delay)

    def extend(self, lease: Lease[Any], visibility: float) -> SqliteCall[bool]:
        return SqliteCall(
            operations.extend,
            statements=self.statements,
            clock=self.clock,
            lease=lease,
            visibility=visibility,
        )

    def dead_letter(self, lease: Lease[Any], reason: str) -> SqliteCall[bool]:
        return SqliteCall(
            operations.dead_letter,
            statements=self.statements,
            clock=self.clock,
            lease=lease,
            reason=reason,
        )

    def stats(self) -> SqliteCall[Stats]:
        return SqliteCall(admin.stats, statements=self.statements, clock=self.clock)

    def peek(
        self, group_id: str | None, limit: int, scheduled: bool = False
    ) -> SqliteCall[list[QueuedMessage]]:
        st, clock = self.statements, self.clock
        return SqliteCall(
            admin.peek,
            statements=st,
            clock=clock,
            group_id=group_id,
            limit=limit,
            scheduled=scheduled,
        )

    def release(self, group_id: str | None) -> SqliteCall[int]:
        st, clock = self.statements, self.clock
        return SqliteCall(admin.release, statements=st, clock=clock, group_id=group_id)

    def purge(self, group_id: str) -> SqliteCall[int]:
        return SqliteCall(admin.purge, statements=self.statements, group_id=group_id)

    def dead(
        self, group_id: str | None, seqs: tuple[int, ...] | None, limit: int
    ) -> SqliteCall[list[DeadMessage]]:
        st = self.statements
        return SqliteCall(admin.dead, statements=st, group_id=group_id, seqs=seqs, limit=limit)

    def requeue_dead(self, group_id: str | None, seqs: tuple[int, ...] | None) -> SqliteCall[int]:
        st, clock = self.statements, self.clock
        return SqliteCall(
            admin.requeue_dead, statements=st, clock=clock, group_id=group_id, seqs=seqs
        )

    def purge_dead(self, group_id: str | None, seqs: tuple[int, ...] | None) -> SqliteCall[int]:
        st = self.statements
        return SqliteCall(admin.purge_dead, statements=st, group_id=group_id, seqs=seqs)

    def pause(self, target: Target) -> SqliteCall[bool]:
        return SqliteCall(flow.pause, st=self.statements.flow, clock=self.clock, target=target)

    def resume(self, target: Target) -> SqliteCall[bool]:
        return SqliteCall(flow.resume, st=self.statements.flow, clock=self.clock, target=target)

    def backoff(self, target: Target, seconds: float) -> SqliteCall[float]:
        st, clock = self.statements.flow, self.clock
        return SqliteCall(flow.backoff, st=st, clock=clock, target=target, seconds=seconds)

    def paused(self) -> SqliteCall[list[Pause]]:
        return SqliteCall(flow.paused, st=self.statements.flow)

    def limits(self) -> SqliteCall[dict[str | None, Limit]]:
        return SqliteCall(flow.limits, st=self.statements.flow, clock=self.clock)
