"""A worker's settings: :class:`WorkerOptions`, :class:`Backoff`, and the keyword options.

Checked once, when the worker is built: a bad value raises :class:`~harel_sa.InvalidArgumentError`
then, not at every claim.
"""

from __future__ import annotations

import inspect
import os
import random
import socket
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from harel_sa import validate
from harel_sa.errors import InvalidArgumentError, InvalidArgumentTypeError
from harel_sa.periodic import Periodic, schedules
from harel_sa.rules import DEFAULT_ACK_WAIT as DEFAULT_ACK_WAIT
from harel_sa.rules import DEFAULT_MAX_DELIVERIES as DEFAULT_MAX_DELIVERIES
from harel_sa.worker.observe import Observer


@dataclass(frozen=True, slots=True)
class Backoff:
    """The delay before a failed message is retried, from how often it was delivered.

    ``delay(deliveries) = min(cap, base * factor ** (deliveries - 1))``, then shortened by a
    random fraction of at most ``jitter`` (so retries of many messages spread out and never
    exceed ``cap``). ``jitter=0`` makes it exact.
    """

    base: float = 1.0
    factor: float = 2.0
    cap: float = 300.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if not (self.base >= 0 and self.factor >= 1 and self.cap >= 0 and 0 <= self.jitter <= 1):
            raise InvalidArgumentError(
                "Backoff needs base >= 0, factor >= 1, cap >= 0 and 0 <= jitter <= 1"
            )

    def delay(self, deliveries: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to park a message that failed on its ``deliveries``-th delivery."""
        exponent = max(0, deliveries - 1)
        try:
            raw = self.base * self.factor**exponent
        except OverflowError:
            raw = self.cap
        return min(self.cap, raw) * (1.0 - self.jitter * rand())


def default_worker_id() -> str:
    """``host:pid:random``: unique per worker, readable in ``peek``'s ``locked_by``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """A worker's settings, checked once (``InvalidArgumentError`` on a bad value).

    ``max_deliveries`` defaults to :data:`DEFAULT_MAX_DELIVERIES`: a message that keeps failing
    ends in the dead table, not in an endless backoff. ``None`` retries for ever.

    ``batch`` (default 1: off) lets a worker with ``concurrency`` above 1 fill its free slots
    with one ``claim_many`` of up to ``batch`` leases, and send the acks of handlers that end
    within ``ack_wait`` seconds (default :data:`DEFAULT_ACK_WAIT`) of each other in one
    ``ack_many`` fused with the next ``claim_many``: one commit for many messages. An ack waits
    up to ``ack_wait`` (``0``: until the batcher sees it; after a very quick handler, until its
    slot's next handler returns, or 10 ms), and counts once its batch committed.

    ``periodic``: :class:`~harel_sa.Periodic` schedules this worker publishes while it runs
    (each tick once across every worker carrying the schedule); two with one name raise.
    """

    worker_id: str = field(default_factory=default_worker_id)
    visibility: float = 30.0
    concurrency: int = 1
    min_priority: int = 0
    routing_keys: tuple[str, ...] | None = None
    max_deliveries: int | None = DEFAULT_MAX_DELIVERIES
    backoff: Backoff = field(default_factory=Backoff)
    poll_interval: float = 0.1
    grace: float = 10.0
    observer: Observer = field(default_factory=Observer)
    batch: int = 1
    ack_wait: float = DEFAULT_ACK_WAIT
    periodic: tuple[Periodic, ...] = ()

    def __post_init__(self) -> None:
        validate.worker_id(self.worker_id)
        validate.seconds("visibility", self.visibility, allow_zero=False)
        validate.count("concurrency", self.concurrency)
        validate.priority("min_priority", self.min_priority)
        validate.routing_keys(self.routing_keys)
        if self.max_deliveries is not None:
            validate.count("max_deliveries", self.max_deliveries)
        if not isinstance(self.backoff, Backoff):
            raise InvalidArgumentTypeError("backoff must be a Backoff")
        validate.seconds("poll_interval", self.poll_interval, allow_zero=False)
        validate.seconds("grace", self.grace, allow_zero=True)
        if not isinstance(self.observer, Observer):
            raise InvalidArgumentTypeError("observer must be a harel_sa.worker.Observer")
        validate.count("batch", self.batch)
        validate.seconds("ack_wait", self.ack_wait, allow_zero=True)
        if self.ack_wait >= self.visibility:
            raise InvalidArgumentError(
                f"ack_wait ({self.ack_wait:g}s) must be shorter than visibility "
                f"({self.visibility:g}s): a lease waiting for its ack is not extended"
            )
        object.__setattr__(self, "periodic", schedules(self.periodic))

    @property
    def batching(self) -> bool:
        """Whether runs batch: ``batch`` and ``concurrency`` both above 1 (one slot has nothing
        to gather: its fused ``ack_and_claim`` is one commit a message already)."""
        return min(self.batch, self.concurrency) > 1

    @property
    def heartbeat_period(self) -> float:
        """Held leases are extended this often: three chances before one lapses."""
        return self.visibility / 3

    def claim_args(self) -> dict[str, Any]:
        """The keyword arguments of every claim this worker sends."""
        return {
            "worker_id": self.worker_id,
            "visibility": self.visibility,
            "min_priority": self.min_priority,
            "routing_keys": self.routing_keys,
            "max_deliveries": self.max_deliveries,
        }

    def describe(self) -> str:
        """The options as one line for the start-up log."""
        keys = ",".join(self.routing_keys) if self.routing_keys else "any"
        return (
            f"concurrency={self.concurrency} visibility={self.visibility:g}s "
            f"min_priority={self.min_priority} routing_keys={keys} "
            f"max_deliveries={self.max_deliveries} grace={self.grace:g}s"
            + (f" batch={self.batch} ack_wait={self.ack_wait:g}s" if self.batching else "")
            + (f" periodic={','.join(p.name for p in self.periodic)}" if self.periodic else "")
        )


class WorkerKwargs(TypedDict, total=False):
    """The keyword options of :class:`~harel_sa.Worker` and :class:`~harel_sa.AsyncWorker`
    (see :class:`WorkerOptions`), plus ``handle_signals`` (default ``True``)."""

    worker_id: str
    visibility: float
    concurrency: int
    min_priority: int
    routing_keys: Iterable[str] | None
    max_deliveries: int | None
    backoff: Backoff
    poll_interval: float
    grace: float
    observer: Observer
    batch: int
    ack_wait: float
    periodic: Iterable[Periodic]
    handle_signals: bool


def options_from(kwargs: WorkerKwargs) -> tuple[WorkerOptions, bool]:
    """The checked options and ``handle_signals`` of a worker's keyword arguments."""
    given: dict[str, Any] = dict(kwargs)
    handle_signals = bool(given.pop("handle_signals", True))
    if given.get("routing_keys") is not None:
        given["routing_keys"] = tuple(given["routing_keys"])
    return WorkerOptions(**given), handle_signals


def check_arguments(transport: object, kind: type, names: str, handler: object, sync: bool) -> None:
    """``InvalidArgumentTypeError`` unless ``transport`` is a ``kind`` (one of ``names``, by
    class: an async transport has a sync one's method names) and ``handler`` callable; a
    ``sync`` driver refuses a coroutine function (it would ack work never done)."""
    if not isinstance(transport, kind):
        raise InvalidArgumentTypeError(
            f"transport must be a {names}, not {type(transport).__name__}"
        )
    if not callable(handler):
        raise InvalidArgumentTypeError(f"handler must be callable, not {type(handler).__name__}")
    check_handler(handler)
    if sync and is_async(handler):
        raise InvalidArgumentTypeError(
            "Worker runs sync handlers and would never await this coroutine function's "
            "coroutines: run it with AsyncWorker (on an async transport)"
        )


def check_handler(handler: Any) -> None:
    """``InvalidArgumentTypeError`` unless ``handler`` can be called with one positional
    argument (the lease), found before anything is claimed, not at each message's dead letter.
    A callable whose signature Python cannot read (some built-ins) is taken as it is."""
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None)
    except TypeError as exc:
        name = getattr(handler, "__qualname__", type(handler).__name__)
        raise InvalidArgumentTypeError(
            f"handler {name}{signature} cannot take the lease as its one positional argument: {exc}"
        ) from None


def is_async(handler: object) -> bool:
    """``async def`` functions, and objects whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - the method, not callable()
    )
