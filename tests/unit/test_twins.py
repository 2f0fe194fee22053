"""The public surface of every sync/async twin is the same: each public member of the sync
class exists on its twin, of the same kind (method, class method, property), with the same
parameters (names, kinds, defaults, annotations) and the same return annotation; the twin's
methods are coroutines where the sync ones block (an ``async def``'s declared return, or the
awaited type of an ``Awaitable``/``Coroutine`` return, is compared).

A new pair is one more :class:`Twins` in :data:`TWINS`; a new backend's transports are also
held to the SQLite transports' surface (:data:`BACKENDS`).
"""

from __future__ import annotations

import collections.abc
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from harel_sa import (
    AsyncHandlers,
    AsyncPostgresTransport,
    AsyncSqliteTransport,
    AsyncWorker,
    Handlers,
    PostgresTransport,
    SqliteTransport,
    Worker,
)


@dataclass(frozen=True)
class Twins:
    sync: type
    aio: type
    #: A sync member whose twin has another name (the constructor, the context protocol).
    renamed: dict[str, str] = field(default_factory=dict)
    #: Members only the async twin has (with why in a comment where it is listed).
    only_async: frozenset[str] = frozenset()
    #: Members that block on both (no coroutine on the async side).
    blocking: frozenset[str] = frozenset()
    #: Parameters whose annotations differ by design: (member, parameter) -> why.
    differ: dict[tuple[str, str], str] = field(default_factory=dict)
    #: Members whose return annotation differs by design (constructors).
    returns_differ: frozenset[str] = frozenset()

    @property
    def id(self) -> str:
        return f"{self.sync.__name__}-{self.aio.__name__}"


CONTEXT = {"__enter__": "__aenter__", "__exit__": "__aexit__"}
#: The writes that take the application's connection: a sync one, or an async one.
CONNECTION = {
    (write, "connection"): "the application's connection: a sync one, or an async one"
    for write in ("publish", "publish_many", "cancel", "ack", "ack_many", "nack", "dead_letter")
}

TWINS = [
    Twins(
        SqliteTransport,
        AsyncSqliteTransport,
        renamed={"__init__": "create", **CONTEXT},
        # sync_twin: a thread's way into the async one's database; __init__: internal (create)
        only_async=frozenset({"sync_twin", "__init__"}),
        # each returns its own class; outbox: an Outbox or an AsyncOutbox
        returns_differ=frozenset({"__init__", "__enter__", "outbox"}),
        differ=CONNECTION,
    ),
    Twins(
        PostgresTransport,
        AsyncPostgresTransport,
        renamed={"__init__": "create", **CONTEXT},
        only_async=frozenset({"sync_twin", "__init__"}),
        returns_differ=frozenset({"__init__", "__enter__", "outbox"}),
        differ=CONNECTION,
    ),
    Twins(
        Worker,
        AsyncWorker,
        blocking=frozenset({"__init__", "stop"}),  # stop: safe from any thread, on both
        differ={
            ("__init__", "transport"): "each drives its own transport kind",
            ("__init__", "handler"): "the async worker awaits its handler",
        },
    ),
    # Building the table blocks on nothing on either side; only the call (``__call__``,
    # awaited on the async side) runs a handler.
    Twins(Handlers, AsyncHandlers, blocking=frozenset({"__init__", "add", "on", "handler_for"})),
]


def public(cls: type) -> dict[str, Any]:
    """The class's own public members (and the dunders a user calls), as declared."""
    members: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass in (object, typing.Generic):
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_") or name in {"__init__", *CONTEXT, *CONTEXT.values()}:
                members[name] = value
    return members


def kind(member: Any) -> str:
    if isinstance(member, property):
        return "property"
    if isinstance(member, classmethod):
        return "classmethod"
    if isinstance(member, staticmethod):
        return "staticmethod"
    return "method"


def function(member: Any) -> Callable[..., Any]:
    if isinstance(member, property):
        assert member.fget is not None
        return member.fget
    if isinstance(member, classmethod | staticmethod):
        return member.__func__  # type: ignore[no-any-return]
    return member  # type: ignore[no-any-return]


