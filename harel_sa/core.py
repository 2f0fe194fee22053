"""What both transports share above the driver: argument checks and the bound operation.

Each method validates its arguments (raising before anything is written) and returns a
:data:`Call`: the operation with every argument bound but the connection. The sync transport
runs a call on its sqlite3 connection; the async twin runs the same call in aiosqlite's thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from functools import partial
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel

from harel_sa import admin, validate
from harel_sa import operations as ops
from harel_sa.errors import InvalidArgumentError, InvalidArgumentTypeError
from harel_sa.events import E, Lease
from harel_sa.schema import Names
from harel_sa.sql import statements_for

T = TypeVar("T")
Call = Callable[[sqlite3.Connection], T]
Synchronous = Literal["FULL", "NORMAL"]


class Options(Generic[E]):
    """A transport's settings, checked once at open."""

    def __init__(
        self,
        prefix: str,
        clock: Callable[[], float],
        busy_timeout: float,
        event_type: type[E],
        synchronous: str,
    ) -> None:
        self.names = Names(prefix)
        if not callable(clock):
            raise InvalidArgumentTypeError("clock must be a callable returning epoch seconds")
        if not (isinstance(event_type, type) and issubclass(event_type, BaseModel)):
            raise InvalidArgumentTypeError("event_type must be a pydantic BaseModel subclass")
        if synchronous not in ("FULL", "NORMAL"):
            raise InvalidArgumentError(
                f"synchronous must be 'FULL' or 'NORMAL', not {synchronous!r}"
            )
        self.clock = clock
        self.busy_timeout = validate.seconds("busy_timeout", busy_timeout, allow_zero=True)
        self.event_type = event_type
        self.synchronous = synchronous


class Calls(Generic[E]):
    """The transport's operations as validated, bound calls."""

    def __init__(self, options: Options[E]) -> None:
        self.options = options
        self.st = statements_for(options.names)
        self.admin = admin.admin_statements_for(options.names)

    def publish(
        self, group_id: object, event: object, priority: object, routing_key: object
    ) -> Call[None]:
        row = self._row(group_id, event, priority, routing_key)
        return partial(ops.publish, st=self.st, clock=self.options.clock, rows=[row])

    def publish_many(self, items: object, priority: object, routing_key: object) -> Call[None]:
        if isinstance(items, str | bytes) or not isinstance(items, Iterable):
            raise InvalidArgumentTypeError("items must be an iterable of (group_id, event) pairs")
        rows = []
        for item in items:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise InvalidArgumentTypeError(
                    f"each item must be a (group_id, event) tuple, not {item!r:.80}"
                )
            rows.append(self._row(item[0], item[1], priority, routing_key))
        return partial(ops.publish, st=self.st, clock=self.options.clock, rows=rows)

    def _row(
        self, group_id: object, event: object, priority: object, routing_key: object
    ) -> tuple[str, str, int, str | None]:
        return (
            validate.text("group_id", group_id),
            validate.event(event, self.options.event_type),
            validate.priority("priority", priority),
            validate.optional_text("routing_key", routing_key),
        )

    def claim(
        self,
        worker_id: object,
        visibility: object,
        min_priority: object,
        routing_keys: object,
        max_deliveries: object,
    ) -> Call[Lease[E] | None]:
        spec = self._spec(worker_id, visibility, min_priority, routing_keys, max_deliveries)
        return partial(ops.claim, st=self.st, clock=self.options.clock, spec=spec)

    def ack_and_claim(
        self,
        lease: object,
        worker_id: object,
        visibility: object,
        min_priority: object,
        routing_keys: object,
        max_deliveries: object,
    ) -> Call[tuple[bool, Lease[E] | None]]:
        spec = self._spec(worker_id, visibility, min_priority, routing_keys, max_deliveries)
        return partial(
            ops.ack_and_claim,
            st=self.st,
            clock=self.options.clock,
            lease=validate.lease(lease),
            spec=spec,
        )

    def _spec(
        self,
        worker_id: object,
        visibility: object,
        min_priority: object,
        routing_keys: object,
        max_deliveries: object,
    ) -> ops.ClaimSpec:
        return ops.ClaimSpec(
            event_type=self.options.event_type,
            worker_id=validate.text("worker_id", worker_id),
            visibility=validate.seconds("visibility", visibility, allow_zero=False),
            min_priority=validate.priority("min_priority", min_priority),
            routing_keys=validate.routing_keys(routing_keys) or (),
            max_deliveries=(
                None if max_deliveries is None else validate.count("max_deliveries", max_deliveries)
            ),
        )

    def ack(self, lease: object) -> Call[bool]:
        return partial(ops.ack, st=self.st, lease=validate.lease(lease))

    def give_back(self, lease: Lease[E]) -> Call[bool]:
        return partial(ops.give_back, st=self.st, lease=lease)

    def nack(self, lease: object, delay: object) -> Call[bool]:
        return partial(
            ops.nack,
            st=self.st,
            clock=self.options.clock,
            lease=validate.lease(lease),
            delay=validate.seconds("delay", delay, allow_zero=True),
        )

    def extend(self, lease: object, visibility: object) -> Call[bool]:
        return partial(
            ops.extend,
            st=self.st,
            clock=self.options.clock,
            lease=validate.lease(lease),
            visibility=validate.seconds("visibility", visibility, allow_zero=False),
        )

    def dead_letter(self, lease: object, reason: object) -> Call[bool]:
        return partial(
            ops.dead_letter,
            st=self.st,
            clock=self.options.clock,
            lease=validate.lease(lease),
            reason=validate.text("reason", reason),
        )

    def stats(self) -> Call[admin.Stats]:
        return partial(admin.stats, st=self.admin, clock=self.options.clock)

    def peek(self, group_id: object, limit: object) -> Call[list[admin.QueuedMessage]]:
        return partial(
            admin.peek,
            st=self.admin,
            clock=self.options.clock,
            group_id=validate.optional_text("group_id", group_id),
            limit=validate.count("limit", limit),
        )

    def release(self, group_id: object) -> Call[int]:
        return partial(
            admin.release,
            st=self.admin,
            clock=self.options.clock,
            group_id=validate.optional_text("group_id", group_id),
        )

    def purge(self, group_id: object) -> Call[int]:
        return partial(admin.purge, st=self.admin, group_id=validate.text("group_id", group_id))

    def dead(self, group_id: object, seqs: object, limit: object) -> Call[list[admin.DeadMessage]]:
        return partial(
            admin.dead,
            st=self.admin,
            group_id=validate.optional_text("group_id", group_id),
            seqs=validate.seqs(seqs),
            limit=validate.count("limit", limit),
        )

    def requeue_dead(self, group_id: object, seqs: object) -> Call[int]:
        return partial(
            admin.requeue_dead,
            st=self.admin,
            group_id=validate.optional_text("group_id", group_id),
            seqs=validate.seqs(seqs),
        )

    def purge_dead(self, group_id: object, seqs: object) -> Call[int]:
        return partial(
            admin.purge_dead,
            st=self.admin,
            group_id=validate.optional_text("group_id", group_id),
            seqs=validate.seqs(seqs),
        )
