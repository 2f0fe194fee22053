"""Handlers chosen by each message's kind: :class:`Handlers` for a :class:`~harel_sa.Worker`,
:class:`AsyncHandlers` for an :class:`~harel_sa.AsyncWorker` (and ``harel-sa worker
MODULE:NAME`` takes either as the handler)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, TypeVar

from harel_sa.errors import InvalidArgumentError, InvalidArgumentTypeError
from harel_sa.events import Lease
from harel_sa.worker.control import DeadLetter
from harel_sa.worker.options import check_handler, is_async

H = TypeVar("H", bound=Callable[..., Any])
#: What a kind is read from: the event (``event.kind`` by default).
KindOf = Callable[[Any], object]


def _event_kind(event: Any) -> object:
    return getattr(event, "kind", None)


class _Table(Generic[H]):
    """The kinds' handlers, checked as they are added (the sync or async kind of each)."""

    _asynchronous = False

    def __init__(
        self,
        handlers: Mapping[str, H] | None = None,
        *,
        default: H | None = None,
        kind: KindOf | None = None,
    ) -> None:
        self._handlers: dict[str, H] = {}
        self._kind = _event_kind if kind is None else kind
        if kind is not None and not callable(kind):
            raise InvalidArgumentTypeError("kind must be a callable taking the event")
        if default is not None:
            self._check(default, "default")
        self.default = default
        for name, handler in (handlers or {}).items():
            self.add(name, handler)

    def add(self, kind: str, handler: H) -> None:
        """Handle messages of ``kind`` with ``handler``; a kind has one handler."""
        if not isinstance(kind, str) or not kind:
            raise InvalidArgumentTypeError(f"a kind must be a non-empty str, not {kind!r:.60}")
        if kind in self._handlers:
            raise InvalidArgumentError(f"kind {kind!r} has a handler already")
        self._check(handler, f"the handler of {kind!r}")
        self._handlers[kind] = handler

    def on(self, kind: str) -> Callable[[H], H]:
        """A decorator: ``@handlers.on("order.paid")`` adds the function it decorates."""

        def register(handler: H) -> H:
            self.add(kind, handler)
            return handler

        return register

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds with a handler, in the order they were added."""
        return tuple(self._handlers)

    def handler_for(self, lease: Lease[Any]) -> H:
        """The handler of ``lease``'s kind, else the default; :class:`~harel_sa.worker.
        DeadLetter` (the message is set aside, nothing lost) when there is neither."""
        kind = self._kind(lease.event)
        chosen = self._handlers.get(kind) if isinstance(kind, str) else None
        if chosen is not None:
            return chosen
        if self.default is not None:
            return self.default
        known = ", ".join(repr(k) for k in self._handlers) or "none"
        raise DeadLetter(f"no handler for kind {kind!r:.80} (handled: {known})")

    def _check(self, handler: object, what: str) -> None:
        if not callable(handler):
            raise InvalidArgumentTypeError(f"{what} must be callable, not {type(handler).__name__}")
        check_handler(handler)
        if is_async(handler) != self._asynchronous:
            want = "an async def function" if self._asynchronous else "a plain (not async) function"
            raise InvalidArgumentTypeError(f"{what} must be {want} in {type(self).__name__}")


class Handlers(_Table[Callable[[Lease[Any]], object]]):
    """A :class:`~harel_sa.Worker`'s handler that runs the handler of each message's kind
    (``event.kind``, or what ``kind(event)`` returns): given as a mapping, or added with
    :meth:`on`; an unknown kind runs ``default``, or without one is dead-lettered with a reason
    naming it. Bad handlers (not callable, async, not taking the lease) raise at once."""

    def __call__(self, lease: Lease[Any]) -> None:
        self.handler_for(lease)(lease)


class AsyncHandlers(_Table[Callable[[Lease[Any]], Awaitable[object]]]):
    """:class:`Handlers` of ``async def`` functions, for an :class:`~harel_sa.AsyncWorker`."""

    _asynchronous = True

    async def __call__(self, lease: Lease[Any]) -> None:
        await self.handler_for(lease)(lease)