def awaited(annotation: Any) -> Any:
    """The type an ``Awaitable[X]`` / ``Coroutine[..., X]`` return gives when awaited."""
    origin = typing.get_origin(annotation)
    if origin in (collections.abc.Awaitable, collections.abc.Coroutine):
        return typing.get_args(annotation)[-1]
    return annotation


def signature(fn: Callable[..., Any]) -> inspect.Signature:
    """``fn``'s signature, its annotations evaluated; those naming an application's ORM or
    asyncio objects (imported by the transports for type checkers only) against them."""
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

    names = {
        **inspect.unwrap(fn).__globals__,
        "Session": Session,
        "AsyncConnection": AsyncConnection,
    }
    return inspect.signature(fn, eval_str=True, globals={**names, "AsyncSession": AsyncSession})


def parameters(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    return list(signature(fn).parameters.values())[1:]  # self / cls


def test_every_pair_is_listed_once() -> None:
    assert len({t.id for t in TWINS}) == len(TWINS)


@pytest.mark.parametrize("twins", TWINS, ids=lambda t: t.id)
def test_the_twins_public_surfaces_are_equal(twins: Twins) -> None:
    sync, aio = public(twins.sync), public(twins.aio)
    expected = {twins.renamed.get(name, name) for name in sync} | twins.only_async
    assert set(aio) == expected, f"{twins.aio.__name__} differs from {twins.sync.__name__}"
    for name, member in sync.items():
        twin_name = twins.renamed.get(name, name)
        twin = aio[twin_name]
        where = f"{twins.sync.__name__}.{name} / {twins.aio.__name__}.{twin_name}"
        if name not in twins.renamed:
            assert kind(twin) == kind(member), where
        fn, twin_fn = function(member), function(twin)
        blocks = isinstance(member, property) or name in twins.blocking
        assert inspect.iscoroutinefunction(twin_fn) is not blocks, f"{where}: coroutine?"
        ours, theirs = parameters(fn), parameters(twin_fn)
        assert [(p.name, p.kind, p.default) for p in ours] == [
            (p.name, p.kind, p.default) for p in theirs
        ], where
        for p, q in zip(ours, theirs, strict=True):
            if (name, p.name) not in twins.differ:
                assert p.annotation == q.annotation, f"{where}: {p.name}"
        if name not in twins.returns_differ:
            mine = signature(fn).return_annotation
            yours = awaited(signature(twin_fn).return_annotation)
            assert mine == yours, f"{where}: returns"


def test_a_difference_is_caught() -> None:
    """The check itself: a twin that drops a default or changes a return fails it."""

    class Sync:
        def get(self, key: str, default: int = 0) -> int:
            return default

    class Async:
        async def get(self, key: str, default: int = 1) -> int:
            return default

    class AsyncWrongReturn:
        async def get(self, key: str, default: int = 0) -> str:
            return ""

    with pytest.raises(AssertionError):
        test_the_twins_public_surfaces_are_equal(Twins(Sync, Async))
    with pytest.raises(AssertionError):
        test_the_twins_public_surfaces_are_equal(Twins(Sync, AsyncWrongReturn))

    class AsyncRight:
        async def get(self, key: str, default: int = 0) -> int:
            return default

    test_the_twins_public_surfaces_are_equal(Twins(Sync, AsyncRight))


#: Transports of other backends, held to SqliteTransport's surface (all but the constructor,
#: whose target and backend options differ, and the context entry, which returns its class).
BACKENDS = [PostgresTransport, AsyncPostgresTransport]


@pytest.mark.parametrize("other", BACKENDS, ids=lambda cls: cls.__name__)
def test_every_backend_offers_the_same_calls(other: type) -> None:
    base = AsyncSqliteTransport if other.__name__.startswith("Async") else SqliteTransport
    mine, theirs = public(base), public(other)
    assert set(mine) == set(theirs)
    for name in set(mine) - {"__init__", "create", "__enter__", "__aenter__", "sync_twin"}:
        a, b = function(mine[name]), function(theirs[name])
        assert [(x.name, x.kind, x.default) for x in parameters(a)] == [
            (x.name, x.kind, x.default) for x in parameters(b)
        ], name
