"""What a handler ended with (:func:`outcome_of_call`, :func:`outcome_of_await`), and what a
failure means for its message.

:func:`after_failure` is the one rule for a handler that raised: :class:`~harel_sa.DeadLetter`
buries, :class:`~harel_sa.Retry` nacks with its delay, any other error nacks after the backoff;
at the last delivery (``max_deliveries``) each buries instead, with a reason that says so.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from harel_sa import traces
from harel_sa.events import Lease
from harel_sa.validate import storable
from harel_sa.worker.control import DeadLetter, Retry
from harel_sa.worker.operations import Bury, Nack
from harel_sa.worker.options import WorkerOptions

log = logging.getLogger("harel_sa.worker")


@dataclass(frozen=True, slots=True)
class Returned:
    """The handler returned."""


@dataclass(frozen=True, slots=True)
class Raised:
    """The handler raised ``error`` (an ``Exception``: retry, or what it asks for)."""

    error: Exception


@dataclass(frozen=True, slots=True)
class Interrupted:
    """The handler raised a ``BaseException`` that must end the run (``KeyboardInterrupt``,
    ``SystemExit``): its lease is released, and ``run()`` re-raises it once the run is over."""

    error: BaseException


Outcome = Returned | Raised | Interrupted
RETURNED = Returned()


def outcome_of(error: BaseException) -> Outcome:
    """What a handler's exception means for its message."""
    return Raised(error) if isinstance(error, Exception) else Interrupted(error)


#: Why a sync worker's handler that returned an awaitable fails its message.
NOT_AWAITED = (
    "the handler returned an awaitable, which Worker never awaits (its work did not run): "
    "run a coroutine function with AsyncWorker"
)


def outcome_of_call(
    handler: Callable[[Lease[Any]], object], lease: Lease[Any], prefix: str
) -> Outcome:
    """What ``handler(lease)`` ended with, on a thread (in a ``process`` span if traced)."""
    tracing = traces.active
    if tracing is None:
        return _called(handler, lease)
    with tracing.processing(prefix, lease):
        return _called(handler, lease)


def _called(handler: Callable[[Lease[Any]], object], lease: Lease[Any]) -> Outcome:
    try:
        returned = handler(lease)
        # None first: what most handlers return (spares a quick handler isawaitable's cost)
        if returned is not None and inspect.isawaitable(returned):  # its work never ran
            if inspect.iscoroutine(returned):
                returned.close()
            raise TypeError(NOT_AWAITED)
    except BaseException as error:
        return outcome_of(error)
    return RETURNED


async def outcome_of_await(
    handler: Callable[[Lease[Any]], object], lease: Lease[Any], prefix: str
) -> Outcome:
    """What ``handler(lease)`` ended with, on the loop (in a ``process`` span if traced); the
    worker's own cancel goes through."""
    tracing = traces.active
    if tracing is None:
        return await _awaited(handler, lease)
    with tracing.processing(prefix, lease):
        return await _awaited(handler, lease)


async def _awaited(handler: Callable[[Lease[Any]], object], lease: Lease[Any]) -> Outcome:
    try:
        returned = handler(lease)
        # A plain function ran to its end when it returned (on the loop): acked as such,
        # not failed after its work was done, to be done again at every redelivery.
        if inspect.isawaitable(returned):
            await returned
    except asyncio.CancelledError as error:
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # the worker cancels: let it
            raise
        return outcome_of(error)  # the handler's own business: a failure
    except BaseException as error:
        return outcome_of(error)
    return RETURNED


def log_fields(lease: Lease[Any]) -> dict[str, object]:
    """Structured fields of a log line about ``lease`` (shown by ``--log-format json``)."""
    return {"group_id": lease.group_id, "seq": lease.seq, "deliveries": lease.deliveries}


def after_failure(
    lease: Lease[Any], error: Exception, options: WorkerOptions
) -> tuple[Bury | Nack, str | None]:
    """The handler of ``lease`` raised ``error``: the operation for its message, and the
    count it adds to the run's stats (``"failed"``, ``"retried"``, or ``None``)."""
    limit = options.max_deliveries
    last = limit is not None and lease.deliveries >= limit
    of = f" of {limit}" if limit is not None else ""
    where = f"{lease.group_id} seq {lease.seq} (delivery {lease.deliveries}{of})"
    # A reason quotes a handler's text: stored escaped where a backend could not store it
    # (a refused dead letter would leave its message to come back again and again).
    if isinstance(error, DeadLetter):
        return Bury(lease, storable(error.reason)), None
    if isinstance(error, Retry):
        if last:
            return Bury(lease, storable(f"retried at its last delivery{of}: {error}")), "retried"
        log.info("handler asked to retry %s in %gs", where, error.delay, extra=log_fields(lease))
        return Nack(lease, error.delay), "retried"
    text = _text_of(error)
    if last:
        log.warning(
            "handler failed on %s: %s; no deliveries left: dead-lettering it",
            where,
            text,
            exc_info=error,
            extra=log_fields(lease),
        )
        reason = f"handler failed at delivery {lease.deliveries}{of}: {text}"
        return Bury(lease, storable(reason)), "failed"
    delay = options.backoff.delay(lease.deliveries)
    log.warning(
        "handler failed on %s: %s; retry in %.1fs (at %s)",
        where,
        text,
        delay,
        _utc_in(delay),
        exc_info=error,
        extra={**log_fields(lease), "retry_in": round(delay, 3)},
    )
    return Nack(lease, delay), "failed"


def _text_of(error: BaseException) -> str:
    """``Type: message`` of a handler's exception, even one whose ``str()`` raises (the
    message then says so): a handler's broken exception is its message's failure, never the
    run's."""
    try:
        message = str(error)
    except Exception as failure:
        message = f"<its str() raised {type(failure).__name__}>"
    return f"{type(error).__name__}: {message}"


def _utc_in(seconds: float) -> str:
    moment = datetime.now(UTC) + timedelta(seconds=seconds)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")
