"""PostgreSQL's side of :mod:`harel_sa.seam`: one transport's operations, statements and clock.

Its operations are programs of statements (:class:`~harel_sa.postgres.kinds.Op`, or a
:class:`~harel_sa.postgres.kinds.One` statement, or a :class:`~harel_sa.postgres.kinds.Locked`
one) that a sync or an async driver runs
(:mod:`harel_sa.postgres.driver`), so binding one is calling it.
"""

from __future__ import annotations

from typing import Any

from harel_sa.events import Lease
from harel_sa.flow import Target
from harel_sa.models import DeadMessage, Limit, Pause, QueuedMessage, Stats
from harel_sa.postgres import admin, flow, operations, periodic, scheduling
from harel_sa.postgres.kinds import ClockOrServer, Locked, One, Op
from harel_sa.postgres.statements import statements_for
from harel_sa.schema import Names
from harel_sa.seam import ClaimSpec, Due, Row


class PostgresBackend:
    """The operations of :mod:`~harel_sa.postgres.operations` and
    :mod:`~harel_sa.postgres.admin` with one transport's statements; "now" in them is the
    server's (``clock`` ``None``) or ``clock``'s."""

    def __init__(self, names: Names, clock: ClockOrServer) -> None:
        self.statements = statements_for(names, server_clock=clock is None)
        self.clock = clock
        self.seen = flow.Seen()

    def publish(self, rows: list[Row]) -> Op[None] | One[None]:
        return operations.publish(self.statements, self.clock, rows, self.seen)

    def schedule(self, rows: list[Row], due: Due) -> One[None]:
        return scheduling.schedule(self.statements.scheduling, self.clock, rows, due)

    def publish_keyed(self, row: Row, due: Due | None, key: str, replace: bool) -> Locked[bool]:
        sc = self.statements.scheduling
        return scheduling.publish_keyed(sc, self.clock, row, due, key, replace)

    def cancel(self, key: str) -> Locked[bool]:
        return scheduling.cancel(self.statements.scheduling, key)

    def publish_tick(self, name: str, tick: float, row: Row, catch_up: bool) -> Op[bool]:
        return periodic.publish_tick(self.statements, self.clock, name, tick, row, catch_up)

    def claim(self, spec: ClaimSpec) -> Op[Lease[Any] | None]:
        return operations.claim(self.statements, self.clock, spec)

    def ack_and_claim(
        self, lease: Lease[Any], spec: ClaimSpec
    ) -> Op[tuple[bool, Lease[Any] | None]]:
        return operations.ack_and_claim(self.statements, self.clock, lease, spec)

    def claim_many(self, spec: ClaimSpec, limit: int) -> Op[list[Lease[Any]]]:
        return operations.claim_many(self.statements, self.clock, spec, limit)

    def ack_many(self, leases: tuple[Lease[Any], ...]) -> Op[list[bool]]:
        return operations.ack_many(self.statements, leases)

    def ack_many_and_claim_many(
        self, leases: tuple[Lease[Any], ...], spec: ClaimSpec, limit: int
    ) -> Op[tuple[list[bool], list[Lease[Any]]]]:
        return operations.ack_many_and_claim_many(self.statements, self.clock, leases, spec, limit)

    def ack(self, lease: Lease[Any]) -> One[bool]:
        return operations.ack(self.statements, lease)

    def give_back(self, lease: Lease[Any]) -> One[bool]:
        return operations.give_back(self.statements, lease)

    def nack(self, lease: Lease[Any], delay: float) -> One[bool]:
        return operations.nack(self.statements, self.clock, lease, delay)

    def extend(self, lease: Lease[Any], visibility: float) -> One[bool]:
        return operations.extend(self.statements, self.clock, lease, visibility)

    def dead_letter(self, lease: Lease[Any], reason: str) -> One[bool]:
        return operations.dead_letter(self.statements, self.clock, lease, reason)

    def identity(self) -> One[tuple[Any, ...]]:
        return operations.identity(self.statements)

    def stats(self) -> Op[Stats]:
        return admin.stats(self.statements, self.clock)

    def peek(
        self, group_id: str | None, limit: int, scheduled: bool = False
    ) -> Op[list[QueuedMessage]]:
        return admin.peek(self.statements, self.clock, group_id, limit, scheduled)

    def release(self, group_id: str | None) -> Op[int]:
        return admin.release(self.statements, self.clock, group_id)

    def purge(self, group_id: str) -> Op[int]:
        return admin.purge(self.statements, group_id)

    def dead(
        self, group_id: str | None, seqs: tuple[int, ...] | None, limit: int
    ) -> Op[list[DeadMessage]]:
        return admin.dead(self.statements, group_id, seqs, limit)

    def requeue_dead(self, group_id: str | None, seqs: tuple[int, ...] | None) -> Op[int]:
        return admin.requeue_dead(self.statements, self.clock, group_id, seqs)

    def purge_dead(self, group_id: str | None, seqs: tuple[int, ...] | None) -> Op[int]:
        return admin.purge_dead(self.statements, group_id, seqs)

    def pause(self, target: Target) -> Op[bool]:
        self.seen.forget()
        return flow.pause(self.statements.flow, self.clock, target)

    def resume(self, target: Target) -> Op[bool]:
        self.seen.forget()
        return flow.resume(self.statements.flow, self.clock, target)

    def backoff(self, target: Target, seconds: float) -> Op[float]:
        self.seen.forget()
        return flow.backoff(self.statements.flow, self.clock, target, seconds)

    def paused(self) -> Op[list[Pause]]:
        return flow.paused(self.statements.flow)

    def limits(self) -> Op[dict[str | None, Limit]]:
        return flow.limits(self.statements.flow, self.clock)
