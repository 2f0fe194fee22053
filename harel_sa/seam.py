"""The seam between the rules every backend shares and a dialect.

Each method of :class:`Binder` checks its arguments (raising before anything is written) and
returns the backend's operation bound to them (a :class:`Bound`), which a transport runs. A
:class:`Backend` is one dialect's operations for one transport, statements and clock bound at
open (:class:`harel_sa.sqlite.backend.SqliteBackend`,
:class:`harel_sa.postgres.backend.PostgresBackend`); :class:`Binder` never names a dialect, so
every transport checks its arguments with the very same code.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel

from harel_sa import flow, validate
from harel_sa.errors import InvalidArgumentError, InvalidArgumentTypeError
from harel_sa.events import E, Lease
from harel_sa.models import DeadMessage, Limit, Pause, QueuedMessage, Stats
from harel_sa.periodic import Periodic
from harel_sa.schema import MAX_PRIORITY, Names
from harel_sa.validate import Row as Row  # the backends' name for it
from harel_sa.validate import message_row, message_rows

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
S = TypeVar("S")
Clock = Callable[[], float]
Synchronous = Literal["FULL", "NORMAL"]
#: When a scheduled message is due: ``(at, delay)``, the epoch instant ``at`` (the transport's
#: clock; PostgreSQL's server clock), else ``delay`` seconds after the backend's "now".
Due = tuple[float | None, float]


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """What a claim asks for, validated; built once per call by the transports.

    ``min_priority`` is in 0-:data:`~harel_sa.schema.MAX_PRIORITY` (a floor below 0 is 0),
    so every dialect's statement for it exists. A floor above ``MAX_PRIORITY`` matches no group:
    ``claims_nothing`` is then true, and the backends skip the claim (a fused call still
    acks), sending no select for it.
    """

    event_type: type[BaseModel]
    worker_id: str
    visibility: float
    min_priority: int
    routing_keys: tuple[str, ...]
    max_deliveries: int | None
    claims_nothing: bool = False


def publish_due(delay: object, not_before: object) -> Due | None:
    """A publish's time options, checked (:func:`harel_sa.validate.due`); ``None`` when the
    message is due now (no option, or ``delay=0``)."""
    due = validate.due(delay, not_before)
    if due is None or (due[0] is None and due[1] == 0):
        return None
    return due


def publish_options(
    delay: object, not_before: object, key: object, on_key: object
) -> tuple[Due | None, str | None, bool]:
    """A publish's due time, key and ``on_key == "replace"``, checked (every backend's and the
    outbox's publish)."""
    return publish_due(delay, not_before), validate.key(key), validate.on_key(on_key)


def claim_spec(
    event_type: type[BaseModel],
    worker_id: object,
    visibility: object,
    min_priority: object,
    routing_keys: object,
    max_deliveries: object,
) -> ClaimSpec:
    """A claim's arguments, validated (every backend's claims)."""
    floor = validate.floor("min_priority", min_priority)
    return ClaimSpec(
        event_type=event_type,
        worker_id=validate.worker_id(worker_id),
        visibility=validate.seconds("visibility", visibility, allow_zero=False),
        min_priority=min(floor, MAX_PRIORITY),
        routing_keys=validate.routing_keys(routing_keys) or (),
        max_deliveries=(
            None if max_deliveries is None else validate.count("max_deliveries", max_deliveries)
        ),
        claims_nothing=floor > MAX_PRIORITY,
    )


class ClaimSpecs:
    """A transport's claim arguments, validated and remembered.

    A worker claims with the same argument objects every time (its worker id, its visibility,
    its options), so their checks run once, not at every claim: the last arguments and their
    spec are kept, and a call passing the very same objects gets the same spec. Only
    immutable arguments are kept (``routing_keys`` ``None`` or a tuple: a list may change
    between two calls). Safe from several threads: the pair is replaced whole.
    """

    __slots__ = ("_last", "event_type")

    def __init__(self, event_type: type[BaseModel]) -> None:
        self.event_type = event_type
        self._last: tuple[object, object, object, object, object, ClaimSpec] | None = None

    def __call__(
        self,
        worker_id: object,
        visibility: object,
        min_priority: object,
        routing_keys: object,
        max_deliveries: object,
    ) -> ClaimSpec:
        last = self._last
        if (
            last is not None
            and last[0] is worker_id
            and last[1] is visibility
            and last[2] is min_priority
            and last[3] is routing_keys
            and last[4] is max_deliveries
        ):
            return last[5]
        spec = claim_spec(
            self.event_type, worker_id, visibility, min_priority, routing_keys, max_deliveries
        )
        if routing_keys is None or type(routing_keys) is tuple:
            self._last = (worker_id, visibility, min_priority, routing_keys, max_deliveries, spec)
        return spec


