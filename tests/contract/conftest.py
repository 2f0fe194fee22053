"""The contract suite's driver fixture: ``open_queue`` opens a transport of each kind.

The suite is written against synchronous calls; the async twin is driven through a private
event loop, so one module proves both. A new transport adds a parameter here.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harel_sa import SqliteTransport
from tests.conftest import FakeClock


class Blocking:
    """An async transport's coroutine methods, called synchronously on one event loop."""

    def __init__(self, transport: Any, runner: asyncio.Runner) -> None:
        self._transport = transport
        self._runner = runner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._transport, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            # in the caller's context, as a sync call runs (a worker's settlement watcher)
            return self._runner.run(attr(*args, **kwargs), context=contextvars.copy_context())

        return call


OpenQueue = Callable[..., Any]


@pytest.fixture(params=["sync", "async"])
def open_queue(request: pytest.FixtureRequest) -> Iterator[OpenQueue]:
    opened: list[Any] = []
    runner = asyncio.Runner()

    def open_queue(target: object, **kwargs: Any) -> Any:
        if request.param == "sync":
            queue: Any = SqliteTransport(target, **kwargs)
        else:
            from harel_sa import AsyncSqliteTransport

            queue = Blocking(runner.run(AsyncSqliteTransport.create(target, **kwargs)), runner)
        opened.append(queue)
        return queue

    open_queue.kind = request.param  # type: ignore[attr-defined]
    yield open_queue
    for queue in opened:
        queue.close()
    runner.close()


@pytest.fixture
def q(open_queue: OpenQueue, db: str, clock: FakeClock) -> Any:
    """A queue of the kind under test on ``db``, its time moved by ``clock``."""
    return open_queue(db, clock=clock)


@pytest.fixture
def raw(q: Any, db: str) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection on the queue's file (autocommit), to read and poke rows."""
    conn = sqlite3.connect(db, isolation_level=None)
    yield conn
    conn.close()
