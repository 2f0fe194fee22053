"""The PostgreSQL transports' binding: each public call validated, then bound to its operation.

:class:`harel_sa.calls.Calls` binds a backend's operations to a driver connection (the
``Backend`` seam: SQLite's operations run on the connection they are handed). PostgreSQL's
operations are programs of statements that a sync or an async driver runs
(:mod:`harel_sa.postgres.driver`), so this binding builds programs instead; it is the
thinnest the backend needs. Every argument goes
through :mod:`harel_sa.validate`, the checks both backends share, before anything is sent.
"""

from __future__ import annotations

from typing import Any, Generic

from harel_sa import validate
from harel_sa.calls import ClaimSpecs, Options, message_row, message_rows
from harel_sa.events import E, Lease
from harel_sa.models import DeadMessage, QueuedMessage, Stats
from harel_sa.postgres import operations as ops
from harel_sa.postgres.statements import statements_for


class Calls(Generic[E]):
    """The transport's operations as validated, bound :class:`~harel_sa.postgres.operations.Op`\\ s;
    "now" is the server's unless ``server_clock`` is false (then ``options.clock``)."""

    def __init__(self, options: Options[E], *, server_clock: bool) -> None:
        self.options = options
        self.st = statements_for(options.names, server_clock)
        self.clock: ops.Clock = None if server_clock else options.clock
        self.claim_spec = ClaimSpecs(options.event_type)

    def publish(
        self, group_id: object, event: object, priority: object, routing_key: object
    ) -> ops.One[None]:
        row = message_row(self.options.event_type, group_id, event, priority, routing_key)
        return ops.publish_one(self.st, self.clock, row)

    def publish_many(self, items: object, priority: object, routing_key: object) -> ops.Call[None]:
        rows = message_rows(self.options.event_type, items, priority, routing_key)
        return ops.publish(self.st, self.clock, rows)

    def claim(
        self,
        worker_id: object,
        visibility: object,
        min_priority: object,
        routing_keys: object,
        max_deliveries: object,
    ) -> ops.Op[Lease[E] | None]:
        spec = self.claim_spec(worker_id, visibility, min_priority, routing_keys, max_deliveries)
        return ops.claim(self.st, self.clock, spec)

    def ack_and_claim(
        self,
        lease: object,
        worker_id: object,
        visibility: object,
        min_priority: object,
        routing_keys: object,
        max_deliveries: object,
    ) -> ops.Op[tuple[bool, Lease[E] | None]]:
        spec = self.claim_spec(worker_id, visibility, min_priority, routing_keys, max_deliveries)
        return ops.ack_and_claim(self.st, self.clock, validate.lease(lease), spec)

    def claim_many(
        self,
        worker_id: object,
        visibility: object,
        limit: object,
        min_priority: object,
        routing_keys: object,
        max_deliveries: object,
    ) -> ops.Op[list[Lease[E]]]:
        spec = self.claim_spec(worker_id, visibility, min_priority, routing_keys, max_deliveries)
        return ops.claim_many(self.st, self.clock, spec, validate.count("limit", limit))

    def ack_many(self, leases: object) -> ops.Op[list[bool]]:
        return ops.ack_many(self.st, validate.leases(leases))

    def ack_many_and_claim_many(
        self,
        leases: object,
        worker_id: object,
        visibility: object,
        limit: object,
        min_priority: object,
        routing_keys: object,
        max_deliveries: object,
    ) -> ops.Op[tuple[list[bool], list[Lease[E]]]]:
        spec = self.claim_spec(worker_id, visibility, min_priority, routing_keys, max_deliveries)
        checked = validate.leases(leases)
        return ops.ack_many_and_claim_many(
            self.st, self.clock, checked, spec, validate.count("limit", limit)
        )

    def ack(self, lease: object) -> ops.One[bool]:
        return ops.ack(self.st, validate.lease(lease))

    def give_back(self, lease: Lease[Any]) -> ops.One[bool]:
        return ops.give_back(self.st, lease)

    def nack(self, lease: object, delay: object) -> ops.One[bool]:
        checked = validate.seconds("delay", delay, allow_zero=True)
        return ops.nack(self.st, self.clock, validate.lease(lease), checked)

    def extend(self, lease: object, visibility: object) -> ops.One[bool]:
        checked = validate.seconds("visibility", visibility, allow_zero=False)
        return ops.extend(self.st, self.clock, validate.lease(lease), checked)

    def dead_letter(self, lease: object, reason: object) -> ops.One[bool]:
        checked = validate.required_text("reason", reason)
        return ops.dead_letter(self.st, self.clock, validate.lease(lease), checked)

    def stats(self) -> ops.Op[Stats]:
        return ops.stats(self.st, self.clock)

    def peek(self, group_id: object, limit: object) -> ops.Op[list[QueuedMessage]]:
        group = validate.group_filter(group_id)
        return ops.peek(self.st, self.clock, group, validate.count("limit", limit))

    def release(self, group_id: object) -> ops.Op[int]:
        return ops.release(self.st, self.clock, validate.group_filter(group_id))

    def purge(self, group_id: object) -> ops.Op[int]:
        return ops.purge(self.st, validate.group_id(group_id))

    def dead(self, group_id: object, seqs: object, limit: object) -> ops.Op[list[DeadMessage]]:
        group = validate.group_filter(group_id)
        return ops.dead(self.st, group, validate.seqs(seqs), validate.count("limit", limit))

    def requeue_dead(self, group_id: object, seqs: object) -> ops.Op[int]:
        group = validate.group_filter(group_id)
        return ops.requeue_dead(self.st, self.clock, group, validate.seqs(seqs))

    def purge_dead(self, group_id: object, seqs: object) -> ops.Op[int]:
        group = validate.group_filter(group_id)
        return ops.purge_dead(self.st, group, validate.seqs(seqs))