# Not frozen: a frozen dataclass's __init__ costs a call per field, and these are made per call.
@dataclass(slots=True)
class Query(Generic[S]):
    """One statement of a :data:`Program` (a dialect's compiled statement, or a ``text()``
    construct) and its parameters."""

    statement: S
    params: dict[str, Any]


@dataclass(slots=True)
class Result:
    """What a statement gave its program: its rows, and how many rows it changed (or
    returned, for a statement that returns rows)."""

    rows: list[tuple[Any, ...]]
    rowcount: int

    def one(self) -> tuple[Any, ...]:
        return self.rows[0]


#: An operation written once for several drivers: it yields each :class:`Query`, is sent the
#: statement's :class:`Result`, and returns the operation's value.
Program = Generator[Query[S], Result, T]


class Bound(Generic[T_co]):
    """An operation bound to every argument but what its transport runs it on, typed by the
    result it gives; one transaction when run. Each dialect's operations subclass it (SQLite's
    :class:`~harel_sa.sqlite.backend.SqliteCall`, PostgreSQL's ``Op`` and ``One``), and each
    transport takes back its own kind with a checked narrowing, never a cast."""

    __slots__ = ()


class Backend(Protocol):
    """One transport's dialect operations, its statements and clock bound once at open (the
    transport's clock, or ``None`` for the database server's where the dialect has one). Each
    is given its validated arguments and returns the operation bound, one transaction when run;
    each promises what the transports' methods of the same name document."""

    @property
    def clock(self) -> Clock | None:
        """The transport's clock; ``None``: the database server's."""

    def publish(self, rows: list[Row]) -> Bound[None]: ...
    def schedule(self, rows: list[Row], due: Due) -> Bound[None]: ...
    def publish_keyed(self, row: Row, due: Due | None, key: str, replace: bool) -> Bound[bool]: ...
    def cancel(self, key: str) -> Bound[bool]: ...
    def publish_tick(self, name: str, tick: float, row: Row, catch_up: bool) -> Bound[bool]: ...
    def claim(self, spec: ClaimSpec) -> Bound[Lease[Any] | None]: ...
    def ack_and_claim(
        self, lease: Lease[Any], spec: ClaimSpec
    ) -> Bound[tuple[bool, Lease[Any] | None]]: ...
    def claim_many(self, spec: ClaimSpec, limit: int) -> Bound[list[Lease[Any]]]: ...
    def ack_many(self, leases: tuple[Lease[Any], ...]) -> Bound[list[bool]]: ...
    def ack_many_and_claim_many(
        self, leases: tuple[Lease[Any], ...], spec: ClaimSpec, limit: int
    ) -> Bound[tuple[list[bool], list[Lease[Any]]]]: ...
    def ack(self, lease: Lease[Any]) -> Bound[bool]: ...
    def give_back(self, lease: Lease[Any]) -> Bound[bool]: ...
    def nack(self, lease: Lease[Any], delay: float) -> Bound[bool]: ...
    def extend(self, lease: Lease[Any], visibility: float) -> Bound[bool]: ...
    def dead_letter(self, lease: Lease[Any], reason: str) -> Bound[bool]: ...
    def stats(self) -> Bound[Stats]: ...
    def peek(
        self, group_id: str | None, limit: int, scheduled: bool = False
    ) -> Bound[list[QueuedMessage]]: ...
    def release(self, group_id: str | None) -> Bound[int]: ...
    def purge(self, group_id: str) -> Bound[int]: ...
    def dead(
        self, group_id: str | None, seqs: tuple[int, ...] | None, limit: int
    ) -> Bound[list[DeadMessage]]: ...
    def requeue_dead(self, group_id: str | None, seqs: tuple[int, ...] | None) -> Bound[int]: ...
    def purge_dead(self, group_id: str | None, seqs: tuple[int, ...] | None) -> Bound[int]: ...
    def pause(self, target: flow.Target) -> Bound[bool]: ...
    def resume(self, target: flow.Target) -> Bound[bool]: ...
    def backoff(self, target: flow.Target, seconds: float) -> Bound[float]: ...
    def paused(self) -> Bound[list[Pause]]: ...
    def limits(self) -> Bound[dict[str | None, Limit]]: ...


