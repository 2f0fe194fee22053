"""Where tracing plugs in: :data:`active`, set by :func:`harel_sa.otel.instrument`.

The transports, the outbox and the workers open their spans through the functions here; while
nothing is instrumented (``active`` is ``None``) each costs a global lookup and an empty
``with``, and no tracing package is imported.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from pydantic import BaseModel

from harel_sa.events import Lease


class Tracing(Protocol):
    """What an instrumentation gives: a span per operation, and the trace context stamped on a
    published event's JSON (for ``event_type``, or left as it is)."""

    def span(
        self,
        operation: str,
        prefix: str,
        *,
        group_id: str | None = None,
        leases: tuple[Lease[Any], ...] = (),
    ) -> AbstractContextManager[object]: ...

    def processing(self, prefix: str, lease: Lease[Any]) -> AbstractContextManager[object]: ...

    def stamp(self, event_json: str, event_type: type[BaseModel]) -> str: ...


P = ParamSpec("P")
R = TypeVar("R")
Q = TypeVar("Q", bound="HasPrefix")


class HasPrefix(Protocol):
    @property
    def prefix(self) -> str: ...


active: Tracing | None = None
_NOTHING: AbstractContextManager[object] = nullcontext()


def span(
    operation: str,
    prefix: str,
    *,
    group_id: str | None = None,
    leases: tuple[Lease[Any], ...] = (),
) -> AbstractContextManager[object]:
    """A span for a transport's ``operation`` (``publish``, ``claim``, ``ack``...)."""
    tracing = active
    if tracing is None:
        return _NOTHING
    return tracing.span(operation, prefix, group_id=group_id, leases=leases)


def processing(prefix: str, lease: Lease[Any]) -> AbstractContextManager[object]:
    """The span a worker's handler runs in, linked to the context its publisher stamped."""
    tracing = active
    if tracing is None:
        return _NOTHING
    return tracing.processing(prefix, lease)


def stamp(event_json: str, event_type: type[BaseModel]) -> str:
    """``event_json`` carrying the current trace context, if instrumented."""
    tracing = active
    return event_json if tracing is None else tracing.stamp(event_json, event_type)


def _subject(operation: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """What a call names: ``publish``'s group, a settle's lease or leases (after the
    connection, an outbox's first argument)."""
    if args and not isinstance(args[0], str | Lease | list | tuple):
        args = args[1:]
    first = args[0] if args else None
    if operation == "publish":
        return {"group_id": kwargs.get("group_id", first)}
    if operation in ("ack", "nack", "dead_letter", "ack_and_claim"):
        lease = kwargs.get("lease", first)
        return {"leases": (lease,) if isinstance(lease, Lease) else ()}
    if operation in ("ack_many", "ack_many_and_claim_many"):
        leases = kwargs.get("leases", first)
        return {"leases": tuple(leases) if isinstance(leases, list | tuple) else ()}
    return {}


def traced(
    operation: str,
) -> Callable[[Callable[Concatenate[Q, P], R]], Callable[Concatenate[Q, P], R]]:
    """A transport method run in a span of ``operation`` while instrumented."""

    def wrap(method: Callable[Concatenate[Q, P], R]) -> Callable[Concatenate[Q, P], R]:
        @functools.wraps(method)
        def call(self: Q, /, *args: P.args, **kwargs: P.kwargs) -> R:
            tracing = active
            if tracing is None or kwargs.get("connection") is not None:  # the outbox's span
                return method(self, *args, **kwargs)
            with tracing.span(operation, self.prefix, **_subject(operation, args, kwargs)):
                return method(self, *args, **kwargs)

        return call

    return wrap


def traced_async(
    operation: str,
) -> Callable[
    [Callable[Concatenate[Q, P], Awaitable[R]]], Callable[Concatenate[Q, P], Awaitable[R]]
]:
    """:func:`traced` for an async transport's method."""

    def wrap(
        method: Callable[Concatenate[Q, P], Awaitable[R]],
    ) -> Callable[Concatenate[Q, P], Awaitable[R]]:
        @functools.wraps(method)
        async def call(self: Q, /, *args: P.args, **kwargs: P.kwargs) -> R:
            tracing = active
            if tracing is None or kwargs.get("connection") is not None:  # the outbox's span
                return await method(self, *args, **kwargs)
            with tracing.span(operation, self.prefix, **_subject(operation, args, kwargs)):
                return await method(self, *args, **kwargs)

        return call

    return wrap
