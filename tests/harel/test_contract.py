"""harel's own public transport contract on harel_sa's twins, built as harel's tests build its
transports: ``make(clock)`` with the clock positional (or by keyword, as harel's suite does),
a ``Path``, a ``str`` or nothing at all (``":memory:"``), and no ``event_type``."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harel.testing.transport import assert_async_transport_contract, assert_transport_contract

from harel_sa import AsyncSqliteTransport, SqliteTransport

_n = itertools.count()

Make = Callable[[Path, Callable[[], float]], Any]

SYNC: dict[str, Make] = {
    "positional path": lambda d, clock: SqliteTransport(d / f"q{next(_n)}.db", clock),
    "str and keyword clock": lambda d, clock: SqliteTransport(
        str(d / f"q{next(_n)}.db"), clock=clock
    ),
    "memory by default": lambda d, clock: SqliteTransport(clock=clock),
    "memory, positional": lambda d, clock: SqliteTransport(":memory:", clock),
}


@pytest.mark.parametrize("make", SYNC.values(), ids=SYNC.keys())
def test_harels_contract_holds_on_the_sync_transport(tmp_path: Path, make: Make) -> None:
    assert_transport_contract(lambda clock: make(tmp_path, clock))


ASYNC: dict[str, Make] = {
    "positional path": lambda d, clock: AsyncSqliteTransport.create(
        str(d / f"q{next(_n)}.db"), clock
    ),
    "keyword clock": lambda d, clock: AsyncSqliteTransport.create(
        d / f"q{next(_n)}.db", clock=clock
    ),
    "memory by default": lambda d, clock: AsyncSqliteTransport.create(clock=clock),
}


@pytest.mark.parametrize("make", ASYNC.values(), ids=ASYNC.keys())
def test_harels_contract_holds_on_the_async_transport(tmp_path: Path, make: Make) -> None:
    asyncio.run(assert_async_transport_contract(lambda clock: make(tmp_path, clock)))


def test_memory_transports_are_private_queues() -> None:
    from harel.spec.states import Event

    with SqliteTransport() as one, SqliteTransport() as other:
        one.publish("g", Event(kind="only-in-one"))
        assert other.claim("w", 30) is None
        lease = one.claim("w", 30)
        assert lease is not None and lease.event.kind == "only-in-one"