class QueueStatements(Protocol):
    """What both dialects' statements name alike: one name per action, whatever SQL each
    dialect spells it with (each dialect adds the statements of its own algorithms)."""

    names: Names
    give_back: object  # undo a claim its caller never received
    park: object  # nack(delay > 0)
    free: object  # nack(0)
    extend: object
    counts: object  # messages, in flight, parked
    group_count: object
    dead_count: object
    oldest: object
    oldest_ready: object
    by_priority: object
    by_routing_key: object
    published: object
    by_worker: object
    peek: object
    end_parks: object  # release()
    return_parked_groups: object  # release(): the groups' turn, back to now
    purge_messages: object
    purge_group: object
    dead: object
    requeue: object
    requeue_groups: object
    purge_dead: object


class Options(Generic[E]):
    """What every transport is given, checked once at open (a dialect checks its own)."""

    def __init__(
        self,
        prefix: str,
        clock: Callable[[], float],
        busy_timeout: float,
        event_type: type[E],
    ) -> None:
        self.names = Names(prefix)
        if not callable(clock):
            raise InvalidArgumentTypeError("clock must be a callable returning epoch seconds")
        if not (isinstance(event_type, type) and issubclass(event_type, BaseModel)):
            raise InvalidArgumentTypeError("event_type must be a pydantic BaseModel subclass")
        self.clock = clock
        self.busy_timeout = validate.seconds("busy_timeout", busy_timeout, allow_zero=True)
        self.event_type = event_type


def synchronous(value: object) -> Synchronous:
    """SQLite's ``synchronous`` option, checked."""
    if value == "FULL" or value == "NORMAL":
        return value
    raise InvalidArgumentError(f"synchronous must be 'FULL' or 'NORMAL', not {value!r}")


class Binder(Generic[E]):
    """The transport's operations: each call's arguments checked (the same code for every
    dialect, raising before anything is written), then bound to ``backend``'s operation."""

    def __init__(self, options: Options[E], backend: Backend) -> None:
        self.options = options
        self.backend = backend
        self.claim_spec = ClaimSpecs(options.event_type)

    def publish(
        self,
        group_id: object,
        event: object,
        priority: object,
        routing_key: object,
        delay: object = None,
        not_before: object = None,
        key: object = None,
        on_key: object = "keep",
        max_in_flight: object = 1,
    ) -> Bound[None] | Bound[bool]:
        """A publish bound; its result is ``False`` only when a waiting keyed message took it
        (``None``: a plain publish, which always writes)."""
        row = message_row(
            self.options.event_type, group_id, event, priority, routing_key, max_in_flight
        )
        if delay is None and not_before is None and on_key == "keep":  # the common cases
            if key is None:
                return self.backend.publish([row])
            return self.backend.publish_keyed(row, None, validate.identifier("key", key), False)
        due, keyed, replace = publish_options(delay, not_before, key, on_key)
        if keyed is not None:
            return self.backend.publish_keyed(row, due, keyed, replace)
        return self.backend.publish([row]) if due is None else self.backend.schedule([row], due)

    def publish_many(
        self,
        items: object,
        priority: object,
        routing_key: object,
        delay: object = None,
        not_before: object = None,
        max_in_flight: object = 1,
    ) -> Bound[None]:
        due = publish_due(delay, not_before)
        rows = message_rows(self.options.event_type, items, priority, routing_key, max_in_flight)
        return self.backend.publish(rows) if due is None else self.backend.schedule(rows, due)

    def cancel(self, key: object) -> Bound[bool]:
        return self.backend.cancel(validate.cancel_key(key))

    def publish_tick(self, schedule: object, tick: object, catch_up: object) -> Bound[bool]:
        """A periodic schedule's tick bound (:meth:`harel_sa.SqliteTransport.publish_tick`)."""
        if not isinstance(schedule, Periodic):
            name = type(schedule).__name__
            raise InvalidArgumentTypeError(f"schedule must be a harel_sa.Periodic, not {name}")
        at = validate.seconds("tick", tick, allow_zero=True)
        if not isinstance(catch_up, bool):
            kind = type(catch_up).__name__
            raise InvalidArgumentTypeError(f"catch_up must be a bool, not {kind}")
        event = schedule.event_at(at)
        row = message_row(self.options.event_type, schedule.group_id, event, 0, None)
        return self.backend.publish_tick(schedule.name, at, row, catch_up)

    def claim(
        self,
        worker_id: object,
        visibility: object,
        min_priority: object,
        routing_keys: object,
        max_deliveries: object,
    ) -> Bound[Lease[E] | None]:
        spec = self.claim_spec(worker_id, visibility, min_priority, routing_keys, max_deliveries)
        return self.backend.claim(spec)

    def ack_and_claim(
        self,
        lease: object,
        worker_id: object,
        visibility: object,
        min_priority: object,
        routing_keys: object,
        max_deliveries: object,
    ) -> Bound[tuple[bool, Lease[E] | None]]:
        spec = self.claim_spec(worker_id, visibility, min_priority, routing_keys, max_deliveries)
        return self.backend.ack_and_claim(validate.lease(lease), spec)

    def claim_many(
        self,
        worker_id: object,
        visibility: object,
        limit: object,
        min_priority: object,
        routing_keys: object,
        max_deliveries: object,
    ) -> Bound[list[Lease[E]]]:
        spec = self.claim_spec(worker_id, visibility, min_priority, routing_keys, max_deliveries)
        return self.backend.claim_many(spec, validate.limit(limit))

    def ack_many(self, leases: object) -> Bound[list[bool]]:
        return self.backend.ack_many(validate.leases(leases))

    def ack_many_and_claim_many(
        self,
        leases: object,
        worker_id: object,
        visibility: object,
        limit: object,
        min_priority: object,
        routing_keys: object,
        max_deliveries: object,
    ) -> Bound[tuple[list[bool], list[Lease[E]]]]:
        spec = self.claim_spec(worker_id, visibility, min_priority, routing_keys, max_deliveries)
        return self.backend.ack_many_and_claim_many(
            validate.leases(leases), spec, validate.limit(limit)
        )

    def ack(self, lease: object) -> Bound[bool]:
        return self.backend.ack(validate.lease(lease))

    def give_back(self, lease: Lease[E]) -> Bound[bool]:
        return self.backend.give_back(lease)

    def nack(self, lease: object, delay: object) -> Bound[bool]:
        return self.backend.nack(
            validate.lease(lease), validate.seconds("delay", delay, allow_zero=True)
        )

    def extend(self, lease: object, visibility: object) -> Bound[bool]:
        return self.backend.extend(
            validate.lease(lease), validate.seconds("visibility", visibility, allow_zero=False)
        )

    def dead_letter(self, lease: object, reason: object) -> Bound[bool]:
        return self.backend.dead_letter(
            validate.lease(lease), validate.required_text("reason", reason)
        )

    def stats(self) -> Bound[Stats]:
        return self.backend.stats()

    def peek(
        self, group_id: object, limit: object, scheduled: object = False
    ) -> Bound[list[QueuedMessage]]:
        if not isinstance(scheduled, bool):
            raise InvalidArgumentTypeError(
                f"scheduled must be a bool, not {type(scheduled).__name__}"
            )
        return self.backend.peek(validate.group_filter(group_id), validate.limit(limit), scheduled)

    def release(self, group_id: object) -> Bound[int]:
        return self.backend.release(validate.group_filter(group_id))

    def purge(self, group_id: object) -> Bound[int]:
        return self.backend.purge(validate.group_id(group_id))

    def dead(self, group_id: object, seqs: object, limit: object) -> Bound[list[DeadMessage]]:
        return self.backend.dead(
            validate.group_filter(group_id), validate.seqs(seqs), validate.limit(limit)
        )

    def requeue_dead(self, group_id: object, seqs: object) -> Bound[int]:
        return self.backend.requeue_dead(validate.group_filter(group_id), validate.seqs(seqs))

    def purge_dead(self, group_id: object, seqs: object) -> Bound[int]:
        return self.backend.purge_dead(validate.group_filter(group_id), validate.seqs(seqs))

    def pause(self, routing_key: object, group_id: object) -> Bound[bool]:
        return self.backend.pause(flow.target(routing_key, group_id))

    def resume(self, routing_key: object, group_id: object) -> Bound[bool]:
        return self.backend.resume(flow.target(routing_key, group_id))

    def backoff(self, routing_key: object, seconds: object) -> Bound[float]:
        return self.backend.backoff(flow.key_target(routing_key), flow.backoff_seconds(seconds))

    def paused(self) -> Bound[list[Pause]]:
        return self.backend.paused()

    def limits(self) -> Bound[dict[str | None, Limit]]:
        return self.backend.limits()
